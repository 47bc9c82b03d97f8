"""Deviceless checks of the sm_100a kernel's serving features (note "Serving" of
attention_sm100_config; issue 28 item 6): sliding windows and chunks (the mask family of
kernels/common/mask_family.py, as the sm_90a kernel uses it), softcap, sinks and ragged lengths
(cu_seqlens_q / cu_seqlens_k, packed [total, heads, D]).

* config: canonical mask fields, refusals with reasons, names, the launch contract;
* compiled (nvJitLink LTO, as the kernel ships), every serving_configs() kernel: 0 spills, setmaxnreg
  honoured, SMEM and TMEM within the plan, SASS with the tcgen05 GEMMs, no local memory, MUFU.TANH
  with softcap, no TMA store with varlen; the pipeline verifier on three;
* interpreted (fa4mlir.interpret, nvvm stage, CPU): numerics by the FA rule against a float64
  reference masked by FlashAttention's own rule (fa4mlir.testing.compare_attention): a window larger
  than the sequence, a window that skips KV blocks, a two-sided window with rows that see no key, a
  chunk that does not divide the sequence, softcap with sinks, ragged batches with sequences of 0,
  1 and tile + 1 rows (query and key lengths apart, CTAs run last sequence first, NaN guard rows
  past the packed O that must stay NaN). These are the only sm_100a numerics claimed: the kernel is
  interpreted, never run (no Blackwell GPU here).
"""
from __future__ import annotations

import re
import time
from types import SimpleNamespace

import numpy as np
import pytest

from fa4mlir.kernels.attention_sm100_config import (LAUNCH_PARAMS, SINK_PARAMS, SOFTCAP_PARAMS, VARLEN_LAUNCH_PARAMS,
                                                    FA4Config, code_shape, configs, grid, launch_args,
                                                    serving_configs, varlen_launch_args)
from fa4mlir.kernels.common.mask_family import SlidingWindow, attention_mask
from tests._sm100_helpers import (check_resources, check_verifier_rejects_a_dropped_commit, compiled, role_budgets,
                                  sass_count, sass_of, verify_pipelines)

GQA = dict(num_q_heads=4, num_kv_heads=2)


def _id(c: FA4Config) -> str:
    return f"d{c.head_dim}{c.serving_tag() or '_causal'}"


# ---- config ---------------------------------------------------------------------------------------
def test_fields_are_the_sm90_spelling_and_canonical():
    c = FA4Config(causal=True, window_left=300)
    assert c.mask == attention_mask(True, (300, 0)) == SlidingWindow(300, 0) and c.supported() == (True, "")
    assert FA4Config(window_left=100, window_right=50).mask == SlidingWindow(100, 50)
    assert FA4Config(chunk=200, causal=True).mask.tag() == "_causal_chunk200"
    assert FA4Config().plain and FA4Config(causal=True).plain and not FA4Config(sinks=True).plain
    assert all(c.plain for c in configs()), "the shipped configs keep their code"
    # one config per mask: window (300, 0) is causal=True with window_left=300, (-1, 0) is causal
    for kw, want in ((dict(window_left=300, window_right=0), "canonical"),
                     (dict(window_right=0), "canonical"),
                     (dict(causal=True, window_left=5, window_right=3), "canonical"),
                     (dict(window_left=-2), "window_left and window_right must be >= -1"),
                     (dict(chunk=-1), "chunk >= 0")):
        ok, why = FA4Config(**kw).supported()
        assert not ok and want in why, (kw, why)
        with pytest.raises(ValueError, match="FA4Config not supported"):
            FA4Config(**kw).validate()


def test_mask_fields_match_the_sm90_config():
    """mask_family.mask_fields (FA4Config's canonical form) gives AttnConfig's fields for every mask."""
    from fa4mlir.kernels.attention_sm90_config import _mask_fields
    from fa4mlir.kernels.common.mask_family import mask_fields
    for causal in (False, True):
        for window in ((-1, -1), (-1, 0), (0, 0), (5, 0), (5, 3), (-1, 7), (0, -1)):
            for chunk in (0, 64):
                m = attention_mask(causal, window, chunk)
                assert mask_fields(m) == _mask_fields(m), (causal, window, chunk)
                assert FA4Config(**mask_fields(m)).mask == m


@pytest.mark.parametrize("kw,reason", [
    (dict(causal=True, varlen=True, num_q_tiles=1, fuse_gqa=True), "varlen with page_size=0, num_q_tiles=1"),
    (dict(causal=True, varlen=True, page_size=64), "contiguous two-Q-tile prefill kernel only"),
    (dict(varlen=True, page_size=16), "varlen with page_size=16"),
    (dict(softcap=1), "softcap"),                          # a bool field given an int
    (dict(seqused_k=True), "seqused_k=True needs varlen=True"),
])
def test_refusals_say_why(kw, reason):
    ok, why = FA4Config(**kw).supported()
    assert not ok and reason in why, why


def test_names_tags_and_shapes():
    names = {c: c.serving_tag() for c in serving_configs()}
    assert names[FA4Config(causal=True, window_left=300, **GQA)] == "_wl300_wr0"
    assert FA4Config(causal=True, softcap=True, sinks=True, varlen=True).name_route() == "_varlen_softcap_sink"
    assert len({code_shape(c) for c in serving_configs()}) == len(serving_configs()) == 14
    assert all(c.supported()[0] for c in serving_configs())
    assert "wl100 wr50" in FA4Config(window_left=100, window_right=50).description()


def test_launch_contract():
    problem = SimpleNamespace(batch=2, heads=4, seqlen_q=300, seqlen_k=500, softmax_scale=0.125, softcap=30.0)
    t = {n: n for n in ("q", "k", "v", "o", "lse", "sinks", "cu_seqlens_q", "cu_seqlens_k")}
    c = FA4Config(causal=True, softcap=True, sinks=True, **GQA)
    assert c.launch_params == (*LAUNCH_PARAMS, *SOFTCAP_PARAMS, *SINK_PARAMS)
    args = launch_args(c, problem, t)
    assert list(args) == [n for n, _ in c.launch_params] and args["sinks"] == "sinks"
    assert args["softcap_scale"] == pytest.approx(0.125 / 30) and args["scale_log2"] == pytest.approx(30 * 1.4426950408889634)
    with pytest.raises(ValueError, match="softcap > 0"):
        launch_args(c, SimpleNamespace(**{**vars(problem), "softcap": 0.0}), t)
    v = FA4Config(causal=True, varlen=True, **GQA)
    assert v.launch_params == VARLEN_LAUNCH_PARAMS and dict(VARLEN_LAUNCH_PARAMS)["o"] == "ptr"
    args = varlen_launch_args(v, problem, t, total_q=777)
    assert list(args) == [n for n, _ in VARLEN_LAUNCH_PARAMS] and args["total_q"] == 777
    assert grid(v, problem) == (2, 4, 2)                   # problem.seqlen_q is max_seqlen_q
    u = FA4Config(varlen=True, seqused_k=True, sinks=True, **GQA)
    assert u.launch_params == (*VARLEN_LAUNCH_PARAMS, ("seqused_k", "ptr"), *SINK_PARAMS)
    assert varlen_launch_args(u, problem, {**t, "seqused_k": "u"}, total_q=5)["seqused_k"] == "u"
    with pytest.raises(ValueError, match="varlen_launch_args"):
        launch_args(v, problem, t)
    with pytest.raises(ValueError, match="launch_args"):
        varlen_launch_args(c, problem, t, total_q=1)


# ---- compiled -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", serving_configs(), ids=_id)
def test_compiles_with_zero_spills_and_sass(cfg):
    art, seconds = compiled(cfg, key="test-sm100-serving")
    check_resources(cfg, art, seconds)
    sass = sass_of(art)
    count = lambda op: sass_count(sass, op)  # noqa: E731
    assert role_budgets(sass) == {48, 80, 192}
    s_mmas, pv_mmas = cfg.padded_head_dim // 16, cfg.bn // 16
    assert count("UTCHMMA") == (2 * s_mmas + pv_mmas) + (2 * s_mmas + 2 * pv_mmas) + pv_mmas
    assert count("LDTM") > 0 and count("STTM") > 0 and count("UTCBAR") >= 14
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert ("MUFU.TANH" in sass) == cfg.softcap
    assert (count("UTMASTG") == 0) == cfg.varlen           # varlen stores O row by row (STG)
    if cfg.varlen:
        assert re.search(r"\bSTG\.E\.128\b", sass)


VERIFIED = [c for c in serving_configs() if c.head_dim == 128 and (c.sinks or c.chunk or c.seqused_k)]


@pytest.mark.parametrize("cfg", VERIFIED, ids=_id)
def test_verifier_accepts_the_schedule(cfg):
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    verify_pipelines(k100.build(cfg).module)


def test_verifier_rejects_a_softmax_release_removed_from_a_window_kernel():
    check_verifier_rejects_a_dropped_commit(FA4Config(causal=True, window_left=300, **GQA), "k")


# ---- interpreted numerics ------------------------------------------------------------------------------
def _serving(d: int, **kw) -> FA4Config:
    cfg = FA4Config(head_dim=d, head_dim_v=d, **GQA, **kw)
    assert cfg in serving_configs(), "interpret the kernels the bundle ships"
    return cfg


def _bits(x, torch) -> np.ndarray:
    return x.contiguous().view(torch.int16).numpy().view(np.uint16).copy()


def _inputs(torch, gen, rows_q, rows_k, d):
    q = torch.randn(rows_q, GQA["num_q_heads"], d, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(rows_k, GQA["num_kv_heads"], d, generator=gen).to(torch.bfloat16) for _ in range(2))
    return q, k, v


def _mods(cfg, torch, gen, softcap):
    sinks = (torch.randn(GQA["num_q_heads"], generator=gen) * 2).float() if cfg.sinks else None
    return sinks, (softcap if cfg.softcap else 0.0)


def _window(cfg):
    return (cfg.window_left, cfg.window_right)


def _kernel(cfg):
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    return interpret.load(k100.build(cfg))


DENSE_CASES = [  # (config fields, seqlen_q, seqlen_k, what it exercises)
    (dict(causal=True, window_left=300), 200, 260, "window larger than the sequence"),
    (dict(causal=True, window_left=300), 300, 700, "window skipping the first KV blocks of the second CTA"),
    (dict(window_left=100, window_right=50), 300, 200, "two-sided window; rows 0-49 see no key"),
    (dict(causal=True, chunk=200), 333, 333, "chunk not dividing the sequence"),
    (dict(causal=True, softcap=True, sinks=True), 300, 200, "softcap 2 and sinks; rows 0-99 see no key"),
]


@pytest.mark.parametrize("fields,seqlen_q,seqlen_k,what", DENSE_CASES, ids=[c[3] for c in DENSE_CASES])
def test_dense_kernel_interpreted_by_the_fa_rule(fields, seqlen_q, seqlen_k, what):
    torch = pytest.importorskip("torch")
    from fa4mlir.testing import compare_attention
    cfg = _serving(64, **fields)
    gen = torch.Generator().manual_seed(28)
    q, k, v = _inputs(torch, gen, seqlen_q, seqlen_k, 64)
    sinks, softcap = _mods(cfg, torch, gen, 2.0)
    heads = GQA["num_q_heads"]
    o = np.full((1, seqlen_q, heads, 64), 0x7FC0, np.uint16)
    lse = np.full((1, heads, seqlen_q), np.nan, np.float32)
    problem = SimpleNamespace(batch=1, heads=heads, seqlen_q=seqlen_q, seqlen_k=seqlen_k, softmax_scale=64 ** -0.5,
                              softcap=softcap)
    tensors = dict(q=_bits(q[None], torch), k=_bits(k[None], torch), v=_bits(v[None], torch), o=o, lse=lse,
                   sinks=None if sinks is None else sinks.numpy())
    t0 = time.perf_counter()
    _kernel(cfg).launch(grid(cfg, problem), launch_args(cfg, problem, tensors))
    out = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16)
    report = compare_attention(q[None], k[None], v[None], out, torch.from_numpy(lse), 64 ** -0.5, cfg.causal,
                               window_size=_window(cfg), attention_chunk=cfg.chunk, softcap=softcap, sinks=sinks)
    print(f"{what}: {time.perf_counter() - t0:.1f} s, {report}")
    assert report["ok"], report
    if what.endswith("see no key"):
        assert report["masked_rows"] > 0


VARLEN_CASES = [  # (head dim, config fields)
    (64, dict(causal=True, varlen=True)),
    (64, dict(causal=True, window_left=100, sinks=True, varlen=True)),
    (128, dict(causal=True, window_left=100, sinks=True, varlen=True)),
    (64, dict(varlen=True, seqused_k=True)),
]
LENS_Q = [0, 1, 129, 257, 3]       # 257 = one two-tile CTA + 1 row
LENS_K = [7, 1, 129, 300, 0]       # a length-0 sequence of keys: its 3 rows see none
USED_K = [5, 0, 100, 290, 0]       # seqused_k: the keys past these are NaN in K and V
GUARD_ROWS = 4


@pytest.mark.parametrize("d,fields", VARLEN_CASES, ids=lambda x: str(x) if isinstance(x, int) else
                         FA4Config(**x).serving_tag())
def test_varlen_kernel_interpreted_by_the_fa_rule(d, fields):
    """A ragged batch: query lengths 0, 1, 129, 257, 3 over key lengths 7, 1, 129, 300, 0, packed, GQA 4
    over 2; the CTAs run last sequence first (a store past a sequence's rows would be overwritten
    otherwise, not caught); O holds NaN before the call and in GUARD_ROWS rows past total_q, which
    must stay NaN. With seqused_k, USED_K keys of each sequence, the rest NaN (in a ragged tile: the
    MMA thread zeroes those V rows)."""
    torch = pytest.importorskip("torch")
    from fa4mlir.testing import compare_attention
    cfg = _serving(d, **fields)
    gen = torch.Generator().manual_seed(6)
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (LENS_Q, LENS_K))
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    q, k, v = _inputs(torch, gen, total_q, total_k, d)
    sinks, _ = _mods(cfg, torch, gen, 0.0)
    used = USED_K if cfg.seqused_k else LENS_K
    for b, n in enumerate(used):
        k[cu_k[b] + n:cu_k[b + 1]] = float("nan")
        v[cu_k[b] + n:cu_k[b + 1]] = float("nan")
    heads = GQA["num_q_heads"]
    o = np.full((total_q + GUARD_ROWS, heads, d), 0x7FC0, np.uint16)
    lse = np.full((heads, total_q), np.nan, np.float32)
    problem = SimpleNamespace(batch=len(LENS_Q), heads=heads, seqlen_q=max(LENS_Q), seqlen_k=None,
                              softmax_scale=d ** -0.5)
    tensors = dict(q=_bits(q[None], torch), k=_bits(k[None], torch), v=_bits(v[None], torch), o=o, lse=lse,
                   cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=np.array(USED_K, np.int32),
                   sinks=None if sinks is None else sinks.numpy())
    g = grid(cfg, problem)
    ctas = [(x, y, z) for z in reversed(range(g[2])) for y in range(g[1]) for x in range(g[0])]
    t0 = time.perf_counter()
    _kernel(cfg).launch(g, varlen_launch_args(cfg, problem, tensors, total_q=total_q), ctas=ctas)
    seconds = time.perf_counter() - t0
    assert (o[total_q:] == 0x7FC0).all(), "a store ran past the last sequence"
    out = torch.from_numpy(o[:total_q].view(np.int16)).view(torch.bfloat16)
    lse_t = torch.from_numpy(lse)
    for b, (nq, nk) in enumerate(zip(LENS_Q, used)):
        if not nq:
            continue
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b] + nk)
        if not nk:   # no key at all: O = 0, LSE = +inf (or the head's sink)
            assert (out[qs] == 0).all()
            want = torch.full((heads, nq), float("inf")) if sinks is None else sinks[:, None].expand(heads, nq)
            assert torch.allclose(lse_t[:, qs], want, rtol=1e-6, atol=1e-6), lse_t[:, qs]
            continue
        report = compare_attention(q[None, qs], k[None, ks], v[None, ks], out[None, qs], lse_t[None, :, qs], d ** -0.5,
                                   cfg.causal, window_size=_window(cfg), sinks=sinks)
        assert report["ok"], (b, report)
    print(f"{cfg.description()[:60]}.. interpreted in {seconds:.1f} s")
