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


def gather_rows(kb, tid: Value, threads: int, t0: Value, bn: int, length: Value, batch: Value, page_table: Value,
                page_table_stride: Value, num_pages: Value, page_size: int, rows_smem: Value):
    """Note "Row gather", step 1: the pool rows of rows tid, tid + threads, .. of the tile of tokens
    [t0, t0 + bn) into `rows_smem` (int32 [bn]): token t's pool row page_table[b, t / page_size] *
    page_size + t % page_size (the entry clamped into the pool), -1 for a row at or past `length`
    (which reads slot 0's entry, unused)."""
    base = batch.to("i64") * page_table_stride.to("i64")
    for j in range(bn // threads):
        t = t0 + tid + threads * j
        live = t.slt(length)
        slot = select(live, t // page_size, const(0))
        entry = kb.load(kb.gep(page_table, base + slot.to("i64"), "i32"), "i32", align=4)
        row = entry.smax(0).smin(num_pages - 1) * page_size + (t - slot * page_size)
        kb.store(select(live, row, const(-1)), kb.gep(rows_smem, (tid + threads * j) * 4, "i8"), align=4)


def gather_tile(kb, rows_smem: Value, lane: Value, warp: Value, warps: int, pool: Value, row_stride: Value,
                head_offset: Value, row_bytes: int, smem: Value, tile_offset: Value, bn: int, swizzle: int):
    """Note "Row gather", step 2: warp `warp` of `warps` copies rows [warp bn / warps, (warp + 1) bn /
    warps) of a K or V tile into the 128B-swizzled layout a TMA box gives (chunk c of row r at
    c * bn * swizzle + r * swizzle, 16-byte unit u at (u ^ r % 8) * 16), the tile at byte
    `tile_offset` (a multiple of 1024) of `smem`. `pool` the pool's base, `row_stride` its bytes per
    pool row (i64: kv_heads * D * 2), `head_offset` this KV head's bytes into a row (i64), row_bytes
    the D * 2 bytes of a row; pool rows from `rows_smem` (-1: a dead row, stored as zeros). The caller
    fences the stores to the async proxy before it hands the stage over.

    Note "Row gather": the decode route's free warpgroup (warps 4-7, 192 registers) fetches a tile
    whose pages are too small for per-page TMA boxes (paging.fetch_plan). 1. Thread x looks up the
    pool row of tile row x and stores it to `rows_smem` (gather_rows); the warpgroup syncs (a named
    barrier). 2. For K, then V: a warp's step copies R = 32 / U whole rows of its quarter of the tile
    (U = row_bytes / 16 pieces a row), lane l piece l % U of row i R + l / U of step i (consecutive
    lanes read consecutive 16 bytes of one row: coalesced); every step's 16-byte load is issued
    before the first store (all of a thread's loads in flight: 64 registers at D128), then the
    stores, zeros for a row past the length (no stale row reaches P V). 3. fence.proxy.async, then
    every thread arrives on the stage's full barrier (the pipe counts 128 producer arrivals): the
    tcgen05.mma reads the stage through the async proxy, and a writer must fence its own generic
    writes (PTX ISA 9.1 §9.7.16.6.5); cp.async would land its bytes after the fence, and the dialect
    has no cp.async.wait_all to wait for them first. 4. The warpgroup syncs before the next tile's
    rows overwrite `rows_smem`. A lane's destination is one of 8 / R swizzle positions (r % 8 takes
    8 / R values per lane) plus an immediate. Not timed (no Blackwell GPU)."""
    units = row_bytes // 16
    per_instr = 32 // units                            # R rows per warp step
    sub, unit = lane // units, lane % units
    chunk, in_chunk = unit // (swizzle // 16), unit % (swizzle // 16)
    warp_rows = bn // warps
    lane_base = tile_offset + chunk * (bn * swizzle) + (warp * warp_rows + sub) * swizzle
    # r % 8 = (i R) % 8 + sub for row r = i R + sub (R divides 8): one position per value of (i R) % 8
    pos = {k: lane_base + ((in_chunk ^ (sub + k)) * 16) for k in range(0, 8, per_instr)}
    src_lane = kb.gep(pool, head_offset + (unit * 16).to("i64"), "i8")
    first = warp * warp_rows + sub
    zero = const(0, ("i32", 4))
    pieces = []
    for i in range(warp_rows // per_instr):
        row = kb.load(kb.gep(rows_smem, (first + i * per_instr) * 4, "i8"), "i32", align=4)
        data = kb.load(kb.gep(src_lane, row.smax(0).to("i64") * row_stride, "i8"), ("i32", 4), align=16)
        pieces.append((row.sge(0), data))
    for i, (live, data) in enumerate(pieces):
        dst = kb.gep(smem, pos[(i * per_instr) % 8] + i * (per_instr * swizzle), "i8")
        kb.store(select(live, data, zero), dst, align=16)


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


__all__ = ["tile_box_origins", "gather_rows", "gather_tile", "zero_rows"]
