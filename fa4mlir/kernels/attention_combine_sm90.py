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
"""
from __future__ import annotations

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
    cols = cfg.head_dim // 32                   # columns per lane
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

            def lse_of(s):
                return kb.load(kb.gep(p["lse_partial"], s.to("i64") * total_rows + lrow.to("i64"), "f32"), "f32",
                               align=4)

            # 1. the max, then the sum of the weights, each over a fixed xor tree
            loop = kb.for_(lane, n, 32, carry=const(NEG_INF, "f32"))
            with loop as (s, mx):
                loop.yield_(fmax(mx, lse_of(s)))
            mx = loop.results
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

            loop = kb.for_(lane, n, 32, carry=const(0.0, "f32"))
            with loop as (s, acc):
                loop.yield_(acc + weight(s))
            total = loop.results
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
                    base = (s.to("i64") * total_rows + row.to("i64")) * cfg.head_dim + col0
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
    return kb.finish()
