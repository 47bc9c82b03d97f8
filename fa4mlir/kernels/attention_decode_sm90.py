"""Decode attention over the KV-cache operand on sm_90a: split-KV, pack GQA, TMA rings, wgmma.

One CTA attends one M tile of 64 packed query rows to one contiguous range of KV tiles (its
split) of one sequence, and writes float32 partial O (normalised by its own row sum) and its LSE;
attention_combine_sm90 merges the splits (attention_decode_sm90_config: the launch contracts). The
`unsplit` variant (a call of one split) attends to the whole sequence and writes the final O and
LSE itself (note "Unsplit").

Grid: x = m_tile + m_tiles * split, y = the CTA's head block (a KV head when GQA is packed, else a
query head), z = batch. Packed row r of the CTA (decode_schedule.PackGQA) is query token
r // cta_heads of query head y * cta_heads + r % cta_heads (cta_heads = group packed, else 1).

Roles (5 warps, 160 threads; 6 with the gather's two producer warps; no setmaxnreg: neither role
is register-bound, and the small block lets two CTAs share an SM, attention_decode_sm90_config.DEFAULT_STAGES):
    warp 4        `load`  one elected thread: for each KV tile j of the split, K_j then V_j into
                          rings of `stages` (k_pipe, v_pipe), each tile as bn / box_rows TMA boxes
                          per 64-column chunk (note "Paged boxes"); or, for page sizes
                          whose boxes would hold under 8 rows, FP8 16 (cfg.gather), warps 4-5, every
                          lane, by a cp.async gather (note "Gather", at _gather_role).
    warps 0-3     `mma`   (one warpgroup) loads the 64 x D Q tile itself (plain loads, packed rows, into the
                          128B-swizzled layout wgmma reads), then per tile j:
                          1. wait K_j; S = Q K_j^T; release K_j
                          2. softcap (cfg.softcap: tanh), mask (tokens at or past the sequence's
                             length L_b, causal bottom-right, and the compile-time window or chunk:
                             note "Window"), online softmax in base 2, P as wgmma A fragments
                          3. O *= alpha
                          4. wait V_j; zero V rows past L_b (note "NaN past L_b"); O += P V_j;
                             release V_j
                          (an e4m3 cache: K_j and V_j waited for and converted together first,
                          note "FP8"), then the epilogue: O / l and LSE into the partial workspaces
                          (unsplit: O / l in q's dtype into out, the LSE into lse;
                          attention_decode_sm90_epilogue.py).

Note "Paged boxes": the cache is a 4-D tensor [pages, page_rows, kv_heads, D] to TMA (a contiguous
cache: [batch, seqlen_cache, kv_heads, D], the page being the sequence). A paged tile of bn tokens
is cut into boxes of box_rows = gcd(bn, page_size) rows, which never straddle a page
(paging.py, note "Box rows"); box i of tile j holds tokens t = j bn + i box_rows .. and comes from
pool page page_table[b, t / page_size] (clamped into [0, num_pages)), row t % page_size. A box
that starts at or past L_b reads no page-table entry: it is aimed at page num_pages, outside the
tensor, so TMA fills it with zeros (and still counts its bytes on the stage's barrier).

Note "FP8": an e4m3 cache arrives by TMA unswizzled (one box of D bytes per row group) into its
own rings. Per tile the consumer waits for both K_j and V_j, converts both in one pass to f16
(fa4.cvt_e4m3x2: exact) into one f16 tile each (k16, v16) in the 128B-swizzled layout wgmma reads,
fences them to the async proxy and syncs the warpgroup once for the pair, releases both e4m3 stages
(converted, no longer read), then runs S, the softmax and P V with no conversion between them, the
GEMMs in f16 (Q rounded to f16 once when q is bf16: |q| above 65504 would overflow; O, LSE and the
combine stay float32, out in q's dtype). Which thread converts which 16 bytes, and why no access
conflicts in a bank: common/e4m3_tile.py, note "Bank phases". V rows past L_b convert to zeros.
Scales never touch the tiles: a per-tensor or per-KV-head k_scale multiplies the softmax scale
and v_scale the epilogue's 1 / l; per-block (page or token block) scales multiply S's columns
after Q K^T and P's columns before P V (the row sum l takes P unscaled), with a token's v scale
forced to 0 at or past L_b.

With cfg.swap_ab (attention_decode_sm90_swapab.py, note "Swap AB") the consumer computes S^T = K_j Q^T
with K_j converted in registers into wgmma A fragments (no f16 K tile), the softmax over S^T's columns,
and P V from a P tile in SMEM; at most 8 packed query rows.

Note "Unsplit": with one split the combine's arithmetic is exact: weight exp2((lse_0 - lse_0) log2 e)
= 1, sum 1, 1 / sum = exp2(-log2 1) = 1, LSE lse_0 + log2(1) ln 2 = lse_0; it writes O_0 (= O * (1 / l),
float32) rounded to q's dtype (0 + O_0 for the accumulation: -0 becomes +0), and for a row that saw
no key (l = 0, lse_0 = -inf) O = +0 and LSE = +inf. The unsplit epilogue writes the same values
directly: fma(O, 1 / l, +0) (the +0 turns -0, and O x 0 of an empty row, into +0) converted to q's
dtype at out[b, t, h] by out's strides, and LSE = +inf for an empty row; so a call gives the bits
the split kernel and the combine gave at num_splits = 1, with no float32 round trip through memory.
Only the epilogue differs: the work item keeps the split arithmetic (num_splits = 1 gives split 0
and every tile); with begin and end folded to constants ptxas spilled the FP8 paged block-scale
kernel at its 168 registers.

Note "Window" (cfg.windowed: DecodeConfig's window_left, window_right, chunk; common.mask_family):
query token t of the sequence sees keys [lo, hi) = row_keys(mask, t, seqlen_q, L_b), bottom-right
(diag = t + L_b - seqlen_q), hi also bounded by the runtime causal flag (diag + 1). lo and hi never
decrease with t, so the M tile's first and last tokens bound its KV tiles: it visits [lo(first) / bn,
ceil(hi(last) / bn)), and those tiles, not ceil(L_b / bn), are what the splits divide (both roles'
loops start at the first tile the window reaches: the tiles on its left are never loaded, and a
split past the live range has no tile and writes LSE -inf, which the combine weighs 0). Tiles inside
[lo(last), hi(first)) every row sees whole and run unmasked; the edges run the masked softmax, which
hides key k from a row unless lo <= k < hi (common.masks.hidden). Without a window or chunk the
kernel keeps its original mask code (and so its PTX).

Note "Sinks" (cfg.sinks, unsplit only): the head's sink logit b (float32, natural log) joins the
row's max and sum in the epilogue, as in attention_fwd_sm90: with a = m scale_log2 and b' = b log2 e,
M = max(a, b') (0 when both are -inf), l' = l 2^(a - M) + 2^(b' - M), O = O 2^(a - M) / l', LSE =
(M + log2 l') ln 2; a row that sees no key gets O = 0, LSE = b. With several splits the split kernel
never adds it: the combine's sink variant does, once (attention_combine_sm90).

Note "Varlen q" (cfg.varlen_q: flash_attn_varlen_func with a page_table, chunked prefill of a
ragged batch): q and out are packed [total_q, heads, D] and sequence b's queries are rows
cu_seqlens_q[b] .. cu_seqlens_q[b + 1] (read here, never on the host). The work item reads its
sequence's start q0 and length sq_b (a decreasing pair reads as 0) and uses sq_b where the dense
kernel uses seqlen_q: its packed rows are sq_b x cta_heads, the causal mask hides the keys past
L_b - (sq_b - 1 - token). The grid's m_tiles come from max_seqlen_q on the host: a CTA whose
M tile starts at or past its sequence's rows runs no KV tile (both roles' loops are empty) and
stores nothing. Token t of the sequence is row q0 + t of q, out and the LSE [heads, total_q];
`seqlen_q` carries total_q (the LSE's and the partials' row count, partials [num_splits, total_q,
heads, D] and [num_splits, heads, total_q]), and the batch strides of q and out are unused.

Note "NaN past L_b": rows at or past L_b of a box that starts before L_b are real cache rows
(stale tokens, unused rows of the last page) and may hold anything, NaN included. K's are harmless
(their scores are replaced by -inf before the max), but P V multiplies V's by P = 0, and 0 x NaN
is NaN; so the consumer writes zeros over those V rows in SMEM before the P V GEMM (only in the
tile that holds L_b), then fences them to the async proxy (FP8: the conversion writes them as
zeros, in every tile of the masked loop).
"""
from __future__ import annotations

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import (ELEM_BYTES, KernelBuilder, PipeState, Value, const, fast_div, fma, fmax, select, tanh, tree_reduce,
                   undef, vec)
from .attention_decode_sm90_config import TILE_M, DecodeConfig
from . import attention_decode_sm90_swapab as swapab
from .attention_decode_sm90_epilogue import _epilogue
from .common import e4m3_tile
from .common.constants import NEG_INF
from .common.half_words import bf16x2_to_f16x2
from .common.masks import ValueOps, hidden, row_keys
from .common.softmax import max_update
from .common.wgmma import a_frag_pairs, acc_col, acc_row, row_regs, wait_group

SWIZZLE = 128          # bytes per swizzled row: 64 16-bit columns
CHUNK = 64             # head-dim columns per swizzle chunk
UNITS = SWIZZLE // 16  # 16-byte units per swizzled row
WGMMA_K = 16
BAR_CONSUMER = 1       # named barrier of the consumer warpgroup (128 threads)
GATHER_UNROLL = 8      # cp.asyncs per trip of the gather's copy loop (note "Gather"): first guess
BAR_GATHER = 2         # named barrier of the gather's producer warps


def build(cfg: DecodeConfig = DecodeConfig()) -> dsl.KernelIR:
    cfg.validate()
    kb = KernelBuilder(cfg.name(), arch="sm_90a", block=(cfg.threads, 1, 1), config=cfg.key(),
                       min_ctas_per_sm=cfg.ctas_per_sm)
    if cfg.fp8:   # note "FP8": rows of D bytes, unswizzled
        spec = dict(dtype="e4m3", box=(cfg.head_dim, 1, cfg.box_rows, 1), swizzle="none")
    else:
        spec = dict(dtype=cfg.dtype, box=(CHUNK, 1, cfg.box_rows, 1), swizzle="128B")
    specs = {n: spec for n in ("k_cache", "v_cache")}
    if cfg.swap_ab:   # K's e4m3 rows 128B-swizzled: conflict-free fragment loads (attention_decode_sm90_swapab)
        specs["k_cache"] = dict(spec, swizzle="128B")
    p = kb.params_from(cfg.params, tma=specs)
    with kb.body():
        # swap_ab: its own Q^T, V f16, P and exchange buffers (attention_decode_sm90_swapab)
        q_smem = None if cfg.swap_ab else kb.smem("q_smem", TILE_M * cfg.d_chunks * SWIZZLE)
        k_smem = kb.smem("k_smem", cfg.stages * cfg.tile_bytes())
        v_smem = kb.smem("v_smem", cfg.stages * cfg.tile_bytes())
        # FP8: the tiles the tensor cores read, converted to f16 (else the ring stages themselves)
        staged = swapab.Buffers(kb, cfg) if cfg.swap_ab else (
            kb.smem("k16_smem", cfg.staged_bytes()),
            kb.smem("v16_smem", cfg.staged_bytes())) if cfg.fp8 else None
        rows_smem = kb.smem("gather_rows", cfg.bn * 8, align=16) if cfg.gather else None   # note "Gather"
        # a gather's 32 lanes each commit once (after their cp_async_arrive): 32 arrivals per fill
        arrivals = 32 * cfg.producer_warps if cfg.gather else 1
        k_pipe = kb.pipeline("k_pipe", num_stages=cfg.stages, producer="load", producer_arrivals=arrivals,
                             consumers=["mma"])
        v_pipe = kb.pipeline("v_pipe", num_stages=cfg.stages, producer="load", producer_arrivals=arrivals,
                             consumers=["mma"])
        kb.pipeline_init()
        if cfg.balanced:    # attention_decode_sm90_balanced: work items walked from cache_seqlens
            from . import attention_decode_sm90_balanced as balanced
            balanced.roles(kb, cfg, p, (k_smem, v_smem, k_pipe, v_pipe), staged)
        else:
            _roles(kb, cfg, p, q_smem, (k_smem, v_smem, k_pipe, v_pipe), staged, rows_smem)
    return kb.finish()


def _roles(kb, cfg, p, q_smem, rings, staged, rows_smem):
    """The warp roles over this CTA's one work item (_Work)."""
    k_smem, v_smem, k_pipe, v_pipe = rings
    work = _Work(kb, cfg, p)
    with kb.warp_roles():
        with kb.role("mma", first_warp=0, num_warps=4, regs=0):
            _mma_role(kb, cfg, work, p, q_smem, k_smem, v_smem, k_pipe, v_pipe, staged)
        with kb.role("load", first_warp=cfg.producer_first_warp, num_warps=cfg.producer_warps, regs=0):
            if cfg.gather:
                _gather_role(kb, cfg, work, p, k_smem, v_smem, k_pipe, v_pipe, rows_smem)
            else:
                _load_role(kb, cfg, work, p, k_smem, v_smem, k_pipe, v_pipe)


def div(p, name):
    return p[f"{name}_mul"], p[f"{name}_shr"]


class _Work:
    """This CTA's work item (computed alike by every thread): batch b, head block, KV head, M tile,
    split, the sequence length L_b (cache_seqlens[b] clamped, plus seqlen_new) and the split's KV
    tiles [begin, end) (decode_schedule.split_range of ceil(L_b / bn) tiles; unsplit: num_splits is
    1, the same arithmetic gives split 0 and every tile: note "Unsplit")."""

    def __init__(self, kb, cfg, p):
        self.cfg = cfg
        x = kb.block_idx(0)
        self.split = fast_div(x, *div(p, "m_tiles"))
        self.m_tile = x - self.split * p["m_tiles"]
        self.head_block = kb.block_idx(1)
        self.batch = kb.block_idx(2)
        self.head_base = self.head_block * p["cta_heads"]
        self.kv_head = fast_div(self.head_base, *div(p, "group"))
        raw = kb.load(kb.gep(p["cache_seqlens"], self.batch, "i32"), "i32", align=4)
        # L_b: cache_seqlens[b] clamped to [0, capacity - seqlen_new], plus the seqlen_new tokens
        # kvcache_append_sm90 wrote there first (kvcache.py's kernel contract)
        self.length = raw.smax(0).smin(p["capacity"] - p["seqlen_new"]) + p["seqlen_new"]
        n_tiles = (self.length + (cfg.bn - 1)) // cfg.bn
        # the sequence's queries: seqlen_q and `rows` of the call, or (note "Varlen q") its own
        self.q_start, self.seqlen_q, self.rows = None, p["seqlen_q"], p["rows"]
        if cfg.varlen_q:
            self.q_start = kb.load(kb.gep(p["cu_seqlens_q"], self.batch, "i32"), "i32", align=4)
            q_end = kb.load(kb.gep(p["cu_seqlens_q"], self.batch + 1, "i32"), "i32", align=4)
            self.seqlen_q = (q_end - self.q_start).smax(0)
            self.rows = self.seqlen_q * p["cta_heads"]
            n_tiles = select((self.m_tile * TILE_M).lt(self.rows), n_tiles, const(0))   # no row: no KV tile
        first = None
        if cfg.windowed:    # note "Window": only the tiles the M tile's rows reach, split among the splits
            first, last_end, self.full = self._live_tiles(kb, cfg, p)
            n_tiles = select(n_tiles.gt(0), (last_end - first).smax(0), const(0))
        base = n_tiles // p["num_splits"]
        extra = n_tiles - base * p["num_splits"]
        before = self.split.lt(extra)
        self.begin = self.split * base + select(before, self.split, extra)
        if first is not None:
            self.begin = first + self.begin
        self.end = self.begin + base + select(before, const(1), const(0))

    def row_keys(self, p, token: Value) -> tuple:
        """[lo, hi): the keys query `token` of the sequence sees (signed; empty when hi <= lo): the
        compile-time mask's (common.masks.row_keys, bottom-right: diag = token + L_b - seqlen_q),
        hi also bounded by the runtime causal flag."""
        lo, hi = row_keys(self.cfg.mask, token, self.seqlen_q, self.length, ValueOps)
        causal_end = (self.length - (self.seqlen_q - 1 - token) * p["causal"]).smax(0)
        return lo, hi.smin(causal_end)

    def _live_tiles(self, kb, cfg, p) -> tuple:
        """Note "Window": (first, end, (full_first, full_end)) KV tiles of the M tile's tokens: lo and
        hi grow with the token, so the first token's lo and the last token's hi bound the tiles any
        row sees, and [last's lo, first's hi) holds the keys every row sees (no mask there)."""
        m0 = self.m_tile * TILE_M
        tok_first = fast_div(m0, *div(p, "cta_heads"))
        tok_last = fast_div((m0 + TILE_M).smin(self.rows) - 1, *div(p, "cta_heads"))
        lo_first, hi_first = self.row_keys(p, tok_first)
        lo_last, hi_last = self.row_keys(p, tok_last)
        first = lo_first // cfg.bn                      # lo >= 0
        end = (hi_last.smax(0) + (cfg.bn - 1)) // cfg.bn
        full_first = (lo_last + (cfg.bn - 1)) // cfg.bn
        full_end = hi_first.smax(0) // cfg.bn
        return first, end, (full_first, full_end)


# ---- producer -------------------------------------------------------------------------------------

def _load_role(kb, cfg, work: _Work, p, k_smem, v_smem, k_pipe, v_pipe):
    with kb.if_(kb.elect_one()).then_():
        fa4.tma_prefetch(p["k_cache"])
        fa4.tma_prefetch(p["v_cache"])
        _load_tiles(kb, cfg, work, p, k_smem, v_smem, k_pipe, v_pipe, None)


def _load_tiles(kb, cfg, work, p, k_smem, v_smem, k_pipe, v_pipe, s0: PipeState | None) -> PipeState:
    """The elected producer thread's TMA loads of the work item's KV tiles [work.begin, work.end), the
    rings from state ``s0`` (None: the initial state); returns the state after them (the balanced
    schedule carries it across its items)."""
    tile_bytes = cfg.tile_bytes()

    def box_origin(t: Value):
        """(page, row) coordinates of the box starting at token t (note "Paged boxes")."""
        if not cfg.paged:
            return work.batch, t
        live = t.slt(work.length)
        slot = fast_div(t, *div(p, "page"))
        row = t - slot * p["page_size"]
        index = work.batch.to("i64") * p["page_table_stride"].to("i64") + select(live, slot, const(0)).to("i64")
        entry = kb.load(kb.gep(p["page_table"], index, "i32"), "i32", align=4)
        page = entry.smax(0).smin(p["num_pages"] - 1)
        return select(live, page, p["num_pages"]), row

    def fill(pipe, desc, smem, s: PipeState, t0: Value, origins):
        # 1. wait for the stage to be free, 2. expect its bytes, 3. one box per (box, chunk)
        pipe.producer_acquire(s)
        pipe.producer_commit(s, tx_bytes=tile_bytes)
        base = s.stage * tile_bytes
        for i, (page, row) in enumerate(origins):
            if cfg.fp8:   # one unswizzled box of box_rows rows of D bytes
                dst = kb.gep(smem, base + i * cfg.box_rows * cfg.head_dim, "i8")
                fa4.tma_load(desc, dst, s.stage, [const(0), work.kv_head, row, page], pipe=pipe.name,
                             box=[cfg.head_dim, 1, cfg.box_rows, 1], elem_bytes=1)
                continue
            for c in range(cfg.d_chunks):
                dst = kb.gep(smem, base + c * cfg.bn * SWIZZLE + i * cfg.box_rows * SWIZZLE, "i8")
                fa4.tma_load(desc, dst, s.stage, [const(c * CHUNK), work.kv_head, row, page],
                             pipe=pipe.name, box=[CHUNK, 1, cfg.box_rows, 1], elem_bytes=ELEM_BYTES[cfg.dtype])

    loop = kb.for_(work.begin, work.end, 1, carry=s0 or k_pipe.initial_state())
    with loop as (j, s):
        t0 = j * cfg.bn
        # V's boxes read the page table again (an L1 hit): keeping K's origins live across K's
        # fill costs 2 registers a box (spills at 1-row boxes with two CTAs per SM)
        for pipe, desc, smem in ((k_pipe, p["k_cache"], k_smem), (v_pipe, p["v_cache"], v_smem)):
            origins = [box_origin(t0 + i * cfg.box_rows) for i in range(cfg.boxes_per_tile)]
            fill(pipe, desc, smem, s, t0, origins)
        loop.yield_(s.advance())
    return loop.results


def _gather_role(kb, cfg, work: _Work, p, k_smem, v_smem, k_pipe, v_pipe, rows_smem):
    """Note "Gather": the producer warps (cfg.producer_warps) fetch each K/V tile by cp.async, 16
    bytes a lane, warp w the rows [w bn / warps, (w + 1) bn / warps). Rows first: producer thread
    l looks up rows l, l + 32 warps, .. of the tile (token -> page-table entry -> the
    row's offsets in k_cache and v_cache by their strides, in 16-byte units as u32: caches up to
    64 GiB, which kvcache_call checks; 0 for a row at or past L_b: coalesced loads, issued one
    tile ahead as loop-carried values so that their latency hides behind the tile before) and
    writes them to `rows_smem` ([bn] x (k offset, v offset), 8 bytes a row: with 16 the D128 ring
    would no longer fit two CTAs per SM);
    the warp syncs (named barrier BAR_GATHER). Then the copies: a row of D elements is `units`
    16-byte units, one warp instruction copies 32 / units whole rows (lane l: row i * 32 / units +
    l / units of instruction i, unit l % units), a lane's only per-copy work being its row's
    offset from `rows_smem` (an issue-bound warp: the producer shares its scheduler with consumer
    warps). Rows at or past L_b read nothing and land as zeros (cp.async's src-size 0). bf16/f16
    rows land in the 128B-swizzled layout the TMA boxes give (chunk c of row r at c * bn * 128 +
    r * 128, 16-byte unit u at (u ^ r % 8) * 16), FP8 rows unswizzled (row r at r * D), so the
    consumer is the same. Each lane then arrives on full[stage] through cp.async.mbarrier.arrive
    (net zero: the phase waits for its copies) and commits once; the pipelines count 32 x warps
    producer arrivals."""
    nthreads = 32 * cfg.producer_warps
    pt = kb.thread_idx(0) - 32 * cfg.producer_first_warp       # 0 .. nthreads - 1
    lane, warp = pt % 32, pt // 32
    esize = 1 if cfg.fp8 else ELEM_BYTES[cfg.dtype]
    units = cfg.head_dim * esize // 16
    rows_per_instr = 32 // units
    sub, unit = lane // units, lane % units
    warp_rows = cfg.bn // cfg.producer_warps       # warp w copies rows [w warp_rows, (w + 1) warp_rows)
    instrs = warp_rows // rows_per_instr
    unroll = min(GATHER_UNROLL, instrs)
    rows_per_trip = unroll * rows_per_instr
    assert cfg.bn % nthreads == 0 and warp_rows % 8 == 0, (cfg.bn, nthreads)
    assert instrs % unroll == 0 and (cfg.fp8 or rows_per_trip % 8 == 0), (instrs, unroll, rows_per_trip)
    first_row = warp * warp_rows
    pools = {t: kb.gep(p[t], unit * 16, "i8") for t in ("k_pool", "v_pool")}   # this lane's unit of row 0
    # this lane's SMEM offset of copy k of trip 0 (a trip of rows_per_trip rows, a multiple of 8, keeps r % 8)
    if cfg.fp8:
        dst0 = [(first_row + sub + k * rows_per_instr) * cfg.head_dim + unit * 16 for k in range(unroll)]
        trip_bytes = rows_per_trip * cfg.head_dim
    else:
        chunk, in_chunk = unit // UNITS, unit % UNITS
        dst0 = []
        for k in range(unroll):
            r = sub + k * rows_per_instr
            dst0.append(chunk * (cfg.bn * SWIZZLE) + (first_row + r) * SWIZZLE + (in_chunk ^ (r % 8)) * 16)
        trip_bytes = rows_per_trip * SWIZZLE
    row_at = work.batch.to("i64") * p["page_table_stride"].to("i64")
    heads = {t: work.kv_head.to("i64") * p[f"{t}_stride_2"] for t in ("k_pool", "v_pool")}

    def lookup(t0: Value) -> tuple:
        """(k byte offset, v byte offset) of rows lane + 32 e of the tile at t0 (page clamped into
        the pool); (0, 0) for a row at or past L_b, which reads slot 0's entry, unused."""
        out = []
        for e in range(cfg.bn // nthreads):
            tok = t0 + pt + nthreads * e
            live = tok.slt(work.length)
            slot = select(live, fast_div(tok, *div(p, "page")), const(0))
            entry = kb.load(kb.gep(p["page_table"], row_at + slot.to("i64"), "i32"), "i32", align=4)
            page = entry.smax(0).smin(p["num_pages"] - 1).to("i64")
            in_page = (tok - slot * p["page_size"]).to("i64")
            for t in ("k_pool", "v_pool"):
                off = (page * p[f"{t}_stride_0"] + in_page * p[f"{t}_stride_1"] + heads[t]) * esize
                out.append(select(live, (off >> 4).to("i32"), const(0)))
        return tuple(out)

    def fill(pipe, t, smem, s: PipeState, limit: Value):
        pipe.producer_acquire(s)
        base = kb.gep(smem, s.stage * cfg.tile_bytes(), "i8")
        with kb.for_(0, instrs // unroll, 1) as (g, _):     # this warp's rows
            for k in range(unroll):
                r = first_row + sub + (g * unroll + k) * rows_per_instr
                off = kb.load(kb.gep(rows_smem, r * 8 + (4 if t == "v_pool" else 0), "i8"), "i32", align=4)
                fa4.cp_async(kb.gep(pools[t], off.to("i64") << 4, "i8"), kb.gep(base, g * trip_bytes + dst0[k], "i8"), r.slt(limit))
        fa4.cp_async_arrive(s.stage, pipe=pipe.name)
        pipe.producer_commit(s)

    loop = kb.for_(work.begin, work.end, 1, carry=(k_pipe.initial_state(), lookup(work.begin * cfg.bn)))
    with loop as (j, (s, rows)):
        t0 = j * cfg.bn
        ahead = lookup(t0 + cfg.bn)       # the next tile's rows, in flight during this tile's copies
        for e in range(cfg.bn // nthreads):
            kb.store(vec(rows[2 * e], rows[2 * e + 1]), kb.gep(rows_smem, (pt + nthreads * e) * 8, "i8"), align=8)
        kb.named_barrier(BAR_GATHER, nthreads)
        limit = work.length - t0          # rows [limit, bn) of the tile are past L_b
        fill(k_pipe, "k_pool", k_smem, s, limit)
        fill(v_pipe, "v_pool", v_smem, s, limit)
        kb.named_barrier(BAR_GATHER, nthreads)      # every lane read rows_smem before the next tile's rows
        loop.yield_(s.advance(), ahead)


# ---- consumer -------------------------------------------------------------------------------------

class _Consumer:
    """The consumer warpgroup's thread geometry (common/wgmma.py): rows row0, row0 + 8 of 64."""

    def __init__(self, kb, cfg, work: _Work, p, tid: Value | None = None):
        """``tid``: the thread index to derive the geometry from (default thread_idx(0); the balanced
        kernel passes one per work item that ptxas cannot hoist: its note "Per-item geometry")."""
        self.kb, self.cfg, self.work, self.p = kb, cfg, work, p
        self.t = (kb.thread_idx(0) if tid is None else tid) % 128
        lane = self.t % 32
        self.g = lane // 4
        self.t4 = lane % 4
        self.row0 = (self.t // 32) * 16 + self.g
        self.n_s = cfg.bn // 2
        self.n_o = cfg.head_dim // 2
        # the leader as the pipeline verifier recognises one: thread_idx(0) % 128 == 0
        self.is_leader = (self.t if tid is None else kb.thread_idx(0) % 128).eq(0)
        self.scale_log2 = p["scale_log2"]
        m0 = work.m_tile * TILE_M
        cta_heads = p["cta_heads"]
        self.packed = [m0 + self.row0 + 8 * h for h in (0, 1)]          # this thread's packed rows
        self.token, self.head, self.start, self.end = [], [], [], []
        for r in self.packed:
            tok = fast_div(r, *div(p, "cta_heads"))
            self.token.append(tok)
            self.head.append(work.head_base + r - tok * cta_heads)
            if cfg.windowed:    # keys [start, end) are visible (note "Window")
                start, end = work.row_keys(p, tok)
                self.start.append(start)
                self.end.append(end)
                continue
            # keys [0, end) are visible: L_b, less seqlen_q - 1 - token under the causal mask
            hidden = (work.seqlen_q - 1 - tok) * p["causal"]
            self.end.append((work.length - hidden).smax(0))
        self.softcap_scale = p["softcap_scale"] if cfg.softcap else None
        self.row_ok = [r.lt(work.rows) for r in self.packed]
        # the rows of q, out and the LSE the tokens are at: q_start + token (note "Varlen q")
        self.q_row = self.token if work.q_start is None else [work.q_start + t for t in self.token]

    def release(self, s: PipeState, *pipes):
        with self.kb.if_(self.is_leader).then_():
            for pipe in pipes:
                pipe.consumer_release(s)

    def barrier(self):
        self.kb.named_barrier(BAR_CONSUMER, 128)


def _load_q(cs: _Consumer, q_smem):
    """Q's 64 packed rows into SMEM (128B swizzle, chunk c of row r at c * 64 * 128 + r * 128, 16-byte
    unit u at (u ^ r % 8) * 16); rows past `rows` are zeros."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    units = cfg.d_chunks * UNITS
    m0 = work.m_tile * TILE_M
    cta_heads = p["cta_heads"]
    zero = const(0, ("i32", 4))
    for i in range(TILE_M * units // 128):
        u = cs.t + 128 * i
        r = u // units
        cu = u - r * units
        c, unit = cu // UNITS, cu % UNITS
        packed = m0 + r
        ok = packed.lt(work.rows)
        tok = fast_div(packed, *div(p, "cta_heads"))
        head = work.head_base + packed - tok * cta_heads
        if work.q_start is None:
            at = work.batch.to("i64") * p["q_stride_b"] + tok.to("i64") * p["q_stride_s"]
        else:    # note "Varlen q": row q_start + token of packed q
            at = (work.q_start + tok).to("i64") * p["q_stride_s"]
        index = at + head.to("i64") * p["q_stride_h"] + (cu * 8).to("i64")
        safe = select(ok, index, const(0, "i64"))      # rows past `rows` read q's first row, unused
        val = select(ok, kb.load(kb.gep(p["q"], safe, cfg.dtype), ("i32", 4), align=16), zero)
        if cfg.mma_dtype != cfg.dtype:       # bf16 q for f16 GEMMs (note "FP8")
            val = vec(*[bf16x2_to_f16x2(val[w]) for w in range(4)])
        off = c * (TILE_M * SWIZZLE) + r * SWIZZLE + (unit ^ (r % 8)) * 16
        kb.store(val, kb.gep(q_smem, off, "i8"), align=16)
    kb.fence("async_smem")
    cs.barrier()


def _issue_s(cs: _Consumer, q_smem, k_base) -> Value:
    """S = Q K^T from the K tile at k_base (a ring stage, or FP8's converted tile)."""
    kb, cfg = cs.kb, cs.cfg
    acc = undef(("f32", cs.n_s))
    fa4.mma_fence()
    for kk in range(cfg.head_dim // WGMMA_K):
        c, within = divmod(kk, CHUNK // WGMMA_K)
        off = within * WGMMA_K * 2
        a_d = fa4.smem_desc(kb.gep(q_smem, c * TILE_M * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                            sbo=8 * SWIZZLE)
        b_d = fa4.smem_desc(kb.gep(k_base, c * cfg.bn * SWIZZLE + off, "i8"), swizzle=SWIZZLE, lbo=16,
                            sbo=8 * SWIZZLE)
        acc = Value(fa4.mma(a_d, b_d, const(int(kk > 0), "i1"), [acc], result_types=[acc.type], m=64, n=cfg.bn,
                            k=WGMMA_K, a_source="smem", ab_dtype=cfg.mma_dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return acc


def _issue_pv(cs: _Consumer, v_base, frags: list, o: Value) -> Value:
    """O += P V from the V tile at v_base (a ring stage, or FP8's converted tile)."""
    kb, cfg = cs.kb, cs.cfg
    fa4.mma_fence()
    for kk in range(cfg.bn // WGMMA_K):
        b_d = fa4.smem_desc(kb.gep(v_base, kk * WGMMA_K * SWIZZLE, "i8"), swizzle=SWIZZLE, lbo=cfg.bn * SWIZZLE,
                            sbo=8 * SWIZZLE)
        o = Value(fa4.mma(frags[kk], b_d, const(1, "i1"), [o], result_types=[o.type], m=64, n=cfg.head_dim,
                          k=WGMMA_K, a_source="regs", b_major="mn", ab_dtype=cfg.mma_dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return o


def _softmax(cs: _Consumer, s_acc: Value, j: Value, m_prev, l_prev, masked: bool, col_scales=None):
    """Online softmax of S_j (base 2, scale folded in). Masked: key j bn + col is hidden from a row
    when col >= end - j bn (signed: end may lie before the tile). col_scales: FP8 block scales
    (k, v) per accumulator column (note "FP8"): S's columns times k's, P's times v's for P V."""
    kb, cfg = cs.kb, cs.cfg
    s = [s_acc[i] for i in range(cs.n_s)]
    if col_scales is not None:
        s = [s[i] * col_scales[0][acc_col(i)] for i in range(cs.n_s)]
    if cfg.softcap:    # t = tanh(s scale / cap), in units of cap (scale_log2 = cap log2 e): before the mask
        s = [tanh(x * cs.softcap_scale) for x in s]
    if masked and cfg.windowed:    # keys [start, end) of the row are visible (note "Window")
        key0 = j * cfg.bn + cs.t4 * 2
        window = [(cs.start[h] - key0, cs.end[h] - key0) for h in (0, 1)]
        for i in range(cs.n_s):
            s[i] = select(hidden(window[acc_row(i)], acc_col(i)), const(NEG_INF, "f32"), s[i])
    elif masked:
        vis = [cs.end[h] - j * cfg.bn - cs.t4 * 2 for h in (0, 1)]
        for i in range(cs.n_s):
            s[i] = select(vis[acc_row(i)].sle(acc_col(i)), const(NEG_INF, "f32"), s[i])
    p = [None] * cs.n_s
    m_new, l_new, alpha = [], [], []
    for h in (0, 1):
        idx = row_regs(cs.n_s, h)
        mx = tree_reduce([s[i] for i in idx], fmax)
        mx = fmax(mx, kb.shuffle_xor(mx, 1))
        mx = fmax(mx, kb.shuffle_xor(mx, 2))
        m, a, neg = max_update(m_prev[h], mx, cs.scale_log2, 0.0)
        row_p = [dsl.exp2(fma(s[i], cs.scale_log2, neg)) for i in idx]
        for i, v in zip(idx, row_p):
            p[i] = v
        m_new.append(m)
        alpha.append(a)
        l_new.append(fma(l_prev[h], a, tree_reduce(row_p, lambda x, y: x + y)))
    if col_scales is not None:    # l above took P unscaled
        p = [p[i] * col_scales[1][acc_col(i)] for i in range(cs.n_s)]
    frags = []
    for kk in range(cfg.bn // WGMMA_K):
        words = [vec(p[a], p[b]).to((cfg.mma_dtype, 2)).bitcast("i32") for a, b in a_frag_pairs(kk)]
        frags.append(vec(*words))
    return frags, m_new, l_new, alpha


def _zero_v_tail(cs: _Consumer, base, valid: Value):
    """Zero rows [valid, bn) of the V tile at `base` (note "NaN past L_b"); every thread of the
    warpgroup takes its share of 16-byte units, then the rows are fenced to the async proxy."""
    kb, cfg = cs.kb, cs.cfg
    zero = const(0, ("i32", 4))
    total = cfg.bn * cfg.d_chunks * UNITS
    for i in range(total // 128):
        u = cs.t + 128 * i
        c = u // (cfg.bn * UNITS)
        rest = u - c * (cfg.bn * UNITS)
        r = rest // UNITS
        ok = r.sge(valid)
        with kb.if_(ok).then_():
            kb.store(zero, kb.gep(base, u * 16, "i8"), align=16)
    kb.fence("async_smem")
    cs.barrier()


def _block_scales(cs: _Consumer, j: Value):
    """FP8 per-block scales of this thread's S columns in tile j, as {acc_col: value} for k and v
    (note "FP8"): the token's page (paged: through the page table, entry clamped) or token block
    (contiguous: [batch, scale_blocks, kv_heads]); v's is 0 at or past L_b."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    k_cols, v_cols = {}, {}
    for col in sorted({acc_col(i) for i in range(cs.n_s)}):
        t = j * cfg.bn + cs.t4 * 2 + col
        live = t.slt(work.length)
        if cfg.paged:
            slot = select(live, fast_div(t, *div(p, "page")), const(0))
            index = work.batch.to("i64") * p["page_table_stride"].to("i64") + slot.to("i64")
            block = kb.load(kb.gep(p["page_table"], index, "i32"), "i32", align=4).smax(0).smin(p["num_pages"] - 1)
        else:
            block = work.batch * p["scale_blocks"] + fast_div(select(live, t, const(0)), *div(p, "scale_block"))
        at = (block * p["kv_heads"] + work.kv_head).to("i64")
        k_cols[col] = kb.load(kb.gep(p["k_scale"], at, "f32"), "f32", align=4)
        v_cols[col] = select(live, kb.load(kb.gep(p["v_scale"], at, "f32"), "f32", align=4), const(0.0, "f32"))
    return k_cols, v_cols


def _kv_tile(cs: _Consumer, bufs, j: Value, carry, masked: bool):
    q_smem, k_smem, v_smem, k_pipe, v_pipe, _ = bufs
    kb, cfg, work = cs.kb, cs.cfg, cs.work
    s, o, m, l = carry
    # 1. S_j = Q K_j^T; release K_j
    k_pipe.consumer_wait(s)
    if cfg.gather:     # cp.async wrote the stage: generic proxy -> wgmma's async proxy
        kb.fence("async_smem")
    k_stage = kb.gep(k_smem, s.stage * cfg.tile_bytes(), "i8")
    s_acc = wait_group(_issue_s(cs, q_smem, k_stage), pending=0)
    cs.release(s, k_pipe)
    # 2. softmax, 3. O *= alpha
    frags, m, l, alpha = _softmax(cs, s_acc, j, m, l, masked)
    o = vec(*[o[i] * alpha[acc_row(i)] for i in range(cs.n_o)])
    # 4. O += P V_j (V rows past L_b zeroed first, in the tile that holds L_b); release V_j
    v_pipe.consumer_wait(s)
    if cfg.gather:
        kb.fence("async_smem")
    v_stage = kb.gep(v_smem, s.stage * cfg.tile_bytes(), "i8")
    if masked:
        valid = work.length - j * cfg.bn
        with kb.if_(valid.slt(cfg.bn)).then_():
            _zero_v_tail(cs, v_stage, valid)
    o = wait_group(_issue_pv(cs, v_stage, frags, o), pending=0)
    cs.release(s, v_pipe)
    return s.advance(), o, tuple(m), tuple(l)


def _kv_tile_fp8(cs: _Consumer, bufs, j: Value, carry, masked: bool):
    """One KV tile of an e4m3 cache (note "FP8"): K_j and V_j converted in one pass."""
    q_smem, k_smem, v_smem, k_pipe, v_pipe, (k16_smem, v16_smem) = bufs
    kb, cfg, work = cs.kb, cs.cfg, cs.work
    s, o, m, l = carry
    # 1. wait for K_j and V_j: both e4m3 stages full
    k_pipe.consumer_wait(s)
    v_pipe.consumer_wait(s)
    # 2. both tiles to f16 (V rows past L_b as zeros, note "NaN past L_b"), one fence to the async
    #    proxy, one warpgroup barrier. k16 and v16 are free: this thread's S_{j-1} and P V_{j-1}
    #    retired, and a wgmma retires for the whole warpgroup (as the leader's releases assume)
    at = s.stage * cfg.tile_bytes()
    valid = work.length - j * cfg.bn if masked else None
    e4m3_tile.emit_convert(kb, cs.t, [(kb.gep(k_smem, at, "i8"), k16_smem, None),
                                      (kb.gep(v_smem, at, "i8"), v16_smem, valid)], cfg.bn, cfg.head_dim)
    kb.fence("async_smem")
    cs.barrier()
    # 3. release K_j and V_j: past the barrier every thread has loaded its e4m3 bytes; the GEMMs
    #    read only the f16 copies
    cs.release(s, k_pipe, v_pipe)
    # 4. S_j = Q K_j^T
    s_acc = wait_group(_issue_s(cs, q_smem, k16_smem), pending=0)
    # 5. softmax (block scales on S's and P's columns), 6. O *= alpha
    col_scales = _block_scales(cs, j) if cfg.kv_scale == "block" else None
    frags, m, l, alpha = _softmax(cs, s_acc, j, m, l, masked, col_scales)
    o = vec(*[o[i] * alpha[acc_row(i)] for i in range(cs.n_o)])
    # 7. O += P V_j
    o = wait_group(_issue_pv(cs, v16_smem, frags, o), pending=0)
    return s.advance(), o, tuple(m), tuple(l)


def _scalar_scales(cs: _Consumer):
    """FP8 per-tensor or per-KV-head scales (k's, v's), or (None, None) (note "FP8")."""
    kb, cfg, p, work = cs.kb, cs.cfg, cs.p, cs.work
    if not cfg.fp8 or cfg.kv_scale == "block":
        return None, None
    at = (const(0) if cfg.kv_scale == "tensor" else work.kv_head).to("i64")
    return (kb.load(kb.gep(p["k_scale"], at, "f32"), "f32", align=4),
            kb.load(kb.gep(p["v_scale"], at, "f32"), "f32", align=4))


def _mma_role(kb, cfg, work: _Work, p, q_smem, k_smem, v_smem, k_pipe, v_pipe, staged):
    cs = _Consumer(kb, cfg, work, p)
    k_scale, v_scale = _scalar_scales(cs)
    if k_scale is not None and cfg.softcap:    # the tanh's argument: s softmax_scale k_scale / cap
        cs.softcap_scale = cs.softcap_scale * k_scale
    elif k_scale is not None:    # S's scale: softmax_scale x k_scale (the LSE too)
        cs.scale_log2 = cs.scale_log2 * k_scale
    if cfg.swap_ab:
        swapab.load_q(cs, staged)
    else:
        _load_q(cs, q_smem)
    f32 = "f32"
    bufs = (q_smem, k_smem, v_smem, k_pipe, v_pipe, staged)
    if cfg.windowed:   # note "Window": masked left edge, whole tiles, masked right edge
        full_first, full_end = work.full
        a = full_first.smax(work.begin).smin(work.end)
        b = full_end.smax(a).smin(work.end)
        segments = ((work.begin, a, True), (a, b, False), (b, work.end, True))
    else:
        # tiles every row sees entirely need no mask: keys < min over the rows of `end` (token 0's)
        hidden0 = (work.seqlen_q - 1) * p["causal"]
        full = (work.length - hidden0).smax(0) // cfg.bn
        split = full.smax(work.begin).smin(work.end)
        segments = ((work.begin, split, False), (split, work.end, True))
    neg_inf, zero = const(NEG_INF, f32), const(0.0, f32)
    state = (k_pipe.initial_state(), const(0.0, (f32, cs.n_o)), (neg_inf, neg_inf), (zero, zero))
    tile = _kv_tile_fp8 if cfg.fp8 else _kv_tile
    if cfg.swap_ab:    # attention_decode_sm90_swapab, note "Swap AB": m and l of the thread's S^T columns
        ends = None if cfg.swap_ab_warp_max else swapab.column_ends(cs)
        rings = (k_smem, v_smem, k_pipe, v_pipe)

        def tile(cs, bufs, j, carried, masked):
            return swapab.kv_tile(cs, rings, staged, ends, j, carried, masked)
    for lo, hi, masked in segments:
        loop = kb.for_(lo, hi, 1, carry=state)
        with loop as (j, carried):
            loop.yield_(*tile(cs, bufs, j, carried, masked))
        state = loop.results
    o, m, l = state[1:4]
    if cfg.swap_ab_warp_max:
        o, m, l = swapab.merge_warps(cs, staged, o, m, l)
    elif cfg.swap_ab:
        m, l = swapab.row_stats(cs, staged, m, l)
    _epilogue(cs, o, m, l, v_scale)
