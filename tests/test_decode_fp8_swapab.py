"""The swap_ab FP8 decode consumer's address maps (kernels/attention_decode_sm90_swapab.py, note "Swap
AB"), on Python ints, with the formulas the kernel emits: K's head-dim permutation is a bijection that
Q^T's tile takes the same way, K's fragment loads from the 128B-swizzled e4m3 tile are bank-conflict
free per quarter-warp and read the bytes the permutation says, and P's tile covers each (row, key) once.
Numerics: tests/test_interpret_decode_sm90.py (the `swapab` cases)."""
from __future__ import annotations

import pytest

from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels import attention_decode_sm90_swapab as sw


def _swizzled(row: int, byte: int) -> int:
    """Where TMA's 128B swizzle puts byte `byte` of 128-byte row `row` (1024-byte aligned tile)."""
    return row * 128 + (((byte // 16) ^ (row % 8)) * 16) + byte % 16


def test_head_dim_order_is_a_bijection_and_matches_the_fragment_bytes():
    assert sorted(sw.head_dim_of(k) for k in range(128)) == list(range(128))
    for t in range(128):
        t4, g = t % 4, (t % 32) // 4
        row = 16 * (t // 32) + g
        for x in (0, 1):
            off = sw.k_load_offset(row, t4, g, x)
            for b in range(16):
                # byte b of load x is byte 16 x + b = 4 kk + 2 w + e of the thread's 32: reduction index kappa
                kk, rest = divmod(16 * x + b, 4)
                w, e = divmod(rest, 2)
                d = sw.head_dim_of(16 * kk + 8 * w + 2 * t4 + e)
                assert off + b == _swizzled(row, d), (t, x, b)


def test_k_fragment_loads_are_conflict_free_per_quarter_warp():
    for warp in range(4):
        for h in (0, 1):
            for x in (0, 1):
                for q in range(4):
                    lanes = range(8 * q, 8 * q + 8)
                    pos = {(sw.k_load_offset(16 * warp + lane // 4 + 8 * h, lane % 4, lane // 4, x) % 128) // 16
                           for lane in lanes}
                    assert len(pos) == 8, (warp, h, x, q, pos)


def test_q_and_p_tiles_cover_each_element_once():
    q = {sw.q_offset(n, k) for n in range(sw.N) for k in range(128)}
    assert len(q) == sw.N * 128 and max(q) < sw.N * 128 * 2 and all(o % 2 == 0 for o in q)
    p = {sw.p_offset(n, key) for n in range(64) for key in range(64)}
    assert len(p) == 64 * 64 and max(p) < 64 * 64 * 2


@pytest.mark.parametrize("change", [dict(head_dim=64), dict(kv_scale="block"), dict(bn=128, box_rows=128),
                                    dict(kv_dtype="", kv_scale="")])
def test_swap_ab_refuses_what_it_is_not_built_for(change):
    cfg = dec.DecodeConfig(head_dim=128, bn=64, stages=4, box_rows=64, kv_dtype="e4m3", kv_scale="kv_head",
                           swap_ab=True)
    cfg.validate()
    with pytest.raises(ValueError, match="swap_ab"):
        dec.DecodeConfig(**{**cfg.__dict__, **change}).validate()


def test_alpha_slots_pair_a_threads_two_rows():
    """Note "Warp partials": O rows 0..31 take 32 distinct slots, and a thread's rows r, r + 8 (r = its
    row0 % 32, r % 16 < 8) are slots s, s + 1 with s even (one 8-byte load)."""
    assert sorted(sw.alpha_slot(r) for r in range(32)) == list(range(32))
    for t in range(128):
        r = (16 * (t // 32) + (t % 32) // 4) % 32
        assert sw.alpha_slot(r) % 2 == 0 and sw.alpha_slot(r + 8) == sw.alpha_slot(r) + 1
