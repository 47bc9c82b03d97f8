"""The swap-AB variant of the sm_90a absorbed-MLA decode (MLADecodeConfig.swap_ab = N; the default for
seqlen_q x heads <= 32 over a 16-bit cache by attention_mla_decode_sm90_config.DEFAULT_RULE, or named:
attention/mla.py's FA4MLIR_MLA_DECODE_VARIANT=swapab). attention_mla_decode_sm90.py has the
contract, the producer this one's is modelled on (`_load_role`), the work item (`_Work`, reused) and
the notes cited.

Note "Swap AB (MLA)": the default kernel packs a CTA's heads x seqlen_q query rows into a 64-row
wgmma M tile; at 16 heads (16 or 32 rows) 3/4 or 1/2 of its tensor work is padding and the tile step,
not memory, bounds it. Here the CTA holds N <= 32 packed rows (N a legal wgmma N: 8, 16, 24, 32) and
the keys and V's columns are M:

    S^T [64 keys x N]  = K_j Q^T : 36 wgmma m64nNk16, A = the KV tile from SMEM (K-major: keys are
                         its rows, the default kernel's B descriptors), B = Q (N rows x 576, K-major)
    O^T [512 x N]     += V_j^T P^T: 8 m64 tiles x 4 k16 steps of m64nNk16, A = V_j^T from SMEM
                         MN-major (imm-trans-a, fa4.mma a_major="mn": the tile's first 512 columns,
                         chunk t is m tile t), B = P^T (N rows x 64 keys, K-major) written to SMEM by
                         the softmax

Roles: the default kernel's 12 warps and setmaxnreg 240 / 24, its two consumer warpgroups as roles
`mma0` and `mma1`. They take alternate KV tiles of the split (note "Rings"), each with its own
running max m, sum l and O^T partial (512 x N float32: 4 N = 128 registers a thread at N = 32), and
meet once, after the last tile (note "Merge"). Per tile, warpgroup w:
    1. wait KV_j (its ring); S^T = K_j Q^T; every SMEM address of the step through q_slot's 0 as
       the default kernel's _kv_tile, step 1 (descriptors kept in the loop, not hoisted)
    2. mask (keys at or past the column's end: L_b, less seqlen_q - 1 - token under causal); each
       column's max over the warp's 16 keys (2 registers, 8 lanes: shuffles 4, 8, 16); lanes g = 0
       write it to SMEM [w][column][warp]; warpgroup barrier
    3. the column's max over the 4 warps, online softmax in base 2 (m and alpha per column, the same
       in every thread holding the column); l stays a per-thread partial (every holder rescales by
       the same alpha), summed over lanes and warps once in the epilogue
    4. P^T (q's dtype) into warpgroup w's N x 64 K-major tile (128B swizzle); (the tile holding L_b)
       V rows past L_b zeroed (note "NaN past L_b": every warp's S^T retired at step 2's barrier);
       fence.proxy.async, warpgroup barrier
    5. O^T *= alpha (O^T's registers hold the same columns as S^T's: alpha is in registers);
       O^T += V_j^T P^T (32 wgmma); wait; release the ring's stage
One buffer each of the maxima and P^T per warpgroup suffices: a warp writes its next tile's maxima
only after passing step 4's barrier of this one, which every warp reaches only after reading this
tile's maxima, and its next P^T after the next step 2 barrier, which every warp reaches only after
its own wait on this tile's P V.

Note "Rings": warpgroup w owns a one-stage ring kv<w> (72 KiB; fa4-verify-pipelines counts arrivals
and ring positions per role, so each warpgroup is a role with its own ring). The producer walks
pairs i of the split's tiles, ceil((end - begin) / 2) of them, filling kv0 with tile begin + 2 i and
kv1 with begin + 2 i + 1; when the count is odd, kv1's last fill (the phantom tile) is at or past
`end`: every box of it is aimed past the pool (TMA fills zeros, reads nothing) and warpgroup 1 runs
it as a masked tile whose keys are all hidden (column ends clamped to end x 64): m, l and O^T stay
as they were. SMEM: Q (N x 576) 36 KiB at N = 32, the two rings 144 KiB, P^T 8 KiB: 190 KiB; a
third 72 KiB tile does not fit, so a warpgroup's next tile loads while it computes the current one
only in the other's ring: the same two tiles in flight as the default kernel's ring of 2. (A ring of 8 KiB
chunk stages instead, swap_ab_ring, DEFAULT_RULE's over bf16: attention_mla_decode_sm90_swapab_chunks.py.)

Note "Merge": after both warpgroups' last tile (a barrier of both; every TMA load of the split has
then landed and been consumed, so the rings' SMEM is free) each writes its columns' m and lane-and-
warp-summed l; per column M = max(m_0, m_1), f_w = 2^((m_w - M) scale) (0 for a warpgroup that saw
no key), l = f_0 l_0 + f_1 l_1. Warpgroup w finalises O^T's m tiles 4 w .. 4 w + 3: it hands the
other half, scaled by its f_w, to the other through the other's ring ([destination][tile][register]
[thread] float32: thread t reads what thread t wrote), a barrier, then O = f_w O_w + the other's.
Outputs as the default kernel's epilogue (split: float32 partials and LSE, -inf for no key;
unsplit: O in q's dtype and the LSE, +inf for no key); each thread stores its 4 x 2 rows of V columns
per held query column (scalar stores), the LSE by warpgroup 0's lanes 0-3.
"""
from __future__ import annotations

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, KernelBuilder, Value, const, fast_div, fma, fmax, log2, select, undef, vec
from .attention_mla_decode_sm90 import _box_origin, _Work, div
from .attention_mla_decode_sm90_config import (BN, CHUNK_BYTES, CONSUMERS, D_QK, D_V, LOAD_REGS, MMA_REGS,
                                               SWAP_AB_MAX_ROWS, MLADecodeConfig)
from .common.mla_sm90 import BAR_ALL, BAR_WG, CHUNK, LN2, NEG_INF, QK_CHUNKS, SWIZZLE, UNITS, WGMMA_K, zero_rows_from
from .common.softmax import max_update
from .common.wgmma import acc_row, wait_group

M_TILES = D_V // 64                 # m64 tiles of O^T: V's 512 columns, chunk t of the KV tile is tile t
HALF = M_TILES // CONSUMERS         # m tiles each warpgroup finalises (note "Merge")
K_STEPS = BN // WGMMA_K
WARPS = 4                           # of a warpgroup
# exchange buffer, float32 slots: column maxima [wg][col][warp], column sums [wg][warp][col], m [wg][col]
X_MAX = 0
X_SUM = X_MAX + CONSUMERS * SWAP_AB_MAX_ROWS * WARPS
X_M = X_SUM + CONSUMERS * WARPS * SWAP_AB_MAX_ROWS


def p_offset(n, key):
    """Byte offset of P^T's (query column n, key) (16-bit) in its N x 64 K-major tile: row n of 128
    bytes, 16-byte unit (2 key / 16) ^ (n % 8) (128B swizzle). ints or DSL Values."""
    return n * SWIZZLE + (((key * 2) >> 4) ^ (n % 8)) * 16 + (key * 2) % 16


def col_regs(c: int) -> tuple[int, int]:
    """A thread's m64nN accumulator registers of its held column c (0 .. N / 4 - 1): rows r, r + 8."""
    return 4 * (c // 2) + c % 2, 4 * (c // 2) + 2 + c % 2


def col_of_reg(i: int) -> int:
    """The held-column index c of accumulator register i."""
    return 2 * (i // 4) + i % 2


class _Buffers:
    def __init__(self, kb, cfg: MLADecodeConfig):
        n = cfg.swap_ab
        self.q = kb.smem("q_smem", n * D_QK * 2)                     # Q, N rows x 576, K-major, 128B swizzle
        ring = cfg.swap_ab_ring_stages() * CHUNK_BYTES if cfg.swap_ab_ring else cfg.tile_bytes()
        self.kv = [kb.smem(f"kv{w}_smem", ring) for w in range(CONSUMERS)]     # note "Rings"
        self.p = kb.smem("p_smem", CONSUMERS * n * BN * 2)          # P^T per warpgroup, N x 64 K-major
        self.x = kb.smem("x_smem", (X_M + CONSUMERS * SWAP_AB_MAX_ROWS) * 4, align=16)
        self.q_slot = kb.smem("q_slot", 16, align=16)               # holds 0 (step 1)


def build(cfg: MLADecodeConfig) -> dsl.KernelIR:
    cfg.validate()
    if not cfg.swap_ab:
        raise ValueError("attention_mla_decode_sm90_swapab builds swap_ab configs only (MLADecodeConfig.swap_ab = N)")
    kb = KernelBuilder(cfg.name(), arch="sm_90a", block=(cfg.threads, 1, 1), config=cfg.key(), min_ctas_per_sm=1)
    spec = dict(dtype=cfg.dtype, box=(CHUNK, 1, cfg.box_rows, 1), swizzle="128B")
    p = kb.params_from(cfg.params, tma={"kv_cache": spec})
    with kb.body():
        bufs = _Buffers(kb, cfg)
        # note "Rings": warpgroup w's one-stage ring kv<w> holds the split's tiles begin + 2 i + w
        # (swap_ab_ring: one of chunk stages; attention_mla_decode_sm90_swapab_chunks)
        chunked = cfg.swap_ab_ring
        if chunked:
            from . import attention_mla_decode_sm90_swapab_chunks as ck
            rings = [ck.ChunkRing(kb, w, cfg.swap_ab_ring_stages()) for w in range(CONSUMERS)]
        else:
            rings = [_Ring(kb, w) for w in range(CONSUMERS)]
        kb.pipeline_init()
        work = _Work(kb, p)
        with kb.warp_roles():
            for w in range(CONSUMERS):
                with kb.role(f"mma{w}", first_warp=4 * w, num_warps=4, regs=MMA_REGS):
                    _mma_role(kb, cfg, work, p, bufs, rings[w], w)
            with kb.role("load", first_warp=4 * CONSUMERS, num_warps=1, regs=LOAD_REGS):
                if chunked:
                    ck.load_role(kb, cfg, work, p, bufs, rings, _pairs(work))
                else:
                    _load_role(kb, cfg, work, p, bufs, [r.pipe for r in rings])
    return kb.finish()


class _Ring:
    """Warpgroup w's one-stage ring kv<w> of whole tiles (note "Rings"): how _kv_tile waits for its
    tile and issues S^T (`st`), zeroes V rows past L_b (`zero_v_tail`), and issues P V and releases the
    tile (`pv`)."""

    def __init__(self, kb, w: int):
        self.kb = kb
        self.pipe = kb.pipeline(f"kv{w}", num_stages=1, producer="load", consumers=[f"mma{w}"])

    def state(self, i: Value):
        return self.pipe.state_at(i)

    def st(self, cs, bufs, s):
        """Wait the tile; S^T = K_j Q^T retired. Returns (q_at, the tile's address, S^T)."""
        kb = self.kb
        self.pipe.consumer_wait(s)
        q_at = kb.warp_uniform(kb.load(bufs.q_slot, "i32", align=4))
        stage = kb.gep(bufs.kv[cs.wg], q_at, "i8")
        return q_at, stage, wait_group(_issue_st(cs, kb.gep(bufs.q, q_at, "i8"), stage), pending=0)

    def zero_v_tail(self, cs, stage, valid: Value):
        _zero_v_tail(cs, stage, valid)

    def pv(self, cs, stage, p_base, o: list, s) -> list:
        o = _issue_pv(cs, stage, p_base, o)
        with self.kb.if_(cs.is_leader).then_():
            self.pipe.consumer_release(s)
        return o


def _pairs(work: _Work) -> Value:
    """Pairs of the split's tiles: ceil((end - begin) / 2); warpgroup 1's tile of the last is past
    `end` when the count is odd (note "Rings")."""
    return (work.end - work.begin + 1) // 2


def _load_role(kb, cfg: MLADecodeConfig, work: _Work, p, bufs: _Buffers, pipes):
    """The default kernel's producer (attention_mla_decode_sm90._load_role) over pairs of tiles, tile
    begin + 2 i + w into ring kv<w>; a tile at or past `end` (the odd count's last) is aimed past the
    pool whole: TMA fills zeros, no memory is read (note "Rings")."""
    tile_bytes = cfg.tile_bytes()
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(p["kv_cache"])
        row_at = work.batch.to("i64") * p["block_table_stride"].to("i64")

        def box_origin(t: Value, real: Value):
            return _box_origin(kb, p, work, row_at, t, real)

        loop = kb.for_(0, _pairs(work), 1)
        with loop as (i, _):
            for w, pipe in enumerate(pipes):
                s = pipe.state_at(i)
                j = work.begin + i * 2 + w
                pipe.producer_acquire(s)
                pipe.producer_commit(s, tx_bytes=tile_bytes)
                for b in range(cfg.boxes_per_tile):
                    page, row = box_origin(j * BN + b * cfg.box_rows, j.lt(work.end))
                    for c in range(QK_CHUNKS):
                        dst = kb.gep(bufs.kv[w], c * BN * SWIZZLE + b * cfg.box_rows * SWIZZLE, "i8")
                        fa4.tma_load(p["kv_cache"], dst, s.stage, [const(c * CHUNK), const(0), row, page],
                                     pipe=pipe.name, box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=ELEM_BYTES[cfg.dtype])
            loop.yield_()


class _Consumer:
    """A consumer thread: warpgroup wg, its warp and lane (t4 = lane % 4, g = lane / 4), its S^T /
    O^T rows row0, row0 + 8 (keys of the tile, V columns of an m tile) and its N / 4 held query
    columns 8 (c / 2) + 2 t4 + c % 2."""

    def __init__(self, kb, cfg: MLADecodeConfig, work: _Work, p, wg: int, x_smem):
        self.kb, self.cfg, self.work, self.p, self.x_smem = kb, cfg, work, p, x_smem
        self.n = cfg.swap_ab
        self.n_s = self.n // 2                  # registers of an m64nN accumulator
        self.n_cols = self.n // 4
        tid = kb.thread_idx(0)
        self.tid = tid
        self.wg = wg                            # the role's warpgroup (a Python int)
        self.t = tid - 128 * wg
        self.warp = kb.warp_uniform(self.t // 32)
        lane = self.t % 32
        self.t4, self.g = lane % 4, lane // 4
        self.row0 = self.warp * 16 + self.g
        self.is_leader = tid.eq(128 * wg)         # (tid == c: a leader election to fa4-verify-pipelines)
        self.scale_log2 = p["scale_log2"]

    def col(self, c: int) -> Value:
        return self.t4 * 2 + (8 * (c // 2) + c % 2)

    def packed(self, c: int) -> Value:
        return self.work.m_tile * self.n + self.col(c)

    def token_head(self, c: int):
        packed = self.packed(c)
        tok = fast_div(packed, *div(self.p, "heads"))
        return tok, packed - tok * self.p["heads"]

    def wg_barrier(self):
        self.kb.named_barrier(BAR_WG + self.wg, 128)

    def x_at(self, slot):
        return self.kb.gep(self.x_smem, slot, "f32")


def _load_q(cs: _Consumer, bufs: _Buffers):
    """Q's N packed rows x 576 into SMEM (128B swizzle: chunk c at c N 128, row r at r 128, 16-byte unit
    u at (u ^ r % 8) 16) by the 256 consumer threads; rows past `rows` as zeros."""
    kb, p, work, n = cs.kb, cs.p, cs.work, cs.n
    units = QK_CHUNKS * UNITS
    total = n * units
    zero = const(0, ("i32", 4))

    def unit(u):
        r = u // units
        cu = u - r * units
        c, within = cu // UNITS, cu % UNITS
        packed = work.m_tile * n + r
        ok = packed.lt(p["rows"])
        tok = fast_div(packed, *div(p, "heads"))
        head = packed - tok * p["heads"]
        index = (work.batch.to("i64") * p["q_stride_b"] + tok.to("i64") * p["q_stride_s"]
                 + head.to("i64") * p["q_stride_h"] + (cu * 8).to("i64"))
        safe = select(ok, index, const(0, "i64"))
        val = select(ok, kb.load(kb.gep(p["q"], safe, cs.cfg.dtype), ("i32", 4), align=16), zero)
        kb.store(val, kb.gep(bufs.q, c * (n * SWIZZLE) + r * SWIZZLE + (within ^ (r % 8)) * 16, "i8"), align=16)

    for i in range(-(-total // 256)):
        u = cs.tid + 256 * i
        if 256 * (i + 1) <= total:
            unit(u)
        else:
            with kb.if_(u.lt(total)).then_():
                unit(u)
    with kb.if_(cs.tid.eq(0)).then_():
        kb.store(const(0), bufs.q_slot, align=4)
    kb.fence("async_smem")
    kb.named_barrier(BAR_ALL, 256)


def _issue_st(cs: _Consumer, q_smem, kv_base) -> Value:
    """S^T = K_j Q^T over the 576 columns: A = the KV tile (keys as rows), B = Q (K-major)."""
    kb = cs.kb
    acc = undef(("f32", cs.n_s))
    fa4.mma_fence()
    for kk in range(D_QK // WGMMA_K):
        c, within = divmod(kk, CHUNK // WGMMA_K)
        off = within * WGMMA_K * 2
        a_d = fa4.smem_desc(kb.gep(kv_base, c * BN * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
        b_d = fa4.smem_desc(kb.gep(q_smem, c * cs.n * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
        acc = Value(fa4.mma(a_d, b_d, const(int(kk > 0), "i1"), [acc], result_types=[acc.type], m=64, n=cs.n,
                            k=WGMMA_K, a_source="smem", ab_dtype=cs.cfg.dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return acc


def _issue_pv(cs: _Consumer, v_base, p_base, o: tuple) -> list:
    """O^T += V_j^T P^T: m tile t (V columns 64 t ..: the tile's chunk t) read MN-major as A."""
    kb = cs.kb
    fa4.mma_fence()
    b_ds = [fa4.smem_desc(kb.gep(p_base, kk * WGMMA_K * 2, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
            for kk in range(K_STEPS)]
    out = []
    for mt in range(M_TILES):
        acc = o[mt]
        for kk in range(K_STEPS):
            a_d = fa4.smem_desc(kb.gep(v_base, mt * BN * SWIZZLE + kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE,
                                lbo=BN * SWIZZLE, sbo=8 * SWIZZLE)
            acc = Value(fa4.mma(a_d, b_ds[kk], const(1, "i1"), [acc], result_types=[acc.type], m=64, n=cs.n,
                                k=WGMMA_K, a_source="smem", a_major="mn", ab_dtype=cs.cfg.dtype, acc_dtype="f32"))
        out.append(acc)
    fa4.mma_commit_group()
    op = fa4.mma_wait_group(out, result_types=[a.type for a in out], pending=0)
    return [Value(r) for r in op.results]


def _column_ends(cs: _Consumer) -> list:
    """Keys [0, end) visible to each held column: L_b less seqlen_q - 1 - token under causal, padded
    columns clamped to L_b, and every column to the split's end (note "Rings": the phantom tile)."""
    p, length = cs.p, cs.work.length
    limit = length.smin(cs.work.end * BN)
    ends = []
    for c in range(cs.n_cols):
        tok, _ = cs.token_head(c)
        hidden = (p["seqlen_q"] - 1 - tok) * p["causal"]
        ends.append((length - hidden).smax(0).smin(limit))
    return ends


def _zero_v_tail(cs: _Consumer, v_base, valid: Value):
    """Rows [valid, BN) of the tile's 8 V chunks to zeros (note "NaN past L_b"), by the warpgroup."""
    zero_rows_from(cs.kb, cs.t, v_base, valid, M_TILES)


def _kv_tile(cs: _Consumer, bufs: _Buffers, ring, i: Value, carry, masked: bool):
    kb, cfg, work = cs.kb, cs.cfg, cs.work
    o, m, l = carry
    j = work.begin + i * 2 + cs.wg
    # 1. wait KV_j (pair i of this warpgroup's ring), S^T = K_j Q^T; every SMEM address of the step
    #    starts from q_slot's 0, loaded after the wait, so that no descriptor is hoisted out of the loop
    s = ring.state(i)
    q_at, stage, st = ring.st(cs, bufs, s)
    sv = [st[i] for i in range(cs.n_s)]
    # 2. mask; column maxima over the warp's keys, then over the 4 warps through SMEM
    if masked:
        ends = _column_ends(cs)
        for i in range(cs.n_s):
            key = j * BN + cs.row0 + 8 * acc_row(i)
            sv[i] = select(key.sge(ends[col_of_reg(i)]), const(NEG_INF, "f32"), sv[i])
    maxima = []
    for c in range(cs.n_cols):
        a, b = col_regs(c)
        mx = fmax(sv[a], sv[b])
        for off in (4, 8, 16):
            mx = fmax(mx, kb.shuffle_xor(mx, off))
        maxima.append(mx)
    with kb.if_(cs.g.eq(0)).then_():
        for c in range(cs.n_cols):
            kb.store(maxima[c], cs.x_at(X_MAX + (cs.wg * SWAP_AB_MAX_ROWS + cs.col(c)) * WARPS + cs.warp), align=4)
    cs.wg_barrier()
    # 3. online softmax per column
    p_vals = [None] * cs.n_s
    m_new, l_new, alpha = [], [], []
    for c in range(cs.n_cols):
        four = kb.load(cs.x_at(X_MAX + (cs.wg * SWAP_AB_MAX_ROWS + cs.col(c)) * WARPS), ("f32", 4), align=16)
        mx = fmax(fmax(four[0], four[1]), fmax(four[2], four[3]))
        mc, a, neg = max_update(m[c], mx, cs.scale_log2, 0.0)
        regs = col_regs(c)
        for i in regs:
            p_vals[i] = dsl.exp2(fma(sv[i], cs.scale_log2, neg))
        m_new.append(mc)
        alpha.append(a)
        l_new.append(fma(l[c], a, p_vals[regs[0]] + p_vals[regs[1]]))
    # 4. P^T into this warpgroup's tile; V rows past L_b zeroed; publish to the async proxy
    p_base = kb.gep(bufs.p, q_at + cs.wg * (cs.n * BN * 2), "i8")
    for i in range(cs.n_s):
        off = p_offset(cs.col(col_of_reg(i)), cs.row0 + 8 * acc_row(i))
        kb.store(p_vals[i].to(cfg.dtype), kb.gep(p_base, off, "i8"), align=2)
    if masked:
        valid = work.length - j * BN
        with kb.if_(valid.slt(BN)).then_():
            ring.zero_v_tail(cs, stage, valid)
    kb.fence("async_smem")
    cs.wg_barrier()
    # 5. O^T *= alpha (per column), O^T += V_j^T P^T; release the stage
    o = [vec(*[o[mt][i] * alpha[col_of_reg(i)] for i in range(cs.n_s)]) for mt in range(M_TILES)]
    o = ring.pv(cs, stage, p_base, o, s)
    return tuple(o), tuple(m_new), tuple(l_new)


def _mma_role(kb, cfg: MLADecodeConfig, work: _Work, p, bufs: _Buffers, ring, wg: int):
    cs = _Consumer(kb, cfg, work, p, wg, bufs.x)
    _load_q(cs, bufs)
    f32 = "f32"
    # tiles every column sees entirely need no mask (the default kernel's split at `split`): this
    # warpgroup's tiles begin + 2 i + wg below it are pairs i < unmasked
    hidden0 = (p["seqlen_q"] - 1) * p["causal"]
    full = (work.length - hidden0).smax(0) // BN
    split = full.smax(work.begin).smin(work.end)
    unmasked = (split - work.begin - wg + 1) // 2
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    state = (tuple(const(0.0, (f32, cs.n_s)) for _ in range(M_TILES)), (neg_inf,) * cs.n_cols, (zero,) * cs.n_cols)
    for lo, hi, masked in ((const(0), unmasked, False), (unmasked, _pairs(work), True)):
        loop = kb.for_(lo, hi, 1, carry=state)
        with loop as (i, carried):
            loop.yield_(*_kv_tile(cs, bufs, ring, i, carried, masked))
        state = loop.results
    _epilogue(cs, bufs, *state)


def _epilogue(cs: _Consumer, bufs: _Buffers, o, m, l):
    """Note "Merge", then O / l and the LSE of the held columns' real rows."""
    kb, cfg = cs.kb, cs.cfg
    for c in range(cs.n_cols):
        total = l[c]
        for off in (4, 8, 16):
            total = total + kb.shuffle_xor(total, off)
        with kb.if_(cs.g.eq(0)).then_():
            kb.store(total, cs.x_at(X_SUM + (cs.wg * WARPS + cs.warp) * SWAP_AB_MAX_ROWS + cs.col(c)), align=4)
            with kb.if_(cs.warp.eq(0)).then_():
                kb.store(m[c], cs.x_at(X_M + cs.wg * SWAP_AB_MAX_ROWS + cs.col(c)), align=4)
    kb.named_barrier(BAR_ALL, 256)
    zero = const(0.0, "f32")
    tops, f_own, totals = [], [], []
    for c in range(cs.n_cols):
        ms = [kb.load(cs.x_at(X_M + w * SWAP_AB_MAX_ROWS + cs.col(c)), "f32", align=4) for w in range(CONSUMERS)]
        top = fmax(ms[0], ms[1])
        safe = select(top.eq(NEG_INF), zero, top)
        f = [dsl.exp2((x - safe) * cs.scale_log2) for x in ms]       # exp2(-inf) = 0: no key seen
        total = zero
        for w in range(CONSUMERS):
            four = [kb.load(cs.x_at(X_SUM + (w * WARPS + q) * SWAP_AB_MAX_ROWS + cs.col(c)), "f32", align=4)
                    for q in range(WARPS)]
            total = fma((four[0] + four[1]) + (four[2] + four[3]), f[w], total)
        tops.append(top)
        f_own.append(f[cs.wg])
        totals.append(total)
    # the other warpgroup's m tiles, scaled, through the ring's SMEM: [destination][tile][register][thread]
    own, other = o[HALF * cs.wg:HALF * cs.wg + HALF], o[HALF * (1 - cs.wg):HALF * (1 - cs.wg) + HALF]

    def slot(dest: int, q: int, i: int):        # in warpgroup dest's ring buffer
        return kb.gep(bufs.kv[dest], ((q * cs.n_s + i) * 128 + cs.t) * 4, "i8")

    for q in range(HALF):
        for i in range(cs.n_s):
            kb.store(other[q][i] * f_own[col_of_reg(i)], slot(1 - cs.wg, q, i), align=4)
    kb.named_barrier(BAR_ALL, 256)
    final = [[fma(own[q][i], f_own[col_of_reg(i)], kb.load(slot(cs.wg, q, i), "f32", align=4))
              for i in range(cs.n_s)] for q in range(HALF)]
    for c in range(cs.n_cols):
        total = totals[c]
        empty = total.eq(0.0)
        log_total = log2(total)
        inv = select(empty, zero, dsl.exp2(zero - log_total))
        no_key = float("inf") if cfg.unsplit else NEG_INF
        lse = select(empty, const(no_key, "f32"), (tops[c] * cs.scale_log2 + log_total) * LN2)
        with kb.if_(cs.packed(c).lt(cs.p["rows"])).then_():
            _store(cs, c, [[final[q][i] for i in col_regs(c)] for q in range(HALF)], inv, lse)


def _store(cs: _Consumer, c: int, vals, inv: Value, lse: Value):
    """Held column c's values (vals[q][h]: m tile HALF wg + q, row row0 + 8 h) / l and its LSE."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    tok, head = cs.token_head(c)
    token, head = tok.to("i64"), head.to("i64")
    col0 = (cs.row0 + cs.wg * (HALF * 64)).to("i64")
    lse_write = cs.t.lt(4) if cs.wg == 0 else None
    if cfg.unsplit:     # fma(O, 1 / l, +0) in q's dtype, as the default kernel
        base = (work.batch.to("i64") * p["out_stride_b"] + token * p["out_stride_s"] + head * p["out_stride_h"]
                + col0)
        zero = const(0.0, "f32")
        for q in range(HALF):
            for h in (0, 1):
                kb.store(fma(vals[q][h], inv, zero).to(cfg.dtype), kb.gep(p["out"], base + (q * 64 + 8 * h), cfg.dtype),
                         align=2)
        lrow = (work.batch.to("i64") * p["heads"].to("i64") + head) * p["seqlen_q"].to("i64") + token
        if lse_write is not None:
            with kb.if_(lse_write).then_():
                kb.store(lse, kb.gep(p["lse"], lrow, "f32"), align=4)
        return
    sb = (work.split * p["batch"] + work.batch).to("i64")
    row = (sb * p["seqlen_q"].to("i64") + token) * p["heads"].to("i64") + head
    base = row * D_V + col0
    for q in range(HALF):
        for h in (0, 1):
            kb.store(vals[q][h] * inv, kb.gep(p["o_partial"], base + (q * 64 + 8 * h), "f32"), align=4)
    lrow = (sb * p["heads"].to("i64") + head) * p["seqlen_q"].to("i64") + token
    if lse_write is not None:
        with kb.if_(lse_write).then_():
            kb.store(lse, kb.gep(p["lse_partial"], lrow, "f32"), align=4)
