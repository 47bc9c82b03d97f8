"""Deviceless checks of the mask family (kernels/common/masks.py): the canonical intersection, and
the tile classification of every (query tile, KV block) pair brute-forced against the element
predicate, for causal, sliding windows, chunks and their intersections, seqlen_q != seqlen_k."""
import itertools

import pytest

from fa4mlir.kernels.common.masks import (CAUSAL, NO_MASK, Causal, Chunked, IntOps, Intersect, SlidingWindow,
                                          attention_mask, intersect, tile_blocks)


def _fa_visible(i, j, sq, sk, causal, window, chunk):
    """FlashAttention's own rule (flash_attn.cute.testing: construct_local_mask, construct_chunk_mask),
    written independently of the mask objects."""
    diag = i + sk - sq
    left, right = window
    if causal:
        right = 0
    ok = 0 <= j < sk
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    if chunk:
        start = diag - diag % chunk
        ok &= start <= j < start + chunk
    return bool(ok)


MASKS = [  # (causal, window, chunk)
    (False, (-1, -1), 0), (True, (-1, -1), 0), (False, (5, -1), 0), (False, (16, 0), 0), (False, (0, 0), 0),
    (False, (-1, 7), 0), (False, (3, 20), 0), (True, (33, -1), 0), (False, (100, 100), 0), (False, (-1, -1), 8),
    (True, (-1, -1), 8), (False, (-1, -1), 24), (True, (-1, -1), 37), (True, (10, -1), 16), (False, (4, 9), 24),
    (False, (1000, -1), 0), (False, (-1, -1), 1000),
]
SHAPES = [(1, 1), (7, 7), (64, 64), (100, 100), (33, 90), (90, 33), (128, 17), (17, 128), (200, 150)]


def _tile_pairs(mask, sq, sk, bm, bn):
    for r0 in range(0, sq, bm):
        tb = tile_blocks(mask, r0, bm, sq, sk, bn, IntOps)
        rows = range(r0, min(r0 + bm, sq))
        for b in range(-(-sk // bn)):
            keys = range(b * bn, min(b * bn + bn, sk))
            seen = [[mask.visible(i, j, sq, sk) for j in keys] for i in rows]
            yield tb, b, seen, keys


@pytest.mark.parametrize("causal, window, chunk", MASKS)
def test_tile_classes_match_the_element_predicate(causal, window, chunk):
    mask = attention_mask(causal, window, chunk)
    for (sq, sk), (bm, bn) in itertools.product(SHAPES, ((16, 16), (64, 32), (128, 48), (192, 128))):
        for i, j in itertools.product(range(sq), range(sk)):
            assert mask.visible(i, j, sq, sk) == _fa_visible(i, j, sq, sk, causal, window, chunk), (i, j)
        for tb, b, seen, keys in _tile_pairs(mask, sq, sk, bm, bn):
            where = f"{mask} sq={sq} sk={sk} bm={bm} bn={bn} tile {tb} block {b}"
            any_seen = any(map(any, seen))
            visited = tb.first <= b < tb.end
            assert visited or not any_seen, f"skipped a block with visible keys: {where}"
            if tb.full_first <= b < tb.full_end:
                assert visited and len(keys) == bn and all(map(all, seen)), f"unmasked block is not whole: {where}"
            elif visited and b not in (tb.first, tb.end - 1):
                # the range is tight: an inner visited block is partial or whole (never empty)
                assert any_seen, f"visited an empty inner block: {where}"
        # the range's ends hold visible keys (no empty tile visited), and every whole block is unmasked
        for tb, b, seen, keys in _tile_pairs(mask, sq, sk, bm, bn):
            if b in (tb.first, tb.end - 1) and tb.end > tb.first:
                assert any(map(any, seen)), f"visited an empty end block {b}: {mask} sq={sq} sk={sk} {tb}"
            if len(keys) == bn and seen and all(map(all, seen)):
                assert tb.full_first <= b < tb.full_end, f"whole block {b} masked: {mask} sq={sq} sk={sk} {tb}"


def test_canonical_intersection():
    assert attention_mask() is NO_MASK or attention_mask() == NO_MASK
    assert attention_mask(True) == CAUSAL == Causal()
    assert attention_mask(False, (-1, 0)) == CAUSAL                  # FA: window (-1, 0) is causal
    assert attention_mask(True, (8, 5)) == SlidingWindow(8, 0)       # causal sets right = 0
    assert attention_mask(True, (8, -1), 16) == Intersect((SlidingWindow(8, 0), Chunked(16)))
    assert SlidingWindow(8, -1) & SlidingWindow(4, 6) == SlidingWindow(4, 6)
    assert Chunked(16) & CAUSAL == attention_mask(True, (-1, -1), 16)
    assert intersect(CAUSAL, CAUSAL) == CAUSAL
    assert {attention_mask(True, (8, -1)), SlidingWindow(8, 0)} == {SlidingWindow(8, 0)}   # hashable, one key
    assert attention_mask(True, (8, -1), 16).tag() == "_wl8_wr0_chunk16"
    assert CAUSAL.tag() == "_causal" and NO_MASK.tag() == ""
    assert CAUSAL.is_legacy and NO_MASK.is_legacy and not SlidingWindow(8, 0).is_legacy


@pytest.mark.parametrize("bad", [dict(left=-2, right=0), dict(left=1.5, right=0), dict(left=True, right=-1)])
def test_window_values(bad):
    with pytest.raises(ValueError, match="SlidingWindow"):
        SlidingWindow(**bad)


def test_chunk_values():
    with pytest.raises(ValueError, match="Chunked.size"):
        Chunked(0)
    with pytest.raises(ValueError, match="no single chunk size"):
        Chunked(8) & Chunked(16)
