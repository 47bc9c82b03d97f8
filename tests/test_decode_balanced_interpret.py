"""Deviceless: the balanced FP8 decode schedule (FP8 variant "balanced": attention_decode_sm90_balanced,
the combine's balanced_bn form; common/decode_balanced.py) executed by the interpreter, the decode
kernel and then the combine kernel, over ragged lengths 0, 1, page - 1, page, page + 1, a sequence cut
across three CTAs and a CTA that holds several whole sequences, at bench decode's GQA group 4; checked
by the FA rule against the float64 reference of the same codes and scales (empty sequences: O = +0,
LSE = +inf exactly). The same launch arguments then run other lengths (no host-side length: what a
CUDA graph replays)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir import interpret  # noqa: E402
from fa4mlir.attention import kvcache as kc  # noqa: E402
from fa4mlir.attention.kvcache_call import configs_for  # noqa: E402
from fa4mlir.kernels import attention_combine_sm90, attention_decode_sm90  # noqa: E402
from fa4mlir.kernels import attention_decode_sm90_config as dec  # noqa: E402
from fa4mlir.kernels.common import decode_balanced as db  # noqa: E402
from fa4mlir.runtime import TensorInfo  # noqa: E402
from fa4mlir.testing import attention_math, fa_rule  # noqa: E402
from fa4mlir.testing_kvcache import e4m3_decode, e4m3_encode, kvcache_reference  # noqa: E402

HEADS, KV_HEADS, D, PAGE = 8, 2, 128, 16
# tiles 0, 1, 1, 1, 1, 1, 11, 3 (19): over 5 CTAs, lo = 0, 4, 8, 12, 16: CTA 0 holds sequences 1-4
# whole, CTA 1 sequence 5 whole and the start of 6, which is cut across CTAs 1, 2, 3 (slots 3, 4, 6)
LENGTHS = (0, 1, PAGE - 1, PAGE, PAGE + 1, 64, 700, 130)
PARTS = 5
CAPACITY = 768
OTHER = (130, 0, 700, 1, 64, 17, 0, 300)    # a second step's lengths, same plan and arguments


def _info(a: np.ndarray, dtype: str) -> TensorInfo:
    return TensorInfo(1 << 20, a.shape, tuple(s // a.itemsize for s in a.strides), dtype, "cuda")


def _case(page: int | None, seed: int = 0, seqlen_q: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    batch = len(LENGTHS)
    q = torch.randn(batch, seqlen_q, HEADS, D, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    if page is None:
        shape, table = (batch, CAPACITY, KV_HEADS, D), None
    else:
        pages = batch * CAPACITY // page + 3
        shape = (pages, page, KV_HEADS, D)
        table = rng.permutation(pages)[:batch * CAPACITY // page].reshape(batch, -1).astype(np.int32)
    out = {"q": q, "table": table}
    for name in ("k", "v"):
        scale = ((1 + rng.random(KV_HEADS)) / 32).astype(np.float32)
        codes = np.full(shape, 0x7F, np.uint8)     # NaN codes everywhere past the lengths written below
        for b in range(batch):
            t = np.arange(CAPACITY)
            where = (np.full(CAPACITY, b), t) if page is None else (table[b][t // page], t % page)
            codes[where] = e4m3_encode(rng.standard_normal((CAPACITY, KV_HEADS, D)) / scale[:, None])
        out[f"{name}_cache"], out[f"{name}_scale"] = codes, scale
    return out


def _plan(c: dict, lens: np.ndarray, page, parts: int = PARTS):
    q_bits = c["q"].view(torch.int16).numpy().view(np.uint16)
    table = c["table"]
    problem = kc.check_kvcache_inputs(
        _info(q_bits, "bf16"), _info(c["k_cache"], "e4m3"), _info(c["v_cache"], "e4m3"), _info(lens, "i32"),
        None if table is None else _info(table, "i32"), k_scale=_info(c["k_scale"], "f32"),
        v_scale=_info(c["v_scale"], "f32"))
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=None,
                                                return_lse=True), 132)
    ctas = configs_for(plan)[0].ctas_per_sm       # 2; 3 for balanced3cta
    assert plan.parts == db.parts_for(132 * ctas, 1, KV_HEADS) and plan.grid == (plan.parts, KV_HEADS, 1)
    return q_bits, replace(plan, parts=parts, num_splits=2 * parts)


def _run(c: dict, lens: np.ndarray, page, parts: int = PARTS) -> tuple[np.ndarray, np.ndarray]:
    """Decode then combine through the interpreter: (out as float64, lse)."""
    q_bits, plan = _plan(c, lens, page, parts)
    cfg, combine = configs_for(plan)
    assert cfg.balanced and cfg.swap_ab and combine.balanced_bn == cfg.bn
    p = plan.problem
    table = c["table"] if c["table"] is not None else lens
    out = np.full(p.out_shape, 0xFFFF, np.uint16)
    tensors = {"q": q_bits, "k_cache": c["k_cache"], "v_cache": c["v_cache"], "cache_seqlens": lens,
               "page_table": table, "k_scale": c["k_scale"], "v_scale": c["v_scale"],
               "k_pool": c["k_cache"], "v_pool": c["v_cache"], "out": out,
               "lse": np.full(p.lse_shape, np.nan, np.float32),
               "o_partial": np.full(plan.o_partial_shape, np.nan, np.float32),
               "lse_partial": np.full(plan.lse_partial_shape, np.nan, np.float32)}
    args = dec.split_launch_args(plan, tensors, tuple(s // 2 for s in q_bits.strides[:3]),
                                 table.strides[0] // 4 if c["table"] is not None else 0,
                                 {n: c[n].strides[:3] for n in ("k_cache", "v_cache")})
    interpret.load(attention_decode_sm90.build(cfg)).launch(plan.grid, args)
    cargs = dec.combine_launch_args(plan, tensors, tuple(s // 2 for s in out.strides[:3]))
    interpret.load(attention_combine_sm90.build(combine)).launch(dec.combine_grid(plan), cargs)
    got = torch.from_numpy(out.astype(np.int32) << 16).view(torch.float32).double().numpy()
    return got, tensors["lse"]


def _lowp(c: dict, lens, page) -> tuple:
    outs, lses = {}, {}
    for b, n in enumerate(lens):
        if n == 0:
            continue
        t = np.arange(n)
        rows = []
        for name in ("k", "v"):
            codes = c[f"{name}_cache"][(b, t)] if page is None else c[f"{name}_cache"][(c["table"][b][t // page],
                                                                                       t % page)]
            rows.append(torch.from_numpy(e4m3_decode(codes) * c[f"{name}_scale"][:, None]).to(torch.bfloat16)[None])
        o, lse = attention_math(c["q"][b:b + 1], rows[0], rows[1], D ** -0.5, True, torch.bfloat16)
        outs[b], lses[b] = o[0].double().numpy(), lse[0].double().numpy()
    return outs, lses


def _check(c: dict, lens, page, parts: int = PARTS):
    got, lse = _run(c, lens, page, parts)
    ref = kvcache_reference(c["q"].float().numpy(), c["k_cache"], c["v_cache"], lens, c["table"],
                            softmax_scale=D ** -0.5, causal=True, k_scale=c["k_scale"], v_scale=c["v_scale"])
    low_o, low_l = _lowp(c, lens, page)
    errs = {"out": 0.0, "out_lowp": 0.0, "lse": 0.0, "lse_lowp": 0.0}
    sq = got.shape[1]
    for b, n in enumerate(lens):
        seen = np.array([n > 0 and t + n - sq >= 0 for t in range(sq)])     # causal, bottom-right
        # a row that sees no key: O = +0, LSE = +inf (FlashAttention's convention)
        assert (got[b][~seen] == 0).all() and not np.signbit(got[b][~seen]).any(), b
        assert np.isposinf(lse[b][:, ~seen]).all(), b
        if not seen.any():
            continue
        o, lo_, r = got[b][seen], lse[b][:, seen], ref["out"][b][seen]
        assert np.isfinite(o).all() and np.isfinite(lo_).all(), b
        errs["out"] = max(errs["out"], np.abs(o - r).max())
        errs["out_lowp"] = max(errs["out_lowp"], np.abs(low_o[b][seen] - r).max())
        errs["lse"] = max(errs["lse"], np.abs(lo_ - ref["lse"][b][:, seen]).max())
        errs["lse_lowp"] = max(errs["lse_lowp"], np.abs(low_l[b][:, seen] - ref["lse"][b][:, seen]).max())
    ok_out, bound = fa_rule(errs["out"], errs["out_lowp"])
    ok_lse, lse_bound = fa_rule(errs["lse"], errs["lse_lowp"])
    assert ok_out and ok_lse, {**errs, "bound": bound, "lse_bound": lse_bound}


def test_the_case_cuts_and_packs_as_described():
    counts = db.tile_counts(LENGTHS, 64)
    assert db.sequence_slots(counts, 6, PARTS) == [3, 4, 6]
    assert [i.batch for i in db.cta_items(counts, 0, PARTS)] == [1, 2, 3, 4]
    assert [(i.batch, i.final) for i in db.cta_items(counts, 1, PARTS)] == [(5, True), (6, False)]
    assert all(db.sequence_slots(counts, b, PARTS) is None for b in (1, 2, 3, 4, 5, 7))


@pytest.mark.parametrize("page", [PAGE, None])
def test_balanced_decode_through_the_interpreter(page, monkeypatch):
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, dec.BALANCED)
    c = _case(page)
    _check(c, np.array(LENGTHS, np.int32), page)


@pytest.mark.parametrize("variant,ctas", [("balanced3cta", 3)])
def test_balanced_ring_depth_variants_through_the_interpreter(variant, ctas, monkeypatch):
    """BALANCED_VARIANTS' other ring depth (3 stages at three CTAs per SM, its parts x 1.5): the same case, every ring
    position wrapping differently over the CTAs' items (19 tiles, 5 CTAs)."""
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    c = _case(PAGE, seed=3)
    lens = np.array(LENGTHS, np.int32)
    cfg = configs_for(_plan(c, lens, PAGE)[1])[0]
    assert cfg.stages == dec.BALANCED_VARIANTS[variant] and cfg.ctas_per_sm == ctas and cfg.balanced
    _check(c, lens, PAGE)


@pytest.mark.parametrize("variant", [dec.BALANCED, "balanced3cta"])
def test_balanced_decode_two_query_tokens(variant, monkeypatch):
    """seqlen_q 2 (8 packed rows: swap AB's most; balanced3cta: every column of O^T), causal bottom-right: token 0
    of the 1-token sequence sees no key (O = 0, LSE = +inf), and the pieces of a cut sequence mask their rows' last
    key apart."""
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, variant)
    _check(_case(None, seed=5, seqlen_q=2), np.array(LENGTHS, np.int32), None)


def test_balanced_decode_more_ctas_than_tiles(monkeypatch):
    """40 CTAs per KV head over 19 tiles: 19 hold one tile each, 21 exit at once; the 11-tile sequence is
    cut across 11 CTAs (the combine's lanes loop over 11 slots)."""
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, dec.BALANCED)
    counts = db.tile_counts(LENGTHS, 64)
    assert len(db.sequence_slots(counts, 6, 40)) == 11
    _check(_case(PAGE, seed=2), np.array(LENGTHS, np.int32), PAGE, parts=40)


def test_balanced_decode_other_lengths_same_arguments(monkeypatch):
    """The plan (grid, parts, workspaces) does not depend on the lengths: a second step's lengths run
    through the same plan (a replayed CUDA graph's situation)."""
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, dec.BALANCED)
    c = _case(PAGE, seed=1)
    lens = np.array(OTHER, np.int32)
    assert _plan(c, lens, PAGE)[1] == _plan(c, np.array(LENGTHS, np.int32), PAGE)[1]
    _check(c, lens, PAGE)


def test_the_plan_and_what_it_refuses(monkeypatch):
    """The balanced plan: parts CTAs per KV head from the SM count (one wave of two CTAs per SM), 2 parts
    split slots, the workspaces [slots, seqlen_q, heads, D] and [slots, heads, seqlen_q], out and lse in the
    decode's arguments, the lengths and parts in the combine's; a given num_splits or more than 8 packed
    rows is an UnsupportedFeatureError / ConfigError before launch."""
    from fa4mlir.attention.errors import FlashAttnInputError, UnsupportedFeatureError
    monkeypatch.setenv(dec.FP8_VARIANT_ENV, dec.BALANCED)
    monkeypatch.delenv(kc.BALANCED_WAVES_ENV, raising=False)
    c = _case(PAGE)
    lens = np.array(LENGTHS, np.int32)
    q_bits = c["q"].view(torch.int16).numpy().view(np.uint16)
    problem = kc.check_kvcache_inputs(
        _info(q_bits, "bf16"), _info(c["k_cache"], "e4m3"), _info(c["v_cache"], "e4m3"), _info(lens, "i32"),
        _info(c["table"], "i32"), k_scale=_info(c["k_scale"], "f32"), v_scale=_info(c["v_scale"], "f32"))
    plan = kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=None,
                                                return_lse=True), 132)
    assert (plan.parts, plan.num_splits, plan.grid, plan.unsplit) == (132, 264, (132, KV_HEADS, 1), False)
    assert plan.o_partial_shape == (264, 1, HEADS, D) and plan.lse_partial_shape == (264, HEADS, 1)
    names = {n: n for n in ("q", "k_cache", "v_cache", "cache_seqlens", "page_table", "k_scale", "v_scale",
                            "k_pool", "v_pool", "out", "lse", "o_partial", "lse_partial")}
    args = dec.split_launch_args(plan, names, (8 * D, 8 * D, D), 48, None)
    assert args["parts"] == 132 and args["out"] == "out" and args["lse"] == "lse"
    cargs = dec.combine_launch_args(plan, names, (8 * D, 8 * D, D))
    assert cargs["parts"] == 132 and cargs["cache_seqlens"] == "cache_seqlens" and cargs["batch"] == len(LENGTHS)
    monkeypatch.setenv(kc.BALANCED_WAVES_ENV, "2")         # two waves of CTA slots: twice the parts
    assert kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=None,
                                                return_lse=True), 132).parts == 264
    monkeypatch.setenv(kc.BALANCED_WAVES_ENV, "0")
    with pytest.raises(FlashAttnInputError, match="FA4MLIR_DECODE_BALANCED_WAVES"):
        kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=None,
                                            return_lse=True), 132)
    monkeypatch.delenv(kc.BALANCED_WAVES_ENV)
    with pytest.raises(UnsupportedFeatureError, match="num_splits=2 with the balanced"):
        kc.plan_problem(problem.with_options(causal=True, softmax_scale=D ** -0.5, num_splits=2,
                                             return_lse=True), 132)
    with pytest.raises(dec.ConfigError, match="balanced"):     # 16 packed rows: no swap AB to balance
        dec.fp8_variant(dec.default_config("bf16", D, PAGE, "kv_head"), dec.BALANCED, 16)
    with pytest.raises(dec.ConfigError, match="balanced"):
        dec.DecodeConfig(kv_dtype="e4m3", kv_scale="kv_head", stages=4, swap_ab=True, balanced=True,
                         unsplit=True).validate()
