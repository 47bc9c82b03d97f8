"""FlashMLA's FP8 latent cache (its README's "V32" layout, tests/quant.py quantize_k_cache) on sm_90a:
the 656-byte token row, its TMA staging and its dequantization into the 16-bit 128B-swizzled tile
the absorbed-MLA wgmmas read (common.mla_sm90). Shared by the MLA decode (attention_mla_decode_sm90,
note "FP8 latent") and, later, sparse decode.

A token row of the cache (float8_e4m3fn [num_pages, page_size, 1, 656]) is

    bytes [0, 512)    the latent ("nope") columns 0..511 in e4m3
    bytes [512, 528)  four float32 scales, scale g for columns 128 g .. 128 g + 127
    bytes [528, 656)  the rope columns 512..575 in bf16

and dequantizes to bf16(float(e4m3) x scale) (float32 product, rounded to nearest even: FlashMLA's
dequantize_k_cache), the rope copied as it is. fa4.cvt_e4m3x2 gives f16 (exact), f16 -> f32 is
exact, so the kernel's bits are the reference's (fa4mlir.testing_mla.dequantize_fp8_cache).

Staging: the row is 164 4-byte words, so one TMA box of (164, 1, box_rows, 1) int32 elements
(656 bytes, a multiple of 16, unswizzled) lands box_rows whole rows contiguously: row r at
r x 656 of the stage. 8 rows are 5248 = 41 x 128 bytes, so every box starts 128-byte aligned.

Note "FP8 lanes": 656 = 41 x 16, so a 16-byte piece p of row r sits at 16-byte position
(41 r + p) % 8 = (r + p) % 8 of a 128-byte bank line. A quarter-warp (8 lanes: one phase of a
16-byte access, common/e4m3_tile.py note "Bank phases") takes 8 consecutive rows and one piece:
its loads hit 8 different positions (r + p), its 16-byte stores into the swizzled tile position
unit ^ (r % 8) (8 different), its scale loads the 4-byte words 164 r + 128 + g (banks 4 r + g mod
32: 8 different). No conflicts in any of the three.

Work split (two consumer warpgroups, each owning 256 of V's columns, mla_sm90): warpgroup w
converts the latent columns 256 w .. 256 w + 255 (its own V columns: pieces 16 w .. 16 w + 15) of
all BN rows, and copies the rope of rows BN / 2 w ..: thread t of it takes piece 16 w + t / 8 of
rows t % 8 + 8 i (i < BN / 8), and rope unit (t / 8) % 8 of rows BN / 2 w + t % 8 + 8 (t / 64) + 16 i.
"""
from __future__ import annotations

from ...dsl import Value, const, select, vec
from ...dialect import builders as fa4
from .e4m3_tile import SWIZZLE, f16_offset

NOPE = 512                      # latent columns stored as e4m3
ROPE = 64                       # rope columns stored as bf16
SCALE_GROUP = 128               # latent columns per float32 scale
NUM_SCALES = NOPE // SCALE_GROUP
SCALES_AT = NOPE                # byte offset of the scales in a row
ROPE_AT = SCALES_AT + 4 * NUM_SCALES
ROW_BYTES = ROPE_AT + 2 * ROPE  # 656
WORD = 4                        # the TMA element: rows are whole int32 words
ROW_WORDS = ROW_BYTES // WORD   # 164: one TMA box row (box dims are at most 256)
PIECE = 16                      # bytes a thread loads at once
QUARTER = 8                     # lanes of one shared-memory phase (note "FP8 lanes")
THREADS = 128                   # a consumer warpgroup
WARPGROUPS = 2
WG_PIECES = NOPE // PIECE // WARPGROUPS        # 16 latent pieces per row per warpgroup
ROPE_UNITS = 2 * ROPE // PIECE                 # 8 16-byte rope units per row
ROPE_CHUNK = NOPE // 64                        # the swizzled tile's chunk of the rope columns


def stage_bytes(bn: int) -> int:
    """One staged tile of bn token rows."""
    return bn * ROW_BYTES


def latent_slot(t, w, i: int):
    """(row, piece) of the i-th latent piece thread t of warpgroup w converts (note "FP8 lanes")."""
    return t % QUARTER + QUARTER * i, w * WG_PIECES + t // QUARTER


def rope_slot(t, w, i: int, bn: int):
    """(row, unit) of the i-th rope unit thread t of warpgroup w copies."""
    per_pass = THREADS // ROPE_UNITS          # 16 rows a pass
    return bn // WARPGROUPS * w + t % QUARTER + QUARTER * ((t // QUARTER) // ROPE_UNITS) + per_pass * i, \
        (t // QUARTER) % ROPE_UNITS


def latent_passes(bn: int) -> int:
    return bn // QUARTER


def rope_passes(bn: int) -> int:
    return bn // WARPGROUPS * ROPE_UNITS // THREADS


def stage_offset(row, byte):
    """Byte offset of `byte` of token row `row` in a stage."""
    return row * ROW_BYTES + byte


def tile_offset(row, col: int | Value, bn: int):
    """Byte offset of the 16-bit column col (a multiple of 8) of row row in the swizzled tile."""
    return f16_offset(row, col // 16, (col // 8) % 2, bn)


def check_bn(bn: int) -> None:
    if bn % (QUARTER * 2) or rope_passes(bn) * THREADS != bn // WARPGROUPS * ROPE_UNITS:
        raise ValueError(f"an FP8 latent tile of {bn} rows: expected a multiple of {2 * THREADS // ROPE_UNITS}")


def _dequant(raw: Value, scale: Value) -> list:
    """16 e4m3 bytes (4 x i32) times scale as two 16-byte units of 8 bf16 each."""
    words = []
    for w in range(4):
        for half in (raw[w].to("i16"), (raw[w] >> 16).to("i16")):
            pair = Value(fa4.cvt_e4m3x2(half))        # two f16, low and high half of an i32
            lo, hi = (x.to("i16").bitcast("f16").to("f32") * scale for x in (pair, pair >> 16))
            words.append(vec(lo, hi).to(("bf16", 2)).bitcast("i32"))
    return [vec(*words[0:4]), vec(*words[4:8])]


def dequant_piece(raw: Value, scale: Value) -> list:
    """One 16-byte latent piece (4 x i32 of e4m3) times its row's scale as two 16-byte bf16 units (the
    sparse decode's converter warpgroup: attention_mla_sparse_sm90, note "FP8 converter")."""
    return _dequant(raw, scale)


def pass_steps(kind: str) -> tuple[int, int]:
    """(stage, tile) byte distance between one pass's slot and the next for a thread: rows advance
    by a multiple of 8, so the swizzle (row % 8) stays and each pass is an immediate offset from
    pass 0's addresses (a few base registers per thread, not one per slot)."""
    rows = QUARTER if kind == "latent" else THREADS // ROPE_UNITS
    return rows * ROW_BYTES, rows * SWIZZLE


def emit_dequant(kb, t: Value, w: Value, stage, tile, bn: int, valid: Value | None = None) -> None:
    """Warpgroup w's share (note "FP8 lanes") of one staged tile of bn rows at `stage` into the
    swizzled bf16 tile at `tile`: its latent columns dequantized, its rope rows copied; rows at or
    past `valid` (None: all real) are written as zeros, whatever the stage holds there. Each load is
    issued a pass ahead of its use. The caller fences the stores to the async proxy and syncs."""
    check_bn(bn)
    zero = const(0, ("i32", 4))
    row0, piece = latent_slot(t, w, 0)
    src = kb.gep(stage, stage_offset(row0, piece * PIECE), "i8")
    scale_src = kb.gep(stage, stage_offset(row0, SCALES_AT + WORD * ((piece * PIECE) // SCALE_GROUP)), "i8")
    dst = [kb.gep(tile, tile_offset(row0, piece * PIECE + 8 * h, bn), "i8") for h in (0, 1)]
    step, tile_step = pass_steps("latent")

    def load(i):
        return (kb.load(kb.gep(src, i * step, "i8"), ("i32", 4), align=16),
                kb.load(kb.gep(scale_src, i * step, "i8"), "f32", align=4))

    passes = latent_passes(bn)
    pending = [load(0)]
    for i in range(passes):
        if i + 1 < passes:
            pending.append(load(i + 1))
        raw, scale = pending[i]
        for h, unit in enumerate(_dequant(raw, scale)):
            if valid is not None:
                unit = select((row0 + QUARTER * i).slt(valid), unit, zero)
            kb.store(unit, kb.gep(dst[h], i * tile_step, "i8"), align=16)
    row0, unit_idx = rope_slot(t, w, 0, bn)
    src = kb.gep(stage, stage_offset(row0, ROPE_AT + unit_idx * PIECE), "i8")
    dst = kb.gep(tile, tile_offset(row0, NOPE + 8 * unit_idx, bn), "i8")
    step, tile_step = pass_steps("rope")
    for i in range(rope_passes(bn)):
        val = kb.load(kb.gep(src, i * step, "i8"), ("i32", 4), align=16)
        if valid is not None:
            val = select((row0 + step // ROW_BYTES * i).slt(valid), val, zero)
        kb.store(val, kb.gep(dst, i * tile_step, "i8"), align=16)


__all__ = ["NOPE", "ROPE", "SCALE_GROUP", "NUM_SCALES", "SCALES_AT", "ROPE_AT", "ROW_BYTES", "ROW_WORDS", "WORD",
           "stage_bytes", "latent_slot", "rope_slot", "latent_passes", "rope_passes", "stage_offset", "tile_offset",
           "check_bn", "pass_steps", "emit_dequant", "dequant_piece"]
