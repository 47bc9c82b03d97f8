"""FlashAttention forward on sm_90a: TMA rings, a producer warp, two or three wgmma warpgroups.

One CTA computes O for `bm` query rows (64 per consumer warpgroup: 128 or 192) of one (batch,
head); the tensors keep the FlashAttention layout [batch, seqlen, heads, head_dim] and TMA boxes
are cut per (batch, head), so sequence tails are zero-filled on load and clipped on store by the
hardware.

Roles (1 + bm / 64 warpgroups: 384 threads at bm 128, 512 at bm 192):
    warpgroup 0  `load`     one elected thread: K_0, Q once (`q_pipe`), then K_{j+1} before V_j
                            (the order the consumers use them) into rings of `stages` (`k_pipe`,
                            `v_pipe`); setmaxnreg `producer_regs`.
    warpgroups 1.. `mma`    each owns 64 query rows. Per KV block j (software pipelined, FA3's
                            intra-warpgroup overlap): issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}
                            back to back, wait for S_j only, run the online softmax of S_j while
                            P_{j-1} V_{j-1} is still on the tensor cores, then wait, rescale O.
                            With `pingpong`, named barriers make the warpgroups take turns (a ring)
                            issuing GEMMs, so one's softmax overlaps the others' GEMMs.
Online softmax in base 2 with the scale folded in: p = exp2(s * scale_log2 - m * scale_log2).
FlashAttention-4's pieces (kernels/common/softmax.py) are config knobs: `exp2_poly_stride` (opt-in)
computes 1 in k of a row's p by a polynomial on the FMA pipes instead of the SFU's ex2;
`rescale_threshold` (lazy rescale; on where attention_sm90_config.KNOBS says) moves m only when the
row max grows by more than the threshold (log2 units), so P may exceed 1 (up to 2^threshold) and
O's rescale is skipped, behind a warp vote and a non-divergent branch (fa4.scale_if_uniform), when
no row of the warp moved. m stays the max that P and l are relative to, so the epilogue's
LSE = (m * scale_log2 + log2 l) * ln 2 is exact either way. `rescale_before_pv`
(FA4 CuTe's order at head dim 256) scales O by the previous block's alpha after S_j is issued and
before O += P V is, so the multiplies run under S_j instead of after P V's wait.
P stays in registers and feeds wgmma's A operand; V is read MN-major (imm-trans-b).
Epilogue: O / l into the (now idle) Q tile in SMEM with the 128B swizzle, then TMA stores; the LSE
(natural log, float32 [batch, heads, seqlen_q]) is written from registers.
With `persistent`, a 1-D grid of at most one CTA per SM (attention_sm90_config.grid) strides over
all query tiles (order: _Tiles); Q is a ring of two SMEM tiles (`q_pipe`, two stages) and O has
its own tile, so the producer loads the next tile's Q (and its first K) while this tile still runs
and the consumers find them there when they start it; the O tile's TMA store is waited on only
before the next tile's epilogue writes it. The default for short and middling key sequences
(attention_sm90_config.SHORT_TILES; always for D128 causal), where that overlap pays.
Empty warpgroups (bm 192, AttnConfig.skips_empty_warpgroups): a consumer warpgroup whose 64 rows
all lie past seqlen_q (the last query tile of a head) issues no GEMM and has no epilogue; it only
waits on and releases each stage and passes each GEMM turn on, as the working ones do.
Masks: KV blocks that are fully visible run an unmasked loop; the first block and the blocks on
the causal diagonal or the seqlen_k tail run the masked variant (a persistent kernel's first
block runs unmasked when every row sees all of it). Causal is aligned bottom-right
(query i sees key j iff j <= i + seqlen_k - seqlen_q); a row that sees no key gets O = 0 and
LSE = +inf, as FlashAttention returns.
"""
from __future__ import annotations

from .. import dsl
from ..dsl import KernelBuilder, Value, const, fa4_op, fast_div, fma, fmax, log2, select, tree_reduce, undef, vec
from .attention_sm90_config import AttnConfig, causal_pair_slot, dealt_tile, section_tile
from .common.masks import block_range, visible_keys
from .common.softmax import exp2_mixed, max_update

SWIZZLE = 128          # bytes per swizzled row: 64 bf16/f16 columns
CHUNK = 64             # head-dim columns per swizzle chunk
WGMMA_K = 16
LN2 = 0.6931471805599453
NEG_INF = float("-inf")
BAR_SCHED = 1          # named barriers 1, 2(, 3): GEMM-issue turn of consumer warpgroup 0, 1(, 2)
BAR_EPILOGUE = 4       # named barriers 4, 5(, 6): epilogue of consumer warpgroup 0, 1(, 2)


def build(cfg: AttnConfig = AttnConfig()) -> dsl.KernelIR:
    cfg.validate()
    nch = cfg.d_chunks
    q_bytes = cfg.bm * nch * SWIZZLE
    kv_bytes = cfg.bn * nch * SWIZZLE
    name = (f"attention_fwd_sm90_{cfg.dtype}_d{cfg.head_dim}{'_causal' if cfg.causal else ''}"
            f"_{cfg.bm}x{cfg.bn}_s{cfg.stages}{'' if cfg.pingpong else '_nopp'}{'_pers' if cfg.persistent else ''}"
            f"{cfg.name_suffix()}")
    kb = KernelBuilder(name, arch="sm_90a", block=(cfg.threads, 1, 1), config=cfg.key())
    # TMA boxes, innermost first over [batch, seqlen, heads, head_dim]: (columns, 1 head, rows, 1 batch)
    q_desc = kb.param_tma("q", dtype=cfg.dtype, box=(CHUNK, 1, cfg.bm, 1), swizzle="128B")
    k_desc = kb.param_tma("k", dtype=cfg.dtype, box=(CHUNK, 1, cfg.bn, 1), swizzle="128B")
    v_desc = kb.param_tma("v", dtype=cfg.dtype, box=(CHUNK, 1, cfg.bn, 1), swizzle="128B")
    o_desc = kb.param_tma("o", dtype=cfg.dtype, box=(CHUNK, 1, 64, 1), swizzle="128B")
    lse_ptr = kb.param_ptr("lse")
    batch, heads = kb.param_i32("batch"), kb.param_i32("heads")
    seqlen_q, seqlen_k = kb.param_i32("seqlen_q"), kb.param_i32("seqlen_k")
    scale_log2 = kb.param_f32("scale_log2")
    # divisors as (multiplier, shift) (common.fastdiv): quotients of uniform values stay uniform
    div_group, div_tiles, div_heads = ((kb.param_i32(f"{n}_mul"), kb.param_i32(f"{n}_shr"))
                                       for n in ("group", "tiles", "heads"))
    sections = (kb.param_i32("section_shift"), (kb.param_i32("rest_mul"), kb.param_i32("rest_shr")))

    with kb.body():
        q_smem = kb.smem("q_smem", cfg.q_stages * q_bytes)
        k_smem = kb.smem("k_smem", cfg.stages * kv_bytes)
        v_smem = kb.smem("v_smem", cfg.stages * kv_bytes)
        q_pipe = kb.pipeline("q_pipe", num_stages=cfg.q_stages, producer="load", consumers=["mma"],
                             consumer_arrivals=cfg.consumers)
        k_pipe = kb.pipeline("k_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"],
                             consumer_arrivals=cfg.consumers)
        v_pipe = kb.pipeline("v_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"],
                             consumer_arrivals=cfg.consumers)
        # persistent: O is staged in its own tile, so the next tile's Q can load during this epilogue
        o_smem = kb.smem("o_smem", q_bytes) if cfg.persistent else q_smem
        kb.pipeline_init()
        tiles = _Tiles(kb, cfg, batch, heads, seqlen_q, seqlen_k, div_group, div_tiles, div_heads, sections)

        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1, regs=cfg.producer_regs):
                _load_role(kb, cfg, tiles, q_pipe, k_pipe, v_pipe, q_desc, k_desc, v_desc, q_smem, k_smem,
                           v_smem, q_bytes, kv_bytes)
            with kb.role("mma", first_warp=4, num_warps=4 * cfg.consumers, regs=cfg.consumer_regs):
                _mma_role(kb, cfg, tiles, q_pipe, k_pipe, v_pipe, q_smem, k_smem, v_smem, o_smem, kv_bytes,
                          o_desc, lse_ptr, scale_log2)
    return kb.finish()


class _Geometry:
    """One query tile and the KV blocks it visits (computed by every thread)."""

    def __init__(self, kb, cfg, m_block, head, batch, heads, seqlen_q, seqlen_k, div_group):
        self.seqlen_q, self.seqlen_k = seqlen_q, seqlen_k
        self.m0 = m_block * cfg.bm
        self.head, self.batch, self.heads = head, batch, heads
        self.kv_head = fast_div(self.head, *div_group)
        self.n_blocks, self.n_unmasked = block_range(self.m0, cfg.bm, seqlen_q, seqlen_k, cfg.bn, cfg.causal)


class _Tiles:
    """The query tiles of this CTA. Without `persistent`, the one of its block index (non-causal x:
    query tile, y: head, z: batch; causal: a 1-D grid in section_tile's order, longest rows first
    across the heads of an L2-sized section, since the hardware hands blocks out in order as SMs
    free up and the grid should end on short tiles). With it, a 1-D grid strides over
    all tiles. Non-causal in the order query tile (fastest), head, batch: CTAs running at the same
    time work on neighbouring tiles of one head, so that head's K and V stay in L2; with empty
    warpgroups (bm 192) a head's last tile is cheaper, and the rounds are dealt rotated
    (dealt_tile) so every CTA gets its share of those. Causal tiles
    differ in work (a tile's KV blocks grow with its row), so a static stride over them in that
    order is unbalanced (132 CTAs over 128 tiles per head give some CTAs about 3x the work of
    others), and a stride over the longest rows of every head first is balanced but spreads each
    stride over all heads, whose K and V then outgrow L2 (measured slower, [D-causal-pairs]).
    Causal therefore strides over pairs of tiles of one (head, batch): tile T-1-k (the k-th
    longest) then tile k (the k-th shortest) of the T query tiles, whose KV blocks add up to the
    same count for every k, in the order pair (fastest), head, batch. Every CTA gets nearly the
    same work and the CTAs of one stride share about 2 x grid / T heads. (With T odd, the middle
    tile is a pair of its own.) The pipelines' stage and phase carry over from tile to tile as
    counts of the Q tiles and KV blocks used so far, which the producer and the consumers
    compute alike."""

    def __init__(self, kb, cfg, batch, heads, seqlen_q, seqlen_k, div_group, div_tiles, div_heads, sections):
        self.kb, self.cfg = kb, cfg
        self.batch, self.heads, self.seqs = batch, heads, (seqlen_q, seqlen_k, div_group)
        self.div_tiles, self.div_heads = div_tiles, div_heads
        self.fixed = None
        if cfg.persistent:
            return
        if not cfg.causal:
            self.fixed = _Geometry(kb, cfg, kb.block_idx(0), kb.block_idx(1), kb.block_idx(2), heads, *self.seqs)
            return
        shift, div_rest = sections
        m_block, hb = section_tile(kb.block_idx(0), self._m_tiles(), heads * batch, shift,
                                   lambda u: fast_div(u, *div_tiles), lambda u: fast_div(u, *div_rest), _ValueOps)
        self.fixed = self._geometry(m_block, hb)

    def _m_tiles(self) -> Value:
        """Query tiles per (head, batch)."""
        return (self.seqs[0] + (self.cfg.bm - 1)) // self.cfg.bm

    def _geometry(self, m_block, hb) -> _Geometry:
        """Query tile m_block of (head, batch) index hb = head + heads * batch."""
        b = fast_div(hb, *self.div_heads)
        return _Geometry(self.kb, self.cfg, m_block, hb - b * self.heads, b, self.heads, *self.seqs)

    def _run(self, body, m_block, hb, counts):
        geo = self._geometry(m_block, hb)
        body(geo, counts)
        q_count, kv_count = counts
        return q_count + select(geo.n_blocks.gt(0), const(1), const(0)), kv_count + geo.n_blocks

    def each(self, body):
        """body(geo, counts) once per tile; counts = (Q tiles, KV blocks) used before this tile, or
        None without `persistent` (each pipeline then starts at its initial state)."""
        kb, cfg = self.kb, self.cfg
        if self.fixed is not None:
            body(self.fixed, None)
            return
        m_tiles = self._m_tiles()
        start = (const(0), const(0))
        if not cfg.causal and not cfg.skips_empty_warpgroups:
            loop = kb.for_(kb.block_idx(0), m_tiles * self.heads * self.batch, kb.grid_dim(0), carry=start)
            with loop as (t, counts):
                hb = fast_div(t, *self.div_tiles)         # divisor: m_tiles
                loop.yield_(*self._run(body, t - hb * m_tiles, hb, counts))
            return
        if not cfg.causal:
            # empty warpgroups make a head's last query tile cheaper: rounds of grid_dim tiles, dealt
            # rotated (dealt_tile), so that every CTA gets its share of them
            total, grid_n = m_tiles * self.heads * self.batch, kb.grid_dim(0)
            loop = kb.for_(const(0), total, grid_n, carry=(kb.block_idx(0), *start))
            with loop as (base, (slot, *counts)):
                t, nxt = dealt_tile(base, slot, grid_n, _ValueOps)
                tile = kb.if_(t.lt(total), results=["i32", "i32"])
                with tile.then_():
                    hb = fast_div(t, *self.div_tiles)     # divisor: m_tiles
                    tile.yield_(*self._run(body, t - hb * m_tiles, hb, counts))
                with tile.else_():
                    tile.yield_(*counts)
                loop.yield_(nxt, *tile.results)
            return
        # pairs of tiles of one (head, batch) whose work adds up alike (causal_pair_slot)
        slots = (m_tiles + 1) // 2 * self.heads * self.batch * 2
        loop = kb.while_((kb.block_idx(0) * 2, *start))
        with loop.before() as (s, q_count, kv_count):
            loop.condition(s.lt(slots), s, q_count, kv_count)
        with loop.body() as (s, *counts):
            m_block, hb, nxt = causal_pair_slot(s, m_tiles, kb.grid_dim(0), lambda u: fast_div(u, *self.div_tiles),
                                                _ValueOps)
            loop.yield_(nxt, *self._run(body, m_block, hb, counts))


class _ValueOps:
    """causal_pair_slot's comparisons and select on kernel Values."""
    eq = staticmethod(lambda a, b: a.eq(b))
    lt = staticmethod(lambda a, b: a.lt(b))
    select = staticmethod(select)


def _state(pipe, count):
    """`pipe`'s state after `count` stages were used (None: the initial state)."""
    if count is None:
        return pipe.initial_state()
    n = pipe.num_stages
    if n == 1:
        return dsl.PipeState(const(0), count & 1, 1)
    return dsl.PipeState(count % n, (count // n) & 1, n)


def _load_role(kb, cfg, tiles, q_pipe, k_pipe, v_pipe, q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
               q_bytes, kv_bytes):
    if cfg.persistent:
        with kb.if_(kb.elect_one()).then_():
            for d in (q_desc, k_desc, v_desc):
                fa4_op("tma_prefetch", [d])
    tiles.each(lambda geo, counts: _load_tile(kb, cfg, geo, counts, q_pipe, k_pipe, v_pipe, q_desc, k_desc,
                                              v_desc, q_smem, k_smem, v_smem, q_bytes, kv_bytes))


def _load_tile(kb, cfg, geo, counts, q_pipe, k_pipe, v_pipe, q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
               q_bytes, kv_bytes):
    nch = cfg.d_chunks
    # a tile with no visible KV block (causal, seqlen_q > seqlen_k) loads nothing: its consumers skip
    # q_pipe and write O = 0 into the Q tile, which an unwaited Q load could land on afterwards
    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        if counts is None:
            for d in (q_desc, k_desc, v_desc):
                fa4_op("tma_prefetch", [d])

        def load(pipe, desc, smem, s, rows, head, row, tx_bytes, stage_bytes=0):
            """One ring stage (at s.stage * stage_bytes of `smem`): `rows` rows from `row` of `head`,
            one swizzled box per 64-column chunk."""
            pipe.producer_acquire(s)
            pipe.producer_commit(s, tx_bytes=tx_bytes)
            base = s.stage * stage_bytes if stage_bytes else 0
            for c in range(nch):
                fa4_op("tma_load", [desc, kb.gep(smem, base + c * rows * SWIZZLE, "i8"), s.stage,
                                    const(c * CHUNK), head, row, geo.batch],
                       pipe=pipe.name, box=[CHUNK, 1, rows, 1], elem_bytes=2)

        def load_kv(pipe, desc, smem, s, row):
            load(pipe, desc, smem, s, cfg.bn, geo.kv_head, row, kv_bytes, stage_bytes=kv_bytes)

        # K runs one block ahead of V, in the order the consumers use them: S_j = Q K_j^T is issued
        # before O += P_{j-1} V_{j-1}, so K_j is never queued behind a V whose slot frees later
        # 1. K_0, then Q (bm rows)
        s0 = _state(k_pipe, None if counts is None else counts[1])
        load_kv(k_pipe, k_desc, k_smem, s0, const(0))
        q0 = _state(q_pipe, None if counts is None else counts[0])
        load(q_pipe, q_desc, q_smem, q0, cfg.bm, geo.head, geo.m0, q_bytes,
             stage_bytes=q_bytes if cfg.q_stages > 1 else 0)
        # 2. K_{j+1} and V_j for j < n_blocks - 1, then the last V
        loop = kb.for_(0, geo.n_blocks - 1, 1, carry=(s0.stage, s0.phase))
        with loop as (j, (stage, phase)):
            s = dsl.PipeState(stage, phase, cfg.stages)
            nxt = s.advance()
            load_kv(k_pipe, k_desc, k_smem, nxt, (j + 1) * cfg.bn)
            load_kv(v_pipe, v_desc, v_smem, s, j * cfg.bn)
            loop.yield_(nxt.stage, nxt.phase)
        last = dsl.PipeState(*loop.results, cfg.stages)
        load_kv(v_pipe, v_desc, v_smem, last, (geo.n_blocks - 1) * cfg.bn)


class _Consumer:
    """One consumer warpgroup's view: its rows, fragment coordinates and GEMM issue helpers."""

    def __init__(self, kb, cfg, geo, q_smem, k_smem, v_smem, kv_bytes, scale_log2):
        self.kb, self.cfg, self.geo = kb, cfg, geo
        self.q_smem, self.k_smem, self.v_smem, self.kv_bytes = q_smem, k_smem, v_smem, kv_bytes
        self.scale_log2 = scale_log2
        tid = kb.thread_idx(0)
        # 0 .. cfg.consumers - 1, broadcast so ptxas keeps this warpgroup's Q/O addresses and wgmma
        # descriptors in uniform registers (else an R2UR pair before every wgmma)
        self.wg = kb.warp_uniform(tid // 128) - 1
        self.t = tid % 128
        self.is_leader = self.t.eq(0)
        lane = self.t % 32
        self.g = lane // 4                            # row within an 8-row group
        self.t4 = lane % 4                            # column pair within an 8-column group
        self.row0 = (self.t // 32) * 16 + self.g      # rows row0 and row0 + 8 of the warpgroup's 64
        self.n_s = cfg.bn // 2                        # S accumulator registers per thread
        self.n_o = cfg.head_dim // 2                  # O accumulator registers per thread
        if geo is not None:
            self.at(geo)

    def release(self, *uses) -> None:
        """Release the (pipeline, stage state) pairs: one arrival per warpgroup, from its thread 0."""
        with self.kb.if_(self.is_leader).then_():
            for pipe, s in uses:
                pipe.consumer_release(s)

    def has_rows(self) -> Value:
        """Whether this warpgroup's 64 rows of the tile start before seqlen_q (warp-uniform)."""
        return (self.geo.m0 + self.wg * 64).lt(self.geo.seqlen_q)

    def at(self, geo: "_Geometry") -> "_Consumer":
        """Point at a query tile: its geometry and this thread's two global rows."""
        self.geo = geo
        self.grow = [geo.m0 + self.wg * 64 + self.row0 + 8 * h for h in (0, 1)]
        return self

    # ---- GEMMs ----------------------------------------------------------------------------------
    def issue_s(self, k_stage: Value, q_stage: Value) -> Value:
        """S = Q K^T for this warpgroup's 64 rows: head_dim / 16 wgmma m64n{bn}k16 from SMEM (Q from
        stage `q_stage` of the Q ring)."""
        kb, cfg = self.kb, self.cfg
        acc = undef(("f32", self.n_s))      # the first k-step overwrites it (scale-d = 0)
        q_rows = self.wg * (64 * SWIZZLE)
        if cfg.q_stages > 1:
            q_rows = q_rows + q_stage * (cfg.bm * cfg.d_chunks * SWIZZLE)
        q_base = kb.gep(self.q_smem, q_rows, "i8")
        k_base = kb.gep(self.k_smem, k_stage * self.kv_bytes, "i8")
        fa4_op("mma_fence")
        for kk in range(cfg.head_dim // WGMMA_K):
            c, within = divmod(kk, CHUNK // WGMMA_K)
            off = within * WGMMA_K * 2
            a_d = fa4_op("smem_desc", [kb.gep(q_base, c * cfg.bm * SWIZZLE + off, "i8")], ["i64"],
                         swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
            b_d = fa4_op("smem_desc", [kb.gep(k_base, c * cfg.bn * SWIZZLE + off, "i8")], ["i64"],
                         swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
            acc = Value(fa4_op("mma", [a_d.result, b_d.result, const(int(kk > 0), "i1"), acc],
                               [acc.type], m=64, n=cfg.bn, k=WGMMA_K, a_source="smem", ab_dtype=cfg.dtype,
                               acc_dtype="f32").result)
        fa4_op("mma_commit_group")
        return acc

    def issue_pv(self, p_frags: list, v_stage: Value, o: Value) -> Value:
        """O += P V: bn / 16 wgmma m64n{head_dim}k16, A = P from registers, B = V MN-major."""
        kb, cfg = self.kb, self.cfg
        true = const(1, "i1")
        v_base = kb.gep(self.v_smem, v_stage * self.kv_bytes, "i8")
        fa4_op("mma_fence")
        for kk in range(cfg.bn // WGMMA_K):
            # keys 16kk..16kk+15: two 8-row groups (SBO apart); head-dim chunks LBO = bn rows apart
            b_d = fa4_op("smem_desc", [kb.gep(v_base, kk * WGMMA_K * SWIZZLE, "i8")], ["i64"],
                         swizzle=SWIZZLE, lbo=cfg.bn * SWIZZLE, sbo=8 * SWIZZLE)
            o = Value(fa4_op("mma", [p_frags[kk], b_d.result, true, o], [o.type], m=64, n=cfg.head_dim,
                             k=WGMMA_K, a_source="regs", b_major="mn", ab_dtype=cfg.dtype,
                             acc_dtype="f32").result)
        fa4_op("mma_commit_group")
        return o

    # ---- softmax --------------------------------------------------------------------------------
    def softmax(self, s_acc: Value, j: Value, m_prev: list, l_prev: list, masked: bool):
        """Online softmax of one S block. Returns (P, m, l, alpha): P in float32 (`pack` makes the
        wgmma fragments), m the running max of raw scores per row that P and l are relative to
        (common.softmax.max_update: it lags the true max by < rescale_threshold under lazy
        rescale), l the thread's partial row sums (reduced across the 4 lanes of a row only in the
        epilogue), alpha = exp2((m_prev - m) * scale_log2) rescales O (1 when m did not move).
        p = exp2 on the SFU, 1 in exp2_poly_stride of a row's elements by the FMA polynomial
        (common.softmax.exp2_mixed)."""
        kb, cfg, geo = self.kb, self.cfg, self.geo
        s = [s_acc[i] for i in range(self.n_s)]
        if masked:  # register i holds key col0 + 8 (i // 4) + i % 2 of row h = (i // 2) % 2
            col0 = j * cfg.bn + self.t4 * 2
            visible = [visible_keys(col0, self.grow[h], geo.seqlen_q, geo.seqlen_k, cfg.causal) for h in (0, 1)]
            for i in range(self.n_s):
                jj, h, e = i // 4, (i // 2) % 2, i % 2
                s[i] = select(visible[h].le(8 * jj + e), const(NEG_INF, "f32"), s[i])
        m_new, alpha, l_new = [], [], []
        p = [None] * self.n_s
        for h in (0, 1):
            idx = [i for i in range(self.n_s) if (i // 2) % 2 == h]
            mx = tree_reduce([s[i] for i in idx], fmax)
            mx = fmax(mx, kb.shuffle_xor(mx, 1))
            mx = fmax(mx, kb.shuffle_xor(mx, 2))
            # m: the max this row's P, l and O are relative to (lags the true max under lazy rescale)
            m, alpha_h, neg = max_update(m_prev[h], mx, self.scale_log2, cfg.rescale_threshold)
            alpha.append(alpha_h)
            # a generator: each fma is emitted right before its exp2 (the op order of the measured kernel)
            row_p = exp2_mixed((fma(s[i], self.scale_log2, neg) for i in idx), cfg.exp2_poly_stride)
            for i, p_i in zip(idx, row_p):
                p[i] = p_i
            total = tree_reduce(row_p, lambda a, b: a + b)
            m_new.append(m)
            l_new.append(fma(l_prev[h], alpha[h], total))
        return p, m_new, l_new, alpha

    def pack(self, p: list) -> list:
        """P (float32, S's register order) as wgmma A fragments: per k16 step four 16-bit pairs."""
        frags = []
        for kk in range(self.cfg.bn // WGMMA_K):
            words = [vec(p[8 * kk + 2 * r], p[8 * kk + 2 * r + 1]).to((self.cfg.dtype, 2)).bitcast("i32")
                     for r in range(4)]
            frags.append(vec(*words))
        return frags

    def row_scales(self, alpha: list) -> list:
        """alpha of each O register's row (register i holds row (i // 2) % 2 of the thread)."""
        return [alpha[(i // 2) % 2] for i in range(self.n_o)]

    def rescale(self, o: Value, alpha: list) -> Value:
        scale = self.row_scales(alpha)
        return dsl.vec(*[o[i] * scale[i] for i in range(self.n_o)])

    def rescale_if_moved(self, o: Value, alpha: list) -> Value:
        """O * alpha; under lazy rescale only when a row of the warp moved its max (alpha != 1
        exactly when it did), behind a branch made warp-uniform by a vote (fa4.scale_if_uniform:
        a `bra.uni`, so the wgmma descriptors of the loop stay in uniform registers; an scf.if here
        cost 32 R2UR and 40 IMAD per D128 KV loop)."""
        if not self.cfg.rescale_threshold:
            return self.rescale(o, alpha)
        moved = self.kb.vote_any(alpha[0].ne(1.0) | alpha[1].ne(1.0))
        return self.kb.scale_if_uniform(moved, o, dsl.vec(*self.row_scales(alpha)))


def _mma_role(kb, cfg, tiles, q_pipe, k_pipe, v_pipe, q_smem, k_smem, v_smem, o_smem, kv_bytes, o_desc,
              lse_ptr, scale_log2):
    cs = _Consumer(kb, cfg, tiles.fixed, q_smem, k_smem, v_smem, kv_bytes, scale_log2)
    wg = cs.wg
    pp = cfg.pingpong

    n = cfg.consumers

    # The turn barriers are selected by the warp-uniform warpgroup index, not branched on: a branch
    # per warpgroup in the KV loop makes ptxas keep the wgmma descriptors out of uniform registers
    # (an R2UR before every wgmma).
    nxt = select((wg + 1).eq(n), const(0), wg + 1)

    def turn_begin():
        if pp:
            kb.named_barrier(BAR_SCHED, 256, select=wg, span=n)

    def turn_end():
        if pp:  # hand the turn to the next warpgroup of the ring
            kb.named_barrier_arrive(BAR_SCHED, 256, select=nxt, span=n)

    if pp:  # warpgroup 0 issues first: the last one of the ring hands it the first turn
        with kb.if_(wg.eq(n - 1)).then_():
            kb.named_barrier_arrive(BAR_SCHED, 256)

    def final_handoff():
        if pp:  # consume the last warpgroup's final hand-off so every barrier ends balanced
            with kb.if_(wg.eq(0)).then_():
                kb.named_barrier(BAR_SCHED, 256)

    tiles.each(lambda geo, counts: _consume_tile(
        kb, cfg, cs.at(geo), counts, q_pipe, k_pipe, v_pipe, o_smem, o_desc, lse_ptr, turn_begin, turn_end,
        final_handoff if counts is None else None))
    if cfg.persistent:
        final_handoff()
        with kb.if_(cs.is_leader).then_():  # the last tile's O store reads SMEM: wait before the CTA exits
            fa4_op("tma_store_wait", pending=0)


def _consume_tile(kb, cfg, cs, counts, q_pipe, k_pipe, v_pipe, o_smem, o_desc, lse_ptr, turn_begin, turn_end,
                  before_epilogue):
    """One query tile of one consumer warpgroup: the KV loop, then the epilogue. counts: the
    pipelines' use so far (None: one tile per CTA, pipelines at their initial state)."""
    geo = cs.geo
    f32 = "f32"
    o_t = ("f32", cs.n_o)
    has_work = geo.n_blocks.gt(0)
    has_rows = cs.has_rows() if cfg.skips_empty_warpgroups else None
    main = kb.if_(has_work if has_rows is None else has_work & has_rows, results=[o_t, f32, f32, f32, f32])
    with main.then_():
        q0 = _state(q_pipe, None if counts is None else counts[0])
        q_pipe.consumer_wait(q0)
        # block 0 (peeled, masked): S_0, softmax; P_0 stays for the first P.V
        k0 = _state(k_pipe, None if counts is None else counts[1])
        k_pipe.consumer_wait(k0)
        turn_begin()
        s_acc = cs.issue_s(k0.stage, q0.stage)
        turn_end()
        s_acc = Value(fa4_op("mma_wait_group", [s_acc], [s_acc.type], pending=0).result)
        cs.release((k_pipe, k0))
        neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
        if cfg.persistent:
            # block 0 needs the mask only when some row does not see all of it (the causal diagonal,
            # seqlen_k < bn), and short tiles pay it per tile: the unmasked softmax gets its own copy
            # (only here: one-tile-per-CTA kernels were slower with it) [D-block0]
            first = kb.if_(geo.n_unmasked.gt(0), results=[f32] * 4 + [("i32", 4)] * (cfg.bn // WGMMA_K))
            for branch, masked in ((first.then_, False), (first.else_, True)):
                with branch():
                    p, m, l, _ = cs.softmax(s_acc, const(0), [neg_inf, neg_inf], [zero, zero], masked=masked)
                    first.yield_(*m, *l, *cs.pack(p))
            m, l, frags = first.results[0:2], first.results[2:4], first.results[4:]
        else:
            p, m, l, _ = cs.softmax(s_acc, const(0), [neg_inf, neg_inf], [zero, zero], masked=True)
            frags = cs.pack(p)
        o = const(0.0, o_t)
        k1, v0 = k0.advance(), _state(v_pipe, None if counts is None else counts[1])
        # with rescale_before_pv the carry ends with the alpha O still owes (1: block 0 left O = 0)
        late = [const(1.0, f32)] * 2 if cfg.rescale_before_pv else []
        state = (k1.stage, k1.phase, v0.stage, v0.phase, o, *m, *l, *late, *frags)
        n_late = len(late)

        def body(j, carried, masked):
            ks, kph, vs, vph, o_in, m0_, m1_, l0_, l1_, *rest = carried
            alpha_in, p_in = rest[:n_late], rest[n_late:]
            k_s, v_s = dsl.PipeState(ks, kph, cfg.stages), dsl.PipeState(vs, vph, cfg.stages)
            k_pipe.consumer_wait(k_s)
            v_pipe.consumer_wait(v_s)
            turn_begin()   # data first, then the turn: a warpgroup never holds the turn while waiting on TMA
            s_j = cs.issue_s(ks, q0.stage)
            if alpha_in:   # O's registers are free (the last P V was waited on): scale them under S_j
                o_in = cs.rescale_if_moved(o_in, alpha_in)
            o_j = cs.issue_pv(p_in, vs, o_in)
            turn_end()
            s_j = Value(fa4_op("mma_wait_group", [s_j], [s_j.type], pending=1).result)
            cs.release((k_pipe, k_s))
            p_j, m_j, l_j, alpha = cs.softmax(s_j, j, [m0_, m1_], [l0_, l1_], masked)
            frags_j = cs.pack(p_j)
            o_j = Value(fa4_op("mma_wait_group", [o_j], [o_j.type], pending=0).result)
            cs.release((v_pipe, v_s))
            if not n_late:
                o_j = cs.rescale_if_moved(o_j, alpha)
            kn, vn = k_s.advance(), v_s.advance()
            return (kn.stage, kn.phase, vn.stage, vn.phase, o_j, *m_j, *l_j, *(alpha if n_late else ()), *frags_j)

        # blocks 1 .. n_unmasked-1 need no mask; the rest (diagonal, seqlen_k tail) do
        split = select(geo.n_unmasked.gt(1), geo.n_unmasked, const(1))
        for lo, hi, masked in ((const(1), split, False), (split, geo.n_blocks, True)):
            loop = kb.for_(lo, hi, 1, carry=state)
            with loop as (j, carried):
                loop.yield_(*body(j, carried, masked))
            state = tuple(loop.results)
        _, _, vs, vph, o, m0_, m1_, l0_, l1_, *rest = state
        p_last = rest[n_late:]
        if n_late:
            o = cs.rescale_if_moved(o, rest[:n_late])
        if cfg.persistent:  # every S GEMM has completed: the next tile's Q may load now
            cs.release((q_pipe, q0))
        v_s = dsl.PipeState(vs, vph, cfg.stages)
        v_pipe.consumer_wait(v_s)
        o = cs.issue_pv(p_last, vs, o)
        o = Value(fa4_op("mma_wait_group", [o], [o.type], pending=0).result)
        cs.release((v_pipe, v_s), *(() if cfg.persistent else ((q_pipe, q0),)))
        main.yield_(o, m0_, m1_, l0_, l1_)
    with main.else_():
        if has_rows is not None:
            with kb.if_(has_work).then_():
                _pass_tile(kb, cfg, cs, counts, q_pipe, k_pipe, v_pipe, turn_begin, turn_end)
        z = const(0.0, f32)
        main.yield_(const(0.0, o_t), const(NEG_INF, f32), const(NEG_INF, f32), z, z)
    o, m0_, m1_, l0_, l1_ = main.results
    if before_epilogue is not None:
        before_epilogue()
    if has_rows is not None:
        with kb.if_(has_rows).then_():
            _epilogue(kb, cfg, cs, o, [m0_, m1_], [l0_, l1_], o_smem, o_desc, lse_ptr)
    else:
        _epilogue(kb, cfg, cs, o, [m0_, m1_], [l0_, l1_], o_smem, o_desc, lse_ptr)


def _pass_tile(kb, cfg, cs, counts, q_pipe, k_pipe, v_pipe, turn_begin, turn_end):
    """A consumer warpgroup whose 64 rows all lie past seqlen_q (the last query tile of a head:
    at seqlen 1024 a 192-row tile holds 64 rows, so two of its three warpgroups have none) issues
    no GEMM and computes nothing, but takes its part in every handshake of the tile in the order
    a working warpgroup does (_consume_tile): each Q and K/V stage waited on, then released (the
    producer refills a stage once every consumer warpgroup released it), and each GEMM turn passed
    on, so the working warpgroups run at their own pace with the tensor cores to themselves."""
    geo = cs.geo
    q0 = _state(q_pipe, None if counts is None else counts[0])
    q_pipe.consumer_wait(q0)
    k0 = _state(k_pipe, None if counts is None else counts[1])
    k_pipe.consumer_wait(k0)
    turn_begin()
    turn_end()
    cs.release((k_pipe, k0))
    k1, v0 = k0.advance(), _state(v_pipe, None if counts is None else counts[1])
    loop = kb.for_(const(1), geo.n_blocks, 1, carry=(k1.stage, k1.phase, v0.stage, v0.phase))
    with loop as (j, (ks, kph, vs, vph)):
        k_s, v_s = dsl.PipeState(ks, kph, cfg.stages), dsl.PipeState(vs, vph, cfg.stages)
        k_pipe.consumer_wait(k_s)
        v_pipe.consumer_wait(v_s)
        turn_begin()
        turn_end()
        cs.release((k_pipe, k_s), (v_pipe, v_s))
        kn, vn = k_s.advance(), v_s.advance()
        loop.yield_(kn.stage, kn.phase, vn.stage, vn.phase)
    v_s = dsl.PipeState(*loop.results[2:], cfg.stages)
    v_pipe.consumer_wait(v_s)
    cs.release((v_pipe, v_s), (q_pipe, q0))


def _epilogue(kb, cfg, cs, o, m, l, o_smem, o_desc, lse_ptr):
    geo = cs.geo
    inv, lse = [], []
    for h in (0, 1):
        total = l[h] + kb.shuffle_xor(l[h], 1)
        total = total + kb.shuffle_xor(total, 2)
        empty = total.eq(0.0)
        inv.append(select(empty, const(0.0, "f32"), const(1.0, "f32") / total))
        m_scaled = m[h] * cs.scale_log2
        lse.append(select(empty, const(float("inf"), "f32"), (m_scaled + log2(total)) * LN2))
    # 1. O / l, converted, into this warpgroup's 64 rows of the O tile (the Q tile unless persistent;
    #    128B swizzle, as TMA reads it)
    nch = cfg.d_chunks
    if cfg.persistent:  # the previous tile's TMA store must have read this warpgroup's rows of the O tile
        with kb.if_(cs.is_leader).then_():
            fa4_op("tma_store_wait", pending=0)
        kb.named_barrier(BAR_EPILOGUE, 128, select=cs.wg, span=cfg.consumers)
    wg_base = kb.gep(o_smem, cs.wg * (64 * SWIZZLE), "i8")
    for h in (0, 1):
        row_base = kb.gep(wg_base, (cs.row0 + 8 * h) * SWIZZLE + cs.t4 * 4, "i8")
        for jd in range(cfg.head_dim // 8):
            c, unit = divmod(jd, 8)
            i = 4 * jd + 2 * h
            pair = vec(o[i] * inv[h], o[i + 1] * inv[h]).to((cfg.dtype, 2))
            off = ((cs.g ^ unit) * 16) + c * cfg.bm * SWIZZLE
            kb.store(pair, kb.gep(row_base, off, "i8"), align=4)
    kb.fence("async_smem")
    kb.named_barrier(BAR_EPILOGUE, 128, select=cs.wg, span=cfg.consumers)  # one per warpgroup
    # 2. one thread per warpgroup stores the 64 x head_dim tile (rows past seqlen_q are clipped)
    with kb.if_(cs.is_leader).then_():
        for c in range(nch):
            fa4_op("tma_store", [o_desc, kb.gep(wg_base, c * cfg.bm * SWIZZLE, "i8"), const(c * CHUNK),
                                 geo.head, geo.m0 + cs.wg * 64, geo.batch], box=[CHUNK, 1, 64, 1])
        # commit the stores; one tile per CTA waits here, persistent before its next write to the tile
        fa4_op("tma_store_wait", pending=1 if cfg.persistent else 0)
    # 3. LSE from the lane that owns column pair 0 of each row
    with kb.if_(cs.t4.eq(0)).then_():
        row_base = (geo.batch * geo.heads + geo.head).to("i64") * geo.seqlen_q.to("i64")
        for h in (0, 1):
            with kb.if_(cs.grow[h].lt(geo.seqlen_q)).then_():
                kb.store(lse[h], kb.gep(lse_ptr, row_base + cs.grow[h].to("i64"), "f32"), align=4)
