"""Absorbed MLA decode on sm_100a: the decode route's pieces for head dims 576/512 (attention_sm100_config,
note "MLA decode"), used by attention_fwd_sm100.

Why a 64-row tile. O of head dim 512 in float32 is 512 TMEM columns per row, all there are, so a 128-row
tile (Layout D, row i in lane i) has no column left for S. tcgen05.mma with M = 64 and cta_group::1,
not .ws, writes Layout F, "4x1 (1/2 datapath utilized)", whose "Tensor Memory Datapath Lane Alignment"
is "0 or 16" (PTX ISA 9.1 §9.7.16.10.5 "Data Path Layout Organization"): row r of D sits in lane
32 (r // 16) + a + r % 16 for the alignment a of its TMEM address, so two 64-row accumulators live in
the same columns, one in lanes 0-15 and one in lanes 16-31 of each warp's 32-lane slab. And "the
layouts which utilize only half the datapath lanes, i.e., Layout F and Layout C, must use the same
Tensor Memory lane alignment across matrices A, D" (ibid.): P, the A operand of O += P V read from
TMEM, must sit at its O's alignment.

TMEM plan (64 query rows; a = lane alignment 0 or 16):

    columns [0, 256)          O_a = O[:, 256 (a / 16) ...+ 256]  (N = 256 per P.V MMA, the largest N)
    columns [256, 256 + BN)   S_a = Q K^T, computed twice (a = 0 and a = 16: 2 x 36 MMAs of K 16)
    P_a = S_a + BN / 2, C_a = S_a   (as the 128-row plan: P over S's upper half, C its lower half)

Thread l of warp w (softmax and correction warpgroups alike) owns lane 32 w + l, i.e. packed row
16 w + l % 16 and half h = l // 16: every tcgen05.ld/st stays the 32x32b one-lane-per-thread access of
the other routes. Both threads of a row read the same S (each its copy), run the same softmax and
write P and C into their own lane; the correction thread of half h rescales and stores O columns
[256 h, 256 h + 256). The price: S's MMAs run twice (576 of the 1088 MACs per key and row) and the
softmax's exp2 twice (on threads that would be idle); no shuffles, no P in SMEM, no new ld shape.

V is the first 512 columns of the K tile (one latent head, FlashMLA's layout): no V ring, no V loads;
the MMA thread releases a K stage after the P V MMAs that read it. K tiles are 64 keys x 576 (72 KiB):
the 64 x 576 Q tile (72 KiB) and two K stages fill the SMEM carve-out. Heads 16..64 pack into the 64
rows with 64 / heads tokens (MTP); 128 heads take two CTAs per token (grid y = heads / 64), each reading
the latent cache. The MMA and load warps run at 80 registers (common.mla_sm100.MLA_DECODE_ROLE_REGS).

Limits (common.mla_sm100.mla_decode_refusal): one latent KV head, BN 64, stages 0 or 2 (FP8: 0 or 1),
bf16/f16 (FP8: bf16 q), a contiguous cache or pages (TMA boxes of >= 16 rows, else note "MLA gather"; FP8:
pages of such boxes only), cache_seqlens on the device; no serving features.

Split-KV (FA4Config.split_kv, num_splits a launch argument): CTA x = M tile x num_splits + split takes the
sequence's blocks [split x per, ..) with per = ceil(blocks / num_splits), masks every block (the diagonal
or the tail may fall in any split), and writes O / l as float32 to o_partial [num_splits, batch, seqlen_q,
heads, 512] and the natural-log LSE to lse_partial [num_splits, batch, heads, seqlen_q] (-inf for a split
that saw no key): the workspaces attention_combine_sm90 merges (store_partial, store_lse_partial).

Note "MLA FP8" (kv_dtype "e4m3", kv_scale "row": FlashMLA's FP8 latent cache, common.mla_fp8's 656-byte
rows of 512 e4m3 latent bytes, four float32 scales (one per 128 columns) and 64 bf16 rope columns): the load
warp brings each tile's raw rows by TMA (int32 boxes of 164 words, unswizzled, one box per page) into the
ring k8; warps 4-7 (no role on the bf16 decode route) are the `convert` warpgroup at 160 registers: per
block they wait k8[n], acquire the 16-bit stage k[n], write bf16(float32(e4m3) x scale) and the rope bits
into it in the 128B-swizzled layout a TMA box gives (common.mla_fp8.emit_dequant, both halves of the sm_90a
decode's two-warpgroup split in turn), fence to the async proxy, release k8[n] and commit k[n] (128
arrivals). The MMA thread is unchanged (it zeroes the V rows past L_b of the converted tile, as of a bf16
one). SMEM: the 72 KiB Q tile, one 72 KiB 16-bit K stage and one 41 KiB raw stage (k and k8 share the
stage index; two of each, 298 KiB, exceed the carve-out), so the conversion of block n + 1 waits for the
MMAs of block n; the load of block n + 1 overlaps them.

Note "MLA gather" (pages whose TMA boxes would hold under 16 rows, e.g. 8 or 24: FA4Config.gather): k is
the pool's pointer and warps 4-7 are the `load` role at 160 registers (warp 13 idles): one thread TMAs the
Q tile; per block its first 64 threads look the tile's 64 pool rows up into SMEM (paged_rows.gather_rows, -1
past L_b), the warpgroup syncs on a named barrier, then copies the rows whole: a row is 1152 bytes = 72 16-byte pieces, piece
f = 32 i + lane of warp w's 16 rows (row 16 w + f / 72, piece f % 72: consecutive lanes read consecutive
pieces of a row) into the 128B-swizzled layout a TMA box gives (chunk piece / 8, unit (piece % 8) ^ (row %
8)), zeros for a dead row, 9 steps' loads in flight before their stores; then fence.proxy.async and every
thread commits the stage (128 arrivals), and the warpgroup syncs before the next tile's rows overwrite the
lookup. The decode route's own gather (paged_rows.gather_tile) moves rows of at most 512 bytes by whole-warp
steps; this is its piece map for the 1152-byte latent row. Not timed (no Blackwell GPU).

Note "Descriptor lifetimes": issuing all 36 K steps of S_0 and then all of S_16 kept the 72 SMEM
descriptors of the first pass live for the second (ptxas computed them once), and the 48-register MMA
warp spilled 328 bytes; issuing both halves of each K step back to back uses each pair once: 0 spills.

Proven without a Blackwell GPU (tests/test_attention_sm100_mla_decode.py): compiled with 0 spills, SASS
and pipeline verifier checked, interpreted on small shapes (the interpreter models Layout F and its
lane-alignment rule); no Blackwell numerics claimed.
"""
from __future__ import annotations

from typing import NamedTuple

from ..dialect import builders as fa4
from ..dsl import PipeState, Value, const, select, vec
from . import attention_sm100_config as fcfg
from . import attention_sm100_kv as kvroles
from .common import mla_fp8, paged_rows, tcgen05

SW = fcfg.SWIZZLE_BYTES
CHUNK = fcfg.CHUNK
MMA_K = fcfg.MMA_K
HALVES = 2                           # O's column halves, one per lane alignment
ROWS_PER_SLAB = 16                   # Layout F: rows of one warp's 32-lane slab per alignment


def packed_row(kb) -> tuple[Value, Value]:
    """(packed row, half) of this thread's TMEM lane in Layout F: lane 32 w + l holds row 16 w + l % 16
    of the accumulator at alignment 16 (l // 16)."""
    t = kb.thread_idx(0) % fcfg.MMA_M
    lane = t % 32
    return (t // 32) * ROWS_PER_SLAB + lane % ROWS_PER_SLAB, lane // ROWS_PER_SLAB


def lane_offset(half: int) -> int:
    """The TMEM address bits of lane alignment `half` x 16 (lane field, bits 31-16)."""
    return (half * fcfg.O_HALF_LANE) << 16


class _Carry(NamedTuple):
    k: PipeState           # K_n (= V_n)
    a: PipeState           # s0, p0, o0 (1 stage each, in lock step)


def mma_role(kb, cfg, geo, bufs, opaque_zero, tmem_of):
    """The MMA thread per block n: S_a <- Q K_n^T for a = 0, 16; then O_a <- O_a + P_a V_n (V_n = K_n's
    first 512 columns, chunks 4 (a / 16) .. + 3 for O_a's 256 columns); release K_n after both.
    `opaque_zero()`: 0 the compiler cannot fold (note "MLA registers": keeps the 36 Q descriptors in
    the loop); `tmem_of(region)`: the TMEM address of a plan region, re-read from its slot."""
    q_pipe, k_pipe = bufs.pipes.q, bufs.pipes.k
    tile = bufs.pipes.tiles[0]
    with kb.if_(kb.elect_one() & geo.n_blocks.gt(0)).then_():
        q0 = q_pipe.initial_state()
        q_pipe.consumer_wait(q0)
        loop = kb.for_(0, geo.n_blocks, 1, carry=_Carry(k_pipe.initial_state(), tile.s.initial_state()))
        with loop as (n, c):
            # 1. K_n; a paged tile holding the length L_b: zero its V rows past L_b first (the paged
            #    kernel's note "Stale V rows"; here before S's MMAs, which read the same stage)
            k_pipe.consumer_wait(c.k)
            k_tile = kb.gep(bufs.k_smem, opaque_zero() + c.k.stage * bufs.k_tile, "i8")
            if cfg.paged:
                valid = geo.seqlen_k - geo.block(n) * cfg.bn
                with kb.if_(valid.slt(cfg.bn)).then_():
                    paged_rows.zero_rows(kb, k_tile, valid, cfg.bn, cfg.padded_head_dim_v // CHUNK, SW)
            kb.fence("tcgen05_after")
            # 2. S_a <- Q K_n^T, a = 0 and 16 (the same product in both lane halves)
            tile.s.producer_acquire(c.a)
            q_base = kb.gep(bufs.q_smem, opaque_zero(), "i8")
            #    (each K step feeds both halves at once: its two descriptors die right after, see note
            #    "Descriptor lifetimes")
            s_tmem = tmem_of("S0")
            for kk in range(cfg.padded_head_dim // MMA_K):
                ch, within = divmod(kk, CHUNK // MMA_K)
                off = within * MMA_K * fcfg.ELEM_BYTES
                a = fa4.smem_desc(kb.gep(q_base, ch * cfg.mma_m * SW + off, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                b = fa4.smem_desc(kb.gep(k_tile, ch * cfg.bn * SW + off, "i8"), swizzle=SW, lbo=16, sbo=8 * SW)
                for half in range(HALVES):
                    tcgen05.mma(a, b, const(int(kk > 0), "i1"), s_tmem + lane_offset(half), m=cfg.mma_m, n=cfg.bn,
                                k=MMA_K, ab_dtype=cfg.dtype)
            tile.s.mma_commit(c.a, side="full")
            # 3. O_a <- O_a + P_a V_n once softmax wrote P_a and the correction released O (n = 0 overwrites)
            tile.p.consumer_wait(c.a)
            tile.o.producer_acquire(c.a)
            kb.fence("tcgen05_after")
            for half in range(HALVES):
                p_tmem, o_tmem = tmem_of("P0") + lane_offset(half), tmem_of("O0") + lane_offset(half)
                v_half = kb.gep(k_tile, half * (cfg.o_cols // CHUNK) * cfg.bn * SW, "i8")
                for kk in range(cfg.bn // MMA_K):
                    b = fa4.smem_desc(kb.gep(v_half, kk * MMA_K * SW, "i8"), swizzle=SW, lbo=cfg.bn * SW, sbo=8 * SW)
                    acc = n.gt(0) if kk == 0 else const(1, "i1")
                    tcgen05.mma(p_tmem + kk * (MMA_K // 2), b, acc, o_tmem, m=cfg.mma_m, n=cfg.o_cols, k=MMA_K,
                                ab_dtype=cfg.dtype, a_source="tmem", b_major="mn")
            tile.o.mma_commit(c.a, side="full")
            tile.p.mma_commit(c.a, side="empty")
            k_pipe.mma_commit(c.k, side="empty")     # 4. K_n (and V_n) read by every MMA of block n
            loop.yield_(_Carry(c.k.advance(), c.a.advance()))
        q_pipe.mma_commit(q0, side="empty")


def _partial_row(corr) -> tuple[Value, Value, Value]:
    """(token, head, flat row (batch, token, head) of o_partial's [batch, seqlen_q, heads]) of this lane."""
    cfg, geo = corr.cfg, corr.geo
    token = geo.tile_row0(0) + corr.t // cfg.tile_heads
    head = geo.head + corr.t % cfg.tile_heads
    return token, head, (geo.batch * geo.seqlen_q + token) * geo.heads + head


def _split_base(corr, per_split: Value) -> Value:
    """The i64 element offset of this CTA's split in a workspace of `per_split` elements a split."""
    return corr.geo.split.to("i64") * per_split.to("i64")


def store_partial(corr, inv: Value, empty: Value, from_tmem: bool = True):
    """Split-KV: this lane's O half / l (0 for a row without keys; zeros, TMEM unread, when not `from_tmem`)
    as float32 to o_partial[split, batch, token, head, 256 h ..+ 256], 16 bytes a store, for tokens < seqlen_q.
    The TMEM loads are warp-collective: every thread issues them, only the stores are predicated."""
    kb, cfg, geo = corr.kb, corr.cfg, corr.geo
    token, _, row = _partial_row(corr)
    rows_per_split = kb.grid_dim(2) * geo.seqlen_q * geo.heads
    at = (_split_base(corr, rows_per_split) + row.to("i64")) * cfg.padded_head_dim_v + \
        (corr.half * cfg.o_cols).to("i64")
    o_row = kb.gep(corr.bufs.o_desc, at * 4, "i8")
    zero = const(0.0, "f32")
    cols = 16
    for ch in range(cfg.o_cols // cols):
        if from_tmem:
            o = tcgen05.tmem_load(corr.o_addr[0] + ch * cols, cols)
            fa4.tmem_wait(kind="ld")
            o = o.bitcast(("f32", cols))
            vals = [select(empty, zero, o[j] * inv) for j in range(cols)]
        else:
            vals = [zero] * cols
        with kb.if_(token.lt(geo.seqlen_q)).then_():
            for u in range(cols // 4):
                words = vec(*[vals[4 * u + j].bitcast("i32") for j in range(4)])
                kb.store(words, kb.gep(o_row, (ch * cols + 4 * u) * 4, "i8"), align=16)


def store_lse_partial(corr, lse: Value, empty: Value):
    """Split-KV: this row's natural-log LSE to lse_partial[split, batch, head, token], -inf for a row this
    split saw no key of (the combine gives it weight 0); written by the lanes of half 0."""
    kb, geo = corr.kb, corr.geo
    token, head, _ = _partial_row(corr)
    per_split = kb.grid_dim(2) * geo.heads * geo.seqlen_q
    at = _split_base(corr, per_split) + ((geo.batch * geo.heads + head) * geo.seqlen_q + token).to("i64")
    with kb.if_(corr.half.eq(0) & token.lt(geo.seqlen_q)).then_():
        kb.store(select(empty, const(float("-inf"), "f32"), lse), kb.gep(corr.bufs.lse_ptr, at, "f32"), align=4)


def fp8_tma_spec(cfg) -> dict:
    """The FP8 latent rows' descriptor (note "MLA FP8"): int32 boxes of whole 656-byte rows, unswizzled."""
    return dict(dtype="i32", box=(mla_fp8.ROW_WORDS, 1, cfg.box_rows, 1), swizzle="none")


def load_fp8_tile(kb, cfg, origins: list, pipe, desc, base: Value, s: PipeState, tile: int):
    """The raw rows of one block into stage s of the k8 ring: its per-page boxes at origins[i] = (page,
    row in page), box i at row i box_rows of the stage (rows at r x 656 bytes)."""
    for i, (page, in_page) in enumerate(origins):
        dst = kb.gep(base, s.stage * tile + i * cfg.box_rows * mla_fp8.ROW_BYTES, "i8")
        fa4.tma_load(desc, dst, s.stage, [const(0), const(0), in_page, page], pipe=pipe.name,
                     box=[mla_fp8.ROW_WORDS, 1, cfg.box_rows, 1], elem_bytes=mla_fp8.WORD)


GATHER_BATCH = 9         # warp steps whose 16-byte loads are in flight before their stores (36 = 4 x 9 a tile)
PIECE_BYTES = 16         # one thread's load / store
UNITS = SW // PIECE_BYTES   # 16-byte units of a 128-byte swizzle row (and rows of a swizzle atom)


def gather_role(kb, cfg, geo, bufs, role: dict):
    """Warps 4-7 over pages without 16-row TMA boxes (note "MLA gather"): Q by TMA, then each block's rows."""
    pipes, threads = bufs.pipes, 32 * role["num_warps"]
    tid = kb.thread_idx(0) - 32 * role["first_warp"]
    lane, warp = tid % 32, tid // 32
    row_bytes = cfg.padded_head_dim * fcfg.ELEM_BYTES
    pieces, warp_rows = row_bytes // PIECE_BYTES, cfg.bn // role["num_warps"]
    steps = warp_rows * pieces // 32
    if steps * 32 != warp_rows * pieces or steps % GATHER_BATCH:
        raise ValueError(f"MLA gather: {warp_rows} rows x {pieces} pieces a warp must make whole batches of "
                         f"{GATHER_BATCH} warp steps")
    with kb.if_(geo.n_blocks.gt(0)).then_():
        with kb.if_(kb.thread_idx(0).eq(32 * role["first_warp"])).then_():     # 1. the Q tile (as the load warp)
            q0 = pipes.q.initial_state()
            pipes.q.producer_acquire(q0)
            pipes.q.producer_commit(q0, tx_bytes=bufs.q_tile)
            for c in range(cfg.padded_head_dim // CHUNK):
                fa4.tma_load(bufs.q_desc, kb.gep(bufs.q_smem, c * cfg.mma_m * SW, "i8"), q0.stage,
                             [const(c * CHUNK), geo.head, geo.q_coord(geo.tile_row0(0)), geo.tma_batch()],
                             pipe=pipes.q.name, box=[CHUNK, cfg.tile_heads, cfg.tile_tokens, 1],
                             elem_bytes=fcfg.ELEM_BYTES)
        loop = kb.for_(0, geo.n_blocks, 1, carry=pipes.k.initial_state())
        with loop as (n, s):                  # 2. per block: the rows' pool rows, then the rows whole
            with kb.if_(tid.lt(cfg.bn)).then_():       # one lookup per row: the first 64 threads
                paged_rows.gather_rows(kb, tid, cfg.bn, geo.block(n) * cfg.bn, cfg.bn, geo.seqlen_k, geo.batch,
                                       bufs.page_table, bufs.page_table_stride, bufs.num_pages, cfg.page_size,
                                       bufs.rows_smem)
            kb.named_barrier(kvroles.BAR_GATHER, threads)
            pipes.k.producer_acquire(s)
            tile = kb.gep(bufs.k_smem, s.stage * bufs.k_tile, "i8")
            for first in range(0, steps, GATHER_BATCH):
                moved = []
                for i in range(first, first + GATHER_BATCH):
                    f = lane + 32 * i
                    row, piece = warp * warp_rows + f // pieces, f % pieces
                    pool_row = kb.load(kb.gep(bufs.rows_smem, row * 4, "i8"), "i32", align=4)
                    src = kb.gep(bufs.k_desc, pool_row.smax(0).to("i64") * row_bytes + (piece * PIECE_BYTES).to("i64"),
                                 "i8")
                    moved.append((row, piece, pool_row.sge(0), kb.load(src, ("i32", 4), align=16)))
                for row, piece, live, data in moved:
                    dst = (piece // UNITS) * (cfg.bn * SW) + row * SW + ((piece % UNITS) ^ (row % UNITS)) * PIECE_BYTES
                    kb.store(select(live, data, const(0, ("i32", 4))), kb.gep(tile, dst, "i8"), align=16)
            kb.fence("async_smem")            # the stores -> tcgen05.mma's async proxy
            pipes.k.producer_commit(s)
            kb.named_barrier(kvroles.BAR_GATHER, threads)   # every thread read rows_smem before the next tile's rows
            loop.yield_(s.advance())


def convert_role(kb, cfg, geo, bufs):
    """The convert warpgroup (note "MLA FP8"): per visited block, the raw rows of k8[n] -> the bf16 stage k[n]."""
    pipes = bufs.pipes
    t = kb.thread_idx(0) % mla_fp8.THREADS
    loop = kb.for_(0, geo.n_blocks, 1, carry=pipes.k8.initial_state())
    with loop as (n, s):
        pipes.k8.consumer_wait(s)
        pipes.k.producer_acquire(s)
        raw, tile = kb.gep(bufs.k8_smem, s.stage * bufs.k8_tile, "i8"), kb.gep(bufs.k_smem, s.stage * bufs.k_tile, "i8")
        for w in range(mla_fp8.WARPGROUPS):       # the sm_90a decode's two shares, one after the other
            mla_fp8.emit_dequant(kb, t, w, raw, tile, cfg.bn)
        kb.fence("async_smem")      # the stores -> tcgen05.mma's async proxy
        pipes.k8.consumer_release(s)
        pipes.k.producer_commit(s)
        loop.yield_(s.advance())


__all__ = ["fp8_tma_spec", "load_fp8_tile", "gather_role", "convert_role", "packed_row", "lane_offset", "mma_role", "store_partial", "store_lse_partial", "HALVES"]
