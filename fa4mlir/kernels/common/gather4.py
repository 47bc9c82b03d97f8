"""TMA gather4 of a tile of rows (sm_100a): the load step of a sparse (top-k) attention kernel.

A tile of `len(rows)` rows of a 2-D tensor, named by row indices held in registers, lands in shared
memory as the tensor cores read a K-major operand under the 128-byte swizzle: column chunk c (one
swizzle span, 64 16-bit columns) of all the tile's rows at `dst + c * rows * 128`, row r of it at
`+ 128 r`, swizzled on the address bits; the layout a TMA box of [64 columns, rows rows] gives, and
the one fa4.smem_desc(swizzle=128, lbo=16, sbo=1024) describes per 8 rows (the sm_100a kernels'
K tiles, and the sm_90a sparse kernel's gathered tiles).

Each fa4.tma_gather4 copies four rows of one chunk (PTX ISA 9.7.9.25 cp.async.bulk.tensor
.tile::gather4, 5.5.3.4: a 2-D tensor map whose box is [64 columns, 1 row]; the column coordinate,
then the four row coordinates), so a tile takes rows / 4 x chunks copies, all completing on one
mbarrier. A row index outside the tensor (-1 padding, >= the tensor's rows) lands as zeros: tile-mode
out-of-bounds fill, which 5.5.3.4 keeps for gather4; what an invalid row must not contribute (its
score) is the kernel's to mask.

Note "Issue": the copies are issued by the thread calling this, in Python-unrolled order (chunk
outer, four-row group inner): fa4-verify-pipelines counts each op's bytes once, so a fill's copies
must be distinct ops of one thread, and the commit's tx_bytes is what `gather4_tile` returns.
FlashMLA spreads the issue of a 128-row tile over many threads; counting per-thread copies would need
the verifier to weigh a copy by the threads issuing it.
"""
from __future__ import annotations

from ...dialect import builders as fa4
from ...dsl import Value, const
from ...dsl.core import ELEM_BYTES

GATHER_ROWS = 4            # rows per .tile::gather4 copy (PTX ISA 5.5.3.4)
SPAN = 128                 # bytes per swizzled row of a chunk (128B swizzle)


def chunk_columns(dtype: str) -> int:
    """Columns of one swizzle chunk: one 128-byte row of `dtype` elements."""
    return SPAN // ELEM_BYTES[dtype]


def tile_bytes(num_rows: int, cols: int, dtype: str) -> int:
    """Bytes of a gathered tile of `num_rows` rows x `cols` columns (the fill's tx_bytes)."""
    return num_rows * cols * ELEM_BYTES[dtype]


def check_tile(num_rows: int, cols: int, dtype: str) -> None:
    """ValueError unless a tile of num_rows x cols can be gathered four rows and one chunk at a time."""
    if num_rows <= 0 or num_rows % GATHER_ROWS:
        raise ValueError(f"a gathered tile of {num_rows} rows: gather4 copies rows four at a time; use a "
                         f"positive multiple of {GATHER_ROWS}")
    if cols <= 0 or cols % chunk_columns(dtype):
        raise ValueError(f"a gathered tile of {cols} {dtype} columns: each copy is one 128-byte swizzle chunk "
                         f"({chunk_columns(dtype)} columns); use a multiple of it")


def gather4_tile(kb, desc: Value, dst: Value, stage: Value, rows: list, *, pipe: str, cols: int, dtype: str,
                 col0: int = 0, cta_group: int = 1) -> int:
    """Through KernelBuilder `kb`, issue the copies of rows `rows` (i32 Values, a multiple of 4), columns
    [col0, col0 + cols) (`col0` an int or an i32 Value), of the tensor `desc` describes (box [chunk_columns(dtype), 1]) into the tile at `dst` (an i8 SMEM pointer,
    1024-byte aligned), completing on `full[stage]` of `pipe` (`cta_group` 2: of the CTA pair's leader).
    Returns the bytes they deliver."""
    check_tile(len(rows), cols, dtype)
    per_chunk = chunk_columns(dtype)
    chunk_bytes = len(rows) * SPAN
    for c in range(cols // per_chunk):
        for g in range(0, len(rows), GATHER_ROWS):
            at = kb.gep(dst, c * chunk_bytes + g * SPAN, "i8")
            col = col0 + c * per_chunk
            fa4.tma_gather4(desc, at, stage, col if isinstance(col, Value) else const(col), *rows[g:g + GATHER_ROWS], pipe=pipe,
                            box=[per_chunk, 1], elem_bytes=ELEM_BYTES[dtype],
                            **({"cta_group": cta_group} if cta_group != 1 else {}))
    return tile_bytes(len(rows), cols, dtype)


__all__ = ["GATHER_ROWS", "SPAN", "chunk_columns", "tile_bytes", "check_tile", "gather4_tile"]
