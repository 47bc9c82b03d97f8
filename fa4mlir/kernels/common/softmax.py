"""Arch-neutral pieces of the online softmax: the polynomial exp2 and the lazy-rescale max update.

Both attention kernels (sm_90a registers, sm_100a tensor memory) call these; the numpy twins below
compute the same float32 arithmetic so that the error can be measured without a GPU.

Polynomial exp2 (FlashAttention-4's trick to take load off the SFU): for x <= 0,
    2^x = 2^floor(x) * 2^f,  f = x - floor(x) in [0, 1),
    2^f ~ p(f) = 1 + f * (C1 + f * (C2 + f * C3))        (Horner, three FMAs)
and 2^floor(x) is added to p's exponent field (an integer add of floor(x) << 23). The
coefficients minimise the maximum relative error on [0, 1) under p(0) = 1 and p(1) = 2, so the
approximation is continuous across integer x: max relative error 1.14e-4 (~2^-13), far below
bf16/f16's rounding of P (2^-9 / 2^-12). Inputs below -126 return 0 (a normal exponent field needs
floor(x) >= -126), so masked scores (-inf) still give p = 0 exactly.

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

# p(f) = 1 + f*(C1 + f*(C2 + f*C3)), fitted here by Lawson's iteration (minimax relative error on
# 20001 points of [0, 1]) with C1 = 1 - C2 - C3 (p(1) = 2); stored as float32 values.
EXP2_POLY_C1 = float(np.float32(0.6953766121725846))
EXP2_POLY_C2 = float(np.float32(0.2263309250814609))
EXP2_POLY_C3 = float(np.float32(0.07829246274595447))
EXP2_POLY_MIN_X = -126.0      # below: 0 (2^-126 is the smallest normal float32)
DEFAULT_RESCALE_THRESHOLD = 8.0


def exp2_poly(x: Value) -> Value:
    """2**x for float32 x < 128 on the FMA/ALU pipes (no SFU): see the module note. Softmax inputs
    are <= 0, or <= the threshold under lazy rescale; the relative error is the same for every
    integer part (it is p's error on the fraction)."""
    xc = dsl.fmax(x, EXP2_POLY_MIN_X)
    xi = dsl.floor(xc)
    f = xc - xi
    p = fma(fma(fma(f, EXP2_POLY_C3, const(EXP2_POLY_C2, "f32")), f, const(EXP2_POLY_C1, "f32")), f,
            const(1.0, "f32"))
    bits = p.bitcast("i32") + (xi.to("i32") << 23)
    return select(x.lt(EXP2_POLY_MIN_X), const(0.0, "f32"), bits.bitcast("f32"))


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
    xc = np.maximum(x, np.float32(EXP2_POLY_MIN_X))
    xi = np.floor(xc)
    f = (xc - xi).astype(np.float32)
    p = _fma32(_fma32(_fma32(f, EXP2_POLY_C3, EXP2_POLY_C2), f, EXP2_POLY_C1), f, 1.0)
    bits = p.view(np.int32) + (xi.astype(np.int32) << 23)
    return np.where(x < EXP2_POLY_MIN_X, np.float32(0.0), bits.view(np.float32))


def exp2_poly_max_rel_error(lo: float = -126.0, hi: float = 0.0, points: int = 1 << 22) -> float:
    """Max |poly / 2^x - 1| over `points` evenly spaced float32 x in [lo, hi] (2^x in float64)."""
    x = np.linspace(lo, hi, points, dtype=np.float32)
    exact = np.exp2(x.astype(np.float64))
    return float(np.max(np.abs(exp2_poly_reference(x).astype(np.float64) / exact - 1.0)))


__all__ = ["exp2_poly", "exp2_mixed", "max_update", "exp2_poly_reference", "exp2_poly_max_rel_error",
           "DEFAULT_RESCALE_THRESHOLD"]
