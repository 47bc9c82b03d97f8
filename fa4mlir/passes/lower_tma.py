"""fa4-lower-tma: async copies into SMEM. TMA loads, stores and prefetches ->
nvvm.cp.async.bulk.tensor.* (PTX ISA 9.7.9.25); per-thread 16-byte copies -> nvvm.cp.async
(9.7.9.3, .cg with src-size 0 for the zero-filled `valid = false`) and their completion ->
cp.async.mbarrier.arrive without .noinc (9.7.13.15.14: a net-zero arrival on `full[stage]`), or
cp.async.commit_group [+ cp.async.wait_group N] (9.7.9.3: `fa4.cp_async_commit`, `fa4.cp_async_wait`). Beside the
copies, the one per-thread load with cache hints: `fa4.ld_global_nc` -> ld.global.nc with its .L1 eviction
priority and .L2 prefetch size (9.7.9.9; inline PTX, passes/_ptx.ld_global_nc: nvvm's loads take no hints), a
constant byte offset peeled off its address folded in as [addr+offset] (what LLVM does for a plain load).

A `fa4.tma_load` completes on `full[stage]` of its pipeline (mbarrier::complete_tx::bytes). A
`fa4.tma_gather4` (sm_100a) is the same load in .tile::gather4 mode: `cp.async.bulk.tensor.2d.
shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes [dst], [desc, {col, row0, row1,
row2, row3}], [full]` (PTX ISA 9.7.9.25, .tile::gather4 needs PTX ISA 8.6 and sm_100 or later, and only
the .2d form exists; 5.5.3.4: the descriptor's box is one row high, the copy writes four box rows).

Note "pair loads": a load with `cta_group = 2` lowers to the .cta_group::2 form, whose mbarrier "can be
in shared memory of either the same CTA as the shared memory destination dstMem or in its peer-CTA"
(PTX ISA 9.7.9.25.5.1, cp.async.bulk.tensor; cta_group::1 requires the destination's CTA). The
barrier is the pair leader's `full[stage]`: mapa.shared::cluster of the local barrier to CTA rank
%cluster_ctarank & ~1 (9.7.9.26 mapa; the leader's own address in the leader), whose shared::cluster
address the instruction takes as [mbar] (the .shared::cluster destination form addresses the remote
barrier: "When the mbarrier object mbar resides in the shared memory of a different CTA ... .dst must
be specified as .shared::cluster"). NVVM types the operand !llvm.ptr<3>, so the ptr<7> from mapa is
passed through ptrtoint / inttoptr (both 64-bit here: the address bits are unchanged). CUTLASS and
FlashMLA clear bit 24 of the shared::cta address instead (Sm100MmaPeerBitMask), an encoding the ISA
does not state.
"""
from __future__ import annotations

import re

from .._mlir import arith, ir, llvm, nvvm
from . import _ptx
from ._util import (CTA_GROUPS, PassError, attr, barrier_addr, check_none_left, const_byte_offset, cta_group, i32, i64,
                    kernel_func, ops_and_pipelines)

NAME = "fa4-lower-tma"
GATHER4_MIN_SM = 100      # .tile::gather4: PTX ISA 8.6, sm_100 and later (9.7.9.25, "Target ISA notes")
PAIR_MIN_SM = 100         # .cta_group: PTX ISA 8.6, sm_100a
OPS = ("fa4.tma_load", "fa4.tma_gather4", "fa4.tma_store", "fa4.tma_store_wait", "fa4.tma_prefetch", "fa4.tma_prefetch_box", "fa4.cp_async",
       "fa4.cp_async_arrive", "fa4.ld_global_nc", "fa4.cp_async_wait", "fa4.cp_async_commit")


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    found, pipes = ops_and_pipelines(func, *OPS)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            if op.name == "fa4.tma_load":
                desc, dst, stage, *coords = op.operands
                box = attr(op, "box")
                if len(coords) != len(box) or not 1 <= len(box) <= 5:
                    raise PassError(f"{NAME}: tma_load has {len(coords)} coordinates for a rank-{len(box)} box "
                                    "(rank 1..5, one coordinate per box dimension)", op.location)
                mbar = _load_barrier(pipes, op, stage, func)
                dst_cluster = llvm.addrspacecast(ir.Type.parse("!llvm.ptr<7>"), dst)
                nvvm.cp_async_bulk_tensor_shared_cluster_global(dst_cluster, desc, list(coords), mbar, [], **_group_kw(op),
                                                                **_hint_kw(op))
            elif op.name == "fa4.tma_gather4":
                _lower_gather4(op, pipes, func)
            elif op.name == "fa4.tma_store":
                desc, src, *coords = op.operands
                nvvm.cp_async_bulk_tensor_global_shared_cta(desc, src, list(coords))
            elif op.name == "fa4.tma_store_wait":
                nvvm.cp_async_bulk_commit_group()
                nvvm.cp_async_bulk_wait_group(attr(op, "pending"), read=True)
            elif op.name == "fa4.cp_async":
                src, dst, valid = op.operands
                size = arith.select(valid, i32(16), i32(0))
                if "l2_prefetch" in op.attributes or "evict_last" in op.attributes:
                    _cp_async_hinted(op, src, dst, size)
                else:
                    nvvm.cp_async_shared_global(dst, src, 16, nvvm.LoadCacheModifierKind.CG, cp_size=size)
            elif op.name == "fa4.cp_async_arrive":
                nvvm.cp_async_mbarrier_arrive(barrier_addr(pipes, op, "full", op.operands[0]))
            elif op.name == "fa4.ld_global_nc":
                op.results[0].replace_all_uses_with(_ld_global_nc(op))
            elif op.name in ("fa4.cp_async_wait", "fa4.cp_async_commit"):     # PTX ISA 9.7.9.3 (the thread's groups)
                nvvm.cp_async_commit_group()
                if op.name == "fa4.cp_async_wait":
                    nvvm.cp_async_wait_group(attr(op, "pending"))
            elif op.name == "fa4.tma_prefetch":
                nvvm.prefetch(op.operands[0], tensormap=True)
            elif op.name == "fa4.tma_prefetch_box":      # PTX ISA 9.7.9.26: into L2, tile mode
                desc, *coords = op.operands
                nvvm.cp_async_bulk_tensor_prefetch(desc, list(coords), [])
            op.erase()
    check_none_left(func, OPS, NAME)


L2_PREFETCH_SIZES = (64, 128, 256)     # .L2::64B, .L2::128B, .L2::256B (PTX ISA 9.7.9.3)
EVICT_LAST_POLICY = "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;"


def _cp_async_hinted(op, src, dst, size) -> None:
    """fa4.cp_async with its hints as inline PTX (nvvm.cp.async.shared.global takes neither):
    `cp.async.cg.shared.global[.L2::cache_hint][.L2::<n>B] [dst], [src], 16, size[, policy];`, the
    policy from a side-effect-free createpolicy asm (LLVM merges the identical ones of a block and
    hoists them out of loops)."""
    prefetch = attr(op, "l2_prefetch") if "l2_prefetch" in op.attributes else 0
    evict_last = bool(attr(op, "evict_last")) if "evict_last" in op.attributes else False
    if prefetch and prefetch not in L2_PREFETCH_SIZES:
        raise PassError(f"{NAME}: cp_async l2_prefetch must be one of {L2_PREFETCH_SIZES}, got {prefetch}", op.location)
    i64t = ir.IntegerType.get_signless(64)
    dst32 = llvm.ptrtoint(ir.IntegerType.get_signless(32), dst)
    src64 = llvm.ptrtoint(i64t, src)
    operands, constraints = [dst32, src64, size], "r,l,r"
    suffix = f".L2::{prefetch}B" if prefetch else ""
    if evict_last:
        policy = llvm.inline_asm(i64t, [], EVICT_LAST_POLICY, "=l", has_side_effects=False)
        operands.append(policy)
        constraints += ",l"
        text = f"cp.async.cg.shared.global.L2::cache_hint{suffix} [$0], [$1], 16, $2, $3;"
    else:
        text = f"cp.async.cg.shared.global{suffix} [$0], [$1], 16, $2;"
    llvm.inline_asm(None, operands, text, constraints + ",~{memory}", has_side_effects=True)


def _ld_global_nc(op) -> ir.Value:
    """fa4.ld_global_nc: ld.global.nc with its hints (_ptx.ld_global_nc), one 32-bit register per element, the
    vector rebuilt from them; a non-negative constant byte offset of `addr` (i8 geps of constant index,
    const_byte_offset) folded into the address as [root+offset]."""
    t = op.results[0].type
    vec = ir.VectorType(t) if isinstance(t, ir.VectorType) else None
    elem, n = (vec.element_type, vec.shape[0]) if vec is not None else (t, 1)
    if not (isinstance(elem, ir.F32Type) or str(elem) == "i32") or n not in (1, 2, 4):
        raise PassError(f"{NAME}: ld_global_nc loads i32 or f32, or a vector of 2 or 4 of them, got {t}", op.location)
    l1 = attr(op, "l1_evict") if "l1_evict" in op.attributes else None
    l2 = attr(op, "l2_prefetch") if "l2_prefetch" in op.attributes else None
    if l1 is not None and l1 not in _ptx.L1_EVICTION:
        raise PassError(f"{NAME}: ld_global_nc l1_evict must be one of {_ptx.L1_EVICTION}, got {l1!r}", op.location)
    if l2 is not None and l2 not in _ptx.L2_PREFETCH_SIZES:
        raise PassError(f"{NAME}: ld_global_nc l2_prefetch must be one of {_ptx.L2_PREFETCH_SIZES}, got {l2}",
                        op.location)
    root, offset = const_byte_offset(op.operands[0])
    if offset < 0 or offset >= 1 << 31:
        root, offset = op.operands[0], 0
    words = _ptx.ld_global_nc(root, offset, elem, n, l1, l2)
    if vec is None:
        return words[0]
    out = llvm.mlir_undef(t)
    for i, w in enumerate(words):
        out = llvm.insertelement(out, w, i64(i))
    return out


def _lower_gather4(op: ir.Operation, pipes, func: ir.Operation) -> None:
    """fa4.tma_gather4 -> cp.async.bulk.tensor.2d...tile::gather4 (nvvm mode tile_gather4): the
    coordinates in PTX order, the column (dimension 0) first, then the four rows (dimension 1)."""
    desc, dst, stage, col, *rows = op.operands
    box = attr(op, "box")
    if len(box) != 2 or box[1] != 1:
        raise PassError(f"{NAME}: tma_gather4 with box {list(box)}; .tile::gather4 copies rows of a 2-D tensor "
                        "whose descriptor box is [columns, 1] (PTX ISA 5.5.3.4: the bounding box is one row high)",
                        op.location)
    chip = _chip(func)
    sm = re.fullmatch(r"sm_(\d+)[af]?", chip or "")
    if chip is not None and (sm is None or int(sm.group(1)) < GATHER4_MIN_SM):
        raise PassError(f"{NAME}: tma_gather4 in a kernel for {chip}; .tile::gather4 needs sm_{GATHER4_MIN_SM} or "
                        "later (PTX ISA 9.7.9.25): gather rows with per-thread cp_async on older targets",
                        op.location)
    mbar = _load_barrier(pipes, op, stage, func)
    dst_cluster = llvm.addrspacecast(ir.Type.parse("!llvm.ptr<7>"), dst)
    nvvm.cp_async_bulk_tensor_shared_cluster_global(dst_cluster, desc, [col, *rows], mbar, [],
                                                    mode=nvvm.TMALoadMode.TILE_GATHER4, **_group_kw(op))


EVICT_FIRST_POLICY = "createpolicy.fractional.L2::evict_first.b64 $0, 1.0;"


def _hint_kw(op: ir.Operation) -> dict:
    """The nvvm `l2_cache_hint` keyword of a tma_load with `evict_first` (the .L2::cache_hint form, its policy
    from a side-effect-free createpolicy asm: PTX ISA 9.7.9.18 createpolicy, 9.7.9.25 cp.async.bulk.tensor); none
    otherwise (the default form, unchanged PTX)."""
    if "evict_first" not in op.attributes or not bool(attr(op, "evict_first")):
        return {}
    i64t = ir.IntegerType.get_signless(64)
    return {"l2_cache_hint": llvm.inline_asm(i64t, [], EVICT_FIRST_POLICY, "=l", has_side_effects=False)}


def _group_kw(op: ir.Operation) -> dict:
    """The nvvm `group` keyword of a load: none for cta_group 1 (the default form, unchanged PTX)."""
    return {"group": CTA_GROUPS[2]} if cta_group(op) == 2 else {}


def _load_barrier(pipes, op: ir.Operation, stage: ir.Value, func: ir.Operation) -> ir.Value:
    """`full[stage]` of the load's pipeline: this CTA's, or with cta_group 2 the pair leader's (note "pair
    loads"): mapa to rank %cluster_ctarank & ~1, as the !llvm.ptr<3> operand NVVM takes."""
    local = barrier_addr(pipes, op, "full", stage)
    if cta_group(op) == 1:
        return local
    chip = _chip(func)
    sm = re.fullmatch(r"sm_(\d+)[af]?", chip or "")
    if chip is not None and (sm is None or int(sm.group(1)) < PAIR_MIN_SM):
        raise PassError(f"{NAME}: {op.name} with cta_group = 2 in a kernel for {chip}; .cta_group::2 needs "
                        f"sm_{PAIR_MIN_SM}a (PTX ISA 9.7.9.25)", op.location)
    i32t, i64t = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    leader = arith.andi(nvvm.read_ptx_sreg_cluster_ctarank(i32t), i32(~1))
    remote = nvvm.mapa(ir.Type.parse("!llvm.ptr<7>"), local, leader)
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), llvm.ptrtoint(i64t, remote))


def _chip(func: ir.Operation) -> str | None:
    """The chip of the gpu.module target around `func` (None when it has none)."""
    parent = func.parent
    while parent is not None and parent.name != "gpu.module":
        parent = parent.parent
    if parent is None or "targets" not in parent.attributes:
        return None
    for target in ir.ArrayAttr(parent.attributes["targets"]):
        m = re.search(r'chip = "([^"]+)"', str(target))
        if m:
            return m.group(1)
    return None

