"""The KV-cache operand's row lookups as DSL arithmetic (the host twins, which the tests check, are
common.paging's `PageDivisor.split` and `pool_row`): where a TMA box of a paged tile starts, and how a
tile's stale rows past a sequence's length are cleared.

The pool is a 4-D tensor [num_pages, page_size, kv_heads, D] to TMA; a box of rows starting at token
t of sequence b (inside one page: paging.py, note "Box rows") is at (page, row) =
(page_table[b, t / page_size], t % page_size). The page size is compiled in, so the division is by a
constant (a shift, or LLVM's multiply-high).
"""
from __future__ import annotations

from ...dsl import Value, const


def tile_box_origins(kb, t0: Value, bn: int, box_rows: int, length: Value, batch: Value, page_table: Value,
                     page_table_stride: Value, num_pages: Value, page_size: int) -> list[tuple[Value, Value]]:
    """(page, row) of the bn / box_rows boxes of the tile of tokens [t0, t0 + bn), t0 a multiple of bn
    (note "Box rows"): box i starts at token t = t0 + i box_rows, at (page_table[b, t / page_size],
    t % page_size). A box at or past `length` reads no entry and aims at page num_pages, outside the
    pool, so TMA zero-fills it (and still counts its bytes); an entry is clamped into [0, num_pages)
    so a bad table never reads outside the pool.

    Note "Load warp registers": the load warp runs at 48 registers, and ptxas issues every lookup of
    a tile ahead of the mbarrier waits. Per box, an address of its own (slot clamped or selected), a
    liveness threshold and the lookup repeated for V kept ~20 more values live and made ptxas spill
    the CTA's SMEM base for the whole kernel (D128 page 16). So: one page-table pointer per tile
    (row b, slot t0 / page_size) with each entry at a small offset (a constant when page_size
    divides bn: every tile then starts a page), liveness as `length - t0` against immediates, the
    load predicated (scf.if, no clamped address), and the caller reuses the origins for K and V."""
    slot0 = t0 // page_size
    row0 = const(0) if bn % page_size == 0 else t0 - slot0 * page_size
    index = batch.to("i64") * page_table_stride.to("i64") + slot0.to("i64")
    slots = kb.gep(page_table, index, "i32")
    remaining = length - t0          # box i is live when i box_rows < remaining: one value, immediates
    origins = []
    for i in range(bn // box_rows):
        if bn % page_size == 0:
            d, row = (i * box_rows) // page_size, const((i * box_rows) % page_size)
        else:
            off = row0 + i * box_rows
            d = off // page_size
            row = off - d * page_size
        live = remaining.sgt(i * box_rows)
        br = kb.if_(live, results="i32")
        with br.then_():
            entry = kb.load(kb.gep(slots, d, "i32"), "i32", align=4)
            br.yield_(entry.smax(0).smin(num_pages - 1))
        with br.else_():
            br.yield_(num_pages)
        origins.append((br.results, row))
    return origins


def zero_rows(kb, tile: Value, first: Value, rows: int, chunks: int, swizzle: int):
    """One thread writes zeros over rows [first, rows) of a 128B-swizzled tile of `chunks` column
    chunks (chunk c of row r at c * rows * swizzle + r * swizzle: a whole row, so the swizzle does
    not matter), then fences them to the async proxy (fence.proxy.async) for the tensor cores."""
    zero = const(0, ("i32", 4))
    loop = kb.for_(first, rows, 1)
    with loop as (r, _):
        for c in range(chunks):
            row = kb.gep(tile, r * swizzle + c * rows * swizzle, "i8")
            for u in range(swizzle // 16):
                kb.store(zero, kb.gep(row, u * 16, "i8"), align=16)
    kb.fence("async_smem")


__all__ = ["tile_box_origins", "zero_rows"]
