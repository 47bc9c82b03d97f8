"""The order of a one-tile-per-CTA grid's blocks (MLIR-free): `section_tile`, the dense causal
grid's and the varlen grid's (attention_sm90_config.section_shift sizes the sections;
common.varlen_schedule tells the varlen side). Written once for Python ints and kernel Values."""
from __future__ import annotations


class IntOps:
    """section_tile's comparison and select on Python ints (the kernels pass Value ones)."""
    lt = staticmethod(lambda a, b: a < b)
    select = staticmethod(lambda c, a, b: a if c else b)


def section_tile(t, m_tiles, hb_total, shift, div_tiles, div_rest, ops=IntOps):
    """(m_block, (head, batch) index) of block t of a causal one-tile-per-CTA grid. The (head, batch)
    indices go in sections of 2**shift (section_shift: their K and V fit in a share of L2); within
    a section the tiles go longest rows first, every index of the section at one query tile before
    the next shorter tile, so the hardware, which hands blocks out in order, starts the long tiles of all
    sections' heads early and ends on short ones (a head-by-head order leaves the last heads' long
    tiles to run after the rest of the grid has finished). The last section holds the rest,
    hb_total mod 2**shift indices. div_tiles(u) = u // m_tiles, div_rest(u) = u // rest. Written once
    for ints (tests) and kernel Values (`ops`: lt, select)."""
    full = (hb_total >> shift) << shift                    # indices in whole sections
    in_full = ops.lt(t, full * m_tiles)
    sec = div_tiles(t >> shift)
    r = t - ((sec * m_tiles) << shift)
    m_full = r >> shift
    hb_full = (sec << shift) + r - (m_full << shift)
    r2 = ops.select(in_full, t - t, t - full * m_tiles)   # 0 when unused: div_rest needs n >= 0
    m_rest = div_rest(r2)
    hb_rest = full + r2 - m_rest * (hb_total - full)
    m_idx = ops.select(in_full, m_full, m_rest)
    return m_tiles - 1 - m_idx, ops.select(in_full, hb_full, hb_rest)


__all__ = ["section_tile", "IntOps"]


L2_BYTES = 50 * 1024 * 1024  # H100 / H200 L2; the host API passes the device's own (attention.plan)
# The share of L2 a causal grid's section may fill with K and V; the whole L2 was slower [D-l2-share]
SECTION_L2_SHARE = 0.6


def section_shift(config, problem, l2_bytes: int = L2_BYTES) -> int:
    """log2 of the (head, batch) indices per section of a causal one-tile-per-CTA grid (section_tile):
    the largest power of two whose K and V (seqlen_k x head_dim and x dim_v, of every KV head a run of
    that many consecutive query heads reads) fit in SECTION_L2_SHARE of `l2_bytes`; at least one head,
    at most all of them."""
    kv_head = int(problem.seqlen_k) * (config.head_dim + config.dim_v) * 2   # K and V of one KV head, 2-byte elements
    budget = l2_bytes * SECTION_L2_SHARE
    group = max(int(problem.heads_per_kv), 1)
    shift = 0
    while (2 << shift) <= problem.batch * problem.heads and (-(-((2 << shift) - 1) // group) + 1) * kv_head <= budget:
        shift += 1
    return shift
