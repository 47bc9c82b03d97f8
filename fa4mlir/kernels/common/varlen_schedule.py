"""The tile order of a ragged (varlen) batch (MLIR-free, deviceless; the kernel emits the same math).

A ragged batch packs `batch` sequences of different lengths into one [total_tokens, heads, D]
tensor; their lengths live on the device (cu_seqlens), so the host knows only an upper bound,
max_seqlen_q, and must not read them (a host sync per call would stall a serving loop). The grid
therefore has one CTA for every (query tile m_block < m_tiles = ceil(max_seqlen_q / bm), head,
sequence); the CTA reads its sequence's start and length from device memory and exits at once when
its tile starts past the sequence's end.

Order: the dense causal grid's (common.sections.section_tile), over (head, sequence)
indices hb = head + heads * sequence. The indices go in sections of 2**shift whose K and V (at
max_seqlen_k, section_shift) fit in a share of L2; within a section the tiles go from the last query
tile down to tile 0, every index of the section at one tile before the next. The hardware hands the
blocks of a 1-D grid out in index order as SMs free up, so this order is the schedule: the CTAs
running at one time read the K and V of a few KV heads of one or two sequences, which stay in L2,
and each section starts with its longest tiles (a causal tile's KV blocks grow with m_block; the
sequences reaching a high m_block are the long ones) and ends on tile 0 of its indices, so the grid
ends on short work. The heads of a sequence are adjacent (a GQA group's CTAs read one KV head's K and
V at the same time). An order over all indices at once (every sequence's last tile first) balanced
as well but streamed every KV head from memory: on an nvidia-h200 the sections ran the anchors'
prefill_varlen 1-8% faster and 16 x 8192 causal 7-12% ([D-varlen-sections] in notes/RESULTS.md).

The price is the empty blocks: a sequence of n tokens has ceil(n / bm) of the m_tiles tiles, the
rest exit after two loads of cu_seqlens (no barrier, no TMA). With lengths 32k and 63 x 512 at bm
128 that is 256 x 64 x heads blocks of which about 6% work; an empty block costs the block launch
and two global loads, far below a working tile's KV loop. common.varlen_compact is a grid without
them (AttnConfig.varlen_compact, FA4MLIR_VARLEN_GRID=compact), an A/B variant.

The kernel (attention_fwd_sm90_varlen.tile_of) and `tile_order` here (tests, a host-side print)
run the same section_tile, fastdiv included.
"""
from __future__ import annotations

from .fastdiv import divide, divisor
from .sections import section_tile


def varlen_tiles(max_seqlen_q: int, bm: int) -> int:
    """Query tiles per sequence the grid covers: ceil(max_seqlen_q / bm) (0 for an empty batch)."""
    return (int(max_seqlen_q) + bm - 1) // bm


def varlen_grid_size(max_seqlen_q: int, bm: int, heads: int, batch: int) -> int:
    """Blocks of the 1-D grid: one per (query tile, head, sequence)."""
    return varlen_tiles(max_seqlen_q, bm) * int(heads) * int(batch)


def tile_order(max_seqlen_q: int, bm: int, heads: int, batch: int, shift: int) -> list[tuple[int, int, int]]:
    """The grid's (m_block, head, sequence) by block index, as the kernel computes them (fastdiv
    included), for sections of 2**shift (head, sequence) indices (the launch's section_shift): what
    the tests check and what a host-side tool can print."""
    hb_total = heads * batch
    m_tiles = varlen_tiles(max_seqlen_q, bm)
    rest = hb_total % (1 << shift)
    tiles_div, rest_div = divisor(max(m_tiles, 1)), divisor(max(rest, 1))
    out = []
    for t in range(m_tiles * hb_total):
        m_block, hb = section_tile(t, m_tiles, hb_total, shift, lambda u: divide(u, *tiles_div),
                                   lambda u: divide(u, *rest_div))
        b = hb // heads
        out.append((m_block, hb - b * heads, b))
    return out


def tile_has_rows(m_block: int, bm: int, seqlen_q: int) -> bool:
    """Whether query tile m_block of a sequence of seqlen_q tokens holds any of its rows (else the
    block exits)."""
    return m_block * bm < seqlen_q


__all__ = ["varlen_tiles", "varlen_grid_size", "tile_order", "tile_has_rows"]
