"""Absorbed MLA decode over a paged latent cache on sm_90a (FlashMLA's flash_mla_with_kvcache):
one KV head of 576 columns (512 latent + 64 rope) serves as K, its first 512 columns as V, read
once from the same SMEM tile; split-KV, TMA ring, wgmma.

One CTA attends one M tile of 64 packed query rows to one contiguous range of 64-token KV tiles
(its split) of one sequence. Packed row r is query token r // heads of query head r % heads (all
query heads share the one latent head: decode_schedule's pack-GQA with group = heads), so 16 heads
x seqlen_q 2 fill 32 of the 64 rows and 128 heads x 2 take four M tiles. Grid: x = m_tile +
m_tiles * split, z = batch. The split variant writes float32 partial O (normalised by its own row
sum) and its LSE for attention_combine_sm90; the `unsplit` variant (one split) writes O in q's
dtype and the LSE itself (attention_decode_sm90, note "Unsplit": the same bits).

Roles (12 warps, 384 threads, one CTA per SM: 225 KiB of SMEM; setmaxnreg 240 / 24, note "Design"):
    warp 8        `load`  one elected thread: per KV tile j of the split, the 64 x 576 tile into a
                          ring of STAGES = 2 (kv_pipe; FP8: one stage of 656-byte rows, note
                          "FP8 latent"), as 9 column chunks (64 columns, 128B
                          swizzle) x 64 / box_rows TMA boxes, each inside one page (paging.py,
                          note "Box rows"; attention_decode_sm90, note "Paged boxes": a box at or
                          past L_b is aimed past the pool and lands as zeros).
    warps 0-7     `mma`   two consumer warpgroups w = 0, 1. Q's 64 x 576 tile is loaded by both
                          (plain loads into the swizzled layout), then per tile j each warpgroup:
                          1. wait KV_j; S = Q K_j^T over 576 columns (36 k16 steps): of its 32
                             keys 32 w .. 32 w + 31 (m64n32, note "Exchange")
                          2. mask (tokens at or past L_b; causal bottom-right by the row's token),
                             online softmax in base 2 (the row maxima of both warpgroups' keys,
                             then P of all 64 keys, through SMEM), P as wgmma A fragments
                             (registers)
                          3. O_w *= alpha
                          4. (the tile holding L_b) zero V rows past L_b (note "NaN past L_b")
                          5. O_w += P V_j[:, 256 w : 256 w + 256] (m64n256, 4 k16 steps); release
                          then O_w / l (l summed over both warpgroups) and the LSE
                          (warpgroup 0) into the partials or out.

Note "Design": the O accumulator is 64 x 512 float32, 256 registers a thread for one warpgroup:
too many. It is split by V's columns between the two warpgroups as FlashMLA does (128 registers
each), which leaves both needing P for all 64 keys. Registers per thread: O 128 + S 16 + P 16,
which the launch's 168 registers a thread cannot hold (9 or 12 warps alike: an SM
sub-partition runs three of them): the producer warp gets a warpgroup of its own and setmaxnreg
gives the consumers 240, the producer 24 (0 spills: tests/test_mla_decode.py). Q's 36 wgmma
descriptors would be hoisted out of the KV loop by LLVM (72 registers: they spilled); Q's address
is therefore re-read from SMEM after each wait (_kv_tile, step 1). How both warpgroups get P:
  * note "Exchange": warpgroup w computes S for keys 32 w .. 32 w + 31 only (Q K^T's
    64 x 64 x 576 done once per tile, as FlashMLA does), writes its rows' maxima to SMEM, one
    barrier of both warpgroups, both take the max of the two (fmax: the same bits in both), each
    computes P of its keys and its own row sums l_w (rescaled by the common alpha), writes its P
    fragments (2 k16 steps: thread t's 4 words each) to SMEM, a second barrier, and reads all 4
    k-steps back in key order: thread t holds the same rows and columns of an A fragment in
    either warpgroup. In the epilogue l = l_0 + l_1 through SMEM (a third barrier). One buffer of
    each suffices: a warpgroup rewrites the maxima of tile j + 1 only after the second barrier of
    tile j, which the other passes only after reading them, and P of tile j + 1 only after the
    first barrier of tile j + 1, which the other reaches only after reading P of tile j. 9 KiB of
    SMEM; 4.7 M MACs a tile. (Each warpgroup computing all of S itself, with no exchange, was
    timed slower and removed: notes/RESULTS.md [R-mla-decode-overlap].)
  * `seesaw` (bf16; attention_mla_decode_seesaw_sm90, its own note): the tiles in pairs, each
    warpgroup (a role of its own) computes S of one tile over all 64 keys and its own softmax, P and the
    row maxima crossing through SMEM (P in the tile's rope columns) with one-way named barriers.

Note "NaN past L_b" (attention_decode_sm90's): rows at or past L_b of the tile that holds L_b are
real cache rows that may hold NaN; P V multiplies them by P = 0 and 0 x NaN = NaN, so their V
columns are zeroed in SMEM before P V. K and V share the tile: both warpgroups first finish S_j
(the exchange's barriers follow both S_j), then each zeroes the
rows in its own 256 V columns, fences them to the async proxy and syncs its warpgroup. (K's columns
of those rows are masked to -inf.)

Note "FP8 latent" (`fp8`, FlashMLA's 656-byte rows: common/mla_fp8.py): the ring holds staged
rows (one stage: attention_mla_decode_sm90_config, note "FP8 SMEM plan"), one TMA box of whole
rows per page piece. Per tile, after waiting for its stage, warpgroup w dequantizes the latent
columns 256 w .. 256 w + 255 (bf16(e4m3 x its row's scale)) and copies half the rows' rope into
one bf16 tile of the usual swizzled layout (rows at or past L_b as zeros, so no V tail is zeroed
later), fences, and both pass one barrier; each then releases the stage and runs steps 1-5 on the
bf16 tile. Overwriting the tile for j + 1 needs no barrier before it: warpgroup w writes only its
own V columns (its P V_j has retired) and rope rows, which only S_j reads, and both warpgroups'
S_j retired before the exchange's barriers of tile j.
"""
from __future__ import annotations

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, KernelBuilder, Value, const, fast_div, fma, log2, select, vec
from .attention_mla_decode_sm90_config import BN, CONSUMERS, D_QK, D_V, LOAD_REGS, MMA_REGS, TILE_M, MLADecodeConfig
from . import attention_mla_decode_seesaw_sm90 as seesaw
from .common import mla_fp8
from .common.mla_sm90 import (BAR_ALL, BAR_WG, CHUNK, LN2, NEG_INF, QK_CHUNKS, SWIZZLE, WG_CHUNKS, WG_COLS,
                              ConsumerGeometry, issue_pv, issue_s, load_q, row_totals, softmax, zero_rows_from)
from .common.wgmma import acc_col, acc_pair, acc_row, wait_group


def build(cfg: MLADecodeConfig = MLADecodeConfig()) -> dsl.KernelIR:
    cfg.validate()
    if cfg.swap_ab:     # the opt-in swap-AB kernel (its own file; it reuses _Work and _load_role)
        from . import attention_mla_decode_sm90_swapab
        return attention_mla_decode_sm90_swapab.build(cfg)
    kb = KernelBuilder(cfg.name(), arch="sm_90a", block=(cfg.threads, 1, 1), config=cfg.key(), min_ctas_per_sm=1)
    if cfg.fp8:     # note "FP8 latent": whole 656-byte rows as 164 int32 words, unswizzled
        spec = dict(dtype="i32", box=(mla_fp8.ROW_WORDS, 1, cfg.box_rows, 1), swizzle="none")
    else:
        spec = dict(dtype=cfg.dtype, box=(CHUNK, 1, cfg.box_rows, 1), swizzle="128B")
    p = kb.params_from(cfg.params, tma={"kv_cache": spec})
    with kb.body():
        q_smem = kb.smem("q_smem", TILE_M * D_QK * 2)
        kv_smem = kb.smem("kv_smem", cfg.stages * cfg.stage_bytes())
        tile_smem = kb.smem("tile_smem", cfg.tile_bytes()) if cfg.fp8 else None   # the dequantized tile
        q_slot = kb.smem("q_slot", 16, align=16)     # holds 0: see _kv_tile, step 1
        # note "Exchange" (seesaw: its row maxima and sums)
        x_smem = kb.smem("x_smem", cfg.exchange_bytes(), align=16)
        if cfg.seesaw:      # one role per warpgroup, a ring per column chunk (attention_mla_decode_seesaw_sm90)
            seesaw.build_roles(kb, cfg, p, q_smem, kv_smem, q_slot, x_smem, (MMA_REGS, LOAD_REGS))
        else:
            _build_roles(kb, cfg, p, q_smem, kv_smem, q_slot, x_smem, tile_smem)
    return kb.finish()


def _build_roles(kb, cfg: MLADecodeConfig, p, q_smem, kv_smem, q_slot, x_smem, tile_smem):
    kv_pipe = kb.pipeline("kv_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"],
                          consumer_arrivals=CONSUMERS)
    kb.pipeline_init()
    work = _Work(kb, p)
    with kb.warp_roles():
        with kb.role("mma", first_warp=0, num_warps=4 * CONSUMERS, regs=MMA_REGS):
            _mma_role(kb, cfg, work, p, q_smem, kv_smem, kv_pipe, q_slot, x_smem, tile_smem)
        with kb.role("load", first_warp=4 * CONSUMERS, num_warps=1, regs=LOAD_REGS):
            _load_role(kb, cfg, work, p, kv_smem, kv_pipe)


def div(p, name):
    return p[f"{name}_mul"], p[f"{name}_shr"]


class _Work:
    """This CTA's work item: batch b, M tile, split, L_b (cache_seqlens[b] clamped to [0, capacity],
    capacity = the block table's pages x page_size) and the split's KV tiles [begin, end)
    (decode_schedule.split_range of ceil(L_b / BN) tiles)."""

    def __init__(self, kb, p):
        x = kb.block_idx(0)
        self.split = fast_div(x, *div(p, "m_tiles"))
        self.m_tile = x - self.split * p["m_tiles"]
        self.batch = kb.block_idx(2)
        raw = kb.load(kb.gep(p["cache_seqlens"], self.batch, "i32"), "i32", align=4)
        self.length = raw.smax(0).smin(p["capacity"])
        n_tiles = (self.length + (BN - 1)) // BN
        base = n_tiles // p["num_splits"]
        extra = n_tiles - base * p["num_splits"]
        before = self.split.lt(extra)
        self.begin = self.split * base + select(before, self.split, extra)
        self.end = self.begin + base + select(before, const(1), const(0))


# ---- producer -------------------------------------------------------------------------------------

def _box_origin(kb, p, work: _Work, row_at: Value, t: Value, real: Value | None = None):
    """(page, row) of the box starting at token t; a box at or past L_b (or of a tile that is not
    ``real``) reads no block-table entry and is aimed at page num_pages, past the pool: TMA fills
    zeros. row_at: the sequence's row of the block table (elements)."""
    live = t.slt(work.length) if real is None else t.slt(work.length) & real
    slot = fast_div(t, *div(p, "page"))
    row = t - slot * p["page_size"]
    entry = kb.load(kb.gep(p["block_table"], row_at + select(live, slot, const(0)).to("i64"), "i32"), "i32",
                    align=4)
    page = entry.smax(0).smin(p["num_pages"] - 1)
    return select(live, page, p["num_pages"]), row


def _load_role(kb, cfg: MLADecodeConfig, work: _Work, p, kv_smem, kv_pipe):
    tile_bytes = cfg.stage_bytes()
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(p["kv_cache"])
        row_at = work.batch.to("i64") * p["block_table_stride"].to("i64")
        loop = kb.for_(work.begin, work.end, 1, carry=kv_pipe.initial_state())
        with loop as (j, s):
            kv_pipe.producer_acquire(s)
            kv_pipe.producer_commit(s, tx_bytes=tile_bytes)
            base = s.stage * tile_bytes
            for i in range(cfg.boxes_per_tile):
                page, row = _box_origin(kb, p, work, row_at, j * BN + i * cfg.box_rows)
                if cfg.fp8:     # note "FP8 latent": box_rows whole rows
                    dst = kb.gep(kv_smem, base + mla_fp8.stage_offset(i * cfg.box_rows, 0), "i8")
                    fa4.tma_load(p["kv_cache"], dst, s.stage, [const(0), const(0), row, page], pipe=kv_pipe.name,
                                 box=[mla_fp8.ROW_WORDS, 1, cfg.box_rows, 1], elem_bytes=mla_fp8.WORD)
                    continue
                for c in range(QK_CHUNKS):
                    dst = kb.gep(kv_smem, base + c * BN * SWIZZLE + i * cfg.box_rows * SWIZZLE, "i8")
                    fa4.tma_load(p["kv_cache"], dst, s.stage, [const(c * CHUNK), const(0), row, page],
                                 pipe=kv_pipe.name, box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=ELEM_BYTES[cfg.dtype])
            loop.yield_(s.advance())


# ---- consumers ------------------------------------------------------------------------------------

class _Consumer(ConsumerGeometry):
    """A consumer thread's geometry (ConsumerGeometry) and its two rows' packed query rows: token,
    head and causal end."""

    def __init__(self, kb, cfg: MLADecodeConfig, work: _Work, p, x_smem=None):
        super().__init__(kb, not cfg.seesaw, p["scale_log2"], x_smem)   # seesaw: S of all 64 keys
        self.work, self.p = work, p
        m0 = work.m_tile * TILE_M
        self.packed = [m0 + self.row0 + 8 * h for h in (0, 1)]
        self.token, self.head, self.end = [], [], []
        for r in self.packed:
            tok = fast_div(r, *div(p, "heads"))
            self.token.append(tok)
            self.head.append(r - tok * p["heads"])
            hidden = (p["seqlen_q"] - 1 - tok) * p["causal"]      # causal, aligned bottom-right
            self.end.append((work.length - hidden).smax(0))
        self.row_ok = [r.lt(p["rows"]) for r in self.packed]


def _load_q(cs: _Consumer, q_smem, q_slot, dtype: str):
    """Q's 64 packed rows (common.mla_sm90.load_q); rows past `rows` are zeros."""
    p, work = cs.p, cs.work
    m0 = work.m_tile * TILE_M

    def row_source(r, cu):
        packed = m0 + r
        ok = packed.lt(p["rows"])
        tok = fast_div(packed, *div(p, "heads"))
        head = packed - tok * p["heads"]
        index = (work.batch.to("i64") * p["q_stride_b"] + tok.to("i64") * p["q_stride_s"]
                 + head.to("i64") * p["q_stride_h"] + (cu * 8).to("i64"))
        return ok, index

    load_q(cs, q_smem, q_slot, dtype, p["q"], row_source)


def _mask(cs: _Consumer, j: Value):
    """Key j BN + key0 + col hidden from a row when it is >= the row's end (attention_decode_sm90._softmax's)."""
    def mask(s):
        vis = [cs.end[h] - j * BN - cs.key0 - cs.t4 * 2 for h in (0, 1)]
        return [select(vis[acc_row(i)].sle(acc_col(i)), const(NEG_INF, "f32"), s[i]) for i in range(cs.n_s)]
    return mask


def _zero_v_tail(cs: _Consumer, v_base, valid: Value):
    """Zero rows [valid, BN) of this warpgroup's four V chunks at v_base (note "NaN past L_b")."""
    kb = cs.kb
    zero_rows_from(kb, cs.t, v_base, valid, WG_CHUNKS)
    kb.fence("async_smem")
    kb.named_barrier(BAR_WG, 128, select=cs.wg, span=CONSUMERS)


def _dequant_tile(cs: _Consumer, staged, tile_smem, valid: Value | None):
    """note "FP8 latent": this warpgroup's share of the staged 656-byte rows into the bf16 tile
    (rows at or past `valid` as zeros), fenced to the async proxy, then a barrier of both
    warpgroups: the tile is whole and neither reads the stage again."""
    kb = cs.kb
    mla_fp8.emit_dequant(kb, cs.t, cs.wg, staged, tile_smem, BN, valid)
    kb.fence("async_smem")
    kb.named_barrier(BAR_ALL, 256)


def _kv_tile(cs: _Consumer, bufs, j: Value, carry, masked: bool, cfg: MLADecodeConfig):
    q_smem, kv_smem, kv_pipe, q_slot, tile_smem = bufs
    kb, work, dtype = cs.kb, cs.work, cfg.dtype
    s, o, m, l = carry
    # 1. S_j = Q K_j^T (each warpgroup its 32 keys). Q's address comes through a load of q_slot (0) after
    #    the wait: LLVM then keeps Q's 36 wgmma descriptors in the loop instead of hoisting them
    #    (72 registers for the whole loop: they spilled)
    kv_pipe.consumer_wait(s)
    q_at = kb.warp_uniform(kb.load(q_slot, "i32", align=4))
    if cfg.fp8:     # 1a. (FP8) dequantize KV_j into the bf16 tile, release its stage (note "FP8 latent");
        #             its addresses too start from q_slot's 0, so they are not hoisted out of the loop
        valid = work.length - j * BN if masked else None
        tile_smem = kb.gep(tile_smem, q_at, "i8")
        _dequant_tile(cs, kb.gep(kv_smem, s.stage * cfg.stage_bytes() + q_at, "i8"), tile_smem, valid)
        with kb.if_(cs.is_leader).then_():
            kv_pipe.consumer_release(s)
    q_smem = kb.gep(q_smem, q_at, "i8")
    stage = tile_smem if cfg.fp8 else kb.gep(kv_smem, s.stage * MLADecodeConfig.tile_bytes(), "i8")
    s_acc = wait_group(issue_s(cs, q_smem, stage, dtype), pending=0)
    # 2. softmax, 3. O_w *= alpha
    frags, m, l, alpha = softmax(cs, s_acc, _mask(cs, j) if masked else None, m, l, dtype)
    o = vec(*[o[i] * alpha[acc_row(i)] for i in range(cs.n_o)])
    # 4. V rows past L_b zeroed (only the tile that holds L_b), once both warpgroups' S_j retired
    #    (FP8: the dequantization wrote them as zeros; the exchange's barriers follow both S_j)
    v_base = kb.gep(stage, cs.wg * (WG_CHUNKS * BN * SWIZZLE), "i8")
    if masked and not cfg.fp8:
        valid = work.length - j * BN
        with kb.if_(valid.slt(BN)).then_():
            _zero_v_tail(cs, v_base, valid)
    # 5. O_w += P V_j[:, 256 w ..]; release KV_j (one arrival per warpgroup; FP8: released in 1a)
    o = wait_group(issue_pv(cs, v_base, frags, o, dtype), pending=0)
    if not cfg.fp8:
        with kb.if_(cs.is_leader).then_():
            kv_pipe.consumer_release(s)
    return s.advance(), o, tuple(m), tuple(l)


def _mma_role(kb, cfg: MLADecodeConfig, work: _Work, p, q_smem, kv_smem, kv_pipe, q_slot, x_smem, tile_smem=None):
    cs = _Consumer(kb, cfg, work, p, x_smem)
    _load_q(cs, q_smem, q_slot, cfg.dtype)
    f32 = "f32"
    bufs = (q_smem, kv_smem, kv_pipe, q_slot, tile_smem)
    # tiles every row sees entirely need no mask: keys < min over the rows of `end` (token 0's)
    hidden0 = (p["seqlen_q"] - 1) * p["causal"]
    full = (work.length - hidden0).smax(0) // BN
    split = full.smax(work.begin).smin(work.end)
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    state = (kv_pipe.initial_state(), const(0.0, (f32, cs.n_o)), (neg_inf, neg_inf), (zero, zero))
    for lo, hi, masked in ((work.begin, split, False), (split, work.end, True)):
        loop = kb.for_(lo, hi, 1, carry=state)
        with loop as (j, carried):
            loop.yield_(*_kv_tile(cs, bufs, j, carried, masked, cfg))
        state = loop.results
    _epilogue(cs, cfg, state[1], state[2], state[3])


def _epilogue(cs: _Consumer, cfg: MLADecodeConfig, o: Value, m, l):
    """O_w / l (this warpgroup's 256 columns) and the LSE (warpgroup 0) of this thread's two rows:
    float32 partials into [num_splits, batch, seqlen_q, heads, 512] and [num_splits, batch, heads,
    seqlen_q] (LSE -inf for a split that saw no key); unsplit, O in q's dtype into out by its
    strides and the LSE (+inf for a row that sees no key) into lse [batch, heads, seqlen_q]."""
    _write_rows(cs, cfg, o, m, row_totals(cs, l))


def _write_rows(cs: _Consumer, cfg: MLADecodeConfig, o: Value, m, totals):
    """_epilogue's writes, given both rows' softmax denominators."""
    kb = cs.kb
    for h in (0, 1):
        total = totals[h]
        empty = total.eq(0.0)
        log_total = log2(total)
        inv = select(empty, const(0.0, "f32"), dsl.exp2(const(0.0, "f32") - log_total))
        no_key = float("inf") if cfg.unsplit else NEG_INF
        lse = select(empty, const(no_key, "f32"), (m[h] * cs.scale_log2 + log_total) * LN2)
        with kb.if_(cs.row_ok[h]).then_():
            _store(cs, cfg, o, h, inv, lse)


def _store(cs: _Consumer, cfg: MLADecodeConfig, o: Value, h: int, inv: Value, lse: Value):
    kb, p, work = cs.kb, cs.p, cs.work
    token, head = cs.token[h].to("i64"), cs.head[h].to("i64")
    col0 = (cs.wg * WG_COLS + cs.t4 * 2).to("i64")
    lse_write = cs.t4.eq(0) & cs.wg.eq(0)
    if cfg.unsplit:   # attention_decode_sm90, note "Unsplit": fma(O, 1 / l, +0) in q's dtype
        base = (work.batch.to("i64") * p["out_stride_b"] + token * p["out_stride_s"] + head * p["out_stride_h"]
                + col0)
        zero = const(0.0, "f32")
        for jd in range(WG_COLS // 8):
            i = acc_pair(jd, h)
            pair = vec(fma(o[i], inv, zero), fma(o[i + 1], inv, zero)).to((cfg.dtype, 2))
            kb.store(pair, kb.gep(p["out"], base + jd * 8, cfg.dtype), align=4)
        lrow = (work.batch.to("i64") * p["heads"].to("i64") + head) * p["seqlen_q"].to("i64") + token
        with kb.if_(lse_write).then_():
            kb.store(lse, kb.gep(p["lse"], lrow, "f32"), align=4)
        return
    sb = (work.split * p["batch"] + work.batch).to("i64")
    row = (sb * p["seqlen_q"].to("i64") + token) * p["heads"].to("i64") + head
    base = row * D_V + col0
    for jd in range(WG_COLS // 8):
        i = acc_pair(jd, h)
        kb.store(vec(o[i] * inv, o[i + 1] * inv), kb.gep(p["o_partial"], base + jd * 8, "f32"), align=8)
    lrow = (sb * p["heads"].to("i64") + head) * p["seqlen_q"].to("i64") + token
    with kb.if_(lse_write).then_():
        kb.store(lse, kb.gep(p["lse_partial"], lrow, "f32"), align=4)
