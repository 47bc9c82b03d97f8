"""How a persistent sm_90a attention CTA walks its tiles (attention_fwd_sm90._Tiles; moved from
attention_sm90_config, which re-exports them): written once for Python ints (tests, the host) and kernel
Values."""
from __future__ import annotations


class IntOps:
    """The comparisons and select of causal_pair_slot on Python ints (the kernel passes Value ones)."""
    eq = staticmethod(lambda a, b: a == b)
    lt = staticmethod(lambda a, b: a < b)
    select = staticmethod(lambda c, a, b: a if c else b)


def dealt_tile(base, slot, grid_size, ops=IntOps):
    """A non-causal persistent CTA's tile in the round of grid_size tiles that starts at `base`, and
    its slot in the next round: tile base + slot, then slot + 1 modulo grid_size. CTA c starts at
    slot c, so each round's consecutive tiles (query tile fastest, then head, then batch) go to the
    CTAs rotated by one more than in the round before. A CTA's tiles then go round the query tiles
    of a head, where a stride of grid_size would keep one query tile whenever m_tiles divides
    grid_size (132 CTAs, 6 tiles of 192 rows at seqlen 1024: 22 CTAs would get every short last
    tile), while the CTAs of a round still share a few heads' K and V in L2. A slot past the last
    tile has none (base + slot >= tiles). Written once for ints (tests) and kernel Values."""
    nxt = slot + 1
    return base + slot, ops.select(ops.eq(nxt, grid_size), 0, nxt)


def causal_pair_slot(slot, m_tiles, grid_size, div_pairs, ops=IntOps):
    """A causal persistent CTA's tile at `slot` and its next slot (attention_fwd_sm90._Tiles).
    Slot 2u + e is tile m_tiles-1-k (e = 0) then tile k (e = 1) of pair u = k + pairs * (head +
    heads * batch), pairs = ceil(m_tiles / 2): the two tiles' KV blocks add up to about the same
    count for every k. CTA c starts at slot 2c and goes on to the slots of pair u + grid_size,
    skipping e = 1 where tile k is tile m_tiles-1-k (the middle of an odd count). Returns
    (m_block, (head, batch) index, next slot); `div_pairs(u)` is u // pairs. Written once for both
    ints (tests) and kernel Values (`ops`: eq, lt, select)."""
    pairs = (m_tiles + 1) // 2
    u, second = slot >> 1, slot & 1
    hb = div_pairs(u)
    k = u - hb * pairs
    first = ops.eq(second, 0)
    m_block = ops.select(first, m_tiles - 1 - k, k)
    two = ops.select(first, ops.lt(k * 2 + 1, m_tiles), first)   # this pair has a second tile
    return m_block, hb, ops.select(two, slot + 1, (slot | 1) + (grid_size * 2 - 1))
