"""The e4m3 -> f16 conversion of K/V tiles in shared memory (sm_90a decode, attention_decode_sm90
note "FP8"; with a scale per row and bf16 output for the sm_100a decode route, attention_sm100_kv):
which 16-byte piece each thread of the consumer warpgroup converts, where it reads it
and where its f16 lands. The address math is plain integer arithmetic that runs on Python ints
(tests/test_kvcache_fp8_banks.py counts the shared-memory banks of every access) and on DSL Values
(`emit_convert`, the kernel's conversion), so the test checks the kernel's own formulas.

Layouts: an e4m3 tile is bn rows of head_dim bytes, unswizzled (row r at r * head_dim: TMA boxes or
the cp.async gather); its f16 copy is the 128B-swizzled layout wgmma reads (64-column chunk c of row
r at c * bn * 128 + r * 128, 16-byte unit u at (u ^ r % 8) * 16). A piece is 16 e4m3 bytes of one
row = 16 f16 = two 16-byte units (halves) of one swizzled row.

Note "Bank phases": a warp's 16-byte shared-memory access is served a quarter-warp at a time (8
lanes x 16 bytes = 128 bytes, the 32 four-byte banks once over); it is conflict-free when the 8
lanes of each quarter touch 8 different 16-byte positions mod 128 bytes. The lanes a = 0..7 of a
quarter take the rows 8 rb + a (one swizzle period) and pieces whose low bits are tau(a) ^ s for
the quarter's shift s, tau(a) = 4 (a % 2) + sigma(a / 2), sigma(x) = 2 (x1 ^ x0) + x1 (x = 2 x1 +
x0: multiplication by a generator of GF(4), so sigma(x) ^ x is a bijection too):
  * e4m3 loads, position (row * head_dim / 16 + piece) % 8: head_dim >= 128 rows are whole multiples
    of 128 bytes and the position is tau(a) ^ s % 8, a bijection; head_dim 64 (two rows per 128
    bytes) gives (a % 2, sigma(a / 2) ^ s), a bijection;
  * f16 stores of half h, position (2 (piece % 4) + h) ^ (row % 8) = (sigma(a / 2) ^ s ^ a / 2,
    h ^ a % 2) in bits (2-1, 0): a bijection because sigma(x) ^ x is.
(8 consecutive pieces of one row per quarter, the plain map, puts two stores on each position at
head_dim >= 128: a 2-way conflict.)
"""
from __future__ import annotations

from ...dialect import builders as fa4
from ...dsl import Value, const, select, vec

THREADS = 128           # the consumer warpgroup
QUARTER = 8             # lanes per shared-memory phase of a 16-byte access (note "Bank phases")
PIECE_BYTES = 16        # e4m3 bytes a thread loads at once: 16 f16 = two 16-byte units
SWIZZLE = 128           # bytes per swizzled f16 row: 64 columns
UNITS = SWIZZLE // 16   # 16-byte units per swizzled row
# Loads in flight ahead of the piece being converted. ptxas keeps a shared load behind the shared
# stores before it (it cannot tell the e4m3 stage from the f16 tiles), so the emission order is the
# schedule: 2 is the most that fits the decode kernel's 168 registers with block scales (3 or 4
# ahead spill 8 bytes at contiguous block scales, every load first 20). Not timed against 1.
LOADS_AHEAD = 2


def pieces_per_row(head_dim: int) -> int:
    return head_dim // PIECE_BYTES


def slots_per_thread(bn: int, head_dim: int) -> int:
    """Pieces each of the THREADS threads converts per tile."""
    total = bn * pieces_per_row(head_dim)
    if total % THREADS or bn % QUARTER:
        raise ValueError(f"a {bn} x {head_dim} e4m3 tile is {total} pieces: not a multiple of {THREADS}, or bn not of {QUARTER}")
    return total // THREADS


def _tau(a):
    """Note "Bank phases": 4 (a % 2) + sigma(a / 2) for a lane a in [0, 8) of a quarter."""
    x = a >> 1
    x1 = x >> 1
    return (a & 1) * 4 + ((x1 ^ (x & 1)) * 2 + x1)


def slot(t, i: int, head_dim: int) -> tuple:
    """(row, piece) of the i-th piece thread t converts. A pass of the warpgroup converts
    THREADS / pieces-per-row rows; in it, quarter k = t / 8 takes lane a = t % 8's row 8 rb + a
    and piece W pb + (tau(a) ^ s) % W (W = min(pieces per row, 8)) with shift s, piece block pb and
    row block rb from k, shift fastest. Every (row, piece) of the tile is one slot of one thread;
    pass i adds a constant to the row (so the kernel's offsets of the passes differ by immediates)."""
    per_row = pieces_per_row(head_dim)
    w = min(per_row, QUARTER)
    blocks = per_row // w
    if (THREADS // QUARTER) % per_row:
        raise ValueError(f"head_dim {head_dim}: a pass of {THREADS} threads must cover whole rows")
    a, k = t % QUARTER, t // QUARTER
    s, rest = k % w, k // w
    row = (rest // blocks) * QUARTER + a + (THREADS // per_row) * i
    return row, (rest % blocks) * w + ((_tau(a) ^ s) % w)


def e4m3_offset(row, piece, head_dim: int):
    """Byte offset of a piece in the unswizzled e4m3 tile."""
    return row * head_dim + piece * PIECE_BYTES


def f16_offset(row, piece, half: int, bn: int):
    """Byte offset of half `half` (columns 16 piece + 8 half ..) of a piece in the swizzled f16 tile."""
    chunk = piece // (SWIZZLE // (2 * PIECE_BYTES))
    unit = (piece % (SWIZZLE // (2 * PIECE_BYTES))) * 2 + half
    return chunk * (bn * SWIZZLE) + row * SWIZZLE + (unit ^ (row % UNITS)) * 16


def _scaled(word: Value, scale: Value, dtype: str) -> Value:
    """Two f16 (an i32, low half first) times the f32 `scale`, rounded to `dtype` (note "Scaled
    conversion")."""
    lo = (word & 0xFFFF).to("i16").bitcast("f16").to("f32")
    hi = (word >> 16).to("i16").bitcast("f16").to("f32")
    return vec(lo * scale, hi * scale).to((dtype, 2)).bitcast("i32")


def emit_convert(kb, t: Value, tiles, bn: int, head_dim: int, dtype: str = "f16", ahead: int = LOADS_AHEAD) -> None:
    """Convert e4m3 tiles to f16, thread t's slots of every tile: `tiles` is [(src, dst, valid)] or
    [(src, dst, valid, row_scale)], src the e4m3 tile, dst its 16-bit copy, valid None or a Value:
    rows at or past it are written as zeros; row_scale a function of the tile row giving the f32
    scale its values are multiplied by before they are rounded to `dtype` (note "Scaled
    conversion"; without it the conversion is exact and `dtype` must be f16). Slot by slot, the
    tiles of a slot one after the other, each piece's load issued `ahead` (LOADS_AHEAD) pieces ahead
    of its fa4.cvt_e4m3x2s and stores. The caller fences the stores to the async proxy and syncs the
    warpgroup.

    Note "Scaled conversion" (the sm_100a decode's FP8 cache): value = float32(e4m3) x scale in
    float32, then rounded to nearest even in bf16 or f16: what a reference computes as
    (decode(k).float() * scale).to(dtype). The tile then holds the dequantised cache in Q's dtype,
    so tcgen05.mma kind::f16 takes Q (bf16 or f16) unconverted."""
    if dtype != "f16" and any(len(tile) < 4 or tile[3] is None for tile in tiles):
        raise ValueError(f"an unscaled e4m3 conversion is exact to f16 only; {dtype} needs a row_scale per tile")
    slots = [slot(t, i, head_dim) for i in range(slots_per_thread(bn, head_dim))]
    items = [(row, piece, tile) for row, piece in slots for tile in tiles]
    loads = []

    def issue():
        if len(loads) < len(items):
            row, piece, (src, *_) = items[len(loads)]
            loads.append(kb.load(kb.gep(src, e4m3_offset(row, piece, head_dim), "i8"), ("i32", 4), align=16))

    zero = const(0, ("i32", 4))
    for _ in range(ahead):
        issue()
    for n, (row, piece, tile) in enumerate(items):
        _, dst, valid = tile[:3]
        row_scale = tile[3] if len(tile) > 3 else None
        issue()
        raw = loads[n]
        halves = []
        for w in range(4):
            halves.append(Value(fa4.cvt_e4m3x2(raw[w].to("i16"))))
            halves.append(Value(fa4.cvt_e4m3x2((raw[w] >> 16).to("i16"))))
        if row_scale is not None:
            scale = row_scale(row)
            halves = [_scaled(word, scale, dtype) for word in halves]
        for h in (0, 1):
            val = vec(*halves[4 * h:4 * h + 4])
            if valid is not None:
                val = select(row.slt(valid), val, zero)
            kb.store(val, kb.gep(dst, f16_offset(row, piece, h, bn), "i8"), align=16)
