"""The balanced split schedule of the sm_90a swap-AB FP8 decode kernel (DecodeConfig.balanced; the
schedule and its host twin: common/decode_balanced.py; the kernel's roles and notes:
attention_decode_sm90.py, attention_decode_sm90_swapab.py).

Grid: x = CTA c of `parts` per KV head, y = the head block (a KV head: swap AB packs GQA), z = 1.
Every warp of both roles finds the CTA's work from cache_seqlens itself (no host read, no
metadata kernel, CUDA-graph safe), in its prologue (`Range`):
    1. T = sum_b n_b: lane l sums n_b of b = l, l + 32, .. (MAX_BATCH bounds the trips), a xor tree;
    2. [lo, hi): T // live tiles, the first T % live CTAs one more (live = min(parts, T), at least 1;
       the division unrolled: udiv);
    3. a second trip over the batch, 32 sequences at a time, with each lane's inclusive prefix
       (decode_balanced.warp_scan's butterfly): b_first = #{b: P_b + n_b <= lo}, P_{b_first}
       (the largest such P_b + n_b), b_end = #{b: P_b < hi}.
Then each role walks sequences b_first .. b_end - 1 (its work items), carrying P_b and the count
of tiles it ran (its ring state: Pipeline.state_at, one ring position for the pipeline verifier): item b's local tiles are [max(lo - P_b, 0), min(hi - P_b, n_b)) (empty for an
empty sequence inside the range: the producer loads nothing, the consumer stores nothing).

Per item the producer loads the item's tiles as the split kernel's (attention_decode_sm90._load_tiles,
from the carried ring state); the consumer loads the sequence's packed Q^T, runs the tiles
(swap AB, masked where they reach L_b), and stores: the whole sequence (begin 0, end n_b): O in q's
dtype and the LSE into out and lse (the unsplit epilogue's bits); a cut one: float32 O / l and the LSE
into split slot 2c (the CTA's first item) or 2c + 1 (a later one), o_partial [2 parts, seqlen_q,
heads, D], lse_partial [2 parts, heads, seqlen_q]. The combine (CombineConfig.balanced_bn) merges the
cut sequences' slots and writes O = 0, LSE = +inf for the empty ones.

Note "Per-item geometry" (the consumer at two CTAs per SM: 168 registers, which its tile loops use
whole): nothing but the item loop's b and tile count lives across an item's tile loops. The thread
geometry (_Consumer's rows, heads, Q / P / K offsets, the epilogue's addresses) derives from
thread_idx + 0, the 0 loaded from SMEM beside (lo, hi, b_first) at each use, so that neither LLVM nor
ptxas hoists it out of the item loop into registers it would spill; each phase (the unmasked tiles,
the masked tiles, the epilogue) derives its own, the item's fields (reloaded length) too; the tile
count alone is carried (P_b = P_{b_first} for the first item, lo + count after it), b_end is read from
SMEM at each loop test; the masked tiles compute their columns' ends themselves. A warp-max (contiguous)
kernel also reloads its scales per item at that + 0. ptxas 13 then spills nothing in the paged
kv_head-scale and contiguous kernels (100 and 496 bytes before) and 4 bytes in the paged tensor-scale
ones (tests/test_decode_balanced_compile.py bounds it).
"""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import Value, const, fast_div, select, vec
from . import attention_decode_sm90 as dec_kernel
from . import attention_decode_sm90_swapab as swapab
from .attention_decode_sm90_config import BALANCED_RANGE_BYTES
from .attention_decode_sm90_epilogue import _epilogue
from .common.constants import NEG_INF

LANES = 32


def warp_sum(kb, x: Value) -> Value:
    for off in (16, 8, 4, 2, 1):
        x = x + kb.shuffle_xor(x, off)
    return x


def warp_smax(kb, x: Value) -> Value:
    for off in (16, 8, 4, 2, 1):
        x = x.smax(kb.shuffle_xor(x, off))
    return x


def warp_scan(kb, x: Value, lane: Value) -> tuple[Value, Value]:
    """(inclusive prefix, warp total) of the lanes' x (decode_balanced.warp_scan's butterfly)."""
    prefix, total = x, x
    for d in (1, 2, 4, 8, 16):
        other = kb.shuffle_xor(total, d)
        prefix = select((lane & d).ne(0), prefix + other, prefix)
        total = total + other
    return prefix, total


def seq_length(kb, p, b: Value) -> Value:
    """L_b as the split kernel's _Work: cache_seqlens[b] clamped to [0, capacity - seqlen_new], plus
    the new tokens."""
    raw = kb.load(kb.gep(p["cache_seqlens"], b, "i32"), "i32", align=4)
    return raw.smax(0).smin(p["capacity"] - p["seqlen_new"]) + p["seqlen_new"]


def seq_tiles(kb, p, b: Value, bn: int) -> Value:
    return (seq_length(kb, p, b) + (bn - 1)) // bn


def lane_tiles(kb, p, k: Value, lane: Value, bn: int) -> tuple[Value, Value]:
    """(valid, n_b) of sequence b = 32 k + lane (0 past the batch, which reads sequence 0's length)."""
    b = k * LANES + lane
    valid = b.lt(p["batch"])
    return valid, select(valid, seq_tiles(kb, p, select(valid, b, const(0)), bn), const(0))


def total_tiles(kb, p, lane: Value, bn: int) -> Value:
    """T: every sequence's tiles, each lane a strided share, summed over the warp."""
    trips = (p["batch"] + (LANES - 1)) // LANES
    loop = kb.for_(const(0), trips, 1, carry=const(0))
    with loop as (k, acc):
        loop.yield_(acc + lane_tiles(kb, p, k, lane, bn)[1])
    return warp_sum(kb, loop.results)


def udiv(a: Value, b: Value) -> Value:
    """a // b for 0 <= a < 2^31, 1 <= b < 2^30 by restoring division (decode_balanced.udiv_steps): a
    runtime divisor's div.u32 is a ptxas subroutine, and any call in the kernel serialises its wgmmas."""
    q, r = const(0), const(0)
    for i in range(30, -1, -1):
        r = (r << 1) | ((a >> i) & 1)
        ge = r.ge(b)
        r = select(ge, r - b, r)
        q = q | (ge.to("i32") << i)
    return q


def cta_bounds(c: Value, total: Value, parts: Value) -> tuple[Value, Value]:
    """[lo, hi) of CTA c over live = min(parts, T) (>= 1) CTAs (decode_balanced.cta_lo: T // live tiles,
    the first T % live CTAs one more); CTAs past them: [T, T)."""
    live = total.smin(parts).smax(1)
    q = udiv(total, live)
    r = total - q * live
    lo = c * q + c.smin(r)
    hi = lo + q + select(c.lt(r), const(1), const(0))
    active = c.lt(live)
    return select(active, lo, total), select(active, hi, total)


class Range:
    """This CTA's global tiles [lo, hi) and the sequences it walks (module docstring, 1-3); computed
    by every warp of a role alike (all 32 lanes active)."""

    def __init__(self, kb, cfg, p):
        bn = cfg.bn
        lane = kb.thread_idx(0) % LANES
        self.c = kb.block_idx(0)
        total = total_tiles(kb, p, lane, bn)
        self.lo, self.hi = cta_bounds(self.c, total, p["parts"])
        trips = (p["batch"] + (LANES - 1)) // LANES
        zero = const(0)
        loop = kb.for_(zero, trips, 1, carry=(zero, zero, zero, zero))
        with loop as (k, (base, n_first, n_end, p_first)):
            valid, n = lane_tiles(kb, p, k, lane, bn)
            incl, chunk = warp_scan(kb, n, lane)
            incl = base + incl
            before = valid & incl.sle(self.lo)
            starts = valid & (incl - n).slt(self.hi)
            n_first = n_first + warp_sum(kb, select(before, const(1), zero))
            n_end = n_end + warp_sum(kb, select(starts, const(1), zero))
            p_first = p_first.smax(warp_smax(kb, select(before, incl, zero)))
            loop.yield_(base + chunk, n_first, n_end, p_first)
        _, self.b_first, self.b_end, self.p_first = loop.results

    def uniform(self, kb):
        """The range's values broadcast from lane 0 (kb.warp_uniform: ptxas then knows them uniform)."""
        for name in ("lo", "hi", "b_first", "b_end", "p_first"):
            setattr(self, name, kb.warp_uniform(getattr(self, name)))
        return self

    def item(self, kb, cfg, p, b: Value, start: Value) -> "Item":
        return Item(kb, cfg, p, (self.c, self.lo, self.hi, self.b_first), b, start)


class Item:
    """Sequence b as a work item of the CTA (the fields attention_decode_sm90._Work has, which the
    split kernel's producer, consumer and epilogue read): `start` = P_b; its local tiles [begin, end);
    `final`: the CTA holds the whole sequence; `split`: its partials' slot; `live`: any tile."""

    def __init__(self, kb, cfg, p, bounds: tuple, b: Value, start: Value, uniform: bool = False):
        c, lo, hi, b_first = bounds
        self.cfg = cfg
        self.batch = b
        self.m_tile = const(0)
        self.head_block = kb.block_idx(1)
        self.head_base = self.head_block * p["cta_heads"]
        self.kv_head = fast_div(self.head_base, *dec_kernel.div(p, "group"))
        self.length = seq_length(kb, p, b)
        self.n_tiles = (self.length + (cfg.bn - 1)) // cfg.bn
        self.q_start, self.seqlen_q, self.rows = None, p["seqlen_q"], p["rows"]
        self.begin = (lo - start).smax(0)
        last = (hi - start).smin(self.n_tiles)
        self.live = self.begin.slt(last)
        self.end = last.smax(self.begin)      # begin <= end: the rings advance by end - begin
        if uniform:     # the consumer warpgroup (with Range.uniform): the tile loops' bounds and the ring
            # position they advance warp-uniform for ptxas, so that what the wgmmas read (descriptors, stage
            # addresses) stays in uniform registers, not moved there (R2UR) before every wgmma
            self.begin, self.end = kb.warp_uniform(self.begin), kb.warp_uniform(self.end)
        self.tiles_run = self.end - self.begin
        self.final = self.begin.eq(0) & self.end.eq(self.n_tiles)
        self.split = c * 2 + select(b.eq(b_first), const(0), const(1))


def roles(kb, cfg, p, rings, staged):
    """The warp roles of the balanced kernel: the consumer warpgroup (warps 0-3) and the producer (warp 4)."""
    bounds = kb.smem("balanced_range", BALANCED_RANGE_BYTES, align=16)
    with kb.warp_roles():
        with kb.role("mma", first_warp=0, num_warps=4, regs=0):
            _mma_role(kb, cfg, p, rings, staged, bounds)
        with kb.role("load", first_warp=cfg.producer_first_warp, num_warps=cfg.producer_warps, regs=0):
            _load_role(kb, cfg, p, rings)


def _load_role(kb, cfg, p, rings):
    k_smem, v_smem, k_pipe, v_pipe = rings
    rng = Range(kb, cfg, p)
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(p["k_cache"])
        fa4.tma_prefetch(p["v_cache"])
        loop = kb.for_(rng.b_first, rng.b_end, 1, carry=(rng.p_first, const(0)))
        with loop as (b, (start, count)):
            item = rng.item(kb, cfg, p, b, start)
            dec_kernel._load_tiles(kb, cfg, item, p, k_smem, v_smem, k_pipe, v_pipe, k_pipe.state_at(count))
            loop.yield_(start + item.n_tiles, count + item.tiles_run)


def _mma_role(kb, cfg, p, rings, staged, bounds_smem):
    """The consumer over its items. The CTA's (lo, hi, b_first, 0) and (P_{b_first}, b_end) wait in SMEM
    (`bounds_smem`), and each item's fields and geometry are derived three times, before each tile loop
    and for the epilogue (note "Per-item geometry")."""
    k_smem, v_smem, k_pipe, v_pipe = rings
    rng = Range(kb, cfg, p).uniform(kb)
    t = kb.thread_idx(0) % 128
    with kb.if_(t.eq(0)).then_():
        kb.store(vec(rng.lo, rng.hi, rng.b_first, const(0)), bounds_smem, align=16)
        kb.store(vec(rng.p_first, rng.b_end, const(0), const(0)), kb.gep(bounds_smem, 16, "i8"), align=16)
    kb.named_barrier(dec_kernel.BAR_CONSUMER, 128)

    def item_of(b, count):
        """Item b after the CTA ran `count` tiles: P_b is P_{b_first} for the first item, else lo + count."""
        words = kb.load(bounds_smem, ("i32", 4), align=16)
        p_first = kb.load(kb.gep(bounds_smem, 16, "i8"), "i32", align=16)
        start = select(b.eq(words[2]), p_first, words[0] + count)
        item = Item(kb, cfg, p, (kb.block_idx(0), words[0], words[1], words[2]), b, start, uniform=True)
        item.zero = words[3]
        item.tid = kb.thread_idx(0) + item.zero      # + 0 from SMEM: note "Per-item geometry"
        return item

    def consumer(item):
        cs = dec_kernel._Consumer(kb, cfg, item, p, tid=item.tid)
        if cfg.swap_ab_warp_max:    # at _scalar_scales's index + 0 from SMEM (note "Per-item geometry")
            at = (item.zero if cfg.kv_scale == "tensor" else item.kv_head + item.zero).to("i64")
            k_scale, v_scale = (kb.load(kb.gep(p[n], at, "f32"), "f32", align=4) for n in ("k_scale", "v_scale"))
        else:
            k_scale, v_scale = dec_kernel._scalar_scales(cs)
        cs.scale_log2 = cs.scale_log2 * k_scale     # FP8 tensor / kv_head scales (swap AB's)
        cs.row_ok = [ok & item.live for ok in cs.row_ok]
        return cs, v_scale

    f32 = "f32"
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    loop = kb.while_((rng.b_first, const(0)))
    with loop.before() as (b, count):     # b_end read from SMEM at each test: not held across the tile loops
        b_end = kb.load(kb.gep(bounds_smem, 20, "i8"), "i32", align=4)
        loop.condition(b.lt(b_end), b, count)
    with loop.body() as (b, count):
        item = item_of(b, count)
        cs, _ = consumer(item)
        swapab.load_q(cs, staged)
        # tiles every row sees whole need no mask: keys < token 0's end
        full = (item.length - (item.seqlen_q - 1) * p["causal"]).smax(0) // cfg.bn
        split = full.smax(item.begin).smin(item.end)
        n_o = swapab.ot_regs(cfg) if cfg.swap_ab_ot else cs.n_o      # O^T's registers (swapab note "O^T"), or O's
        state = (k_pipe.state_at(count), const(0.0, (f32, n_o)), (neg_inf, neg_inf), (zero, zero))
        for masked in (False, True):
            if masked:      # the masked tiles' own geometry: nothing of the unmasked loop's held across it
                item = item_of(b, count)
                cs, _ = consumer(item)
            lo, hi = (split, item.end) if masked else (item.begin, split)
            inner = kb.for_(lo, hi, 1, carry=state)
            with inner as (j, carried):     # ends None: the masked tiles compute their column ends
                inner.yield_(*swapab.kv_tile(cs, rings, staged, None, j, carried, masked))
            state = inner.results
        o, m, l = state[1:4]
        item = item_of(b, count)
        cs, v_scale = consumer(item)
        if cfg.swap_ab_ot:
            o = swapab.o_of_ot(cs, staged, o)
        if cfg.swap_ab_warp_max:
            o, m, l = swapab.merge_warps(cs, staged, o, m, l)
        else:
            m, l = swapab.row_stats(cs, staged, m, l)
        _epilogue(cs, o, m, l, v_scale, final=item.final)
        loop.yield_(b + 1, count + item.tiles_run)
