"""The paged pieces of the sm_90a varlen attention forward (attention_fwd_sm90, AttnConfig.page_size):
chunked prefill of a ragged batch over the paged KV cache (attention/varlen_paged.py).

q and out are packed as in attention_fwd_sm90_varlen; k and v are the cache's pools [num_pages,
page_size, kv_heads, D], which TMA sees as the dense kernel's 4-D [batch, seqlen, heads, D] tensor with
coordinates (column, kv_head, row_in_page, page). Sequence b's key t lives in page page_table[b, t //
page_size], row t % page_size; it attends to min(seqused_k[b], kv_capacity) keys (kv_capacity =
max_pages x page_size when there is no seqused_k), from key 0 (no cu_seqlens_k: FlashAttention-3/4's
contract).

- Loads (`load_tile`): a K or V tile of bn keys [t0, t0 + bn) is bn / box_rows TMA boxes of box_rows =
  gcd(bn, page_size) rows per column chunk (common.paging, note "Box rows": no box straddles a page),
  box i landing at row i box_rows of each chunk of the stage; its (page, row) from
  common.paged_rows.tile_box_origins (a box at or past the length reads no page-table entry and aims at
  page num_pages, outside the pool: TMA's zeros, bytes still counted; entries clamped into the pool).
  AttnConfig.validate admits only page sizes that make boxes of >= 8 rows (a multiple of 8: whole
  128B-swizzle atoms), at most MAX_TMA_BOXES per tile; the host runs every other page size on the
  decode kernel's gather (varlen_paged.py, note "Which kernel").
- Note "NaN past the length": rows of a live box at or past the length are real pool rows (the rest
  of the last page) and may hold anything, NaN included. K's only reach scores of keys the masked
  softmax replaces by a select with -inf (the seqlen_k tail block is always masked, and a select
  drops a NaN operand), so they never reach m, l or P. With a window or chunk (common.masks.tile_blocks)
  the whole blocks end at floor(seqlen_k / bn) too, so the tail block is masked there as well, and a
  block left of a window or chunk is never visited (its page-table entries are not read). V's meet P = 0 in P V, and 0 x NaN = NaN, so
  each consumer warpgroup writes zeros over the V rows [length - t0, bn) of the last block's stage
  (the only block that holds rows past the length: no block starting at or past it is visited; a window
  that ends before the length never visits it, and then there is nothing to zero) before its last P V
  GEMM (`zero_v_tail`). Softcap's tanh of a NaN score is NaN and the same select drops it; sinks enter
  in the epilogue, after every block.
"""
from __future__ import annotations

from typing import NamedTuple

from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, Value, const, select
from .common.paged_rows import tile_box_origins

UNITS = 8              # 16-byte units per 128-byte swizzled row


class PagedParams(NamedTuple):
    """The paged launch parameters (attention_sm90_config.PAGED_PARAMS)."""
    page_table: Value          # int32 [batch, max_pages]
    page_table_stride: Value   # elements between rows of the page table
    num_pages: Value           # pages in the pool
    kv_capacity: Value         # max_pages * page_size


def params_of(p: dict) -> PagedParams:
    return PagedParams(p["page_table"], p["page_table_stride"], p["num_pages"], p["kv_capacity"])


def sequence(kb, vp, pp: PagedParams, batch: Value):
    """Sequence `batch`'s rows (attention_fwd_sm90_varlen.Sequence): the query rows from cu_seqlens_q
    (clipped as there), its keys from 0, min(seqused_k[b], kv_capacity) of them (the capacity when
    has_seqused_k is 0), never negative. cu_seqlens_k is not read."""
    from .attention_fwd_sm90_varlen import Sequence

    def load(ptr, idx):
        return kb.load(kb.gep(ptr, idx, "i32"), "i32", align=4)

    q_start = load(vp.cu_q, batch).smax(const(0))
    q_end = load(vp.cu_q, batch + 1).smin(vp.total_q)
    used = load(vp.seqused_k, batch)     # cu_seqlens_q[batch] when there is no seqused_k: not used then
    seqlen_k = select(vp.has_seqused_k.ne(0), used.smin(pp.kv_capacity), pp.kv_capacity).smax(const(0))
    return Sequence(q_start, (q_end - q_start).smax(const(0)), const(0), seqlen_k)


def load_tile(kb, cfg, pp: PagedParams, geo, pipe, desc, smem, s, t0: Value, tx_bytes: int, stage_bytes: int,
              lay) -> None:
    """One K or V ring stage (module note): keys [t0, t0 + bn) of geo's sequence and KV head as bn /
    box_rows boxes per column chunk of `lay` (the Q/K or V TileLayout). The page table is read for
    every K and every V tile (K runs a block ahead of V, so one lookup cannot serve both without
    carrying it through the loop: L1 hits, cheaper than the load warp's registers)."""
    rows = cfg.kv_box_rows
    origins = tile_box_origins(kb, t0, cfg.bn, rows, geo.seqlen_k, geo.batch, pp.page_table,
                               pp.page_table_stride, pp.num_pages, cfg.page_size)
    pipe.producer_acquire(s)
    pipe.producer_commit(s, tx_bytes=tx_bytes)
    base = s.stage * stage_bytes
    for i, (page, row) in enumerate(origins):
        for c in range(lay.chunks):
            dst = kb.gep(smem, base + c * cfg.bn * lay.swizzle + i * rows * lay.swizzle, "i8")
            fa4.tma_load(desc, dst, s.stage, [const(c * lay.chunk), geo.kv_head, row, page], pipe=pipe.name,
                         box=[lay.chunk, 1, rows, 1], elem_bytes=ELEM_BYTES[cfg.dtype])


def zero_v_tail(cs, v_stage: Value, block: Value, barrier_id: int) -> None:
    """Zero the V rows at or past the length in the stage `v_stage` of KV block `block` (module note
    "NaN past the length"), when the block holds any: the consumer warpgroups' threads (128 x
    consumers) split the bn x chunks 16-byte units between them, each thread fences its stores to
    the async proxy (fence.proxy.async), then all consumer threads meet on named barrier
    `barrier_id` before any wgmma reads the stage.

    Why a barrier across the warpgroups, not each warpgroup zeroing every row for itself: those
    stores would all write zeros, so the bytes would read zero whatever the interleaving, but they
    are unordered write-write pairs between warpgroups (the interpreter's race check rejects them,
    and the PTX memory model calls them a data race). Split and met, each unit is written once and
    every warpgroup's wgmma is ordered after every store by fence + barrier. No deadlock: every
    consumer warpgroup of the tile comes here (bm 128: no warpgroup skips a tile,
    AttnConfig._check_paged), after its last GEMM turn (turns.end of the last block), so none waits
    here on a turn another one holds; `valid` is the same in every thread of the CTA (one sequence,
    one block), so all of them take the branch or none."""
    kb, cfg = cs.kb, cs.cfg
    vt = cfg.v_tile
    valid = cs.geo.seqlen_k - block * cfg.bn
    zero = const(0, ("i32", 4))
    base = kb.gep(cs.bufs.v_smem, v_stage * cs.bufs.v_bytes, "i8")
    units = vt.swizzle // 16
    threads = 128 * cfg.consumers
    with kb.if_(valid.slt(cfg.bn)).then_():
        total = cfg.bn * vt.chunks * units
        tid = cs.wg * 128 + cs.t
        for i in range(-(-total // threads)):
            u = tid + threads * i
            c = u // (cfg.bn * units)
            r = (u - c * (cfg.bn * units)) // units     # a whole row's units: the swizzle does not matter
            live = r.sge(valid) if total % threads == 0 or (i + 1) * threads <= total else r.sge(valid) & u.slt(total)
            with kb.if_(live).then_():
                kb.store(zero, kb.gep(base, u * 16, "i8"), align=16)
        kb.fence("async_smem")
        kb.named_barrier(barrier_id, threads)


__all__ = ["PagedParams", "params_of", "sequence", "load_tile", "zero_v_tail"]
