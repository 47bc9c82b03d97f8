"""The tile order of a ragged (varlen) batch (MLIR-free, deviceless; the kernel emits the same math).

A ragged batch packs `batch` sequences of different lengths into one [total_tokens, heads, D]
tensor; their lengths live on the device (cu_seqlens), so the host knows only an upper bound,
max_seqlen_q, and must not read them (a host sync per call would stall a serving loop). The grid
therefore has one CTA for every (query tile m_block < m_tiles = ceil(max_seqlen_q / bm), head,
sequence); the CTA reads its sequence's start and length from device memory and exits at once when
its tile starts past the sequence's end.

Order: longest first. The hardware hands the blocks of a 1-D grid out in index order as SMs free
up, so the order of block indices is the schedule. Block t is query tile

    m_block = m_tiles - 1 - t // (heads * batch),    (head, sequence) index hb = t % (heads * batch)

(hb = head + heads * sequence: the heads of one sequence are adjacent, so a GQA group's CTAs read
one KV head's K and V at the same time). The grid walks the query tiles from the last one down:
the first blocks are the tiles that only the longest sequences have, each as expensive as a tile
gets (a causal tile's KV blocks grow with m_block; a non-causal one sees its whole sequence, and
the sequences reaching m_block are the long ones), and the grid ends on m_block 0 of every
sequence, where the short sequences live. The long tiles therefore start first and the last wave
is made of short work, which is what keeps the SMs balanced without knowing the lengths (the rule
of the dense causal grid, attention_sm90_config.section_tile, applied across sequences). The price
is the empty blocks: a sequence of n tokens has ceil(n / bm) of the m_tiles tiles, the rest exit
after two loads of cu_seqlens (no barrier, no TMA). With lengths 32k and 63 x 512 at bm 128 that
is 256 x 64 x heads blocks of which about 6% work; an empty block costs the block launch and two
global loads, far below a working tile's KV loop.

Written once for Python ints (tests, the host's reference order) and kernel Values (`ops` as in
attention_sm90_config: lt, select), like section_tile.
"""
from __future__ import annotations

from .fastdiv import divide, divisor


def varlen_tiles(max_seqlen_q: int, bm: int) -> int:
    """Query tiles per sequence the grid covers: ceil(max_seqlen_q / bm) (0 for an empty batch)."""
    return (int(max_seqlen_q) + bm - 1) // bm


def varlen_grid_size(max_seqlen_q: int, bm: int, heads: int, batch: int) -> int:
    """Blocks of the 1-D grid: one per (query tile, head, sequence)."""
    return varlen_tiles(max_seqlen_q, bm) * int(heads) * int(batch)


def varlen_tile(t, m_tiles, hb_total, div_hb):
    """(m_block, hb) of block t: m_block = m_tiles - 1 - t // hb_total (last query tile first),
    hb = t % hb_total = head + heads * sequence. `div_hb(u)` is u // hb_total (fast_div in the
    kernel)."""
    m_idx = div_hb(t)
    return m_tiles - 1 - m_idx, t - m_idx * hb_total


def tile_order(max_seqlen_q: int, bm: int, heads: int, batch: int) -> list[tuple[int, int, int]]:
    """The grid's (m_block, head, sequence) by block index, as the kernel computes them (fastdiv
    included): what the tests check and what a host-side tool can print."""
    hb_total = heads * batch
    m_tiles = varlen_tiles(max_seqlen_q, bm)
    mul, shr = divisor(max(hb_total, 1))
    out = []
    for t in range(m_tiles * hb_total):
        m_block, hb = varlen_tile(t, m_tiles, hb_total, lambda u: divide(u, mul, shr))
        b = hb // heads
        out.append((m_block, hb - b * heads, b))
    return out


def tile_has_rows(m_block: int, bm: int, seqlen_q: int) -> bool:
    """Whether query tile m_block of a sequence of seqlen_q tokens holds any of its rows (else the
    block exits)."""
    return m_block * bm < seqlen_q


__all__ = ["varlen_tiles", "varlen_grid_size", "varlen_tile", "tile_order", "tile_has_rows"]
