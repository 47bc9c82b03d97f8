"""The attention mask family as objects, MLIR-free (the host API and the kernel configs import it;
kernels/common/masks.py adds what emits DSL values): causal, sliding window, chunked and their
intersection, each an interval of keys around a query row's diagonal key, and the tile
classification all of them share, written once over an `ops` table (IntOps here for ints; masks.ValueOps
for kernel Values)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


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


def mask_fields(mask: Mask) -> dict:
    """The config fields of a mask in canonical form, as AttnConfig and FA4Config spell them: causal,
    window_left, window_right (-1: unbounded; with causal the right side is causal's, so -1), chunk
    (0: none). Equal masks give equal fields, so they compile to one kernel."""
    out = {"causal": False, "window_left": -1, "window_right": -1, "chunk": 0}
    for part in mask.parts:
        if isinstance(part, Causal):
            out["causal"] = True
        elif isinstance(part, SlidingWindow):
            out.update(window_left=part.left, window_right=part.right)
        else:
            out["chunk"] = part.size
    if out["window_right"] == 0:     # (left, 0) is causal's spelling of the right side
        out.update(causal=True, window_right=-1)
    if out["causal"]:
        out["window_right"] = -1
    return out


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


__all__ = ["Mask", "Causal", "SlidingWindow", "Chunked", "Intersect", "CAUSAL", "NO_MASK", "intersect",
           "attention_mask", "mask_fields", "row_keys", "tile_blocks", "TileBlocks", "IntOps"]
