"""Deviceless: the balanced split schedule's math (kernels/common/decode_balanced.py): every CTA's range
is an equal share, the items of all CTAs cover every key tile of every sequence once, each cut
sequence's slots are the ones its CTAs write (the combine's view matches the kernel's), the walk the
kernel's warp scan starts from reaches the same items, and slots never collide."""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir.kernels.common import decode_balanced as db

BN = 64


def _walk(counts, c, parts):
    """The kernel's walk: sequences b_first .. b_end - 1 from P_{b_first} (first_items), each's local
    range clipped to the CTA's, empty ones skipped."""
    total = sum(counts)
    lo, hi = db.cta_lo(c, total, parts), db.cta_lo(c + 1, total, parts)
    b_first, p, b_end = db.first_items(counts, c, parts)
    items = []
    for b in range(b_first, b_end):
        n = counts[b]
        begin, end = max(lo - p, 0), min(hi - p, n)
        if begin < end:
            items.append(db.Item(b, begin, end, begin == 0 and end == n, 2 * c + (b != b_first)))
        p += n
    return items


CASES = {
    "edges": [0, 1, BN - 1, BN, BN + 1, 0, 3 * BN, 0],
    "one_long": [40 * BN, 1, 1, 2],
    "all_empty": [0, 0, 0],
    "serving": [int(x) for x in np.random.default_rng(0).integers(1024, 16385, 64)],
    "batch_100": [int(x) for x in np.random.default_rng(1).integers(0, 3000, 100)],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("parts", [1, 3, 7, 33])
def test_items_cover_every_tile_once_and_slots_match(name, parts):
    counts = db.tile_counts(CASES[name], BN)
    total = sum(counts)
    seen = {b: [] for b in range(len(counts))}
    slots = set()
    for c in range(db.live_parts(total, parts)):
        items = db.cta_items(counts, c, parts)
        assert items == _walk(counts, c, parts), c
        assert sum(i.end - i.begin for i in items) == db.cta_lo(c + 1, total, parts) - db.cta_lo(c, total, parts)
        for it in items:
            seen[it.batch].append((c, it))
            if not it.final:
                assert it.slot not in slots and it.slot // 2 == c
                slots.add(it.slot)
    live = db.live_parts(total, parts)
    for c in range(live):     # equal shares to one tile, none empty unless T is 0
        share = db.cta_lo(c + 1, total, parts) - db.cta_lo(c, total, parts)
        assert total // live <= share <= -(-total // live) and (share > 0 or total == 0)
    for b, n in enumerate(counts):
        ranges = sorted((it.begin, it.end) for _, it in seen[b])
        covered = [t for r in ranges for t in range(*r)]
        assert covered == list(range(n)), b
        want = db.sequence_slots(counts, b, parts)
        if n == 0:
            assert want == [] and not seen[b]
        elif want is None:
            assert len(seen[b]) == 1 and seen[b][0][1].final
        else:
            assert [it.slot for _, it in sorted(seen[b], key=lambda x: x[0])] == want
            assert not any(it.final for _, it in seen[b]) and len(want) >= 2


def test_a_sequence_cut_across_three_ctas_and_a_cta_of_several_sequences():
    counts = db.tile_counts([10 * BN, BN, 1, BN + 1], BN)      # 10, 1, 1, 2 tiles: 14
    assert db.sequence_slots(counts, 0, 4) == [0, 2, 4]        # CTAs 0..2: tiles [0, 4), [4, 8), [8, 11)
    items = db.cta_items(counts, 3, 4)                          # CTA 3: [11, 14), sequences 2, 3 whole
    assert [(i.batch, i.final) for i in items] == [(2, True), (3, True)]


def test_warp_scan_is_the_prefix_sum():
    rng = np.random.default_rng(3)
    x = [int(v) for v in rng.integers(0, 1000, 32)]
    assert db.warp_scan(x) == list(np.cumsum(x))


def test_parts_for():
    assert db.parts_for(132, 2, 8) == 33 and db.parts_for(4, 1, 8) == 1


def test_the_kernels_division_steps():
    rng = np.random.default_rng(5)
    for a, b in [(0, 1), (1, 1), (19, 5), ((1 << 31) - 1, 1), ((1 << 31) - 1, 1023), (5, 7)] + \
            [(int(x), int(y)) for x, y in zip(rng.integers(0, 1 << 31, 200), rng.integers(1, 1 << 12, 200))]:
        assert db.udiv_steps(a, b) == a // b, (a, b)
