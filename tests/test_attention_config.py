"""Deviceless tests of attention_sm90_config: the launch grid, the tile orders of persistent and
causal kernels (every tile once, balanced work, CTAs running together sharing few heads), tile and
softmax-knob validation, the SMEM and register plans, kernel names, and the fast divisors the
kernels divide by.
"""
import heapq
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir.attention import AttnProblem
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common import fastdiv
from fa4mlir.kernels.common.fields import ConfigError, ConfigTypeError
from fa4mlir.testing import raises


def C(**fields) -> acfg.AttnConfig:
    return acfg.AttnConfig(**fields)


def P(batch, heads, seqlen_q, seqlen_k=None, group=1) -> AttnProblem:
    """A problem of these sizes (kv_heads = heads // group), bf16, scale 0.125."""
    return AttnProblem(batch, seqlen_q, seqlen_q if seqlen_k is None else seqlen_k, heads, heads // group, 128,
                       "bf16", False, 0.125)


def divisors(args, name):
    return args[f"{name}_mul"], args[f"{name}_shr"]


@pytest.mark.parametrize("seqlen_q, tiles", [(1, 1), (127, 1), (128, 1), (129, 2), (1000, 8), (4224, 33)])
def test_grid_tiles_queries(seqlen_q, tiles):
    assert acfg.grid(C(bm=128), P(3, 5, seqlen_q)) == (tiles, 5, 3)


def test_flops():
    assert acfg.flops(2, 8, 1000, 300, 128, False) == 4 * 2 * 8 * 1000 * 300 * 128
    assert acfg.flops(2, 8, 1000, 300, 128, True) == 2 * 2 * 8 * 1000 * 300 * 128


@pytest.mark.parametrize("over, exc, words", [
    (dict(exp2_poly_stride=1), ConfigError, ["exp2_poly_stride", "got 1", "0 (hardware exp2 only)"]),
    (dict(exp2_poly_stride=-2), ConfigError, ["exp2_poly_stride", "got -2"]),
    (dict(exp2_poly_stride=True), ConfigTypeError, ["exp2_poly_stride", "an int", "got True (bool)"]),
    (dict(exp2_poly_stride=33), ConfigError, ["exp2_poly_stride", "bn / 4 = 32", "got 33"]),
    (dict(exp2_poly_stride=4.0), ConfigTypeError, ["exp2_poly_stride", "an int", "got 4.0 (float)"]),
    (dict(rescale_threshold=-1.0), ConfigError, ["rescale_threshold", "[0, 15.0]", "got -1.0"]),
    (dict(rescale_threshold=16.0), ConfigError, ["rescale_threshold", "fit f16", "got 16.0"]),
    (dict(rescale_threshold=float("nan")), ConfigTypeError, ["rescale_threshold", "finite number", "got nan"]),
    (dict(rescale_threshold="8"), ConfigTypeError, ["rescale_threshold", "got '8' (str)"]),
], ids=["stride1", "stride-neg", "stride-bool", "stride-big", "stride-float", "thr-neg", "thr-big", "thr-nan",
        "thr-str"])
def test_softmax_knobs_are_validated(over, exc, words):
    raises(exc, words, acfg.AttnConfig(**over).validate)


@pytest.mark.parametrize("over, words", [
    (dict(bm=256), ["bm must be one of (128, 192)", "got 256"]),
    (dict(bm=64), ["bm must be one of", "got 64"]),
    (dict(bm=192, mma_regs=240), ["register budgets", "384 x 240", "3 consumer warpgroups"]),
    # 32 + 2 x 240 fits 64K but not the 168 x 384 registers a 384-thread CTA is launched with
    (dict(load_regs=32, mma_regs=240), ["launch allocation of 64512", "168 x 384", "setmaxnreg.inc"]),
    (dict(bm=192, mma_regs=164), ["multiples of 8", "mma_regs=164"]),
    (dict(load_regs=16), ["[24, 256]", "load_regs=16"]),
], ids=["bm256", "bm64", "bm192-regs", "bm128-pool", "regs-odd", "regs-low"])
def test_tiles_are_validated(over, words):
    raises(ConfigError, words, acfg.AttnConfig(**over).validate)


def test_fast_divisors_divide_exactly():
    rng = np.random.default_rng(7)
    divisors = [*range(1, 2049), *(int(x) for x in rng.integers(2049, 2**31, 2000)), 2**30, 2**30 + 1, 2**31 - 1]
    for d in divisors:
        mul, shr = fastdiv.divisor(d)
        assert 0 <= mul < 2**32 and 0 <= shr < 32
        for n in {0, 1, d - 1, d, d + 1, 2 * d - 1, 2**31 - 1, 2**31 - d, *(int(x) for x in rng.integers(0, 2**31, 4))}:
            if 0 <= n < 2**31:
                assert fastdiv.divide(n, mul, shr) == n // d, (d, n)
    for bad in (0, -3, 2**31, 2.0):
        raises(ValueError, ["fast divisor"], fastdiv.divisor, bad)
    raises(ValueError, ["2**31"], fastdiv.divide, 2**31, *fastdiv.divisor(3))


def test_persistent_grid_is_one_cta_per_sm():
    pers = C(bm=128, persistent=True)
    assert acfg.grid(pers, P(1, 16, 16384)) == (2048, 1, 1)              # no SM count: one CTA per tile
    assert acfg.grid(C(bm=128), P(1, 16, 16384), 132) == (128, 16, 1)  # not persistent: the SM count is unused
    assert acfg.grid(pers, P(1, 16, 16384), 132) == (132, 1, 1)          # 2048 tiles over 132 SMs
    assert acfg.grid(pers, P(2, 3, 1000), 132) == (48, 1, 1)             # 8 x 3 x 2 tiles: one CTA each
    assert acfg.grid(pers, P(2, 3, 1000), 3) == (3, 1, 1)
    assert acfg.grid(C(head_dim=64, bm=192, persistent=True), P(1, 1, 1000), 132) == (6, 1, 1)
    assert acfg.grid(pers, P(2, 3, 0), 132) == (0, 1, 1)


def _causal_schedule(batch, heads, seqlen_q, grid_size):
    """Every CTA's tiles under causal_pair_slot, dividing by the split launch_args passes."""
    cfg = C(bm=128, causal=True, persistent=True)
    args = acfg.launch_args(cfg, P(batch, heads, seqlen_q), {n: n for n in "q k v o lse".split()})
    mul, shr = divisors(args, "tiles")
    m_tiles = acfg.query_tiles(cfg, seqlen_q)
    slots = (m_tiles + 1) // 2 * heads * batch * 2
    per_cta = []
    for c in range(grid_size):
        s, tiles = 2 * c, []
        while s < slots:
            m_block, hb, s = acfg.causal_pair_slot(s, m_tiles, grid_size, lambda u: fastdiv.divide(u, mul, shr))
            tiles.append((hb, m_block))
        per_cta.append(tiles)
    return m_tiles, per_cta


@pytest.mark.parametrize("batch,heads,seqlen_q,grid_size", [
    (16, 16, 1024, 132), (8, 16, 2048, 132), (1, 16, 16384, 132), (1, 16, 16384, 3),
    (2, 3, 4224, 132), (2, 3, 4224, 7), (1, 2, 300, 3), (1, 1, 1, 1), (4, 16, 4096, 132)])
def test_causal_persistent_order_covers_every_tile_once_and_balances(batch, heads, seqlen_q, grid_size):
    m_tiles, per_cta = _causal_schedule(batch, heads, seqlen_q, grid_size)
    seen = [t for tiles in per_cta for t in tiles]
    assert sorted(seen) == [(hb, m) for hb in range(batch * heads) for m in range(m_tiles)]
    # work in KV blocks (bn = bm, seqlen_k = seqlen_q): tile m visits m + 1. A CTA gets at most
    # ceil(pairs / grid) pairs of m_tiles + 1 blocks each, so nothing is left for a few CTAs to finish
    pairs = (m_tiles + 1) // 2 * batch * heads
    work = [sum(m + 1 for _, m in tiles) for tiles in per_cta]
    assert max(work) <= -(-pairs // grid_size) * (m_tiles + 1)
    # locality: the tiles CTAs run at the same time (each one's i-th pair) share few heads, not grid
    rounds = [{per_cta[c][i][0] for c in range(grid_size) if i < len(per_cta[c])} for i in (0, 2)]
    assert all(len(r) <= -(-grid_size * 2 // m_tiles) + 1 for r in rounds), rounds


def _dealt_schedule(tiles, grid_size, deal=True):
    """Every CTA's tiles under dealt_tile (deal=False: a plain stride of grid_size, the order before)."""
    per_cta = []
    for c in range(grid_size):
        slot, mine = c, []
        for base in range(0, tiles, grid_size):
            t, slot = acfg.dealt_tile(base, slot, grid_size) if deal else (base + c, c)
            if t < tiles:
                mine.append(t)
        per_cta.append(mine)
    return per_cta


@pytest.mark.parametrize("tiles,grid_size", [
    (3072, 132), (384, 132), (100, 132), (2752, 132), (660, 132), (7, 3), (1, 1), (1000, 7), (17424 + 5, 132)])
def test_dealt_tiles_cover_every_tile_once(tiles, grid_size):
    per_cta = _dealt_schedule(tiles, grid_size)
    assert sorted(t for mine in per_cta for t in mine) == list(range(tiles))
    # round r's tiles are r * grid .. r * grid + grid - 1, whichever CTA takes them: the CTAs of a round
    # still work on neighbouring tiles (a few heads' K and V in L2)
    for mine in per_cta:
        assert all(i * grid_size <= t < (i + 1) * grid_size for i, t in enumerate(mine))


@pytest.mark.parametrize("batch,heads,seqlen", [(16, 32, 1024), (4, 32, 4096), (8, 32, 2048), (2, 16, 1000)])
def test_dealt_tiles_share_out_the_short_last_tiles(batch, heads, seqlen):
    """D64 non-causal's persistent 192-row kernel on 132 SMs: a head's last query tile holds 64 or 128
    rows, and its empty warpgroups skip their work. Counting such a tile as half a full one, every CTA
    ends within one tile of the mean under dealt_tile; a plain stride of 132 over 6 tiles per head
    (seqlen 1024) gives 22 CTAs every short tile and the rest none, one more tile than the mean."""
    cfg = C(head_dim=64, bm=192, persistent=True)
    m_tiles = acfg.query_tiles(cfg, seqlen)
    tiles, grid_size = m_tiles * batch * heads, acfg.grid(cfg, P(batch, heads, seqlen), 132)[0]
    short = seqlen % 192 != 0
    cost = lambda t: 0.5 if short and t % m_tiles == m_tiles - 1 else 1.0  # noqa: E731
    mean = sum(map(cost, range(tiles))) / grid_size
    work = [sum(map(cost, mine)) for mine in _dealt_schedule(tiles, grid_size)]
    assert max(work) <= mean + 1, (max(work), mean)
    if seqlen == 1024:
        stride = [sum(map(cost, mine)) for mine in _dealt_schedule(tiles, grid_size, deal=False)]
        assert max(stride) > mean + 1, (max(stride), mean)


def _makespan(costs, sms=132):
    """When the last of `costs` ends, handed out in order to whichever of `sms` SMs frees up first (as
    the hardware hands out a grid's blocks)."""
    free = [0.0] * sms
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


@pytest.mark.parametrize("batch,heads,seqlen,head_dim,group,l2", [
    (16, 8, 1024, 256, 1, acfg.L2_BYTES), (2, 8, 8192, 256, 1, acfg.L2_BYTES), (1, 8, 16384, 256, 1, acfg.L2_BYTES),
    (4, 16, 4096, 128, 1, acfg.L2_BYTES), (2, 32, 8192, 64, 1, acfg.L2_BYTES), (3, 5, 1000, 128, 1, 1 << 20),
    (2, 12, 4224, 64, 4, 3 << 20), (7, 3, 300, 128, 3, 200000), (1, 1, 1, 64, 1, acfg.L2_BYTES),
    (3, 5, 1000, 128, 1, acfg.L2_BYTES), (2, 12, 4224, 64, 4, acfg.L2_BYTES), (4, 6, 4224, 256, 2, acfg.L2_BYTES)])
def test_causal_sections_cover_every_tile_once_longest_first(batch, heads, seqlen, head_dim, group, l2):
    cfg = C(bm=128, causal=True, head_dim=head_dim)
    problem = P(batch, heads, seqlen, group=group)
    args = acfg.launch_args(cfg, problem, {n: n for n in "q k v o lse".split()}, l2)
    (tmul, tshr), shift, (rmul, rshr) = divisors(args, "tiles"), args["section_shift"], divisors(args, "rest")
    m_tiles, hb_total = acfg.query_tiles(cfg, seqlen), batch * heads
    grid = acfg.grid(cfg, problem)
    assert grid == (m_tiles * hb_total, 1, 1)
    order = [acfg.section_tile(t, m_tiles, hb_total, shift, lambda u: fastdiv.divide(u, tmul, tshr),
                               lambda u: fastdiv.divide(u, rmul, rshr)) for t in range(grid[0])]
    assert sorted(order) == [(m, hb) for m in range(m_tiles) for hb in range(hb_total)]
    # sections: 2**shift (head, batch) indices whose KV heads' K and V fit in the L2 share (or one index)
    sw, budget = 1 << shift, l2 * acfg.SECTION_L2_SHARE
    kv_bytes = 2 * seqlen * head_dim * 2
    kv_heads = lambda hbs: len({(hb // heads, hb % heads // group) for hb in hbs})  # noqa: E731
    assert sw == 1 or all(kv_heads(range(s, s + sw)) * kv_bytes <= budget for s in range(0, hb_total - sw + 1, sw))
    assert sw == hb_total or sw * 2 > hb_total or max(kv_heads(range(s, s + 2 * sw))
                                                       for s in range(0, hb_total - 2 * sw + 1)) * kv_bytes > budget
    # within a section, longest rows first: the query tile never grows, every index once per tile
    for start in range(0, hb_total, sw):
        part = [(m, hb) for m, hb in order if start <= hb < start + sw]
        assert part == sorted(part, key=lambda x: (-x[0], x[1]))
    # the point of the order: handed out in turn to 132 SMs, the grid ends within 3% of its ideal or
    # two of the shortest tiles after it (tile cost: its KV blocks at bn = 128 and seqlen_k = seqlen,
    # plus one for the tile's own work). With an H100/H200's L2; the small ones above test the rest
    # and GQA (sections of one head leave the head-by-head order's tail)
    if l2 != acfg.L2_BYTES:
        return
    cost = {m: min(m + 1, m_tiles) + 1 for m in range(m_tiles)}
    ideal = max(sum(cost[m] for m, _ in order) / 132, max(cost.values()))
    assert _makespan([cost[m] for m, _ in order]) <= max(1.03 * ideal, ideal + 2 * cost[0])


def test_causal_head_by_head_order_ends_late():
    """What section_tile replaced, at D256 causal 8k of the FA3 grid: every head's tiles, longest
    first, one head after the other, leaves the last heads' long tiles running after the rest."""
    m_tiles, hb_total = 64, 16
    cost = [m + 2 for _ in range(hb_total) for m in reversed(range(m_tiles))]
    assert _makespan(cost) > 1.08 * sum(cost) / 132


def test_persistent_needs_room_for_a_second_q_tile_and_an_o_tile():
    ok = acfg.AttnConfig(head_dim=128, persistent=True).validate()
    assert ok.q_stages == 2 and acfg.AttnConfig(head_dim=128).q_stages == 1
    assert ok.smem_bytes() == acfg.AttnConfig(head_dim=128).smem_bytes() + 2 * 128 * 256 <= 227 * 1024
    raises(ConfigError, ["SMEM", "Q and O tiles of persistent"],
           acfg.AttnConfig(head_dim=256, bn=80, persistent=True).validate)


@pytest.mark.parametrize("over, split", [
    (dict(), (24, 240)),
    (dict(persistent=True), (32, 232)),      # 24 spills the producer's persistent tile loop
    (dict(bm=192, head_dim=64), (32, 160)),   # D128 needs ~196 registers there (test_attention_registers)
    (dict(bm=192, persistent=True, head_dim=64), (32, 160)),   # D128 has no SMEM for it
    (dict(mma_regs=232), (24, 232)),         # an explicit budget is kept
], ids=["default", "persistent", "bm192", "bm192-persistent", "explicit"])
def test_auto_register_split_fills_the_launch_allocation(over, split):
    cfg = acfg.AttnConfig(**over).validate()
    assert (cfg.producer_regs, cfg.consumer_regs) == split
    assert 128 * (cfg.producer_regs + cfg.consumers * cfg.consumer_regs) <= cfg.register_pool
    assert cfg.register_pool == {128: 168 * 384, 192: 128 * 512}[cfg.bm]
    # auto follows the shape through dataclasses.replace (the kernel reads the properties)
    pers = replace(cfg, persistent=True)
    assert (pers.producer_regs, pers.consumer_regs) == (32, cfg.mma_regs or {128: 232, 192: 160}[cfg.bm])


def test_three_consumer_warpgroups():
    cfg = acfg.AttnConfig(head_dim=64, bm=192).validate()
    assert (cfg.consumers, cfg.threads) == (3, 512)
    assert acfg.grid(cfg, P(2, 4, 1000)) == (6, 4, 2)          # ceil(1000 / 192) query tiles
    assert acfg.AttnConfig().threads == 384


def test_softmax_knobs_name_the_kernel_only_when_set():
    assert acfg.AttnConfig().name_suffix() == ""
    assert acfg.AttnConfig(exp2_poly_stride=4).name_suffix() == "_poly4"
    assert acfg.AttnConfig(rescale_threshold=8).name_suffix() == "_lazy8"
    assert acfg.AttnConfig(exp2_poly_stride=2, rescale_threshold=7.5).name_suffix() == "_poly2_lazy7p5"
    # names stay unique and valid PTX identifiers
    assert acfg.AttnConfig(rescale_threshold=8.000001).name_suffix() == "_lazy8p000001"
    assert acfg.AttnConfig(rescale_threshold=1e-5).name_suffix() == "_lazy1em05"
    assert acfg.AttnConfig(rescale_threshold=8 + 2**-40).name_suffix() != "_lazy8"
    # 8 and 8.0 are one kernel: one key
    assert acfg.AttnConfig(rescale_threshold=8).key() == acfg.AttnConfig(rescale_threshold=8.0).key()
    assert acfg.AttnConfig(rescale_threshold=8).key()["rescale_threshold"] == 8.0
