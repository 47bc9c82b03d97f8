"""FlashMLA's seesaw schedule of the absorbed-MLA tile step on sm_90a, shared by the dense MLA decode's
seesaw variant (attention_mla_decode_seesaw_sm90, whose opening comment is the schedule's note: the pair
algebra, "P in the rope columns", "Buffers", "Rescale", "Odd count") and the sparse MLA kernels' seesaw
variant (attention_mla_sparse_seesaw_sm90).

The two consumer warpgroups are roles of their own: warpgroup 0 (`step0`) computes S of tile a = j of a
pair over all 64 keys, warpgroup 1 (`step1`) S of tile b = j + 1, each its own softmax; O stays split
by V's columns and the two meet only through two one-way named barriers (`Tiles.bar_pa`, `bar_pb`).

What the kernels differ in is a `Tiles` object's: how a tile's stage is waited for and released (the
dense decode: nine chunk rings of TMA boxes; the sparse kernels: one ring a cp.async gather fills), how
S of a tile is issued, which keys a row sees (`mask`: the dense decode's causal and length masks, the
sparse kernels' score biases) and the V rows zeroed past a sequence's end (`zero_tail`).
"""
from __future__ import annotations

from ...dsl import Value, const, exp2, fma, fmax, tree_reduce, vec
from .mla_sm90 import BN, QK_CHUNKS, SWIZZLE, WG_CHUNKS, WG_COLS, WGMMA_K, exchange_rows, issue_pv
from .softmax import max_update
from .wgmma import a_frag_pairs, acc_row, row_regs, wait_group

M_A_AT, M_B_AT, SUM_AT = 0, 4 * 64, 8 * 64     # x_smem: m_a [64], m_b [64], the row sums [2][64] (float32)
X_BYTES = 4 * 4 * 64                           # the above: 1 KiB
P_AT = (QK_CHUNKS - 1) * BN * SWIZZLE          # note "P in the rope columns": a tile's chunk 8
P_STEPS = BN // WGMMA_K                        # 4 k16 A fragments of P


class Tiles:
    """The kernel's side of the schedule (one object a consumer role). Subclasses define:

        bar_pa, bar_pb      the named barrier ids of the two handshakes (256 threads)
        s(cs, st)           wait for the tile of ring state st; S = Q K^T over its 64 keys, issued,
                            committed and retired; returns (S, the tile's SMEM address)
        wait_all(st)        wait for the whole tile of state st (a warpgroup that only reads its V)
        tile(cs, st)        the tile's SMEM address (after a wait)
        release(st, b)      this warpgroup's release of the stage (called by its leader thread); b: the
                            pair's tile b (where the barriers of a tile's parts depend on it)
        release_other(cs, st, b)    where the stage's barriers are split (the sparse kernels' half stages), this
                            warpgroup's early release of the part it no longer reads (emitted by every
                            thread; the default emits nothing)
        pair_fill           False; True (the sparse seesaw's pair fill): step1 issues S_b by
                            s_pair_b(cs, sa, sb), which waits for tile a's parts itself, and both steps
                            release b's other part after their release of a (each ring's releases in order)
        overlap_s           False; True (the sparse seesaw's note "Overlap", with pair_fill): step0's pairs run by
                            pairs_ahead, and s_next(cs, sa, sb, o) issues S of the next pair's tile a (state sa)
                            while P_b V (o, in flight) runs, retires that P V, releases tile b (state sb) where
                            step0 would and returns (S retired, O retired)
        mask(cs, j, st)     a map of this thread's S values of tile j (None: every key seen)
        zero_tail(cs, tile, j, w)   V rows of tile j no key may read, zeroed in warpgroup w's columns
    """

    bar_pa = bar_pb = None
    pair_fill = False
    overlap_s = False

    def zero_tail(self, cs, tile, j: Value, w: int):
        pass

    def release_other(self, cs, st, b: bool = False):
        pass


def rowmax(cs, s):
    kb = cs.kb
    out = []
    for h in (0, 1):
        mx = tree_reduce([s[i] for i in row_regs(cs.n_s, h)], fmax)
        mx = fmax(mx, kb.shuffle_xor(mx, 1))
        out.append(fmax(mx, kb.shuffle_xor(mx, 2)))
    return out


def probs_f32(cs, s, neg):
    """P = exp2(S scale + neg) (float32) of both rows and this thread's row sums."""
    p = [None] * cs.n_s
    sums = []
    for h in (0, 1):
        idx = row_regs(cs.n_s, h)
        for i in idx:
            p[i] = exp2(fma(s[i], cs.scale_log2, neg[h]))
        sums.append(tree_reduce([p[i] for i in idx], lambda x, y: x + y))
    return p, sums


def frags_of(p, dtype: str):
    """The 16-bit A fragments (P_STEPS k16 steps) of this thread's float P values p (its accumulator layout)."""
    return [vec(*[vec(p[a], p[b]).to((dtype, 2)).bitcast("i32") for a, b in a_frag_pairs(kk)])
            for kk in range(P_STEPS)]


def probs(cs, s, neg, dtype: str):
    """P = exp2(S scale + neg) of both rows, its row sums (this thread's) and its A fragments."""
    p, sums = probs_f32(cs, s, neg)
    return frags_of(p, dtype), sums


def store_m(cs, m_at: int, m):
    """This thread's rows' maxima m into x_smem at m_at (one thread of each quad)."""
    kb = cs.kb
    with kb.if_(cs.t4.eq(0)).then_():
        for h in (0, 1):
            kb.store(m[h], kb.gep(cs.x_smem, m_at + (cs.row0 + 8 * h) * 4, "i8"), align=4)


def load_m(cs, m_at: int) -> list:
    """This thread's rows' maxima from x_smem at m_at."""
    kb = cs.kb
    return [kb.load(kb.gep(cs.x_smem, m_at + (cs.row0 + 8 * h) * 4, "i8"), "f32", align=4) for h in (0, 1)]


def publish(cs, m_at: int, m, frags, tile, barrier: int):
    """m (this thread's rows) and P's fragments into SMEM (note "P in the rope columns"), fenced, then arrive on
    `barrier` (the other warpgroup syncs on it)."""
    kb = cs.kb
    store_m(cs, m_at, m)
    for k, f in enumerate(frags):
        kb.store(f, kb.gep(tile, P_AT + (k * 128 + cs.t) * 16, "i8"), align=16)
    kb.fence("async_smem")
    kb.named_barrier_arrive(barrier, 256)


def receive(cs, m_at, tile, barrier: int):
    """Sync on `barrier`, then the other warpgroup's row maxima (this thread's rows) and P fragments."""
    kb = cs.kb
    kb.named_barrier(barrier, 256)
    m = load_m(cs, m_at)
    return m, load_p(cs, tile)


def load_p(cs, tile):
    """The other warpgroup's P fragments from the tile's rope columns (after its barrier)."""
    return [cs.kb.load(cs.kb.gep(tile, P_AT + (k * 128 + cs.t) * 16, "i8"), ("i32", 4), align=16)
            for k in range(P_STEPS)]


def remote_pv(cs, tile, frags, o: Value, dtype: str) -> Value:
    """O_w += P V over this warpgroup's V columns of ``tile`` with the other warpgroup's P fragments (receive's)."""
    return issue_pv(cs, v_of(cs, tile), frags, o, dtype)


def v_of(cs, tile):
    """This warpgroup's V columns of a tile (its four 64-column chunks)."""
    return cs.kb.gep(tile, cs.wg * (WG_CHUNKS * BN * SWIZZLE), "i8")


def scaled(o, factor):
    return vec(*[o[i] * factor[acc_row(i)] for i in range(WG_COLS // 2)])


def _own_pv(cs, tiles: Tiles, dtype: str, j: Value, sa, tile_a, s_acc: Value, o, m, l, masked: bool):
    """mma0's tile a from its S (retired): the softmax relative to m_a, P_a and m_a published, a's other part
    released (half stages), O rescaled, P_a V_a issued (in flight). Returns (o, m_a, l)."""
    s = [s_acc[i] for i in range(cs.n_s)]
    if masked:
        s = tiles.mask(cs, j, sa)(s)
    mx = rowmax(cs, s)
    upd = [max_update(m[h], mx[h], cs.scale_log2, 0.0) for h in (0, 1)]
    m_a = [u[0] for u in upd]
    frags, sums = probs(cs, s, [u[2] for u in upd], dtype)
    l = [fma(l[h], upd[h][1], sums[h]) for h in (0, 1)]
    publish(cs, M_A_AT, m_a, frags, tile_a, tiles.bar_pa)
    tiles.release_other(cs, sa)         # (half stages) S_a retired, P_a published
    o = scaled(o, [u[1] for u in upd])
    if masked:
        tiles.zero_tail(cs, tile_a, j, 0)
    return issue_pv(cs, v_of(cs, tile_a), frags, o, dtype), m_a, l


def _take_b(cs, tiles: Tiles, j: Value, sa, o, m_a, l, masked: bool):
    """mma0's share of tile b: the tile waited for, m_b and P_b received (bar_pb), P_a V_a retired and a
    released, O and l rescaled to m_b, V_b's rows past the end zeroed. Returns (sb, tile_b, P_b, o, m_b, l)."""
    kb = cs.kb
    sb = sa.advance()
    tiles.wait_all(sb)
    tile_b = tiles.tile(cs, sb)
    m_b, frags_b = receive(cs, M_B_AT, tile_b, tiles.bar_pb)
    if not tiles.pair_fill:
        tiles.release_other(cs, sb, b=True)     # (half stages) P_b read
    down = [max_update(m_a[h], m_b[h], cs.scale_log2, 0.0)[1] for h in (0, 1)]     # exp2(m_a - m_b)
    o = wait_group(o, pending=0)
    with kb.if_(cs.is_leader).then_():
        tiles.release(sa)
    if tiles.pair_fill:
        tiles.release_other(cs, sb, b=True)     # (pair fill) after a's release: that ring's order
    o = scaled(o, down)
    l = [l[h] * down[h] for h in (0, 1)]
    if masked:
        tiles.zero_tail(cs, tile_b, j + 1, 0)
    return sb, tile_b, frags_b, o, m_b, l


def step0(cs, tiles: Tiles, dtype: str, j: Value, carry, masked: bool, pair: bool):
    """mma0: S of tile a = j, its softmax relative to m_a, P_a V_a; (pair) P_b V_b after the rescale to m_b."""
    kb = cs.kb
    sa, o, m, l = carry
    s_acc, tile_a = tiles.s(cs, sa)
    o, m_a, l = _own_pv(cs, tiles, dtype, j, sa, tile_a, s_acc, o, m, l, masked)
    if not pair:
        o = wait_group(o, pending=0)
        with kb.if_(cs.is_leader).then_():
            tiles.release(sa)
        return sa.advance(), o, tuple(m_a), tuple(l)
    sb, tile_b, frags_b, o, m_b, l = _take_b(cs, tiles, j, sa, o, m_a, l, masked)
    o = wait_group(remote_pv(cs, tile_b, frags_b, o, dtype), pending=0)
    with kb.if_(cs.is_leader).then_():
        tiles.release(sb, b=True)
    return sb.advance(), o, tuple(m_b), tuple(l)


def _pair0_ahead(cs, tiles: Tiles, dtype: str, j: Value, carry, s_acc: Value, masked: bool, ahead: bool):
    """step0's pair (pair fill) with S_a given, retired (`s_acc`: issued by the pair before or by pairs_ahead);
    ahead: the next pair's S_a issued after P_b V, before P_b V retires (Tiles.s_next). Returns (state, S_a of
    the next pair or None)."""
    kb = cs.kb
    sa, o, m, l = carry
    tile_a = tiles.tile(cs, sa)
    o, m_a, l = _own_pv(cs, tiles, dtype, j, sa, tile_a, s_acc, o, m, l, masked)
    sb, tile_b, frags_b, o, m_b, l = _take_b(cs, tiles, j, sa, o, m_a, l, masked)
    o = remote_pv(cs, tile_b, frags_b, o, dtype)
    sn = sb.advance()
    if ahead:
        s_next, o = tiles.s_next(cs, sn, sb, o)
        return (sn, o, tuple(m_b), tuple(l)), s_next
    o = wait_group(o, pending=0)
    with kb.if_(cs.is_leader).then_():
        tiles.release(sb, b=True)
    return (sn, o, tuple(m_b), tuple(l)), None


def pairs_ahead(cs, tiles: Tiles, dtype: str, lo, hi, state, masked: bool):
    """Warpgroup 0's pairs of [lo, hi) (hi - lo even; the first segment: state[0] is the ring's initial state) with
    Tiles.overlap_s: where there is a pair, S_a of the first issued and retired, then every pair but the last issues
    the next pair's S_a under its P_b V (_pair0_ahead), and the last pair (peeled) does not. The branch yields the
    count of tiles it used (the loop carries it, 2 a pair: fa4-verify-pipelines follows a ring through an scf.if
    by such a count) and the ring state after it is kv_pipe.state_at of it. Returns the state after the pairs."""
    kb = cs.kb
    lo, hi = (v if isinstance(v, Value) else const(v) for v in (lo, hi))
    br = kb.if_(lo.slt(hi), results=(state[1:], "i32"))
    with br.then_():
        s_acc, _ = tiles.s(cs, state[0])
        loop = kb.for_(lo, hi - 2, 2, carry=(state, s_acc, const(0)))
        with loop as (j, carried):
            loop.yield_(*_pair0_ahead(cs, tiles, dtype, j, carried[0], carried[1], masked, True), carried[2] + 2)
        last, s_acc, used = loop.results
        br.yield_(_pair0_ahead(cs, tiles, dtype, hi - 2, last, s_acc, masked, False)[0][1:], used + 2)
    with br.else_():
        br.yield_(state[1:], const(0))
    rest, used = br.results
    return (tiles.kv_pipe.state_at(used), *rest)


def _take_a(cs, tiles: Tiles, dtype: str, sa, j: Value, o, m, l, masked: bool):
    """mma1's share of tile a: sync on bar_pa, O_1 and l_1 rescaled to m_a, V_a's rows past the end
    zeroed (S_a retired before mma0's arrival), P_a V_a issued (in flight). Returns (o, m_a, l)."""
    tile_a = tiles.tile(cs, sa)
    m_a, frags_a = receive(cs, M_A_AT, tile_a, tiles.bar_pa)
    alpha = [max_update(m[h], m_a[h], cs.scale_log2, 0.0)[1] for h in (0, 1)]     # exp2(m - m_a)
    o = scaled(o, alpha)
    l = [l[h] * alpha[h] for h in (0, 1)]
    if masked:
        tiles.zero_tail(cs, tile_a, j, 1)
    return remote_pv(cs, tile_a, frags_a, o, dtype), m_a, l


def step1(cs, tiles: Tiles, dtype: str, j: Value, carry, masked: bool, pair: bool):
    """mma1: (pair) S of tile b = j + 1; O_1 += P_a V_a relative to m_a, issued before its own
    softmax (relative to m_b = max(m_a, rowmax S_b)) so that it runs under it; then O_1 rescaled to
    m_b and O_1 += P_b V_b over its 256 columns (note "Rescale")."""
    kb = cs.kb
    sa, o, m, l = carry
    if not pair:        # note "Odd count": m = m_a
        tiles.wait_all(sa)
        tiles.release_other(cs, sa)     # (half stages) mma1 reads only P_a and its V half of tile a
        o, m_a, l = _take_a(cs, tiles, dtype, sa, j, o, m, l, masked)
        o = wait_group(o, pending=0)
        with kb.if_(cs.is_leader).then_():
            tiles.release(sa)
        return sa.advance(), o, tuple(m_a), tuple(l)
    sb = sa.advance()
    if tiles.pair_fill:     # S_b's first part waits for less than tile a whole
        s_acc, tile_b = tiles.s_pair_b(cs, sa, sb)
    else:
        tiles.wait_all(sa)     # tile a is filled before b (dense: its chunks are committed before b's)
        tiles.release_other(cs, sa)     # (half stages) mma1 reads only P_a and its V half of tile a
        s_acc, tile_b = tiles.s(cs, sb)
    s = [s_acc[i] for i in range(cs.n_s)]
    if masked:
        s = tiles.mask(cs, j + 1, sb)(s)
    mx = rowmax(cs, s)
    if not tiles.pair_fill:
        tiles.release_other(cs, sb, b=True)     # (half stages) S_b retired, its biases read
    o, m_a, l = _take_a(cs, tiles, dtype, sa, j, o, m, l, masked)
    upd = [max_update(m_a[h], mx[h], cs.scale_log2, 0.0) for h in (0, 1)]
    m_b = [u[0] for u in upd]
    frags_b, sums = probs(cs, s, [u[2] for u in upd], dtype)
    publish(cs, M_B_AT, m_b, frags_b, tile_b, tiles.bar_pb)
    o = wait_group(o, pending=0)
    with kb.if_(cs.is_leader).then_():
        tiles.release(sa)
    if tiles.pair_fill:
        tiles.release_other(cs, sb, b=True)     # (pair fill) after a's release: that ring's order
    o = scaled(o, [u[1] for u in upd])                                               # exp2(m_a - m_b)
    l = [fma(l[h], upd[h][1], sums[h]) for h in (0, 1)]
    if masked:
        tiles.zero_tail(cs, tile_b, j + 1, 1)
    o = wait_group(issue_pv(cs, v_of(cs, tile_b), frags_b, o, dtype), pending=0)
    with kb.if_(cs.is_leader).then_():
        tiles.release(sb, b=True)
    return sb.advance(), o, tuple(m_b), tuple(l)


def run(cs, tiles: Tiles, dtype: str, w: int, segments, state):
    """Warpgroup w's loops over `segments`, (lo, hi, pair, masked) each: pairs (step 2) or single tiles
    from lo to hi; state (ring state, O, m, l) carried through. Returns the final state."""
    kb = cs.kb
    step = step0 if w == 0 else step1
    for lo, hi, pair, masked in segments:
        if pair and w == 0 and tiles.overlap_s:
            state = pairs_ahead(cs, tiles, dtype, lo, hi, state, masked)
            continue
        loop = kb.for_(lo, hi, 2 if pair else 1, carry=state)
        with loop as (j, carried):
            loop.yield_(*step(cs, tiles, dtype, j, carried, masked, pair))
        state = loop.results
    return state


def initial(cs, ring):
    """The loops' first state: ring.initial_state(), O = 0, m = -inf, l = 0."""
    f32 = "f32"
    neg_inf, zero = const(float("-inf"), f32), const(0.0, f32)
    return ring.initial_state(), const(0.0, (f32, cs.n_o)), (neg_inf, neg_inf), (zero, zero)


def totals(cs, l) -> list:
    """Both rows' softmax denominators l = l_0 + l_1 (each quad-reduced; warpgroup 0's first: the same
    bits in both) through x_smem's row sums."""
    kb = cs.kb
    out = []
    for h in (0, 1):
        total = l[h] + kb.shuffle_xor(l[h], 1)
        out.append(total + kb.shuffle_xor(total, 2))
    return exchange_rows(cs, out, SUM_AT, lambda a, b: a + b)


__all__ = ["Tiles", "M_A_AT", "M_B_AT", "SUM_AT", "X_BYTES", "P_AT", "P_STEPS", "rowmax", "probs", "probs_f32", "frags_of",
           "store_m", "load_m", "publish", "receive", "load_p",
           "remote_pv", "v_of", "scaled", "step0", "step1", "pairs_ahead", "run", "initial", "totals"]
