"""fa4-lower-tma: async copies into SMEM. TMA loads, stores and prefetches ->
nvvm.cp.async.bulk.tensor.* (PTX ISA 9.7.9.25); per-thread 16-byte copies -> nvvm.cp.async
(9.7.9.3, .cg with src-size 0 for the zero-filled `valid = false`) and their completion ->
cp.async.mbarrier.arrive without .noinc (9.7.13.15.14: a net-zero arrival on `full[stage]`).

A `fa4.tma_load` completes on `full[stage]` of its pipeline (mbarrier::complete_tx::bytes).
"""
from __future__ import annotations

from .._mlir import arith, ir, llvm, nvvm
from ._util import PassError, attr, barrier_addr, check_none_left, i32, kernel_func, ops_named, pipelines

NAME = "fa4-lower-tma"
OPS = ("fa4.tma_load", "fa4.tma_store", "fa4.tma_store_wait", "fa4.tma_prefetch", "fa4.cp_async",
       "fa4.cp_async_arrive")


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    pipes = pipelines(func)
    for op in ops_named(func, *OPS):
        with ir.InsertionPoint(op), op.location:
            if op.name == "fa4.tma_load":
                desc, dst, stage, *coords = op.operands
                box = attr(op, "box")
                if len(coords) != len(box) or not 1 <= len(box) <= 5:
                    raise PassError(f"{NAME}: tma_load has {len(coords)} coordinates for a rank-{len(box)} box "
                                    "(rank 1..5, one coordinate per box dimension)", op.location)
                mbar = barrier_addr(pipes, op, "full", stage)
                dst_cluster = llvm.addrspacecast(ir.Type.parse("!llvm.ptr<7>"), dst)
                nvvm.cp_async_bulk_tensor_shared_cluster_global(dst_cluster, desc, list(coords), mbar, [])
            elif op.name == "fa4.tma_store":
                desc, src, *coords = op.operands
                nvvm.cp_async_bulk_tensor_global_shared_cta(desc, src, list(coords))
            elif op.name == "fa4.tma_store_wait":
                nvvm.cp_async_bulk_commit_group()
                nvvm.cp_async_bulk_wait_group(attr(op, "pending"), read=True)
            elif op.name == "fa4.cp_async":
                src, dst, valid = op.operands
                size = arith.select(valid, i32(16), i32(0))
                nvvm.cp_async_shared_global(dst, src, 16, nvvm.LoadCacheModifierKind.CG, cp_size=size)
            elif op.name == "fa4.cp_async_arrive":
                nvvm.cp_async_mbarrier_arrive(barrier_addr(pipes, op, "full", op.operands[0]))
            elif op.name == "fa4.tma_prefetch":
                nvvm.prefetch(op.operands[0], tensormap=True)
            op.erase()
    check_none_left(func, OPS, NAME)

