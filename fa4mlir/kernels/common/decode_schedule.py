"""Decode schedule math (MLIR-free, deviceless): pack-GQA geometry, the split-KV heuristic and the
split partition a decode kernel over the KV-cache operand runs by. The host plans with these; the
kernel emits the same arithmetic (the host twins are what the tests check).

Pack GQA. The ``group = heads // kv_heads`` query heads that share a KV head are packed into the
M dimension of one tile: packed row ``r`` of KV head ``h_kv`` is query token ``r // group`` of query
head ``h_kv * group + r % group`` (token-major, so a token's ``group`` heads are adjacent in q's
``[batch, seqlen_q, heads, D]`` layout), ``rows = seqlen_q * group`` rows in tiles of ``TILE_M``
(one warpgroup's wgmma M). Each K/V tile is then read once per KV head instead of once per query
head. The causal mask of a packed row uses its token ``r // group`` (fastdiv: group need not be a
power of two).

Split KV. When ``batch * kv_heads * m_tiles`` CTAs cannot fill the SMs, each (batch, KV head, M
tile) splits its keys into ``num_splits`` contiguous ranges of whole ``bn`` tiles; each split
writes a float32 partial O (normalised by its own row sum) and its LSE, and a combine kernel merges
them weighted by ``exp(lse_s - lse)`` (``testing_kvcache.combine_splits`` is the reference). The
host does not know the sequence lengths (``cache_seqlens`` is device data, never read), so the
heuristic sees only the capacity bound; the kernel partitions each sequence's actual length with
``split_range``.

Determinism: ``num_splits`` is a function of the shapes and the SM count only (never of the
lengths), ``split_range`` of (length, num_splits), and the combine sums splits in index order; the
same inputs and shapes on the same device therefore give the same bits. A different
``num_splits`` (another batch size, another device) rounds differently: batch-invariant results
need a fixed ``num_splits`` passed by the caller (FlashAttention #1897).

The heuristic's constants are first guesses: **its choice must be confirmed by measurement on the
GPU** (issue 27 item 3: decode_dense, decode_paged_*, decode_spec4 against num_splits forced to
1, 2, 4, ...), and set from it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .fastdiv import divide, divisor

TILE_M = 64                  # rows per M tile: one consumer warpgroup's wgmma M
MAX_SPLITS = 128             # partial-O workspace bound (FA3 and FA4 use the same cap)
MIN_TILES_PER_SPLIT = 4      # fewer bn tiles than this per split: not worth a partial O (to be measured)
FILL_FRACTION = 0.8          # CTAs >= this fraction of the SMs: no split (to be measured)
SPLIT_OVERHEAD_TILES = 2.0   # a split's fixed cost (prologue, partial O write, its share of the combine)
                             # in units of one bn tile's load-and-compute time (to be measured)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class PackGQA:
    """The M geometry of one (batch, KV head) work item: ``rows`` packed query rows in ``m_tiles``
    tiles of ``tile_m``; ``group_div`` is the fastdiv pair of ``group`` for the kernel."""

    seqlen_q: int
    group: int
    packed: bool
    tile_m: int = TILE_M

    @property
    def rows(self) -> int:
        """Query rows per work item: seqlen_q * group packed, seqlen_q (one head) otherwise."""
        return self.seqlen_q * self.group if self.packed else self.seqlen_q

    @property
    def m_tiles(self) -> int:
        """M tiles per work item: per (batch, KV head) packed, per (batch, query head) otherwise."""
        return ceil_div(self.rows, self.tile_m)

    @property
    def m_tiles_per_kv_head(self) -> int:
        return self.m_tiles if self.packed else self.m_tiles * self.group

    @property
    def group_div(self) -> tuple[int, int]:
        return divisor(self.group)

    def row(self, r: int) -> tuple[int, int]:
        """Packed row r -> (query token, head within the group): the kernel's fastdiv by group."""
        if not self.packed:
            return r, 0
        mul, shift = self.group_div
        token = divide(r, mul, shift)
        return token, r - token * self.group


def pack_gqa(seqlen_q: int, heads: int, kv_heads: int, tile_m: int = TILE_M) -> PackGQA:
    """Pack when it saves M tiles (every KV tile read fewer times): group > 1 and packing needs
    fewer tiles per KV head than one head at a time. With seqlen_q a multiple of tile_m it saves
    none (the same tiles, each reading every K/V tile), so the heads stay unpacked."""
    if heads % kv_heads:
        raise ValueError(f"heads {heads} is not a multiple of kv_heads {kv_heads}")
    group = heads // kv_heads
    packed = group > 1 and ceil_div(seqlen_q * group, tile_m) < group * ceil_div(seqlen_q, tile_m)
    return PackGQA(seqlen_q, group, packed, tile_m)


def split_cost(num_splits: int, ctas: int, n_tiles: int, num_sms: int) -> float:
    """Modelled time of one split choice, in bn-tile times: waves of CTAs, each running its share
    of the KV tiles plus a split's fixed cost (none when unsplit)."""
    waves = ceil_div(ctas * num_splits, num_sms)
    per_cta = ceil_div(n_tiles, num_splits) + (SPLIT_OVERHEAD_TILES if num_splits > 1 else 0.0)
    return waves * per_cta


def num_splits_heuristic(ctas: int, max_seqlen_k: int, bn: int, num_sms: int,
                         max_splits: int = MAX_SPLITS) -> int:
    """num_splits for ``ctas`` = batch * kv_heads * m_tiles work items over keys of at most
    ``max_seqlen_k`` (the cache capacity plus new tokens: the host's only bound) in tiles of ``bn``.

    1 when the CTAs already (nearly) fill the SMs or a split would get fewer than
    MIN_TILES_PER_SPLIT tiles; otherwise the split count with the least ``split_cost`` (waves x
    tiles per CTA, plus the split overhead), the smallest on a tie. Deterministic in its arguments.
    To be confirmed by measurement (module docstring)."""
    for name, x in (("ctas", ctas), ("bn", bn), ("num_sms", num_sms), ("max_splits", max_splits)):
        if type(x) is not int or x < 1:
            raise ValueError(f"{name} must be an int >= 1, got {x!r}")
    n_tiles = ceil_div(max(max_seqlen_k, 0), bn)
    if ctas >= FILL_FRACTION * num_sms:
        return 1
    top = min(max_splits, num_sms, n_tiles // MIN_TILES_PER_SPLIT)
    if top <= 1:
        return 1
    return min(range(1, top + 1), key=lambda s: (split_cost(s, ctas, n_tiles, num_sms), s))


BALANCE_TILES = 32           # paged caches: at most this many bn tiles per split (to be measured)
BALANCE_WAVES = 16           # ... while the CTAs stay within this many waves


def balance_splits(ctas: int, max_seqlen_k: int, bn: int, slots: int, max_splits: int = MAX_SPLITS) -> int:
    """num_splits for ragged lengths the host cannot see (a paged cache: sequences of 1k and 16k
    tokens side by side): each (batch, KV head) range of at most BALANCE_TILES tiles, so that no
    CTA runs far longer than the rest and the grid's tail stays short; a sequence shorter than the
    capacity leaves its last splits empty (they exit after writing LSE = -inf). Capped so that the
    CTAs fill at most BALANCE_WAVES waves of ``slots``. 1 when the capacity is short. A function of
    the shapes only (deterministic). To be confirmed by measurement (bench decode --splits)."""
    n_tiles = ceil_div(max(max_seqlen_k, 0), bn)
    if n_tiles <= 2 * BALANCE_TILES:
        return 1
    by_waves = max(1, BALANCE_WAVES * slots // max(ctas, 1))
    return max(1, min(ceil_div(n_tiles, BALANCE_TILES), by_waves, max_splits))


def split_range(n_tiles: int, num_splits: int, split_idx: int) -> tuple[int, int]:
    """KV tiles [begin, end) of split ``split_idx`` for a sequence of ``n_tiles`` tiles (its actual
    length, known on the device only): ``n_tiles // num_splits`` each, the first ``n_tiles %
    num_splits`` splits one more. Contiguous, in order, covering every tile once; a split with no
    tile (short sequence) writes LSE = -inf and weighs 0 in the combine."""
    if not 0 <= split_idx < num_splits:
        raise ValueError(f"split_idx must be in [0, {num_splits}), got {split_idx}")
    base, extra = divmod(n_tiles, num_splits)
    begin = split_idx * base + min(split_idx, extra)
    return begin, begin + base + (split_idx < extra)


__all__ = ["BALANCE_TILES", "BALANCE_WAVES", "balance_splits", "TILE_M", "MAX_SPLITS", "MIN_TILES_PER_SPLIT", "FILL_FRACTION", "SPLIT_OVERHEAD_TILES", "ceil_div",
           "PackGQA", "pack_gqa", "split_cost", "num_splits_heuristic", "split_range"]
