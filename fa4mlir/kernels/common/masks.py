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


__all__ = ["block_range", "umin", "visible_keys"]
