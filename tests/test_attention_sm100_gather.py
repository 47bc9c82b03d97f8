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

import numpy as np
import pytest

from fa4mlir.kernels.attention_sm100_config import PAGED_GATHER_LAUNCH_PARAMS, FA4Config
from tests._sm100_helpers import check_compiled, compiled, interpret_paged, paged_cache, sass_count, sass_of

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


@pytest.mark.parametrize("index", range(len(COMPILED)))
def test_gather_compiles_with_zero_spills_and_sass(index):
    cfg = COMPILED[index]
    art, _ = compiled(cfg, "test-sm100-gather", "nvjitlink-lto")
    check_compiled(cfg, art)
    sass = sass_of(art)
    assert re.search(r"\bLDG\.E\.128", sass) and re.search(r"\bSTS\.128", sass)   # 16-byte loads and stores
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert sass_count(sass, "UTMALDG") == cfg.padded_head_dim // 64      # Q's boxes only: K and V are gathered
    assert sass_count(sass, "UTCHMMA") % (cfg.padded_head_dim // 16 + cfg.bn // 16) == 0


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
    d, heads, kv_heads, seqlen_q = 64, 8, 2, 3
    lengths = sorted({0, 1, max(page - 1, 1), page, page + 1}) + [150]
    cfg = _gather(d, page)
    gen = torch.Generator().manual_seed(27 + page)
    batch = len(lengths)
    q = torch.randn(batch, seqlen_q, heads, d, generator=gen).to(torch.bfloat16)
    k, v, table = paged_cache(torch, gen, lengths, page, kv_heads, d)
    out, lse_t, tally, seconds = interpret_paged(torch, cfg, q, k, v, table, lengths, page)
    empty = lengths.index(0)
    assert (out[empty] == 0).all() and torch.isposinf(lse_t[empty]).all()      # length 0: no key seen
    print(f"interpreted page {page} in {seconds:.1f} s: {tally.errs}")
    tally.check()
