"""Tensor memory (sm_100a) arithmetic shared by the sm_100a kernels and their configs (MLIR-free).

One CTA's TMEM is 128 lanes x 512 columns of 32 bits (PTX ISA 9.7.16.1 "Tensor Memory"); a
tcgen05.mma cta_group::1 accumulator of M = 128 rows takes all 128 lanes. tcgen05.alloc takes a
power of two of columns, at least 32, and writes the allocated address into a 16-byte SMEM slot
(TMEM_SLOT_BYTES, kept 16-byte aligned).
"""
from __future__ import annotations

TMEM_LANES = 128
TMEM_COLUMNS = 512
TMEM_MIN_ALLOC_COLUMNS = 32
TMEM_SLOT_BYTES = 16


def tmem_alloc_columns(cols: int) -> int:
    """Columns tcgen05.alloc takes for `cols` used ones: a power of two >= 32."""
    n = TMEM_MIN_ALLOC_COLUMNS
    while n < cols:
        n *= 2
    return n


__all__ = ["TMEM_COLUMNS", "TMEM_LANES", "TMEM_MIN_ALLOC_COLUMNS", "TMEM_SLOT_BYTES", "tmem_alloc_columns"]
