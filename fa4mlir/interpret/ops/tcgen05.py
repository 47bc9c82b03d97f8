"""Tensor memory and the 5th-generation tensor core (PTX ISA §9.7.16).

TMEM is machine.CTA.tmem, 128 lanes x 512 columns of 32 bits; an address is lane << 16 | column.
`tcgen05.alloc` grants columns from 0 (writing the address to its shared-memory slot), `dealloc`
frees them; every access must lie inside the allocation (TmemFault). A warp's 32x32b ld/st reach
the 32 lanes of its quarter: warp w, lanes 32 (w % 4) .. + 31 (§9.7.16.2.3 "Access restrictions").

tcgen05.ld writes its registers asynchronously: its result is an `Unwaited` value until the warp's
next tcgen05.wait::ld, and any use before that is an UnwaitedAsync fault. tcgen05.st must be
waited (wait::st) before an arrive or a barrier publishes it (ops/sync.py).

tcgen05.mma is queued on the CTA's tensor-core engine in issue order; when it runs, it reads A and
B through their shared-memory descriptors (or A from TMEM) as the instruction descriptor says, so
every field is exercised. Its reads and writes are checked for happens-before as the tensor core's
(hb.py), with the issuer's vector clock at issue. D = A . B^T (+ D), the product summed in float64 and rounded to float32
per MMA (the hardware accumulates in float32 in an unspecified order). tcgen05.commit arrives on
its mbarrier once every MMA issued before it ran (same engine FIFO).

The data-path layouts of cta_group::1 dense MMAs (§9.7.16.10.5 "Data Path Layout Organization"):
M = 128 is Layout D (row i in lane i, lane alignment 0); M = 64 without .ws is Layout F, "4x1 (1/2
datapath utilized)" with lane alignment "0 or 16": row r in lane 32 (r // 16) + a + r % 16 for the
alignment a named by the lane field of D's address, and A read from TMEM "must use the same Tensor
Memory lane alignment" as D (a TmemFault otherwise).

The .cta_group::2 forms (a CTA pair: alloc/dealloc in both CTAs, the m256 (Layout A) and m128 (Layout B)
MMAs issued by the leader over both CTAs, commits multicast to the CTAs of a mask) are ops/pair.py's,
tcgen05.cp is ops/tmem_copy.py's; the SMEM descriptor's SWIZZLE_128B, 64B and 32B layouts are modelled.
"""
from __future__ import annotations

import numpy as np

from ..._mlir import ir
from ..faults import Fault, TmemFault, Unsupported, UnwaitedAsync
from ..machine import SMEM_BASE, TMEM_COLUMNS, TMEM_LANES, uniform
from ..numeric import WARP, half_bits_to_f32, sw128_operand_offsets, swizzle, vector_len
from ..program import PLAIN
from . import pair, semantics

SWIZZLE_128B = 2        # layout field (bits 61-63) of a tcgen05 shared-memory descriptor
SWIZZLE_SPANS = {SWIZZLE_128B: 128, 4: 64, 6: 32}     # layout field -> swizzle span in bytes (§9.7.16.4.1)


class Unwaited:
    """A tcgen05.ld destination before tcgen05.wait::ld: any use faults."""

    __slots__ = ("value", "origin")

    def __init__(self, value, origin: str):
        self.value, self.origin = value, origin

    def _fault(self, *args, **kwargs):
        raise UnwaitedAsync(f"a tcgen05.ld result ({self.origin}) is used before tcgen05.wait::ld")

    __array__ = __getitem__ = __setitem__ = __len__ = __iter__ = __index__ = __int__ = __float__ = _fault
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __and__ = __or__ = __xor__ = _fault

    def __getattr__(self, name):
        self._fault()


def _full_warp(w, mask, what):
    if not mask.all():
        raise Fault(f"{what}: .sync.aligned executed by {int(mask.sum())} of 32 lanes")


def _columns(w, addr: int, ncols: int, what: str) -> tuple[int, int]:
    """(first lane, first column) of a warp's 32x32b access of `ncols` columns at `addr`, checked."""
    cta = w.cta
    lane, col = (addr >> 16) & 0xFFFF, addr & 0xFFFF
    quarter = WARP * (w.wid % 4)
    if lane != quarter:
        raise w.fault(TmemFault, f"{what}: warp {w.wid} may access TMEM lanes {quarter}..{quarter + 31}, "
                                 f"the address names lane {lane}")
    if col + ncols > cta.tmem_cols:
        raise w.fault(TmemFault, f"{what}: columns {col}..{col + ncols - 1} outside the allocation of "
                                 f"{cta.tmem_cols} columns")
    return lane, col


def _cells(lane: int, lanes: int, col: int, cols: int) -> tuple:
    """The index of TMEM lanes lane.. x columns col.. (the shadow's cells): two slices."""
    return slice(lane, lane + lanes), slice(col, col + cols)


def tmem_cells(lanes: np.ndarray, col: int, cols: int) -> tuple:
    """The index of TMEM `lanes` (1-D) x columns col..col+cols-1, for the tensor memory and its shadow:
    two slices where the lanes are consecutive (views: a 128 x 128 D read and written through index
    arrays took 0.8 ms of happens-before bookkeeping per MMA, through slices 0.07 ms), else the lane
    array and a column slice (numpy indexes their outer product: [lane, column])."""
    cols_index = slice(col, col + cols)
    n = lanes.size
    if n and int(lanes[-1]) - int(lanes[0]) == n - 1 and (n == 1 or bool((np.diff(lanes) == 1).all())):
        return slice(int(lanes[0]), int(lanes[0]) + n), cols_index
    return lanes, cols_index


LAYOUT_F_M = 64          # §9.7.16.10.5: M = 64, cta_group::1, not .ws
LAYOUT_F_ALIGNMENTS = (0, 16)


def mma_lanes(m: int, align: int) -> np.ndarray:
    """The TMEM lane of each of the m rows of an MMA's D (and of A from TMEM) at lane alignment `align`
    (§9.7.16.10.5): Layout D (M = 128) row i in lane i; Layout F (M = 64) row r in lane
    32 (r // 16) + align + r % 16."""
    if m == TMEM_LANES and align == 0:
        return np.arange(m)
    if m == LAYOUT_F_M and align in LAYOUT_F_ALIGNMENTS:
        r = np.arange(m)
        return 32 * (r // 16) + align + r % 16
    raise TmemFault(f"tcgen05.mma M={m} with its TMEM address at lane {align}: Layout D (M=128) takes lane 0, "
                    f"Layout F (M=64) lane 0 or 16 (PTX ISA §9.7.16.10.5)")


def _group(op) -> int:
    """1 or 2: the op's .cta_group (a pair's forms: ops/pair.py)."""
    group = op.attributes["group"] if "group" in op.attributes else None
    return 2 if group is not None and "cta_2" in str(group) else 1


@semantics("nvvm.tcgen05.alloc")
def alloc(p, op, a, r):
    group = _group(op)
    slot, ncols = a[0], a[1]

    def run(env, mask, w):
        _full_warp(w, mask, "tcgen05.alloc")
        cta = w.cta
        n = uniform(env[ncols], mask, "tcgen05.alloc columns")
        if n < 32 or n > TMEM_COLUMNS or n & (n - 1):
            raise w.fault(TmemFault, f"tcgen05.alloc of {n} columns: a power of two in 32..{TMEM_COLUMNS}")
        if cta.tmem_cols:
            raise w.fault(TmemFault, f"tcgen05.alloc of {n} columns while {cta.tmem_cols} are allocated "
                                     f"(one allocation per CTA is modelled)")
        if group == 2:
            pair.check_pair_alloc(w, n)
        cta.tmem_cols = n
        dst = uniform(env[slot], mask, "tcgen05.alloc slot")
        cta.hb.tc_access(w, cta.hb.smem, np.arange(dst, dst + 4), True, "tcgen05.alloc (its address slot)")
        cta.smem[dst:dst + 4] = np.array([0], np.uint32).view(np.uint8)    # lane 0, column 0
    return PLAIN, run


@semantics("nvvm.tcgen05.dealloc")
def dealloc(p, op, a, r):
    group = _group(op)
    addr, ncols = a[0], a[1]

    def run(env, mask, w):
        _full_warp(w, mask, "tcgen05.dealloc")
        cta = w.cta
        if group == 2:
            pair.pair(w)
        n = uniform(env[ncols], mask, "tcgen05.dealloc columns")
        at = uniform(env[addr], mask, "tcgen05.dealloc address")
        if at != 0 or n != cta.tmem_cols:
            raise w.fault(TmemFault, f"tcgen05.dealloc of {n} columns at {at:#x}; allocated: {cta.tmem_cols} at 0")
        cta.tmem_cols = 0
    return PLAIN, run


@semantics("nvvm.tcgen05.relinquish_alloc_permit")
def relinquish(p, op, a, r):
    two = _group(op) == 2

    def run(env, mask, w):
        if two:
            pair.pair(w)          # a pair's form needs the peer CTA
    return PLAIN, run


def _shape_32x32b(op):
    if "32x32b" not in str(op.attributes["shape"]):
        raise Unsupported(f"{op.name} shape {op.attributes['shape']}: only 32x32b is modelled")


@semantics("nvvm.tcgen05.ld")
def ld(p, op, a, r):
    _shape_32x32b(op)
    n = vector_len(op.results[0].type)
    ptr, z = a[0], r[0]

    def run(env, mask, w):
        _full_warp(w, mask, "tcgen05.ld")
        lane, col = _columns(w, uniform(env[ptr], mask, "tcgen05.ld address"), n or 1, "tcgen05.ld")
        w.cta.hb.tc_access(w, w.cta.hb.tmem, _cells(lane, WARP, col, n or 1), False, "tcgen05.ld")
        block = w.cta.tmem[lane:lane + WARP, col:col + (n or 1)].view(np.int32)
        value = block.copy() if n else block[:, 0].copy()
        env[z] = Unwaited(value, f"warp {w.wid} columns {col}..{col + (n or 1) - 1}")
        w.pending_ld.append(z)
    return PLAIN, run


@semantics("nvvm.tcgen05.st")
def st(p, op, a, r):
    _shape_32x32b(op)
    ptr, val = a[0], a[1]
    n = vector_len(op.operands[1].type) or 1

    def run(env, mask, w):
        _full_warp(w, mask, "tcgen05.st")
        lane, col = _columns(w, uniform(env[ptr], mask, "tcgen05.st address"), n, "tcgen05.st")
        w.cta.hb.tc_access(w, w.cta.hb.tmem, _cells(lane, WARP, col, n), True, "tcgen05.st")
        w.cta.tmem[lane:lane + WARP, col:col + n] = np.asarray(env[val]).reshape(WARP, n).view(np.uint32)
        w.pending_st += 1
    return PLAIN, run


@semantics("nvvm.tcgen05.wait")
def wait(p, op, a, r):
    is_load = "load" in str(op.attributes["kind"])

    def run(env, mask, w):
        if is_load:
            for z in w.pending_ld:
                if isinstance(env[z], Unwaited):
                    env[z] = env[z].value
            w.pending_ld.clear()
        else:
            w.pending_st = 0
    return PLAIN, run


# ---- the tensor core ------------------------------------------------------------------------------

def _bits(x: int, lo: int, width: int) -> int:
    return (x >> lo) & ((1 << width) - 1)


def decode_idesc(idesc: int) -> dict:
    """The instruction descriptor of tcgen05.mma .kind::f16 (PTX ISA §9.7.16.4.2, table "Instruction
    descriptor format for .kind::f16"), checked for the fields the interpreter models."""
    if _bits(idesc, 0, 4) or _bits(idesc, 13, 2) or _bits(idesc, 30, 2) or _bits(idesc, 6, 1) \
            or _bits(idesc, 23, 1) or _bits(idesc, 29, 1):
        raise Unsupported(f"instruction descriptor {idesc:#x}: sparsity, saturate, negate, shift or reserved bits set")
    d_type, a_type, b_type = _bits(idesc, 4, 2), _bits(idesc, 7, 3), _bits(idesc, 10, 3)
    if d_type != 1 or a_type != b_type or a_type not in (0, 1):
        raise Unsupported(f"instruction descriptor {idesc:#x}: D type {d_type}, A {a_type}, B {b_type} "
                          f"(only f16/bf16 inputs with an f32 accumulator are modelled)")
    return {"dtype": "bf16" if a_type else "f16", "a_mn_major": bool(_bits(idesc, 15, 1)),
            "b_mn_major": bool(_bits(idesc, 16, 1)), "n": _bits(idesc, 17, 6) << 3, "m": _bits(idesc, 24, 5) << 4}


def smem_operand_addresses(desc: int, rows: int, k: int, mn_major: bool) -> np.ndarray:
    """Shared byte address of element (row, k) of a rows x k 16-bit operand described by `desc`
    (PTX ISA §9.7.16.4.1 "Shared memory descriptor"): the canonical SWIZZLE_128B layout (64B, 32B alike)
    (numeric.sw128_operand_offsets) from the start address, swizzled on the absolute address (base
    offset 0: the atoms are 1024-byte aligned)."""
    start, lbo, sbo = _bits(desc, 0, 14) << 4, _bits(desc, 16, 14) << 4, _bits(desc, 32, 14) << 4
    version, base, lbo_mode, layout = _bits(desc, 46, 2), _bits(desc, 49, 3), _bits(desc, 52, 1), _bits(desc, 61, 3)
    if version != 1 or base or lbo_mode or _bits(desc, 53, 8):
        raise Unsupported(f"shared-memory descriptor {desc:#018x}: version {version}, base offset {base}, "
                          f"LBO mode {lbo_mode} (modelled: version 1, base 0, LBO mode 0)")
    span = SWIZZLE_SPANS.get(layout)
    if span is None:
        raise Unsupported(f"shared-memory descriptor {desc:#018x}: layout {layout} (modelled: SWIZZLE_128B = 2, "
                          f"SWIZZLE_64B = 4, SWIZZLE_32B = 6)")
    return swizzle(start + sw128_operand_offsets(rows, k, mn_major, lbo, sbo, span), span)


def read_operand(cta, addrs, desc, dtype):
    """The 16-bit elements at shared byte addresses `addrs`, as float32."""
    if addrs.min() < SMEM_BASE or addrs.max() + 2 > cta.smem.size:
        raise Fault(f"MMA operand (descriptor {desc:#018x}) reaches outside shared memory")
    bits = cta.smem[addrs].astype(np.uint16) | (cta.smem[addrs + 1].astype(np.uint16) << 8)
    return half_bits_to_f32(bits, dtype)


def _smem_operand(cta, desc, rows, k, mn_major, dtype):
    return read_operand(cta, smem_operand_addresses(desc, rows, k, mn_major), desc, dtype)


def execute_mma(cta, d_addr: int, a, b_desc: int, idesc: int, accumulate: bool, a_in_tmem: bool,
                vc=None) -> None:
    """One tcgen05.mma; `vc`: the tensor core's vector clock for this MMA (happens-before checks of
    its operands and its D, hb.py), None to skip them (unit tests)."""
    f = decode_idesc(idesc)
    hb = cta.hb if vc is not None else None

    def access(shadow, index, write, what):
        if hb is not None:
            if shadow is hb.smem:         # SMEM operands are read by the async proxy (§9.7.16.6.5)
                hb.check_async_proxy_read(index, what)
            hb.access(shadow, index, vc, hb.MMA, write, what)
    m, n, k = f["m"], f["n"], 16
    if m not in (TMEM_LANES, LAYOUT_F_M):
        raise Unsupported(f"tcgen05.mma M={m}: M=128 (Layout D) and M=64 (Layout F) are modelled")
    d_lane = (d_addr >> 16) & 0xFFFF
    lanes = mma_lanes(m, d_lane)
    if a_in_tmem:
        lane, col = (a >> 16) & 0xFFFF, a & 0xFFFF
        if lane != d_lane:
            raise TmemFault(f"tcgen05.mma A at TMEM lane {lane}, D at lane {d_lane}: Layout F takes A and D at the "
                            f"same lane alignment (PTX ISA §9.7.16.10.5)")
        if col + k // 2 > cta.tmem_cols:
            raise TmemFault(f"tcgen05.mma A at TMEM lane {lane} column {col} (+{k // 2}) outside the allocation "
                            f"of {cta.tmem_cols} columns")
        a_cells = tmem_cells(lanes, col, k // 2)
        access(hb and hb.tmem, a_cells, False, "tcgen05.mma A (TMEM)")
        words = cta.tmem[a_cells]
        halves = np.stack([words & 0xFFFF, words >> 16], axis=2).reshape(m, k).astype(np.uint16)
        A = half_bits_to_f32(halves, f["dtype"])
    else:
        a_addrs = smem_operand_addresses(a, m, k, f["a_mn_major"])
        access(hb and hb.smem, np.stack([a_addrs, a_addrs + 1]), False, "tcgen05.mma A (SMEM)")
        A = read_operand(cta, a_addrs, a, f["dtype"])
    b_addrs = smem_operand_addresses(b_desc, n, k, f["b_mn_major"])
    access(hb and hb.smem, np.stack([b_addrs, b_addrs + 1]), False, "tcgen05.mma B (SMEM)")
    B = read_operand(cta, b_addrs, b_desc, f["dtype"])
    col = d_addr & 0xFFFF
    if col + n > cta.tmem_cols:
        raise TmemFault(f"tcgen05.mma D at TMEM lane {d_lane} column {col} (+{n}) outside the allocation of "
                        f"{cta.tmem_cols} columns")
    d_cells = tmem_cells(lanes, col, n)
    acc = A.astype(np.float64) @ B.T.astype(np.float64)
    if accumulate:
        access(hb and hb.tmem, d_cells, False, "tcgen05.mma D (accumulate)")
        acc += cta.tmem[d_cells].view(np.float32)
    access(hb and hb.tmem, d_cells, True, "tcgen05.mma D")
    cta.tmem[d_cells] = acc.astype(np.float32).view(np.uint32)
    cta.stats["mma"] += 1
    if hasattr(cta, "mma_log"):       # what ran, for tests that compare descriptors with another kernel's
        cta.mma_log.append((d_addr, a, b_desc, idesc, accumulate, a_in_tmem))


@semantics("nvvm.tcgen05.mma")
def mma(p, op, a, r):
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if seg[:5] != [1, 1, 1, 1, 1] or any(seg[5:]):
        raise Unsupported(f"tcgen05.mma operand segments {seg}: scale / disable-output-lane operands")
    if "f16" not in str(op.attributes["kind"]):
        raise Unsupported(f"tcgen05.mma {op.attributes['kind']}: kind::f16 only")
    two = "cta_2" in str(op.attributes["ctaGroup"])
    d, am, bm, idm, en = a[:5]
    a_in_tmem = str(op.operands[1].type) == "!llvm.ptr<6>"

    def run(env, mask, w):
        cta = w.cta
        if two:
            pair.check_leader(w)
            ctas = pair.pair(w)
        for lane in np.nonzero(mask)[0]:
            args = (int(env[d][lane]), int(env[am][lane]) & (2**64 - 1), int(env[bm][lane]) & (2**64 - 1),
                    int(env[idm][lane]) & 0xFFFFFFFF, bool(env[en][lane]), a_in_tmem)
            if not cta.tmem_cols:
                raise w.fault(TmemFault, "tcgen05.mma with no tensor memory allocated")
            issued = cta.hb.issue(w.wid)

            def job(args=args, w=w, issued=issued):
                hb = cta.hb
                np.maximum(hb.mma_vc, hb.stamp_async(hb.MMA, issued), out=hb.mma_vc)   # in issue order
                try:
                    if two:
                        pair.execute_pair_mma(ctas, *args, vc=hb.mma_vc, agent=hb.MMA)
                    else:
                        execute_mma(cta, *args, vc=hb.mma_vc)
                except Fault as exc:
                    raise exc.add_context(warp=w.wid, role=w.role, op="tcgen05.mma (executing)")
            cta.mma_queue.append(job)
    return PLAIN, run


@semantics("nvvm.tcgen05.commit")
def commit(p, op, a, r):
    if _group(op) == 2 and len(a) == 1:
        raise Unsupported("tcgen05.commit.cta_group::2 without a multicast mask")
    bar, multicast = a[0], (a[1] if len(a) > 1 else None)

    def run(env, mask, w):
        cta = w.cta
        issued = cta.hb.issue(w.wid)
        bits = None if multicast is None else pair.uniform_mask(env, multicast, mask)
        for lane in np.nonzero(mask)[0]:
            # arrives behind the MMAs issued before it: with their epochs and the issuer's vector; a
            # multicast commit on the barrier at that offset in each CTA of its mask (ops/pair.py)
            for b in pair.commit_targets(w, int(env[bar][lane]), bits):
                cta.mma_queue.append(lambda b=b: b.arrive(1, np.maximum(cta.hb.mma_vc, issued)))
    return PLAIN, run
