"""The sm_100a decode route's KV-cache roles on its free warpgroup (warps 4-7, softmax1's warps and
192-register budget; used by attention_fwd_sm100): the FP8 (e4m3) cache's convert warpgroup with the
load warp's e4m3 boxes (attention_sm100_config, note "FP8"), and the row gather of pages too small
for 16-row TMA boxes (`gather_role`; its protocol is common.paged_rows' note "Row gather").

Note "FP8": tcgen05.mma takes e4m3 only as kind::f8f6f4, with *both* operands 8-bit, so Q (bf16/f16)
would have to be quantised; it stays in its dtype instead, and K/V are dequantised in shared memory
before the MMAs read them. The decode route leaves warps 4-7 (softmax1's) free: they become the
`convert` warpgroup (setmaxnreg 192, softmax1's budget, so the register plan of ROLES holds):

    load      (warp 13) K_n and V_n as e4m3 TMA boxes, unswizzled (row r at r * D bytes; a paged tile
              as its per-page boxes, note "Paged"), into the rings k8 / v8 (`stages` deep)
    convert   (warps 4-7) per block n: 1. wait k8[n] and v8[n]; 2. acquire the 16-bit stages k[n],
              v[n] (the MMA's tcgen05.commit freed them); 3. convert both tiles
              (common.e4m3_tile.emit_convert, the sm_90a decode's bank-conflict-free piece map), each
              value float32(e4m3) x its scale rounded to Q's dtype (note "Scaled conversion" there),
              V rows at or past the length L_b written as zeros (the paged kernel's note "Stale V
              rows": no 0 x NaN); 4. fence.proxy.async (the tcgen05.mma reads through the async
              proxy), release k8[n], v8[n] (every thread read its bytes) and commit k[n], v[n] (128
              arrivals)
    mma       unchanged: it waits on k / v, whose stages now hold the converted tiles in the
              128B-swizzled layout of a bf16/f16 cache.

Scales: k_scale and v_scale are float32, per tensor ([1]), per KV head ([kv_heads]) or per (page, KV
head) ([num_pages, kv_heads], paged caches only). Every granularity is applied the same way, in the
conversion, to each row: the row's token t = n BN + r, its page page_table[b, t / page_size]
(clamped into the pool; a row at or past L_b reads slot 0's entry, unused), scale[page, kv_head].
The tile thus holds round(e4m3 x scale) in Q's dtype: one rounding to bf16/f16 per K/V value, the
same rounding a bf16/f16 cache carries, which the tests' reference reproduces bit for bit
((decode(k) * scale).to(dtype)); the softmax and the correction are the bf16 kernel's. (The sm_90a
decode folds per-tensor/per-head scales into the softmax scale and per-block scales into S and P
instead; here the softmax warpgroup's 128 scores per thread leave no registers for per-key scales.)
An f16 Q with |e4m3 x scale| > 65504 overflows to inf, as an f16 cache holding that value would.
"""
from __future__ import annotations

from ..dialect import builders as fa4
from ..dsl import PipeState, Value, const, select
from .attention_sm100_config import CHUNK, ELEM_BYTES, MMA_M, SWIZZLE_BYTES as SW
from .common import e4m3_tile, paged_rows

CONVERT_ROLE = ("convert", 4, 4, 192)   # name, first warp, warps, setmaxnreg: softmax1's warps and budget
# the load role of a row gather (paged_rows, note "Row gather"): the same free warpgroup
GATHER_ROLE = dict(first_warp=4, num_warps=4, regs=192)
BAR_GATHER = 2                 # named barrier of the row gather's warpgroup


def tma_spec(cfg) -> dict:
    """The e4m3 K/V descriptors: boxes of box_rows rows of D bytes, unswizzled."""
    return dict(dtype="e4m3", box=(cfg.head_dim, 1, cfg.box_rows, 1), swizzle="none")


def load_tile(kb, cfg, origins, pipe, desc, base: Value, s: PipeState, tile: int, kv_head: Value, row: Value,
              batch: Value):
    """The e4m3 K or V tile of block row `row` into stage s of its ring: one box of BN rows (contiguous:
    at (row, batch)), or a paged tile's per-page boxes at origins[i] = (page, row in page)."""
    boxes = origins if origins is not None else [(batch, row)]
    for i, (page, in_page) in enumerate(boxes):
        dst = kb.gep(base, s.stage * tile + i * cfg.box_rows * cfg.head_dim, "i8")
        fa4.tma_load(desc, dst, s.stage, [const(0), kv_head, in_page, page], pipe=pipe.name,
                     box=[cfg.head_dim, 1, cfg.box_rows, 1], elem_bytes=1)


class _Scales:
    """The per-row scale functions of block n (module note): one load per scale for tensor / kv_head,
    a page-table lookup per row (memoised for K and V; one per tile when pages hold whole tiles) for
    block scales."""

    def __init__(self, kb, cfg, geo, p):
        self.kb, self.cfg, self.geo, self.p = kb, cfg, geo, p
        if cfg.kv_scale != "block":
            at = (const(0) if cfg.kv_scale == "tensor" else geo.kv_head).to("i64")
            self.fixed = tuple(kb.load(kb.gep(p[n], at, "f32"), "f32", align=4) for n in ("k_scale", "v_scale"))

    def of_block(self, n: Value, valid: Value) -> tuple:
        """(k's, v's) row -> f32 scale functions for KV block n (geo.block of the visit: a window's
        first block is not 0), whose rows [valid, BN) are past L_b."""
        cfg = self.cfg
        if cfg.kv_scale != "block":
            k, v = self.fixed
            return (lambda row: k), (lambda row: v)
        kb, geo, p = self.kb, self.geo, self.p
        t0 = n * cfg.bn
        heads = kb.grid_dim(1)                            # decode: one CTA column per KV head
        row_of_table = geo.batch.to("i64") * p["page_table_stride"].to("i64")
        pages = {}

        def page(row: Value) -> Value:
            key = None if cfg.page_size % cfg.bn == 0 else id(row)
            if key not in pages:
                if key is None:                           # the whole tile is in one page
                    slot = t0 // cfg.page_size
                else:
                    slot = select(row.slt(valid), (t0 + row) // cfg.page_size, const(0))
                entry = kb.load(kb.gep(p["page_table"], row_of_table + slot.to("i64"), "i32"), "i32", align=4)
                pages[key] = (entry.smax(0).smin(p["num_pages"] - 1) * heads + geo.kv_head).to("i64")
            return pages[key]

        def scale(name):
            return lambda row: kb.load(kb.gep(p[name], page(row), "f32"), "f32", align=4)
        return scale("k_scale"), scale("v_scale")


def convert_role(kb, cfg, geo, bufs, p):
    """The convert warpgroup (module note): per visited block, e4m3 K_n, V_n -> the 16-bit stages."""
    pipes = bufs.pipes
    t = kb.thread_idx(0) % e4m3_tile.THREADS
    scales = _Scales(kb, cfg, geo, p)
    loop = kb.for_(0, geo.n_blocks, 1, carry=pipes.k8.initial_state())
    with loop as (n, s):
        # 1. the e4m3 K_n and V_n are in SMEM
        pipes.k8.consumer_wait(s)
        pipes.v8.consumer_wait(s)
        # 2. the 16-bit stages are free (the MMAs that read them completed)
        pipes.k.producer_acquire(s)
        pipes.v.producer_acquire(s)
        # 3. convert with the rows' scales; V rows at or past L_b as zeros
        valid = geo.seqlen_k - geo.block(n) * cfg.bn
        k_scale, v_scale = scales.of_block(geo.block(n), valid)
        src = [kb.gep(b, s.stage * tile, "i8") for b, tile in ((bufs.k8_smem, bufs.k8_tile), (bufs.v8_smem, bufs.v8_tile))]
        dst = [kb.gep(b, s.stage * tile, "i8") for b, tile in ((bufs.k_smem, bufs.k_tile), (bufs.v_smem, bufs.v_tile))]
        e4m3_tile.emit_convert(kb, t, [(src[0], dst[0], None, k_scale), (src[1], dst[1], valid, v_scale)], cfg.bn,
                               cfg.head_dim, cfg.dtype)
        # 4. the converted tiles to the async proxy; hand the e4m3 stages back and the 16-bit ones on
        kb.fence("async_smem")
        pipes.k8.consumer_release(s)
        pipes.v8.consumer_release(s)
        pipes.k.producer_commit(s)
        pipes.v.producer_commit(s)
        loop.yield_(s.advance())


def gather_role(kb, cfg, geo, bufs):
    """The gather warpgroup over pages too small for TMA boxes (paged_rows, note "Row gather"): Q by TMA
    from one thread, then every thread copies its pieces of K_n's and V_n's rows."""
    pipes = bufs.pipes
    role = GATHER_ROLE
    threads = 32 * role["num_warps"]
    tid = kb.thread_idx(0) - 32 * role["first_warp"]
    lane, warp = tid % 32, tid // 32
    with kb.if_(geo.n_blocks.gt(0)).then_():
        # 1. Q0 (and Q1), one box per 64-column chunk, from one thread
        with kb.if_(kb.thread_idx(0).eq(32 * role["first_warp"])).then_():
            fa4.tma_prefetch(bufs.q_desc)
            q0 = pipes.q.initial_state()
            pipes.q.producer_acquire(q0)
            pipes.q.producer_commit(q0, tx_bytes=cfg.num_q_tiles * bufs.q_tile)
            q_box = [CHUNK, cfg.group, cfg.tile_tokens, 1] if cfg.decode else [CHUNK, 1, MMA_M, 1]
            for i in range(cfg.num_q_tiles):
                for c in range(cfg.padded_head_dim // CHUNK):
                    dst = kb.gep(bufs.q_smem, i * bufs.q_tile + c * MMA_M * SW, "i8")
                    fa4.tma_load(bufs.q_desc, dst, q0.stage, [const(c * CHUNK), geo.head, geo.tile_row0(i), geo.batch],
                                 pipe=pipes.q.name, box=q_box, elem_bytes=ELEM_BYTES)
        # 2. per block: the rows' pool indices once, then K_n's rows, then V_n's, each stage fenced to
        #    the async proxy and committed by every thread
        kv_heads = kb.grid_dim(1) if cfg.decode else kb.grid_dim(1) // cfg.group
        row_stride = (kv_heads * cfg.head_dim * ELEM_BYTES).to("i64")
        head_offset = (geo.kv_head * cfg.head_dim * ELEM_BYTES).to("i64")
        loop = kb.for_(0, geo.n_blocks, 1, carry=pipes.k.initial_state())
        with loop as (n, s):
            paged_rows.gather_rows(kb, tid, threads, geo.block(n) * cfg.bn, cfg.bn, geo.seqlen_k, geo.batch, bufs.page_table,
                                   bufs.page_table_stride, bufs.num_pages, cfg.page_size, bufs.rows_smem)
            kb.named_barrier(BAR_GATHER, threads)
            for pipe, pool, base, tile in ((pipes.k, bufs.k_desc, bufs.k_smem, bufs.k_tile),
                                           (pipes.v, bufs.v_desc, bufs.v_smem, bufs.v_tile)):
                pipe.producer_acquire(s)
                paged_rows.gather_tile(kb, bufs.rows_smem, lane, warp, role["num_warps"], pool, row_stride,
                                       head_offset, cfg.head_dim * ELEM_BYTES, base, s.stage * tile, cfg.bn, SW)
                kb.fence("async_smem")     # the stores -> tcgen05.mma's async proxy (note "Row gather")
                pipe.producer_commit(s)
            kb.named_barrier(BAR_GATHER, threads)   # every thread read rows_smem before the next tile's rows
            loop.yield_(s.advance())


__all__ = ["CONVERT_ROLE", "GATHER_ROLE", "tma_spec", "load_tile", "convert_role", "gather_role"]
