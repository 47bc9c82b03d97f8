"""The swap-AB MLA decode over a ring of chunk stages (MLADecodeConfig.swap_ab_ring; variant swapab_ring,
DEFAULT_RULE's swap AB over a bf16 cache whose pages hold whole 64-row boxes). attention_mla_decode_sm90_swapab.py
is the kernel (its notes "Swap AB (MLA)", "Rings", "Merge"); this module replaces only its rings: how a
warpgroup's tile is waited for, read and released, and the producer that fills it.

Note "Chunk stages": the swap-AB kernel gives each warpgroup a one-stage ring of a whole 72 KiB tile, so the
warpgroup's next tile starts loading only after the P V of its current one retired: the next tile's DRAM
latency and transfer are exposed whenever the warpgroup's compute is shorter than the other's (no SMEM is
left for a second stage). Here the SMEM left by Q^T, P^T and the exchange holds more 64-column chunks than two
tiles' 18: MLADecodeConfig.swap_ab_ring_stages, 11 a warpgroup at N 32 (Q^T 36 KiB), 12 at N 16. Warpgroup w's
ring kv<w> is one ring of that many 8 KiB one-chunk stages (consumed in stage order by its one role, as
fa4-verify-pipelines requires); tile k of the warpgroup (pair k) takes ring positions 9 k .. 9 k + 8 in
LOAD_ORDER (the rope first), so its chunks sit wherever the ring has wrapped to (each chunk is its own block to
the wgmmas: S^T's A descriptors and P V's m tile t address one chunk each) and 2 or 3 chunks of the next tile
are in flight before any of the current one is released. The consumer waits, issues and releases in ring order:

    S^T = K_j Q^T       chunk c's four k16 wgmmas issued once its stage's wait returned (the rope first: the
                        same sum in another order), so S starts on one chunk while the later ones land
    (S retired)         release the rope chunk (read by S only)
    O^T += V_j^T P^T    m tile t (V's columns of chunk t) committed as its own wgmma group
    (m tile t retired)  release chunk t, t = 0 .. 7 (wait_group t pending 7 - t)

The producer fills the next tile of the warpgroup chunk by chunk in the order they come free (LOAD_ORDER: the
rope once S^T retired, then chunk 0 once m tile 0 of the P V retired, ...), not after the whole P V. The
epilogue's exchange through the tile buffers is unchanged (every load of the split has landed and been read by
then). (A form with nine one-stage rings a warpgroup, one per chunk, swapab_chunks, was timed and removed:
notes/RESULTS.md [A-mla-swapab-chunks-timed].)
"""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, Value, const, undef
from .attention_mla_decode_sm90 import _box_origin
from .attention_mla_decode_sm90_config import BN, CHUNK_BYTES, D_V, MLADecodeConfig
from .common.mla_sm90 import CHUNK, QK_CHUNKS, SWIZZLE, WGMMA_K, zero_rows_from
from .common.wgmma import wait_group

ROPE = QK_CHUNKS - 1        # chunk 8: the rope columns, read by S^T only
V_CHUNKS = D_V // CHUNK     # chunks 0 .. 7: V's columns (m tile t of P V reads chunk t)
LOAD_ORDER = (ROPE, *range(V_CHUNKS))   # the producer's order of a tile's chunks: the order they come free


class ChunkRing:
    """Warpgroup w's ring kv<w> of `stages` one-chunk stages, pair i's chunks at positions 9 i + LOAD_ORDER's
    index (note "Chunk stages"): S^T chunk by chunk after each chunk's wait, the rope released once S^T
    retired, P V m tile by m tile, chunk t released once m tile t retired. `pipe_state(i, c)`: chunk c of the
    warpgroup's pair i, its pipeline and state; `chunk_at(base, s, c)`: its address in the ring buffer `base`.
    The tile `st` returns is (the ring buffer's address, i, the rope's ring state): V's chunks' states and
    addresses are derived again where they are read (`v_states`; live across the softmax at N 32 they
    spilled)."""

    ORDER = LOAD_ORDER

    def __init__(self, kb, w: int, stages: int):
        self.kb = kb
        self.pipe = kb.pipeline(f"kv{w}", num_stages=stages, producer="load", consumers=[f"mma{w}"])

    def state(self, i: Value) -> Value:
        return i

    def _release(self, cs, pipe, s):
        with self.kb.if_(cs.is_leader).then_():
            pipe.consumer_release(s)

    def st(self, cs, bufs, i: Value):
        """S^T = K_j Q^T, chunk c's wgmmas after its wait; the rope released once S^T retired. Returns
        (q_at, the tile, S^T)."""
        kb = cs.kb
        acc = undef(("f32", cs.n_s))
        q_smem = q_at = base = rope = None
        for n, c in enumerate(self.ORDER):
            pipe, s = self.pipe_state(i, c)
            pipe.consumer_wait(s)
            if q_at is None:    # every address from q_slot's 0, loaded after a wait (no hoisted descriptor)
                q_at = kb.warp_uniform(kb.load(bufs.q_slot, "i32", align=4))
                q_smem = kb.gep(bufs.q, q_at, "i8")
                base = kb.gep(bufs.kv[cs.wg], q_at, "i8")
            chunk = self.chunk_at(base, s, c)
            rope = (pipe, s) if c == ROPE else rope
            fa4.mma_fence()     # after each wait (a branch): else ptxas inserts its own and serialises the wgmmas
            for within in range(CHUNK // WGMMA_K):
                off = within * WGMMA_K * 2
                a_d = fa4.smem_desc(kb.gep(chunk, off, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
                b_d = fa4.smem_desc(kb.gep(q_smem, c * cs.n * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                                    sbo=8 * SWIZZLE)
                first = n == 0 and within == 0
                acc = Value(fa4.mma(a_d, b_d, const(int(not first), "i1"), [acc], result_types=[acc.type], m=64,
                                    n=cs.n, k=WGMMA_K, a_source="smem", ab_dtype=cs.cfg.dtype, acc_dtype="f32"))
        fa4.mma_commit_group()
        st = wait_group(acc, pending=0)
        self._release(cs, *rope)
        return q_at, (base, i, rope[1]), st

    def zero_v_tail(self, cs, tile, valid: Value):
        """Rows [valid, BN) of the tile's 8 V chunks to zeros (note "NaN past L_b"), by the warpgroup."""
        for c, (_, s) in enumerate(self.v_states(tile)):
            zero_rows_from(cs.kb, cs.t, self.chunk_at(tile[0], s, c), valid, 1)

    def pv(self, cs, tile, p_base, o: list, s) -> list:
        """O^T += V_j^T P^T, m tile t (chunk t) its own wgmma group; chunk t released once m tile t retired."""
        from .attention_mla_decode_sm90_swapab import K_STEPS, M_TILES
        kb = cs.kb
        fa4.mma_fence()
        b_ds = [fa4.smem_desc(kb.gep(p_base, kk * WGMMA_K * 2, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
                for kk in range(K_STEPS)]
        out, states = [], self.v_states(tile)
        for mt in range(M_TILES):
            acc, chunk = o[mt], self.chunk_at(tile[0], states[mt][1], mt)
            for kk in range(K_STEPS):
                a_d = fa4.smem_desc(kb.gep(chunk, kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE,
                                    lbo=BN * SWIZZLE, sbo=8 * SWIZZLE)
                acc = Value(fa4.mma(a_d, b_ds[kk], const(1, "i1"), [acc], result_types=[acc.type], m=64, n=cs.n,
                                    k=WGMMA_K, a_source="smem", a_major="mn", ab_dtype=cs.cfg.dtype, acc_dtype="f32"))
            fa4.mma_commit_group()
            out.append(acc)
        done = []
        for mt in range(M_TILES):
            done.append(wait_group(out[mt], pending=M_TILES - 1 - mt))
            self._release(cs, *states[mt])
        return done

    def pipe_state(self, i: Value, c: int):
        return self.pipe, self.pipe.state_at(i * QK_CHUNKS + LOAD_ORDER.index(c))

    def chunk_at(self, base, s, c: int):
        return self.kb.gep(base, s.stage * CHUNK_BYTES, "i8")

    def v_states(self, tile) -> list:
        """(pipeline, state) of the tile's V chunks 0 .. 7: the ring positions after the rope's, advanced
        from its state (not the positions' `state_at`, which the compiler would share with S^T's and keep
        live across the softmax)."""
        out, s = [], tile[2]
        for _ in range(V_CHUNKS):
            s = s.advance()
            out.append((self.pipe, s))
        return out


def load_role(kb, cfg: MLADecodeConfig, work, p, bufs, rings: list, pairs: Value):
    """The swap-AB kernel's producer (attention_mla_decode_sm90_swapab._load_role: tile begin + 2 i + w
    into warpgroup w's ring(s), the odd count's last tile aimed past the pool) with each chunk acquired,
    committed and loaded on its own ring stage, in LOAD_ORDER (note "Chunk stages")."""
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(p["kv_cache"])
        row_at = work.batch.to("i64") * p["block_table_stride"].to("i64")
        loop = kb.for_(0, pairs, 1)
        with loop as (i, _):
            for w, ring in enumerate(rings):
                j = work.begin + i * 2 + w
                origins = [_box_origin(kb, p, work, row_at, j * BN + b * cfg.box_rows, j.lt(work.end))
                           for b in range(cfg.boxes_per_tile)]
                for c in LOAD_ORDER:
                    pipe, s = ring.pipe_state(i, c)
                    pipe.producer_acquire(s)
                    pipe.producer_commit(s, tx_bytes=BN * CHUNK * ELEM_BYTES[cfg.dtype])
                    chunk = ring.chunk_at(bufs.kv[w], s, c)
                    for b, (page, row) in enumerate(origins):
                        fa4.tma_load(p["kv_cache"], kb.gep(chunk, b * cfg.box_rows * SWIZZLE, "i8"), s.stage,
                                     [const(c * CHUNK), const(0), row, page], pipe=pipe.name,
                                     box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=ELEM_BYTES[cfg.dtype])
            loop.yield_()
