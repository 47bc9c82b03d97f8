"""How a tile of 16-bit head-dim columns lies in SMEM (moved from attention_sm90_config, which re-exports
it)."""
from __future__ import annotations

from typing import NamedTuple


class TileLayout(NamedTuple):
    """How a tile of `cols` 16-bit head-dim columns lies in SMEM: chunks of `chunk` columns, each a
    (rows x `swizzle` bytes) block under the `swizzle`-byte swizzle, one TMA box per chunk, chunk c
    of a rows-row tile at c * rows * swizzle. The 128-byte swizzle (64-column chunks) where cols is a
    multiple of 64; else the 64-byte swizzle (32-column chunks: D96 in three), what CUTLASS's smem
    selector picks for FlashAttention-3 at a head dim that is a multiple of 32 but not of 64: one
    layout and one descriptor form for the whole tile [D-hdim96]."""
    cols: int
    swizzle: int

    @property
    def chunk(self) -> int:
        return self.swizzle // 2

    @property
    def chunks(self) -> int:
        return self.cols // self.chunk

    @property
    def tma_swizzle(self) -> str:
        return f"{self.swizzle}B"


def tile_layout(cols: int) -> TileLayout:
    """The TileLayout of a tile `cols` 16-bit columns wide (a multiple of 32)."""
    return TileLayout(cols, 128 if cols % 64 == 0 else 64)
