"""Row-index math of the KV-cache operand (MLIR-free: the host plans with it, the kernel side emits
the same arithmetic with dsl ops; the host twins here are what the tests check).

The cache, contiguous or paged, is one matrix of rows to the kernel: the pool
``[num_pages, page_size, kv_heads, D]`` viewed as ``[num_pages * page_size, kv_heads, D]``. A
contiguous cache ``[batch, seqlen_cache, kv_heads, D]`` is the paged case with ``page_size =
seqlen_cache``, ``num_pages = batch`` and the identity page table (sequence b owns page b), so one
formula serves both:

    page_slot, row_in_page = divmod(token, page_size)             (fast division: fastdiv.py)
    pool_row = page_table[b, page_slot] * page_size + row_in_page

Power-of-two page sizes divide by a shift; any other page size (1..256 are all taken) by
``fastdiv.divisor(page_size)``'s multiply-high, so the kernel never divides by a register.

Fetching a K/V tile of ``bn`` consecutive tokens (the tile starts at a multiple of ``bn``): a TMA
box may not straddle a page (the next page is anywhere in the pool), so a tile is cut into boxes of
``box_rows = gcd(bn, page_size)`` rows, which never straddle one (note "Box rows" below). When that
box is tall enough (``MIN_TMA_BOX_ROWS``, 8; ``MIN_FP8_TMA_BOX_ROWS``, 16, for an FP8 cache) and a
tile needs few of them (``MAX_TMA_BOXES``), the producer issues TMA boxes; otherwise (page sizes 1-7
and odd ones, and an FP8 cache's 8-row pages) the rows are gathered, 16 bytes a lane: on sm_90a by
cp.async from two producer warps (attention_decode_sm90, note "Gather"), on sm_100a by plain 16-byte
loads and shared stores from the decode route's free warpgroup (paged_rows, note "Row gather": the
tcgen05.mma reads through the async proxy, so the writer fences its own stores). TMA gather4 (sm_100a's tile::gather4, four arbitrary rows per
instruction) would issue 4x fewer instructions than a row each; it is not built (it needs a 2-D
tensor map of the pool and a lowering and interpreter op of its own). Measured on an H200 (notes/RESULTS.md, `[D-decode-gather]`, `[D-decode-box8]`): at page
size 1 the gather reads 3.8 TB/s where 1-row TMA boxes read 0.64, and page size 16's 4-box tiles
4.2; at page size 8 (D128 bf16) 8-row boxes read 4.13 TB/s where the gather read 3.85. FP8 keeps
the gather below 16 rows: its 8-row boxes (1 KiB at D128) were never timed, and the FP8 decode is
bound by its in-SMEM conversion, not by the fetch (`[O-decode-fp8]`). More than MAX_TMA_BOXES boxes
per tile (bn > 64 with 8-row boxes) is not timed against the gather.

Note "Box rows": a tile covers tokens [t0, t0 + bn) with t0 a multiple of bn; page boundaries are
the multiples of page_size. Every boundary inside the tile is a multiple of g = gcd(bn, page_size)
away from t0 (t0 and the boundary are both multiples of g), so boxes of g rows starting at t0 end
exactly on every boundary, and no larger uniform box does for every t0.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from math import gcd

from .fastdiv import divide, divisor

MAX_PAGE_SIZE = 256          # the operand's page sizes are 1..256 (issue 27)
MIN_TMA_BOX_ROWS = 8         # below this the gather (1-row boxes: 6x slower than it at page size 1, H200;
                             # 8-row boxes 7% faster than it at page size 8: [D-decode-box8])
MIN_FP8_TMA_BOX_ROWS = 16    # an FP8 cache's 8-row pages stay on the gather (not timed: [D-decode-box8])
MAX_TMA_BOXES = 8            # more boxes than this per tile: gather instead (issue latency): not timed


def check_page_size(page_size: int) -> int:
    if type(page_size) is not int or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be an int in 1..{MAX_PAGE_SIZE}, got {page_size!r}")
    return page_size


@dataclass(frozen=True)
class PageDivisor:
    """How the kernel splits a token index by the page size: a shift for powers of two, else a
    fastdiv (multiplier, shift) pair; ``split`` is the host twin of the kernel's arithmetic."""

    page_size: int
    log2: int | None          # page_size == 1 << log2, else None
    mul: int                  # fastdiv pair (used when log2 is None)
    shift: int

    @classmethod
    def of(cls, page_size: int) -> "PageDivisor":
        """Any page_size >= 1 below 2**31 (a contiguous cache's one page per sequence included)."""
        pow2 = page_size & (page_size - 1) == 0
        mul, shift = divisor(page_size)
        return cls(page_size, page_size.bit_length() - 1 if pow2 else None, mul, shift)

    def split(self, token: int) -> tuple[int, int]:
        """token -> (page_slot, row_in_page): what the kernel computes for 0 <= token < 2**31."""
        if self.log2 is not None:
            if not 0 <= token < 1 << 31:
                raise ValueError(f"token must be in [0, 2**31), got {token}")
            slot = token >> self.log2
        else:
            slot = divide(token, self.mul, self.shift)
        return slot, token - slot * self.page_size


def pool_row(page_table_row, token: int, div: PageDivisor) -> int:
    """The pool row holding ``token`` of the sequence whose page-table row is ``page_table_row``."""
    slot, row = div.split(token)
    return int(page_table_row[slot]) * div.page_size + row


def pages_spanned(t0: int, rows: int, page_size: int) -> int:
    """How many pages tokens [t0, t0 + rows) touch (rows >= 1)."""
    return (t0 + rows - 1) // page_size - t0 // page_size + 1


def max_pages_per_tile(bn: int, page_size: int) -> int:
    """The most pages a tile of bn tokens starting at a multiple of bn touches: with g =
    gcd(bn, page_size) the tile's start sits at offset page_size - g in its page at worst."""
    g = gcd(bn, page_size)
    return -(-(page_size - g + bn) // page_size)


class KVFetch(enum.Enum):
    """How the producer brings a K/V tile into SMEM."""

    TMA_BOXES = "tma_boxes"          # bn / box_rows TMA boxes of box_rows rows, each inside one page
    CP_ASYNC_GATHER = "cp_async"     # one cp.async row (D elements) per token, any page size


@dataclass(frozen=True)
class FetchPlan:
    """The operand's fetch choice for one (bn, page_size, arch)."""

    fetch: KVFetch
    box_rows: int            # rows per TMA box (TMA_BOXES), else rows per gather instruction
    boxes_per_tile: int      # instructions per tile and per K or V

    @property
    def uses_tma(self) -> bool:
        return self.fetch is not KVFetch.CP_ASYNC_GATHER


def fetch_plan(bn: int, page_size: int, arch: str = "sm_90a", *, paged: bool = True, fp8: bool = False) -> FetchPlan:
    """TMA boxes when gcd(bn, page_size) rows make a box of at least MIN_TMA_BOX_ROWS
    (MIN_FP8_TMA_BOX_ROWS for an ``fp8`` cache) and a tile needs at most MAX_TMA_BOXES of them (one
    box per tile when page_size is a multiple of bn: the contiguous cache, and FA3's TMA rule
    page_size % bn == 0); else a gather. page_size may exceed MAX_PAGE_SIZE here: a contiguous
    cache is one page of seqlen_cache rows per sequence. A contiguous cache (``paged=False``)
    always takes one box per tile, whatever seqlen_cache: its descriptor has a batch dimension, so
    a tile running past seqlen_cache is cut by the TMA bounds (zero fill) instead of reading the
    next sequence. ``arch`` (sm_90a, sm_100a) takes the same plan on both today: each gathers by
    cp.async."""
    if bn < 1 or page_size < 1:
        raise ValueError(f"bn and page_size must be >= 1, got {bn}, {page_size}")
    if not paged:
        return FetchPlan(KVFetch.TMA_BOXES, bn, 1)
    box_rows = gcd(bn, page_size)
    boxes = bn // box_rows
    if box_rows >= (MIN_FP8_TMA_BOX_ROWS if fp8 else MIN_TMA_BOX_ROWS) and boxes <= MAX_TMA_BOXES:
        return FetchPlan(KVFetch.TMA_BOXES, box_rows, boxes)
    return FetchPlan(KVFetch.CP_ASYNC_GATHER, 1, bn)


def prefill_box_rule(bn: int, page_size: int) -> str | None:
    """Why the sm_90a prefill kernel cannot fetch bn-key tiles of pages of page_size by TMA boxes
    (attention_fwd_sm90_paged), or None when it can: fetch_plan's boxes, and a multiple of 8 rows (whole
    128B-swizzle atoms of 8 rows: a box lands at row i box_rows of its tile)."""
    plan = fetch_plan(bn, page_size)
    if plan.fetch is KVFetch.TMA_BOXES and plan.box_rows % 8 == 0:
        return None
    return (f"page_size {page_size} with bn {bn} cuts K/V tiles into {bn // gcd(bn, page_size)} boxes of "
            f"gcd(bn, page_size) = {gcd(bn, page_size)} rows; the prefill kernel takes boxes of >= "
            f"{MIN_TMA_BOX_ROWS} rows (a multiple of 8), at most {MAX_TMA_BOXES} per tile: other page sizes "
            f"run the decode kernel's varlen_q variant")


__all__ = ["prefill_box_rule", "MAX_PAGE_SIZE", "MIN_TMA_BOX_ROWS", "MIN_FP8_TMA_BOX_ROWS", "MAX_TMA_BOXES", "check_page_size", "PageDivisor",
           "pool_row", "pages_spanned", "max_pages_per_tile", "KVFetch", "FetchPlan", "fetch_plan"]
