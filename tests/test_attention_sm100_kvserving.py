"""Deviceless checks of the sm_100a kernel's masks and score modifiers on the KV-cache routes
(attention_sm100_kvserving, note "KV-cache serving"; issue 28 items 2 and 6): sliding windows, chunks,
softcap and sinks on the decode route (packed GQA rows; contiguous, 16-row page boxes, the row gather)
and on the paged two-Q-tile prefill CTA.

* config: the refusal that stays (packed ragged Q/K on these routes), names, the launch contract;
* compiled (nvJitLink LTO, as the kernel ships), every kvcache_serving_configs() kernel: 0 spills,
  setmaxnreg honoured, SMEM and TMEM within the plan, SASS with the tcgen05 GEMMs of its route, its K/V
  fetch (per-page boxes or 16-byte gather loads), MUFU.TANH with softcap, no local memory; the pipeline
  verifier accepting every schedule and rejecting one with a K release removed;
* interpreted (fa4mlir.interpret, nvvm stage, CPU): numerics by the FA rule against a float64 reference
  (fa4mlir.testing.compare_attention) per sequence, over a shuffled page table with NaN in every unused
  page and row and in O before the call: lengths 0, 1, page - 1, page + 1, 150 and 300 (a window of 100
  whose first KV block is skipped), 40 query tokens (two decode tiles of 32 tokens; rows that see no key
  where L_b < 40), each head its own sink. The kernels are interpreted, never run (no Blackwell GPU).
"""
from __future__ import annotations

import re
import time
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from fa4mlir.kernels.attention_sm100_config import (PAGED_LAUNCH_PARAMS, SINK_PARAMS, SOFTCAP_PARAMS, FA4Config,
                                                    code_shape, grid, launch_args, paged_launch_args)
from fa4mlir.kernels.attention_sm100_kvserving import DECODE, GQA, kvcache_serving_configs
from tests._sm100_helpers import (bf16_bits, check_resources, check_verifier_rejects_a_dropped_commit, compiled,
                                  paged_cache, role_budgets, sass_count, sass_of, verify_pipelines)

CONFIGS = kvcache_serving_configs()
SEQLEN_Q = 40             # two decode tiles of 32 tokens (group 4 packed into 128 rows)
SOFTCAP = 2.0


def _id(c: FA4Config) -> str:
    fetch = "gather" if c.gather else f"p{c.page_size}" if c.paged else "contig"
    return f"{'decode' if c.decode else 'prefill'}-{fetch}{'-e4m3' if c.fp8 else ''}{c.serving_tag()}"


# ---- config ---------------------------------------------------------------------------------------
def test_configs_are_supported_and_distinct_code_shapes():
    assert all(c.supported() == (True, "") for c in CONFIGS)
    assert len({code_shape(c) for c in CONFIGS}) == len(CONFIGS) == 9
    assert sum(c.fp8 for c in CONFIGS) == 1
    assert {c.gather for c in CONFIGS} == {True, False} and {c.decode for c in CONFIGS} == {True, False}
    assert any(c.decode and not c.paged for c in CONFIGS)


@pytest.mark.parametrize("kw,reason", [
    (dict(causal=True, varlen=True, page_size=16), "varlen with page_size=16, num_q_tiles=2"),
    (dict(causal=True, varlen=True, **DECODE), "ragged key lengths from cache_seqlens"),
    (dict(varlen=True, seqused_k=True, page_size=64, **DECODE), "packed ragged Q/K"),
    (dict(window_left=-3, page_size=16, **DECODE), "window_left and window_right must be >= -1"),
    (dict(window_left=5, window_right=0, page_size=16, **DECODE), "canonical"),
])
def test_refusals_say_why(kw, reason):
    ok, why = FA4Config(**GQA, **kw).supported()
    assert not ok and reason in why, why


def test_names_and_launch_contract():
    c = FA4Config(causal=True, softcap=True, sinks=True, page_size=64, **GQA, **DECODE)
    assert c.name_route() == "_paged64_decode_softcap_sink" and not c.plain
    assert c.launch_params == (*PAGED_LAUNCH_PARAMS, *SOFTCAP_PARAMS, *SINK_PARAMS)
    problem = SimpleNamespace(batch=2, heads=8, seqlen_q=3, softmax_scale=0.125, softcap=30.0)
    t = {n: n for n, _ in c.launch_params}
    args = paged_launch_args(c, problem, t, num_pages=9, page_table_stride=4)
    assert list(args) == [n for n, _ in c.launch_params] and args["sinks"] == "sinks"
    assert args["softcap_scale"] == pytest.approx(0.125 / 30) and args["scale_log2"] == pytest.approx(30 * 1.4426950408889634)
    assert "wl100 wr0" in FA4Config(causal=True, window_left=100, page_size=16, **GQA, **DECODE).description()


# ---- compiled -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_compiles_with_zero_spills_and_sass(cfg):
    art, seconds = compiled(cfg, key="test-sm100-kvserving")
    check_resources(cfg, art, seconds)
    sass = sass_of(art)
    count = lambda op: sass_count(sass, op)  # noqa: E731
    assert role_budgets(sass) == {48, 80, 192}
    s_mmas, pv_mmas = cfg.padded_head_dim // 16, cfg.bn // 16
    if cfg.decode:   # one loop body: S0, P0 V
        assert count("UTCHMMA") == s_mmas + pv_mmas
    else:            # block 0 + the loop + the last P1 V, as the dense kernel
        assert count("UTCHMMA") == (2 * s_mmas + pv_mmas) + (2 * s_mmas + 2 * pv_mmas) + pv_mmas
    assert count("LDTM") > 0 and count("STTM") > 0 and count("UTCBAR") >= (6 if cfg.decode else 14)
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert ("MUFU.TANH" in sass) == cfg.softcap
    q_boxes = cfg.padded_head_dim // 64
    if cfg.gather:   # K and V by 16-byte loads and shared stores; Q's boxes only
        assert count("UTMALDG") == q_boxes and re.search(r"\bLDG\.E\.128", sass) and re.search(r"\bSTS\.128", sass)
    elif cfg.fp8:    # e4m3 boxes of a page's rows, unswizzled (one per box: D bytes a row), converted by F2FP
        assert count("UTMALDG") >= 2 * (cfg.bn // cfg.box_rows) + 1 and re.search(r"\bF2FP\.", sass)
    else:            # Q, and per K/V tile its boxes (per page, or one of BN rows) per 64-column chunk
        assert count("UTMALDG") >= 2 * (cfg.bn // cfg.box_rows) * q_boxes + 1
    assert count("UTMASTG") >= 1


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_verifier_accepts_the_schedule(cfg):
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    verify_pipelines(k100.build(cfg).module)


def test_verifier_rejects_a_k_release_removed_from_a_windowed_decode_kernel():
    check_verifier_rejects_a_dropped_commit(CONFIGS[0], "k")


# ---- interpreted numerics ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kernels():
    """The interpreted kernels, built once for the module."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    cache = {}

    def load(cfg):
        if cfg not in cache:
            cache[cfg] = interpret.load(k100.build(cfg))
        return cache[cfg]
    return load


def _mods(cfg, torch, gen):
    sinks = (torch.randn(GQA["num_q_heads"], generator=gen) * 2).float() if cfg.sinks else None
    return sinks, (SOFTCAP if cfg.softcap else 0.0)


def _check(torch, cfg, q, k_rows, v_rows, out, lse, sinks, softcap):
    """One sequence (q [1, Sq, H, D], its keys' bf16 rows [1, L, Hkv, D]) by the FA rule; L = 0: O = 0 and
    LSE = +inf (the head's sink with sinks)."""
    from fa4mlir.testing import compare_attention
    d, heads, seqlen_q = q.shape[-1], q.shape[2], q.shape[1]
    if not k_rows.shape[1]:
        assert (out == 0).all()
        want = torch.full((1, heads, seqlen_q), float("inf")) if sinks is None else \
            sinks.view(1, heads, 1).expand(1, heads, seqlen_q)
        assert torch.allclose(lse, want, rtol=1e-6, atol=1e-6), lse
        return None
    report = compare_attention(q, k_rows, v_rows, out, lse, d ** -0.5, cfg.causal,
                               window_size=(cfg.window_left, cfg.window_right), attention_chunk=cfg.chunk,
                               softcap=softcap, sinks=sinks)
    assert report["ok"], report
    return report


PAGED = [c for c in CONFIGS if c.paged]


@pytest.mark.parametrize("cfg", PAGED, ids=_id)
def test_paged_kernel_interpreted_by_the_fa_rule(cfg, kernels):
    """Lengths page - 1, page + 1, 0, 1, 150, 300 over a shuffled page table (NaN in unused pages and
    rows), 40 query tokens, GQA 8 over 2; O and LSE NaN before the call, none left after."""
    torch = pytest.importorskip("torch")
    d, heads, kv_heads = cfg.head_dim, GQA["num_q_heads"], GQA["num_kv_heads"]
    page = cfg.page_size
    lengths = [page - 1, page + 1, 0, 1, 150, 300]
    gen = torch.Generator().manual_seed(zlib.crc32(_id(cfg).encode()))   # each config its own inputs
    batch = len(lengths)
    q = torch.randn(batch, SEQLEN_Q, heads, d, generator=gen).to(torch.bfloat16)
    sinks, softcap = _mods(cfg, torch, gen)
    if cfg.fp8:      # e4m3 codes (NaN codes in unused pages and rows), per-(page, KV head) scales
        from tests.test_attention_sm100_fp8 import _fp8_cache
        kb, vb, table, scales = _fp8_cache(gen, lengths, page, kv_heads, d, cfg.kv_scale)
    else:
        k, v, table = paged_cache(torch, gen, lengths, page, kv_heads, d)
        kb, vb, scales = bf16_bits(k, torch), bf16_bits(v, torch), (None, None)
    o = np.full((batch, SEQLEN_Q, heads, d), 0x7FC0, np.uint16)
    lse = np.full((batch, heads, SEQLEN_Q), np.nan, np.float32)
    problem = SimpleNamespace(batch=batch, heads=heads, seqlen_q=SEQLEN_Q, softmax_scale=d ** -0.5, softcap=softcap)
    tensors = dict(q=bf16_bits(q, torch), k=kb, v=vb, o=o, lse=lse, page_table=table,
                   cache_seqlens=np.array(lengths, np.int32), sinks=None if sinks is None else sinks.numpy(),
                   k_scale=scales[0], v_scale=scales[1])
    args = paged_launch_args(cfg, problem, tensors, num_pages=kb.shape[0], page_table_stride=table.shape[1])
    t0 = time.perf_counter()
    kernels(cfg).launch(grid(cfg, problem), args)
    seconds = time.perf_counter() - t0
    out = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16)
    lse_t = torch.from_numpy(lse)
    assert not torch.isnan(out).any() and not torch.isnan(lse_t).any()
    kf, vf = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (kb, vb)) if not cfg.fp8 else (kb, vb)
    masked, errs = 0, dict(max_err=0.0, torch_err=0.0, lse_err=0.0, lse_torch_err=0.0)
    for b, n in enumerate(lengths):
        t = np.arange(n)
        pages = table[b][t // page].astype(np.int64)
        rows = pages * page + t % page
        if cfg.fp8:  # the rows as the conversion makes them: (e4m3 x scale) rounded to bf16
            from tests.test_attention_sm100_fp8 import _dequantised_rows
            k_rows, v_rows = (_dequantised_rows(torch, x, sc, rows, kv_heads, pages)[None] for x, sc in zip((kb, vb), scales))
        else:
            k_rows, v_rows = (x.reshape(-1, kv_heads, d)[torch.from_numpy(rows)][None] for x in (kf, vf))
        report = _check(torch, cfg, q[b:b + 1], k_rows, v_rows, out[b:b + 1], lse_t[b:b + 1], sinks, softcap)
        masked += report["masked_rows"] if report else 0
        errs = {e: max(v, report[e]) if report else v for e, v in errs.items()}
    print(f"{_id(cfg)}: interpreted in {seconds:.1f} s; {masked} rows see no key; max errors {errs}")
    assert masked > 0, "lengths under 40 tokens leave rows that see no key"


def test_contiguous_decode_interpreted_by_the_fa_rule(kernels):
    """The decode route over a contiguous cache (one seqlen_k a launch) with a two-sided window (100, 20):
    300 keys (the first KV block skipped), and 1 key (rows 0-18 see none); 40 query tokens."""
    torch = pytest.importorskip("torch")
    cfg = next(c for c in CONFIGS if c.decode and not c.paged)
    d, heads, kv_heads = cfg.head_dim, GQA["num_q_heads"], GQA["num_kv_heads"]
    gen = torch.Generator().manual_seed(2807)
    masked = 0
    for seqlen_k in (300, 1):
        q = torch.randn(2, SEQLEN_Q, heads, d, generator=gen).to(torch.bfloat16)
        k, v = (torch.randn(2, seqlen_k, kv_heads, d, generator=gen).to(torch.bfloat16) for _ in range(2))
        o = np.full((2, SEQLEN_Q, heads, d), 0x7FC0, np.uint16)
        lse = np.full((2, heads, SEQLEN_Q), np.nan, np.float32)
        problem = SimpleNamespace(batch=2, heads=heads, seqlen_q=SEQLEN_Q, seqlen_k=seqlen_k, softmax_scale=d ** -0.5)
        tensors = dict(q=bf16_bits(q, torch), k=bf16_bits(k, torch), v=bf16_bits(v, torch), o=o, lse=lse)
        kernels(cfg).launch(grid(cfg, problem), launch_args(cfg, problem, tensors))
        out = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16)
        report = _check(torch, cfg, q, k, v, out, torch.from_numpy(lse), None, 0.0)
        masked += report["masked_rows"]
        print(f"contiguous decode, seqlen_k {seqlen_k}: {report}")
    assert masked == 19, masked
