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

Finding the sequence (`locate`): every warp scans the batch 32 sequences at a time, lane i loading
sequence k + i's cu_seqlens_q pair (clamped to batch: a lane past the batch has length 0) and, in the
kernel, its cu_seqlens_k pair and seqused_k, computing the length exactly as the kernel's `sequence`
clips it, its tiles w_i = n_i x heads, an inclusive prefix over the lanes by five xor shuffles (a
lane whose bit d is set adds the lower block's sum); the one lane whose tiles [start, stop) hold the
block's index t then hands its sequence index, start and loads to every lane by five more shuffles
each (a sum over the lanes, the others adding 0). One round of loads, all issued at once, and no
load after the scan: the default grid's block waits for one round (its sequence's cu_seqlens) before
its first TMA, and so does this one, plus the shuffles. The functions take an `ops`
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
# The environment knob that picks the grid of flash_attn_varlen_func (attention/varlen.py varlen_grid)
GRID_ENV = "FA4MLIR_VARLEN_GRID"
# the default grid (common.varlen_schedule), this one, and a persistent kernel striding over this one's
# tiles (min(SMs, compact_grid_size) CTAs: AttnConfig.varlen_compact with persistent) [D-varlen-persistent]
GRIDS = ("sections", "compact", "persistent")
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


def scan_chunk(t, lane, seq, w, fields, carry, ops):
    """One step of `locate` over 32 sequences, lane i holding sequence seq = k + i, its tiles w and
    `fields` (what it loaded of it): carry (base: the tiles before the chunk; then of the one sequence
    whose tiles [start, stop) hold t, summed over the lanes (0 while none has): its index, start, and
    fields) -> the same after the chunk. Every lane ends with the same carry."""
    base, picked = carry[0], carry[1:]
    incl, total = w, w
    for off in SCAN_OFFSETS:      # inclusive prefix: a lane whose bit `off` is set adds the lower block
        other = ops.shuffle_xor(total, off)
        incl = incl + ops.select(ops.nonzero(lane & off), other, ops.const(0))
        total = total + other
    stop = base + incl            # tile index one past lane i's sequence
    start = stop - w
    holds = ops.le(start, t) & ops.lt(t, stop)    # one lane of the batch at most (w 0: none)
    mine = [ops.select(holds, v, ops.const(0)) for v in (seq, start, *fields)]
    for off in SCAN_OFFSETS:      # the holding lane's values in every lane
        mine = [v + ops.shuffle_xor(v, off) for v in mine]
    return (base + total, *(a + v for a, v in zip(picked, mine)))


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
        found, b, first, (lo, hi) = locate(t, lane, batch, lambda i, i1, iu: (cu[i], cu[i1]), 2, total_q, bm, m_tiles,
                                           heads, ops)
        if not found:
            out.append(None)
            continue
        assert (lo, hi) == (cu[b], cu[b + 1])
        n = int(sequence_tiles(lo, hi, total_q, bm, m_tiles, ops))
        m_block, head = tile_in_sequence(t - first, n, heads, p["chunk_heads"], p["chunk_full"],
                                         lambda u: divide(int(u), *g_div), lambda u: divide(int(u), *rest_div), ops)
        out.append((int(m_block), int(head), b))
    return out


def locate(t, lane, batch: int, load_fields, n_fields: int, total_q, bm: int, m_tiles, heads, ops):
    """(found, b, first, fields): whether tile index t is a working tile, its sequence, the sequence's
    first tile index and its fields (load_fields'), by the warp scan of scan_chunk over the batch 32
    sequences at a time (a Python loop here; the kernel's is an scf.for over the same scan_step).
    found is False (b, first and the fields 0) past every working tile."""
    carry = scan_start(n_fields, ops)
    for k in range(0, batch, WARP):
        carry = scan_step(t, lane, k, batch, load_fields, total_q, bm, m_tiles, heads, carry, ops)
    _, b, first, *fields = (int(v[0]) for v in carry)
    return first + int(sequence_tiles(fields[0], fields[1], total_q, bm, m_tiles, ops)) * heads > t, b, first, fields


def scan_start(n_fields: int, ops) -> tuple:
    """The scan's carry before the first chunk: base, sequence, start and n_fields fields, all 0."""
    return tuple(ops.const(0) for _ in range(3 + n_fields))


def scan_step(t, lane, k, batch, load_fields, total_q, bm: int, m_tiles, heads, carry, ops):
    """scan_chunk over sequences k .. k + 31. load_fields(i, i1, iu) gives lane i's fields, the first two
    cu_seqlens_q[i] and cu_seqlens_q[i1]: i = min(k + lane, batch), i1 = min(k + lane + 1, batch), iu =
    min(k + lane, batch - 1) (a [batch] tensor's index); a lane past the batch reads a length of 0."""
    i = k + lane
    fields = load_fields(ops.smin(i, batch), ops.smin(i + 1, batch), ops.smin(i, batch - 1))
    w = sequence_tiles(fields[0], fields[1], total_q, bm, m_tiles, ops) * heads
    return scan_chunk(t, lane, i, w, fields, carry, ops)


__all__ = ["compact_grid_size", "chunk_heads", "compact_params", "sequence_tiles", "length_tiles", "scan_chunk", "scan_step",
           "tile_in_sequence", "locate", "scan_start", "tile_order", "m_tiles_of", "numpy_lanes", "WARP", "GRID_ENV", "GRIDS"]
