"""The KV-cache operand's row lookups as DSL arithmetic (the host twins, which the tests check, are
common.paging's `PageDivisor.split` and `pool_row`): where a TMA box of a paged tile starts, and how a
tile's stale rows past a sequence's length are cleared.

The pool is a 4-D tensor [num_pages, page_size, kv_heads, D] to TMA; a box of rows starting at token
t of sequence b (inside one page: paging.py, note "Box rows") is at (page, row) =
(page_table[b, t / page_size], t % page_size). The page size is compiled in, so the division is by a
constant (a shift, or LLVM's multiply-high).
"""
from __future__ import annotations

from ...dsl import Value, const, select


def box_origin(kb, t: Value, length: Value, batch: Value, page_table: Value, page_table_stride: Value,
               num_pages: Value, page_size: int) -> tuple[Value, Value]:
    """(page, row) of the box starting at token t >= 0. A box at or past `length` reads no page-table
    entry and aims at page num_pages, outside the pool, so TMA zero-fills it (and still counts its
    bytes); an entry is clamped into [0, num_pages) so a bad table never reads outside the pool."""
    live = t.slt(length)
    slot = t // page_size
    row = t - slot * page_size
    index = batch.to("i64") * page_table_stride.to("i64") + select(live, slot, const(0)).to("i64")
    entry = kb.load(kb.gep(page_table, index, "i32"), "i32", align=4)
    page = entry.smax(0).smin(num_pages - 1)
    return select(live, page, num_pages), row


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


__all__ = ["box_origin", "zero_rows"]
