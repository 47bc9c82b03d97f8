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

from dataclasses import dataclass
from typing import Any, NamedTuple

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


# ---- mask objects ---------------------------------------------------------------------------------
# Every mask here bounds the keys a query row sees by an interval around the row's diagonal key
# diag = row + seqlen_k - seqlen_q (the key a bottom-right aligned causal mask ends on): key j is
# visible iff lo(diag) <= j <= hi(diag) and 0 <= j < seqlen_k, with lo and hi nondecreasing in the
# row and lo(diag) <= diag <= hi(diag). That one shape makes the tile classification of every mask
# and of any intersection the same few lines (tile_blocks, note [tile-classes]).
#
# Note [tile-classes]: for the rows [r0, r1) of a query tile, clipped to seqlen_q, lo and hi are
# nondecreasing, so the union of the rows' key intervals is the interval [lo(r0), hi(r1 - 1)]
# (each row's interval holds its diag, and diag grows by one per row: no gap), and the keys every
# row sees are [lo(r1 - 1), hi(r0)]. KV blocks of `bn` keys that meet the union are visited; those
# inside the common part (and below seqlen_k) run with no per-element mask; the rest are empty and
# skipped. Rows past seqlen_q are never stored, so they do not count.


class IntOps:
    """The arithmetic of the mask bounds on Python ints (host tests, the reference)."""
    smax = staticmethod(max)
    smin = staticmethod(min)
    floordiv = staticmethod(lambda a, b: a // b)
    ceildiv = staticmethod(lambda a, b: -(-a // b))
    slt = staticmethod(lambda a, b: a < b)
    select = staticmethod(lambda c, a, b: a if c else b)


class ValueOps:
    """The same on the DSL's i32 Values, read as signed: a diagonal or a window bound may be < 0."""
    smax = staticmethod(lambda a, b: a.smax(b))
    smin = staticmethod(lambda a, b: a.smin(b))
    floordiv = staticmethod(lambda a, b: a.sfloordiv(b))
    ceildiv = staticmethod(lambda a, b: a.sceildiv(b))
    slt = staticmethod(lambda a, b: a.slt(b))
    select = staticmethod(select)


class Mask:
    """A mask family member: frozen and hashable (part of the kernel config's key and name).
    `bounds(diag, ops)` gives the inclusive key interval (lo, hi) of a row, None for an unbounded
    side; `a & b` is their intersection."""

    def bounds(self, diag, ops) -> tuple:
        raise NotImplementedError

    def tag(self) -> str:
        """The kernel-name tag ('' for no mask; '_causal' as the kernels always said)."""
        raise NotImplementedError

    def __and__(self, other: "Mask") -> "Mask":
        return intersect(self, other)

    @property
    def parts(self) -> tuple:
        return (self,)

    @property
    def is_legacy(self) -> bool:
        """No mask or causal alone: the kernels keep their original mask code (block_range,
        visible_keys) and so their original PTX."""
        return self.parts in ((), (CAUSAL,))

    def visible(self, row: int, key: int, seqlen_q: int, seqlen_k: int) -> bool:
        """The element predicate on ints (the reference of the tests)."""
        lo, hi = row_keys(self, row, seqlen_q, seqlen_k, IntOps)
        return lo <= key < hi


@dataclass(frozen=True)
class Causal(Mask):
    """Bottom-right aligned causal: query i sees key j iff j <= i + seqlen_k - seqlen_q."""

    def bounds(self, diag, ops):
        return None, diag

    def tag(self):
        return "_causal"


@dataclass(frozen=True)
class SlidingWindow(Mask):
    """FlashAttention's window_size = (left, right), bottom-right aligned: query i sees key j iff
    diag - left <= j <= diag + right; -1 leaves that side unbounded."""
    left: int
    right: int

    def __post_init__(self):
        for side in ("left", "right"):
            v = getattr(self, side)
            if type(v) is not int or v < -1:
                raise ValueError(f"SlidingWindow.{side} must be an int >= -1 (-1: unbounded), got {v!r}")

    def bounds(self, diag, ops):
        return (diag - self.left if self.left >= 0 else None), (diag + self.right if self.right >= 0 else None)

    def tag(self):
        return (f"_wl{self.left}" if self.left >= 0 else "") + (f"_wr{self.right}" if self.right >= 0 else "")


@dataclass(frozen=True)
class Chunked(Mask):
    """Llama-4's attention_chunk as FlashAttention-3/4 define it: the key axis is cut into chunks
    of `size` keys and query i sees the keys of the chunk that holds its diagonal key
    (diag - diag mod size .. that + size - 1, floor modulo: a negative diag has a chunk of no key).
    Not causal by itself; Llama-4 uses it with causal=True."""
    size: int

    def __post_init__(self):
        if type(self.size) is not int or self.size < 1:
            raise ValueError(f"Chunked.size must be an int >= 1, got {self.size!r}")

    def bounds(self, diag, ops):
        start = ops.floordiv(diag, self.size) * self.size
        return start, start + (self.size - 1)

    def tag(self):
        return f"_chunk{self.size}"


@dataclass(frozen=True)
class Intersect(Mask):
    """Keys that every part lets through; built by `intersect` (canonical: sorted, no duplicates,
    so equal masks have one key)."""
    members: tuple

    @property
    def parts(self):
        return self.members

    def bounds(self, diag, ops):
        lo = hi = None
        for part in self.members:
            p_lo, p_hi = part.bounds(diag, ops)
            lo = p_lo if lo is None else (lo if p_lo is None else ops.smax(lo, p_lo))
            hi = p_hi if hi is None else (hi if p_hi is None else ops.smin(hi, p_hi))
        return lo, hi

    def tag(self):
        return "".join(p.tag() for p in self.members)


CAUSAL = Causal()
_ORDER = {Causal: 0, SlidingWindow: 1, Chunked: 2}


def intersect(*masks: Mask) -> Mask:
    """The intersection of masks, canonical: one part per kind (windows meet side by side, chunks
    must agree), causal as the window's right bound 0 where there is a window and a window (-1, 0)
    as causal, in the order causal, window, chunk. One part stands alone; none is NO_MASK."""
    parts = [p for m in masks for p in m.parts]
    causal = any(isinstance(p, Causal) for p in parts)
    windows = [p for p in parts if isinstance(p, SlidingWindow)]
    chunks = sorted({p.size for p in parts if isinstance(p, Chunked)})
    if len(chunks) > 1:
        raise ValueError(f"chunked masks of sizes {chunks} intersect into no single chunk size; use one")
    out = []
    if windows:
        def meet(vals):
            bounded = [v for v in vals if v >= 0]
            return min(bounded) if bounded else -1
        left, right = meet([w.left for w in windows]), meet([w.right for w in windows] + ([0] if causal else []))
        if right == 0 and left < 0:     # window (-1, 0) is causal
            out.append(CAUSAL)
        elif left >= 0 or right >= 0:
            out.append(SlidingWindow(left, right))
    elif causal:
        out.append(CAUSAL)
    out += [Chunked(c) for c in chunks]
    return out[0] if len(out) == 1 else Intersect(tuple(out))


NO_MASK = Intersect(())


def attention_mask(causal: bool = False, window_size: tuple = (-1, -1), attention_chunk: int = 0) -> Mask:
    """The mask of FlashAttention's (causal, window_size, attention_chunk): causal sets the
    window's right side to 0 (as FA3/FA4 do), window (-1, 0) is causal, (-1, -1) is no window,
    attention_chunk 0 is no chunk."""
    parts = [CAUSAL] if causal else []
    left, right = window_size
    if left >= 0 or right >= 0:
        parts.append(SlidingWindow(left, right))
    if attention_chunk:
        parts.append(Chunked(attention_chunk))
    return intersect(*parts)


def row_keys(mask: Mask, row, seqlen_q, seqlen_k, ops) -> tuple:
    """[lo, hi): the keys query `row` sees, clipped to [0, seqlen_k) (empty when hi <= lo)."""
    lo, hi = mask.bounds(row + seqlen_k - seqlen_q, ops)
    lo = 0 if lo is None else ops.smax(lo, 0)
    hi = seqlen_k if hi is None else ops.smin(hi + 1, seqlen_k)
    return lo, hi


class TileBlocks(NamedTuple):
    """The KV blocks of a query tile (note [tile-classes]): visit [first, end), no per-element mask
    on [full_first, full_end) (within [first, end); empty when full_end <= full_first)."""
    first: Any
    end: Any
    full_first: Any
    full_end: Any


def tile_blocks(mask: Mask, row0, rows: int, seqlen_q, seqlen_k, bn: int, ops) -> TileBlocks:
    """The KV blocks of `bn` keys the query rows [row0, row0 + rows) (clipped to seqlen_q; row0 <
    seqlen_q) visit and the ones they see whole. Written once for ints (`IntOps`) and DSL Values
    (`ValueOps`)."""
    last = ops.smin(row0 + rows, seqlen_q) - 1
    lo_first, hi_first = row_keys(mask, row0, seqlen_q, seqlen_k, ops)
    lo_last, hi_last = row_keys(mask, last, seqlen_q, seqlen_k, ops)
    first = ops.floordiv(lo_first, bn)
    # no row sees a key iff the union [lo_first, hi_last) is empty: then no block at all
    end = ops.smax(ops.ceildiv(hi_last, bn), first)
    full_first = ops.smax(ops.ceildiv(lo_last, bn), first)
    full_end = ops.smax(ops.smin(ops.floordiv(hi_first, bn), end), full_first)
    return TileBlocks(first, end, full_first, full_end)


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
