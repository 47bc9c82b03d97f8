"""The absorbed-MLA tile step on sm_90a, shared by the MLA decode (attention_mla_decode_sm90) and the
sparse prefill (attention_mla_sparse_sm90): a 64-row Q tile of 576 columns in SMEM, a 64 x 576 KV
tile (K = the whole row, V = its first 512 columns) per ring stage, two consumer warpgroups each
owning 256 of V's columns of O, S's keys split between them with the row maxima, P and the row
sums exchanged through SMEM (attention_mla_decode_sm90, notes "Design" and "Exchange").

What the kernels differ in stays with them: where Q's rows come from (`load_q`'s `row_source`),
which keys a row sees (`softmax`'s `mask`), how tiles arrive (TMA boxes, a cp.async gather) and the
epilogue's outputs.
"""
from __future__ import annotations

from ... import dsl
from ...dialect import builders as fa4
from ...dsl import Value, const, fma, fmax, tree_reduce, undef, vec
from .softmax import max_update
from .wgmma import a_frag_pairs, row_regs

D_QK = 576                      # latent 512 + rope 64: q's and the cache's head dim
D_V = 512                       # V: the cache's first 512 columns
BN = 64                         # keys per KV tile
TILE_M = 64                     # query rows per CTA: one wgmma M, shared by both consumer warpgroups
CONSUMERS = 2                   # warpgroups; each owns 256 of V's 512 columns of O
SWIZZLE = 128                   # bytes per swizzled row: 64 16-bit columns
CHUNK = 64                      # columns per swizzle chunk
UNITS = SWIZZLE // 16           # 16-byte units per swizzled row
QK_CHUNKS = D_QK // CHUNK       # 9
WG_COLS = D_V // CONSUMERS      # 256 V columns of O per warpgroup
WG_CHUNKS = WG_COLS // CHUNK    # 4
WGMMA_K = 16
LN2 = 0.6931471805599453
NEG_INF = float("-inf")
BAR_ALL = 1                     # named barrier of both consumer warpgroups (256 threads)
BAR_WG = 2                      # + w: warpgroup w's own (128 threads)

# note "Exchange" SMEM: P words [warpgroup][k-step][thread][4 words], then row maxima and row sums
# [warpgroup][row] float32
X_STEPS = BN // CONSUMERS // WGMMA_K          # k16 steps of P per warpgroup
X_P_BYTES = CONSUMERS * X_STEPS * 128 * 16
X_MAX_AT, X_SUM_AT = X_P_BYTES, X_P_BYTES + CONSUMERS * TILE_M * 4


def tile_bytes() -> int:
    """One KV tile: 64 rows x 576 16-bit columns."""
    return BN * D_QK * 2


def exchange_bytes(exchange: bool) -> int:
    """note "Exchange": each warpgroup's P half (64 x 32 16-bit) and row maxima, and the row sums."""
    return CONSUMERS * (TILE_M * BN // CONSUMERS * 2 + TILE_M * 4) + CONSUMERS * TILE_M * 4 if exchange else 0


class ConsumerGeometry:
    """A consumer thread's geometry: warpgroup w (its V columns 256 w ..), rows row0, row0 + 8 of
    the 64, its S keys (exchange: 32 w .. 32 w + 31, else all 64)."""

    def __init__(self, kb, exchange: bool, scale_log2: Value, x_smem=None):
        self.kb, self.x_smem = kb, x_smem
        tid = kb.thread_idx(0)
        self.tid = tid                      # 0 .. 255
        self.wg = kb.warp_uniform(tid // 128)
        self.t = tid % 128
        lane = self.t % 32
        self.t4 = lane % 4
        self.row0 = (self.t // 32) * 16 + lane // 4
        self.exchange = exchange
        self.s_keys = BN // CONSUMERS if exchange else BN     # keys of S this warpgroup computes
        self.n_s = self.s_keys // 2
        self.key0 = self.wg * self.s_keys if exchange else const(0)   # its first key in the tile
        self.n_o = WG_COLS // 2
        self.is_leader = self.t.eq(0)
        self.scale_log2 = scale_log2


def load_q(cs: ConsumerGeometry, q_smem, q_slot, dtype: str, q_ptr: Value, row_source):
    """Q's 64 rows x 576 into SMEM by all 256 consumer threads (128B swizzle: chunk c of row r at
    c * 64 * 128 + r * 128, 16-byte unit u at (u ^ r % 8) * 16). row_source(r, cu) gives (ok, the
    element index of row r's 16-byte unit cu in q) with ok None (every row real) or an i1: rows
    not ok land as zeros and read nothing."""
    kb = cs.kb
    units = QK_CHUNKS * UNITS
    zero = const(0, ("i32", 4))
    for i in range(TILE_M * units // 256):
        u = cs.tid + 256 * i
        r = u // units
        cu = u - r * units
        c, unit = cu // UNITS, cu % UNITS
        ok, index = row_source(r, cu)
        if ok is None:
            val = kb.load(kb.gep(q_ptr, index, dtype), ("i32", 4), align=16)
        else:
            safe = dsl.select(ok, index, const(0, "i64"))
            val = dsl.select(ok, kb.load(kb.gep(q_ptr, safe, dtype), ("i32", 4), align=16), zero)
        off = c * (TILE_M * SWIZZLE) + r * SWIZZLE + (unit ^ (r % 8)) * 16
        kb.store(val, kb.gep(q_smem, off, "i8"), align=16)
    with kb.if_(cs.tid.eq(0)).then_():
        kb.store(const(0), q_slot, align=4)
    kb.fence("async_smem")
    kb.named_barrier(BAR_ALL, 256)


def issue_s(cs: ConsumerGeometry, q_smem, kv_base, dtype: str, at_chunk: tuple | None = None,
            first_chunk: int = 0) -> Value:
    """S = Q K^T over all 576 columns of the tile at kv_base (exchange: this warpgroup's 32 keys).
    at_chunk (c, emit): emit() runs before the first wgmma of column chunk c (a wait for the tile's
    columns from 64 c on: the sparse kernel's half stages); None: the wgmmas back to back. first_chunk:
    the column chunks issued from that one on, then those before it (the sparse seesaw's pair fill issues
    S_b's second half first); the first wgmma issued starts the accumulator."""
    kb = cs.kb
    acc = undef(("f32", cs.n_s))
    key_off = cs.key0 * SWIZZLE if cs.exchange else 0      # this warpgroup's keys: rows of the tile
    fa4.mma_fence()
    steps = D_QK // WGMMA_K
    first = first_chunk * (CHUNK // WGMMA_K)
    for n in range(steps):
        kk = (first + n) % steps
        c, within = divmod(kk, CHUNK // WGMMA_K)
        if at_chunk is not None and (c, within) == (at_chunk[0], 0):
            at_chunk[1]()
        off = within * WGMMA_K * 2
        a_d = fa4.smem_desc(kb.gep(q_smem, c * TILE_M * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
        b_d = fa4.smem_desc(kb.gep(kv_base, c * BN * SWIZZLE + key_off + off, "i8"), swizzle=SWIZZLE, lbo=16,
                            sbo=8 * SWIZZLE)
        acc = Value(fa4.mma(a_d, b_d, const(int(n > 0), "i1"), [acc], result_types=[acc.type], m=64, n=cs.s_keys,
                            k=WGMMA_K, a_source="smem", ab_dtype=dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return acc


def issue_pv(cs: ConsumerGeometry, v_base, frags: list, o: Value, dtype: str) -> Value:
    """O_w += P V[:, 256 w ..] from this warpgroup's four column chunks of the tile (v_base: chunk 4 w)."""
    kb = cs.kb
    fa4.mma_fence()
    for kk in range(BN // WGMMA_K):
        b_d = fa4.smem_desc(kb.gep(v_base, kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE, lbo=BN * SWIZZLE,
                            sbo=8 * SWIZZLE)
        o = Value(fa4.mma(frags[kk], b_d, const(1, "i1"), [o], result_types=[o.type], m=64, n=WG_COLS, k=WGMMA_K,
                          a_source="regs", b_major="mn", ab_dtype=dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return o


def softmax(cs: ConsumerGeometry, s_acc: Value, mask, m_prev, l_prev, dtype: str):
    """Online softmax of S_j (base 2, scale folded in); mask (None: every key seen) maps this
    thread's S values to themselves or -inf. Exchange: the row maxima over both warpgroups' keys,
    and P of all 64 keys (note "Exchange"); l stays this warpgroup's."""
    kb = cs.kb
    s = [s_acc[i] for i in range(cs.n_s)]
    if mask is not None:
        s = mask(s)
    maxes = []
    for h in (0, 1):
        mx = tree_reduce([s[i] for i in row_regs(cs.n_s, h)], fmax)
        mx = fmax(mx, kb.shuffle_xor(mx, 1))
        maxes.append(fmax(mx, kb.shuffle_xor(mx, 2)))
    if cs.exchange:
        maxes = exchange_rows(cs, maxes, X_MAX_AT, fmax)
    p = [None] * cs.n_s
    m_new, l_new, alpha = [], [], []
    for h in (0, 1):
        idx = row_regs(cs.n_s, h)
        m, a, neg = max_update(m_prev[h], maxes[h], cs.scale_log2, 0.0)
        row_p = [dsl.exp2(fma(s[i], cs.scale_log2, neg)) for i in idx]
        for i, v in zip(idx, row_p):
            p[i] = v
        m_new.append(m)
        alpha.append(a)
        l_new.append(fma(l_prev[h], a, tree_reduce(row_p, lambda x, y: x + y)))
    frags = []
    for kk in range(cs.s_keys // WGMMA_K):
        words = [vec(p[a], p[b]).to((dtype, 2)).bitcast("i32") for a, b in a_frag_pairs(kk)]
        frags.append(vec(*words))
    if cs.exchange:
        frags = exchange_p(cs, frags)
    return frags, m_new, l_new, alpha


def exchange_rows(cs: ConsumerGeometry, vals: list, at: int, combine) -> list:
    """Both rows' values (quad-reduced) of both warpgroups combined, warpgroup 0's first (the same
    operands in both: the same bits): lane t4 = 0 of each quad writes its warpgroup's, one barrier
    of both warpgroups, every thread reads both (note "Exchange")."""
    kb = cs.kb
    with kb.if_(cs.t4.eq(0)).then_():
        for h in (0, 1):
            kb.store(vals[h], kb.gep(cs.x_smem, at + (cs.wg * TILE_M + cs.row0 + 8 * h) * 4, "i8"), align=4)
    kb.named_barrier(BAR_ALL, 256)
    out = []
    for h in (0, 1):
        both = [kb.load(kb.gep(cs.x_smem, at + (w * TILE_M + cs.row0 + 8 * h) * 4, "i8"), "f32", align=4)
                for w in range(CONSUMERS)]
        out.append(combine(both[0], both[1]))
    return out


def exchange_p(cs: ConsumerGeometry, frags: list) -> list:
    """P's A fragments of all 64 keys: this warpgroup's X_STEPS k-steps written as thread t's words,
    one barrier, then every k-step read back in key order (warpgroup 0's keys first). Thread t holds
    the same rows and columns of a fragment in either warpgroup, so it reads the other's thread t."""
    kb = cs.kb
    for k, f in enumerate(frags):
        kb.store(f, kb.gep(cs.x_smem, ((cs.wg * X_STEPS + k) * 128 + cs.t) * 16, "i8"), align=16)
    kb.named_barrier(BAR_ALL, 256)
    return [kb.load(kb.gep(cs.x_smem, (k * 128 + cs.t) * 16, "i8"), ("i32", 4), align=16)
            for k in range(CONSUMERS * X_STEPS)]


def row_totals(cs: ConsumerGeometry, l) -> list:
    """Both rows' full softmax denominators: this thread's partial sums summed over its quad and
    (exchange) over both warpgroups' keys."""
    kb = cs.kb
    totals = []
    for h in (0, 1):
        total = l[h] + kb.shuffle_xor(l[h], 1)
        totals.append(total + kb.shuffle_xor(total, 2))
    if cs.exchange:    # each warpgroup summed its own keys' P (note "Exchange")
        totals = exchange_rows(cs, totals, X_SUM_AT, lambda a, b: a + b)
    return totals


__all__ = ["D_QK", "D_V", "BN", "TILE_M", "CONSUMERS", "SWIZZLE", "CHUNK", "UNITS", "QK_CHUNKS", "WG_COLS",
           "WG_CHUNKS", "WGMMA_K", "LN2", "NEG_INF", "BAR_ALL", "BAR_WG", "tile_bytes", "exchange_bytes",
           "ConsumerGeometry", "load_q", "issue_s", "issue_pv", "softmax", "exchange_rows", "exchange_p",
           "row_totals"]


def zero_rows_from(kb, t: Value, base, valid: Value, chunks: int) -> None:
    """Rows [valid, BN) of ``chunks`` swizzled 64-column chunks at ``base`` to zeros, by 128 threads
    (thread t stores the 16-byte units t, t + 128, ...): the V tail past L_b (note "NaN past L_b" of the
    decode kernels). No fence or barrier: the caller publishes the stores."""
    zero = const(0, ("i32", 4))
    for i in range(chunks * BN * UNITS // 128):
        u = t + 128 * i
        r = (u % (BN * UNITS)) // UNITS
        with kb.if_(r.sge(valid)).then_():
            kb.store(zero, kb.gep(base, u * 16, "i8"), align=16)
