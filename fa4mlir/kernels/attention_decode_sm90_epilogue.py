"""The consumer's epilogue of the sm_90a decode kernel (attention_decode_sm90.py; its module docstring has
the notes cited here): O / l and the LSE of the consumer thread's two rows, as float32 partials of a
split or (note "Unsplit") straight into out and lse in q's dtype, a sink logit joining the row's max and
sum first (note "Sinks").
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import dsl
from ..dsl import Value, const, fma, fmax, log2, select, vec
from .common.constants import LN2, LOG2E, NEG_INF
from .common.wgmma import acc_pair

if TYPE_CHECKING:
    from .attention_decode_sm90 import _Consumer


def _epilogue(cs: _Consumer, o: Value, m, l, v_scale=None, final: Value | None = None):
    """O / l and the LSE (natural log) of this thread's two rows: float32 partials (LSE -inf when
    the split saw no key) into the workspaces [num_splits, batch, seqlen_q, heads, D] and
    [num_splits, batch, heads, seqlen_q]; unsplit, O in q's dtype into out[b, t, h] by out's
    strides and the LSE (+inf for a row that sees no key) into lse [batch, heads, seqlen_q]
    (note "Unsplit"). ``final`` (the balanced schedule, DecodeConfig.balanced): a runtime flag, set
    when the CTA holds the whole sequence: the unsplit stores into out and lse, else the partials into
    split slot work.split."""
    kb, unsplit = cs.kb, cs.cfg.unsplit
    for h in (0, 1):
        total = l[h] + kb.shuffle_xor(l[h], 1)
        total = total + kb.shuffle_xor(total, 2)
        if cs.cfg.sinks:
            _epilogue_sink(cs, o, m, h, total, v_scale)
            continue
        empty = total.eq(0.0)
        # 1 / l as exp2(-log2 l) (MUFU): rcp.rn is a ptxas subroutine call, which serialises every wgmma
        log_total = log2(total)
        inv = select(empty, const(0.0, "f32"), dsl.exp2(const(0.0, "f32") - log_total))
        if v_scale is not None:     # FP8 per-tensor / per-KV-head v scale (note "FP8")
            inv = inv * v_scale
        no_key = float("inf") if unsplit else NEG_INF
        if final is not None:
            no_key = select(final, const(float("inf"), "f32"), const(NEG_INF, "f32"))
        lse = select(empty, no_key if final is not None else const(no_key, "f32"), (m[h] * cs.scale_log2 + log_total) * LN2)
        with kb.if_(cs.row_ok[h]).then_():
            if final is None:
                (_store_final if unsplit else _store_partial)(cs, o, h, inv, lse)
                continue
            br = kb.if_(final)
            with br.then_():
                _store_final(cs, o, h, inv, lse)
            with br.else_():
                _store_partial(cs, o, h, inv, lse)


def _epilogue_sink(cs: _Consumer, o: Value, m, h: int, total: Value, v_scale):
    """Unsplit with sinks (note "Sinks"): row h's sink logit joins its max and sum (`total`: the
    row's l over its four lanes), O and the LSE go to out and lse."""
    kb, p = cs.kb, cs.p
    sink = kb.load(kb.gep(p["sinks"], cs.head[h].to("i64"), "f32"), "f32", align=4) * LOG2E
    m_scaled = m[h] * cs.scale_log2
    # M = max(a, b) (0 when both are -inf: no -inf - -inf), l' = l 2^(a - M) + 2^(b - M), O 2^(a - M) / l'
    top = fmax(m_scaled, sink)
    top = select(top.eq(NEG_INF), const(0.0, "f32"), top)
    keys = dsl.exp2(m_scaled - top)
    total = fma(total, keys, dsl.exp2(sink - top))
    empty = total.eq(0.0)
    log_total = log2(total)
    inv = select(empty, const(0.0, "f32"), keys * dsl.exp2(const(0.0, "f32") - log_total))
    if v_scale is not None:
        inv = inv * v_scale
    lse = select(empty, const(float("inf"), "f32"), (top + log_total) * LN2)
    with kb.if_(cs.row_ok[h]).then_():
        _store_final(cs, o, h, inv, lse)


def _store_partial(cs: _Consumer, o: Value, h: int, inv: Value, lse: Value):
    """Row h's O x (1 / l), float32, into split s's slice of o_partial and its LSE into lse_partial."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    # note "Varlen q": one packed batch of total_q (= seqlen_q) rows per split
    # the balanced schedule: split slots [slots, seqlen_q, heads, D] (common/decode_balanced.py)
    sb = work.split if cfg.varlen_q or cfg.balanced else work.split * p["batch"] + work.batch
    row = (sb.to("i64") * p["seqlen_q"].to("i64") + cs.q_row[h].to("i64")) * p["heads"].to("i64") \
        + cs.head[h].to("i64")
    base = row * cfg.head_dim + (cs.t4 * 2).to("i64")
    for jd in range(cfg.head_dim // 8):
        i = acc_pair(jd, h)
        kb.store(vec(o[i] * inv, o[i + 1] * inv), kb.gep(p["o_partial"], base + jd * 8, "f32"), align=8)
    with kb.if_(cs.t4.eq(0)).then_():
        lrow = (sb.to("i64") * p["heads"].to("i64") + cs.head[h].to("i64")) * p["seqlen_q"].to("i64") \
            + cs.q_row[h].to("i64")
        kb.store(lse, kb.gep(p["lse_partial"], lrow, "f32"), align=4)


def _store_final(cs: _Consumer, o: Value, h: int, inv: Value, lse: Value):
    """Unsplit (note "Unsplit"): row h's O x (1 / l) + 0 in q's dtype at out[b, t, head] by out's
    strides, two columns a store, and its LSE at lse[b, head, t]."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    token, head = cs.q_row[h].to("i64"), cs.head[h].to("i64")
    # note "Varlen q": packed out and LSE [heads, total_q], the sequence's rows from q_start
    batch = const(0, "i64") if cfg.varlen_q else work.batch.to("i64")
    base = batch * p["out_stride_b"] + token * p["out_stride_s"] + head * p["out_stride_h"] + (cs.t4 * 2).to("i64")
    zero = const(0.0, "f32")
    for jd in range(cfg.head_dim // 8):
        i = acc_pair(jd, h)
        pair = vec(fma(o[i], inv, zero), fma(o[i + 1], inv, zero)).to((cfg.dtype, 2))
        kb.store(pair, kb.gep(p["out"], base + jd * 8, cfg.dtype), align=4)
    with kb.if_(cs.t4.eq(0)).then_():
        lrow = (batch * p["heads"].to("i64") + head) * p["seqlen_q"].to("i64") + token
        kb.store(lse, kb.gep(p["lse"], lrow, "f32"), align=4)
