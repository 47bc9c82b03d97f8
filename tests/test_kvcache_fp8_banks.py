"""Deviceless: the shared-memory banks of the FP8 decode kernel's e4m3 -> f16 conversion, computed
from the kernel's own address math (kernels/common/e4m3_tile.py: slot, e4m3_offset, f16_offset,
which emit_convert builds the kernel's loads and stores from).

A warp's 16-byte access is served a quarter-warp at a time (8 lanes, 128 bytes); within a quarter
the 8 lanes must touch 32 different 4-byte banks (note "Bank phases"). Checked for every warp, pass
and quarter of the e4m3 loads and of both f16 stores of each piece, at every head_dim and a few
tile heights; and every f16 store lands where wgmma reads that element under the 128-byte swizzle
(the interpreter's address-based swizzle, a tile 1024-byte aligned as plan-smem places it).
"""
import numpy as np
import pytest

from fa4mlir.interpret.numeric import swizzle
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels.common import e4m3_tile as et

BANKS, BANK_BYTES = 32, 4
CASES = [(d, bn) for d in dec.HEAD_DIMS for bn in (32, 64, 128) if bn * d // 16 >= et.THREADS]


def _banks(offsets) -> list[int]:
    """The banks the 16-byte accesses at `offsets` (one per lane) touch, 4 per lane."""
    return [(off + b) // BANK_BYTES % BANKS for off in offsets for b in range(0, 16, BANK_BYTES)]


def _quarters(bn: int, head_dim: int, address):
    """For every warp, pass and quarter: address(row, piece) of its 8 lanes' slots."""
    for warp in range(et.THREADS // 32):
        for i in range(et.slots_per_thread(bn, head_dim)):
            for quarter in range(32 // et.QUARTER):
                lanes = range(32 * warp + et.QUARTER * quarter, 32 * warp + et.QUARTER * (quarter + 1))
                yield [address(*et.slot(t, i, head_dim)) for t in lanes]


@pytest.mark.parametrize("head_dim,bn", CASES)
def test_every_piece_converted_once(head_dim, bn):
    slots = [et.slot(t, i, head_dim) for t in range(et.THREADS) for i in range(et.slots_per_thread(bn, head_dim))]
    assert sorted(slots) == [(r, p) for r in range(bn) for p in range(et.pieces_per_row(head_dim))]


@pytest.mark.parametrize("head_dim,bn", CASES)
def test_conversion_loads_and_stores_are_bank_conflict_free(head_dim, bn):
    accesses = {"e4m3 load": lambda r, p: et.e4m3_offset(r, p, head_dim)}
    for h in (0, 1):
        accesses[f"f16 store, half {h}"] = lambda r, p, h=h: et.f16_offset(r, p, h, bn)
    for what, address in accesses.items():
        for offsets in _quarters(bn, head_dim, address):
            banks = _banks(offsets)
            assert len(set(banks)) == BANKS, (what, offsets)


def test_the_plain_map_would_conflict():
    """The check has teeth: 8 consecutive pieces of one row per quarter (the map before e4m3_tile)
    put two f16 stores on each 16-byte position at head_dim 128."""
    per_row = et.pieces_per_row(128)
    offsets = [et.f16_offset(t // per_row, t % per_row, 0, 64) for t in range(et.QUARTER)]
    assert len(set(_banks(offsets))) == BANKS // 2


@pytest.mark.parametrize("head_dim,bn", CASES)
def test_f16_stores_land_in_the_swizzled_layout_wgmma_reads(head_dim, bn):
    """Columns 16 piece + 8 half .. + 7 of row r: 64-column chunk c at c * bn * 128, row r at r * 128,
    16-byte unit u before the 128-byte swizzle."""
    for r in range(bn):
        for p in range(et.pieces_per_row(head_dim)):
            for h in (0, 1):
                col = 16 * p + 8 * h
                plain = (col // 64) * bn * 128 + r * 128 + (col % 64) // 8 * 16
                assert et.f16_offset(r, p, h, bn) == swizzle(np.int64(plain), 128), (r, p, h)
