"""TMA (PTX ISA §9.7.9.25 cp.async.bulk.tensor): box copies between global and shared memory.

A load is queued on the CTA's TMA engine when issued (a .tile::gather4 load, sm_100a, is four
one-row boxes of a 2-D tensor at one column and four row coordinates, landing as one 4-row box:
PTX ISA 5.5.3.4); when the engine runs it, it writes the box
(clipped, out-of-bounds zero-filled, swizzled: memory.TensorMap) into shared memory and completes
that many transaction bytes on its mbarrier, publishing the issuer's vector clock plus the engine's
epoch of the copy (hb.py). A store reads shared memory when issued (the engine
reads it "later" on the hardware, before the cp.async.bulk.wait_group[.read] that retires its
bulk group: until then its source bytes count as read in flight, and a write to them is a
RaceFault) and writes global memory when that wait retires its group. Groups are per warp
(commit_group closes one; wait_group N retires all but the N most recent).

A .cta_group::2 load (sm_100a, PTX ISA 9.7.9.25.5.1: "the mbarrier object mbar can be in shared
memory of either the same CTA as the shared memory destination dstMem or in its peer-CTA") lands in
the issuer's shared memory and completes its bytes on the barrier its shared::cluster address names
(a mapa address: the pair leader's, lower_tma note "pair loads"); that barrier must be in the
issuer's CTA or its pair peer, and a peer's must be initialised before the copy by happens-before
(cluster.check_init_ordered, as a remote arrive). Without .cta_group::2 the barrier must be in the
issuer's CTA (a Fault otherwise: .cta_group::1).

Per-thread cp.async (§9.7.9.25.3, 16 bytes, src-size 0..16, the rest zero-filled) reads global
memory when issued and is pending for its lane until the lane's cp.async.mbarrier.arrive
(§9.7.13.15.14): there it lands, a generic-proxy write by the issuing warp (the lowering's
arrive is the net-zero form, so the barrier's count does not move), and the lane's next
mbarrier.arrive publishes it. cp.async.commit_group closes the lane's pending copies into a group;
cp.async.wait_group N lands all of the lane's groups but the N most recent (the same generic-proxy write,
at the wait: one schedule the ISA allows), so a wgmma reads them only after a fence.proxy.async of the
writer (before it hands them over) or of the reader. A copy never arrived for nor waited for is an
ExitFault; one that lands over shared memory another warp reads unordered is a RaceFault.
"""
from __future__ import annotations

import numpy as np

from ..._mlir import ir
from ..cluster import check_init_ordered, cluster_address
from ..faults import Fault, Unsupported
from ..machine import SMEM_BASE
from ..program import PLAIN
from . import semantics


def _segments(op) -> list[int]:
    return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))


def _tensor_map(w, handle):
    maps = w.cta.tensor_maps
    h = int(handle)
    if not 0 <= h < len(maps) or maps[h] is None:
        raise Fault(f"TMA descriptor operand {h}: not a TMA parameter of this launch")
    return maps[h]


def _check_smem(cta, addrs, what):
    if addrs.min() < SMEM_BASE or addrs.max() >= cta.smem.size:
        raise Fault(f"{what}: box at shared {int(addrs.min()):#x}..{int(addrs.max()):#x} outside the "
                    f"{cta.smem.size - SMEM_BASE} bytes of shared memory")


GATHER4 = "tile_gather4"


def _load_mode(op) -> str:
    """The nvvm TMA load mode ("tile", "tile_gather4", ...) of a cp.async.bulk.tensor load."""
    if "mode" not in op.attributes:
        return "tile"
    text = str(op.attributes["mode"])                  # #nvvm.tma_load_mode<tile_gather4>
    return text[text.index("<") + 1:text.rindex(">")]


def _gather4_box(tm, coords) -> np.ndarray:
    """.tile::gather4 (PTX ISA 5.5.3.4): coords = (column, row0, row1, row2, row3) of a 2-D tensor
    whose box is one row high; the four one-row boxes (each clipped and filled as in tile mode) land
    one after the other, as a 4-row box would: bytes [4, row_bytes]."""
    if tm.array.ndim != 2 or tm.box[1] != 1:
        raise Fault(f"TMA gather4 through {tm.name}: the tensor map is rank {tm.array.ndim} with box {tm.box}; "
                    ".tile::gather4 needs a 2-D tensor map whose box is one row high (PTX ISA 5.5.3.4)")
    col, *rows = coords
    return np.concatenate([tm.load_box([col, row]) for row in rows])


def _cta_group(op) -> int:
    """The .cta_group of a cp.async.bulk.tensor load (nvvm `group` attribute; 1 when absent)."""
    if "group" not in op.attributes:
        return 1
    return 2 if "cta_2" in str(op.attributes["group"]) else 1


def _load_barrier(w, addr: int, group: int):
    """The mbarrier a load of warp `w`'s CTA completes on (module docstring: .cta_group)."""
    cta, local = cluster_address(w.cta, addr)
    if cta is w.cta:
        return cta.mbarrier(local)
    if group != 2:
        raise w.fault(Fault, f"TMA load completing on an mbarrier of CTA rank {cta.rank} from CTA rank {w.cta.rank}: "
                             ".cta_group::1 needs the barrier in the destination's CTA (PTX ISA 9.7.9.25)")
    if cta.rank >> 1 != w.cta.rank >> 1:
        raise w.fault(Fault, f"TMA load .cta_group::2 of CTA rank {w.cta.rank} completing on CTA rank {cta.rank}: the "
                             "barrier must be in the issuer's CTA or its pair peer (PTX ISA 9.7.9.25)")
    b = cta.mbarrier(local)
    check_init_ordered(b, w.cta.hb.vc[:, w.cta.hb.g(w.wid)], f"TMA load .cta_group::2 of CTA rank {w.cta.rank}")
    return b


@semantics("nvvm.cp.async.bulk.tensor.shared.cluster.global")
def tma_load(p, op, a, r):
    seg = _segments(op)
    # (dst, desc, coords, mbar, im2col, multicast, l2 hint, predicate): an L2 cache hint changes no byte (its policy
    # word, from fa4-lower-tma's createpolicy asm, is read by nothing here)
    if seg[3] != 1 or any(seg[4:6]) or any(seg[7:]):
        raise Unsupported(f"TMA load with multicast / im2col / predicate operands (segments {seg})")
    mode = _load_mode(op)
    if mode not in ("tile", GATHER4):
        raise Unsupported(f"TMA load mode {mode!r} (tile and tile_gather4 are modelled)")
    nd = seg[2]
    if mode == GATHER4 and nd != 5:
        raise Fault(f"TMA gather4 with {nd} coordinates: .tile::gather4 takes a column and four rows")
    dst, desc, coords, bar = a[0], a[1], a[2:2 + nd], a[2 + nd]
    rows = 4 if mode == GATHER4 else None
    group = _cta_group(op)

    def run(env, mask, w):
        cta = w.cta
        for lane in np.nonzero(mask)[0]:
            tm = _tensor_map(w, env[desc][lane])
            c = [int(env[s][lane]) for s in coords]
            d = int(env[dst][lane])
            # a box starts at a swizzle atom (8 rows of the span); a gather4's four rows may start
            # half-way into one (FlashMLA fills a 128B-swizzled tile 4 rows at a time), the swizzle
            # being a function of the address bits (numeric.swizzle)
            align = tm.span * (1 if rows else 8)
            if tm.span and d % align:
                raise Fault(f"TMA {'gather4' if rows else 'load'} into shared {d:#x}: a {tm.span}-byte swizzled "
                            f"box must start {align}-byte aligned")
            addrs = tm.smem_addresses(d, rows)
            _check_smem(cta, addrs, f"TMA load of {tm.name}")
            b = _load_barrier(w, env[bar][lane], group)
            issued = cta.hb.tma_issue(w.wid)

            def complete(tm=tm, c=c, addrs=addrs, b=b, issued=issued):
                data = _gather4_box(tm, c) if rows else tm.load_box(c)
                what = f"TMA {'gather4' if rows else 'load'} of {tm.name}"
                cta.check_smem_write(addrs, what)
                job = cta.hb.stamp_async(cta.hb.TMA, issued)
                cta.hb.access(cta.hb.smem, addrs, job, cta.hb.TMA, True, what)
                cta.smem[addrs] = data
                b.complete_tx(data.size, job)
                cta.stats["tma_load_bytes"] += data.size
            cta.tma_queue.append(complete)
    return PLAIN, run


@semantics("nvvm.cp.async.bulk.tensor.global.shared.cta")
def tma_store(p, op, a, r):
    seg = _segments(op)
    nd = seg[2]
    desc, src, coords = a[0], a[1], a[2:2 + nd]

    def run(env, mask, w):
        cta = w.cta
        for lane in np.nonzero(mask)[0]:
            tm = _tensor_map(w, env[desc][lane])
            c = [int(env[s][lane]) for s in coords]
            addrs = tm.smem_addresses(int(env[src][lane]))
            _check_smem(cta, addrs, f"TMA store of {tm.name}")
            what = f"TMA store of {tm.name}"
            cta.hb.warp_access(w, cta.hb.smem, addrs, False, what)
            cta.hb.check_async_proxy_read(addrs, what)
            data = cta.smem[addrs].copy()
            flat = np.unique(addrs)
            cta.smem_readers[flat] += 1
            cta.store_groups[w.wid][0].append((lambda tm=tm, c=c, data=data: tm.store_box(c, data), flat))
    return PLAIN, run


@semantics("nvvm.cp.async.bulk.commit.group")
def commit_group(p, op, a, r):
    def run(env, mask, w):
        open_, groups = w.cta.store_groups[w.wid]
        if open_:
            groups.append(list(open_))
            open_.clear()
    return PLAIN, run


@semantics("nvvm.cp.async.bulk.wait_group")
def wait_group(p, op, a, r):
    """Retires this warp's committed bulk groups but the `group` most recent: their global writes
    land and their shared source may be reused (`.read` allows only the latter on the hardware; the
    interpreter lands both)."""
    pending = ir.IntegerAttr(op.attributes["group"]).value

    def run(env, mask, w):
        cta = w.cta
        groups = cta.store_groups[w.wid][1]
        while len(groups) > pending:
            for job, flat in groups.popleft():
                cta.smem_readers[flat] -= 1
                cta.stats["tma_store_bytes"] += job()
    return PLAIN, run


@semantics("nvvm.prefetch")
def prefetch(p, op, a, r):
    return PLAIN, lambda env, mask, w: None


@semantics("nvvm.cp.async.bulk.tensor.prefetch")
def tensor_prefetch(p, op, a, r):
    """An L2 prefetch of a box (PTX ISA 9.7.9.26): a hint, no memory the program sees changes."""
    return PLAIN, lambda env, mask, w: None


@semantics("nvvm.cp.async.shared.global")
def cp_async(p, op, a, r):
    dst, src = a[0], a[1]
    size = a[2] if len(a) > 2 else None

    def run(env, mask, w):
        cta = w.cta
        for lane in np.nonzero(mask)[0]:
            n = 16 if size is None else int(env[size][lane])
            if not 0 <= n <= 16:
                raise Fault(f"cp.async src-size {n}: expected 0 .. 16")
            d = int(env[dst][lane])
            if d % 16 or d < SMEM_BASE or d + 16 > cta.smem.size:
                raise Fault(f"cp.async to shared {d:#x}: not a 16-byte aligned address inside shared memory")
            data = np.zeros(16, np.uint8)
            if n:
                data[:n] = cta.gmem.read(int(env[src][lane]), n)
            cta.cp_async_pending[(w.wid, int(lane))].append((d, data))
            cta.stats["cp_async_bytes"] += n
    return PLAIN, run


def cp_async_hinted_asm(p, op, a, r, asm: str):
    """fa4-lower-tma's hinted cp.async (_cp_async_hinted): `cp.async.cg.shared.global[.L2::cache_hint]
    [.L2::<n>B] [$0], [$1], 16, $2[, $3];` (dst as a 32-bit shared address, src, src-size, the policy)
    is nvvm.cp.async.shared.global's copy (the hints change no byte); its `createpolicy` yields a
    policy word nothing else reads (0)."""
    if asm.startswith("createpolicy."):
        z = r[0]

        def policy(env, mask, w):
            env[z] = np.zeros(len(mask), np.int64)
        return PLAIN, policy
    if len(a) not in (3, 4) or r:
        raise Unsupported(f"inline asm {asm!r}: {len(a)} operands")
    return cp_async(p, op, a[:3], r)


def _land(w, copies) -> None:
    """cp.async copies of warp `w` land: generic-proxy writes of the warp."""
    cta = w.cta
    for d, data in copies:
        span = np.arange(d, d + 16)
        cta.check_smem_write(span, "cp.async")
        cta.hb.warp_access(w, cta.hb.smem, span, True, "cp.async", generic=True)
        cta.smem[span] = data


@semantics("nvvm.cp.async.mbarrier.arrive", "nvvm.cp.async.mbarrier.arrive.shared")
def cp_async_mbarrier_arrive(p, op, a, r):
    """The lane's cp.async copies land (net-zero arrival: the barrier's count is unchanged); the arrive tracks
    every earlier cp.async of the thread, its committed groups' too (PTX ISA 9.7.13.15.14)."""
    def run(env, mask, w):
        cta = w.cta
        for lane in np.nonzero(mask)[0]:
            cta.mbarrier(env[a[0]][lane])          # a barrier, or a Fault
            for group in cta.cp_async_groups.pop((w.wid, int(lane)), []):
                _land(w, group)
            _land(w, cta.cp_async_pending.pop((w.wid, int(lane)), []))
    return PLAIN, run


@semantics("nvvm.cp.async.commit.group")
def cp_async_commit_group(p, op, a, r):
    """The lane's cp.async copies since its last commit become one group (PTX ISA 9.7.9.3; an empty group when
    there are none)."""
    def run(env, mask, w):
        cta = w.cta
        for lane in np.nonzero(mask)[0]:
            cta.cp_async_groups[(w.wid, int(lane))].append(cta.cp_async_pending.pop((w.wid, int(lane)), []))
    return PLAIN, run


@semantics("nvvm.cp.async.wait.group")
def cp_async_wait_group(p, op, a, r):
    """cp.async.wait_group N: all of the lane's groups but the N most recent land (PTX ISA 9.7.9.3)."""
    keep = ir.IntegerAttr(op.attributes["n"]).value

    def run(env, mask, w):
        cta = w.cta
        for lane in np.nonzero(mask)[0]:
            groups = cta.cp_async_groups.get((w.wid, int(lane)), [])
            while len(groups) > keep:
                _land(w, groups.pop(0))
    return PLAIN, run
