"""The arch-neutral FlashAttention-4 softmax pieces (fa4mlir/kernels/common/softmax.py), deviceless.

* the polynomial exp2, through its float32 numpy twin (the kernel's arithmetic step by step): max
  relative error on the softmax input range [-126, 0], exact at integers, 0 for -inf and below -126,
  monotone to within one float32 ulp (so P never reorders scores beyond bf16/f16 rounding);
* the lazy-rescale update rule of `max_update`, simulated here in float64 over key blocks exactly as
  the module note states it: the output and the LSE equal the plain softmax whether the max creeps
  up by less than the threshold (P > 1 happens) or jumps (O is rescaled).
"""
import numpy as np
import pytest

from fa4mlir.kernels.common import softmax

POLY_MAX_REL_ERROR = 1.05e-4   # the module note claims 1.01e-4 (~2^-13); bf16/f16 round P at 2^-9 / 2^-12
F32_ULP_REL = 2.0 ** -23


def test_poly_max_relative_error_on_the_softmax_range():
    err = softmax.exp2_poly_max_rel_error(-126.0, 0.0)
    print(f"exp2_poly max relative error on [-126, 0]: {err:.4e}")
    assert 0 < err <= POLY_MAX_REL_ERROR


def test_poly_fractional_part_error_is_the_same_in_every_binade():
    """2^x = 2^j * p(x - j), j = round(x): the relative error only depends on x - j, so one unit
    interval near 0 and one near -126 see the same error as the whole range."""
    whole = softmax.exp2_poly_max_rel_error(-126.0, 0.0)
    for lo in (-1.0, -64.0, -126.0):
        err = softmax.exp2_poly_max_rel_error(lo, lo + 1.0, points=1 << 18)
        assert err <= POLY_MAX_REL_ERROR and err == pytest.approx(whole, rel=0.05), (lo, err, whole)


def test_poly_is_exact_at_zero_and_at_integers():
    assert softmax.exp2_poly_reference(np.float32(0.0)) == np.float32(1.0)
    x = np.arange(-126, 1, dtype=np.float32)
    got = softmax.exp2_poly_reference(x).astype(np.float64)
    exact = np.exp2(x.astype(np.float64))
    assert np.all(np.abs(got / exact - 1.0) <= F32_ULP_REL), x[np.abs(got / exact - 1.0) > F32_ULP_REL]


def test_poly_is_zero_below_the_normal_range_and_for_minus_inf():
    x = np.array([-np.inf, -1e30, -200.0, -126.5, -127.0], dtype=np.float32)
    assert np.all(softmax.exp2_poly_reference(x) == 0.0)
    # -126 itself is the smallest normal float32, not 0
    assert softmax.exp2_poly_reference(np.float32(-126.0)) == np.float32(2.0 ** -126)


def test_poly_is_monotone_non_decreasing():
    """Non-decreasing on a dense grid of the whole range; on every float32 within 2^16 ulps of 0
    and of the points where j = round(x) steps (half-integers, where p(1/2) 2^j meets p(-1/2)
    2^(j+1)), it never drops by more than one float32 ulp (Horner's roundings dip by up to
    8.4e-8 relative just above -1/2), far below bf16/f16's rounding of P."""
    grid = np.linspace(-130.0, 0.0, 1 << 22, dtype=np.float32)
    y = softmax.exp2_poly_reference(grid)
    assert np.all(np.diff(y) >= 0), grid[1:][np.diff(y) < 0][:5]
    for centre in (-2.0 ** -24, -0.5, -1.5, -64.5, -125.5):
        bits = int(np.array([centre], dtype=np.float32).view(np.uint32)[0])
        near = (bits + np.arange(-(1 << 16), 1 << 16)).astype(np.uint32).view(np.float32)
        near = np.sort(np.append(near, np.float32(0.0)))
        y = softmax.exp2_poly_reference(near).astype(np.float64)
        drop = -np.diff(y) / y[1:]
        assert np.all(drop <= F32_ULP_REL), (centre, near[1:][drop > F32_ULP_REL][:5])


# ---- lazy rescale: the update rule of max_update, in float64 ------------------------------------

def max_update_rule(m_old, block_max, scale_log2, threshold):
    """max_update's rule (kernels/common/softmax.py) on numpy rows: (m, alpha, neg_m_scaled)."""
    with np.errstate(invalid="ignore"):   # -inf - -inf = NaN: the comparison is false, m stays -inf
        m_new = np.maximum(m_old, block_max)
        if threshold > 0:
            moved = (m_new - m_old) * scale_log2 > threshold
            m = np.where(moved, m_new, m_old)
        else:
            moved = np.ones_like(m_new, dtype=bool)
            m = m_new
        neg_m_scaled = np.where(m == -np.inf, 0.0, -m * scale_log2)
        alpha = np.exp2(m_old * scale_log2 + neg_m_scaled)
        alpha = np.where(moved, alpha, 1.0)
    return m, alpha, neg_m_scaled


def online_softmax(s, v, scale_log2, block, threshold):
    """The kernel's loop over key blocks: returns (O, LSE in natural log, max P seen, rescales)."""
    rows = s.shape[0]
    m = np.full(rows, -np.inf)
    l = np.zeros(rows)
    o = np.zeros((rows, v.shape[1]))
    p_max, rescales = 0.0, 0
    for j0 in range(0, s.shape[1], block):
        sb, vb = s[:, j0:j0 + block], v[j0:j0 + block]
        m_old = m
        m, alpha, neg = max_update_rule(m_old, sb.max(axis=1), scale_log2, threshold)
        p = np.exp2(sb * scale_log2 + neg[:, None])
        p_max = max(p_max, float(p.max()))
        rescales += int(np.sum((alpha != 1.0) & (m_old != -np.inf)))
        l = l * alpha + p.sum(axis=1)
        o = o * alpha[:, None] + p @ vb
    lse = (m * scale_log2 + np.log2(l)) * np.log(2.0)
    return o / l[:, None], lse, p_max, rescales


def plain_softmax(s, v, scale_log2):
    z = s * scale_log2 * np.log(2.0)       # natural-log scores
    zmax = z.max(axis=1, keepdims=True)
    e = np.exp(z - zmax)
    return (e @ v) / e.sum(axis=1, keepdims=True), (np.log(e.sum(axis=1)) + zmax[:, 0])


SCALE_LOG2 = 0.125 * 1.4426950408889634
BLOCK = 128
THRESHOLD = softmax.DEFAULT_RESCALE_THRESHOLD


def scores(kind: str, rows=16, keys=1000, seed=0):
    """Raw scores [rows, keys] (before the scale). 'creep': every row's max grows by ~5 log2 units
    per block (< the threshold, so m stays for a block or two and P exceeds 1); 'jump': one block
    raises the max by ~40 log2 units; 'masked_first': the first block is -inf (no key yet)."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((rows, keys))
    if kind == "creep":
        s = s + np.arange(keys)[None, :] * (5.0 / BLOCK / SCALE_LOG2)
    elif kind == "jump":
        s[:, 3 * BLOCK:] += 40.0 / SCALE_LOG2
    elif kind == "masked_first":
        s[:, :BLOCK] = -np.inf
        s[: rows // 2, BLOCK:2 * BLOCK] = -np.inf   # half the rows see their first key in block 2
    return s


@pytest.mark.parametrize("kind", ["random", "creep", "jump", "masked_first"])
def test_lazy_rescale_equals_plain_softmax(kind):
    s = scores(kind)
    v = np.random.default_rng(1).standard_normal((s.shape[1], 64))
    ref_o, ref_lse = plain_softmax(s, v, SCALE_LOG2)
    o, lse, p_max, rescales = online_softmax(s, v, SCALE_LOG2, BLOCK, THRESHOLD)
    np.testing.assert_allclose(o, ref_o, rtol=1e-6, atol=1e-9 * np.abs(ref_o).max())
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-6)
    assert p_max <= 2.0 ** THRESHOLD
    if kind == "creep":
        assert p_max > 1.0, "the creeping max must leave P > 1 for a block"
        assert rescales > 0, "the max grows by more than the threshold over several blocks"
    if kind == "jump":
        assert rescales == s.shape[0], "every row's max jumps once: one rescale each"
    if kind == "random":
        assert rescales == 0, "N(0, 1) scores never grow by 8 log2 units: O is never rescaled"
    # the classic rule (threshold 0) agrees too, with P <= 1
    o0, lse0, p_max0, _ = online_softmax(s, v, SCALE_LOG2, BLOCK, 0.0)
    np.testing.assert_allclose(o0, ref_o, rtol=1e-6, atol=1e-9 * np.abs(ref_o).max())
    np.testing.assert_allclose(lse0, ref_lse, rtol=1e-6)
    assert p_max0 <= 1.0


def test_lazy_m_lags_the_true_max_by_less_than_the_threshold():
    """The invariant that bounds P: after every block, (true max - m) * scale_log2 <= threshold."""
    s = scores("creep", keys=2048)
    m = np.full(s.shape[0], -np.inf)
    for j0 in range(0, s.shape[1], BLOCK):
        m, _, _ = max_update_rule(m, s[:, j0:j0 + BLOCK].max(axis=1), SCALE_LOG2, THRESHOLD)
        lag = (s[:, :j0 + BLOCK].max(axis=1) - m) * SCALE_LOG2
        assert np.all((lag >= 0) & (lag <= THRESHOLD)), lag


def test_interpreter_computes_the_kernel_polynomial_bit_exactly():
    """The fa4 interpreter runs exp2_poly's IR (FADDs, three FMAs, the exponent shift, the select) to the
    same float32 bits as exp2_poly_reference, so interpreter checks of poly kernels (the softcap
    kernels' default, [D-sfu-poly]) see the GPU's polynomial lanes exactly."""
    from fa4mlir import interpret
    from fa4mlir.dsl.kernel import KernelBuilder
    kb = KernelBuilder("poly", arch="sm_90a", block=(128, 1, 1))
    x_gmem, p_gmem = kb.param_ptr("x"), kb.param_ptr("p")
    with kb.body():
        t = kb.thread_idx(0)
        for k in range(4):
            x = kb.load(kb.gep(x_gmem, t * 4 + k, "f32"), "f32")
            kb.store(softmax.exp2_poly(x), kb.gep(p_gmem, t * 4 + k, "f32"))
    special = [-np.inf, 0, -1, -0.5, 0.5, -126, -125.75, -126.5, 3.25, -7.5, -0.49999997, 0.49999997]
    x = np.resize(np.concatenate([np.linspace(-130, 8, 500), special]), 512).astype(np.float32)
    p = np.zeros(512, np.float32)
    interpret.load(kb.finish()).launch((1,), {"x": x, "p": p})
    assert np.array_equal(p.view(np.uint32), softmax.exp2_poly_reference(x).view(np.uint32))
