"""The FP8 sparse MLA decode's converter over a cluster of two CTAs (MLASparseDecodeConfig.crossover,
FP8_DECODE_VARIANTS' "crossover", opt-in): FlashMLA's "crossover" (its sm90 sparse FP8 decode,
csrc/sm90/decode/sparse_fp8/splitkv_mla.cuh, CLUSTER_SIZE 2 at 128 heads).

Note "Crossover": at h_q a multiple of 128 a token's head blocks 2c and 2c + 1 (heads 128 c .. + 63 and
+ 64 .. + 127) gather the same rows; grid x = token x head blocks + head block, so they are adjacent and
launched as one cluster of (2, 1, 1) (rank = head block % 2). Everything but the converter and the
hand-offs is attention_mla_sparse_sm90's note "FP8 converter" kernel:
    converter  CTA r's warpgroup 2 converts only rows 32 r .. 32 r + 31 of each 64-row tile (warp w the
               rows 32 r + w + 4 u, u < 8: one trip of the default converter's CONVERT_GROUP rows,
               their loads all issued first) and stores each dequantized 16-byte unit (zeros for an
               invalid row) and, lane 0, each row's bias twice: into its own tile (st.shared) and at
               the same offset in the peer's (fa4.peer_address = mapa, then st.shared::cluster);
               then fences both to the async proxy (fence.proxy.async.shared::cluster: the peer's
               wgmmas read the remote writes), arrives on its own full[stage] and, release at
               cluster scope, on the peer's (fa4.peer_arrive).
    full       kv_pipe's full[stage] counts 2 x 128 arrivals: both converters' (their every store
               before its arrive), so a consumer's wait sees all 64 rows.
    empty      2 x 2 arrivals: each consumer warpgroup's leader releases the stage in its own CTA
               and in the peer's (peer_arrive side "empty"): a converter writes both CTAs' tiles,
               so it waits until both CTAs' consumers retired their wgmmas on it.
    cluster    barrier.cluster after pipeline_init (no remote arrive before the peer's init) and
               after the roles (no CTA exits while its peer may still store into it or arrive on
               its barriers).
Both CTAs of a cluster run the same tile range (same token, same split y), so their rings advance in
lock step and the split works unchanged. The dequantization is the default converter's
(mla_fp8.dequant_piece): the output is bit-identical to it.
FlashMLA's own hand-off is st.async.shared::cluster.mbarrier::complete_tx::bytes onto a second barrier
per buffer (expect_tx by the receiving CTA); this build uses plain remote stores and release arrives,
which the dialect, lowering and interpreter model without a transaction-count protocol of their own (the
crossover_stasync, FP8_DECODE_CROSSOVER_RULE's, builds FlashMLA's way: note "st.async hand-off").

Note "Lean hand-off" (opt-in: FP8_DECODE_VARIANTS' "crossover_lean"). The crossover's SASS
(ptxas 13.0, the unsplit kernel) has three MEMBAR.ALL.GPU a tile: the converter's fence.proxy.async.shared::cluster
and its release.cluster peer arrive on full (each converter warp), and the release.cluster peer arrive on the
peer's empty by each consumer warpgroup's leader, whose warp holds its warpgroup's next wgmma until it is done;
and in the converter a chain of two global latencies a tile: the rows' indices (8 broadcast LDGs at the top of
the tile), then through the page arithmetic the rows (18 loads, all in flight at the first use). FlashMLA's
sm90 sparse FP8 decode (csrc/sm90/decode/sparse_fp8/splitkv_mla.cuh) releases the peer's buffer with CUTLASS's
ClusterBarrier::arrive(cta_id) (bar_k_avail: mbarrier.arrive.shared::cluster, the default release.cta).
crossover_lean (MLASparseDecodeConfig.crossover_lean): the consumers' peer_arrive on the peer's empty[stage] at CTA
scope (fa4.peer_arrive scope "cta"): it hands over no data, only that the leader's warpgroup retired its wgmmas on
the stage (wait_group 0 before it), as CUTLASS's consumer release of a multicast ring; the converter is the
crossover's, op for op. (Its twin "crossover_ahead", the converter's indices a tile ahead, and the same with st.async
were timed and rejected: notes/RESULTS.md [O-mla-next-2026-11-27].)
The converter's own hand-off (remote stores, proxy fence, release.cluster arrive on full) stays as it is:
without st.async's transaction count it is what orders the remote stores before the peer's wgmmas. The tile
values are the crossover's (the same dequantization of the same rows): out and lse bit-identical to it.

Note "st.async hand-off" (FP8_DECODE_VARIANTS' "crossover_stasync", FP8_DECODE_CROSSOVER_RULE's;
MLASparseDecodeConfig.crossover_stasync on crossover_lean). crossover_lean's converter still costs two MEMBAR.ALL.GPU a
tile (ptxas 13.0): its fence.proxy.async.shared::cluster and its release.cluster arrive on the peer's full. Here each
unit and bias word for the peer goes by fa4.peer_store_async (st.async.shared::cluster.mbarrier::complete_tx::bytes, PTX
ISA 9.7.9.12: a weak generic-proxy store whose complete-tx on the peer's mbarrier releases it at cluster scope), so the
converter needs neither: its local stores keep a CTA-scope fence.proxy.async and its local arrive.
    barriers   one per stage, kv_pipe's full[stage], count 128 (this CTA's converter threads; the crossover's
               2 x 128), each thread's arrive an arrive.expect_tx of remote_share() = 289 bytes, 1/128 of
               remote_bytes() = 36992 (the peer's 32 rows x 1152 bytes + 32 bias words), which the peer's st.asyncs
               complete. The phase completes when this CTA's 128 converter threads arrived (each after its local
               stores and fence) and the peer's 36992 bytes landed; the consumers wait on it alone, as before, then
               fence.proxy.async (their own, after the wait: the st.async data is generic-proxy) before the
               wgmmas. empty[stage] is unchanged (2 x 2 arrivals, both CTAs' consumers: the peer writes here
               only after this CTA's consumers released the stage, so its bytes never land in an older phase).
               FlashMLA keeps two barriers (local_ready, 128 arrivals; remote_ready, one expect_tx arrival +
               the peer's bytes); a second barrier here adds a consumer wait and release whose registers the
               200-register consumers do not have (ptxas 13.0 spilled one value with it), while the per-thread
               share costs nothing (an arrive.expect_tx for each plain arrive).
    addresses  st.async cannot fold [reg + imm] offsets of an asm operand: the lowering hands the store's i8
               offset (the one of the local store) to the asm, adds it there to the peer tile's base, and uses
               32-bit shared::cluster addresses (mapa's low half), one register each: the converter keeps its
               104 registers without spills.
fa4-verify-pipelines checks that the commits' bytes (289 x 128 threads) are the st.asyncs' (rule 5); the interpreter
lands each st.async in the peer's SMEM as a generic write of the storing warp and completes its bytes on the
peer's barrier as a release (interpret/ops/llvm.py _st_async).

(The converter's row loads with FlashMLA's cache hints, "crossover_stasync_hint", were timed and rejected:
notes/RESULTS.md [R-mla-sparse-fp8-hint].)
"""
from __future__ import annotations

from ..dsl import Value, const, select
from .attention_mla_sparse_sm90_config import BN, MLASparseConfig
from .common import mla_fp8
from .common.mla_sm90 import NEG_INF

CLUSTER = (2, 1, 1)
THREADS = 128               # the converter warpgroup
LANES = 32
PIECE = 16
WARPS = THREADS // LANES
HALF = BN // 2              # rows one CTA converts per tile
GROUP = HALF // WARPS       # 8 rows a warp: one trip, all its loads in flight
ROPE_ROWS = LANES // (2 * 64 // PIECE)   # 4 rows whose rope units one warp instruction moves
BIAS_WORD = 4               # one f32 a row in bias_smem


def remote_bytes() -> int:
    """Note "st.async hand-off": the bytes the peer's converter stores into this CTA's tile and bias slot per
    tile (its HALF rows of the tile, their HALF bias words)."""
    return MLASparseConfig.tile_bytes() * HALF // BN + HALF * BIAS_WORD


def remote_share() -> int:
    """Note "st.async hand-off": the bytes each of this CTA's converter threads expects on full[stage], its
    share of remote_bytes() (which THREADS divides: checked)."""
    share, rest = divmod(remote_bytes(), THREADS)
    if rest:
        raise ValueError(f"the peer's {remote_bytes()} bytes a tile do not split evenly over {THREADS} converter "
                         f"threads' expect_tx; give one thread the remainder")
    return share


def convert_role(kb, work, p, kv_smem, kv_pipe, bias_smem, stasync: bool = False):
    """Note "Crossover": per tile j, this CTA's 32 rows into both CTAs' tile (see the module note); `stasync`: note
    "st.async hand-off", the peer's half by st.async, its bytes completing on the peer's full[stage]
    (crossover_stasync)."""
    from .attention_mla_sparse_sm90 import _row_offset
    t = kb.thread_idx(0) % THREADS
    warp, lane = t // LANES, t % LANES
    rank = kb.cluster_rank()
    peer = const(1) - rank
    first_row = rank * HALF + warp          # this CTA's half of each tile
    tile_bytes = MLASparseConfig.tile_bytes()
    zero = const(0, ("i32", 4))
    kv_peer, bias_peer = kb.peer_address(kv_smem, peer), kb.peer_address(bias_smem, peer)
    idx_row = kb.gep(p["indices"], work.token.to("i64") * p["indices_stride_s"], "i32")
    kv_piece = kb.gep(p["kv"], lane * PIECE, "i8")
    kv_scale = kb.gep(p["kv"], mla_fp8.SCALES_AT + mla_fp8.WORD * ((lane * PIECE) // mla_fp8.SCALE_GROUP), "i8")
    rope_unit, rope_of = lane % mla_fp8.ROPE_UNITS, lane // mla_fp8.ROPE_UNITS
    kv_rope = kb.gep(p["kv"], mla_fp8.ROPE_AT + rope_unit * PIECE, "i8")

    def both(value: Value, local, remote, at, align: int):
        kb.store(value, kb.gep(local, at, "i8"), align=align)
        if not stasync:
            kb.store(value, kb.gep(remote, at, "i8"), align=align)
        else:       # note "st.async hand-off": its bytes complete on the peer's full[stage]
            kv_pipe.peer_store_async(s, value, kb.gep(remote, at, "i8"), peer)

    loop = kb.for_(work.begin, work.end, 1, carry=kv_pipe.initial_state())
    with loop as (j, s):
        # 1. the rows' indices (broadcast loads), before the wait for the buffer
        indices = [kb.load(kb.gep(idx_row, j * BN + first_row + WARPS * u, "i32"), "i32", align=4)
                   for u in range(GROUP)]
        rows = []
        for u, index in enumerate(indices):
            r = first_row + WARPS * u
            valid = (j * BN + r).slt(work.length) & index.sge(0) & index.slt(p["s_kv"])
            rows.append((r, valid, _row_offset(kb, p, valid, index, True)))
        # 2. every load in flight (the default converter's trip_loads)
        ropes = []
        for first in range(0, GROUP, ROPE_ROWS):
            rope_r, rope_ok, rope_off = rows[first]
            for u in range(1, ROPE_ROWS):
                mine = rope_of.eq(u)
                rope_r = select(mine, rows[first + u][0], rope_r)
                rope_ok = select(mine, rows[first + u][1], rope_ok)
                rope_off = select(mine, rows[first + u][2], rope_off)
            ropes.append((rope_r, rope_ok, rope_off))
        raws = [(kb.load(kb.gep(kv_piece, off, "i8"), ("i32", 4), align=16),
                 kb.load(kb.gep(kv_scale, off, "i8"), "f32", align=4)) for _, _, off in rows]
        rope_vals = [kb.load(kb.gep(kv_rope, off, "i8"), ("i32", 4), align=16) for _, _, off in ropes]
        # 3. the buffer free in both CTAs (empty[stage] counts both CTAs' consumers)
        kv_pipe.producer_acquire(s)
        tile, tile_peer = (kb.gep(base, s.stage * tile_bytes, "i8") for base in (kv_smem, kv_peer))
        slot, slot_peer = (kb.gep(base, s.stage * (BN * 4), "i8") for base in (bias_smem, bias_peer))
        for (r, valid, _), (raw, scale) in zip(rows, raws):
            for h, unit in enumerate(mla_fp8.dequant_piece(raw, scale)):
                both(select(valid, unit, zero), tile, tile_peer, mla_fp8.tile_offset(r, lane * PIECE + 8 * h, BN), 16)
        for (rope_r, rope_ok, _), rope in zip(ropes, rope_vals):
            both(select(rope_ok, rope, zero), tile, tile_peer,
                 mla_fp8.tile_offset(rope_r, mla_fp8.NOPE + 8 * rope_unit, BN), 16)
        # (st.async: lane 0 as tid % 32 == 0, so fa4-verify-pipelines counts 4 threads storing the bias words)
        with kb.if_(lane.eq(0) if not stasync else (kb.thread_idx(0) % LANES).eq(0)).then_():
            for r, valid, _ in rows:
                both(select(valid, const(0.0, "f32"), const(NEG_INF, "f32")), slot, slot_peer, r * 4, 4)
        # 4. this thread's local and remote stores to the async proxy, then its arrivals in both CTAs
        #    (st.async: the local stores only, and the local arrival; note "st.async hand-off")
        if not stasync:
            kb.fence("async_smem_cluster")
            kv_pipe.producer_commit(s)
            kv_pipe.peer_arrive(s, peer, side="full")
        else:       # each thread expects its share of the peer's bytes (note "st.async hand-off")
            kb.fence("async_smem")
            kv_pipe.producer_commit(s, tx_bytes=remote_share())
        loop.yield_(s.advance())
