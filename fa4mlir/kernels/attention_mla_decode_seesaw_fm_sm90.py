"""FlashMLA's order of the seesaw pair on sm_90a (MLADecodeConfig.seesaw_fm, variant seesaw_fm; opt-in): the
roles of attention_mla_decode_seesaw_sm90 (its chunk rings, masks, producer warp, "SMEM P") with each
warpgroup's P V over its own P issued first and the tile halves released as soon as their last reader
retired, so the producer refills half a tile while the pair is still running.

Why: the seesaw's pair holds both ring stages, and each warpgroup releases a tile only after its last
P V on it, so both tiles of pair i + 1 are fetched only at the end of pair i and warpgroup 1 waits
for tile a's chunks at the start of every pair (the H200 profile: ~10 % of the stall samples on
those chunk waits). A tile's columns have few readers: chunks 0..3 (V[:, :256]) are read by S of the
tile and by warpgroup 0's P V, chunks 4..7 by S and warpgroup 1's P V, chunk 8 (rope) by S and then
hold P. Each warpgroup releases the chunks it is done with (per ring: its one arrival), so the pair's
schedule decides when a half comes free:

    mma0, pair i (S_a, V_a[:, :256])            mma1, pair i (S_b, V_b[:, 256:])
    S_a = Q K_a^T, chunks 0..8                  wait all of a; release a 0..3 (never read)
    m_a = max(m, rowmax S_a) -> SMEM            S_b = Q K_b^T, chunks 4..8 then 0..3; release b 0..3
    arrive BAR_MA  ------------------------>    mx_b = rowmax S_b; sync BAR_MA; read m_a
    P_a = exp2(S_a - m_a) (float, kept)         m_b = max(m_a, mx_b); P_b = exp2(S_b - m_b)
    O_0 = O_0 exp2(m - m_a) + P_a V_a[:, :256]  l_1 = l_1 exp2(m - m_b) + sum P_b
    (retired) release a 0..7                    m_b -> SMEM, P_b -> b's chunk 8 (swizzled), fence
    sync BAR_PB  <-------------------------     arrive BAR_PB
    read m_b; beta = exp2(m_a - m_b)            O_1 = O_1 exp2(m - m_b) + P_b V_b[:, 256:]  (local)
    P_a' = P_a beta -> a's chunk 8, fence
    arrive BAR_PA  ------------------------>    sync BAR_PA
    O_0, l_0 *= beta; wait b; release b 4..7   O_1 += P_a' V_a[:, 256:]  (SS: P_a' from SMEM)
    O_0 += P_b V_b[:, :256] (SS)                (P_b V_b retired) release b 4..8
    (retired) release b 0..3, 8; a 8           (P_a' V_a retired) release a 4..8

Tile a's chunks 0..3 come free once warpgroup 0's own P V retired (early in the pair), b's 4..7 once
warpgroup 1's own P V retired; the producer fetches tile a's chunks in order 0..8 and tile b's in
order 4..8, 0..3 (b's 4..7 come free first), and warpgroup 1 computes S_b in that order (FlashMLA's
order). P_a' is P_a rescaled in float32 and rounded to bf16 once (the default seesaw's P_a is relative
to m_a and O_1 is rescaled instead). Both warpgroups end the pair at m_b (the same bits: mma0 reads
mma1's). l = l_0 + l_1 at the end as in the seesaw.

Note "Buffers": m_a, m_b, each tile's chunk 8. mma0 rewrites m_a of pair i + 1 after BAR_PB of pair i,
which mma1 arrives after reading m_a of pair i; mma1 rewrites m_b of pair i + 1 after BAR_MA of pair
i + 1, which mma0 arrives after reading m_b of pair i. Chunk 8 of a tile holds P only after the
tile's S retired (S_a: mma0's own, before it writes P_a'; S_b: mma1's own, before P_b), and is refilled
only after both warpgroups released it (after the P V that reads it retired). Each named barrier sees
one arrive and one sync a step.

Note "Odd count": a lone last tile a: mma0 as in a pair up to P_a (beta = 1: P_a itself into chunk 8,
then BAR_PA); mma1 syncs BAR_MA (m = m_a: O_1, l_1 rescaled) and BAR_PA and adds P_a V_a[:, 256:].
"""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import const, fma
from .attention_mla_decode_sm90_config import BN, MLADecodeConfig
from .common import mla_seesaw_sm90 as seesaw
from .common.mla_seesaw_sm90 import M_A_AT, M_B_AT, P_AT
from .common.mla_sm90 import CHUNK, QK_CHUNKS, SWIZZLE
from .common.softmax import max_update
from .common.wgmma import acc_row, wait_group

BAR_MA = 4                  # mma0 -> mma1: m_a written
BAR_PB = 5                  # mma1 -> mma0: m_b and P_b written
BAR_PA = 6                  # mma0 -> mma1: P_a' written
V0, V1, ROPE = (0, 1, 2, 3), (4, 5, 6, 7), (8,)     # a tile's chunks: V[:, :256], V[:, 256:], the rope / P
A_ORDER = tuple(range(QK_CHUNKS))                   # producer and S order of tile a (even offset in the split)
B_ORDER = V1 + ROPE + V0                            # ... of tile b: its first-freed half first


def _release(cs, chunks, st, which):
    """This warpgroup's arrival on the rings of chunks `which` of the tile of state st (its leader)."""
    with cs.kb.if_(cs.is_leader).then_():
        for c in which:
            chunks.pipes[c].consumer_release(st)


def _wait(chunks, st, which):
    for c in which:
        chunks.pipes[c].consumer_wait(st)


def step0(cs, t, dtype: str, j, carry, masked: bool, pair: bool):
    """mma0's step over tile a = j (and, pair, b = j + 1): the left column of the note's table."""
    kb = cs.kb
    sa, o, m, l = carry
    s_acc, tile_a = t.s(cs, sa, A_ORDER)
    s = [s_acc[i] for i in range(cs.n_s)]
    if masked:
        s = t.mask(cs, j, sa)(s)
    mx = seesaw.rowmax(cs, s)
    upd = [max_update(m[h], mx[h], cs.scale_log2, 0.0) for h in (0, 1)]
    m_a = [u[0] for u in upd]
    seesaw.store_m(cs, M_A_AT, m_a)
    kb.named_barrier_arrive(BAR_MA, 256)
    p, sums = seesaw.probs_f32(cs, s, [u[2] for u in upd])
    l = [fma(l[h], upd[h][1], sums[h]) for h in (0, 1)]
    o = seesaw.scaled(o, [u[1] for u in upd])
    if masked:
        t.zero_tail(cs, tile_a, j, 0)
    o = wait_group(seesaw.issue_pv(cs, seesaw.v_of(cs, tile_a), seesaw.frags_of(p, dtype), o, dtype), pending=0)
    _release(cs, t.chunks, sa, V0 + V1)             # S_a and P_a V_a retired; chunk 8 gets P_a' below
    if pair:
        m_b = _load_m_after(cs, BAR_PB)
        beta = [max_update(m_a[h], m_b[h], cs.scale_log2, 0.0)[1] for h in (0, 1)]     # exp2(m_a - m_b)
        p = [p[i] * beta[acc_row(i)] for i in range(cs.n_s)]
    seesaw.store_p_matrix(cs, seesaw.frags_of(p, dtype), kb.gep(tile_a, P_AT, "i8"))
    kb.fence("async_smem")
    kb.named_barrier_arrive(BAR_PA, 256)
    if not pair:
        _release(cs, t.chunks, sa, ROPE)
        return sa.advance(), o, tuple(m_a), tuple(l)
    sb = sa.advance()
    o = seesaw.scaled(o, beta)
    l = [l[h] * beta[h] for h in (0, 1)]
    _wait(t.chunks, sb, B_ORDER)
    _release(cs, t.chunks, sb, V1)                  # mma0 never reads b's V[:, 256:]
    tile_b = t.tile(cs, sb)
    if masked:
        t.zero_tail(cs, tile_b, j + 1, 0)           # S_b retired before mma1's BAR_PB
    o = wait_group(seesaw.issue_pv_smem(cs, seesaw.v_of(cs, tile_b), tile_b, o, dtype), pending=0)
    _release(cs, t.chunks, sa, ROPE)                # P_a' written and fenced before BAR_PA (a's before b's: in order)
    _release(cs, t.chunks, sb, V0 + ROPE)
    return sb.advance(), o, tuple(m_b), tuple(l)


def _load_m_after(cs, barrier: int):
    cs.kb.named_barrier(barrier, 256)
    return seesaw.load_m(cs, M_B_AT)


def step1(cs, t, dtype: str, j, carry, masked: bool, pair: bool):
    """mma1's step: the right column of the note's table (pair) or the lone tile a (note "Odd count")."""
    kb = cs.kb
    sa, o, m, l = carry
    _wait(t.chunks, sa, A_ORDER)                    # all of a first (the rings' waits go in ring order; the
    _release(cs, t.chunks, sa, V0)                  # producer fills a before b); mma1 never reads a's V[:, :256]
    if pair:
        sb = sa.advance()
        s_acc, tile_b = t.s(cs, sb, B_ORDER)
        _release(cs, t.chunks, sb, V0)              # S_b retired: mma1 reads only b's V[:, 256:] and P_b now
        s = [s_acc[i] for i in range(cs.n_s)]
        if masked:
            s = t.mask(cs, j + 1, sb)(s)
        mx = seesaw.rowmax(cs, s)
    kb.named_barrier(BAR_MA, 256)
    m_a = seesaw.load_m(cs, M_A_AT)
    if pair:
        upd = [max_update(m_a[h], mx[h], cs.scale_log2, 0.0) for h in (0, 1)]
        m_new = [u[0] for u in upd]
        p, sums = seesaw.probs_f32(cs, s, [u[2] for u in upd])
        frags_b = seesaw.frags_of(p, dtype)
        seesaw.store_m(cs, M_B_AT, m_new)
        seesaw.store_p_matrix(cs, frags_b, kb.gep(tile_b, P_AT, "i8"))
        kb.fence("async_smem")
        kb.named_barrier_arrive(BAR_PB, 256)
    else:
        m_new = m_a
    alpha = [max_update(m[h], m_new[h], cs.scale_log2, 0.0)[1] for h in (0, 1)]      # exp2(m - m_new)
    o = seesaw.scaled(o, alpha)
    if pair:
        l = [fma(l[h], alpha[h], sums[h]) for h in (0, 1)]
        if masked:
            t.zero_tail(cs, tile_b, j + 1, 1)
        o = seesaw.issue_pv(cs, seesaw.v_of(cs, tile_b), frags_b, o, dtype)
    else:
        l = [l[h] * alpha[h] for h in (0, 1)]
    kb.named_barrier(BAR_PA, 256)
    tile_a = t.tile(cs, sa)
    if masked:
        t.zero_tail(cs, tile_a, j, 1)               # S_a retired before mma0's BAR_MA
    o = wait_group(seesaw.issue_pv_smem(cs, seesaw.v_of(cs, tile_a), tile_a, o, dtype), pending=0)
    _release(cs, t.chunks, sa, V1 + ROPE)
    if not pair:
        return sa.advance(), o, tuple(m_new), tuple(l)
    _release(cs, t.chunks, sb, V1 + ROPE)
    return sb.advance(), o, tuple(m_new), tuple(l)


def run(cs, t, dtype: str, w: int, segments, state):
    """mla_seesaw_sm90.run with this module's steps."""
    kb = cs.kb
    step = step0 if w == 0 else step1
    for lo, hi, pair, masked in segments:
        loop = kb.for_(lo, hi, 2 if pair else 1, carry=state)
        with loop as (j, carried):
            loop.yield_(*step(cs, t, dtype, j, carried, masked, pair))
        state = loop.results
    return state


def load_tile(kb, cfg: MLADecodeConfig, p, kv_smem, chunks, s, origins, order):
    """The producer's TMA boxes of one tile (ring state s), its chunks committed in `order`."""
    tile_bytes = MLADecodeConfig.tile_bytes()
    for c in order:
        pipe = chunks.pipes[c]
        pipe.producer_acquire(s)
        pipe.producer_commit(s, tx_bytes=BN * CHUNK * 2)
        for i, (page, row) in enumerate(origins):
            dst = kb.gep(kv_smem, s.stage * tile_bytes + c * BN * SWIZZLE + i * cfg.box_rows * SWIZZLE, "i8")
            fa4.tma_load(p["kv_cache"], dst, s.stage, [const(c * CHUNK), const(0), row, page],
                         pipe=pipe.name, box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=2)


__all__ = ["BAR_MA", "BAR_PB", "BAR_PA", "A_ORDER", "B_ORDER", "step0", "step1", "run", "load_tile"]
