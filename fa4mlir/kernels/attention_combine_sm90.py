"""The split-KV combine on sm_90a: merges attention_decode_sm90's float32 partials into O and LSE.
The code is arch-neutral (loads, shuffles, stores): CombineConfig(arch="sm_100a") builds the same kernel
for sm_100a (kernel attention_combine_sm100), which merges the sm_100a MLA decode's partials.

One warp per output row R = (batch b * seqlen_q + token t) * heads + head h (COMBINE_WARPS rows
per CTA, 1-D grid):
    1. lse = max_s lse_s and the weights' sum: lane l takes splits l, l + 32, ...; the lanes'
       results meet in a fixed xor tree, so the bits depend on num_splits only (deterministic)
    2. O = sum_s exp(lse_s - lse_max) O_s / sum, splits in index order, each lane its head_dim / 32
       columns; a split of weight 0 (no key seen) is skipped, whatever its O holds
    3. O in q's dtype at out[b, t, h] (any strides); LSE (natural log) at lse[b, h, t]; a row no
       split saw gets O = 0 and LSE = +inf (FlashAttention's convention)
With sinks (CombineConfig.sinks: gpt-oss's learned logit per query head, flash_attn_with_kvcache's
`sinks`), the sink of head h is one more term of step 1: lse = log(sum_s exp(lse_s) + exp(sink_h)),
so it enters once however many splits there are (the split kernel never adds it), and a row no
split saw gets O = 0 and LSE = sink_h.
Partials: o_partial [num_splits, batch, seqlen_q, heads, D] = [num_splits, total_rows, D] and
lse_partial [num_splits, batch, heads, seqlen_q], both contiguous (the plan's workspaces).
The balanced schedule's form (CombineConfig.balanced_bn; common/decode_balanced.py): each warp first
finds its row's sequence's split count and slots from cache_seqlens (`_balanced_row`): one split, the
decode kernel wrote the row final and the warp stores nothing; none (an empty sequence), O = 0 and LSE
= +inf; else steps 1-3 over the slots in CTA order (partials [2 parts, seqlen_q, heads, D] and [2 parts,
heads, seqlen_q]), step 1's loops with warp-uniform bounds.
"""
from __future__ import annotations

import contextlib

from .. import dsl
from ..dsl import KernelBuilder, const, fast_div, fmax, log2, select, vec
from .attention_decode_sm90_config import COMBINE_WARPS, CombineConfig

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
NEG_INF = float("-inf")


def build(cfg: CombineConfig = CombineConfig()) -> dsl.KernelIR:
    cfg.validate()
    kb = KernelBuilder(cfg.name(), arch=cfg.arch, block=(32 * COMBINE_WARPS, 1, 1), config=cfg.key())
    p = kb.params_from(cfg.params, tma={})
    with kb.body():
        tid = kb.thread_idx(0)
        lane = tid % 32
        row = kb.block_idx(0) * COMBINE_WARPS + tid // 32
        with kb.if_(row.lt(p["total_rows"])).then_():
            bt = fast_div(row, p["heads_mul"], p["heads_shr"])
            h = row - bt * p["heads"]
            b = fast_div(bt, p["seqlen_q_mul"], p["seqlen_q_shr"])
            t = bt - b * p["seqlen_q"]
            lrow = (b * p["heads"] + h) * p["seqlen_q"] + t
            n = p["num_splits"]
            total_rows = p["total_rows"].to("i64")

            def lse_at(s):
                return s.to("i64") * total_rows + lrow.to("i64")

            def o_at(s):
                return s.to("i64") * total_rows + row.to("i64")

            guard = contextlib.nullcontext()
            if cfg.balanced_bn:    # the balanced schedule: this row's sequence's split slots
                n, lse_at, o_at = _balanced_row(kb, cfg, p, lane, b, t, h)
                guard = kb.if_(n.ne(1)).then_()      # one split: the decode kernel wrote the row final
            with guard:
                _merge(kb, cfg, p, lane, n, lse_at, o_at, (b, t, h, lrow))
    return kb.finish()


def _merge(kb, cfg, p, lane, n, lse_at, o_at, where):
    """Steps 1-3 for one row (`where`: batch b, token t, head h, the LSE's row) over its n splits,
    split s's LSE at lse_partial[lse_at(s)] and O at o_partial[o_at(s)]."""
    b, t, h, lrow = where
    cols = cfg.head_dim // 32                   # columns per lane

    def lse_of(s):
        return kb.load(kb.gep(p["lse_partial"], lse_at(s), "f32"), "f32", align=4)

    def over_lanes(init, step):
        """acc = step(s, acc) over lane's splits s = lane, lane + 32, .. < n. The balanced form's
        loop bounds are warp-uniform (splits past n leave acc): the same values."""
        if not cfg.balanced_bn:
            loop = kb.for_(lane, n, 32, carry=init)
            with loop as (s, acc):
                loop.yield_(step(s, acc))
            return loop.results
        loop = kb.for_(const(0), n, 32, carry=init)
        with loop as (s0, acc):
            s = s0 + lane
            ok = s.slt(n)
            loop.yield_(select(ok, step(select(ok, s, const(0)), acc), acc))
        return loop.results

    # 1. the max, then the sum of the weights, each over a fixed xor tree
    mx = over_lanes(const(NEG_INF, "f32"), lambda s, mx: fmax(mx, lse_of(s)))
    for off in (16, 8, 4, 2, 1):
        mx = fmax(mx, kb.shuffle_xor(mx, off))
    sink = None
    if cfg.sinks:      # head h's sink logit joins the max (and, below, the sum)
        sink = kb.load(kb.gep(p["sinks"], h.to("i64"), "f32"), "f32", align=4)
        mx = fmax(mx, sink)
    empty = mx.eq(NEG_INF)
    shift = select(empty, const(0.0, "f32"), mx)       # exp2(-inf - -inf) would be NaN

    def weight(s):
        return dsl.exp2((lse_of(s) - shift) * LOG2E)

    total = over_lanes(const(0.0, "f32"), lambda s, acc: acc + weight(s))
    for off in (16, 8, 4, 2, 1):
        total = total + kb.shuffle_xor(total, off)
    if sink is not None:
        total = total + dsl.exp2((sink - shift) * LOG2E)
    # 2. the weighted partials, in split order
    col0 = (lane * cols).to("i64")
    zero = const(0.0, ("f32", cols))
    loop = kb.for_(const(0), n, 1, carry=zero)
    with loop as (s, acc):
        w = weight(s)
        br = kb.if_(w.gt(0.0), results=(("f32", cols),))
        with br.then_():
            base = o_at(s) * cfg.head_dim + col0
            parts = []
            for c0 in range(0, cols, 4):
                width = min(4, cols)
                part = kb.load(kb.gep(p["o_partial"], base + c0, "f32"), ("f32", width), align=4 * width)
                parts.extend(part[i] for i in range(width))
            br.yield_(vec(*[acc[i] + parts[i] * w for i in range(cols)]))
        with br.else_():
            br.yield_(acc)
        loop.yield_(br.results[0])
    acc = loop.results
    # 3. normalise, convert, store; the LSE from lane 0
    log_total = log2(total)
    inv = select(empty, const(0.0, "f32"), dsl.exp2(const(0.0, "f32") - log_total))
    piece = min(cols, 8)        # at most 16 bytes a store (head_dim 512: two per lane)
    out = [vec(*[acc[i] * inv for i in range(c0, c0 + piece)]).to((cfg.dtype, piece))
           for c0 in range(0, cols, piece)]
    oidx = (b.to("i64") * p["out_stride_b"] + t.to("i64") * p["out_stride_s"]
            + h.to("i64") * p["out_stride_h"] + col0)
    for k, part in enumerate(out):
        kb.store(part, kb.gep(p["out"], oidx + k * piece if k else oidx, cfg.dtype), align=2 * piece)
    with kb.if_(lane.eq(0)).then_():
        lse = select(empty, const(float("inf"), "f32"), mx + log_total * LN2)
        kb.store(lse, kb.gep(p["lse"], lrow.to("i64"), "f32"), align=4)


def _balanced_row(kb, cfg, p, lane, b, t, h) -> tuple:
    """CombineConfig.balanced_bn (common/decode_balanced.py, sequence_slots): the split count n of
    row (b, t, h)'s sequence and where split s lies. From the lengths, each lane a strided share of
    the batch: T and P_b; the CTAs that cut it: c_first = cta_of(P_b) .. c_last = cta_of(P_b + n_b - 1),
    n = c_last - c_first + 1 (1: written final by the decode; 0 for an empty sequence: O = 0, LSE =
    +inf); split s in slot 2 (c_first + s), plus 1 for s = 0 when b starts past c_first's lo.
    Partials: o_partial [slots, seqlen_q, heads, D], lse_partial [slots, heads, seqlen_q]."""
    from .attention_decode_sm90_balanced import LANES, lane_tiles, seq_tiles, warp_sum
    bn = cfg.balanced_bn
    zero = const(0)
    trips = (p["batch"] + (LANES - 1)) // LANES
    loop = kb.for_(zero, trips, 1, carry=(zero, zero))
    with loop as (k, (total, before)):
        _, n = lane_tiles(kb, p, k, lane, bn)
        loop.yield_(total + n, before + select((k * LANES + lane).lt(b), n, zero))
    total, start = (warp_sum(kb, x) for x in loop.results)
    n_b = seq_tiles(kb, p, b, bn)
    live = total.smin(p["parts"]).smax(1)
    q = (total // live).smax(1)            # (T = 0: every sequence empty, n = 0 below)
    r = total - (total // live) * live
    big = r * (q + 1)                       # the first r CTAs hold q + 1 tiles each

    def cta_of(x):
        return select(x.lt(big), x // (q + 1), r + (x - big) // q)

    first = cta_of(start)
    lo_first = first * q + first.smin(r)
    off = select(start.ne(lo_first), const(1), zero)
    n = select(n_b.eq(0), zero, cta_of(start + n_b - 1) - first + 1)
    heads, seqlen_q = p["heads"].to("i64"), p["seqlen_q"].to("i64")

    def slot(s):
        return (first * 2 + s * 2 + select(s.eq(0), off, zero)).to("i64")

    def lse_at(s):
        return (slot(s) * heads + h.to("i64")) * seqlen_q + t.to("i64")

    def o_at(s):
        return (slot(s) * seqlen_q + t.to("i64")) * heads + h.to("i64")
    return n, lse_at, o_at
