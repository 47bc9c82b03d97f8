"""Sparse MLA prefill on sm_100a as a CTA pair (FlashMLA's head128 flash_mla_sparse_fwd design: Q in
TMEM, gather4 TMA, B_TOPK = 128 positions per block split over the pair, cta_group::2 MMAs issued by
the leader). The layouts are the config's note "Pair"; semantics attention_mla_sparse_sm100's
(attention_mla_sparse_sm90 notes "Bias" and "Sinks"). One cluster of two CTAs per token (grid x = 2
token + rank); every pipeline barrier the leader's MMAs wait is in CTA 0, the peer reaching it by
.cta_group::2 TMA loads (bytes) and fa4.peer_arrive (threads).

Roles (config.ROLES; 224 threads a CTA, no setmaxnreg):
    load     (warp 5) one thread a CTA:
                 1. Q's first Q_SMEM_COLS columns of the CTA's 64 head rows -> q_smem (`q`)
                 2. Q's last Q_TMEM_COLS columns -> the K stage (`k`'s first fill, note "Q staging")
                 3. per block j: the K rows of positions 128 j + 64 rank + [0, 64) -> `k` (a position
                    at or past L gathers row -1: zeros, as invalid indices do)
    vload    (warp 6) one thread a CTA: per block j the V columns [256 rank, + 256) of all 128 positions
             -> `v`
    mma      (warp 4) one thread of CTA 0; waits Q (`q`), copies Q's TMEM part (`k` fill 0) by
             tcgen05.cp into both CTAs' TMEM, then per block j:
                 1. wait K_j and S free; S = Q K_j^T (36 pair MMAs M 128 N 128 K 16: A = Q from SMEM
                    for the first Q_SMEM_COLS / 16, from TMEM after) -> commit `s` to both CTAs and
                    release `k` in both
                 2. wait P_j (both CTAs' softmax threads, O rescaled) and V_j; O (+)= P_j V_j (8 x 2 pair
                    MMAs M 128 N 256 K 16) -> release `p` and `v` in both CTAs
             and after the last block commits `o` to both CTAs.
    softmax  (warps 0-3, thread t = TMEM lane t: head row 64 rank + t % 64, score half t // 64) per j:
                 1. wait S_j (its commit follows O += P_(j-1) V_(j-1)); read the lane's 64 scores;
                    release S on the leader's barrier
                 2. invalid positions -> -inf; the row's max over both halves (note "Row max"); the
                    half's running sum in base 2 (m = -inf until a valid score)
                 3. P_j (bf16) -> p_smem once O += P_(j-1) V_(j-1) freed it; O *= alpha in TMEM (j > 0);
                    arrive on the leader's `p` full
             then sums l over the halves, waits `o`, writes O / (l + sink term) (the lane's 256 columns)
             and, for t < 64, the LSE and max_logits.

Note "Q staging": Q's TMEM part reaches TMEM through the K stage's SMEM as `k`'s first fill (the same
pair commit as a K block), so the copy's release of the stage is the ring's ordinary release and the
first K gather waits it. FlashMLA's copy: 8 slices of 8 columns a 64-column chunk, tcgen05.cp
64x128b.warpx2::02_13 cta_group 2, descriptor start + 16 bytes and TMEM column + 4 a slice.

Note "Row max": S row 64 rank + l is split over lanes l and 64 + l (threads t and t ^ 64 of warps w and
w ^ 2). Each iteration both write their half's max to `red` and read the partner's between two named
barriers of the 128 softmax threads (the first orders the write after the partner's previous read), so
both keep the same running max m and P uses one scale per row; the sums l of the halves are added once
at the end the same way.

tcgen05 fences as in attention_mla_sparse_sm100; P's generic stores reach the MMA's async proxy through
fence.proxy.async before the arrival that hands them over.
"""
from __future__ import annotations

from typing import NamedTuple

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import KernelBuilder, PipeState, Value, const, exp2, fmax, log2, select, tree_reduce, vec
from . import attention_mla_sparse_sm100_pair_config as pc
from .common import tcgen05
from .common.constants import LOG2E
from .common.gather4 import gather4_tile

SW = 128
LN2 = 0.6931471805599453
NEG_INF = float("-inf")
BAR_RED = 1                    # named barrier of the 128 softmax threads (note "Row max")
S_COLS = 32                    # TMEM columns per tcgen05.ld of S
O_COLS = 16                    # TMEM columns per tcgen05.ld of O (rescale, epilogue)
PAIR = dict(cta_group=2)
BOTH = dict(cta_group=2, multicast=0b11)


class _Geo(NamedTuple):
    token: Value
    rank: Value
    length: Value              # L: the token's attended positions
    n_blocks: Value            # ceil(L / B_TOPK), at least 1 (L = 0 runs one all-invalid block)


def _geometry(kb, cfg, p) -> _Geo:
    token = kb.block_idx(0) // pc.CLUSTER[0]
    topk = p["topk"]
    length = topk
    if cfg.topk_length:
        raw = kb.load(kb.gep(p["topk_length"], token, "i32"), "i32")
        length = select(raw.slt(0), 0, select(raw.sgt(topk), topk, raw))
    n_blocks = (length + (pc.B_TOPK - 1)) // pc.B_TOPK
    return _Geo(token, kb.cluster_rank(), length, select(n_blocks.eq(0), 1, n_blocks))


def build(cfg: pc.MLASparsePairConfig = pc.MLASparsePairConfig()) -> dsl.KernelIR:
    cfg.validate()
    tm, sm = pc.tmem_plan(), pc.smem_plan()
    kb = KernelBuilder(cfg.name(), arch="sm_100a", block=(pc.NUM_THREADS, 1, 1), cluster=pc.CLUSTER,
                       config=cfg.key())
    p = kb.params_from(cfg.params, tma=cfg.tma_specs())
    with kb.body():
        smem = {name: kb.smem(f"{name}_smem", sm[name]) for name in ("q", "k", "v", "p")}
        smem["red"] = kb.smem("red_smem", sm["red"], align=16)
        tmem_slot = kb.smem("tmem_slot", 16, align=16)
        pipes = {
            "q": kb.pipeline("q", num_stages=1, producer="load", consumers=["mma"]),
            "k": kb.pipeline("k", num_stages=1, producer="load", consumers=["mma"]),
            "v": kb.pipeline("v", num_stages=1, producer="vload", consumers=["mma"]),
            "s": kb.pipeline("s", num_stages=1, producer="mma", consumers=["softmax"], consumer_arrivals=256),
            "p": kb.pipeline("p", num_stages=1, producer="softmax", consumers=["mma"], producer_arrivals=256),
            "o": kb.pipeline("o", num_stages=1, producer="mma", consumers=["softmax"], consumer_arrivals=256),
        }
        warp = kb.thread_idx(0) // 32
        # 1. warp 0 of each CTA allocates the pair's TMEM; the barriers are initialised in both CTAs
        #    before any remote arrival or load (cluster_sync)
        with kb.if_(warp.eq(0)).then_():
            fa4.tmem_alloc(tmem_slot, cols=tm["alloc"], **PAIR)
            fa4.tmem_relinquish(**PAIR)
        kb.pipeline_init()
        kb.fence("tcgen05_before")
        kb.cluster_sync()
        kb.fence("tcgen05_after")
        tmem = kb.load(tmem_slot, "i32")
        geo = _geometry(kb, cfg, p)
        roles = {name: dict(first_warp=first, num_warps=n) for name, first, n in pc.ROLES}
        with kb.warp_roles():
            with kb.role("load", **roles["load"]):
                _load_role(kb, p, geo, pipes, smem)
            with kb.role("vload", **roles["vload"]):
                _vload_role(kb, p, geo, pipes, smem)
            with kb.role("mma", **roles["mma"]):
                _mma_role(kb, geo, pipes, smem, tmem, tm)
            with kb.role("softmax", **roles["softmax"]):
                _softmax_role(kb, cfg, p, geo, pipes, smem, tmem, tm)
        # 2. both CTAs' roles finished (the leader's MMAs on the peer's TMEM too): free the columns
        kb.fence("tcgen05_before")
        kb.cluster_sync()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(tmem, cols=tm["alloc"], **PAIR)
    return kb.finish()


# ---- loads ---------------------------------------------------------------------------------------------
def _q_boxes(kb, p, geo: _Geo, pipe, name: str, dst, chunks):
    """One fill of `pipe` with Q's column chunks `chunks` of this CTA's 64 head rows, onto the leader's
    barrier (the pair commit expects both CTAs' bytes)."""
    st = pipe.initial_state()
    pipe.producer_acquire(st)
    for i, c in enumerate(chunks):
        fa4.tma_load(p["q"], kb.gep(dst, i * pc.CTA_ROWS * SW, "i8"), st.stage,
                     [const(c * pc.CHUNK), geo.rank * pc.CTA_ROWS, geo.token], pipe=name,
                     box=[pc.CHUNK, pc.CTA_ROWS, 1], elem_bytes=2, **PAIR)
    pipe.producer_commit(st, tx_bytes=2 * len(chunks) * pc.CHUNK * pc.CTA_ROWS * 2, **PAIR)
    return st


def _rows(kb, p, geo: _Geo, first, count: int) -> list:
    """Indices of positions first .. first + count - 1 of the token; a position >= L reads as -1."""
    row0 = geo.token * p["topk"]
    rows = []
    for i in range(count):
        pos = first + i
        idx = kb.load(kb.gep(p["indices"], row0 + pos, "i32"), "i32")
        rows.append(select(pos.lt(geo.length), idx, const(-1)))
    return rows


def _load_role(kb, p, geo: _Geo, pipes, smem):
    with kb.if_(kb.elect_one()).then_():
        # 1-2. Q: the SMEM part, then the TMEM part through the K stage (note "Q staging")
        _q_boxes(kb, p, geo, pipes["q"], "q", smem["q"], range(pc.Q_SMEM_CHUNKS))
        k0 = _q_boxes(kb, p, geo, pipes["k"], "k", smem["k"], range(pc.Q_SMEM_CHUNKS, pc.D_QK // pc.CHUNK))
        # 3. per block: this CTA's 64 K rows
        loop = kb.for_(0, geo.n_blocks, 1, carry=k0.advance())
        with loop as (j, st):
            pipes["k"].producer_acquire(st)
            rows = _rows(kb, p, geo, j * pc.B_TOPK + geo.rank * pc.CTA_ROWS, pc.CTA_ROWS)
            tx = gather4_tile(kb, p["kv"], smem["k"], st.stage, rows, pipe="k", cols=pc.D_QK, dtype=pc.DTYPE,
                              **PAIR)
            pipes["k"].producer_commit(st, tx_bytes=2 * tx, **PAIR)
            loop.yield_(st.advance())


def _vload_role(kb, p, geo: _Geo, pipes, smem):
    with kb.if_(kb.elect_one()).then_():
        loop = kb.for_(0, geo.n_blocks, 1, carry=pipes["v"].initial_state())
        with loop as (j, st):
            pipes["v"].producer_acquire(st)
            rows = _rows(kb, p, geo, j * pc.B_TOPK, pc.B_TOPK)
            tx = gather4_tile(kb, p["kv"], smem["v"], st.stage, rows, pipe="v", cols=pc.D_V_CTA, dtype=pc.DTYPE,
                              col0=geo.rank * pc.D_V_CTA, **PAIR)
            pipes["v"].producer_commit(st, tx_bytes=2 * tx, **PAIR)
            loop.yield_(st.advance())


# ---- mma -----------------------------------------------------------------------------------------------
class _MmaCarry(NamedTuple):
    k: PipeState
    v: PipeState
    t: PipeState           # s, p (1 stage each, in lock step)


def _desc(kb, base, offset: int, lbo: int = 16):
    return fa4.smem_desc(kb.gep(base, offset, "i8"), swizzle=SW, lbo=lbo, sbo=8 * SW)


def _copy_q(kb, smem, q_tmem):
    """Note "Q staging": both CTAs' staged chunks into their TMEM (each row in lanes l and 64 + l)."""
    for c in range(pc.Q_TMEM_CHUNKS):
        for s in range(pc.CHUNK // 8):                # 8 columns (128 bits) a slice: 4 TMEM columns
            src = _desc(kb, smem["k"], c * pc.CTA_ROWS * SW + 16 * s)
            fa4.tmem_copy(q_tmem + c * (pc.CHUNK // 2) + 4 * s, src, shape="64x128b", multicast="warpx2::02_13",
                          **PAIR)


def _mma_role(kb, geo: _Geo, pipes, smem, tmem, tm):
    s_tmem, o_tmem, q_tmem = tmem + tm["S"], tmem + tm["O"], tmem + tm["Q"]
    per_chunk = pc.CHUNK // pc.MMA_K
    with kb.if_(kb.elect_one() & geo.rank.eq(0)).then_():
        q0 = pipes["q"].initial_state()
        pipes["q"].consumer_wait(q0)
        k0 = pipes["k"].initial_state()
        pipes["k"].consumer_wait(k0)
        kb.fence("tcgen05_after")
        _copy_q(kb, smem, q_tmem)
        pipes["k"].mma_commit(k0, side="empty", **BOTH)
        init = _MmaCarry(k0.advance(), pipes["v"].initial_state(), pipes["s"].initial_state())
        loop = kb.for_(0, geo.n_blocks, 1, carry=init)
        with loop as (j, c):
            # 1. S = Q K_j^T
            pipes["k"].consumer_wait(c.k)
            pipes["s"].producer_acquire(c.t)
            kb.fence("tcgen05_after")
            for kk in range(pc.D_QK // pc.MMA_K):
                ch, within = divmod(kk, per_chunk)
                off = within * pc.MMA_K * 2
                b = _desc(kb, smem["k"], ch * pc.CTA_ROWS * SW + off)
                acc = const(int(kk > 0), "i1")
                if ch < pc.Q_SMEM_CHUNKS:
                    a = _desc(kb, smem["q"], ch * pc.CTA_ROWS * SW + off)
                    tcgen05.mma(a, b, acc, s_tmem, m=pc.B_H, n=pc.B_TOPK, k=pc.MMA_K, ab_dtype=pc.DTYPE, **PAIR)
                else:                          # 16 columns of Q in 8 TMEM columns
                    a_tmem = q_tmem + (ch - pc.Q_SMEM_CHUNKS) * (pc.CHUNK // 2) + within * (pc.MMA_K // 2)
                    tcgen05.mma(a_tmem, b, acc, s_tmem, m=pc.B_H, n=pc.B_TOPK, k=pc.MMA_K, ab_dtype=pc.DTYPE,
                                a_source="tmem", **PAIR)
            pipes["s"].mma_commit(c.t, side="full", **BOTH)
            pipes["k"].mma_commit(c.k, side="empty", **BOTH)
            # 2. O (+)= P_j V_j: MMA i takes V's columns [128 i, + 128) of each CTA's 256
            pipes["p"].consumer_wait(c.t)
            pipes["v"].consumer_wait(c.v)
            kb.fence("tcgen05_after")
            for kk in range(pc.B_TOPK // pc.MMA_K):
                ch, within = divmod(kk, per_chunk)
                a = _desc(kb, smem["p"], ch * pc.CTA_ROWS * SW + within * pc.MMA_K * 2)
                acc = j.gt(0) if kk == 0 else const(1, "i1")
                for i in range(pc.D_V_CTA // (pc.O_MMA_N // 2)):
                    chunk0 = i * (pc.O_MMA_N // 2) // pc.CHUNK
                    b = _desc(kb, smem["v"], (chunk0 * pc.B_TOPK + kk * pc.MMA_K) * SW, lbo=pc.B_TOPK * SW)
                    tcgen05.mma(a, b, acc, o_tmem + i * (pc.O_MMA_N // 2), m=pc.B_H, n=pc.O_MMA_N, k=pc.MMA_K,
                                ab_dtype=pc.DTYPE, b_major="mn", **PAIR)
            pipes["p"].mma_commit(c.t, side="empty", **BOTH)
            pipes["v"].mma_commit(c.v, side="empty", **BOTH)
            loop.yield_(_MmaCarry(c.k.advance(), c.v.advance(), c.t.advance()))
        # 3. O complete
        o0 = pipes["o"].initial_state()
        pipes["o"].producer_acquire(o0)
        pipes["o"].mma_commit(o0, side="full", **BOTH)
        pipes["q"].mma_commit(q0, side="empty", **BOTH)


# ---- softmax and epilogue ----------------------------------------------------------------------------------
class _SoftmaxCarry(NamedTuple):
    t: PipeState           # s, p
    m: Value               # running max of the row's scaled scores (base 2), -inf until a valid one
    l: Value               # running sum of this lane's half


def _to_leader(kb, geo: _Geo, pipe, st: PipeState, side: str):
    """This CTA's softmax threads' arrival on `side`[stage] of the leader's `pipe`: a local release or
    commit in CTA 0, fa4.peer_arrive from CTA 1."""
    with kb.if_(geo.rank.eq(0)).then_():
        (pipe.consumer_release if side == "empty" else pipe.producer_commit)(st)
    with kb.if_(geo.rank.eq(1)).then_():
        pipe.peer_arrive(st, 0, side=side)


def _exchange(kb, red, lane, value):
    """Note "Row max": the partner lane's (lane ^ 64) `value`."""
    kb.named_barrier(BAR_RED, 128)
    kb.store(value, kb.gep(red, lane, "f32"))
    kb.named_barrier(BAR_RED, 128)
    return kb.load(kb.gep(red, lane ^ pc.CTA_ROWS, "f32"), "f32")


def _softmax_role(kb, cfg, p, geo: _Geo, pipes, smem, tmem, tm):
    lanes = tmem + tcgen05.lane_base(kb)
    s_addr, o_addr = lanes + tm["S"], lanes + tm["O"]
    lane = kb.thread_idx(0) % 128
    half, row = lane // pc.CTA_ROWS, lane % pc.CTA_ROWS
    scale_log2 = p["scale_log2"]
    row0 = geo.token * p["topk"]
    p_row = kb.gep(smem["p"], half * pc.CTA_ROWS * SW + row * SW, "i8")
    f32 = "f32"
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    loop = kb.for_(0, geo.n_blocks, 1, carry=_SoftmaxCarry(pipes["s"].initial_state(), neg_inf, zero))
    with loop as (j, c):
        # 1. the lane's 64 scores
        pipes["s"].consumer_wait(c.t)
        kb.fence("tcgen05_after")
        parts = [tcgen05.tmem_load(s_addr + k, S_COLS) for k in range(0, pc.B_TOPK // 2, S_COLS)]
        fa4.tmem_wait(kind="ld")
        kb.fence("tcgen05_before")
        _to_leader(kb, geo, pipes["s"], c.t, "empty")
        s = [part.bitcast((f32, S_COLS))[i] for part in parts for i in range(S_COLS)]
        # 2. invalid positions -> -inf; the row's max over both halves; this half's sum
        scaled = []
        for i, x in enumerate(s):
            pos = j * pc.B_TOPK + half * pc.CTA_ROWS + i
            idx = kb.load(kb.gep(p["indices"], row0 + pos, "i32"), "i32")
            valid = pos.lt(geo.length) & idx.lt(p["s_kv"])          # unsigned: a negative index is invalid
            scaled.append(select(valid, x * scale_log2, neg_inf))
        own = tree_reduce(scaled, dsl.fmax)
        m_new = fmax(c.m, fmax(own, _exchange(kb, smem["red"], lane, own)))
        m_use = select(m_new.eq(NEG_INF), zero, m_new)
        alpha = exp2(c.m - m_use)
        pr = [exp2(x - m_use) for x in scaled]
        l_new = c.l * alpha + tree_reduce(pr, lambda a, b: a + b)
        # 3. P -> SMEM (K-major, 128B swizzle: 16-byte unit u of row r at u ^ (r % 8)) once the previous
        #    P V freed it; O *= alpha (O += P_(j-1) V_(j-1) completed before S_j's commit)
        pipes["p"].producer_acquire(c.t)
        for u in range(SW // 16):
            words = [vec(pr[8 * u + 2 * w], pr[8 * u + 2 * w + 1]).to((pc.DTYPE, 2)).bitcast("i32") for w in range(4)]
            kb.store(vec(*words), kb.gep(p_row, ((row % 8) ^ u) * 16, "i8"), align=16)
        with kb.if_(j.gt(0)).then_():
            for ch in range(pc.D_V_CTA // O_COLS):
                o = tcgen05.tmem_load(o_addr + ch * O_COLS, O_COLS)
                fa4.tmem_wait(kind="ld")
                o = o.bitcast((f32, O_COLS))
                fa4.tmem_store(o_addr + ch * O_COLS, vec(*[o[i] * alpha for i in range(O_COLS)]).bitcast(("i32", O_COLS)))
            fa4.tmem_wait(kind="st")
        kb.fence("tcgen05_before")
        kb.fence("async_smem")
        _to_leader(kb, geo, pipes["p"], c.t, "full")
        loop.yield_(_SoftmaxCarry(c.t.advance(), m_new, l_new))
    m, l_half = loop.results.m, loop.results.l
    _epilogue(kb, cfg, p, geo, pipes, smem, o_addr, lane, m, l_half + _exchange(kb, smem["red"], lane, l_half))


def _epilogue(kb, cfg, p, geo: _Geo, pipes, smem, o_addr, lane, m, l_):
    """O / (l + sink term): the lane's 256 columns of head row 64 rank + lane % 64 (columns from
    256 (lane // 64)); LSE and max_logits from lanes < 64. A row without a valid score (l = 0) gets
    out 0, LSE +inf and max_logits -inf."""
    f32 = "f32"
    zero = const(0.0, f32)
    half, row = lane // pc.CTA_ROWS, lane % pc.CTA_ROWS
    head = geo.rank * pc.CTA_ROWS + row
    empty = l_.eq(0.0)
    m_use = select(m.eq(NEG_INF), zero, m)
    denom = l_
    if cfg.sinks:   # note "Sinks": sink = -inf adds 0, +inf gives out 0
        sink = kb.load(kb.gep(p["sinks"], head, f32), f32)
        denom = l_ + exp2(sink * LOG2E - m_use)
    inv = select(empty, zero, const(1.0, f32) / denom)
    head_row = geo.token * p["heads"] + head
    out_row = kb.gep(p["out"], (head_row.to("i64") * pc.D_V + (half * pc.D_V_CTA).to("i64")) * 2, "i8")
    o0 = pipes["o"].initial_state()
    pipes["o"].consumer_wait(o0)
    kb.fence("tcgen05_after")
    for ch in range(pc.D_V_CTA // O_COLS):
        o = tcgen05.tmem_load(o_addr + ch * O_COLS, O_COLS)
        fa4.tmem_wait(kind="ld")
        o = o.bitcast((f32, O_COLS))
        vals = [select(empty, zero, o[i] * inv) for i in range(O_COLS)]
        for u in range(O_COLS // 8):
            words = [vec(vals[8 * u + 2 * w], vals[8 * u + 2 * w + 1]).to((pc.DTYPE, 2)).bitcast("i32") for w in range(4)]
            kb.store(vec(*words), kb.gep(out_row, (ch * O_COLS + 8 * u) * 2, "i8"), align=16)
    kb.fence("tcgen05_before")
    _to_leader(kb, geo, pipes["o"], o0, "empty")
    # LSE (natural log) and max_logits of the scaled scores, once per row (lanes < 64)
    lse = select(empty, const(float("inf"), f32), (log2(l_) + m_use) * LN2)
    max_logits = select(empty, const(NEG_INF, f32), m_use * LN2)
    with kb.if_(half.eq(0)).then_():
        kb.store(lse, kb.gep(p["lse"], head_row, f32))
        kb.store(max_logits, kb.gep(p["max_logits"], head_row, f32))
