"""Sparse MLA prefill on sm_90a (FlashMLA's flash_mla_sparse_fwd, DeepSeek-V3.2's DSA): each query
token attends, with all its heads, to the top-k KV rows its indices name; one latent KV head of 576
columns (512 latent + 64 rope) serves as K, its first 512 columns as V, read once from the same
SMEM tile (the absorbed MLA decode's tile step, common/mla_sm90.py).

One CTA attends 64 query heads of one token to that token's gathered rows: tile j holds the rows
named by indices[token, 0, 64 j .. 64 j + 63]. No split (DSA's topk 2048 is 32 tiles).
Grid: x = head block + (h_q / 64) x token (attention_mla_sparse_sm90_config.grid).

Roles (12 warps, 384 threads, one CTA per SM; setmaxnreg 240 / 32: the decode's note "Design"):
    warp 8        `gather`  all 32 lanes: per tile j of the token's ceil(L / 64) tiles (L = topk,
                            or topk_length[token] clamped into [0, topk]), the tile's 64 rows of
                            1152 bytes by cp.async into a ring of STAGES = 2 (kv_pipe; 128B
                            swizzle, the layout TMA boxes give), and each row's score bias
                            (notes "Gather", at _gather_role, and "Bias").
    warps 0-7     `mma`     the decode's two consumer warpgroups: Q's 64 heads x 576 loaded by both,
                            then per tile j:
                            1. wait KV_j; S = Q K_j^T of this warpgroup's 32 keys (576 columns)
                            2. S += bias_j (note "Bias"); online softmax in base 2 with the row
                               maxima and P exchanged through SMEM (decode, note "Exchange")
                            3. O_w *= alpha
                            4. O_w += P V_j[:, 256 w : 256 w + 256]; release KV_j
                            then the epilogue: O / (l + sink term) in q's dtype, max_logits and
                            the LSE (natural log; FlashMLA's tests/ref.py).

Note "Bias": a gathered row is invalid when its position in the token's list is at or past L, or
its index is negative or >= s_kv (FlashMLA: "-1 or numbers >= s_kv"). An invalid row's cp.asyncs
read nothing and land 16 zero bytes each, so its K gives S = 0 (finite) and its V adds 0 x P to O:
no NaN of an unused KV row can reach P V. The gather lane also writes the row's bias, 0 or -inf,
into the stage's bias words before it commits (its mbarrier arrive releases the plain stores with
the copies); the consumers add the bias of each of their S columns, so an invalid row's score is
-inf: P = 0, and a row (head) whose every row is invalid keeps m = -inf and l = 0 (out 0, LSE +inf,
max_logits -inf). Duplicated indices are attended once per occurrence, as FlashMLA's reference
does.

Note "Sinks" (FlashMLA: out x exp(lse) / (exp(lse) + exp(sink)), lse and max_logits unchanged):
with lse = ln l + m s (s the softmax scale, l = sum exp2((S - m) s log2 e)) that is
O / (l + exp2(sink log2 e - m s log2 e)); sink = -inf adds 0, +inf gives out 0.

Note "Decode" (MLASparseDecodeConfig: FlashMLA's flash_mla_with_kvcache with indices): the same
kernel over the paged latent cache viewed as [num_pages x page_size, 576] rows, since FlashMLA's
indices already name a cache row (page x page_size + offset; its flash_mla_interface.py), and
tokens = batch x seqlen_q (q's and the indices' batch and seqlen_q dims merge). What changes: q's
dtype may be f16; heads 1..128 in ceil(h_q / 64) blocks, the rows past h_q zero in Q and never
stored; topk_length is per batch; no max_logits; lse is [batch, h_q, seqlen_q]; and with a split
(grid y) CTA y attends tiles [y p, y p + p) of the token's ceil(L / 64), p = ceil(tiles / splits),
and writes float32 partials (O / l, LSE -inf when it saw no key) that attention_combine_sm90 (head
dim 512) merges. The gather and the consumers' tile step are the prefill's, unchanged.

Note "FP8 gather" (kv_dtype "fp8": FlashMLA's 656-byte rows, common/mla_fp8.py; the decode's
flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...), and the prefill's flash_mla_sparse_fwd with
kv [s_kv, 1, 656] float8_e4m3fn or uint8): the ring is one staging stage of 64 whole rows (row r at
r x 656, unswizzled: the layout common/mla_fp8's lane map reads without bank conflicts; config note
"FP8 sparse SMEM plan") next to one bf16 tile of the usual swizzled layout.
    gather: per tile, as above, each valid row's byte offset (prefill: index x row stride; decode:
            page x page stride + offset x row stride, index = page x page_size + offset, FlashMLA's
            stride_kv_block / stride_kv_row) and its bias, here into bias slot j % 2 (the tile's
            parity: the consumers read a tile's biases after they release its stage); then, a row a
            trip (41 16-byte pieces), lane l copies piece l and, when l < 9, piece l + 32: a warp
            instruction moves one 512-byte run (coalesced, and contiguous in SMEM: no bank
            conflict). Pairing rows (82 pieces in 3 instructions, not 4) spilled the gather's 24
            registers: the per-row loop keeps one source and one destination base, the second copy
            an immediate 512 past the first. An invalid row's copies read nothing and land zeros:
            e4m3 0 times scale 0 dequantizes to 0 (no NaN of an unused row reaches P V) and its bias
            is -inf, as in the 16-bit kernel.
    consumers: per tile j, after waiting for its stage, warpgroup w dequantizes the latent columns
            256 w .. 256 w + 255 and copies half the rows' rope into the bf16 tile (common/mla_fp8:
            bf16(e4m3 x the row's float32 scale), FlashMLA's dequantize_k_cache), fences it to the
            async proxy, both pass one barrier, each releases the stage (the gather fetches tile j + 1
            during tile j's GEMMs) and runs steps 1-4 on the bf16 tile. Writing tile j + 1 needs no
            barrier before it (attention_mla_decode_sm90, note "FP8 latent"): warpgroup w writes only
            its own V columns (its P V_j retired) and rope rows, which only S_j reads, and both
            warpgroups' S_j retired before the exchange's barriers of tile j.

Note "Seesaw" (MLASparseConfig.seesaw / MLASparseDecodeConfig.seesaw, opt-in, 16-bit kv and the FP8
converter decode unsplit; FlashMLA's schedule): the consumers' tile step replaced by the seesaw's pairs (attention_mla_sparse_seesaw_sm90, its
own note): warpgroup w, a role of its own, computes S over all 64 keys of every other tile and the two
meet through one-way named barriers instead of the exchange's two 256-thread barriers a tile. The
gather, Q's load, the biases and the epilogues (given l = l_0 + l_1) are this module's.

Note "FP8 converter" (MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True), the default by
FP8_DECODE_DEFAULT_RULE; config note "FP8 converter plan"; FlashMLA's sm90 sparse FP8 decode structure): no
staging stage and no gather warp.
Warpgroup 2 (`convert`, warps 8-11, setmaxnreg 104) fills the 16-bit kernel's ring of two bf16 tiles
(kv_pipe, 128 producer arrivals) straight from global memory (convert_role): per tile, warp w
converts rows w, w + 4, .., each lane its 16-byte latent piece (one coalesced 512-byte run a warp
instruction), that piece's float32 scale and one 16-byte rope unit of each four rows; a trip's 8 rows'
loads are all issued before it converts them (16 rows a trip spilled at setmaxnreg 104). Every lane
looks each row's index up itself (broadcast loads: no row table, no barrier inside the warpgroup):
trip 0's before the wait for the free buffer, each trip the next one's before its conversions (the
indices carried through the trip loop: 0 spills at 104; carrying offsets instead spilled). An invalid
row is stored as zeros whatever its loads (of row 0 of the cache) returned, with bias -inf in the
tile's bias slot (its stage), as the 16-bit kernel's gather does. Every thread fences its
stores to the async proxy before it arrives on full[stage]. The consumers (setmaxnreg 200) run the
16-bit kernel's tile step (_kv_tile) unchanged: wait full, S, softmax, P V, release the tile.

Note "Producer warpgroup" (producer_warps=4, a 16-bit kv, prefill or decode; FlashMLA's sm90 sparse prefill's
producer: a whole warpgroup gathers, and each K stage is two halves with their own barriers): warpgroup 2
(`gather`, warps 8-11, setmaxnreg 72; the consumers 216: 2 x 216 + 72 = the launch pool) replaces the gather
warp. Each ring stage is the same 64 x 576 tile, its barriers in two pipelines: kv_pipe for chunks 0-3
(K's columns 0..255, V's columns of warpgroup 0) and kv_hi for chunks 4-8 (256..575), 128 producer arrivals
each (_gather_role_wg). The consumers (_kv_tile_halves) wait kv_pipe, issue S's 16 wgmmas over the first
half and commit them as a group, wait kv_hi, fence wgmma again and issue the other 20 (without that commit
and fence ptxas serialises every wgmma: C7519, "WG.AR in divergent path", the wait loop between them), then
the softmax and P V as _kv_tile, and release both halves after P V. No row table: each producer thread looks
its 4 rows' indices up itself; the biases are written with the first half, which is free again only after
both warpgroups passed the P exchange of the tile that read them.
"""
from __future__ import annotations

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import KernelBuilder, Value, const, fast_div, fma, log2, select, vec
from .attention_mla_sparse_sm90_config import (BN, CONSUMERS, D_QK, D_V, HALF_CHUNKS, LOAD_REGS, MMA_REGS, STAGES,
                                               TILE_M, MLASparseConfig, MLASparseDecodeConfig)
from . import attention_mla_sparse_crossover_sm90 as crossover
from . import attention_mla_sparse_seesaw_sm90 as seesaw
from .common import mla_fp8
from .common.constants import LOG2E
from .common.mla_sm90 import (BAR_ALL, CHUNK, LN2, NEG_INF, QK_CHUNKS, SWIZZLE, UNITS, WG_CHUNKS, WG_COLS,
                              ConsumerGeometry, issue_pv, issue_s, load_q, row_totals, softmax)
from .common.wgmma import acc_col, acc_pair, acc_row, wait_group

GATHER_LANES = 32
ROWS_PER_LANE = BN // GATHER_LANES      # 2
BAR_GATHER = 4                          # the gather warp's own named barrier (common.mla_sm90 uses 1-3)
PIECE = 16                              # bytes a cp.async moves
FP8_PIECES = mla_fp8.ROW_BYTES // PIECE  # 41 16-byte pieces an FP8 row (note "FP8 gather")
CONVERTER_THREADS = 128                 # note "FP8 converter": warpgroup 2
CONVERT_GROUP = 8                       # rows a converter warp loads at once (a trip: its loads all in flight)
ROPE_ROWS = GATHER_LANES // (2 * 64 // PIECE)   # 4: rows whose rope units (8 a row) one warp instruction moves
PRODUCER_THREADS = 128                  # note "Producer warpgroup": warpgroup 2 whole
GROUPS = PRODUCER_THREADS // UNITS      # 16 groups of 8 threads, a row each at a time


def build(cfg: MLASparseConfig | MLASparseDecodeConfig = MLASparseConfig()) -> dsl.KernelIR:
    """The sparse prefill (MLASparseConfig) or the sparse decode over the paged cache
    (MLASparseDecodeConfig: note "Decode")."""
    cfg.validate()
    fp8 = cfg.fp8        # note "FP8 gather"
    conv = getattr(cfg, "fp8_converter", False)     # note "FP8 converter"
    pwg = cfg.producer_warps == 4                   # note "Producer warpgroup"
    mma_regs, load_regs = cfg.regs if conv or pwg else (MMA_REGS, LOAD_REGS)
    staged = fp8 and not conv
    xo = getattr(cfg, "crossover", False)           # attention_mla_sparse_crossover_sm90, note "Crossover"
    kb = KernelBuilder(cfg.name(), arch="sm_90a", block=(cfg.threads, 1, 1), config=cfg.key(), min_ctas_per_sm=1,
                       **(dict(cluster=crossover.CLUSTER) if xo else {}))
    p = kb.params_from(cfg.params, tma={})
    with kb.body():
        q_smem = kb.smem("q_smem", TILE_M * D_QK * 2)
        kv_smem = kb.smem("kv_smem", cfg.stages * cfg.stage_bytes() if staged else STAGES * cfg.tile_bytes())
        tile_smem = kb.smem("tile_smem", cfg.tile_bytes()) if staged else None     # fp8: the dequantized tile
        q_slot = kb.smem("q_slot", 16, align=16)     # holds 0: the decode's _kv_tile, step 1
        x_smem = kb.smem("x_smem", cfg.exchange_bytes(), align=16)    # decode, note "Exchange"
        bias_smem = kb.smem("bias_smem", cfg.bias_bytes(), align=16)  # note "Bias"
        rows_smem = None if conv or pwg else kb.smem("gather_rows", cfg.rows_bytes(), align=16)     # note "Gather"
        if cfg.seesaw:      # note "Seesaw": one role per consumer warpgroup, the pairs' schedule
            seesaw.build_roles(kb, cfg, p, (q_smem, kv_smem, None, q_slot, bias_smem), x_smem, rows_smem)
            return kb.finish()
        halves = None
        if pwg:     # note "Producer warpgroup": a stage's columns 0..255 (kv_pipe) and 256..575 (kv_hi)
            kv_pipe, halves = (kb.pipeline(name, num_stages=STAGES, consumers=["mma"], consumer_arrivals=CONSUMERS,
                                           producer="gather", producer_arrivals=PRODUCER_THREADS)
                               for name in ("kv_pipe", "kv_hi"))
        else:
            # each gather lane (converter thread) commits once per fill (after its cp_async_arrive)
            # (crossover_stasync: this CTA's converter alone arrives, the peer's half completes as bytes: the
            #  crossover module's note "st.async hand-off")
            local = not getattr(cfg, "crossover_stasync", False)
            producer = dict(producer="convert", producer_arrivals=CONVERTER_THREADS * (2 if xo and local else 1)) \
                if conv \
                else dict(producer="gather", producer_arrivals=GATHER_LANES)
            kv_pipe = kb.pipeline("kv_pipe", num_stages=cfg.stages if fp8 else STAGES, consumers=["mma"],
                                  consumer_arrivals=CONSUMERS * (2 if xo else 1), **producer)
        kb.pipeline_init()
        if xo:      # both CTAs' barriers initialised before either arrives on the other's
            kb.cluster_sync()
        work = _Work(kb, cfg, p)
        with kb.warp_roles():
            with kb.role("mma", first_warp=0, num_warps=4 * CONSUMERS, regs=mma_regs):
                _mma_role(kb, cfg, work, p, (q_smem, kv_smem, kv_pipe, q_slot, bias_smem), x_smem, tile_smem, halves)
            if conv:
                with kb.role("convert", first_warp=4 * CONSUMERS, num_warps=4, regs=load_regs):
                    if xo:
                        crossover.convert_role(kb, work, p, kv_smem, kv_pipe, bias_smem,
                                               stasync=getattr(cfg, "crossover_stasync", False))
                    else:
                        convert_role(kb, work, p, kv_smem, kv_pipe, bias_smem)
            elif pwg:
                with kb.role("gather", first_warp=4 * CONSUMERS, num_warps=PRODUCER_THREADS // 32, regs=load_regs):
                    _gather_role_wg(kb, work, p, kv_smem, (kv_pipe, halves), bias_smem)
            else:
                with kb.role("gather", first_warp=4 * CONSUMERS, num_warps=1, regs=load_regs):
                    if fp8:
                        _gather_role_fp8(kb, cfg, work, p, kv_smem, kv_pipe, bias_smem, rows_smem)
                    else:
                        _gather_role(kb, work, p, kv_smem, kv_pipe, bias_smem, rows_smem)
        if xo:      # no CTA exits while its peer may still write into its SMEM or arrive on its barriers
            kb.cluster_sync()
    return kb.finish()


class _Work:
    """This CTA's token, its first head h0, and L: the token's attended list length (topk, or
    topk_length[token] clamped into [0, topk]; decode: topk_length[batch]), in ceil(L / BN) tiles,
    of which it attends [begin, end) (all of them unless the decode is split: note "Decode")."""

    def __init__(self, kb, cfg, p):
        self.decode = isinstance(cfg, MLASparseDecodeConfig)
        self.crossover = getattr(cfg, "crossover", False)   # a cluster of the token's two head blocks
        # the consumers' release into the peer: CTA scope with crossover_lean (crossover module, note "Lean hand-off")
        self.empty_scope = "cta" if getattr(cfg, "crossover_lean", False) else "cluster"
        x = kb.block_idx(0)
        self.token = fast_div(x, p["head_blocks_mul"], p["head_blocks_shr"])
        if self.decode:
            self.h0 = (x - self.token * p["head_blocks"]) * TILE_M
        else:
            self.h0 = (x - self.token * (p["heads"] // TILE_M)) * TILE_M
        if cfg.topk_length:
            at = self.batch_and_t(p)[0] if self.decode else self.token
            raw = kb.load(kb.gep(p["topk_length"], at, "i32"), "i32", align=4)
            self.length = raw.smax(0).smin(p["topk"])
        else:
            self.length = p["topk"]
        self.n_tiles = (self.length + (BN - 1)) // BN
        self.begin, self.end = 0, self.n_tiles
        if self.decode and cfg.split:
            self.split = kb.block_idx(1)
            per = (self.n_tiles + p["num_splits"] - 1) // p["num_splits"]
            self.begin = (self.split * per).smin(self.n_tiles)
            self.end = (self.begin + per).smin(self.n_tiles)

    def batch_and_t(self, p) -> tuple:
        """Decode: (b, t) of token = b x seqlen_q + t, emitted where asked (the role that needs it: values
        made before the role split stay live into the gather warp's 24 registers and spill)."""
        batch = fast_div(self.token, p["seqlen_q_mul"], p["seqlen_q_shr"])
        return batch, self.token - batch * p["seqlen_q"]


# ---- producer -------------------------------------------------------------------------------------

def _gather_role(kb, work: _Work, p, kv_smem, kv_pipe, bias_smem, rows_smem):
    """Note "Gather": per tile, lane l first looks up rows l and l + 32 (position -> index ->
    validity and kv element offset, 0 when invalid), writes their biases (note "Bias") and offsets
    (`rows_smem`, 8 bytes a row) and the warp syncs; then the copies: one warp instruction moves 4
    whole 128-byte chunk rows (lane l: row 4 i + l / 8, 16-byte unit l % 8: coalesced, and 4
    distinct rows of SMEM per instruction, conflict-free), each lane reading its row's offset and
    validity once per trip of 9 chunks, into the 128B-swizzled layout TMA boxes give (chunk c of
    row r at c * 64 * 128 + r * 128, unit u at (u ^ r % 8) * 16). A second warp sync keeps the
    next tile's offsets from overwriting ones still to be read."""
    lane = kb.thread_idx(0) % GATHER_LANES
    sub, unit = lane // UNITS, lane % UNITS
    rows_per_instr = GATHER_LANES // UNITS          # 4
    tile_bytes = MLASparseConfig.tile_bytes()
    idx_row = kb.gep(p["indices"], work.token.to("i64") * p["indices_stride_s"], "i32")
    kv_lane = kb.gep(p["kv"], unit * 8, "bf16")    # this lane's 16-byte unit of row 0
    loop = kb.for_(work.begin, work.end, 1, carry=kv_pipe.initial_state())
    with loop as (j, s):
        # 1. this lane's rows: position in the token's list -> index -> validity, element offset
        rows = []
        for e in range(ROWS_PER_LANE):
            pos = j * BN + lane + GATHER_LANES * e
            index = kb.load(kb.gep(idx_row, pos, "i32"), "i32", align=4)
            valid = pos.slt(work.length) & index.sge(0) & index.slt(p["s_kv"])
            rows.append((valid, select(valid, index, const(0)).to("i64") * p["kv_stride_s"]))
        # 2. wait for the stage to be free; biases into the stage, offsets into rows_smem; warp sync
        kv_pipe.producer_acquire(s)
        for e, (valid, offset) in enumerate(rows):
            r = lane + GATHER_LANES * e
            bias = select(valid, const(0.0, "f32"), const(NEG_INF, "f32"))
            kb.store(bias, kb.gep(bias_smem, (s.stage * BN + r) * 4, "i8"), align=4)
            kb.store(offset, kb.gep(rows_smem, r * 8, "i8"), align=8)
        kb.named_barrier(BAR_GATHER, GATHER_LANES)
        # 3. the copies: trip i, row 4 i + l / 8, its 9 chunks
        base = kb.gep(kv_smem, s.stage * tile_bytes, "i8")
        with kb.for_(0, BN // rows_per_instr, 1) as (i, _):
            r = i * rows_per_instr + sub
            offset = kb.load(kb.gep(rows_smem, r * 8, "i8"), "i64", align=8)
            valid = kb.load(kb.gep(bias_smem, (s.stage * BN + r) * 4, "i8"), "f32", align=4).eq(0.0)
            src = kb.gep(kv_lane, offset, "bf16")
            dst = kb.gep(base, r * SWIZZLE + (unit ^ (r % 8)) * 16, "i8")
            for c in range(QK_CHUNKS):
                fa4.cp_async(kb.gep(src, c * CHUNK, "bf16"), kb.gep(dst, c * BN * SWIZZLE, "i8"), valid)
        # 4. each lane: its copies arrive on full[stage] when they land, then its commit; warp sync
        fa4.cp_async_arrive(s.stage, pipe=kv_pipe.name)
        kv_pipe.producer_commit(s)
        kb.named_barrier(BAR_GATHER, GATHER_LANES)
        loop.yield_(s.advance())


def _gather_role_wg(kb, work: _Work, p, kv_smem, pipes, bias_smem):
    """Note "Producer warpgroup": thread t of the 128 (group g = t / 8, unit u = t % 8) looks up rows
    g + 16 i (i < 4) of each tile itself (8 threads a row load the same index: a broadcast), then fills
    the stage's two halves, each after waiting for that half to be free: chunks 0-3 (kv_pipe; the
    unit-0 thread of each group first writes its rows' biases, note "Bias"), then chunks 4-8 (kv_hi);
    a warp instruction moves 4 whole 128-byte chunk rows (coalesced; 4 distinct SMEM rows: conflict-
    free), into the layout _gather_role writes. Each thread's copies arrive on the half's full barrier
    when they land (cp_async_arrive), then it commits."""
    t = kb.thread_idx(0) % PRODUCER_THREADS
    group, unit = t // UNITS, t % UNITS
    tile_bytes = MLASparseConfig.tile_bytes()
    idx_row = kb.gep(p["indices"], work.token.to("i64") * p["indices_stride_s"], "i32")
    kv_unit = kb.gep(p["kv"], unit * 8, "bf16")    # this thread's 16-byte unit of row 0
    lo, hi = pipes
    loop = kb.for_(work.begin, work.end, 1, carry=lo.initial_state())
    with loop as (j, s):
        # 1. this thread's rows: position in the token's list -> index -> validity, element offset
        rows = []
        for i in range(BN // GROUPS):
            r = group + GROUPS * i
            pos = j * BN + r
            index = kb.load(kb.gep(idx_row, pos, "i32"), "i32", align=4)
            valid = pos.slt(work.length) & index.sge(0) & index.slt(p["s_kv"])
            rows.append((r, valid, select(valid, index, const(0)).to("i64") * p["kv_stride_s"]))
        base = kb.gep(kv_smem, s.stage * tile_bytes, "i8")
        # 2. the halves, each: wait until free, (first half) biases, copies, arrive when landed, commit
        for pipe, chunks in ((lo, range(HALF_CHUNKS)), (hi, range(HALF_CHUNKS, QK_CHUNKS))):
            pipe.producer_acquire(s)
            if pipe is lo:
                with kb.if_(unit.eq(0)).then_():
                    for r, valid, _ in rows:
                        bias = select(valid, const(0.0, "f32"), const(NEG_INF, "f32"))
                        kb.store(bias, kb.gep(bias_smem, (s.stage * BN + r) * 4, "i8"), align=4)
            for r, valid, offset in rows:
                src = kb.gep(kv_unit, offset, "bf16")
                dst = kb.gep(base, r * SWIZZLE + (unit ^ (r % 8)) * 16, "i8")
                for c in chunks:
                    fa4.cp_async(kb.gep(src, c * CHUNK, "bf16"), kb.gep(dst, c * BN * SWIZZLE, "i8"), valid)
            fa4.cp_async_arrive(s.stage, pipe=pipe.name)
            pipe.producer_commit(s)
        loop.yield_(s.advance())


def _row_offset(kb, p, valid: Value, index: Value, paged: bool) -> Value:
    """Note "FP8 gather": the byte offset of kv row `index` (decode: of cache row page x page_size +
    offset, by the page and row strides), 0 when invalid."""
    row = select(valid, index, const(0))
    if not paged:
        return row.to("i64") * p["kv_stride_s"]
    page = fast_div(row, p["page_mul"], p["page_shr"])
    return page.to("i64") * p["kv_stride_page"] + (row - page * p["page_size"]).to("i64") * p["kv_stride_s"]


def _gather_role_fp8(kb, cfg: MLASparseConfig | MLASparseDecodeConfig, work: _Work, p, kv_smem, kv_pipe, bias_smem, rows_smem):
    """Note "FP8 gather": per tile, the rows' validity, biases (slot j % 2) and byte offsets as
    _gather_role does, then the rows' 656 bytes by cp.async, a row a trip: lane l copies its 16-byte
    piece l and, when l < 9, piece l + 32 (a row is 41 pieces; the second copy is the first's
    addresses + 512, so the loop keeps one source and one destination base)."""
    lane = kb.thread_idx(0) % GATHER_LANES
    stage_bytes = cfg.stage_bytes()
    idx_row = kb.gep(p["indices"], work.token.to("i64") * p["indices_stride_s"], "i32")
    kv_lane = kb.gep(p["kv"], lane * PIECE, "i8")    # this lane's first piece of row 0
    tail = lane.slt(FP8_PIECES - GATHER_LANES)        # a row's pieces 32 .. 40 (9 lanes)
    loop = kb.for_(work.begin, work.end, 1, carry=kv_pipe.initial_state())
    with loop as (j, s):
        # 1. this lane's rows: position in the token's list -> index -> validity, byte offset
        rows = []
        for e in range(ROWS_PER_LANE):
            pos = j * BN + lane + GATHER_LANES * e
            index = kb.load(kb.gep(idx_row, pos, "i32"), "i32", align=4)
            valid = pos.slt(work.length) & index.sge(0) & index.slt(p["s_kv"])
            rows.append((valid, _row_offset(kb, p, valid, index, work.decode)))
        # 2. wait for the stage to be free; biases into slot j % 2, offsets into rows_smem; warp sync
        kv_pipe.producer_acquire(s)
        bias_slot = kb.gep(bias_smem, (j % 2) * (BN * 4), "i8")
        for e, (valid, offset) in enumerate(rows):
            r = lane + GATHER_LANES * e
            bias = select(valid, const(0.0, "f32"), const(NEG_INF, "f32"))
            kb.store(bias, kb.gep(bias_slot, r * 4, "i8"), align=4)
            kb.store(offset, kb.gep(rows_smem, r * 8, "i8"), align=8)
        kb.named_barrier(BAR_GATHER, GATHER_LANES)
        # 3. the copies: trip r, row r's pieces l and (l < 9) l + 32, at r x 656 of the stage
        base = kb.gep(kv_smem, s.stage * stage_bytes + lane * PIECE, "i8")
        with kb.for_(0, BN, 1) as (r, _):
            offset = kb.load(kb.gep(rows_smem, r * 8, "i8"), "i64", align=8)
            valid = kb.load(kb.gep(bias_slot, r * 4, "i8"), "f32", align=4).eq(0.0)
            src = kb.gep(kv_lane, offset, "i8")
            dst = kb.gep(base, r * mla_fp8.ROW_BYTES, "i8")
            fa4.cp_async(src, dst, valid)
            with kb.if_(tail).then_():
                run = GATHER_LANES * PIECE
                fa4.cp_async(kb.gep(src, run, "i8"), kb.gep(dst, run, "i8"), valid)
        # 4. each lane: its copies arrive on full[stage] when they land, then its commit; warp sync
        fa4.cp_async_arrive(s.stage, pipe=kv_pipe.name)
        kv_pipe.producer_commit(s)
        kb.named_barrier(BAR_GATHER, GATHER_LANES)
        loop.yield_(s.advance())


def convert_role(kb, work: _Work, p, kv_smem, kv_pipe, bias_smem):
    """Note "FP8 converter": per tile j, load trip 0's indices, wait for its tile buffer (the ring
    stage) to be free; warp w converts rows w + 4 i (i < 16), CONVERT_GROUP rows a trip: every lane
    has each row's index (one broadcast load, a trip ahead), its validity and byte offset
    (_row_offset), loads its latent piece (16 e4m3 bytes at 16 lane,
    one coalesced 512-byte run a warp instruction) and that piece's float32 scale, and the rope unit
    lane % 8 of row lane / 8 of each ROPE_ROWS of the trip; dequantizes (mla_fp8: bf16(e4m3 x scale))
    and stores bf16 into the swizzled tile, zeros for an invalid row (its loads read row 0 of the
    cache, whatever it holds, and are discarded by the select); lane 0 writes the rows' biases into
    the tile's slot (its stage). Each thread fences its stores to the async proxy (the wgmmas read
    them) and arrives on full[stage]."""
    t = kb.thread_idx(0) % CONVERTER_THREADS
    warp, lane = t // GATHER_LANES, t % GATHER_LANES
    tile_bytes = MLASparseConfig.tile_bytes()
    zero = const(0, ("i32", 4))
    idx_row = kb.gep(p["indices"], work.token.to("i64") * p["indices_stride_s"], "i32")
    kv_piece = kb.gep(p["kv"], lane * PIECE, "i8")                     # this lane's latent piece of row 0
    kv_scale = kb.gep(p["kv"], mla_fp8.SCALES_AT + mla_fp8.WORD * ((lane * PIECE) // mla_fp8.SCALE_GROUP), "i8")
    rope_unit, rope_of = lane % mla_fp8.ROPE_UNITS, lane // mla_fp8.ROPE_UNITS
    kv_rope = kb.gep(p["kv"], mla_fp8.ROPE_AT + rope_unit * PIECE, "i8")
    trips = BN // (CONVERTER_THREADS // GATHER_LANES) // CONVERT_GROUP

    def trip_indices(j: Value, g):
        """1. trip g's rows' indices (every lane, broadcast loads)."""
        return [kb.load(kb.gep(idx_row, j * BN + warp + 4 * (g * CONVERT_GROUP + u), "i32"), "i32", align=4)
                for u in range(CONVERT_GROUP)]

    def trip_rows(j: Value, g, indices):
        """Each row of trip g: (row, validity, byte offset)."""
        rows = []
        for u, index in enumerate(indices):
            r = warp + 4 * (g * CONVERT_GROUP + u)
            valid = (j * BN + r).slt(work.length) & index.sge(0) & index.slt(p["s_kv"])
            rows.append((r, valid, _row_offset(kb, p, valid, index, True)))
        return rows

    def trip_loads(rows):
        """2. the rows' loads, all issued before any conversion."""
        ropes = []          # per ROPE_ROWS rows: this lane's row (lane / 8 of them), validity, offset
        for first in range(0, CONVERT_GROUP, ROPE_ROWS):
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
        return raws, ropes, rope_vals

    def trip_stores(tile, bias_slot, rows, raws, ropes, rope_vals):
        """3. dequantize into the tile (zeros for an invalid row), the rope units; lane 0: the biases."""
        for (r, valid, _), (raw, scale) in zip(rows, raws):
            for h, unit in enumerate(mla_fp8.dequant_piece(raw, scale)):
                at = mla_fp8.tile_offset(r, lane * PIECE + 8 * h, BN)
                kb.store(select(valid, unit, zero), kb.gep(tile, at, "i8"), align=16)
        for (rope_r, rope_ok, _), rope in zip(ropes, rope_vals):
            at = mla_fp8.tile_offset(rope_r, mla_fp8.NOPE + 8 * rope_unit, BN)
            kb.store(select(rope_ok, rope, zero), kb.gep(tile, at, "i8"), align=16)
        with kb.if_(lane.eq(0)).then_():
            for r, valid, _ in rows:
                bias = select(valid, const(0.0, "f32"), const(NEG_INF, "f32"))
                kb.store(bias, kb.gep(bias_slot, r * 4, "i8"), align=4)

    loop = kb.for_(work.begin, work.end, 1, carry=kv_pipe.initial_state())
    with loop as (j, s):
        # trip 0's index loads go out before the wait for the buffer (only the stores need it free);
        # each trip loads the next one's (the last its own again: in bounds) before its conversions
        first = trip_indices(j, 0)
        kv_pipe.producer_acquire(s)
        tile = kb.gep(kv_smem, s.stage * tile_bytes, "i8")
        bias_slot = kb.gep(bias_smem, s.stage * (BN * 4), "i8")
        trip_loop = kb.for_(0, trips, 1, carry=tuple(first))
        with trip_loop as (g, indices):
            rows = trip_rows(j, g, indices)
            loaded = trip_loads(rows)
            following = trip_indices(j, (g + 1).smin(trips - 1))
            trip_stores(tile, bias_slot, rows, *loaded)
            trip_loop.yield_(*following)
        # 4. this thread's stores to the async proxy (the consumers' wgmmas), then its arrival on full[stage]
        kb.fence("async_smem")
        kv_pipe.producer_commit(s)
        loop.yield_(s.advance())


# ---- consumers ------------------------------------------------------------------------------------

def _load_q(cs: ConsumerGeometry, work: _Work, p, q_smem, q_slot, dtype: str):
    """Q's 64 heads h0 .. h0 + 63 of the token (prefill: every row real, h_q is a multiple of 64;
    decode: heads past h_q land as zeros and read nothing)."""
    base = work.token.to("i64") * p["q_stride_s"]

    def row_source(r, cu):
        ok = (work.h0 + r).slt(p["heads"]) if work.decode else None
        return ok, base + (work.h0 + r).to("i64") * p["q_stride_h"] + (cu * 8).to("i64")

    load_q(cs, q_smem, q_slot, dtype, p["q"], row_source)


def _bias_mask(cs: ConsumerGeometry, bias_smem, stage: Value):
    """S + bias of each of this thread's columns (note "Bias"): key key0 + 2 t4 + acc_col(i)."""
    kb = cs.kb

    def mask(s):
        first = kb.gep(bias_smem, (stage * BN + cs.key0 + cs.t4 * 2) * 4, "i8")
        pairs = {}
        for col in sorted({acc_col(i) - acc_col(i) % 2 for i in range(cs.n_s)}):
            pairs[col] = kb.load(kb.gep(first, col * 4, "i8"), ("f32", 2), align=8)
        return [s[i] + pairs[acc_col(i) - acc_col(i) % 2][acc_col(i) % 2] for i in range(cs.n_s)]
    return mask


def _kv_tile(cs: ConsumerGeometry, bufs, carry, dtype: str, crossover: bool = False, empty_scope: str = "cluster"):
    q_smem, kv_smem, kv_pipe, q_slot, bias_smem = bufs
    kb = cs.kb
    s, o, m, l = carry
    # 1. wait KV_j (cp.async wrote it: generic proxy -> wgmma's async proxy); S_j = Q K_j^T of this
    #    warpgroup's 32 keys (Q's address through q_slot: the decode's _kv_tile, step 1)
    kv_pipe.consumer_wait(s)
    kb.fence("async_smem")
    q_smem = kb.gep(q_smem, kb.warp_uniform(kb.load(q_slot, "i32", align=4)), "i8")
    stage = kb.gep(kv_smem, s.stage * MLASparseConfig.tile_bytes(), "i8")
    s_acc = wait_group(issue_s(cs, q_smem, stage, dtype), pending=0)
    # 2. S += bias (note "Bias"), softmax; 3. O_w *= alpha
    frags, m, l, alpha = softmax(cs, s_acc, _bias_mask(cs, bias_smem, s.stage), m, l, dtype)
    o = vec(*[o[i] * alpha[acc_row(i)] for i in range(cs.n_o)])
    # 4. O_w += P V_j[:, 256 w ..]; release KV_j (one arrival per warpgroup)
    v_base = kb.gep(stage, cs.wg * (WG_CHUNKS * BN * SWIZZLE), "i8")
    o = wait_group(issue_pv(cs, v_base, frags, o, dtype), pending=0)
    with kb.if_(cs.is_leader).then_():
        kv_pipe.consumer_release(s)
        if crossover:   # the peer's converter writes this stage too: its empty[stage] (the other rank's)
            kv_pipe.peer_arrive(s, const(1) - kb.cluster_rank(), side="empty", scope=empty_scope)
    return s.advance(), o, tuple(m), tuple(l)


def _kv_tile_halves(cs: ConsumerGeometry, bufs, kv_hi, carry, dtype: str):
    """Note "Producer warpgroup": _kv_tile with the stage's halves waited for apart: S's wgmmas over
    columns 0..255 after kv_pipe's full barrier, those over 256..575 after kv_hi's; both halves
    released after P V (this warpgroup's V columns are in one half, its S read both)."""
    q_smem, kv_smem, kv_pipe, q_slot, bias_smem = bufs
    kb = cs.kb
    s, o, m, l = carry
    kv_pipe.consumer_wait(s)
    kb.fence("async_smem")
    q_smem = kb.gep(q_smem, kb.warp_uniform(kb.load(q_slot, "i32", align=4)), "i8")
    stage = kb.gep(kv_smem, s.stage * MLASparseConfig.tile_bytes(), "i8")

    def second_half():      # the first half's wgmmas committed as a group; the wait; wgmma.fence again
        fa4.mma_commit_group()
        kv_hi.consumer_wait(s)
        kb.fence("async_smem")
        fa4.mma_fence()

    s_acc = wait_group(issue_s(cs, q_smem, stage, dtype, at_chunk=(HALF_CHUNKS, second_half)), pending=0)
    frags, m, l, alpha = softmax(cs, s_acc, _bias_mask(cs, bias_smem, s.stage), m, l, dtype)
    o = vec(*[o[i] * alpha[acc_row(i)] for i in range(cs.n_o)])
    v_base = kb.gep(stage, cs.wg * (WG_CHUNKS * BN * SWIZZLE), "i8")
    o = wait_group(issue_pv(cs, v_base, frags, o, dtype), pending=0)
    with kb.if_(cs.is_leader).then_():
        kv_pipe.consumer_release(s)
        kv_hi.consumer_release(s)
    return s.advance(), o, tuple(m), tuple(l)


def _kv_tile_fp8(cs: ConsumerGeometry, cfg: MLASparseConfig | MLASparseDecodeConfig, bufs, tile_smem, j: Value, carry):
    """Note "FP8 gather": tile j's staged rows dequantized into the bf16 tile, the stage released,
    then _kv_tile's steps 1-4 on the tile with the biases of slot j % 2."""
    q_smem, kv_smem, kv_pipe, q_slot, bias_smem = bufs
    kb = cs.kb
    s, o, m, l = carry
    # 0. wait for the staged rows (cp.async: generic-proxy writes, read by plain loads); this warpgroup's
    #    share into the bf16 tile, fenced to the async proxy; both warpgroups sync; release the stage.
    #    The addresses start from q_slot's 0 (the decode's _kv_tile, step 1), so they are not hoisted
    kv_pipe.consumer_wait(s)
    q_at = kb.warp_uniform(kb.load(q_slot, "i32", align=4))
    tile = kb.gep(tile_smem, q_at, "i8")
    mla_fp8.emit_dequant(kb, cs.t, cs.wg, kb.gep(kv_smem, s.stage * cfg.stage_bytes() + q_at, "i8"), tile, BN)
    kb.fence("async_smem")
    kb.named_barrier(BAR_ALL, 256)
    with kb.if_(cs.is_leader).then_():
        kv_pipe.consumer_release(s)
    # 1. S_j = Q K_j^T of this warpgroup's 32 keys
    s_acc = wait_group(issue_s(cs, kb.gep(q_smem, q_at, "i8"), tile, cfg.dtype), pending=0)
    # 2. S += bias (slot j % 2), softmax; 3. O_w *= alpha
    frags, m, l, alpha = softmax(cs, s_acc, _bias_mask(cs, bias_smem, j % 2), m, l, cfg.dtype)
    o = vec(*[o[i] * alpha[acc_row(i)] for i in range(cs.n_o)])
    # 4. O_w += P V_j[:, 256 w ..] (the stage was released in 0)
    v_base = kb.gep(tile, cs.wg * (WG_CHUNKS * BN * SWIZZLE), "i8")
    o = wait_group(issue_pv(cs, v_base, frags, o, cfg.dtype), pending=0)
    return s.advance(), o, tuple(m), tuple(l)


def _mma_role(kb, cfg: MLASparseConfig, work: _Work, p, bufs, x_smem, tile_smem=None, halves=None):
    cs = ConsumerGeometry(kb, True, p["scale_log2"], x_smem)
    q_smem, _, kv_pipe, q_slot, _ = bufs
    _load_q(cs, work, p, q_smem, q_slot, cfg.dtype)
    f32 = "f32"
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    state = (kv_pipe.initial_state(), const(0.0, (f32, cs.n_o)), (neg_inf, neg_inf), (zero, zero))
    loop = kb.for_(work.begin, work.end, 1, carry=state)
    with loop as (j, carried):
        if tile_smem is not None:
            loop.yield_(*_kv_tile_fp8(cs, cfg, bufs, tile_smem, j, carried))
        elif halves is not None:
            loop.yield_(*_kv_tile_halves(cs, bufs, halves, carried, cfg.dtype))
        else:
            loop.yield_(*_kv_tile(cs, bufs, carried, cfg.dtype, work.crossover, work.empty_scope))
    _, o, m, l = loop.results
    if work.decode:
        _decode_epilogue(cs, cfg, work, p, o, m, l)
    else:
        _epilogue(cs, cfg, work, p, o, m, l)


def _epilogue(cs: ConsumerGeometry, cfg: MLASparseConfig, work: _Work, p, o: Value, m, l, totals=None):
    """Per row (head): O_w / (l + sink term) (note "Sinks"; +0 for a head that saw no key) in q's
    dtype into out by its strides; warpgroup 0's quad leaders write max_logits = m x scale (-inf
    for no key) and LSE = ln l + m x scale (+inf for no key) into [s_q, h_q]. `totals`: the rows'
    denominators where the caller summed them (note "Seesaw"), else row_totals of l."""
    kb = cs.kb
    totals = row_totals(cs, l) if totals is None else totals
    f32 = "f32"
    zero = const(0.0, f32)
    for h in (0, 1):
        total, m_scaled = totals[h], m[h] * cs.scale_log2
        empty = total.eq(0.0)
        log_total = log2(total)
        denom = total
        if cfg.sinks:
            head = work.h0 + cs.row0 + 8 * h
            sink = kb.load(kb.gep(p["sinks"], head, "f32"), "f32", align=4)
            denom = total + dsl.exp2(fma(sink, const(LOG2E, f32), zero - m_scaled))
        inv = select(empty, zero, dsl.exp2(zero - log2(denom)))
        lse = select(empty, const(float("inf"), f32), (m_scaled + log_total) * LN2)
        _store(cs, cfg, work, p, o, h, inv, lse, m[h] * p["scale"])


def _store(cs: ConsumerGeometry, cfg: MLASparseConfig, work: _Work, p, o: Value, h: int, inv: Value, lse: Value,
           max_logit: Value):
    kb = cs.kb
    head = (work.h0 + cs.row0 + 8 * h).to("i64")
    token = work.token.to("i64")
    base = token * p["out_stride_s"] + head * p["out_stride_h"] + (cs.wg * WG_COLS + cs.t4 * 2).to("i64")
    zero = const(0.0, "f32")
    for jd in range(WG_COLS // 8):      # fma(O, 1 / l, +0): -0 and an empty row's O x 0 become +0
        i = acc_pair(jd, h)
        pair = vec(fma(o[i], inv, zero), fma(o[i + 1], inv, zero)).to((cfg.dtype, 2))
        kb.store(pair, kb.gep(p["out"], base + jd * 8, cfg.dtype), align=4)
    row = token * p["heads"].to("i64") + head
    with kb.if_(cs.t4.eq(0) & cs.wg.eq(0)).then_():
        kb.store(lse, kb.gep(p["lse"], row, "f32"), align=4)
        kb.store(max_logit, kb.gep(p["max_logits"], row, "f32"), align=4)


def _decode_epilogue(cs: ConsumerGeometry, cfg: MLASparseDecodeConfig, work: _Work, p, o: Value, m, l, totals=None):
    """Note "Decode": per real row (head < h_q), O_w / l and the LSE (natural log). Unsplit: O in
    q's dtype into out by its strides, LSE into lse [batch, h_q, seqlen_q], +inf (and O 0) for a
    head that saw no key. Split: float32 O / l into o_partial [splits, batch, seqlen_q, h_q, 512],
    LSE into lse_partial [splits, batch, h_q, seqlen_q], -inf for a split that saw no key (the
    combine weighs it 0). `totals` as _epilogue's."""
    kb = cs.kb
    totals = row_totals(cs, l) if totals is None else totals
    f32 = "f32"
    zero = const(0.0, f32)
    no_key = NEG_INF if cfg.split else float("inf")
    for h in (0, 1):
        total = totals[h]
        empty = total.eq(0.0)
        log_total = log2(total)
        inv = select(empty, zero, dsl.exp2(zero - log_total))
        lse = select(empty, const(no_key, f32), (m[h] * cs.scale_log2 + log_total) * LN2)
        head = work.h0 + cs.row0 + 8 * h
        with kb.if_(head.slt(p["heads"])).then_():
            _decode_store(cs, cfg, work, p, o, h, head.to("i64"), inv, lse)


def _decode_store(cs: ConsumerGeometry, cfg: MLASparseDecodeConfig, work: _Work, p, o: Value, h: int, head: Value,
                  inv: Value, lse: Value):
    kb = cs.kb
    token, i64 = work.token.to("i64"), "i64"
    col0 = (cs.wg * WG_COLS + cs.t4 * 2).to(i64)
    lse_write = cs.t4.eq(0) & cs.wg.eq(0)
    heads, seqlen_q = p["heads"].to(i64), p["seqlen_q"].to(i64)
    batch, t = (v.to(i64) for v in work.batch_and_t(p))
    if not cfg.split:       # fma(O, 1 / l, +0): -0 and an empty row's O x 0 become +0
        base = token * p["out_stride_s"] + head * p["out_stride_h"] + col0
        zero = const(0.0, "f32")
        for jd in range(WG_COLS // 8):
            i = acc_pair(jd, h)
            pair = vec(fma(o[i], inv, zero), fma(o[i + 1], inv, zero)).to((cfg.dtype, 2))
            kb.store(pair, kb.gep(p["out"], base + jd * 8, cfg.dtype), align=4)
        lrow = (batch * heads + head) * seqlen_q + t
        with kb.if_(lse_write).then_():
            kb.store(lse, kb.gep(p["lse"], lrow, "f32"), align=4)
        return
    split = work.split.to(i64)
    base = ((split * p["tokens"].to(i64) + token) * heads + head) * D_V + col0
    for jd in range(WG_COLS // 8):
        i = acc_pair(jd, h)
        kb.store(vec(o[i] * inv, o[i + 1] * inv), kb.gep(p["o_partial"], base + jd * 8, "f32"), align=8)
    lrow = ((split * p["batch"].to(i64) + batch) * heads + head) * seqlen_q + t
    with kb.if_(lse_write).then_():
        kb.store(lse, kb.gep(p["lse_partial"], lrow, "f32"), align=4)
