"""The compact varlen grid: one block per working tile, no empty blocks (MLIR-free, deviceless; the
kernel runs the same functions on its Values). AttnConfig.varlen_compact selects it; the default
varlen grid is common.varlen_schedule's.

The default grid has ceil(max_seqlen_q / bm) x heads x batch blocks, and the blocks whose tile starts
past their sequence's end exit at once: with the anchors' prefill_varlen batch (16 causal
sequences of 256..8192 tokens, bm 128) about half of them. The host cannot size a grid to the
working tiles, since the lengths live on the device (cu_seqlens; reading them would be a host sync),
but it can bound them: sequence i of len_i tokens has ceil(len_i / bm) <= (len_i + bm - 1) / bm
tiles, and the lengths add up to at most total_q = q.shape[0], so

    working tiles <= heads * min(floor((total_q + batch * (bm - 1)) / bm), m_tiles * batch)

(`compact_grid_size`), at most batch x heads blocks more than the working tiles. Each block finds its
tile from its index on the device (`locate`, `tile_in_sequence`); a block past the last working tile
exits as an empty one does today.

Order: today's minus the empty blocks, sequence by sequence. Sequence b's n_b x heads tiles (n_b =
min(ceil(len_b / bm), m_tiles)) are adjacent; its heads go in chunks of g = min(2**section_shift,
heads) (section_shift as the default grid's: the K and V of a chunk's KV heads fit in a share of L2),
the last chunk holding the rest, heads mod g; within a chunk, the tiles go from m_block n_b - 1 down
to 0, every head of the chunk at one tile before the next shorter one (`tile_in_sequence`). Where g
divides heads (the anchors': g 16 of 32 heads), a section of the default grid is exactly one chunk,
so this is the default order with the empty blocks left out; where the default's sections span
sequences (short sequences, 2**section_shift > heads) a chunk here is one sequence's heads.

Finding the sequence (`locate`): every warp scans the batch 32 sequences at a time, lane i reading
cu_seqlens_q[k + i] and [k + i + 1] (clamped to batch: a lane past the batch has length 0), computing
the lengths exactly as the kernel's `sequence` clips them, its tiles w_i = n_i x heads, an inclusive
prefix over the lanes by five xor shuffles (a lane whose bit d is set adds the lower block's sum),
then, by five more each, the number of sequences ending at or before the block's index t (= b, the
block's sequence) and the largest such end (= the first tile of sequence b). Two loads and 15
shuffles per 32 sequences, instead of a chain of batch dependent loads. The functions take an `ops`
(shuffle_xor, select, comparisons, min / max) so that the host runs them over numpy lanes
(`numpy_lanes`, what `tile_order` and the tests run) and the kernel over Values.

Bad cu_seqlens (decreasing, past total_q) can make the clipped lengths add up past the bound: the
tiles past the grid are then not run (results unspecified, as today's for such input); no block reads
or writes out of bounds (lengths are clipped as in the default kernel, and the sequence index of a
block past the working tiles is clamped to batch - 1).
"""
from __future__ import annotations

from .fastdiv import divide, divisor

WARP = 32
SCAN_OFFSETS = (1, 2, 4, 8, 16)


def m_tiles_of(max_seqlen_q: int, bm: int) -> int:
    """Query tiles per sequence any grid covers: ceil(max_seqlen_q / bm)."""
    return (int(max_seqlen_q) + bm - 1) // bm


def compact_grid_size(total_q: int, max_seqlen_q: int, bm: int, heads: int, batch: int) -> int:
    """Blocks of the compact 1-D grid: heads x the host's bound on the working query tiles (module
    docstring), never more than the default grid's m_tiles x heads x batch."""
    tiles = min((int(total_q) + int(batch) * (bm - 1)) // bm, m_tiles_of(max_seqlen_q, bm) * int(batch))
    return tiles * int(heads)


def chunk_heads(heads: int, shift: int) -> int:
    """Heads per chunk, g = min(2**shift, heads) (shift: the launch's section_shift)."""
    return min(1 << int(shift), int(heads))


def numpy_lanes():
    """The ops of `locate` on numpy int64 vectors of the 32 lanes (the host's warp); numpy is
    imported here, not by the module (attention_sm90_config imports it on the runtime's side)."""
    import numpy as np
    lanes = np.arange(WARP, dtype=np.int64)

    class NumpyLanes:
        shuffle_xor = staticmethod(lambda x, off: np.broadcast_to(x, (WARP,))[lanes ^ off])
        select = staticmethod(np.where)
        le = staticmethod(lambda a, b: a <= b)
        lt = staticmethod(lambda a, b: a < b)
        nonzero = staticmethod(lambda a: a != 0)
        smin = staticmethod(np.minimum)
        smax = staticmethod(np.maximum)
        const = staticmethod(np.int64)
    return NumpyLanes, lanes


def sequence_tiles(lo, hi, total_q, bm: int, m_tiles, ops):
    """Query tiles of a sequence whose cu_seqlens_q pair is (lo, hi): length_tiles of its length
    clipped as the kernel's `sequence` clips it, max(min(hi, total_q) - max(lo, 0), 0)."""
    length = ops.smax(ops.smin(hi, total_q) - ops.smax(lo, ops.const(0)), ops.const(0))
    return length_tiles(length, bm, m_tiles, ops)


def length_tiles(length, bm: int, m_tiles, ops):
    """The grid's query tiles of a sequence of `length` (>= 0) rows: min(ceil(length / bm), m_tiles),
    the default grid's tiles that hold rows (it covers m_block < m_tiles only)."""
    return ops.smin((length + (bm - 1)) // bm, m_tiles)


def scan_chunk(t, lane, w, carry, ops):
    """One step of `locate` over 32 sequences, lane i holding w_i, the tiles of sequence k + i:
    carry (base: tiles before the chunk, count: sequences ending at or before t, end: the largest such
    end) -> the same after the chunk."""
    base, count, end = carry
    incl, total = w, w
    for off in SCAN_OFFSETS:      # inclusive prefix: a lane whose bit `off` is set adds the lower block
        other = ops.shuffle_xor(total, off)
        incl = incl + ops.select(ops.nonzero(lane & off), other, ops.const(0))
        total = total + other
    stop = base + incl            # tile index one past lane i's sequence
    done = ops.le(stop, t)
    n_done = ops.select(done, ops.const(1), ops.const(0))
    last = ops.select(done, stop, ops.const(0))
    for off in SCAN_OFFSETS:      # the sequences before t, and where the last of them ends
        n_done = n_done + ops.shuffle_xor(n_done, off)
        last = ops.smax(last, ops.shuffle_xor(last, off))
    return base + total, count + n_done, ops.smax(end, last)


def tile_in_sequence(r, n, heads, g, full_chunks, div_g, div_rest, ops):
    """(m_block, head) of tile r (0 <= r < n x heads) of a sequence of n query tiles: heads in chunks
    of g (the last `heads - full_chunks x g` of them a chunk of the rest), each chunk's tiles from
    m_block n - 1 down, every head of the chunk at one tile before the next. div_g(u) = u // g,
    div_rest(u) = u // (heads mod g) (any divisor when there is no rest); the chunk's divide is by n x
    g, a runtime value (once per block)."""
    span = ops.smax(n * g, ops.const(1))      # 1 for an empty block (n 0): its result is not used
    chunk = r // span
    r2 = r - chunk * span
    full = ops.lt(chunk, full_chunks)
    idx = ops.select(full, div_g(r2), div_rest(r2))
    width = ops.select(full, g, heads - full_chunks * g)
    return n - 1 - idx, chunk * g + r2 - idx * width


def compact_params(heads: int, shift: int) -> dict:
    """The compact kernel's launch arguments (attention_sm90_config.COMPACT_PARAMS): chunk_heads g,
    chunk_full (whole chunks), and the divisors of g and of the rest, as fastdiv pairs."""
    g = chunk_heads(heads, shift)
    out = {"chunk_heads": g, "chunk_full": heads // g}
    for name, d in (("chunk", g), ("chunk_rest", max(heads % g, 1))):
        out[f"{name}_mul"], out[f"{name}_shr"] = divisor(d)
    return out


def tile_order(cu_seqlens_q, total_q: int, max_seqlen_q: int, bm: int, heads: int,
               shift: int) -> list[tuple[int, int, int] | None]:
    """The compact grid's (m_block, head, sequence) by block index, None for a block past the
    working tiles, as the kernel computes them (the warp scan over numpy lanes, fastdiv included):
    what the tests check and what a host-side tool can print. cu_seqlens_q: batch + 1 ints."""
    import numpy as np
    cu = np.asarray(cu_seqlens_q, dtype=np.int64)
    batch = len(cu) - 1
    ops, lane = numpy_lanes()
    m_tiles = m_tiles_of(max_seqlen_q, bm)
    p = compact_params(heads, shift)
    g_div, rest_div = (p["chunk_mul"], p["chunk_shr"]), (p["chunk_rest_mul"], p["chunk_rest_shr"])
    out = []
    for t in range(compact_grid_size(total_q, max_seqlen_q, bm, heads, batch)):
        b, first = locate(t, lane, batch, lambda i: cu[i], total_q, bm, m_tiles, heads, ops)
        if b >= batch:
            out.append(None)
            continue
        n = int(sequence_tiles(cu[b], cu[b + 1], total_q, bm, m_tiles, ops))
        m_block, head = tile_in_sequence(t - first, n, heads, p["chunk_heads"], p["chunk_full"],
                                         lambda u: divide(int(u), *g_div), lambda u: divide(int(u), *rest_div), ops)
        out.append((int(m_block), int(head), b))
    return out


def locate(t, lane, batch: int, load_cu, total_q, bm: int, m_tiles, heads, ops):
    """(b, first): the sequence of tile index t and its first tile index, by the warp scan of
    scan_chunk over the batch 32 sequences at a time (a Python loop here; the kernel's is an scf.for
    with the same body). b = batch when t is past every working tile. load_cu(i): cu_seqlens_q[i]
    per lane, i clamped to batch."""
    carry = (ops.const(0), ops.const(0), ops.const(0))
    for k in range(0, batch, WARP):
        carry = scan_step(t, lane, k, batch, load_cu, total_q, bm, m_tiles, heads, carry, ops)
    return int(max(carry[1])), int(max(carry[2]))


def scan_step(t, lane, k, batch, load_cu, total_q, bm: int, m_tiles, heads, carry, ops):
    """scan_chunk over sequences k .. k + 31: lane i loads cu_seqlens_q[min(k + i, batch)] and
    [min(k + i + 1, batch)] (a lane past the batch reads a length of 0)."""
    i = k + lane
    lo, hi = load_cu(ops.smin(i, batch)), load_cu(ops.smin(i + 1, batch))
    return scan_chunk(t, lane, sequence_tiles(lo, hi, total_q, bm, m_tiles, ops) * heads, carry, ops)


__all__ = ["compact_grid_size", "chunk_heads", "compact_params", "sequence_tiles", "length_tiles", "scan_chunk", "scan_step",
           "tile_in_sequence", "locate", "tile_order", "m_tiles_of", "numpy_lanes", "WARP"]
