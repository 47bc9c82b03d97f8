"""Sparse MLA prefill on sm_100a (FlashMLA's flash_mla_sparse_fwd): one token's 128 head rows attend to
the KV rows its top-k indices name, gathered by TMA gather4 (common/gather4.py), S and O in TMEM.

CTA (token, half) of the grid (attention_mla_sparse_sm100_config.grid) owns O's columns
[256 half, 256 half + 256) of that token (config note "Split": two independent CTAs per token, not
FlashMLA's cta_group::2 pair). Semantics: attention_mla_sparse_sm90, notes "Bias" and "Sinks".

Roles (config.ROLES; 192 threads, no setmaxnreg):
    load     (warp 5) one elected thread: Q's last 256 columns into q_smem (`q`) and its first 320 into
             the KV ring's SMEM (`qstage`, note "Q staging"), then, once the softmax warps copied
             those to TMEM, per tile j of the token's ceil(L / 64) (L = topk, or topk_length[token]
             clamped to [0, topk]) the 64 rows indices[token, 64 j ..] by 16 x 9 gather4 copies into
             the 2-stage ring (`kv`); a position at or past L gathers row -1 (out of bounds: zeros,
             as invalid indices are).
    mma      (warp 4) one elected thread; waits Q (`q`, `qt`), then per tile j:
                 1. wait KV_j; S = Q K_j^T (36 MMAs 128 x 64 x 16: the first 20 with A = Q from TMEM,
                    the last 16 from SMEM; K K-major from SMEM) -> `s`
                 2. wait P_j; O (+)= P_j V_j[:, this half] (4 MMAs 128 x 256 x 16, P from TMEM, V the
                    tile's MN-major columns) -> frees P (`p` empty) and the stage (`kv` empty)
             and after the last tile commits `o` (O complete).
    softmax  (warps 0-3, thread t = head row t = TMEM lane t) per tile j:
                 1. wait S_j (its commit follows O += P_(j-1) V_(j-1) of the same thread, so O is
                    complete too); read the row's 64 scores; release S
                 2. each column's validity from its index (note "Bias" of the sm_90a kernel): invalid
                    -> -inf; running max m and sum l in base 2 (m = -inf until a valid score)
                 3. O *= alpha in TMEM (j > 0)
                 4. P_j (bf16) -> TMEM once O += P_(j-1) V_(j-1) freed it (`p`)
             then waits `o`, and writes O / (l + sink term) (this half's 256 columns, rows < h_q),
             and in CTA half 0 the LSE and max_logits.

Note "Q staging": Q's first Q_TMEM_COLS columns reach TMEM through SMEM (fa4 has no tcgen05.cp): TMA
boxes put them, 128B-swizzled, at the start of the KV ring; softmax thread t reads row t of them and
tcgen05.st's it to its lane (2 bf16 a column: the A layout of a TMEM operand, as P's), commits `qt` to
the MMA thread and releases `qstage`; the load warp waits on named barrier BAR_Q_STAGED (its 32
threads and the 128 softmax threads) before its first gather overwrites the ring.

Every wait on a barrier a tcgen05 op completes is followed by tcgen05.fence::after_thread_sync, every
TMEM write handed to another thread by tcgen05.wait::st and fence::before_thread_sync (PTX ISA
9.7.16.6.4), as in attention_fwd_sm100.
"""
from __future__ import annotations

from typing import NamedTuple

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import KernelBuilder, PipeState, Value, const, exp2, fmax, log2, select, tree_reduce, vec
from . import attention_mla_sparse_sm100_config as sc
from .common import tcgen05
from .common.constants import LOG2E
from .common.gather4 import gather4_tile

SW = 128
LN2 = 0.6931471805599453
NEG_INF = float("-inf")
BAR_Q_STAGED = 1               # named barrier: Q's TMEM part left the KV ring's SMEM (note "Q staging")
S_COLS = 32                    # TMEM columns per tcgen05.ld of S
O_COLS = 16                    # TMEM columns per tcgen05.ld of O (rescale, epilogue)


class _Geo(NamedTuple):
    token: Value
    half: Value
    length: Value              # L: the token's attended positions
    n_tiles: Value


def _geometry(kb, cfg, p) -> _Geo:
    bid = kb.block_idx(0)
    token, half = bid // sc.V_SPLIT, bid % sc.V_SPLIT
    topk = p["topk"]
    length = topk
    if cfg.topk_length:
        raw = kb.load(kb.gep(p["topk_length"], token, "i32"), "i32")
        length = select(raw.slt(0), 0, select(raw.sgt(topk), topk, raw))
    return _Geo(token, half, length, (length + (sc.B_TOPK - 1)) // sc.B_TOPK)


def build(cfg: sc.MLASparseSm100Config = sc.MLASparseSm100Config()) -> dsl.KernelIR:
    cfg.validate()
    tm, sm = sc.tmem_plan(), sc.smem_plan()
    kb = KernelBuilder(cfg.name(), arch="sm_100a", block=(sc.NUM_THREADS, 1, 1), config=cfg.key())
    p = kb.params_from(cfg.params, tma=cfg.tma_specs())
    with kb.body():
        q_smem = kb.smem("q_smem", sm["q"])
        kv_smem = kb.smem("kv_smem", sm["kv"])
        tmem_slot = kb.smem("tmem_slot", 16, align=16)
        pipes = {
            "q": kb.pipeline("q", num_stages=1, producer="load", consumers=["mma"]),
            "qstage": kb.pipeline("qstage", num_stages=1, producer="load", consumers=["softmax"],
                                  consumer_arrivals=128),
            "qt": kb.pipeline("qt", num_stages=1, producer="softmax", consumers=["mma"], producer_arrivals=128),
            "kv": kb.pipeline("kv", num_stages=sc.KV_STAGES, producer="load", consumers=["mma"]),
            "s": kb.pipeline("s", num_stages=1, producer="mma", consumers=["softmax"], consumer_arrivals=128),
            "p": kb.pipeline("p", num_stages=1, producer="softmax", consumers=["mma"], producer_arrivals=128),
            "o": kb.pipeline("o", num_stages=1, producer="mma", consumers=["softmax"], consumer_arrivals=128),
        }
        warp = kb.thread_idx(0) // 32
        # 1. warp 0 allocates the TMEM columns; every warp reads the address after the barrier
        with kb.if_(warp.eq(0)).then_():
            fa4.tmem_alloc(tmem_slot, cols=tm["alloc"])
            fa4.tmem_relinquish()
        kb.pipeline_init()
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        tmem = kb.load(tmem_slot, "i32")
        roles = {name: dict(first_warp=first, num_warps=n) for name, first, n in sc.ROLES}
        with kb.warp_roles():
            with kb.role("load", **roles["load"]):
                _load_role(kb, cfg, p, _geometry(kb, cfg, p), pipes, q_smem, kv_smem, sm["kv_tile"])
            with kb.role("mma", **roles["mma"]):
                _mma_role(kb, _geometry(kb, cfg, p), pipes, q_smem, kv_smem, sm["kv_tile"], tmem, tm)
            with kb.role("softmax", **roles["softmax"]):
                _softmax_role(kb, cfg, p, _geometry(kb, cfg, p), pipes, tmem, tm, kv_smem)
        # 2. every role finished (their TMEM accesses waited): warp 0 frees the columns
        kb.fence("tcgen05_before")
        kb.sync_threads()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(tmem, cols=tm["alloc"])
    return kb.finish()


# ---- load ----------------------------------------------------------------------------------------------
def _load_role(kb, cfg, p, geo: _Geo, pipes, q_smem, kv_smem, kv_tile: int):
    def q_boxes(pipe: str, dst, chunks):
        st = pipes[pipe].initial_state()
        pipes[pipe].producer_acquire(st)
        for i, c in enumerate(chunks):
            fa4.tma_load(p["q"], kb.gep(dst, i * sc.TILE_M * SW, "i8"), st.stage, [const(c * sc.CHUNK), const(0),
                         geo.token], pipe=pipe, box=[sc.CHUNK, sc.TILE_M, 1], elem_bytes=2)
        pipes[pipe].producer_commit(st, tx_bytes=len(chunks) * sc.CHUNK * sc.TILE_M * 2)

    with kb.if_(kb.elect_one()).then_():
        # 1. Q: 64-column x 128-head boxes of the token (heads >= h_q zero-filled): the last four chunks
        #    for the MMAs, the first five staged in the KV ring for the softmax warps (note "Q staging")
        q_boxes("q", q_smem, range(sc.Q_TMEM_CHUNKS, sc.D_QK // sc.CHUNK))
        q_boxes("qstage", kv_smem, range(sc.Q_TMEM_CHUNKS))
    # 2. the staged Q left the ring's SMEM
    kb.named_barrier(BAR_Q_STAGED, 32 + 128)
    with kb.if_(kb.elect_one()).then_():
        # 3. per tile: the 64 named rows (position >= L: row -1, out of bounds -> zeros)
        row0 = geo.token * p["topk"]
        loop = kb.for_(0, geo.n_tiles, 1, carry=pipes["kv"].initial_state())
        with loop as (j, st):
            pipes["kv"].producer_acquire(st)
            rows = []
            for i in range(sc.B_TOPK):
                pos = j * sc.B_TOPK + i
                idx = kb.load(kb.gep(p["indices"], row0 + pos, "i32"), "i32")
                rows.append(select(pos.lt(geo.length), idx, const(-1)))
            tx = gather4_tile(kb, p["kv"], kb.gep(kv_smem, st.stage * kv_tile, "i8"), st.stage, rows, pipe="kv",
                              cols=sc.D_QK, dtype=sc.DTYPE)
            pipes["kv"].producer_commit(st, tx_bytes=tx)
            loop.yield_(st.advance())


# ---- mma -----------------------------------------------------------------------------------------------
class _MmaCarry(NamedTuple):
    kv: PipeState
    t: PipeState           # s, p (1 stage each, in lock step)


def _mma_role(kb, geo: _Geo, pipes, q_smem, kv_smem, kv_tile: int, tmem, tm):
    s_tmem, p_tmem, o_tmem, q_tmem = tmem + tm["S"], tmem + tm["P"], tmem + tm["O"], tmem + tm["Q"]
    with kb.if_(kb.elect_one() & geo.n_tiles.gt(0)).then_():
        q0 = pipes["q"].initial_state()
        pipes["q"].consumer_wait(q0)
        pipes["qt"].consumer_wait(q0)
        init = _MmaCarry(pipes["kv"].initial_state(), pipes["s"].initial_state())
        loop = kb.for_(0, geo.n_tiles, 1, carry=init)
        with loop as (j, c):
            # 1. S = Q K_j^T
            pipes["kv"].consumer_wait(c.kv)
            pipes["s"].producer_acquire(c.t)
            kb.fence("tcgen05_after")
            per_chunk = sc.CHUNK // sc.MMA_K
            k_base = kb.gep(kv_smem, c.kv.stage * kv_tile, "i8")
            for kk in range(sc.D_QK // sc.MMA_K):
                ch, within = divmod(kk, per_chunk)
                off = within * sc.MMA_K * 2
                b = fa4.smem_desc(kb.gep(k_base, ch * sc.B_TOPK * SW + off, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                acc = const(int(kk > 0), "i1")
                if ch < sc.Q_TMEM_CHUNKS:     # A = Q from TMEM: 16 columns of Q in 8 TMEM columns
                    tcgen05.mma(q_tmem + kk * (sc.MMA_K // 2), b, acc, s_tmem, m=sc.TILE_M, n=sc.B_TOPK, k=sc.MMA_K,
                                ab_dtype=sc.DTYPE, a_source="tmem")
                else:
                    a = fa4.smem_desc(kb.gep(q_smem, (ch - sc.Q_TMEM_CHUNKS) * sc.TILE_M * SW + off, "i8"),
                                      swizzle=SW, lbo=16, sbo=8 * SW)
                    tcgen05.mma(a, b, acc, s_tmem, m=sc.TILE_M, n=sc.B_TOPK, k=sc.MMA_K, ab_dtype=sc.DTYPE)
            pipes["s"].mma_commit(c.t, side="full")
            # 2. O (+)= P_j V_j[:, half]: V's columns of this half are chunks 4 half .. 4 half + 3
            pipes["p"].consumer_wait(c.t)
            kb.fence("tcgen05_after")
            v_base = kb.gep(k_base, geo.half * (sc.D_V_CTA // sc.CHUNK) * sc.B_TOPK * SW, "i8")
            for kk in range(sc.B_TOPK // sc.MMA_K):
                b = fa4.smem_desc(kb.gep(v_base, kk * sc.MMA_K * SW, "i8"), swizzle=SW, lbo=sc.B_TOPK * SW,
                                  sbo=8 * SW)
                acc = j.gt(0) if kk == 0 else const(1, "i1")
                tcgen05.mma(p_tmem + kk * (sc.MMA_K // 2), b, acc, o_tmem, m=sc.TILE_M, n=sc.D_V_CTA, k=sc.MMA_K,
                            ab_dtype=sc.DTYPE, a_source="tmem", b_major="mn")
            pipes["p"].mma_commit(c.t, side="empty")
            pipes["kv"].mma_commit(c.kv, side="empty")
            loop.yield_(_MmaCarry(c.kv.advance(), c.t.advance()))
        # 3. O complete
        o0 = pipes["o"].initial_state()
        pipes["o"].producer_acquire(o0)
        pipes["o"].mma_commit(o0, side="full")
        pipes["q"].mma_commit(q0, side="empty")
        pipes["qt"].mma_commit(q0, side="empty")


# ---- softmax and epilogue ----------------------------------------------------------------------------------
class _SoftmaxCarry(NamedTuple):
    t: PipeState           # s, p
    m: Value               # running max of the scaled scores (base 2), -inf until a valid one
    l: Value               # running sum


def _stage_q(kb, pipes, kv_smem, q_addr, row):
    """Note "Q staging": row `row` of Q's first Q_TMEM_CHUNKS chunks, from the ring's SMEM (128B swizzle:
    16-byte unit u of row r at unit u ^ (r % 8)) to this thread's TMEM lane; commits `qt`, releases
    `qstage`, then arrives on BAR_Q_STAGED for the load warp."""
    st = pipes["qstage"].initial_state()
    pipes["qstage"].consumer_wait(st)
    for c in range(sc.Q_TMEM_CHUNKS):
        base = kb.gep(kv_smem, c * sc.TILE_M * SW + row * SW, "i8")
        units = [kb.load(kb.gep(base, ((row % 8) ^ u) * 16, "i8"), ("i32", 4), align=16) for u in range(SW // 16)]
        words = [unit[w] for unit in units for w in range(4)]
        fa4.tmem_store(q_addr + c * (sc.CHUNK // 2), vec(*words))
    fa4.tmem_wait(kind="st")
    kb.fence("tcgen05_before")
    pipes["qstage"].consumer_release(st)
    kb.named_barrier_arrive(BAR_Q_STAGED, 32 + 128)
    pipes["qt"].producer_acquire(st)
    pipes["qt"].producer_commit(st)


def _softmax_role(kb, cfg, p, geo: _Geo, pipes, tmem, tm, kv_smem):
    lanes = tmem + (((kb.thread_idx(0) // 32) % 4 * 32) << 16)
    s_addr, p_addr, o_addr = lanes + tm["S"], lanes + tm["P"], lanes + tm["O"]
    row = kb.thread_idx(0) % sc.TILE_M
    _stage_q(kb, pipes, kv_smem, lanes + tm["Q"], row)
    scale_log2 = p["scale_log2"]
    row0 = geo.token * p["topk"]
    f32 = "f32"
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    init = _SoftmaxCarry(pipes["s"].initial_state(), neg_inf, zero)
    loop = kb.for_(0, geo.n_tiles, 1, carry=init)
    with loop as (j, c):
        # 1. the row's 64 scores
        pipes["s"].consumer_wait(c.t)
        kb.fence("tcgen05_after")
        parts = [tcgen05.tmem_load(s_addr + k, S_COLS) for k in range(0, sc.B_TOPK, S_COLS)]
        fa4.tmem_wait(kind="ld")
        kb.fence("tcgen05_before")
        pipes["s"].consumer_release(c.t)
        s = [part.bitcast((f32, S_COLS))[i] for part in parts for i in range(S_COLS)]
        # 2. invalid columns -> -inf; online max and sum in base 2
        scaled = []
        for i, x in enumerate(s):
            pos = j * sc.B_TOPK + i
            idx = kb.load(kb.gep(p["indices"], row0 + pos, "i32"), "i32")
            valid = pos.lt(geo.length) & idx.lt(p["s_kv"])          # unsigned: a negative index is invalid
            scaled.append(select(valid, x * scale_log2, neg_inf))
        m_new = fmax(c.m, tree_reduce(scaled, dsl.fmax))
        m_use = select(m_new.eq(NEG_INF), zero, m_new)
        alpha = exp2(c.m - m_use)
        pr = [exp2(x - m_use) for x in scaled]
        l_new = c.l * alpha + tree_reduce(pr, lambda a, b: a + b)
        # 3. O *= alpha (O += P_(j-1) V_(j-1) completed before S_j's commit)
        with kb.if_(j.gt(0)).then_():
            for ch in range(sc.D_V_CTA // O_COLS):
                o = tcgen05.tmem_load(o_addr + ch * O_COLS, O_COLS)
                fa4.tmem_wait(kind="ld")
                o = o.bitcast((f32, O_COLS))
                fa4.tmem_store(o_addr + ch * O_COLS, vec(*[o[i] * alpha for i in range(O_COLS)]).bitcast(("i32", O_COLS)))
            fa4.tmem_wait(kind="st")
        # 4. P -> TMEM once the previous P V freed it
        words = [vec(pr[2 * w], pr[2 * w + 1]).to((sc.DTYPE, 2)).bitcast("i32") for w in range(sc.B_TOPK // 2)]
        pipes["p"].producer_acquire(c.t)
        fa4.tmem_store(p_addr, vec(*words))
        fa4.tmem_wait(kind="st")
        kb.fence("tcgen05_before")
        pipes["p"].producer_commit(c.t)
        loop.yield_(_SoftmaxCarry(c.t.advance(), m_new, l_new))
    m, l_ = loop.results.m, loop.results.l
    _epilogue(kb, cfg, p, geo, pipes, o_addr, row, m, l_)


def _epilogue(kb, cfg, p, geo: _Geo, pipes, o_addr, row, m, l_):
    """O / (l + sink term) for this half's columns of rows < h_q; LSE and max_logits in half 0. A row
    without a valid score (l = 0) gets out 0, LSE +inf and max_logits -inf."""
    f32 = "f32"
    zero = const(0.0, f32)
    empty = l_.eq(0.0)
    m_use = select(m.eq(NEG_INF), zero, m)
    denom = l_
    if cfg.sinks:   # note "Sinks": sink = -inf adds 0, +inf gives out 0
        sink = kb.load(kb.gep(p["sinks"], select(row.lt(p["heads"]), row, 0), f32), f32)
        denom = l_ + exp2(sink * LOG2E - m_use)
    inv = select(empty, zero, const(1.0, f32) / denom)
    inside = row.lt(p["heads"])
    head_row = geo.token * p["heads"] + row
    out_row = kb.gep(p["out"], (head_row.to("i64") * sc.D_V + (geo.half * sc.D_V_CTA).to("i64")) * 2, "i8")
    has_tiles = geo.n_tiles.gt(0)
    with kb.if_(has_tiles).then_():
        o0 = pipes["o"].initial_state()
        pipes["o"].consumer_wait(o0)
        kb.fence("tcgen05_after")
        for ch in range(sc.D_V_CTA // O_COLS):
            o = tcgen05.tmem_load(o_addr + ch * O_COLS, O_COLS)
            fa4.tmem_wait(kind="ld")
            o = o.bitcast((f32, O_COLS))
            vals = [select(empty, zero, o[i] * inv) for i in range(O_COLS)]
            _store_cols(kb, out_row, ch * O_COLS, vals, inside)
        kb.fence("tcgen05_before")
        pipes["o"].consumer_release(o0)
    with kb.if_(geo.n_tiles.eq(0)).then_():
        for ch in range(sc.D_V_CTA // O_COLS):
            _store_cols(kb, out_row, ch * O_COLS, [zero] * O_COLS, inside)
    # LSE (natural log) and max_logits of the scaled scores, once per token (half 0)
    lse = select(empty, const(float("inf"), f32), (log2(l_) + m_use) * LN2)
    max_logits = select(empty, const(NEG_INF, f32), m_use * LN2)
    with kb.if_(inside & geo.half.eq(0)).then_():
        kb.store(lse, kb.gep(p["lse"], head_row, f32))
        kb.store(max_logits, kb.gep(p["max_logits"], head_row, f32))


def _store_cols(kb, out_row, col0: int, vals: list, inside):
    """Columns col0 .. col0 + len(vals) of this row of out, bf16, 16 bytes a store, when `inside`."""
    with kb.if_(inside).then_():
        for u in range(len(vals) // 8):
            words = [vec(vals[8 * u + 2 * w], vals[8 * u + 2 * w + 1]).to((sc.DTYPE, 2)).bitcast("i32")
                     for w in range(4)]
            kb.store(vec(*words), kb.gep(out_row, (col0 + 8 * u) * 2, "i8"), align=16)
