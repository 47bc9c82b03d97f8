"""The sm_100a kernel's absorbed MLA decode (note "MLA decode" of attention_sm100_config and
attention_sm100_mla_decode): q [batch, seqlen_q, heads, 576], one latent KV head of 576 (V = its first
512 columns), 64 query rows per CTA in tcgen05.mma Layout F (M = 64), O's two 256-column halves in the
lane halves 0-15 / 16-31 of each warp's TMEM slab. Proven without a Blackwell GPU:

* config: the TMEM plan (O 256 + S 64 columns), the SMEM plan (64 x 576 Q, two 64 x 576 K stages, no V
  ring), heads packed into the 64 rows (16 x 4 tokens, 64 x 1, 128 over two CTAs), what is refused and
  why, and that supported_configs() (CI's 288-shape sweep) does not hold these shapes;
* compiled (nvJitLink LTO, as the kernel ships), every config of mla_decode_configs(): 0 spills, no stack,
  setmaxnreg with the role budgets (MMA/load warps at 80), SMEM within the plan; the SASS holds 2 x 36 S
  MMAs and 2 x 4 P.V MMAs (A = P from TMEM) per block;
* the pipeline verifier accepts each kernel and names the pipe when one commit is removed;
* interpreted (fa4mlir.interpret, nvvm stage, CPU) on small shapes: paged latent caches with NaN in
  unused pages and rows, cache_seqlens on the device, MTP (seqlen_q 2, causal), 128 heads over two CTAs;
  numerics by the FA rule against a float64 reference. The interpreter models Layout F and its lane
  alignment rule, and faults when the kernel's lane halves are collapsed; split-KV partials (float32, the
  combine's workspaces) merged by the combine's host twin (testing_kvcache.combine_splits). These are the only numerics
  claimed: the kernel is interpreted, never run on a Blackwell GPU.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from _sm100_helpers import (check_resources, check_verifier_rejects_a_dropped_commit, compiled, role_budgets,
                            sass_count, sass_of, verify_pipelines)
from fa4mlir.kernels.attention_sm100_config import (SMEM_CARVEOUT, FA4Config, code_shape, grid, mla_configs,
                                                    launch_args, mla_decode_configs, paged_launch_args,
                                                    supported_configs)

BASE = dict(head_dim=576, head_dim_v=512, num_kv_heads=1, bn=64, num_q_tiles=1, fuse_gqa=True)
KEY = "test-sm100-mla-decode"


def _id(c: FA4Config) -> str:
    return f"{c.dtype}-h{c.num_q_heads}{'-causal' if c.causal else ''}-page{c.page_size}"


# ---- config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", mla_decode_configs(), ids=_id)
def test_plan(cfg):
    assert cfg.mla_decode and not cfg.mla and cfg.supported() == (True, "") and cfg.validate() is cfg
    assert cfg.mma_m == 64 and cfg.o_cols == 256 and cfg.bm == 64
    tm = cfg.tmem_plan()
    assert (tm["O0"], tm["S0"], tm["P0"], tm["C0"], tm["used"], tm["alloc"]) == (0, 256, 288, 256, 320, 512)
    sm = cfg.smem_plan()
    assert sm["q_tile"] == 64 * 576 * 2 and sm["k_tile"] == 64 * 576 * 2 and sm["v"] == 0
    assert sm["stages"] == 2 and sm["total"] <= SMEM_CARVEOUT < cfg._smem_total(3)
    assert cfg.tile_heads * cfg.tile_tokens == 64 and cfg.tile_heads == min(cfg.num_q_heads, 64)
    outs = ["o_partial", "lse_partial"] if cfg.split_kv else ["o", "lse"]
    assert [n for n, _ in cfg.launch_params][:4] == ["q", "k", *outs]     # no v: V is K's first 512 columns


def test_heads_pack_into_the_64_rows():
    P = type("P", (), dict(batch=3, seqlen_q=2))
    for heads, tokens, ctas in ((16, 4, (1, 1, 3)), (32, 2, (1, 1, 3)), (64, 1, (2, 1, 3)), (128, 1, (2, 2, 3))):
        cfg = FA4Config(**BASE, num_q_heads=heads, page_size=64)
        P.heads = heads
        assert cfg.tile_tokens == tokens and grid(cfg, P) == ctas, (heads, grid(cfg, P))


@pytest.mark.parametrize("kw,reason", [
    (dict(bn=128), "built for bn=64"),
    (dict(num_kv_heads=2, num_q_heads=32), "one latent KV head"),
    (dict(page_size=64, kv_dtype="e4m3", kv_scale="block"), "e4m3 K/V"),
    (dict(page_size=8, kv_dtype="e4m3", kv_scale="row"), "FP8 rows in pages of 8"),
    (dict(causal=True, window_left=32), "serving features"),
    (dict(exp2_poly_stride=2), "default 4 only"),
    (dict(stages=1), "use 0 or 2"),
    (dict(num_q_heads=48), "divide 64 or be a multiple of it"),
])
def test_refusals_say_why(kw, reason):
    ok, why = FA4Config(**{**BASE, "num_q_heads": 16, **kw}).supported()
    assert not ok and reason in why, why


def test_two_q_tiles_do_not_fit():
    """576/512 on the two-Q-tile prefill CTA: O of two 128-row tiles would need 2 x 512 TMEM columns."""
    ok, why = FA4Config(head_dim=576, head_dim_v=512).plan_fits()
    assert not ok and "decode route only" in why and "N = 512 > 256" in why, why


def test_kept_out_of_the_supported_sweep():
    shapes = {code_shape(c) for c in supported_configs()}
    dec = [code_shape(c) for c in mla_decode_configs()]
    assert len(supported_configs()) == 288 and not shapes & set(dec)
    assert not set(dec) & {code_shape(c) for c in mla_configs()}


# ---- compiled -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", mla_decode_configs(), ids=_id)
def test_compiles_with_zero_spills_and_sass(cfg):
    art, seconds = compiled(cfg, KEY)
    check_resources(cfg, art, seconds)
    assert "_qk576_ov512_" in art.name and "_bn64_" in art.name and art.name.endswith("_split" if cfg.split_kv else
                                                                                        "_decode")
    sass = sass_of(art)
    assert role_budgets(sass) == {192, 80}, "softmax 192, correction 80, MMA/load 80"
    s_mmas, pv_mmas = 2 * 576 // 16, 2 * 64 // 16          # per block: both lane halves
    assert sass_count(sass, "UTCHMMA") == s_mmas + pv_mmas
    assert len(re.findall(r"UTCHMMA tmem\[", sass)) == pv_mmas, "P.V takes A (= P) from tensor memory"
    assert sass_count(sass, "UTMALDG") >= 9 + 9
    assert sass_count(sass, "UTMASTG") == 0 if cfg.split_kv else sass_count(sass, "UTMASTG") >= 8   # partials: STG
    assert not re.search(r"\b(LDL|STL)\b", sass), "no local-memory spills"


# ---- the pipeline verifier ------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", mla_decode_configs()[:2], ids=_id)
def test_verifier_accepts(cfg):
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    verify_pipelines(k100.build(cfg).module)


@pytest.mark.parametrize("pipe", ["k", "s0", "p0", "o0"])
def test_verifier_rejects_a_dropped_commit(pipe):
    check_verifier_rejects_a_dropped_commit(mla_decode_configs()[0], pipe)


# ---- interpreted numerics -------------------------------------------------------------------------
def _bits(x, torch, dtype):
    return x.to(dtype).view(torch.int16).numpy().view(np.uint16).copy()


def _latent_cache(torch, gen, lengths, page_size, dtype):
    """A latent pool [num_pages, page, 1, 576] with NaN in every unused page and row, a shuffled page table
    (-1 past each length); page_size 0: a contiguous cache [batch, max(lengths), 1, 576] (NaN past each)."""
    if not page_size:
        kv = torch.full((len(lengths), max(lengths), 1, 576), float("nan"))
        for b, n in enumerate(lengths):
            kv[b, :n] = torch.randn(n, 1, 576, generator=gen)
        return kv.to(dtype), None
    max_pages = max(-(-n // page_size) for n in lengths) + 1
    num_pages = sum(-(-n // page_size) for n in lengths) + 3
    kv = torch.full((num_pages, page_size, 1, 576), float("nan"))
    perm = torch.randperm(num_pages, generator=gen).numpy()
    table = np.full((len(lengths), max_pages), -1, np.int32)
    used = 0
    for b, n in enumerate(lengths):
        pages = -(-n // page_size)
        table[b, :pages] = perm[used:used + pages]
        used += pages
        for t0 in range(0, n, page_size):
            rows = min(page_size, n - t0)
            kv[table[b, t0 // page_size], :rows] = torch.randn(rows, 1, 576, generator=gen)
    return kv.to(dtype), table


def _interpret(cfg, lengths, seqlen_q, seed=29, num_splits=1):
    """Interpret `cfg` over latent caches of `lengths` and return the FA-rule errors (asserted); split-KV:
    `num_splits` CTAs per sequence write float32 partials, merged by the combine's math
    (testing_kvcache.combine_splits, the host twin of attention_combine_sm90)."""
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.testing import FaTally, attention_math
    dtype = torch.bfloat16 if cfg.dtype == "bf16" else torch.float16
    gen = torch.Generator().manual_seed(seed)
    batch, heads, scale = len(lengths), cfg.num_q_heads, 576 ** -0.5
    q = torch.randn(batch, seqlen_q, heads, 576, generator=gen).to(dtype)
    kv, table = _latent_cache(torch, gen, lengths, cfg.page_size, dtype)
    if cfg.fp8:     # FlashMLA's FP8 rows: the kernel reads their words, the reference their exact dequantization
        from fa4mlir.testing_mla import dequantize_fp8_cache, quantize_fp8_cache
        cache = quantize_fp8_cache(kv)
        kv_bits, kv = cache.view(torch.uint8).numpy().view(np.int32).copy(), dequantize_fp8_cache(cache)
    else:
        kv_bits = _bits(kv, torch, dtype)
    lens = np.array(lengths, np.int32)
    o = np.full((batch, seqlen_q, heads, 512), 0x7E00, np.uint16)
    lse = np.full((batch, heads, seqlen_q), np.nan, np.float32)
    P = type("P", (), dict(batch=batch, heads=heads, seqlen_q=seqlen_q, softmax_scale=scale, num_splits=num_splits))
    tensors = dict(q=_bits(q, torch, dtype), k=kv_bits, o=o, lse=lse, page_table=table, cache_seqlens=lens,
                   o_partial=np.full((num_splits, batch, seqlen_q, heads, 512), np.nan, np.float32),
                   lse_partial=np.full((num_splits, batch, heads, seqlen_q), np.nan, np.float32))
    if table is None:      # contiguous [batch, seqlen_k, 1, 576]: one length for the batch (seqlen_k)
        assert len(set(lengths)) == 1
        P.seqlen_k = lengths[0]
        args = launch_args(cfg, P, tensors)
    else:
        args = paged_launch_args(cfg, P, tensors, num_pages=kv.shape[0], page_table_stride=table.shape[1])
    t0 = time.perf_counter()
    interpret.load(k100.build(cfg)).launch(grid(cfg, P, num_splits), args)
    seconds = time.perf_counter() - t0
    if cfg.split_kv:       # every partial row written (0 and -inf for a split without keys), then combined
        from fa4mlir.testing_kvcache import combine_splits
        assert not np.isnan(tensors["o_partial"]).any() and not np.isnan(tensors["lse_partial"]).any()
        out_c, lse_c = combine_splits(tensors["o_partial"], tensors["lse_partial"])
        out = torch.from_numpy(out_c).to(dtype).double()      # the combine rounds O to q's dtype
        lse_t = torch.from_numpy(lse_c)
    else:
        out = torch.from_numpy(o.view(np.int16)).view(dtype).double()
        lse_t = torch.from_numpy(lse).double()
    assert not torch.isnan(out).any() and not torch.isnan(lse_t).any()
    tally = FaTally()
    for b, n in enumerate(lengths):
        if not n:
            assert (out[b] == 0).all() and torch.isposinf(lse_t[b]).all()      # no key seen
            continue
        t = np.arange(n)
        if table is None:
            k_rows = kv[b:b + 1, :n]
        else:
            rows = torch.from_numpy(table[b][t // cfg.page_size] * cfg.page_size + t % cfg.page_size)
            k_rows = kv.reshape(-1, 1, 576)[rows][None]
        v_rows = k_rows[..., :512]
        ref_o, ref_l = attention_math(q[b:b + 1], k_rows, v_rows, scale, cfg.causal, torch.float64)
        low_o, low_l = attention_math(q[b:b + 1], k_rows, v_rows, scale, cfg.causal, dtype)
        tally.add(out[b], low_o[0].double(), ref_o[0], lse_t[b], low_l[0].double(), ref_l[0])
    print(f"interpreted {cfg.description()[:60]}.. in {seconds:.1f} s: {tally.errs}")
    return tally.check()


CASES = [  # (config index in mla_decode_configs(), lengths, seqlen_q)
    (0, [63, 64, 150, 0], 2),          # 16 heads x 2 MTP tokens (of 4 per tile), causal; 3 blocks through 2 stages
    (2, [70], 1),                      # 128 heads: two CTAs per token
    (3, [17, 100], 1),                 # f16, page 16: 4 boxes per tile, the length inside a page
    (4, [90, 90], 3),                  # a contiguous cache, 3 tokens of 16 heads, not causal
]


@pytest.mark.parametrize("index,lengths,seqlen_q", CASES, ids=[f"{_id(mla_decode_configs()[c[0]])}" for c in CASES])
def test_interpreted_by_the_fa_rule(index, lengths, seqlen_q):
    _interpret(mla_decode_configs()[index], lengths, seqlen_q)


@pytest.mark.parametrize("index,lengths,seqlen_q,num_splits", [
    (5, [150, 40, 0], 2, 3),          # 3 blocks over 3 splits; 1 block (two empty splits); no key at all
    (6, [200], 1, 2),                  # 128 heads, 4 blocks over 2 splits
], ids=["h16-causal-3splits", "h128-2splits"])
def test_split_kv_partials_combine_by_the_fa_rule(index, lengths, seqlen_q, num_splits):
    cfg = mla_decode_configs()[index]
    assert cfg.split_kv
    _interpret(cfg, lengths, seqlen_q, num_splits=num_splits)


def test_collapsed_lane_halves_are_caught(monkeypatch):
    """With both lane halves at alignment 0 (S, P and O of the second half written over the first), the
    softmax threads of lanes 16-31 read TMEM no MMA wrote: the interpreter names it (a race fault), so
    the numerics above exercise the Layout F placement."""
    pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_sm100_mla_decode as mla_dec
    monkeypatch.setattr(mla_dec, "lane_offset", lambda half: 0)
    with pytest.raises(interpret.RaceFault, match="which no write reached"):
        _interpret(mla_decode_configs()[0], [40], 1)


def test_layout_f_lanes():
    """Layout F (§9.7.16.10.5): row r in lane 32 (r // 16) + a + r % 16 for alignment a in {0, 16}."""
    from fa4mlir.interpret import TmemFault
    from fa4mlir.interpret.ops.tcgen05 import mma_lanes
    assert list(mma_lanes(64, 0)[14:18]) == [14, 15, 32, 33] and list(mma_lanes(64, 16)[:2]) == [16, 17]
    assert sorted(set(mma_lanes(64, 0)) | set(mma_lanes(64, 16))) == list(range(128))
    assert list(mma_lanes(128, 0)) == list(range(128))
    for m, a in ((64, 8), (128, 16)):
        with pytest.raises(TmemFault, match="9.7.16.10.5"):
            mma_lanes(m, a)
