"""Deviceless checks of the sm_100a kernel's FP8 (e4m3) KV cache (issue 27 item 5; attention_sm100_kv,
note "FP8"): the decode route with a convert warpgroup that dequantises K/V into the 16-bit tiles the
tcgen05.mma reads.

* config: fields, refusals with reasons, names, launch contract, the SMEM plan of the e4m3 rings;
* compiled (nvJitLink LTO, as the kernel ships): 0 spills, setmaxnreg honoured, SMEM and TMEM within
  the plan, SASS holding the e4m3 conversion and the e4m3 TMA boxes; the pipeline verifier accepting
  the schedule and rejecting it without the convert warpgroup's release of an e4m3 stage;
* interpreted (fa4mlir.interpret, CPU): numerics by the FA rule against a float32 reference that
  dequantises as the kernel does ((e4m3 x scale) rounded to bf16), over a shuffled page table, lengths
  page - 1, page, page + 1, 0, 1 and two K/V blocks, NaN codes in every unused page and row and NaN
  scales for unused pages. The kernel is interpreted, never run (no Blackwell GPU here).
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from fa4mlir.kernels.attention_sm100_config import FP8_PARAMS, FA4Config, grid, launch_args, paged_launch_args
from tests._sm100_helpers import bf16_bits, check_compiled, compiled, page_table, sass_count, sass_of

DECODE = dict(num_q_tiles=1, fuse_gqa=True, causal=True, num_q_heads=8, num_kv_heads=2)


def _fp8(d: int, page_size: int, kv_scale: str) -> FA4Config:
    return FA4Config(head_dim=d, head_dim_v=d, page_size=page_size, kv_dtype="e4m3", kv_scale=kv_scale, **DECODE)


# ---- config ---------------------------------------------------------------------------------------
def test_fp8_config_plan_and_contract():
    c = _fp8(128, 64, "block")
    assert c.supported() == (True, "") and c.fp8
    assert c.name_route() == "_paged64_decode_e4m3_block"
    assert c.launch_params[-2:] == FP8_PARAMS
    plan = c.smem_plan()
    assert plan["k8_tile"] == plan["v8_tile"] == 128 * 128 and plan["k8"] == plan["stages"] * 128 * 128
    assert plan["total"] <= 232448 and plan["stages"] == 2
    assert "e4m3 K/V, block scales, converted to bf16" in c.description()
    # the plain kernels keep their plans: no e4m3 rings
    assert "k8" not in FA4Config().smem_plan() and FA4Config().name_route() == ""

    class P:
        batch, heads, seqlen_q, seqlen_k, softmax_scale = 2, 8, 1, 0, 0.125
    names = ("q", "k", "v", "o", "lse", "page_table", "cache_seqlens", "k_scale", "v_scale")
    args = paged_launch_args(c, P, {n: n for n in names}, num_pages=9, page_table_stride=4)
    assert args["k_scale"] == "k_scale" and args["v_scale"] == "v_scale"
    contiguous = _fp8(64, 0, "kv_head")
    assert list(launch_args(contiguous, P, {n: n for n in names}))[-2:] == ["k_scale", "v_scale"]


@pytest.mark.parametrize("kw,reason", [
    (dict(kv_dtype="e4m3", kv_scale="tensor"), "built on the decode route"),
    (dict(kv_dtype="e5m2", kv_scale="tensor", **DECODE), "kv_dtype='e5m2'"),
    (dict(kv_dtype="e4m3", **DECODE), "kv_scale=''"),
    (dict(kv_scale="tensor", **DECODE), "kv_scale='tensor'"),
    (dict(kv_dtype="e4m3", kv_scale="block", **DECODE), "per-(page, KV head) scales are built for a paged cache"),
])
def test_fp8_refusals_say_why(kw, reason):
    ok, why = FA4Config(**kw).supported()
    assert not ok and reason in why, why


# ---- compiled ---------------------------------------------------------------------------------------
COMPILED = [_fp8(64, 16, "block"), _fp8(128, 16, "block"), _fp8(128, 0, "tensor")]


@pytest.mark.parametrize("index", range(len(COMPILED)))
def test_fp8_compiles_with_zero_spills_and_sass(index):
    cfg = COMPILED[index]
    art, _ = compiled(cfg, "test-sm100-fp8", "nvjitlink-lto")     # each COMPILED kernel lowered once (nvJitLink LTO)
    check_compiled(cfg, art)
    assert art.resources["tmem_cols"] == cfg.tmem_plan()["alloc"]
    sass = sass_of(art)
    assert re.search(r"E4M3", sass), "no e4m3 conversion in the SASS"
    assert not re.search(r"\b(LDL|STL)\b", sass)
    # S0 and P0 V per block; without the MMA thread's V zeroing (the convert warpgroup zeroes) LLVM
    # unrolls its loop, so the body appears more than once
    per_block = cfg.padded_head_dim // 16 + cfg.bn // 16
    mmas = sass_count(sass, "UTCHMMA")
    assert mmas >= per_block and mmas % per_block == 0 and sass_count(sass, "HGMMA") == 0
    # Q per 64-column chunk, then one e4m3 box per page box for K and for V
    assert sass_count(sass, "UTMALDG") >= 2 * (cfg.bn // cfg.box_rows) + cfg.padded_head_dim // 64


def test_fp8_verifier_accepts_the_schedule_and_rejects_a_missing_release():
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.passes import registry
    from fa4mlir.passes._util import PassError, attr, ops_named
    registry.run_passes(k100.build(COMPILED[0]).module, ["fa4-verify-pipelines"])
    kir = k100.build(COMPILED[0])
    releases = [op for op in ops_named(kir.module.operation, "fa4.consumer_release") if attr(op, "pipe") == "v8"]
    assert releases
    releases[0].erase()
    with pytest.raises(PassError, match="'v8'"):
        registry.run_passes(kir.module, ["fa4-verify-pipelines"])


# ---- interpreted numerics ------------------------------------------------------------------------------
def _fp8_cache(gen, lengths, page_size, kv_heads, d, kv_scale):
    """e4m3 codes: a paged pool (page_size > 0; shuffled table, -1 past each length) or a contiguous
    [batch, capacity, kv_heads, D] cache, with the NaN code in every unused page and row; the scales of
    `kv_scale`'s granularity (NaN for unused pages)."""
    from fa4mlir.testing_kvcache import e4m3_encode
    rng = np.random.default_rng(int(gen.initial_seed()))
    nan = np.uint8(0x7F)
    if page_size:
        max_pages = max(-(-n // page_size) for n in lengths) + 1
        num_pages = sum(-(-n // page_size) for n in lengths) + 3
        shape = (num_pages, page_size, kv_heads, d)
    else:
        capacity = -(-max(lengths) // 128) * 128
        shape = (len(lengths), capacity, kv_heads, d)
    k, v = np.full(shape, nan, np.uint8), np.full(shape, nan, np.uint8)
    table = None
    if page_size:
        table = page_table(rng.permutation(num_pages), lengths, page_size, max_pages)
        for b, n in enumerate(lengths):
            for t0 in range(0, n, page_size):
                rows, page = min(page_size, n - t0), table[b, t0 // page_size]
                k[page, :rows] = e4m3_encode(rng.standard_normal((rows, kv_heads, d)) * 3)
                v[page, :rows] = e4m3_encode(rng.standard_normal((rows, kv_heads, d)) * 3)
    else:
        for b, n in enumerate(lengths):
            k[b, :n] = e4m3_encode(rng.standard_normal((n, kv_heads, d)) * 3)
            v[b, :n] = e4m3_encode(rng.standard_normal((n, kv_heads, d)) * 3)
    scale_shape = {"tensor": (1,), "kv_head": (kv_heads,), "block": (shape[0], kv_heads)}[kv_scale]
    scales = [rng.uniform(0.05, 0.6, scale_shape).astype(np.float32) for _ in range(2)]
    if kv_scale == "block":
        live = np.zeros(shape[0], bool)
        live[table[table >= 0]] = True
        for s in scales:
            s[~live] = np.nan
    return k, v, table, scales


def _dequantised_rows(torch, codes, scale, rows, kv_heads, pages_of_rows):
    """bf16 K or V rows as the kernel's conversion makes them: (float32(e4m3) x scale) rounded to bf16."""
    from fa4mlir.testing_kvcache import e4m3_decode
    flat = codes.reshape(-1, kv_heads, codes.shape[-1])[rows]
    s = scale.reshape(-1)
    if scale.size == 1:
        per = np.full((len(rows), kv_heads), s[0], np.float32)
    elif scale.shape == (kv_heads,):
        per = np.broadcast_to(scale, (len(rows), kv_heads))
    else:
        per = scale[pages_of_rows]
    return torch.from_numpy(e4m3_decode(flat) * per[..., None].astype(np.float32)).to(torch.bfloat16)


@pytest.mark.parametrize("page_size,kv_scale,seqlen_q", [(16, "block", 3), (0, "kv_head", 2)])
def test_fp8_kernel_interpreted_by_the_fa_rule(page_size, kv_scale, seqlen_q):
    """D64, GQA 8 query heads over 2 KV heads, causal bottom-right; paged 16 with per-(page, KV head)
    scales, or a contiguous cache with per-KV-head scales; O filled with NaN before the call."""
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.testing import FaTally, attention_math
    from fa4mlir.testing_kvcache import kvcache_reference
    d, heads, kv_heads = 64, 8, 2
    cfg = _fp8(d, page_size, kv_scale)
    page = page_size or 16
    lengths = [page - 1, page, page + 1, 0, 1, 150]
    gen = torch.Generator().manual_seed(270 + page_size)
    batch = len(lengths)
    q = torch.randn(batch, seqlen_q, heads, d, generator=gen).to(torch.bfloat16)
    k, v, table, (k_scale, v_scale) = _fp8_cache(gen, lengths, page_size, kv_heads, d, kv_scale)
    lens = np.array(lengths, np.int32)
    o = np.full((batch, seqlen_q, heads, d), 0x7FC0, np.uint16)
    lse = np.full((batch, heads, seqlen_q), np.nan, np.float32)

    class P:
        pass
    P.batch, P.heads, P.seqlen_q, P.seqlen_k, P.softmax_scale = batch, heads, seqlen_q, k.shape[1], d ** -0.5
    tensors = dict(q=bf16_bits(q, torch), k=k, v=v, o=o, lse=lse, page_table=table, cache_seqlens=lens,
                   k_scale=k_scale, v_scale=v_scale)
    if page_size:
        args = paged_launch_args(cfg, P, tensors, num_pages=k.shape[0], page_table_stride=table.shape[1])
    else:
        args = launch_args(cfg, P, tensors)
        args["seqlen_k"] = 0   # contiguous: one seqlen_k for the batch (below: one call per distinct length)
    t0 = time.perf_counter()
    kernel = interpret.load(k100.build(cfg))
    if page_size:
        kernel.launch(grid(cfg, P), args)
    seconds = time.perf_counter() - t0
    tally = FaTally()
    if not page_size:   # a contiguous cache has one seqlen_k per launch: one sequence a launch
        outs = []
        for b, n in enumerate(lengths):
            one = dict(args, q=tensors["q"][b:b + 1], k=k[b:b + 1], v=v[b:b + 1], o=o[b:b + 1].copy(),
                       lse=lse[b:b + 1].copy(), seqlen_k=n)
            P1 = type("P1", (), dict(batch=1, heads=heads, seqlen_q=seqlen_q))
            kernel.launch(grid(cfg, P1), one)
            outs.append((one["o"], one["lse"]))
        o = np.concatenate([x for x, _ in outs])
        lse = np.concatenate([x for _, x in outs])
        seconds = time.perf_counter() - t0
    out = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16).double()
    lse_t = torch.from_numpy(lse).double()
    assert not torch.isnan(out).any() and not torch.isnan(lse_t).any()
    assert (out[3] == 0).all() and torch.isposinf(lse_t[3]).all()          # length 0: no key seen
    for b, n in enumerate(lengths):
        if not n:
            continue
        t = np.arange(n)
        if page_size:
            pages = table[b][t // page_size]
            rows = pages * page_size + t % page_size
        else:
            pages, rows = None, b * k.shape[1] + t
        k_rows = _dequantised_rows(torch, k, k_scale, rows, kv_heads, pages)
        v_rows = _dequantised_rows(torch, v, v_scale, rows, kv_heads, pages)
        low_o, low_l = attention_math(q[b:b + 1], k_rows[None], v_rows[None], d ** -0.5, True, torch.bfloat16)
        ref = kvcache_reference(q[b:b + 1].float(), k_rows[None].float(), v_rows[None].float(),
                                torch.tensor([n], dtype=torch.int32), compute_dtype=np.float32)
        tally.add(out[b], low_o[0].double(), ref["out"][0].double(),
                  lse_t[b], low_l[0].double(), ref["lse"][0].double())
    print(f"interpreted {cfg.description()[-60:]} in {seconds:.1f} s: {tally.errs}")
    tally.check()
