"""Arch-neutral attention masks: which KV blocks a tile of query rows visits, and which keys a row sees.

Causal attention is aligned bottom-right (FlashAttention 2+): query row i sees key j iff
j <= i + seqlen_k - seqlen_q; a row that sees no key gets O = 0 and LSE = +inf. Keys at or past
seqlen_k are never seen (the TMA tail is zero-filled, the mask makes it -inf).

The math here uses the DSL's unsigned comparisons and division (it predates the signed ones) and
takes a difference only after checking it is positive. The shipped cubins depend on this exact IR,
so it stays; new masks whose differences may go negative (sliding windows, ragged offsets) can use
`Value.slt/sle/sgt/sge`, `sdiv/sfloordiv/srem` and `to(..., signed=True)` instead.
"""
from __future__ import annotations

from ...dsl import Value, const, select


def umin(a: Value, b) -> Value:
    b = b if isinstance(b, Value) else const(b)
    return select(a.lt(b), a, b)


def block_range(row0: Value, rows: int, seqlen_q: Value, seqlen_k: Value, bn: int, causal: bool):
    """(n_blocks, n_unmasked) for the query rows [row0, row0 + rows): the KV blocks of `bn` keys that
    any of the rows sees, and how many leading blocks every row sees entirely (no mask needed)."""
    n_all = (seqlen_k + (bn - 1)) // bn
    full_all = seqlen_k // bn
    if not causal:
        return n_all, full_all
    # last key any row sees: min(row0 + rows, Sq) - 1 + Sk - Sq (none when negative)
    row_end = umin(row0 + rows, seqlen_q)
    seen = row_end + seqlen_k
    reach = select(seen.gt(seqlen_q), seen - seqlen_q, 0)
    n_blocks = umin(n_all, (reach + (bn - 1)) // bn)
    # a block is unmasked for every row when its last key <= row0 + Sk - Sq
    first = row0 + seqlen_k + 1
    unmasked = select(first.gt(seqlen_q), (first - seqlen_q) // bn, 0)
    return n_blocks, umin(full_all, unmasked)


def visible_keys(key0: Value, row: Value, seqlen_q: Value, seqlen_k: Value, causal: bool) -> Value:
    """How many of the keys key0, key0 + 1, ... query `row` sees: key0 + c is hidden iff c >= the
    result (0 when the row sees none of them). Keys at or past seqlen_k are hidden, and under the
    causal mask those past row + seqlen_k - seqlen_q. Computed once per row and KV block, so masking a
    score at a compile-time offset c costs one compare with an immediate and one select. The DSL's
    comparisons are unsigned, so every difference is taken only when it is positive."""
    end = seqlen_k
    if causal:
        seen = row + seqlen_k + 1        # keys [0, seen - seqlen_q) are visible
        end = umin(select(seen.gt(seqlen_q), seen - seqlen_q, 0), seqlen_k)
    return select(end.gt(key0), end - key0, 0)


from .mask_family import (CAUSAL, NO_MASK, Causal, Chunked, IntOps, Intersect, Mask, SlidingWindow,  # noqa: E402
                          TileBlocks, attention_mask, intersect, row_keys, tile_blocks)


class ValueOps:
    """The same on the DSL's i32 Values, read as signed: a diagonal or a window bound may be < 0."""
    smax = staticmethod(lambda a, b: a.smax(b))
    smin = staticmethod(lambda a, b: a.smin(b))
    floordiv = staticmethod(lambda a, b: a.sfloordiv(b))
    ceildiv = staticmethod(lambda a, b: a.sceildiv(b))
    slt = staticmethod(lambda a, b: a.slt(b))
    select = staticmethod(select)


def key_window(mask: Mask, key0: Value, row: Value, seqlen_q: Value, seqlen_k: Value) -> tuple:
    """(start, end), signed i32: key key0 + c is visible to query `row` iff start <= c < end, for a
    compile-time c. Computed once per row and KV block, so masking a score costs two compares with
    immediates, an or and a select."""
    lo, hi = row_keys(mask, row, seqlen_q, seqlen_k, ValueOps)
    return lo - key0, hi - key0


def hidden(window: tuple, c: int) -> Value:
    """Whether key key0 + c is hidden, for key_window's (start, end)."""
    start, end = window
    return start.sgt(c) | end.sle(c)


__all__ = ["block_range", "umin", "visible_keys", "Mask", "Causal", "SlidingWindow", "Chunked", "Intersect",
           "CAUSAL", "NO_MASK", "intersect", "attention_mask", "row_keys", "tile_blocks", "TileBlocks",
           "key_window", "hidden", "IntOps", "ValueOps"]
