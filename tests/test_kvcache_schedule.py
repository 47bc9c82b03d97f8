"""Deviceless: the KV-cache operand's row-index math (kernels/common/paging.py) and the decode
schedule (kernels/common/decode_schedule.py): page division, TMA boxes per tile, the fetch choice,
pack-GQA geometry, the split heuristic and the split partition."""
from __future__ import annotations

import random

import pytest

from fa4mlir.kernels.common import decode_schedule as ds
from fa4mlir.kernels.common import paging

PAGE_SIZES = [1, 2, 3, 7, 8, 16, 24, 32, 40, 48, 64, 96, 100, 128, 129, 255, 256]


@pytest.mark.parametrize("page_size", PAGE_SIZES + [1000, 4096, 12345])
def test_page_divisor_matches_divmod(page_size):
    div = paging.PageDivisor.of(page_size)
    assert (div.log2 is not None) == (page_size & (page_size - 1) == 0)
    rng = random.Random(page_size)
    tokens = [0, 1, page_size - 1, page_size, page_size + 1, 2**31 - 1] + [rng.randrange(2**31) for _ in range(200)]
    for t in tokens:
        assert div.split(t) == divmod(t, page_size), t


def test_page_divisor_refuses_bad_input():
    with pytest.raises(ValueError):
        paging.PageDivisor.of(0)
    with pytest.raises(ValueError):
        paging.PageDivisor.of(16).split(2**31)
    with pytest.raises(ValueError):
        paging.check_page_size(257)


def test_pool_row_follows_the_page_table():
    div = paging.PageDivisor.of(3)
    table = [7, 2, 5]
    rows = [paging.pool_row(table, t, div) for t in range(9)]
    assert rows == [21, 22, 23, 6, 7, 8, 15, 16, 17]


@pytest.mark.parametrize("bn", [16, 64, 96, 128, 176])
@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_max_pages_per_tile_is_the_brute_force_maximum(bn, page_size):
    starts = range(0, bn * page_size * 2 + 1, bn)
    assert paging.max_pages_per_tile(bn, page_size) == max(paging.pages_spanned(t0, bn, page_size) for t0 in starts)


@pytest.mark.parametrize("bn", [64, 128, 176])
@pytest.mark.parametrize("page_size", PAGE_SIZES + [8192])
@pytest.mark.parametrize("fp8", [False, True])
def test_fetch_plan_boxes_never_straddle_a_page(bn, page_size, fp8):
    plan = paging.fetch_plan(bn, page_size, fp8=fp8)
    if plan.fetch is paging.KVFetch.TMA_BOXES:
        assert plan.box_rows * plan.boxes_per_tile == bn
        least = paging.MIN_FP8_TMA_BOX_ROWS if fp8 else paging.MIN_TMA_BOX_ROWS
        assert plan.box_rows >= least and plan.boxes_per_tile <= paging.MAX_TMA_BOXES
        for t0 in range(0, 4 * bn * page_size, bn):
            for b in range(plan.boxes_per_tile):
                first = t0 + b * plan.box_rows
                assert paging.pages_spanned(first, plan.box_rows, page_size) == 1
    else:
        assert plan.fetch is paging.KVFetch.CP_ASYNC_GATHER and plan.boxes_per_tile == bn


def test_fetch_choice_per_page_size():
    """One box per tile for a contiguous cache and page sizes that are multiples of bn, a box per
    page for 16/32/64, 8-row boxes for 8/24/40 at bn 64 ([D-decode-box8]; at bn 128 that is 16
    boxes, past MAX_TMA_BOXES: gather), gather for 1-7 and odd sizes, and for an FP8 cache's
    8-row boxes; sm_100a gathers four rows at a time."""
    F = paging.KVFetch
    assert paging.fetch_plan(128, 8192) == paging.FetchPlan(F.TMA_BOXES, 128, 1)
    assert paging.fetch_plan(128, 256) == paging.FetchPlan(F.TMA_BOXES, 128, 1)
    assert paging.fetch_plan(128, 16) == paging.FetchPlan(F.TMA_BOXES, 16, 8)
    assert paging.fetch_plan(128, 64) == paging.FetchPlan(F.TMA_BOXES, 64, 2)
    assert paging.fetch_plan(128, 96) == paging.FetchPlan(F.TMA_BOXES, 32, 4)
    assert paging.fetch_plan(128, 1).fetch is F.CP_ASYNC_GATHER
    assert paging.fetch_plan(128, 3).fetch is F.CP_ASYNC_GATHER
    assert paging.fetch_plan(128, 8).fetch is F.CP_ASYNC_GATHER            # 16 boxes of 8 rows
    for page in (8, 24, 40, 56, 200):                                       # gcd(64, page) = 8
        assert paging.fetch_plan(64, page) == paging.FetchPlan(F.TMA_BOXES, 8, 8)
        assert paging.fetch_plan(64, page, "sm_100a") == paging.FetchPlan(F.TMA_BOXES, 8, 8)
        assert paging.fetch_plan(64, page, fp8=True) == paging.FetchPlan(F.CP_ASYNC_GATHER, 1, 64)
    assert paging.fetch_plan(64, 16, fp8=True) == paging.FetchPlan(F.TMA_BOXES, 16, 4)
    assert paging.fetch_plan(64, 48) == paging.FetchPlan(F.TMA_BOXES, 16, 4)
    for page in (1, 2, 4, 7, 12, 20, 36):                                   # gcd(64, page) < 8
        assert paging.fetch_plan(64, page).fetch is F.CP_ASYNC_GATHER
    assert paging.fetch_plan(128, 1, "sm_100a") == paging.FetchPlan(F.CP_ASYNC_GATHER, 1, 128)   # gather4: not built
    assert paging.fetch_plan(128, 100, paged=False) == paging.FetchPlan(F.TMA_BOXES, 128, 1)   # contiguous


@pytest.mark.parametrize("seqlen_q", [1, 2, 3, 4, 7, 16, 64, 65, 300])
@pytest.mark.parametrize("heads,kv_heads", [(8, 8), (32, 8), (12, 2), (16, 1), (6, 1), (48, 3)])
def test_pack_gqa_geometry(seqlen_q, heads, kv_heads):
    geo = ds.pack_gqa(seqlen_q, heads, kv_heads)
    group = heads // kv_heads
    assert geo.group == group
    if group == 1 or seqlen_q % ds.TILE_M == 0:
        assert not geo.packed
    if geo.packed:
        assert geo.rows == seqlen_q * group
        assert geo.m_tiles_per_kv_head < group * ds.ceil_div(seqlen_q, ds.TILE_M)
        seen = [geo.row(r) for r in range(geo.rows)]
        assert seen == [(t, j) for t in range(seqlen_q) for j in range(group)]   # token-major, each once
    else:
        assert geo.rows == seqlen_q and geo.m_tiles_per_kv_head == group * ds.ceil_div(seqlen_q, ds.TILE_M)
    if seqlen_q * group <= ds.TILE_M:
        assert geo.m_tiles_per_kv_head == 1        # decode: one tile per KV head


def test_pack_gqa_refuses_a_ragged_group():
    with pytest.raises(ValueError):
        ds.pack_gqa(1, 10, 4)


def test_split_heuristic_examples():
    """H200 (132 SMs), bn 128: the issue's decode (batch 64 x 8 KV heads) fills the SMs; one
    sequence of 8k keys over 8 KV heads splits so that one wave runs; short caches never split."""
    assert ds.num_splits_heuristic(64 * 8, 8192, 128, 132) == 1
    assert ds.num_splits_heuristic(8, 8192, 128, 132) == 16
    assert ds.num_splits_heuristic(8, 512, 128, 132) == 1          # 4 tiles: not worth a split
    assert ds.num_splits_heuristic(1, 2**20, 128, 132) == 128      # capped by MAX_SPLITS
    assert ds.num_splits_heuristic(1, 0, 128, 132) == 1


@pytest.mark.parametrize("ctas", [1, 2, 5, 8, 16, 33, 64, 100, 105, 106, 500])
@pytest.mark.parametrize("max_seqlen_k", [1, 128, 1000, 4096, 65536, 10**6])
@pytest.mark.parametrize("num_sms", [78, 132, 148])
def test_split_heuristic_bounds(ctas, max_seqlen_k, num_sms):
    bn = 128
    s = ds.num_splits_heuristic(ctas, max_seqlen_k, bn, num_sms)
    n_tiles = ds.ceil_div(max_seqlen_k, bn)
    assert 1 <= s <= ds.MAX_SPLITS and s <= num_sms
    if s > 1:
        assert ctas < ds.FILL_FRACTION * num_sms
        assert n_tiles // s >= ds.MIN_TILES_PER_SPLIT
        assert ds.split_cost(s, ctas, n_tiles, num_sms) < ds.split_cost(1, ctas, n_tiles, num_sms)
    assert s == ds.num_splits_heuristic(ctas, max_seqlen_k, bn, num_sms)   # deterministic


def test_split_heuristic_refuses_bad_input():
    with pytest.raises(ValueError):
        ds.num_splits_heuristic(0, 100, 128, 132)
    with pytest.raises(ValueError):
        ds.num_splits_heuristic(1, 100, 128, 132, max_splits=0)


@pytest.mark.parametrize("n_tiles", [0, 1, 2, 3, 7, 16, 17, 100])
@pytest.mark.parametrize("num_splits", [1, 2, 3, 4, 16])
def test_split_range_partitions_in_order(n_tiles, num_splits):
    ranges = [ds.split_range(n_tiles, num_splits, s) for s in range(num_splits)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n_tiles
    for (b0, e0), (b1, _) in zip(ranges, ranges[1:]):
        assert e0 == b1
    sizes = [e - b for b, e in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    with pytest.raises(ValueError):
        ds.split_range(n_tiles, num_splits, num_splits)


def test_balance_splits_bound_each_range_for_ragged_caches():
    # decode_paged (64 x 8 KV heads, capacity 16384, bn 64, two CTAs per SM on 132 SMs): 8 ranges of 32 tiles
    assert ds.balance_splits(512, 16384, 64, 264) == 8
    assert ds.balance_splits(512, 4096, 64, 264) == 1                 # short: 64 tiles
    assert ds.balance_splits(4096, 1 << 20, 64, 264) == 1             # capped by the waves
    for ctas, cap in ((1, 1 << 20), (64, 10**5), (512, 16384)):
        s = ds.balance_splits(ctas, cap, 64, 264)
        assert 1 <= s <= ds.MAX_SPLITS and s == ds.balance_splits(ctas, cap, 64, 264)
