"""FlashAttention-4 forward on sm_100a: two Q tiles per CTA, S/P/O in tensor memory, one MMA thread.

One CTA computes O for BM = 256 query rows of one (batch, head) as two Q tiles of 128 rows
(tile i = rows m0 + 128 i ...), which share every K/V block. The FA4Config module note gives the
TMEM and SMEM plans. Roles (FA4Config.ROLES; 512 threads):

    load        (warp 13) one elected thread: Q0 and Q1 once (`q`), then K_n and V_n into their
                rings (`k`, `v`) for every visited KV block n.
    mma         (warp 12) one elected thread issues every tcgen05.mma, in the order
                    S0 <- Q0 Kn^T;  O1 <- O1 + P1 V(n-1);  S1 <- Q1 Kn^T;  O0 <- O0 + P0 Vn
                so that two MMAs separate computing S_i from consuming P_i. It commits S_i to
                `s_i.full` (softmax i may read it), O_i to `o_i.full` (correction may touch it),
                and frees K/V stages and P_i with commits on their `empty` barriers.
    softmax0/1  (warps 0-3 / 4-7; thread = row of its tile) per block: wait `s_i`, tcgen05.ld the
                BN scores of its row, mask, row max, lazy max update (common.softmax.max_update),
                write the O rescale factor to C_i (`c_i`), exp2 (1 in exp2_poly_stride on the FMA
                pipes: common.softmax.exp2_poly), row sum, P_i -> TMEM (`p_i`). After the last
                block: the row sum and the scaled row max to C_i.
    correction  (warps 8-11) per block n >= 1 and tile: read the factor from C_i, wait until
                O_i += P_i V(n-1) completed, rescale O_i in TMEM when some row of the warp moved
                its max (vote.any; skipped otherwise), release `o_i` (the MMA may issue the next
                P_i V). At the end: O_i / l -> Q_i's SMEM tile (128B swizzle) -> TMA store, LSE.

Every wait on a barrier that a tcgen05 op completes or that guards TMEM another warp wrote is
followed by tcgen05.fence::after_thread_sync; every TMEM write handed to another warp is waited
(tcgen05.wait::st) and followed by tcgen05.fence::before_thread_sync before the arrive
(PTX ISA 9.1 §9.7.16.6.4 "tcgen05.fence").
"""
from __future__ import annotations

from .. import dsl
from ..dsl import KernelBuilder, Value, const, fa4_op, fma, log2, select, tree_reduce, vec
from . import attention_sm100_config as fcfg
from .attention_sm100_config import LAUNCH_PARAMS, FA4Config  # noqa: F401  (FA4Config re-exported)
from .common.masks import block_range, visible_keys
from .common.softmax import exp2_mixed, max_update

SW = fcfg.SWIZZLE_BYTES
CHUNK = fcfg.CHUNK
MMA_M = fcfg.MMA_M
MMA_K = fcfg.MMA_K
LN2 = 0.6931471805599453
NEG_INF = float("-inf")
EPI_COLS = 16                  # TMEM columns per tcgen05.ld in the correction role (80 registers)
S_LOAD_COLS = 32               # TMEM columns per tcgen05.ld of S in the softmax (all issued, then one wait)
BAR_EPILOGUE = 1               # named barrier of the correction warpgroup's O tile hand-off to TMA
ROLE = {name: (first, n, regs) for name, first, n, regs in fcfg.ROLES}


def build(cfg: FA4Config = FA4Config()) -> dsl.KernelIR:
    cfg.validate()
    tm, sm = cfg.tmem_plan(), cfg.smem_plan()
    stages = sm["stages"]
    name = (f"attention_fwd_sm100_{cfg.dtype}_qk{cfg.head_dim}_ov{cfg.head_dim_v}_g{cfg.group}"
            f"{'_causal' if cfg.causal else ''}_bn{cfg.bn}_s{stages}{cfg.name_suffix()}")
    kb = KernelBuilder(name, arch="sm_100a", block=(fcfg.NUM_THREADS, 1, 1), config=cfg.key())
    box = {"q": MMA_M, "k": cfg.bn, "v": cfg.bn, "o": MMA_M}   # the launch contract, LAUNCH_PARAMS
    p = kb.params_from(LAUNCH_PARAMS, tma={n: dict(dtype=cfg.dtype, box=(CHUNK, 1, rows, 1), swizzle="128B")
                                           for n, rows in box.items()})
    q_desc, k_desc, v_desc, o_desc, lse_ptr = (p[n] for n in ("q", "k", "v", "o", "lse"))
    seqlen_q, seqlen_k, scale_log2 = p["seqlen_q"], p["seqlen_k"], p["scale_log2"]

    with kb.body():
        smem = _Smem(kb, cfg, sm)
        pipes = _declare_pipes(kb, stages)
        warp = kb.thread_idx(0) // 32
        # 1. warp 0 allocates the TMEM columns; every warp reads the address after the barrier
        with kb.if_(warp.eq(0)).then_():
            fa4_op("tmem_alloc", [smem.tmem_slot], cols=tm["alloc"])
            fa4_op("tmem_relinquish")
        kb.pipeline_init()
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        tmem = kb.load(smem.tmem_slot, "i32")

        # each role computes the geometry after its setmaxnreg (a value live across it is spilled)
        def geo():
            return _Geometry(kb, cfg, seqlen_q, seqlen_k)

        with kb.warp_roles():
            with kb.role("load", **_role("load")):
                _load_role(kb, cfg, geo(), pipes, smem, q_desc, k_desc, v_desc)
            with kb.role("mma", **_role("mma")):
                _mma_role(kb, cfg, geo(), pipes, smem)
            for i in (0, 1):
                with kb.role(f"softmax{i}", **_role(f"softmax{i}")):
                    _softmax_role(kb, cfg, geo(), pipes, tmem, i, scale_log2)
            with kb.role("correction", **_role("correction")):
                _correction_role(kb, cfg, geo(), pipes, smem, tmem, o_desc, lse_ptr)
        # 2. every role finished (their TMEM accesses waited): warp 0 frees the columns
        kb.fence("tcgen05_before")
        kb.sync_threads()
        with kb.if_(warp.eq(0)).then_():
            kb.fence("tcgen05_after")
            fa4_op("tmem_dealloc", [tmem], cols=tm["alloc"])
    return kb.finish()


def _role(name: str) -> dict:
    first, n, regs = ROLE[name]
    return dict(first_warp=first, num_warps=n, regs=regs)


class _Smem:
    def __init__(self, kb, cfg, sm):
        self.q_tile, self.k_tile, self.v_tile = sm["q_tile"], sm["k_tile"], sm["v_tile"]
        self.q = kb.smem("q_smem", sm["q"])
        self.k = kb.smem("k_smem", sm["k"])
        self.v = kb.smem("v_smem", sm["v"])
        self.tmem_slot = kb.smem("tmem_slot", fcfg.TMEM_SLOT_BYTES, align=16)


def _declare_pipes(kb, stages: int) -> dict:
    """The pipelines and who arrives on them (one thread for TMA / tcgen05.commit, 128 for a warpgroup)."""
    p = {"q": kb.pipeline("q", num_stages=1, producer="load", consumers=["mma"]),
         "k": kb.pipeline("k", num_stages=stages, producer="load", consumers=["mma"]),
         "v": kb.pipeline("v", num_stages=stages, producer="load", consumers=["mma"])}
    for i in (0, 1):
        sm = f"softmax{i}"
        p[f"s{i}"] = kb.pipeline(f"s{i}", num_stages=1, producer="mma", consumers=[sm], consumer_arrivals=128)
        p[f"p{i}"] = kb.pipeline(f"p{i}", num_stages=1, producer=sm, consumers=["mma"], producer_arrivals=128)
        p[f"o{i}"] = kb.pipeline(f"o{i}", num_stages=1, producer="mma", consumers=["correction"],
                                 consumer_arrivals=128)
        p[f"c{i}"] = kb.pipeline(f"c{i}", num_stages=1, producer=sm, consumers=["correction"],
                                 producer_arrivals=128, consumer_arrivals=128)
    return p


class _Geometry:
    """The CTA's rows, head and the KV blocks it visits (every thread computes it)."""

    def __init__(self, kb, cfg, seqlen_q, seqlen_k):
        self.seqlen_q, self.seqlen_k = seqlen_q, seqlen_k
        m_block = kb.block_idx(0)
        if cfg.causal:  # the longest rows first: the grid's tail is short work
            m_block = kb.grid_dim(0) - 1 - m_block
        self.m0 = m_block * cfg.bm
        self.head = kb.block_idx(1)
        self.heads = kb.grid_dim(1)
        self.batch = kb.block_idx(2)
        self.kv_head = self.head // cfg.group if cfg.group > 1 else self.head
        self.n_blocks, _ = block_range(self.m0, cfg.bm, seqlen_q, seqlen_k, cfg.bn, cfg.causal)

    def tile_row0(self, i: int) -> Value:
        return self.m0 + i * MMA_M

    def n_unmasked(self, cfg, i: int) -> Value:
        return block_range(self.tile_row0(i), MMA_M, self.seqlen_q, self.seqlen_k, cfg.bn, cfg.causal)[1]


def _lane_base(kb) -> Value:
    """TMEM address bits of this warp's lane quarter: warp w reaches lanes 32 (w % 4) .. + 31 (§9.7.16.8)."""
    return ((kb.thread_idx(0) // 32) % 4 * 32) << 16


# ---- load ---------------------------------------------------------------------------------------------
def _load_role(kb, cfg, geo, pipes, smem, q_desc, k_desc, v_desc):
    qk_ch, ov_ch = cfg.padded_head_dim // CHUNK, cfg.padded_head_dim_v // CHUNK
    q_pipe, k_pipe, v_pipe = pipes["q"], pipes["k"], pipes["v"]
    # a CTA without KV blocks loads nothing: its epilogue writes zeros into Q's tiles right away
    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        for d in (q_desc, k_desc, v_desc):
            fa4_op("tma_prefetch", [d])
        # 1. Q0 and Q1: 128 rows each, one box per 64-column chunk
        q0 = q_pipe.initial_state()
        q_pipe.producer_acquire(q0)
        q_pipe.producer_commit(q0, tx_bytes=2 * smem.q_tile)
        for i in (0, 1):
            for c in range(qk_ch):
                dst = kb.gep(smem.q, i * smem.q_tile + c * MMA_M * SW, "i8")
                fa4_op("tma_load", [q_desc, dst, q0.stage, const(c * CHUNK), geo.head, geo.tile_row0(i), geo.batch],
                       pipe="q", box=[CHUNK, 1, MMA_M, 1], elem_bytes=fcfg.ELEM_BYTES)
        # 2. K_n then V_n of every visited block, each into its ring
        s0 = k_pipe.initial_state()
        loop = kb.for_(0, geo.n_blocks, 1, carry=(s0.stage, s0.phase))
        with loop as (n, (stage, phase)):
            s = dsl.PipeState(stage, phase, k_pipe.num_stages)
            row = n * cfg.bn
            for pipe, desc, base, tile, nch in ((k_pipe, k_desc, smem.k, smem.k_tile, qk_ch),
                                                (v_pipe, v_desc, smem.v, smem.v_tile, ov_ch)):
                pipe.producer_acquire(s)
                pipe.producer_commit(s, tx_bytes=tile)
                for c in range(nch):
                    dst = kb.gep(base, stage * tile + c * cfg.bn * SW, "i8")
                    fa4_op("tma_load", [desc, dst, stage, const(c * CHUNK), geo.kv_head, row, geo.batch],
                           pipe=pipe.name, box=[CHUNK, 1, cfg.bn, 1], elem_bytes=fcfg.ELEM_BYTES)
            nxt = s.advance()
            loop.yield_(nxt.stage, nxt.phase)


# ---- mma ----------------------------------------------------------------------------------------------
class _Issuer:
    """The MMA thread's two GEMMs; TMEM addresses are lane 0 + column.

    Each GEMM re-reads the TMEM base from its SMEM slot: the loads sit between mbarrier waits (asm
    with memory effects), so LLVM keeps the address arithmetic in the loop instead of hoisting 20+
    loop-invariant TMEM addresses that the 48-register MMA warp would spill."""

    def __init__(self, kb, cfg, smem):
        self.kb, self.cfg, self.smem = kb, cfg, smem
        self.tm = cfg.tmem_plan()

    def _tmem(self, region: str) -> Value:
        return self.kb.load(self.smem.tmem_slot, "i32") + self.tm[region]

    def s(self, i: int, k_stage: Value):
        """S_i = Q_i K^T: head_dim / 16 MMAs 128 x BN x 16, both operands K-major SMEM (128B swizzle)."""
        kb, cfg, smem = self.kb, self.cfg, self.smem
        q_base = kb.gep(smem.q, i * smem.q_tile, "i8")
        k_base = kb.gep(smem.k, k_stage * smem.k_tile, "i8")
        per_chunk = CHUNK // MMA_K
        s_tmem = self._tmem(f"S{i}")
        for kk in range(cfg.padded_head_dim // MMA_K):
            c, within = divmod(kk, per_chunk)
            off = within * MMA_K * fcfg.ELEM_BYTES
            a = fa4_op("smem_desc", [kb.gep(q_base, c * MMA_M * SW + off, "i8")], ["i64"], swizzle=SW, lbo=16,
                       sbo=8 * SW)
            b = fa4_op("smem_desc", [kb.gep(k_base, c * cfg.bn * SW + off, "i8")], ["i64"], swizzle=SW, lbo=16,
                       sbo=8 * SW)
            fa4_op("mma", [a.result, b.result, const(int(kk > 0), "i1"), s_tmem], [], m=MMA_M, n=cfg.bn,
                   k=MMA_K, a_source="smem", ab_dtype=cfg.dtype, acc_dtype="f32")

    def pv(self, i: int, v_stage: Value, accumulate: Value):
        """O_i (+)= P_i V: BN / 16 MMAs 128 x Dv x 16; A = P_i from TMEM (8 columns per 16 keys),
        B = V MN-major (head-dim chunks LBO = BN rows apart, 8-key groups SBO apart)."""
        kb, cfg, smem = self.kb, self.cfg, self.smem
        v_base = kb.gep(smem.v, v_stage * smem.v_tile, "i8")
        p_tmem, o_tmem = self._tmem(f"P{i}"), self._tmem(f"O{i}")
        for kk in range(cfg.bn // MMA_K):
            b = fa4_op("smem_desc", [kb.gep(v_base, kk * MMA_K * SW, "i8")], ["i64"], swizzle=SW,
                       lbo=cfg.bn * SW, sbo=8 * SW)
            acc = accumulate if kk == 0 else const(1, "i1")
            fa4_op("mma", [p_tmem + kk * (MMA_K // 2), b.result, acc, o_tmem], [], m=MMA_M,
                   n=cfg.padded_head_dim_v, k=MMA_K, a_source="tmem", b_major="mn", ab_dtype=cfg.dtype,
                   acc_dtype="f32")


def _mma_role(kb, cfg, geo, pipes, smem):
    mm = _Issuer(kb, cfg, smem)
    q_pipe, k_pipe, v_pipe = pipes["q"], pipes["k"], pipes["v"]
    sp, pp, op = [pipes["s0"], pipes["s1"]], [pipes["p0"], pipes["p1"]], [pipes["o0"], pipes["o1"]]

    def issue_s(i, st, k_stage):
        sp[i].producer_acquire(st)       # softmax i has read S_i(n-1)
        mm.s(i, k_stage)
        sp[i].mma_commit(st, side="full")

    def issue_pv(i, p_st, o_st, v_stage, accumulate):
        pp[i].consumer_wait(p_st)        # P_i is in TMEM
        op[i].producer_acquire(o_st)     # the correction rescaled O_i
        kb.fence("tcgen05_after")
        mm.pv(i, v_stage, accumulate)
        op[i].mma_commit(o_st, side="full")
        pp[i].mma_commit(p_st, side="empty")

    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        q0 = q_pipe.initial_state()
        q_pipe.consumer_wait(q0)
        # the 1-stage pipes s0, s1, p0, o0 move in lock step (state a), so do p1, o1 (state b, one
        # block behind), and K with the V stage waited on (kv); vr is the V stage released
        k0, v0, b = k_pipe.initial_state(), v_pipe.initial_state(), sp[0].initial_state()
        # block 0: S0, S1, then O0 = P0 V0 (O1 = P1 V0 is issued in the next step)
        k_pipe.consumer_wait(k0)
        kb.fence("tcgen05_after")
        issue_s(0, b, k0.stage)
        issue_s(1, b, k0.stage)
        k_pipe.mma_commit(k0, side="empty")
        v_pipe.consumer_wait(v0)
        issue_pv(0, b, b, v0.stage, const(0, "i1"))
        st = [k0.advance(), v0, b.advance(), b]
        loop = kb.for_(1, geo.n_blocks, 1, carry=[x for s in st for x in (s.stage, s.phase)])
        with loop as (n, c):
            kv, vr, a, b = [dsl.PipeState(c[2 * j], c[2 * j + 1], s.num_stages) for j, s in enumerate(st)]
            k_pipe.consumer_wait(kv)
            kb.fence("tcgen05_after")
            issue_s(0, a, kv.stage)                                     # S0 <- Q0 Kn
            issue_pv(1, b, b, vr.stage, n.gt(1))                        # O1 <- O1 + P1 V(n-1)
            v_pipe.mma_commit(vr, side="empty")
            issue_s(1, a, kv.stage)                                     # S1 <- Q1 Kn
            k_pipe.mma_commit(kv, side="empty")
            v_pipe.consumer_wait(kv)
            issue_pv(0, a, a, kv.stage, const(1, "i1"))                 # O0 <- O0 + P0 Vn
            nxt = [s.advance() for s in (kv, vr, a, b)]
            loop.yield_(*[x for s in nxt for x in (s.stage, s.phase)])
        r = loop.results
        vr, b = dsl.PipeState(r[2], r[3], v_pipe.num_stages), dsl.PipeState(r[6], r[7], 1)
        # the last O1 <- O1 + P1 V(N-1)
        issue_pv(1, b, b, vr.stage, geo.n_blocks.gt(1))
        v_pipe.mma_commit(vr, side="empty")
        q_pipe.mma_commit(q0, side="empty")


# ---- softmax ------------------------------------------------------------------------------------------
def _softmax_role(kb, cfg, geo, pipes, tmem, i, scale_log2):
    tm = cfg.tmem_plan()
    lanes = tmem + _lane_base(kb)
    s_addr, p_addr, c_addr = lanes + tm[f"S{i}"], lanes + tm[f"P{i}"], lanes + tm[f"C{i}"]
    s_pipe, p_pipe, c_pipe = pipes[f"s{i}"], pipes[f"p{i}"], pipes[f"c{i}"]
    row = geo.tile_row0(i) + kb.thread_idx(0) % MMA_M          # this thread's query row
    f32 = "f32"

    def block(n, st, m_old, l_old, first: bool, masked: bool):
        s_st, p_st, c_st = st
        # 1. the row's BN scores: S_i -> registers, then S_i is free for the MMA's bookkeeping
        s_pipe.consumer_wait(s_st)
        kb.fence("tcgen05_after")
        parts = [Value(fa4_op("tmem_load", [s_addr + c], [("i32", S_LOAD_COLS)], num=S_LOAD_COLS).result)
                 for c in range(0, cfg.bn, S_LOAD_COLS)]
        fa4_op("tmem_wait", kind="ld")
        kb.fence("tcgen05_before")
        s_pipe.consumer_release(s_st)
        s = [part.bitcast((f32, S_LOAD_COLS))[j] for part in parts for j in range(S_LOAD_COLS)]
        if masked:
            visible = visible_keys(n * cfg.bn, row, geo.seqlen_q, geo.seqlen_k, cfg.causal)
            for j in range(cfg.bn):
                s[j] = select(visible.le(j), const(NEG_INF, f32), s[j])
        # 2. max update; the O rescale factor goes to the correction warpgroup at once
        block_max = tree_reduce(s, dsl.fmax)
        m, alpha, neg_m = max_update(m_old, block_max, scale_log2, 0.0 if first else cfg.rescale_threshold)
        if not first:
            c_pipe.producer_acquire(c_st)
            fa4_op("tmem_store", [c_addr, alpha.bitcast("i32")])
            fa4_op("tmem_wait", kind="st")
            kb.fence("tcgen05_before")
            c_pipe.producer_commit(c_st)
        # 3. P = exp2(s * scale_log2 - m * scale_log2), row sum, P -> TMEM (over S_i's upper half)
        p = exp2_mixed([fma(x, scale_log2, neg_m) for x in s], cfg.exp2_poly_stride)
        total = tree_reduce(p, lambda a, b: a + b)
        l_new = total if first else fma(l_old, alpha, total)
        words = [vec(p[2 * w], p[2 * w + 1]).to((cfg.dtype, 2)).bitcast("i32") for w in range(cfg.bn // 2)]
        p_pipe.producer_acquire(p_st)
        fa4_op("tmem_store", [p_addr, vec(*words)])
        fa4_op("tmem_wait", kind="st")
        kb.fence("tcgen05_before")
        p_pipe.producer_commit(p_st)
        nxt = (s_st.advance(), p_st.advance(), c_st if first else c_st.advance())
        return nxt, m, l_new

    init = tuple(s_pipe.initial_state() for _ in range(3))
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    has_work = geo.n_blocks.gt(0)
    main = kb.if_(has_work, results=[f32, f32, "i32", "i32"])
    with main.then_():
        st, m, l_ = block(const(0), init, neg_inf, zero, first=True, masked=True)
        state = [x for s in st for x in (s.stage, s.phase)] + [m, l_]
        split = geo.n_unmasked(cfg, i)
        split = select(split.gt(1), split, const(1))
        for lo, hi, masked in ((const(1), split, False), (split, geo.n_blocks, True)):
            loop = kb.for_(lo, hi, 1, carry=state)
            with loop as (n, c):
                st = tuple(dsl.PipeState(c[2 * j], c[2 * j + 1], 1) for j in range(3))
                st, m, l_ = block(n, st, c[6], c[7], first=False, masked=masked)
                loop.yield_(*[x for s in st for x in (s.stage, s.phase)], m, l_)
            state = list(loop.results)
        main.yield_(state[6], state[7], state[4], state[5])
    with main.else_():
        main.yield_(neg_inf, zero, init[2].stage, init[2].phase)
    m, l_, c_stage, c_phase = main.results
    # 4. the row's final sum and scaled max (0 for a row without keys) for the epilogue
    c_st = dsl.PipeState(c_stage, c_phase, 1)
    m_scaled = select(m.eq(NEG_INF), zero, m * scale_log2)
    c_pipe.producer_acquire(c_st)
    fa4_op("tmem_store", [c_addr, vec(l_.bitcast("i32"), m_scaled.bitcast("i32"))])
    fa4_op("tmem_wait", kind="st")
    kb.fence("tcgen05_before")
    c_pipe.producer_commit(c_st)


# ---- correction and epilogue ----------------------------------------------------------------------------
def _correction_role(kb, cfg, geo, pipes, smem, tmem, o_desc, lse_ptr):
    tm = cfg.tmem_plan()
    lanes = tmem + _lane_base(kb)
    t = kb.thread_idx(0) % MMA_M                        # row of the tile (TMEM lane)
    c_addr = [lanes + tm["C0"], lanes + tm["C1"]]
    o_addr = [lanes + tm["O0"], lanes + tm["O1"]]
    cp, op = [pipes["c0"], pipes["c1"]], [pipes["o0"], pipes["o1"]]
    n_chunks = cfg.padded_head_dim_v // EPI_COLS
    init = [cp[0].initial_state() for _ in range(4)]      # c0 o0 c1 o1

    def read_c(i, st, num):
        cp[i].consumer_wait(st)
        kb.fence("tcgen05_after")
        v = Value(fa4_op("tmem_load", [c_addr[i]], [("i32", num)], num=num).result)
        fa4_op("tmem_wait", kind="ld")
        kb.fence("tcgen05_before")
        cp[i].consumer_release(st)
        return v.bitcast(("f32", num))

    # 1. blocks 1 .. N-1: O_i *= alpha between O_i += P_i V(n-1) and O_i += P_i V(n)
    loop = kb.for_(1, geo.n_blocks, 1, carry=[x for s in init for x in (s.stage, s.phase)])
    with loop as (n, c):
        st = [dsl.PipeState(c[2 * j], c[2 * j + 1], 1) for j in range(4)]
        for i in (0, 1):
            c_st, o_st = st[2 * i], st[2 * i + 1]
            alpha = read_c(i, c_st, 1)[0]
            op[i].consumer_wait(o_st)
            kb.fence("tcgen05_after")
            with kb.if_(kb.vote_any(alpha.ne(1.0))).then_():
                for ch in range(n_chunks):
                    addr = o_addr[i] + ch * EPI_COLS
                    o = Value(fa4_op("tmem_load", [addr], [("i32", EPI_COLS)], num=EPI_COLS).result)
                    fa4_op("tmem_wait", kind="ld")
                    o = o.bitcast(("f32", EPI_COLS))
                    scaled = vec(*[o[j] * alpha for j in range(EPI_COLS)])
                    fa4_op("tmem_store", [addr, scaled.bitcast(("i32", EPI_COLS))])
                fa4_op("tmem_wait", kind="st")
            kb.fence("tcgen05_before")
            op[i].consumer_release(o_st)
        nxt = [s.advance() for s in st]
        loop.yield_(*[x for s in nxt for x in (s.stage, s.phase)])
    r = loop.results
    st = [dsl.PipeState(r[2 * j], r[2 * j + 1], 1) for j in range(4)]
    # 2. per tile: O_i / l -> Q_i's SMEM tile -> TMA store; LSE
    for i in (0, 1):
        c_st, o_st = st[2 * i], st[2 * i + 1]
        stats = read_c(i, c_st, 2)
        l_, m_scaled = stats[0], stats[1]
        empty = l_.eq(0.0)
        inv = select(empty, const(0.0, "f32"), const(1.0, "f32") / l_)
        lse = select(empty, const(float("inf"), "f32"), (m_scaled + log2(l_)) * LN2)
        with kb.if_(geo.n_blocks.gt(0)).then_():
            op[i].consumer_wait(o_st)                    # the last O_i += P_i V completed
            kb.fence("tcgen05_after")
        _store_o_tile(kb, cfg, smem, i, t, o_addr[i], inv, empty)
        with kb.if_(geo.n_blocks.gt(0)).then_():
            kb.fence("tcgen05_before")
            op[i].consumer_release(o_st)
        fa4_op("fence", kind="async_smem")
        kb.named_barrier(BAR_EPILOGUE, 128)
        with kb.if_(t.eq(0)).then_():
            for c in range(cfg.padded_head_dim_v // CHUNK):
                src = kb.gep(smem.q, i * smem.q_tile + c * MMA_M * SW, "i8")
                fa4_op("tma_store", [o_desc, src, const(c * CHUNK), geo.head, geo.tile_row0(i), geo.batch],
                       box=[CHUNK, 1, MMA_M, 1])
        row = geo.tile_row0(i) + t
        with kb.if_(row.lt(geo.seqlen_q)).then_():
            base = (geo.batch * geo.heads + geo.head).to("i64") * geo.seqlen_q.to("i64")
            kb.store(lse, kb.gep(lse_ptr, base + row.to("i64"), "f32"), align=4)
    with kb.if_(t.eq(0)).then_():
        fa4_op("tma_store_wait", pending=0)


def _store_o_tile(kb, cfg, smem, i, t, o_addr, inv, empty):
    """Row t of O_i / l (0 for a row without keys; TMEM holds no O then) into Q_i's tile, 128B-swizzled:
    16-byte unit u of a 128-byte row r lands at unit u ^ (r % 8)."""
    row_base = kb.gep(smem.q, t * SW + i * smem.q_tile, "i8")
    zero = const(0.0, "f32")
    for ch in range(cfg.padded_head_dim_v // EPI_COLS):
        o = Value(fa4_op("tmem_load", [o_addr + ch * EPI_COLS], [("i32", EPI_COLS)], num=EPI_COLS).result)
        fa4_op("tmem_wait", kind="ld")
        o = o.bitcast(("f32", EPI_COLS))
        vals = [select(empty, zero, o[j] * inv) for j in range(EPI_COLS)]
        for u in range(EPI_COLS // 8):
            col = ch * EPI_COLS + 8 * u
            c, unit = divmod(col, CHUNK)
            unit //= 8
            words = [vec(vals[8 * u + 2 * w], vals[8 * u + 2 * w + 1]).to((cfg.dtype, 2)).bitcast("i32")
                     for w in range(4)]
            off = c * MMA_M * SW + ((t % 8) ^ unit) * 16
            kb.store(vec(*words), kb.gep(row_base, off, "i8"), align=16)
