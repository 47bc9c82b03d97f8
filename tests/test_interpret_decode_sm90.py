"""Deviceless: the FP8 (e4m3) sm_90a decode kernel executed by the interpreter, one case per scale
granularity (per tensor, per KV head, per page or token block and KV head), combined on the host
(testing_kvcache.combine_splits: the combine kernel's math) and checked by the FA rule against the
float64 reference of the same codes and scales (testing_kvcache.kvcache_reference: each row
dequantised float32(e4m3) x float32(scale), as the kernel's exact cvt plus its scaled S and P
columns compute it), PyTorch's low-precision run attending over those rows rounded to bf16.

The cases hold a partial last tile, NaN codes in every row past the lengths and in unused pages
(note "NaN past L_b" of attention_decode_sm90), GQA packed 2 query heads per KV head, and a
sequence that spans three KV tiles (the K/V ring and the f16 tiles are reused).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir import interpret  # noqa: E402
from fa4mlir.attention import kvcache as kc  # noqa: E402
from fa4mlir.attention.kvcache_call import configs_for  # noqa: E402
from fa4mlir.kernels import attention_decode_sm90  # noqa: E402
from fa4mlir.kernels import attention_decode_sm90_config as dec  # noqa: E402
from fa4mlir.runtime import TensorInfo  # noqa: E402
from fa4mlir.testing import attention_math, fa_rule  # noqa: E402
from fa4mlir.testing_kvcache import combine_splits, e4m3_decode, e4m3_encode, kvcache_reference  # noqa: E402

LENGTHS = (150, 37)            # tokens per sequence: 3 KV tiles of 64 (the last partial), and 1
HEADS, KV_HEADS, D = 4, 2, 128
PAGE, CAPACITY = 16, 192       # paged cases: 12 pages per sequence; a contiguous cache holds CAPACITY rows
SCALE_BLOCK = 16               # a contiguous cache's block scales: one per 16 tokens
NAN = 0x7F                     # the e4m3fn NaN code


def _info(a: np.ndarray, dtype: str) -> TensorInfo:
    strides = tuple(s // a.itemsize for s in a.strides)
    return TensorInfo(1 << 20, a.shape, strides, dtype, "cuda")


def _token_scales(scale, grain: str, page, table, b: int, t: np.ndarray) -> np.ndarray:
    """[tokens, KV_HEADS] scales of sequence b's tokens t."""
    if grain in ("tensor", "kv_head"):
        return np.broadcast_to(scale, (len(t), KV_HEADS))
    return scale[b, t // SCALE_BLOCK] if page is None else scale[table[b][t // PAGE]]


def _case(page: int | None, grain: str, seed: int = 0) -> dict:
    """q (bf16 bits), e4m3 caches (NaN past each length and in unused pages), scales, lengths, table."""
    rng = np.random.default_rng(seed)
    batch = len(LENGTHS)
    q = torch.randn(batch, 1, HEADS, D, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    if page is None:
        shape, table = (batch, CAPACITY, KV_HEADS, D), None
        scale_shape = {"tensor": (1,), "kv_head": (KV_HEADS,), "block": (batch, CAPACITY // SCALE_BLOCK, KV_HEADS)}
    else:
        pages = batch * CAPACITY // PAGE + 3
        shape = (pages, PAGE, KV_HEADS, D)
        table = rng.permutation(pages)[:batch * CAPACITY // PAGE].reshape(batch, -1).astype(np.int32)
        scale_shape = {"tensor": (1,), "kv_head": (KV_HEADS,), "block": (pages, KV_HEADS)}
    out = {"q": q, "lens": np.array(LENGTHS, np.int32), "table": table}
    for name in ("k", "v"):
        scale = ((1 + rng.random(scale_shape[grain])) / 32).astype(np.float32)
        codes = np.full(shape, NAN, np.uint8)
        for b, n in enumerate(LENGTHS):
            t = np.arange(n)
            where = (np.full(n, b), t) if page is None else (table[b][t // PAGE], t % PAGE)
            s = _token_scales(scale, grain, page, table, b, t)
            codes[where] = e4m3_encode(rng.standard_normal((n, KV_HEADS, D)) / s[..., None])
        out[f"{name}_cache"], out[f"{name}_scale"] = codes, scale
    return out


def _interpret(page: int | None, grain: str, c: dict, variant: str = "default") -> tuple[np.ndarray, np.ndarray]:
    """The split kernel over the case (two splits per sequence: one split would take the unsplit
    variant, tests/test_kvcache_interpret.py), combined on the host; ``variant``: the FP8 kernel
    variant the plan picks (dec.FP8_VARIANTS, set through FA4MLIR_DECODE_FP8_VARIANT by the caller)."""
    q_bits = c["q"].view(torch.int16).numpy().view(np.uint16)
    lens = c["lens"]
    table = c["table"] if c["table"] is not None else lens
    problem = kc.check_kvcache_inputs(
        _info(q_bits, "bf16"), _info(c["k_cache"], "e4m3"), _info(c["v_cache"], "e4m3"), _info(lens, "i32"),
        None if c["table"] is None else _info(table, "i32"), k_scale=_info(c["k_scale"], "f32"),
        v_scale=_info(c["v_scale"], "f32"))
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=2,
                                                return_lse=False), 132)
    cfg, _ = configs_for(plan)
    assert cfg == dec.fp8_variant(dec.default_config("bf16", D, page, grain), variant, plan.gqa.rows) and cfg.fp8
    assert plan.bn == cfg.bn
    p = plan.problem
    tensors = {"q": q_bits, "k_cache": c["k_cache"], "v_cache": c["v_cache"], "cache_seqlens": lens,
               "page_table": table, "k_scale": c["k_scale"], "v_scale": c["v_scale"],
               "k_pool": c["k_cache"], "v_pool": c["v_cache"],
               "o_partial": np.full((plan.num_splits, *p.out_shape), np.nan, np.float32),
               "lse_partial": np.full((plan.num_splits, *p.lse_shape), np.nan, np.float32)}
    q_strides = tuple(s // 2 for s in q_bits.strides[:3])
    cache_strides = {n: tuple(s for s in c[n].strides[:3]) for n in ("k_cache", "v_cache")}
    args = dec.split_launch_args(plan, tensors, q_strides, table.strides[0] // 4 if c["table"] is not None else 0,
                                 cache_strides)
    kernel = interpret.load(attention_decode_sm90.build(cfg))
    kernel.launch(dec.split_grid(plan), args)
    return combine_splits(tensors["o_partial"], tensors["lse_partial"])


def _lowp(c: dict, page: int | None, grain: str) -> tuple:
    """PyTorch's own low-precision attention over the dequantised rows rounded to bf16, per sequence."""
    outs, lses = [], []
    for b, n in enumerate(LENGTHS):
        t = np.arange(n)
        rows = []
        for name in ("k", "v"):
            codes = c[f"{name}_cache"][(b, t)] if page is None else c[f"{name}_cache"][(c["table"][b][t // PAGE],
                                                                                       t % PAGE)]
            s = _token_scales(c[f"{name}_scale"], grain, page, c["table"], b, t)
            rows.append(torch.from_numpy(e4m3_decode(codes) * s[..., None]).to(torch.bfloat16)[None])
        o, lse = attention_math(c["q"][b:b + 1], rows[0], rows[1], D ** -0.5, True, torch.bfloat16)
        outs.append(o[0].double().numpy())
        lses.append(lse[0].double().numpy())
    return np.stack(outs), np.stack(lses)


CASES = [(None, "tensor"), (PAGE, "kv_head"), (PAGE, "block"), (None, "block")]
# the FP8 variants (dec.FP8_VARIANTS) named explicitly
VARIANT_CASES = [("swapab", None, "tensor"), ("swapab", PAGE, "kv_head"), ("swapabw", None, "tensor"), ("swapabw", PAGE, "kv_head")] \
    + [("smem", page, grain) for page, grain in CASES if grain != "block"]
# (CASES runs "default": FP8_DEFAULT_RULE's swap AB for their tensor / kv_head scales at 2 packed rows, the
# conversion-through-SMEM kernel for block scales; "smem" keeps the former default's kernel covered)


@pytest.mark.parametrize("page,grain", CASES)
def test_fp8_decode_through_the_interpreter(page, grain):
    _check(page, grain, "default")


@pytest.mark.parametrize("variant,page,grain", VARIANT_CASES)
def test_fp8_decode_variant_through_the_interpreter(variant, page, grain, monkeypatch):
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    _check(page, grain, variant)


def _check(page, grain, variant, c: dict | None = None):
    """The FA rule for ``variant`` over case ``c`` (default: _case's; NaN codes only past the lengths)."""
    c = c or _case(page, grain)
    out, lse = _interpret(page, grain, c, variant)
    ref = kvcache_reference(c["q"].float().numpy(), c["k_cache"], c["v_cache"], c["lens"], c["table"],
                            softmax_scale=D ** -0.5, causal=True, k_scale=c["k_scale"], v_scale=c["v_scale"])
    low_o, low_l = _lowp(c, page, grain)
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    errs = {"out": np.abs(out - ref["out"]).max(), "out_lowp": np.abs(low_o - ref["out"]).max(),
            "lse": np.abs(lse - ref["lse"]).max(), "lse_lowp": np.abs(low_l - ref["lse"]).max()}
    ok_out, bound = fa_rule(errs["out"], errs["out_lowp"])
    ok_lse, lse_bound = fa_rule(errs["lse"], errs["lse_lowp"])
    assert ok_out and ok_lse, {**errs, "bound": bound, "lse_bound": lse_bound}
    return out, lse


@pytest.mark.parametrize("variant,page,grain", [(v, page, grain) for v in ("swapab", "swapabw")
                                                 for page, grain in ((None, "kv_head"), (PAGE, "tensor"))])
def test_swapab_at_the_bench_group_through_the_interpreter(variant, page, grain, monkeypatch):
    """The swap_ab variants (attention_decode_sm90_swapab, notes "Swap AB", "Warp partials") at bench
    decode's GQA group 4 (8 query heads over 2 KV heads): 4 packed rows of the 8 S^T columns."""
    monkeypatch.setitem(globals(), "HEADS", 8)
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    c = _case(page, grain)
    assert c["q"].shape[2] == 8
    _check(page, grain, variant, c)


def test_swapab_refuses_more_rows_than_its_columns(monkeypatch):
    """More than SWAP_AB_ROWS packed query rows (group 8 x seqlen_q 2): a typed error before launch."""
    from fa4mlir.attention.errors import UnsupportedFeatureError
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, "swapab")
    c = _case(None, "tensor")
    q = np.zeros((len(LENGTHS), 2, 16, D), np.uint16)
    problem = kc.check_kvcache_inputs(
        _info(q, "bf16"), _info(c["k_cache"], "e4m3"), _info(c["v_cache"], "e4m3"), _info(c["lens"], "i32"), None,
        k_scale=_info(c["k_scale"], "f32"), v_scale=_info(c["v_scale"], "f32"))
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=2,
                                                return_lse=False), 132)
    assert plan.gqa.rows == 16
    with pytest.raises(UnsupportedFeatureError, match="swap_ab attends at most 8"):
        configs_for(plan)


def _run_unsplit(variant: str, c: dict, lens: np.ndarray) -> tuple:
    """``variant``'s unsplit kernel (one split) over case ``c`` with lengths ``lens``: (out as float64, lse)."""
    q_bits = c["q"].view(torch.int16).numpy().view(np.uint16)
    problem = kc.check_kvcache_inputs(
        _info(q_bits, "bf16"), _info(c["k_cache"], "e4m3"), _info(c["v_cache"], "e4m3"), _info(lens, "i32"), None,
        k_scale=_info(c["k_scale"], "f32"), v_scale=_info(c["v_scale"], "f32"))
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=None,
                                                return_lse=True), 132)
    cfg, combine = configs_for(plan)
    assert plan.unsplit and combine is None and cfg.swap_ab and cfg.unsplit
    assert cfg == dec.fp8_variant(dec.default_config("bf16", D, None, "kv_head", unsplit=True), variant)
    p = plan.problem
    out = np.full(p.out_shape, 0xFFFF, np.uint16)
    lse = np.full(p.lse_shape, np.nan, np.float32)
    tensors = {"q": q_bits, "k_cache": c["k_cache"], "v_cache": c["v_cache"], "cache_seqlens": lens,
               "page_table": lens, "out": out, "lse": lse, "k_scale": c["k_scale"], "v_scale": c["v_scale"],
               "k_pool": c["k_cache"], "v_pool": c["v_cache"]}
    args = dec.split_launch_args(plan, tensors, tuple(s // 2 for s in q_bits.strides[:3]), 0,
                                 {n: c[n].strides[:3] for n in ("k_cache", "v_cache")})
    interpret.load(attention_decode_sm90.build(cfg)).launch(plan.grid, args)
    return torch.from_numpy(out.astype(np.int32) << 16).view(torch.float32).double().numpy(), lse


@pytest.mark.parametrize("variant", ["swapab", "swapabw"])
def test_swapab_unsplit_through_the_interpreter(variant, monkeypatch):
    """The swap_ab variants' unsplit kernels (one split: O in bf16 and the LSE straight into out and lse,
    the epilogue fed by the S^T columns' sums, or the merged warp partials) at group 4, a contiguous
    cache, per-KV-head scales; then with the second sequence empty (O = +0, LSE = +inf)."""
    monkeypatch.setitem(globals(), "HEADS", 8)
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    c = _case(None, "kv_head")
    got, lse = _run_unsplit(variant, c, c["lens"])
    ref = kvcache_reference(c["q"].float().numpy(), c["k_cache"], c["v_cache"], c["lens"], None,
                            softmax_scale=D ** -0.5, causal=True, k_scale=c["k_scale"], v_scale=c["v_scale"])
    low_o, low_l = _lowp(c, None, "kv_head")
    assert np.isfinite(got).all() and np.isfinite(lse).all()
    ok_out, bound = fa_rule(np.abs(got - ref["out"]).max(), np.abs(low_o - ref["out"]).max())
    ok_lse, lse_bound = fa_rule(np.abs(lse - ref["lse"]).max(), np.abs(low_l - ref["lse"]).max())
    assert ok_out and ok_lse, (np.abs(got - ref["out"]).max(), bound, np.abs(lse - ref["lse"]).max(), lse_bound)
    empty, empty_lse = _run_unsplit(variant, c, np.array([LENGTHS[0], 0], np.int32))
    assert np.array_equal(empty[0], got[0]) and np.array_equal(empty_lse[0], lse[0])
    assert (empty[1] == 0).all() and np.isposinf(empty_lse[1]).all()
