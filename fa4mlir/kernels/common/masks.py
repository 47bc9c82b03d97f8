"""Arch-neutral attention masks: which KV blocks a tile of query rows visits, and which keys a row sees.

Causal attention is aligned bottom-right (FlashAttention 2+): query row i sees key j iff
j <= i + seqlen_k - seqlen_q; a row that sees no key gets O = 0 and LSE = +inf. Keys at or past
seqlen_k are never seen (the TMA tail is zero-filled, the mask makes it -inf).
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


def key_hidden(key: Value, row: Value, seqlen_q: Value, seqlen_k: Value, causal: bool) -> Value:
    """True where query `row` must not see `key` (past seqlen_k, or in the causal future)."""
    hidden = key.ge(seqlen_k)
    if causal:
        hidden = hidden | (key + seqlen_q).gt(row + seqlen_k)
    return hidden


__all__ = ["block_range", "key_hidden", "umin"]
