"""The sm_90a attention forward's epilogue (moved from attention_fwd_sm90, whose consumer `cs` and
accumulators `acc` it takes): O / l and the LSE of a query tile, stored through SMEM and TMA (varlen:
its own rows)."""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import Value, const, exp2, fma, fmax, log2, select, vec
from . import attention_fwd_sm90_varlen as varlen
from .common.constants import LN2, LOG2E, NEG_INF
from .common.wgmma import acc_pair


def _epilogue(cs, acc):
    kb, cfg, bufs, geo = cs.kb, cs.cfg, cs.bufs, cs.geo
    o, m, l = acc
    inv, lse = [], []
    sink = None
    if cfg.sinks:   # this head's sink logit, in log2 units
        sink = kb.load(kb.gep(cs.sinks, geo.head, "f32"), "f32", align=4) * LOG2E
    for h in (0, 1):
        total = l[h] + kb.shuffle_xor(l[h], 1)
        total = total + kb.shuffle_xor(total, 2)
        if sink is None:
            empty = total.eq(0.0)
            inv.append(select(empty, const(0.0, "f32"), const(1.0, "f32") / total))
            m_scaled = cs.fixed_max if cfg.softcap_fixed_max else m[h] * cs.scale_log2
            lse.append(select(empty, const(float("inf"), "f32"), (m_scaled + log2(total)) * LN2))
            continue
        m_scaled = cs.fixed_max if cfg.softcap_fixed_max else m[h] * cs.scale_log2
        if cfg.softcap_fixed_max:   # M even on a row that saw no key: that row's max is -inf, as m's otherwise
            m_scaled = select(total.eq(0.0), const(NEG_INF, "f32"), m_scaled)
        # the sink joins the row's max and sum (module note): M = max(a, b) (0 when both are -inf, so that
        # no -inf - -inf is formed), l' = l 2^(a - M) + 2^(b - M), O scaled by 2^(a - M) / l'
        top = fmax(m_scaled, sink)
        top = select(top.eq(NEG_INF), const(0.0, "f32"), top)
        keys = exp2(m_scaled - top)
        total = fma(total, keys, exp2(sink - top))
        empty = total.eq(0.0)
        inv.append(select(empty, const(0.0, "f32"), keys / total))
        lse.append(select(empty, const(float("inf"), "f32"), (top + log2(total)) * LN2))
    if cfg.varlen:  # steps 1-3 clipped to the sequence's rows (attention_fwd_sm90_varlen.epilogue)
        varlen.epilogue(kb, cfg, cs, o, inv, lse, lambda: _store_o_tile(cs, o, inv))
        return
    _store_o_tile(cs, o, inv)
    # 3. LSE from the lane that owns column pair 0 of each row
    with kb.if_(cs.t4.eq(0)).then_():
        row_base = (geo.batch * geo.heads + geo.head).to("i64") * geo.seqlen_q.to("i64")
        for h in (0, 1):
            with kb.if_(cs.grow[h].lt(geo.seqlen_q)).then_():
                kb.store(lse[h], kb.gep(bufs.lse_ptr, row_base + cs.grow[h].to("i64"), "f32"), align=4)


def _store_o_tile(cs, o: Value, inv: list):
    """Steps 1-2 of the epilogue: O / l into the O tile in SMEM, then this warpgroup's 64 rows by TMA."""
    from .attention_fwd_sm90 import BAR_EPILOGUE, SWIZZLE   # (that module imports this one)
    kb, cfg, bufs, geo = cs.kb, cs.cfg, cs.bufs, cs.geo
    # 1. O / l, converted, into this warpgroup's 64 rows of the O tile (the Q tile unless persistent;
    #    cfg.v_tile's swizzle, as TMA reads it: 16-byte unit u of row r at u ^ (r % 8) (128B) or
    #    u ^ (r / 2 % 4) (64B), with r % 8 = g)
    vt = cfg.v_tile
    sw, units = vt.swizzle, vt.swizzle // 16
    phase = cs.g if sw == SWIZZLE else cs.g // 2
    if cfg.persistent:  # the previous tile's TMA store must have read this warpgroup's rows of the O tile
        with kb.if_(cs.is_leader).then_():
            fa4.tma_store_wait(pending=0)
        kb.named_barrier(BAR_EPILOGUE, 128, select=cs.wg, span=cfg.consumers)
    wg_base = kb.gep(bufs.o_smem, cs.wg * (64 * sw), "i8")
    for h in (0, 1):
        row_base = kb.gep(wg_base, (cs.row0 + 8 * h) * sw + cs.t4 * 4, "i8")
        for jd in range(cfg.dim_v // 8):
            c, unit = divmod(jd, units)
            i = acc_pair(jd, h)
            pair = vec(o[i] * inv[h], o[i + 1] * inv[h]).to((cfg.dtype, 2))
            off = ((phase ^ unit) * 16) + c * cfg.bm * sw
            kb.store(pair, kb.gep(row_base, off, "i8"), align=4)
    kb.fence("async_smem")
    kb.named_barrier(BAR_EPILOGUE, 128, select=cs.wg, span=cfg.consumers)  # one per warpgroup
    # 2. one thread per warpgroup stores the 64 x head_dim tile (rows past seqlen_q are clipped)
    with kb.if_(cs.is_leader).then_():
        for c in range(vt.chunks):
            fa4.tma_store(bufs.o_desc, kb.gep(wg_base, c * cfg.bm * sw, "i8"),
                          [const(c * vt.chunk), geo.head, geo.q_row(geo.m0 + cs.wg * 64), geo.tma_batch],
                          box=[vt.chunk, 1, 64, 1])
        # commit the stores; one tile per CTA waits here, persistent before its next write to the tile
        fa4.tma_store_wait(pending=1 if cfg.persistent else 0)
