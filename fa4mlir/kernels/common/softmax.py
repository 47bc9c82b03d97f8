"""Arch-neutral pieces of the online softmax: the polynomial exp2 and the lazy-rescale max update.

Both attention kernels (sm_90a registers, sm_100a tensor memory) call these; the numpy twins below
compute the same float32 arithmetic so that the error can be measured without a GPU.

Polynomial exp2 (FlashAttention-4's trick to take load off the SFU): for x >= -126,
    2^x = 2^j * 2^f,  j = round(x) (to nearest),  f = x - j in [-1/2, 1/2],
    2^f ~ p(f) = 1 + f * (C1 + f * (C2 + f * C3))        (Horner, three FMAs)
and j is added to p's exponent field. Every step runs on the FMA and integer pipes: j comes
from adding 1.5 * 2^23 (the float32 add rounds x to an integer, which lands in the low mantissa
bits of the sum), not from floor / float-to-int conversions, which on sm_90 issue to the same
quarter-rate pipe as ex2 and would cancel the point. The coefficients minimise the maximum
relative error on [-1/2, 1/2] with p(0) = 1; the fit comes out with p(1/2) = 2 p(-1/2), so the
pieces meet where j steps: max relative error 1.01e-4 (~2^-13), far below bf16/f16's rounding of
P (2^-9 / 2^-12), exact at integers. Inputs below -126 return 0 (the sum needs a normal
exponent), so masked scores (-inf) still give p = 0 exactly. A NaN score on a polynomial lane does
not come out NaN on the GPU (the exponent add turns the canonical NaN into a large finite value;
the old floor-based version clamped it to 2^-126): scaling by a float 2^j instead kept NaN but cost
sm_100a's ptxas route ~200 bytes of spills.

Lazy rescale (FlashAttention-4): the running max m a row's P and O are relative to moves only
when the new block's max exceeds it by more than `threshold` (log2 units, i.e. after the scale);
otherwise m stays, P may reach 2^threshold (fine in float32 and bf16/f16) and O needs no rescale
(alpha = 1). The output is unchanged in exact arithmetic: O / l is invariant to the choice of m.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ... import dsl
from ...dsl import Value, const, exp2, fma, select

# p(f) = 1 + f*(C1 + f*(C2 + f*C3)) ~ 2^f on [-1/2, 1/2], fitted here by Lawson's iteration (minimax
# relative error on 20001 points); stored as float32 values.
EXP2_POLY_C1 = float(np.float32(0.6932829022407532))
EXP2_POLY_C2 = float(np.float32(0.2422109991312027))
EXP2_POLY_C3 = float(np.float32(0.05500894784927368))
EXP2_POLY_MIN_X = -126.0      # below: 0 (2^-126 is the smallest normal float32)
ROUND_MAGIC = 12582912.0      # 1.5 * 2^23: x + this rounds x to an integer, kept in the low mantissa bits
DEFAULT_RESCALE_THRESHOLD = 8.0


def exp2_poly(x: Value) -> Value:
    """2**x for float32 x < 128 on the FMA/ALU pipes (no SFU, no conversion): see the module note.
    Softmax inputs are <= 0, or <= the threshold under lazy rescale; the relative error is the same
    for every integer part (it is p's error on the fraction)."""
    t = x + ROUND_MAGIC
    f = x - (t - ROUND_MAGIC)           # both subtractions exact: f = x - round(x)
    p = fma(fma(fma(f, EXP2_POLY_C3, const(EXP2_POLY_C2, "f32")), f, const(EXP2_POLY_C1, "f32")), f,
            const(1.0, "f32"))
    # * 2^j: t's bits end in j (two's complement), so adding them << 23 adds j to p's exponent
    r = (p.bitcast("i32") + (t.bitcast("i32") << 23)).bitcast("f32")
    return select(x.lt(EXP2_POLY_MIN_X), const(0.0, "f32"), r)


def exp2_mixed(values: Iterable, poly_stride: int) -> list:
    """exp2 of each value: element i uses the polynomial when `poly_stride` and i % poly_stride ==
    poly_stride - 1 (1 in poly_stride on the FMA pipes), the hardware ex2.approx otherwise.
    `values` may be a generator: each value is then built right before its exp2 (the op order the
    sm_90a kernel's measured schedule has)."""
    if poly_stride < 0 or poly_stride == 1:
        raise ValueError(f"poly_stride must be 0 (hardware exp2 only) or >= 2, got {poly_stride}")
    return [exp2_poly(v) if poly_stride and i % poly_stride == poly_stride - 1 else exp2(v)
            for i, v in enumerate(values)]


def max_update(m_old: Value, block_max: Value, scale_log2: Value, threshold: float):
    """One row's running-max step. Returns (m, alpha, neg_m_scaled): the max P and O are relative to
    after this block, the factor O and l are rescaled by, and -m * scale_log2 (0 for a row that has
    seen no key yet, so that p = exp2(s * scale_log2 + neg_m_scaled) never computes inf - inf).
    threshold = 0: m always follows the max (classic online softmax); > 0: lazy rescale."""
    m_new = dsl.fmax(m_old, block_max)
    if threshold > 0:
        # grow is NaN when both are -inf (no key yet): the comparison is false and m stays -inf
        grow = (m_new - m_old) * scale_log2
        moved = grow.gt(threshold)
        m = select(moved, m_new, m_old)
    else:
        m = m_new
    neg_m_scaled = select(m.eq(float("-inf")), const(0.0, "f32"), const(0.0, "f32") - m * scale_log2)
    # m_old = -inf (first visible key): exp2(-inf) = 0, and O, l are 0 anyway
    alpha = exp2(fma(m_old, scale_log2, neg_m_scaled))
    if threshold > 0:
        alpha = select(moved, alpha, const(1.0, "f32"))
    return m, alpha, neg_m_scaled


# ---- numpy twins (float32 arithmetic as the kernels do it) -------------------------------------------
def _fma32(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def exp2_poly_reference(x: np.ndarray) -> np.ndarray:
    """The kernel's polynomial exp2, step by step in float32 (FMAs rounded once)."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        t = (x + np.float32(ROUND_MAGIC)).astype(np.float32)
        f = (x - (t - np.float32(ROUND_MAGIC))).astype(np.float32)
        p = _fma32(_fma32(_fma32(f, EXP2_POLY_C3, EXP2_POLY_C2), f, EXP2_POLY_C1), f, 1.0)
        r = (p.view(np.uint32) + (t.view(np.uint32) << np.uint32(23))).view(np.float32)
        return np.where(x < np.float32(EXP2_POLY_MIN_X), np.float32(0.0), r)


def exp2_poly_max_rel_error(lo: float = -126.0, hi: float = 0.0, points: int = 1 << 22) -> float:
    """Max |poly / 2^x - 1| over `points` evenly spaced float32 x in [lo, hi] (2^x in float64)."""
    x = np.linspace(lo, hi, points, dtype=np.float32)
    exact = np.exp2(x.astype(np.float64))
    return float(np.max(np.abs(exp2_poly_reference(x).astype(np.float64) / exact - 1.0)))


__all__ = ["exp2_poly", "exp2_mixed", "max_update", "exp2_poly_reference", "exp2_poly_max_rel_error",
           "DEFAULT_RESCALE_THRESHOLD"]
