"""The correction warpgroup of the sm_100a attention kernel (attention_fwd_sm100.py; its module docstring
has the algorithm and the roles): O_i *= alpha between P_i V blocks, then the epilogue: O_i / l (a sink
logit joining the row's max and sum first) to Q_i's SMEM tile and a TMA store, or row by row for varlen,
and the LSE.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, NamedTuple

from ..dialect import builders as fa4
from ..dsl import PipeState, Value, const, exp2, fma, fmax, log2, select, vec
from . import attention_sm100_config as fcfg
from . import attention_sm100_mla_decode as mla_dec
from .common import tcgen05
from .common.constants import LN2, LOG2E, NEG_INF

if TYPE_CHECKING:
    from .attention_fwd_sm100 import _Buffers, _Geometry

SW = fcfg.SWIZZLE_BYTES
CHUNK = fcfg.CHUNK
MMA_M = fcfg.MMA_M
EPI_COLS = 16                  # TMEM columns per tcgen05.ld in the correction role (80 registers)
BAR_EPILOGUE = 1               # named barrier of the correction warpgroup's O tile hand-off to TMA


# ---- correction and epilogue ----------------------------------------------------------------------------
class _TileStates(NamedTuple):
    """Where the correction warpgroup is in C_i and O_i of one tile."""
    c: PipeState
    o: PipeState


class _Correction:
    """The correction warpgroup: thread t owns row t of both tiles (TMEM lane t of C_i and O_i)."""

    def __init__(self, kb, cfg, geo: _Geometry, bufs: _Buffers, tmem: Value):
        self.kb, self.cfg, self.geo, self.bufs = kb, cfg, geo, bufs
        tm = cfg.tmem_plan()
        lanes = tmem + tcgen05.lane_base(kb)
        self.t = kb.thread_idx(0) % MMA_M                        # row of the tile (TMEM lane)
        self.half = None
        if cfg.mla_decode:   # Layout F: packed row and O half of this lane (attention_sm100_mla_decode)
            self.t, self.half = mla_dec.packed_row(kb)
        self.c_addr = [lanes + tm[f"C{i}"] for i in range(cfg.num_q_tiles)]
        self.o_addr = [lanes + tm[f"O{i}"] for i in range(cfg.num_q_tiles)]
        self.pipes = bufs.pipes.tiles

    def read_c(self, i: int, st: PipeState, num: int) -> Value:
        """The `num` f32 words softmax i left in C_i for this row; C_i is free again after."""
        kb, c_pipe = self.kb, self.pipes[i].c
        c_pipe.consumer_wait(st)
        kb.fence("tcgen05_after")
        v = tcgen05.tmem_load(self.c_addr[i], num)
        fa4.tmem_wait(kind="ld")
        kb.fence("tcgen05_before")
        c_pipe.consumer_release(st)
        return v.bitcast(("f32", num))

    def rescale(self, i: int, st: _TileStates):
        """O_i *= alpha between O_i += P_i V(n-1) and O_i += P_i V(n); skipped when no row of the warp
        moved its max."""
        kb, o_pipe = self.kb, self.pipes[i].o
        alpha = self.read_c(i, st.c, 1)[0]
        o_pipe.consumer_wait(st.o)
        kb.fence("tcgen05_after")
        with kb.if_(kb.vote_any(alpha.ne(1.0))).then_():
            for ch in range(self.cfg.o_cols // EPI_COLS):
                addr = self.o_addr[i] + ch * EPI_COLS
                o = tcgen05.tmem_load(addr, EPI_COLS)
                fa4.tmem_wait(kind="ld")
                o = o.bitcast(("f32", EPI_COLS))
                scaled = vec(*[o[j] * alpha for j in range(EPI_COLS)])
                fa4.tmem_store(addr, scaled.bitcast(("i32", EPI_COLS)))
            fa4.tmem_wait(kind="st")
        kb.fence("tcgen05_before")
        o_pipe.consumer_release(st.o)

    def epilogue(self, i: int, st: _TileStates):
        """O_i / l -> Q_i's SMEM tile -> TMA store; the LSE of this row."""
        kb, cfg, geo, bufs, t = self.kb, self.cfg, self.geo, self.bufs, self.t
        o_pipe = self.pipes[i].o
        stats = self.read_c(i, st.c, 2)
        inv, lse, empty = self.normalizer(stats[0], stats[1])
        with kb.if_(geo.n_blocks.gt(0)).then_():
            o_pipe.consumer_wait(st.o)                   # the last O_i += P_i V completed
            kb.fence("tcgen05_after")
        store = self.store_o_rows if cfg.varlen else self.store_o_tile
        if cfg.split_kv:   # float32 partials for the combine (attention_sm100_mla_decode.store_partial)
            store = lambda i, inv, empty, from_tmem=True: mla_dec.store_partial(self, inv, empty, from_tmem)  # noqa: E731
        if cfg.paged or cfg.fp8 or not cfg.plain or cfg.split_kv:   # a CTA without blocks: TMEM holds no O_i
            br = kb.if_(geo.n_blocks.gt(0))
            with br.then_():
                store(i, inv, empty)
            with br.else_():
                store(i, inv, empty, from_tmem=False)
        else:
            store(i, inv, empty)
        with kb.if_(geo.n_blocks.gt(0)).then_():
            kb.fence("tcgen05_before")
            o_pipe.consumer_release(st.o)
        if cfg.varlen:
            self.store_lse(geo.tile_row0(i) + t, geo.head, lse)
            return
        if cfg.split_kv:
            mla_dec.store_lse_partial(self, lse, empty)
            return
        kb.fence("async_smem")
        kb.named_barrier(BAR_EPILOGUE, 128)
        o_box = [CHUNK, cfg.tile_heads, cfg.tile_tokens, 1] if cfg.decode else [CHUNK, 1, MMA_M, 1]
        first = t.eq(0) if self.half is None else t.eq(0) & self.half.eq(0)
        with kb.if_(first).then_():
            for c in range(cfg.padded_head_dim_v // CHUNK):
                src = kb.gep(bufs.q_smem, i * bufs.q_tile + c * cfg.mma_m * SW, "i8")
                fa4.tma_store(bufs.o_desc, src, [const(c * CHUNK), geo.head, geo.tile_row0(i), geo.batch],
                              box=o_box)
        if cfg.decode:   # packed row t: token t // group of head t % group (note "Decode")
            row = geo.tile_row0(i) + t // cfg.tile_heads
            head = geo.head + t % cfg.tile_heads
        else:
            row, head = geo.tile_row0(i) + t, geo.head
        if self.half is None:
            self.store_lse(row, head, lse)
            return
        with kb.if_(self.half.eq(0)).then_():   # MLA decode: both halves of a row hold its LSE
            self.store_lse(row, head, lse)

    def store_lse(self, row: Value, head: Value, lse: Value):
        """The LSE of query row `row` of `head`: [batch, heads, seqlen_q], varlen [heads, total_q]."""
        kb, geo = self.kb, self.geo
        with kb.if_(row.lt(geo.seqlen_q)).then_():
            if self.cfg.varlen:
                at = head.to("i64") * self.bufs.total_q.to("i64") + (geo.q_start + row).to("i64")
            else:
                at = (geo.batch * geo.heads + head).to("i64") * geo.seqlen_q.to("i64") + row.to("i64")
            kb.store(lse, kb.gep(self.bufs.lse_ptr, at, "f32"), align=4)

    def normalizer(self, l_: Value, m_scaled: Value) -> tuple:
        """(1 / l or 0, LSE, whether the row is empty) from the row's sum l and scaled max. With sinks
        the head's sink logit b joins them: M = max(m_scaled, b) (0 when both are -inf), l' = l 2^(m_scaled
        - M) + 2^(b - M), O scaled by 2^(m_scaled - M) / l', LSE = (M + log2 l') ln 2 (= the sink for a
        row without keys). On the decode route each packed row reads its own head's sink."""
        kb, f32 = self.kb, "f32"
        if not self.cfg.sinks:
            empty = l_.eq(0.0)
            inv = select(empty, const(0.0, f32), const(1.0, f32) / l_)
            return inv, select(empty, const(float("inf"), f32), (m_scaled + log2(l_)) * LN2), empty
        head = self.geo.head
        if self.cfg.decode:   # packed row t is head t % group of the KV head's group (note "Decode")
            head = head + self.t % self.cfg.tile_heads
        sink = kb.load(kb.gep(self.bufs.sinks, head, f32), f32, align=4) * LOG2E
        top = fmax(m_scaled, sink)
        top = select(top.eq(NEG_INF), const(0.0, f32), top)
        keys = exp2(m_scaled - top)
        total = fma(l_, keys, exp2(sink - top))
        empty = total.eq(0.0)
        inv = select(empty, const(0.0, f32), keys / total)
        return inv, select(empty, const(float("inf"), f32), (top + log2(total)) * LN2), empty

    def store_o_rows(self, i: int, inv: Value, empty: Value, from_tmem: bool = True):
        """Varlen: row t of O_i / l straight from registers to the packed O [total_q, heads, Dv], 16 bytes
        a store, only for rows inside the sequence (a TMA box would run into the next sequence's rows).
        The TMEM loads are warp-collective, so every thread issues them; only the stores are predicated."""
        kb, cfg, geo, t = self.kb, self.cfg, self.geo, self.t
        row = geo.tile_row0(i) + t
        row_bytes = cfg.head_dim_v * fcfg.ELEM_BYTES
        at = ((geo.q_start + row).to("i64") * geo.heads.to("i64") + geo.head.to("i64")) * row_bytes
        o_row = kb.gep(self.bufs.o_desc, at, "i8")
        self._store_o(i, inv, empty, from_tmem, cfg.head_dim_v, o_row, lambda col: col * fcfg.ELEM_BYTES,
                      inside=row.lt(geo.seqlen_q))

    def store_o_tile(self, i: int, inv: Value, empty: Value, from_tmem: bool = True):
        """Row t of O_i / l (0 for a row without keys; TMEM holds no O then) into Q_i's tile, 128B-swizzled:
        16-byte unit u of a 128-byte row r lands at unit u ^ (r % 8). `from_tmem=False`: zeros, O_i unread."""
        kb, cfg, bufs, t = self.kb, self.cfg, self.bufs, self.t
        row_base = kb.gep(bufs.q_smem, t * SW + i * bufs.q_tile, "i8")
        if self.half is not None:   # MLA decode: this lane's O half, columns [256 h, 256 h + 256)
            row_base = kb.gep(row_base, self.half * (cfg.o_cols // CHUNK * cfg.mma_m * SW), "i8")

        def swizzled(col: int) -> Value:
            c, unit = divmod(col, CHUNK)
            return c * cfg.mma_m * SW + ((t % 8) ^ (unit // 8)) * 16
        self._store_o(i, inv, empty, from_tmem, cfg.o_cols, row_base, swizzled)

    def _store_o(self, i: int, inv: Value, empty: Value, from_tmem: bool, num_cols: int, row_ptr: Value,
                 col_offset, inside: Value | None = None):
        """The first `num_cols` columns of this row of O_i / l (0 for a row without keys; zeros, O_i unread,
        when not `from_tmem`), EPI_COLS at a time out of TMEM, in 16-byte stores of 8 columns to
        row_ptr + col_offset(column) (bytes), predicated on `inside` when given."""
        kb, cfg = self.kb, self.cfg
        zero = const(0.0, "f32")
        for ch in range(num_cols // EPI_COLS):
            if from_tmem:
                o = tcgen05.tmem_load(self.o_addr[i] + ch * EPI_COLS, EPI_COLS)
                fa4.tmem_wait(kind="ld")
                o = o.bitcast(("f32", EPI_COLS))
                vals = [select(empty, zero, o[j] * inv) for j in range(EPI_COLS)]
            else:
                vals = [zero] * EPI_COLS
            with kb.if_(inside).then_() if inside is not None else contextlib.nullcontext():
                for u in range(EPI_COLS // 8):
                    words = [vec(vals[8 * u + 2 * w], vals[8 * u + 2 * w + 1]).to((cfg.dtype, 2)).bitcast("i32")
                             for w in range(4)]
                    off = col_offset(ch * EPI_COLS + 8 * u)
                    kb.store(vec(*words), kb.gep(row_ptr, off, "i8"), align=16)


def _correction_role(corr: _Correction):
    kb, geo = corr.kb, corr.geo
    c0 = corr.pipes[0].c
    tiles = range(corr.cfg.num_q_tiles)
    init = tuple(_TileStates(c0.initial_state(), c0.initial_state()) for _ in tiles)
    # 1. blocks 1 .. N-1: rescale O_0, then O_1
    loop = kb.for_(1, geo.n_blocks, 1, carry=init)
    with loop as (n, st):
        for i in tiles:
            corr.rescale(i, st[i])
        loop.yield_(tuple(_TileStates(s.c.advance(), s.o.advance()) for s in st))
    # 2. per tile: O_i / l -> Q_i's SMEM tile -> TMA store; LSE
    for i in tiles:
        corr.epilogue(i, loop.results[i])
    if corr.cfg.varlen:    # O was stored from registers: no TMA store to wait for
        return
    with kb.if_(corr.t.eq(0)).then_():
        fa4.tma_store_wait(pending=0)
