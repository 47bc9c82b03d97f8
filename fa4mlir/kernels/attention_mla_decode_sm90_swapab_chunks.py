"""The swap-AB MLA decode over per-chunk rings (MLADecodeConfig.swap_ab_chunks; opt-in variant
FA4MLIR_MLA_DECODE_VARIANT=swapab_chunks). attention_mla_decode_sm90_swapab.py is the kernel (its notes
"Swap AB (MLA)", "Rings", "Merge"); this module replaces only its rings: how a warpgroup's tile is
waited for, read and released, and the producer that fills it.

Note "Chunk rings (swap AB)": the swap-AB kernel gives each warpgroup a one-stage ring of a whole 72 KiB
tile, so the warpgroup's next tile starts loading only after the P V of its current one retired: the
next tile's DRAM latency and transfer are exposed whenever the warpgroup's compute is shorter than the
other's (no SMEM is left for a second stage). Here warpgroup w's ring is nine one-stage rings
kv<w>_c<c>, one per 64-column chunk c of the tile (the seesaw kernel's chunk rings, one set per
warpgroup; each ring consumed in stage order by its one role, as fa4-verify-pipelines requires):

    S^T = K_j Q^T       chunk c's four k16 wgmmas issued once ring c's wait returned (c = 0 .. 8), so
                        S starts on chunk 0 while the later chunks land
    (S retired)         release chunk 8 (the rope: read by S only)
    O^T += V_j^T P^T    m tile t (V's columns of chunk t) committed as its own wgmma group
    (m tile t retired)  release chunk t, t = 0 .. 7 (wait_group t pending 7 - t)

The producer fills the next tile of the warpgroup chunk by chunk in the order they come free
(LOAD_ORDER: the rope once S^T retired, then chunk 0 once m tile 0 of the P V retired, ...), not after
the whole P V. The SMEM is the swap-AB kernel's (the
same two 72 KiB tiles; 16 more mbarriers of each warpgroup); the epilogue's exchange through the tile
buffers is unchanged (every chunk of every ring released and refilled by then).
"""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, Value, const, undef
from .attention_mla_decode_sm90 import _box_origin
from .attention_mla_decode_sm90_config import BN, MLADecodeConfig
from .common.mla_sm90 import CHUNK, QK_CHUNKS, SWIZZLE, WGMMA_K
from .common.wgmma import wait_group

ROPE = QK_CHUNKS - 1        # chunk 8: the rope columns, read by S^T only
LOAD_ORDER = (ROPE, *range(ROPE))   # the producer's order of a tile's chunks: the order they come free


class ChunkRings:
    """Warpgroup w's nine one-stage rings kv<w>_c<c> (note "Chunk rings (swap AB)"): the swap-AB kernel's
    ring interface (state, st, pv) over them."""

    def __init__(self, kb, w: int):
        self.kb, self.w = kb, w
        self.pipes = [kb.pipeline(f"kv{w}_c{c}", num_stages=1, producer="load", consumers=[f"mma{w}"])
                      for c in range(QK_CHUNKS)]

    def state(self, i: Value):
        return self.pipes[0].state_at(i)

    def _release(self, cs, s, c: int):
        with self.kb.if_(cs.is_leader).then_():
            self.pipes[c].consumer_release(s)

    def st(self, cs, bufs, s):
        """S^T = K_j Q^T, chunk c's wgmmas after ring c's wait; the rope chunk released once S^T
        retired. Returns (q_at, the tile's address, S^T)."""
        kb = cs.kb
        acc = undef(("f32", cs.n_s))
        q_smem = stage = q_at = None
        for c in range(QK_CHUNKS):
            self.pipes[c].consumer_wait(s)
            if q_at is None:    # every address from q_slot's 0, loaded after a wait (no hoisted descriptor)
                q_at = kb.warp_uniform(kb.load(bufs.q_slot, "i32", align=4))
                stage = kb.gep(bufs.kv[cs.wg], q_at, "i8")
                q_smem = kb.gep(bufs.q, q_at, "i8")
            fa4.mma_fence()     # after each wait (a branch): else ptxas inserts its own and serialises the wgmmas
            for within in range(CHUNK // WGMMA_K):
                kk = c * (CHUNK // WGMMA_K) + within
                off = within * WGMMA_K * 2
                a_d = fa4.smem_desc(kb.gep(stage, c * BN * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                                    sbo=8 * SWIZZLE)
                b_d = fa4.smem_desc(kb.gep(q_smem, c * cs.n * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                                    sbo=8 * SWIZZLE)
                acc = Value(fa4.mma(a_d, b_d, const(int(kk > 0), "i1"), [acc], result_types=[acc.type], m=64,
                                    n=cs.n, k=WGMMA_K, a_source="smem", ab_dtype=cs.cfg.dtype, acc_dtype="f32"))
        fa4.mma_commit_group()
        st = wait_group(acc, pending=0)
        self._release(cs, s, ROPE)
        return q_at, stage, st

    def pv(self, cs, stage, p_base, o: list, s) -> list:
        """O^T += V_j^T P^T, m tile t its own wgmma group; chunk t released once m tile t retired."""
        from .attention_mla_decode_sm90_swapab import K_STEPS, M_TILES
        kb = cs.kb
        fa4.mma_fence()
        b_ds = [fa4.smem_desc(kb.gep(p_base, kk * WGMMA_K * 2, "i8"), swizzle=SWIZZLE, lbo=16, sbo=8 * SWIZZLE)
                for kk in range(K_STEPS)]
        out = []
        for mt in range(M_TILES):
            acc = o[mt]
            for kk in range(K_STEPS):
                a_d = fa4.smem_desc(kb.gep(stage, mt * BN * SWIZZLE + kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE,
                                    lbo=BN * SWIZZLE, sbo=8 * SWIZZLE)
                acc = Value(fa4.mma(a_d, b_ds[kk], const(1, "i1"), [acc], result_types=[acc.type], m=64, n=cs.n,
                                    k=WGMMA_K, a_source="smem", a_major="mn", ab_dtype=cs.cfg.dtype, acc_dtype="f32"))
            fa4.mma_commit_group()
            out.append(acc)
        done = []
        for mt in range(M_TILES):
            done.append(wait_group(out[mt], pending=M_TILES - 1 - mt))
            self._release(cs, s, mt)
        return done


def load_role(kb, cfg: MLADecodeConfig, work, p, bufs, rings: list, pairs: Value):
    """The swap-AB kernel's producer (attention_mla_decode_sm90_swapab._load_role: tile begin + 2 i + w
    into warpgroup w's rings, the odd count's last tile aimed past the pool) with each chunk acquired,
    committed and loaded on its own ring, in LOAD_ORDER (note "Chunk rings (swap AB)")."""
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
                    pipe = ring.pipes[c]
                    s = pipe.state_at(i)
                    pipe.producer_acquire(s)
                    pipe.producer_commit(s, tx_bytes=BN * CHUNK * ELEM_BYTES[cfg.dtype])
                    for b, (page, row) in enumerate(origins):
                        dst = kb.gep(bufs.kv[w], c * BN * SWIZZLE + b * cfg.box_rows * SWIZZLE, "i8")
                        fa4.tma_load(p["kv_cache"], dst, s.stage, [const(c * CHUNK), const(0), row, page],
                                     pipe=pipe.name, box=[CHUNK, 1, cfg.box_rows, 1],
                                     elem_bytes=ELEM_BYTES[cfg.dtype])
            loop.yield_()

