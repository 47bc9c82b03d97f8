"""sm_90a warpgroup MMA (PTX ISA §9.7.15 wgmma): m64nNk16, bf16/f16 inputs, f32 accumulator.

A wgmma is issued by the four warps of a warpgroup (warps 4g .. 4g + 3); each warp holds 16 rows of
D, so each warp's share is computed on its own when it executes the op: warp q = wid % 4 takes rows
16 q .. 16 q + 15 of A (from the shared-memory descriptor, or its own A registers) and the whole
of B, and adds A B^T to its D registers (float64 products summed, rounded to float32 once per wgmma,
as tcgen05.py does). Register fragments (§9.7.15.5.1 "Register Fragments"): lane l holds rows
r = l / 4 and r + 8 of the warp's 16, D register i column 8 (i / 4) + 2 (l % 4) + i % 2 of row
r + 8 ((i / 2) % 2); A word j (two 16-bit elements, low half first) row r + 8 (j % 2), columns
8 (j / 2) + 2 (l % 4) + {0, 1}.

Descriptors (§9.7.15.5.1 "Matrix Descriptor Format"): start address >> 4 in bits 0-13, LBO >> 4 in
16-29, SBO >> 4 in 32-45, base offset in 49-51, swizzle in 62-63 (1 = 128B and 2 = 64B modelled).
A row-major ("K-major") A and a column-major B are K-major operands, a row-major B (imm-trans-b)
and a column-major A from shared memory (imm-trans-a) are MN-major: numeric.sw128_operand_offsets.

The D registers are written asynchronously: a wgmma's result is a `PendingRegs` until this warp's
wgmma.wait_group retires its group. Moving it (extract/insertvalue, extract/insertelement: the
struct <-> vector shuffles of fa4-lower-mma-sm90) and chaining it into the next wgmma's accumulator
are allowed; any other use before the wait is an UnwaitedAsync fault.

A wgmma is one warpgroup operation: a warp's wgmma.wait_group blocks until all four warps issued
and committed the groups it retires, and retires them for the whole warpgroup (machine.WarpGroup).
A warp's share reads shared memory when the warp issues it; the bytes count as read in flight
until their group retires, and a write to them meanwhile (TMA, st.shared) is a RaceFault. The
fence rule (wgmma.fence before a wgmma that follows a wait_group) is checked per warp.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ..._mlir import ir
from ..faults import Fault, Unsupported, UnwaitedAsync
from ..numeric import WARP, half_bits_to_f32, sw128_operand_offsets, swizzle
from ..program import BLOCKING, PLAIN
from . import semantics
from .tcgen05 import read_operand

SWIZZLE_128B = 1      # swizzle field (bits 62-63) of a wgmma descriptor
SWIZZLE_SPAN = {SWIZZLE_128B: 128, 2: 64}   # the modelled swizzle fields -> bytes (2: 64B, head dim 96)
M, K = 64, 16


class PendingRegs:
    """wgmma D registers of `warp` (or values moved out of them) before its wgmma.wait_group retired
    `group`: any use but a move faults; once retired, it behaves as its value."""

    __slots__ = ("value", "warp", "group")

    def __init__(self, value, warp, group: int):
        self.value, self.warp, self.group = value, warp, group

    def ready(self) -> bool:
        return self.warp.wgmma_waited > self.group

    def settled(self):
        if not self.ready():
            raise UnwaitedAsync(f"a wgmma result (warp {self.warp.wid}, group {self.group}) is read before "
                                f"wgmma.wait_group retired its group")
        return self.value

    def __array__(self, dtype=None, copy=None):
        v = self.settled()
        return v if dtype is None else v.astype(dtype)

    def __getattr__(self, name):
        return getattr(self.settled(), name)


for _op in ("getitem", "setitem", "len", "iter", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
            "rtruediv", "and", "or", "xor", "neg", "lt", "le", "gt", "ge", "eq", "ne", "int", "float", "index"):
    setattr(PendingRegs, f"__{_op}__", (lambda name: lambda self, *args: getattr(self.settled(), name)(*args))(
        f"__{_op}__"))


def move(w, fn, *values):
    """`fn` of `values` with PendingRegs not yet retired passed through (a register move)."""
    group, plain = None, []
    for v in values:
        if type(v) is PendingRegs:
            if not v.ready():
                group = v.group if group is None else max(group, v.group)
            v = v.value
        plain.append(v)
    out = fn(*plain)
    return out if group is None else PendingRegs(out, w, group)


def _bits(x: int, lo: int, width: int) -> int:
    return (x >> lo) & ((1 << width) - 1)


def descriptor_addresses(desc: int, rows: int, mn_major: bool) -> np.ndarray:
    """Shared byte address of element (row, k) of a rows x 16 operand described by wgmma
    descriptor `desc`."""
    start, lbo, sbo = _bits(desc, 0, 14) << 4, _bits(desc, 16, 14) << 4, _bits(desc, 32, 14) << 4
    base, layout = _bits(desc, 49, 3), _bits(desc, 62, 2)
    if base or layout not in SWIZZLE_SPAN or _bits(desc, 14, 2) or _bits(desc, 30, 2) or _bits(desc, 46, 3) \
            or _bits(desc, 52, 10):
        raise Unsupported(f"wgmma descriptor {desc:#018x}: swizzle {layout}, base offset {base} or reserved bits "
                          f"(modelled: the 128B and 64B swizzles, base offset 0)")
    span = SWIZZLE_SPAN[layout]
    return swizzle(start + sw128_operand_offsets(rows, K, mn_major, lbo, sbo, span), span)


@lru_cache(maxsize=8192)
def read_span(desc: int, rows: int, mn_major: bool, lo: int = 0, hi: int | None = None):
    """(addresses of rows lo..hi of descriptor_addresses, the sorted distinct shared bytes they cover):
    a kernel issues the same few hundred descriptors again and again (ring slots x k steps), and the
    distinct bytes (what a wgmma holds as read until its group retires) cost a sort each. Read-only."""
    addrs = descriptor_addresses(desc, rows, mn_major)[lo:hi]
    flat = np.unique(np.concatenate([addrs.ravel(), addrs.ravel() + 1]))
    addrs.setflags(write=False)
    flat.setflags(write=False)
    return addrs, flat


@lru_cache(maxsize=None)
def d_fragment(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) within the warp's 16 x n tile of D register i of lane l: arrays [32, n / 2]."""
    lane = np.arange(WARP)[:, None]
    i = np.arange(n // 2)[None, :]
    return lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


@lru_cache(maxsize=None)
def a_fragment() -> tuple[np.ndarray, np.ndarray]:
    """(row, column) within the warp's 16 x 16 tile of A of half h of word j of lane l: [32, 4, 2]."""
    lane = np.arange(WARP)[:, None, None]
    j = np.arange(4)[None, :, None]
    h = np.arange(2)[None, None, :]
    rows = lane // 4 + 8 * (j % 2) + 0 * h
    return rows, 8 * (j // 2) + 2 * (lane % 4) + h


def warpgroup_mma(w, a_rows: np.ndarray, b_desc: int, n: int, dtype: str, b_mn_major: bool,
                  d_in: np.ndarray, scale_d: bool) -> np.ndarray:
    """This warp's D registers [32, n / 2] after D = A B^T (+ D): `a_rows` the warp's 16 x 16 A."""
    cta = w.cta
    b_addrs, b_bytes = read_span(b_desc, n, b_mn_major)
    B = read_operand(cta, b_addrs, b_desc, dtype)
    w.wgmma_reads(b_bytes, "wgmma B")
    rows, cols = d_fragment(n)
    acc = a_rows.astype(np.float64) @ B.T.astype(np.float64)
    if scale_d:
        acc[rows, cols] += np.asarray(d_in, np.float32)
    cta.stats["wgmma"] += 1
    return acc[rows, cols].astype(np.float32)


def _shape(op) -> tuple[int, str, bool, bool]:
    """(N, dtype, B MN-major, A MN-major) of an nvvm.wgmma.mma_async, checked for what is modelled."""
    shape = str(op.attributes["shape"])
    n = int(re.search(r"n = (\d+)", shape).group(1))
    ta, tb, td = (str(op.attributes[k]) for k in ("typeA", "typeB", "typeD"))
    dtype = "bf16" if "bf16" in ta else "f16" if "f16" in ta else None
    if "m = 64" not in shape or "k = 16" not in shape or dtype is None or ta != tb or "f32" not in td:
        raise Unsupported(f"nvvm.wgmma.mma_async {shape} {ta} x {tb} -> {td}: m64nNk16 bf16/f16 -> f32 only")
    for k in ("scaleA", "scaleB"):
        if "one" not in str(op.attributes[k]):
            raise Unsupported(f"nvvm.wgmma.mma_async {k} {op.attributes[k]}: only scale 1 is modelled")
    return n, dtype, "row" in str(op.attributes["layoutB"]), "col" in str(op.attributes["layoutA"])


def _aligned(w, mask, what):
    if not mask.all():
        raise Fault(f"{what}: .sync.aligned executed by {int(mask.sum())} of 32 lanes")
    w.check_wgmma_fenced(what)


@semantics("nvvm.wgmma.mma_async")
def mma_async(p, op, a, r):
    """D = A B^T (+ D) with A and B from shared-memory descriptors (A's rows of this warp)."""
    n, dtype, b_mn_major, a_mn_major = _shape(op)
    scale_d = "zero" not in str(op.attributes["scaleD"])
    types = [str(v.type) for v in op.operands]
    acc = a[types.index(next(t for t in types if t.startswith("!llvm.struct")))]
    a_desc, b_desc = [s for s, t in zip(a, types) if t == "i64"]
    z = r[0]

    def run(env, mask, w):
        _aligned(w, mask, "wgmma.mma_async")
        ad = int(env[a_desc][0]) & (2**64 - 1)
        a_addrs, a_bytes = read_span(ad, M, a_mn_major, 16 * (w.wid % 4), 16 * (w.wid % 4) + 16)
        A = read_operand(w.cta, a_addrs, ad, dtype)
        w.wgmma_reads(a_bytes, "wgmma A")
        d = env[acc].value if isinstance(env[acc], PendingRegs) else env[acc]      # chaining is allowed
        out = warpgroup_mma(w, A, int(env[b_desc][0]) & (2**64 - 1), n, dtype, b_mn_major, d, scale_d)
        env[z] = PendingRegs(out, w, w.wgmma_group())
    return PLAIN, run


_ASM = re.compile(r"setp\.ne\.b32 p, \$(\d+), 0;\s*wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(bf16|f16)\."
                  r"(bf16|f16) \{[^}]*\}, \{\$(\d+), \$\d+, \$\d+, \$\d+\}, \$(\d+), p, 1, 1, ([01]);")


def mma_regs_asm(p, op, a, r, asm: str):
    """wgmma with A from registers, as fa4-lower-mma-sm90 writes it in inline asm (no nvvm op in
    LLVM 22): `setp.ne.b32 p, $scale_d, 0; wgmma.mma_async ... {d}, {a0..a3}, b_desc, p, 1, 1, trans_b`,
    the accumulator tied in and out."""
    m = _ASM.search(asm)
    if m is None:
        raise Unsupported(f"inline asm wgmma form {asm!r}")
    n = int(m.group(2))
    if m.group(3) != m.group(4):
        raise Unsupported(f"wgmma with A {m.group(3)} and B {m.group(4)}")
    nout = n // 2
    scale_idx, a0, b_idx, b_mn_major = int(m.group(1)), int(m.group(5)), int(m.group(6)), m.group(7) == "1"
    ins = a                             # asm operand $k (k >= nout) is op operand k - nout
    a_words = [ins[a0 - nout + j] for j in range(4)]
    b_desc, scale, d_in = ins[b_idx - nout], ins[scale_idx - nout], ins[6:]
    if len(d_in) != nout:
        raise Unsupported(f"inline asm wgmma: {len(d_in)} tied accumulator operands, expected {nout}")
    dtype, z = m.group(3), r[0]
    rows, cols = a_fragment()

    def run(env, mask, w):
        _aligned(w, mask, "wgmma.mma_async (A from registers)")
        words = np.stack([env[s] for s in a_words], axis=1).astype(np.uint32)          # [32, 4]
        halves = np.stack([words & 0xFFFF, words >> 16], axis=2).astype(np.uint16)    # [32, 4, 2]
        A = np.zeros((16, K), np.float32)
        A[rows, cols] = half_bits_to_f32(halves, dtype)
        d = np.stack([env[s].value if isinstance(env[s], PendingRegs) else env[s] for s in d_in], axis=1)
        sd = bool(np.asarray(env[scale])[0])
        out = warpgroup_mma(w, A, int(env[b_desc][0]) & (2**64 - 1), n, dtype, b_mn_major, d, sd)
        env[z] = PendingRegs(out, w, w.wgmma_group())
    return PLAIN, run


@semantics("nvvm.wgmma.fence.aligned")
def fence(p, op, a, r):
    """wgmma.fence: orders this warp's register (and shared-memory) writes before the wgmma that follow."""
    def run(env, mask, w):
        w.wgmma_fenced = True
    return PLAIN, run


@semantics("nvvm.wgmma.commit.group.sync.aligned")
def commit_group(p, op, a, r):
    def run(env, mask, w):
        w.wgmma_commit()
    return PLAIN, run


@semantics("nvvm.wgmma.wait.group.sync.aligned")
def wait_group(p, op, a, r):
    pending = ir.IntegerAttr(op.attributes["group"]).value

    def run(env, mask, w):
        yield from w.wgmma_wait(pending)
    return BLOCKING, run
