"""fa4-lower-pipelines: the staged mbarrier protocol -> nvvm.mbarrier.*.

* `fa4.pipeline_init`: thread 0 initialises full[s] with `producer_arrivals` and empty[s] with
  `consumer_arrivals`, fences the initialisation, then the CTA synchronises.
* `producer_acquire(stage, phase)`: try_wait.parity(empty[stage], phase ^ 1).
* `consumer_wait(stage, phase)`: try_wait.parity(full[stage], phase), parity = phase & 1.
* `producer_commit(stage)`: arrive.expect_tx(full[stage], tx_bytes) (plain arrive when 0); with
  `cta_group = 2` only in the pair's leader (%cluster_ctarank even): its loads and the peer's, all
  `cta_group = 2`, complete on the leader's full[stage] (lower_tma.py note "pair loads").
* `consumer_release(stage)`: arrive(empty[stage]).
* `peer_arrive(stage, rank){pipe, side}`: mapa.shared::cluster of full/empty[stage] to CTA `rank`, then
  mbarrier.arrive.release.cluster.shared::cluster.b64 on it (PTX ISA 9.7.9.26 mapa, 9.7.13.15.13).
* `peer_store_async(value, remote, stage, rank){pipe}`: mapa.shared::cluster of full[stage] to CTA `rank`,
  then st.async.shared::cluster.mbarrier::complete_tx::bytes of `value` at `remote` on it (_ptx.st_async,
  PTX ISA 9.7.9.12): its bytes count as transactions there (that CTA's producer_commit expects them).
With `debug=True` (FA4MLIR_DEBUG=1) every wait is a bounded polling loop that, on time-out, prints
the kernel, role, pipeline, stage and phase and traps (see _watchdog.py).
Runs after every pass that needs the pipeline offsets (tma, mma); erases the `fa4.pipeline` ops.
"""
from __future__ import annotations

import re

from .._mlir import arith, ir, llvm, nvvm, scf
from . import _ptx
from ._util import (PassError, attr, barrier_addr, byte_offset, check_none_left, cta_group, i32, kernel_func,
                    ops_and_pipelines, smem_base, tid_x)

NAME = "fa4-lower-pipelines"
OPS = ("fa4.pipeline_init", "fa4.producer_acquire", "fa4.producer_commit", "fa4.consumer_wait",
       "fa4.consumer_release", "fa4.peer_arrive", "fa4.peer_store_async", "fa4.pipeline")
WAIT_TICKS = 0x989680  # suspend-time hint of try_wait, in ns (PTX ISA 9.7.13.15.16)


def _init_all(pipes: dict) -> None:
    is_t0 = arith.cmpi(arith.CmpIPredicate.eq, tid_x(), i32(0))
    ifop = scf.IfOp(is_t0, [], has_else=False)
    with ir.InsertionPoint(ifop.then_block):
        for pipe in pipes.values():
            base, stages = attr(pipe, "offset"), attr(pipe, "num_stages")
            for s in range(stages):
                nvvm.mbarrier_init(byte_offset(smem_base(), base + 8 * s), i32(attr(pipe, "producer_arrivals")))
                nvvm.mbarrier_init(byte_offset(smem_base(), base + 8 * (stages + s)),
                                   i32(attr(pipe, "consumer_arrivals")))
        nvvm.fence_mbarrier_init()
        scf.YieldOp([])
    nvvm.barrier0()


def run(module: ir.Operation, debug: bool = False) -> None:
    func = kernel_func(module)
    found, pipes = ops_and_pipelines(func, *OPS[:-1])
    kernel = ir.StringAttr(func.attributes["sym_name"]).value
    for op in found:
        with ir.InsertionPoint(op), op.location:
            name = op.name
            if name == "fa4.pipeline_init":
                _init_all(pipes)
            elif name in ("fa4.producer_acquire", "fa4.consumer_wait"):
                stage, phase = op.operands
                side = "empty" if name == "fa4.producer_acquire" else "full"
                parity = arith.andi(arith.xori(phase, i32(1)) if side == "empty" else phase, i32(1))
                addr = barrier_addr(pipes, op, side, stage)
                if debug:
                    from . import _watchdog
                    _watchdog.bounded_wait(addr, parity, kernel=kernel, role=_role_of(op),
                                           pipe=attr(op, "pipe"), side=side, stage=stage, phase=phase)
                else:
                    nvvm.mbarrier_try_wait_parity(addr, parity, i32(WAIT_TICKS))
            elif name == "fa4.producer_commit":
                _producer_commit(pipes, op)
            elif name == "fa4.peer_arrive":
                _peer_arrive(pipes, op)
            elif name == "fa4.peer_store_async":
                _peer_store_async(pipes, op)
            elif name == "fa4.consumer_release":
                nvvm.mbarrier_arrive(ir.IntegerType.get_signless(64), barrier_addr(pipes, op, "empty", op.operands[0]))
            op.erase()
    for pipe in pipes.values():
        pipe.erase()
    check_none_left(func, OPS, NAME)


def _producer_commit(pipes: dict, op: ir.Operation) -> None:
    if cta_group(op) == 2:                      # the pair's commit: the leader arrives for both CTAs
        rank = nvvm.read_ptx_sreg_cluster_ctarank(ir.IntegerType.get_signless(32))
        is_leader = arith.cmpi(arith.CmpIPredicate.eq, arith.andi(rank, i32(1)), i32(0))
        ifop = scf.IfOp(is_leader, [], has_else=False)
        with ir.InsertionPoint(ifop.then_block):
            _arrive_expect(barrier_addr(pipes, op, "full", op.operands[0]), attr(op, "tx_bytes"))
            scf.YieldOp([])
        return
    _arrive_expect(barrier_addr(pipes, op, "full", op.operands[0]), attr(op, "tx_bytes"))


def _arrive_expect(addr: ir.Value, tx: int) -> None:
    if tx:
        nvvm.mbarrier_arrive_expect_tx(None, addr, i32(tx))
    else:
        nvvm.mbarrier_arrive(ir.IntegerType.get_signless(64), addr)


def _peer_arrive(pipes: dict, op: ir.Operation) -> None:
    side = attr(op, "side")
    if side not in ("full", "empty"):
        raise PassError(f"{NAME}: peer_arrive side must be 'full' or 'empty', got {side!r}", op.location)
    scope = attr(op, "scope") if "scope" in op.attributes else "cluster"
    if scope not in ("cluster", "cta") or (scope == "cta" and side != "empty"):
        raise PassError(f"{NAME}: peer_arrive scope must be 'cluster', or 'cta' on side 'empty' (a release that "
                        f"hands over no data), got scope {scope!r} on side {side!r}", op.location)
    stage, rank = op.operands
    cluster_ptr = ir.Type.parse("!llvm.ptr<7>")
    remote = nvvm.mapa(cluster_ptr, barrier_addr(pipes, op, side, stage), rank)
    nvvm.mbarrier_arrive(None, remote, scope=nvvm.MemScopeKind.CTA if scope == "cta" else nvvm.MemScopeKind.CLUSTER)


def _peer_store_async(pipes: dict, op: ir.Operation) -> None:
    value, remote, stage, rank = op.operands
    t = value.type
    n = ir.VectorType(t).shape[0] if isinstance(t, ir.VectorType) else 1
    elem = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    bits = 64 if elem in (ir.IntegerType.get_signless(64), ir.F64Type.get()) else 32
    if elem not in (ir.IntegerType.get_signless(32), ir.F32Type.get(), ir.IntegerType.get_signless(64),
                    ir.F64Type.get()) or n not in (1, 2, 4) or (bits == 64 and n == 4):
        raise PassError(f"{NAME}: peer_store_async stores i32/f32 (1, 2 or 4 of them) or i64/f64 (1 or 2), got "
                        f"{t}", op.location)
    word = ir.IntegerType.get_signless(bits)
    elems = [llvm.extractelement(value, i32(i)) for i in range(n)] if n > 1 or isinstance(t, ir.VectorType) \
        else [value]
    words = [e if e.type == word else arith.bitcast(word, e) for e in elems]
    mbar = nvvm.mapa(ir.Type.parse("!llvm.ptr<7>"), barrier_addr(pipes, op, "full", stage), rank)
    base, offset = _byte_gep(remote)
    _ptx.st_async(base, offset, words, bits, mbar)
    _require_ptx(op, ST_ASYNC_PTX)


def _byte_gep(addr: ir.Value):
    """(base, i32 offset) when `addr` is an i8 getelementptr of one dynamic i32 index (kb.gep(base, offset,
    "i8")), else (addr, None): the offset goes into the st.async asm (_ptx.st_async)."""
    owner = addr.owner
    if isinstance(owner, ir.Block) or owner.name != "llvm.getelementptr" or len(owner.operands) != 2:
        return addr, None
    gep = owner.opview
    if str(gep.elem_type) != "i8" or owner.operands[1].type != ir.IntegerType.get_signless(32):
        return addr, None
    return owner.operands[0], owner.operands[1]


ST_ASYNC_PTX = 81       # st.async: "Introduced in PTX ISA version 8.1" (PTX ISA 9.7.9.12)


def _require_ptx(op: ir.Operation, version: int) -> None:
    """Raise the gpu.module's nvvm.target PTX feature (+ptxNN) to at least `version`: only a kernel that uses
    the instruction gets the newer .version (every other kernel's PTX stays as it was)."""
    parent = op.parent
    while parent is not None and parent.name != "gpu.module":
        parent = parent.parent
    if parent is None or "targets" not in parent.attributes:
        raise PassError(f"{NAME}: an op needing PTX ISA {version / 10} outside a gpu.module with a target", op.location)
    text = str(parent.attributes["targets"])
    have = re.search(r"\+ptx(\d+)", text)
    if have is not None and int(have.group(1)) < version:
        parent.attributes["targets"] = ir.Attribute.parse(text.replace(have.group(0), f"+ptx{version}"))


def _role_of(op: ir.Operation) -> str:
    parent = op.parent
    while parent is not None:
        if parent.name == "fa4.role":
            return attr(parent, "name")
        if parent.name == "scf.if" and "fa4.role" in parent.attributes:
            return ir.StringAttr(parent.attributes["fa4.role"]).value
        parent = parent.parent
    return "?"
