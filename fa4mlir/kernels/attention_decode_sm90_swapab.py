"""The swap_ab consumer of the sm_90a FP8 decode kernel (DecodeConfig.swap_ab; attention_decode_sm90.py
has the roles, the rings and the notes cited here): S^T = K Q^T with K_j the wgmma A operand from
registers, so K_j is never written back to shared memory as f16.

Note "Swap AB": a decode CTA holds at most SWAP_AB_ROWS (8) packed query rows (GQA group x seqlen_q;
the bench's D128 shape: group 4, seqlen_q 1), far fewer than the 64 rows of a wgmma M tile. Here the
64 keys of tile j are M and the 8 query rows N:

  1. wait K_j, V_j; each thread loads its 2 key rows' 32 e4m3 bytes (2 x 16 bytes a row) and converts
     them in registers (fa4.cvt_e4m3x2, exact) straight into the eight m64k16 A fragments;
  2. S^T = K_j Q^T: 8 wgmma m64n8k16, A from registers, B = Q^T in SMEM (K-major, permuted, below);
  3. V_j to its f16 tile (common/e4m3_tile.py, rows past L_b as zeros) while S^T runs;
  4. the softmax over S^T's columns: a column's max is over 64 keys = 2 registers, 8 lanes (3
     shuffles) and the 4 warps (one f32 per warp and column through SMEM and the warpgroup barrier,
     which also publishes V's f16 tile after its fence; past it K_j and V_j are released: every
     thread's e4m3 loads are done); p = exp2(s scale - m scale) for the thread's
     4 values; the row sum l stays a per-thread partial (every thread rescales it by the same alpha),
     summed over lanes and warps once, in the epilogue;
  5. P (f16) into a 64 x bn K-major tile whose rows 8..63 stay zero (written once), each column's
     alpha beside it; fence, barrier;
  6. O *= alpha (only the thread's first row: the rows past 8 are zero), O += P V_j: 4 wgmma
     m64n128k16, A = P and B = V_j's f16 tile from SMEM, as the default kernel's P V.

K's head-dim order: thread t (lane quad t4 = t % 4) holds, of each of its key rows, the e4m3 bytes
32 t4 .. 32 t4 + 31 (two 16-byte loads), byte 4 kk + 2 w + e as element e of word w of k-step kk's
fragment, which the wgmma reads as reduction index kappa = 16 kk + 8 w + 2 t4 + e. So kappa reads
head-dim column d = `head_dim_of(kappa)` = 32 t4 + 4 kk + 2 w + e, and Q^T's row kappa holds
Q[:, head_dim_of(kappa)] (written so once, by the prologue). K's TMA box lands 128B-swizzled (a
128-byte e4m3 row is one swizzle row: 16-byte unit u of row r at (u ^ r % 8) 16), so a quarter-warp's
loads (rows g = 2q, 2q + 1, units 2 t4 + x) take 8 distinct 16-byte positions: no bank conflict
(`k_load_offset`; tests/test_decode_fp8_swapab.py counts them). V's box stays unswizzled (e4m3_tile).

Note "Warp partials" (cfg.swap_ab_warp_max, variant `swapabw`): no column max across warps. Warp w
keeps its own running max m_w and sum l_w per column over its 16 keys of each tile and writes its P
to rows 8 w + n of P's tile (its own keys only; the rest of the row stays zero), so O row 8 w + n is
warp w's partial of column n, rescaled by warp w's alpha (at `alpha_slot`). Per tile one fence and
one barrier (P, V's f16 tile and the alphas together) instead of two, and no SMEM round trip before
the exponentials. After the last tile (`merge_warps`) the partials meet as a split-KV combine inside
the CTA: M = max_w m_w, f_w = 2^((m_w - M) scale), O = sum_w f_w O_w, l = sum_w f_w l_w, through V's
f16 tile as float32. Costs: O *= alpha on both of a thread's rows (64 FMUL, rows 0..31 are live).

Note "O^T" (cfg.swap_ab_ot, the balanced kernel at three CTAs per SM, 128 registers): O^T = V^T P^T, two
m64n8 tiles (head-dim columns 64 c .., V's f16 chunk c read MN-major as A; B = P's tile, rows n < 8) of 4
k-steps each, 8 accumulator registers a thread instead of m64n128's 64 (7/8 of them the zero rows past 8).
Register i of either tile is column 2 t4 + i % 2, so O^T *= alpha takes the thread's own column alphas (no
SMEM read). After an item's tiles `o_of_ot` turns O^T into O's layout (rows past 8 zero) through V's f16
tile as float32 [8][D], between consumer barriers, for the unchanged epilogue.

Scales as the default FP8 kernel (tensor / kv_head: k in the softmax scale, v in the epilogue's 1 /
l); K rows past L_b (any bits, NaN included) are masked to -inf in S^T before the max, V's convert to
zeros (note "NaN past L_b").
"""
from __future__ import annotations

import operator

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import Value, const, fast_div, fma, fmax, select, undef, vec
from .attention_decode_sm90_config import SWAP_AB_ROWS, TILE_M
from .common import e4m3_tile
from .common.constants import NEG_INF
from .common.half_words import bf16x2_to_f16x2
from .common.softmax import max_update
from .common.wgmma import acc_col, acc_row, wait_group

SWIZZLE = 128
WGMMA_K = 16
N = SWAP_AB_ROWS
K_ROW_BYTES = 32          # e4m3 bytes of one key row per thread (4 threads a row)
# f32 slots of the exchange buffer: column maxima [col][warp], the columns' alpha, sums [col][warp], m
X_MAX, X_ALPHA, X_SUM, X_M = 0, 32, 64, 96
OT_REGS = 64 * N // 128   # note "O^T": f32 registers a thread holds of one m64nN accumulator


def ot_regs(cfg) -> int:
    """Note "O^T": the registers of O^T's accumulators (d_chunks M tiles of 64 head-dim columns)."""
    return OT_REGS * cfg.d_chunks


def head_dim_of(kappa: int) -> int:
    """Note "Swap AB": the head-dim column the S^T wgmma's reduction index kappa reads."""
    kk, rest = divmod(kappa, WGMMA_K)
    w, rest = divmod(rest, 8)
    t4, e = divmod(rest, 2)
    return K_ROW_BYTES * t4 + 4 * kk + 2 * w + e


def k_load_offset(row, t4, g, x: int):
    """Byte offset in the 128B-swizzled e4m3 K tile (rows of 128 bytes) of the x-th 16 bytes (x = 0, 1)
    of key row `row` that lane quad t4 converts (bytes 32 t4 + 16 x ..); g = row % 8 (the lane's
    row0 % 8). Plain integer arithmetic: ints here and in tests, DSL Values in the kernel."""
    return row * 128 + ((t4 * 2 + x) ^ g) * 16


def q_offset(n: int, kappa: int) -> int:
    """Byte offset of Q^T's (kappa, n) (f16) in its K-major 128B-swizzled tile: chunk kappa / 64 at
    chunk * N * 128, row n at n * 128, 16-byte unit u at (u ^ n % 8) * 16."""
    c, within = divmod(kappa, 64)
    return c * N * SWIZZLE + n * SWIZZLE + (((within * 2) // 16) ^ (n % 8)) * 16 + (within * 2) % 16


def p_offset(n, key):
    """Byte offset of P's (row n, key) (f16) in its 64 x bn K-major tile (bn = 64: one swizzle chunk)."""
    return n * SWIZZLE + (((key * 2) >> 4) ^ (n % 8)) * 16 + (key * 2) % 16


class Buffers:
    """swap_ab's shared memory beside the e4m3 rings."""

    def __init__(self, kb, cfg):
        self.q = kb.smem("q_smem", N * cfg.head_dim * 2)
        self.v16 = kb.smem("v16_smem", cfg.staged_bytes())
        self.p = kb.smem("p_smem", TILE_M * cfg.bn * 2)
        self.x = kb.smem("xchg_smem", 512, align=16)


def load_q(cs, buf: Buffers):
    """Q^T (f16, rows kappa permuted as note "Swap AB") for the CTA's packed rows n < 8 (past `rows`:
    zeros), and P's tile zeroed (its rows 8..63 stay so); fenced to the async proxy, synced."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    units = cfg.head_dim // 8
    n = cs.t // units            # 128 threads = 8 rows x 16 units of 8 kappa
    u = cs.t % units
    packed = work.m_tile * TILE_M + n
    ok = packed.lt(work.rows)
    tok = fast_div(packed, p["cta_heads_mul"], p["cta_heads_shr"])
    head = work.head_base + packed - tok * p["cta_heads"]
    at = work.batch.to("i64") * p["q_stride_b"] + tok.to("i64") * p["q_stride_s"] + head.to("i64") * p["q_stride_h"]
    at = select(ok, at, const(0, "i64"))
    words = []
    # unit u holds kappa 8 u .. 8 u + 7: k-step u / 2, word w = u % 2, t4 = 0..3, both elements: head-dim
    # columns 32 t4 + 4 (u / 2) + 2 (u % 2) + e, a pair of q's elements per t4
    for t4 in range(4):
        d = (u // 2) * 4 + (u % 2) * 2 + K_ROW_BYTES * t4
        word = kb.load(kb.gep(p["q"], at + d.to("i64"), cfg.dtype), "i32", align=4)
        if cfg.dtype == "bf16":
            word = bf16x2_to_f16x2(word)
        words.append(select(ok, word, const(0, "i32")))
    off = (u // 8) * (N * SWIZZLE) + n * SWIZZLE + ((u % 8) ^ (n % 8)) * 16
    kb.store(vec(*words), kb.gep(buf.q, off, "i8"), align=16)
    zero = const(0, ("i32", 4))
    for i in range(TILE_M * cfg.bn * 2 // 16 // 128):
        kb.store(zero, kb.gep(buf.p, (cs.t + 128 * i) * 16, "i8"), align=16)
    kb.fence("async_smem")
    cs.barrier()


def column_ends(cs):
    """Keys [0, end) are visible to the thread's S^T columns 2 t4 + e (L_b, less seqlen_q - 1 - token
    under the causal mask), as _Consumer's `end` of a row."""
    p, work = cs.p, cs.work
    ends = []
    for e in (0, 1):
        packed = work.m_tile * TILE_M + cs.t4 * 2 + e
        tok = fast_div(packed, p["cta_heads_mul"], p["cta_heads_shr"])
        ends.append((work.length - (work.seqlen_q - 1 - tok) * p["causal"]).smax(0))
    return ends


def _k_frags(cs, k_stage) -> list:
    """The eight m64k16 A fragments of K_j (note "Swap AB"), converted in registers."""
    kb = cs.kb
    raw = []
    for h in (0, 1):
        # row r = row0 + 8 h (r % 8 = g): its 16-byte units 2 t4 + x at ((2 t4 + x) ^ g) 16 (128B swizzle)
        lo, hi = (kb.load(kb.gep(k_stage, k_load_offset(cs.row0 + 8 * h, cs.t4, cs.g, x), "i8"), ("i32", 4),
                          align=16) for x in (0, 1))
        raw.append([lo[i] for i in range(4)] + [hi[i] for i in range(4)])
    frags = []
    for kk in range(cs.cfg.head_dim // WGMMA_K):
        words = [Value(fa4.cvt_e4m3x2((raw[h][kk] >> (16 * w)).to("i16"))) for w in (0, 1) for h in (0, 1)]
        frags.append(vec(*words))
    return frags


def _issue_st(cs, buf: Buffers, frags) -> Value:
    kb = cs.kb
    acc = undef(("f32", 4))
    fa4.mma_fence()
    for kk, frag in enumerate(frags):
        c, within = divmod(kk, 64 // WGMMA_K)
        b_d = fa4.smem_desc(kb.gep(buf.q, c * N * SWIZZLE + within * WGMMA_K * 2, "i8"), swizzle=SWIZZLE, lbo=16,
                            sbo=8 * SWIZZLE)
        acc = Value(fa4.mma(frag, b_d, const(int(kk > 0), "i1"), [acc], result_types=[acc.type], m=64, n=N,
                            k=WGMMA_K, a_source="regs", ab_dtype="f16", acc_dtype="f32"))
    fa4.mma_commit_group()
    return acc


def _issue_pv(cs, buf: Buffers, o: Value) -> Value:
    kb, cfg = cs.kb, cs.cfg
    fa4.mma_fence()
    for kk in range(cfg.bn // WGMMA_K):
        a_d = fa4.smem_desc(kb.gep(buf.p, kk * WGMMA_K * 2, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
        b_d = fa4.smem_desc(kb.gep(buf.v16, kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE, lbo=cfg.bn * SWIZZLE,
                            sbo=8 * SWIZZLE)
        o = Value(fa4.mma(a_d, b_d, const(1, "i1"), [o], result_types=[o.type], m=64, n=cfg.head_dim, k=WGMMA_K,
                          a_source="smem", b_major="mn", ab_dtype="f16", acc_dtype="f32"))
    fa4.mma_commit_group()
    return o


def _issue_pv_ot(cs, buf: Buffers, o: Value) -> Value:
    """Note "O^T" (cfg.swap_ab_ot): O^T += V_j^T P^T, M tile c = head-dim columns 64 c .. (V's f16 chunk c read
    MN-major as A), B = P's tile (K-major, rows n < N), N = N; `o` the two m64nN accumulators end to end."""
    kb, cfg = cs.kb, cs.cfg
    fa4.mma_fence()
    out = []
    for c in range(cfg.d_chunks):
        acc = vec(*[o[OT_REGS * c + i] for i in range(OT_REGS)])
        for kk in range(cfg.bn // WGMMA_K):
            a_d = fa4.smem_desc(kb.gep(buf.v16, c * cfg.bn * SWIZZLE + kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE,
                                lbo=cfg.bn * SWIZZLE, sbo=8 * SWIZZLE)
            b_d = fa4.smem_desc(kb.gep(buf.p, kk * WGMMA_K * 2, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
            acc = Value(fa4.mma(a_d, b_d, const(1, "i1"), [acc], result_types=[acc.type], m=64, n=N, k=WGMMA_K,
                                a_source="smem", a_major="mn", ab_dtype="f16", acc_dtype="f32"))
        out.append(acc)
    fa4.mma_commit_group()
    op = fa4.mma_wait_group(out, result_types=[a.type for a in out], pending=0)
    return vec(*[Value(r)[i] for r in op.results for i in range(OT_REGS)])


def o_of_ot(cs, buf: Buffers, o: Value) -> Value:
    """Note "O^T": the item's O^T (ot_regs(cfg) registers) as the default kernel's O (64 x D: rows past N
    zero), through V's f16 tile as float32 [N][D], between consumer barriers (the last P V wgmma has read
    the tile; the next item's V conversion writes it)."""
    kb, cfg = cs.kb, cs.cfg
    cs.barrier()
    for c in range(cfg.d_chunks):
        for i in range(OT_REGS):
            d, n = 64 * c + cs.row0 + 8 * acc_row(i), cs.t4 * 2 + acc_col(i)
            kb.store(o[OT_REGS * c + i], kb.gep(buf.v16, n * cfg.head_dim + d, "f32"), align=4)
    cs.barrier()
    row = cs.row0 % N       # rows past N (threads of row0 >= N, or their second row) read row0 % N, then zero
    real = cs.row0.lt(N)
    out = []
    for j in range(cs.n_o // 4):
        pair = kb.load(kb.gep(buf.v16, row * cfg.head_dim + 8 * j + cs.t4 * 2, "f32"), ("f32", 2), align=8)
        out += [select(real, pair[0], const(0.0, "f32")), select(real, pair[1], const(0.0, "f32"))] + \
               [const(0.0, "f32")] * 2      # registers 4 j + 2, 3: row row0 + 8 >= N
    cs.barrier()
    return vec(*out)


def alpha_slot(row):
    """Note "Warp partials": the exchange slot of O row `row` (< 32)'s alpha; rows r and r + 8 (r % 16 < 8)
    adjacent, so a thread reads its two rows' with one 8-byte load."""
    return (row // 16) * 16 + (row % 8) * 2 + (row // 8) % 2


def _x(buf: Buffers, kb, slot):
    return kb.gep(buf.x, slot, "f32")


def kv_tile(cs, rings, buf: Buffers, ends, j: Value, carry, masked: bool):
    """One KV tile (note "Swap AB"; cfg.swap_ab_warp_max: note "Warp partials"). carry: the ring state,
    O (64 x D, the default kernel's layout), the running max m of the thread's two S^T columns (over
    the CTA's keys, or its warp's) and their per-thread partial sums l."""
    k_smem, v_smem, k_pipe, v_pipe = rings
    kb, cfg, work = cs.kb, cs.cfg, cs.work
    warp_max = cfg.swap_ab_warp_max
    s, o, m, l = carry
    k_pipe.consumer_wait(s)
    v_pipe.consumer_wait(s)
    at = s.stage * cfg.tile_bytes()
    # 1-2. K_j's fragments in registers, S^T = K_j Q^T
    st = _issue_st(cs, buf, _k_frags(cs, kb.gep(k_smem, at, "i8")))
    # 3. V_j to f16 while S^T runs (rows past L_b as zeros)
    valid = work.length - j * cfg.bn if masked else None
    e4m3_tile.emit_convert(kb, cs.t, [(kb.gep(v_smem, at, "i8"), buf.v16, valid)], cfg.bn, cfg.head_dim)
    st = wait_group(st, pending=0)
    # 4. column maxima: registers i = 2 h + e (row row0 + 8 h, column 2 t4 + e)
    sv = [st[i] for i in range(4)]
    if masked:
        if ends is None:    # computed in the masked tiles, not held across the loops (warp partials: registers)
            ends = column_ends(cs)
        for i in range(4):
            key = j * cfg.bn + cs.row0 + 8 * acc_row(i)
            sv[i] = select(key.sge(ends[i % 2]), const(NEG_INF, "f32"), sv[i])
    warp = cs.t // 32
    is_g0 = cs.g.eq(0)
    maxima = []
    for e in (0, 1):
        maxima.append(over_column_lanes(kb, fmax(sv[e], sv[2 + e]), fmax))
    if not warp_max:    # the 4 warps' maxima through SMEM
        for e in (0, 1):
            with kb.if_(is_g0).then_():
                kb.store(maxima[e], _x(buf, kb, X_MAX + (cs.t4 * 2 + e) * 4 + warp), align=4)
        kb.fence("async_smem")      # V's f16 stores, for the P V wgmma
        cs.barrier()
        cs.release(s, k_pipe, v_pipe)   # every thread's e4m3 loads are done
        for e in (0, 1):
            four = kb.load(_x(buf, kb, X_MAX + (cs.t4 * 2 + e) * 4), ("f32", 4), align=16)
            maxima[e] = fmax(fmax(four[0], four[1]), fmax(four[2], four[3]))
    m_new, l_new, alphas, p = [], [], [], [None] * 4
    for e in (0, 1):
        mc, alpha, neg = max_update(m[e], maxima[e], cs.scale_log2, 0.0)
        for h in (0, 1):
            p[2 * h + e] = dsl.exp2(fma(sv[2 * h + e], cs.scale_log2, neg))
        m_new.append(mc)
        alphas.append(alpha)
        l_new.append(fma(l[e], alpha, p[e] + p[2 + e]))
    # 5. P's columns into its tile (warp partials: row 8 warp + column), the columns' alpha beside them
    p_row0 = warp * N if warp_max else 0
    for i in range(4):
        n, key = p_row0 + cs.t4 * 2 + i % 2, cs.row0 + 8 * acc_row(i)
        kb.store(p[i].to("f16"), kb.gep(buf.p, p_offset(n, key), "i8"), align=2)
    if warp_max:    # O row R = 8 w + n's alpha at alpha_slot(R): a thread's rows R, R + 8 side by side
        with kb.if_(is_g0).then_():
            for e in (0, 1):
                kb.store(alphas[e], _x(buf, kb, X_ALPHA + alpha_slot(p_row0 + cs.t4 * 2 + e)), align=4)
    else:
        with kb.if_(cs.t.lt(4)).then_():
            kb.store(vec(alphas[0], alphas[1]), _x(buf, kb, X_ALPHA + cs.t4 * 2), align=8)
    kb.fence("async_smem")
    cs.barrier()
    if warp_max:
        cs.release(s, k_pipe, v_pipe)
    # 6. O *= alpha of its row, O += P V_j. Shared max: rows past N hold zeros (left alone); warp
    #    partials: O row R is warp R / 8's partial of column R % 8 (rows 32..63: zeros, any finite alpha)
    if cfg.swap_ab_ot:    # note "O^T": register i of either M tile is column 2 t4 + i % 2: the thread's own alphas
        return s.advance(), _issue_pv_ot(cs, buf, vec(*[o[i] * alphas[i % 2] for i in range(ot_regs(cfg))])), \
            tuple(m_new), tuple(l_new)
    if warp_max:
        a = kb.load(_x(buf, kb, X_ALPHA + alpha_slot(cs.row0 % (4 * N))), ("f32", 2), align=8)
        o = vec(*[o[i] * a[acc_row(i)] for i in range(cs.n_o)])
    else:
        alpha_row = kb.load(_x(buf, kb, X_ALPHA + cs.row0 % N), "f32", align=4)
        o = vec(*[o[i] * alpha_row if acc_row(i) == 0 else o[i] for i in range(cs.n_o)])
    o = wait_group(_issue_pv(cs, buf, o), pending=0)
    return s.advance(), o, tuple(m_new), tuple(l_new)


def over_column_lanes(kb, x: Value, op) -> Value:
    """``x`` combined by ``op`` (fmax, operator.add) over the 8 lanes of a warp that hold one S^T column
    (lane = 4 g + t4: the same t4, g = 0..7), by xor shuffles over g's three bits; every lane gets the
    result. (Column maxima in step 4; the columns' partial sums in row_stats and merge_warps.)"""
    for off in (4, 8, 16):
        x = op(x, kb.shuffle_xor(x, off))
    return x


def row_stats(cs, buf: Buffers, m, l) -> tuple:
    """The epilogue's (m, l) per O row from the S^T columns' m and per-thread partial sums: sums over
    the 8 lanes of a column and the 4 warps through SMEM; l of the thread's first row on lane quad
    t4 = 0 (the epilogue adds the quad's four), its second row (past N: never stored) 0."""
    kb = cs.kb
    warp = cs.t // 32
    is_g0 = cs.g.eq(0)
    for e in (0, 1):
        total = over_column_lanes(kb, l[e], operator.add)
        with kb.if_(is_g0).then_():
            kb.store(total, _x(buf, kb, X_SUM + (cs.t4 * 2 + e) * 4 + warp), align=4)
    with kb.if_(cs.t.lt(4)).then_():
        kb.store(vec(m[0], m[1]), _x(buf, kb, X_M + cs.t4 * 2), align=8)
    cs.barrier()
    row = cs.row0 % N
    four = kb.load(_x(buf, kb, X_SUM + row * 4), ("f32", 4), align=16)
    total = (four[0] + four[1]) + (four[2] + four[3])
    zero = const(0.0, "f32")
    m_row = kb.load(_x(buf, kb, X_M + row), "f32", align=4)
    return (m_row, const(NEG_INF, "f32")), (select(cs.t4.eq(0), total, zero), zero)


def merge_warps(cs, buf: Buffers, o: Value, m, l) -> tuple:
    """Note "Warp partials", after the last tile: (O, m, l) for the epilogue. Warp w's column n holds
    max m_w, sum l_w (its lanes' partials summed) and O row 8 w + n relative to m_w; with M = max_w
    m_w and f_w = 2^((m_w - M) scale) (0 when m_w = -inf), O = sum_w f_w O_w and l = sum_w f_w l_w:
    the rows' scaled partials meet in V's f16 tile (as float32 [32][head_dim]; every P V retired at the
    barrier), and the thread of row n (warp 0, its first row) adds the four."""
    kb, cfg = cs.kb, cs.cfg
    warp = cs.t // 32
    is_g0 = cs.g.eq(0)
    for e in (0, 1):
        total = over_column_lanes(kb, l[e], operator.add)
        with kb.if_(is_g0).then_():
            kb.store(total, _x(buf, kb, X_SUM + warp * N + cs.t4 * 2 + e), align=4)
            kb.store(m[e], _x(buf, kb, X_M + warp * N + cs.t4 * 2 + e), align=4)
    cs.barrier()
    zero, neg_inf = const(0.0, "f32"), const(NEG_INF, "f32")

    def column(n):
        ms = [kb.load(_x(buf, kb, X_M + w * N + n), "f32", align=4) for w in range(4)]
        top = fmax(fmax(ms[0], ms[1]), fmax(ms[2], ms[3]))
        safe = select(top.eq(NEG_INF), zero, top)
        f = [dsl.exp2((x - safe) * cs.scale_log2) for x in ms]     # exp2(-inf) = 0: a warp that saw no key
        total = zero
        for w in range(4):
            total = fma(kb.load(_x(buf, kb, X_SUM + w * N + n), "f32", align=4), f[w], total)
        return top, f, total

    width = cfg.head_dim
    with kb.if_(warp.lt(2)).then_():     # rows 0..31: the partials
        for h in (0, 1):
            r = cs.row0 + 8 * h
            _, f, _ = column(r % N)
            fr = select(r.lt(N), f[0], select(r.lt(2 * N), f[1], select(r.lt(3 * N), f[2], f[3])))
            for i in range(0, cs.n_o, 2):
                if acc_row(i) != h:
                    continue
                col = acc_col(i) + cs.t4 * 2
                kb.store(vec(o[i] * fr, o[i + 1] * fr), kb.gep(buf.v16, (r * width + col) * 4, "i8"), align=8)
    cs.barrier()
    n = cs.row0 % N
    top, _, total = column(n)
    out = [zero] * cs.n_o
    for i in range(0, cs.n_o, 2):
        if acc_row(i):
            continue
        col = acc_col(i) + cs.t4 * 2
        acc = [zero, zero]
        for w in range(4):
            pair = kb.load(kb.gep(buf.v16, ((n + w * N) * width + col) * 4, "i8"), ("f32", 2), align=8)
            acc = [acc[0] + pair[0], acc[1] + pair[1]]
        out[i], out[i + 1] = acc
    return vec(*out), (top, neg_inf), (select(cs.t4.eq(0), total, zero), zero)
