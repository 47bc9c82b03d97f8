"""Deviceless checks of the sm_100a kernel's row gather (issue 27 item 5; paged_rows, note "Row gather"):
pages whose K/V tiles take no per-page TMA box of >= 16 rows (page sizes 1..15, and any with
gcd(128, page_size) < 16) on the decode route, fetched by 16-byte loads and shared stores from the free
warpgroup 4-7.

* config: supported() takes every page size 1..256 on the decode route; the launch contract (k, v
  pointers); refusals with reasons (the two-Q-tile CTA, FP8);
* compiled (nvJitLink LTO): 0 spills, setmaxnreg honoured, SMEM within the plan, SASS holding the
  16-byte loads and stores and no K/V TMA loads; the pipeline verifier accepting the schedule;
* interpreted (fa4mlir.interpret, CPU): numerics by the FA rule against the float32 kvcache reference
  over a shuffled page table at page sizes 1 and 5, lengths 0, 1, page - 1, page, page + 1 and two K/V
  blocks, NaN in every unused page and row. The kernel is interpreted, never run (no Blackwell GPU).
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from fa4mlir.kernels.attention_sm100_config import PAGED_GATHER_LAUNCH_PARAMS, FA4Config, grid, paged_launch_args

DECODE = dict(num_q_tiles=1, fuse_gqa=True, causal=True, num_q_heads=8, num_kv_heads=2)


def _gather(d: int, page_size: int) -> FA4Config:
    return FA4Config(head_dim=d, head_dim_v=d, page_size=page_size, **DECODE)


# ---- config ---------------------------------------------------------------------------------------
def test_every_page_size_is_supported_on_the_decode_route():
    gathered = []
    for page_size in range(1, 257):
        c = _gather(128, page_size)
        assert c.supported() == (True, ""), (page_size, c.supported())
        if c.gather:
            gathered.append(page_size)
            assert c.launch_params == PAGED_GATHER_LAUNCH_PARAMS and c.smem_plan()["gather_rows"] == 128 * 4
        else:
            assert c.box_rows >= 16 and "gather_rows" not in c.smem_plan()
    # the gather takes exactly the page sizes whose boxes would hold fewer than 16 rows
    assert gathered == [p for p in range(1, 257) if np.gcd(128, p) < 16]
    assert {1, 5, 8, 15, 24, 255} <= set(gathered) and 16 not in gathered
    assert "paged 5 (row gather)" in _gather(64, 5).description()
    assert [n for n, kind in PAGED_GATHER_LAUNCH_PARAMS if kind == "ptr"][:2] == ["k", "v"]


@pytest.mark.parametrize("kw,reason", [
    (dict(page_size=5), "row gather of the decode route"),
    (dict(page_size=8, causal=True), "the two-Q-tile CTA has only 48-register warps"),
    (dict(page_size=5, kv_dtype="e4m3", kv_scale="tensor", num_q_tiles=1, fuse_gqa=True),
     "the row gather of smaller pages is built for bf16/f16 caches"),
])
def test_gather_refusals_say_why(kw, reason):
    ok, why = FA4Config(**kw).supported()
    assert not ok and reason in why, why


# ---- compiled ---------------------------------------------------------------------------------------
COMPILED = [_gather(64, 5), _gather(128, 1)]


@pytest.fixture(scope="module")
def compiled():
    from fa4mlir import lowering
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.lowering import CompileOptions
    return {c: lowering.lower(k100.build(c), CompileOptions(cubin_backend="nvjitlink-lto"), key="test-sm100-gather")
            for c in COMPILED}


@pytest.mark.parametrize("index", range(len(COMPILED)))
def test_gather_compiles_with_zero_spills_and_sass(compiled, index):
    from fa4mlir.sass import disassemble, find_nvdisasm
    cfg = COMPILED[index]
    art = compiled[cfg]
    r = art.resources
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    assert not r["setmaxnreg_ignored"] and r["registers"] == 128 and r["threads"] == 512
    plan = cfg.smem_plan()
    assert plan["total"] <= art.smem_bytes <= plan["total"] + 1024
    assert [(p.name, p.kind) for p in art.params] == list(cfg.launch_params)
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    sass = disassemble(art.cubin)
    count = lambda op: len(re.findall(rf"\b{op}\b", sass))  # noqa: E731
    assert re.search(r"\bLDG\.E\.128", sass) and re.search(r"\bSTS\.128", sass)   # 16-byte loads and stores
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert count("UTMALDG") == cfg.padded_head_dim // 64      # Q's boxes only: K and V are gathered
    assert count("UTCHMMA") % (cfg.padded_head_dim // 16 + cfg.bn // 16) == 0


def test_gather_verifier_accepts_the_schedule():
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.passes import registry
    for cfg in COMPILED:
        registry.run_passes(k100.build(cfg).module, ["fa4-verify-pipelines"])


# ---- interpreted numerics ------------------------------------------------------------------------------
@pytest.mark.parametrize("page", [1, 5])
def test_gather_kernel_interpreted_by_the_fa_rule(page):
    """D64, GQA 8 query heads over 2 KV heads, seqlen_q 3, causal bottom-right; NaN in unused pages and
    rows and in O before the call."""
    torch = pytest.importorskip("torch")
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm100 as k100
    from fa4mlir.testing import FaTally, attention_math
    from fa4mlir.testing_kvcache import kvcache_reference
    from test_attention_sm100_paged import _bits, _paged_cache
    d, heads, kv_heads, seqlen_q = 64, 8, 2, 3
    lengths = sorted({0, 1, max(page - 1, 1), page, page + 1}) + [150]
    cfg = _gather(d, page)
    gen = torch.Generator().manual_seed(27 + page)
    batch = len(lengths)
    q = torch.randn(batch, seqlen_q, heads, d, generator=gen).to(torch.bfloat16)
    k, v, table = _paged_cache(torch, gen, lengths, page, kv_heads, d)
    kb, vb = _bits(k, torch), _bits(v, torch)
    lens = np.array(lengths, np.int32)
    o = np.full((batch, seqlen_q, heads, d), 0x7FC0, np.uint16)
    lse = np.full((batch, heads, seqlen_q), np.nan, np.float32)

    class P:
        pass
    P.batch, P.heads, P.seqlen_q, P.softmax_scale = batch, heads, seqlen_q, d ** -0.5
    args = paged_launch_args(cfg, P, dict(q=_bits(q, torch), k=kb, v=vb, o=o, lse=lse, page_table=table,
                                          cache_seqlens=lens), num_pages=k.shape[0], page_table_stride=table.shape[1])
    t0 = time.perf_counter()
    interpret.load(k100.build(cfg)).launch(grid(cfg, P), args)
    seconds = time.perf_counter() - t0
    out = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16).double()
    lse_t = torch.from_numpy(lse).double()
    kf, vf = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).float() for x in (kb, vb))
    ref = kvcache_reference(q.float(), kf, vf, torch.from_numpy(lens), torch.from_numpy(table), compute_dtype=np.float32)
    assert not torch.isnan(out).any() and not torch.isnan(lse_t).any()
    empty = lengths.index(0)
    assert (out[empty] == 0).all() and torch.isposinf(lse_t[empty]).all()      # length 0: no key seen
    tally = FaTally()
    for b, n in enumerate(lengths):
        if not n:
            continue
        t = np.arange(n)
        rows = torch.from_numpy(table[b][t // page] * page + t % page)
        k_rows, v_rows = (x.reshape(-1, kv_heads, d)[rows].to(torch.bfloat16) for x in (kf, vf))
        low_o, low_l = attention_math(q[b:b + 1], k_rows[None], v_rows[None], d ** -0.5, True, torch.bfloat16)
        tally.add(out[b], low_o[0].double(), ref["out"][b].double(),
                  lse_t[b], low_l[0].double(), ref["lse"][b].double())
    print(f"interpreted page {page} in {seconds:.1f} s: {tally.errs}")
    tally.check()
