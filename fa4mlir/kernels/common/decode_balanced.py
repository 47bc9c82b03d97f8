"""The balanced split schedule of the decode kernel (MLIR-free; the host twin of what the kernel and
the combine emit: tests compare the two). FlashMLA's get_mla_metadata idea, computed on the device.

Work. Sequence b of a call holds n_b = ceil(L_b / bn) key tiles (L_b: cache_seqlens[b] clamped, plus
the call's new tokens, as the split kernel's _Work). Laid end to end, the batch's tiles are the
global range [0, T), T = sum_b n_b; sequence b owns [P_b, P_b + n_b), P_b = sum_{b' < b} n_b'.

Schedule. Each KV head runs a fixed grid of ``parts`` CTAs (about the SMs' CTA slots over the KV
heads: ``parts_for``); CTA c takes the global tiles [lo_c, lo_{c+1}), lo_c = c q + min(c, r) (q, r = divmod(T, live)):
(over the first live_parts = min(parts, T) CTAs: no range is empty) equal shares (to one tile) of the batch's keys whatever the lengths, so ragged lengths leave no SM
idle in a last wave. A CTA's range may cover several sequences (its work items, in order) and cut
one at each end. The CTA whose range holds a whole sequence writes its final O and LSE (the
unsplit epilogue); a sequence cut between CTAs gets float32 partials from each, in slots:
the CTA's first item in slot 2c, a later one (only the last item can be cut) in slot 2c + 1.

Every CTA and the combine derive this from cache_seqlens on the device (no host read, CUDA-graph
safe): the CTA by a warp-wide scan of the tile counts (its first item is the first b with
P_b + n_b > lo_c), the combine from P_b and T of its row's sequence: the CTAs cutting b are
c in [cta_of(P_b), cta_of(P_b + n_b - 1)] (cta_of(t): the c with lo_c <= t < lo_{c+1}); a sequence of one CTA was written final, one of none (L_b = 0) gets O = 0
and LSE = +inf from the combine; otherwise the combine merges slots 2c (+1 for the first CTA when
b starts past its lo) in CTA order: deterministic for given lengths and ``parts``.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_BATCH = 1024          # the kernel's scan walks the batch 32 sequences a trip (a bound on its prologue)
MAX_TOTAL_TILES = (1 << 31) - 1    # T and every P_b are i32 in the kernel (c T is formed in i64)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def parts_for(num_sms: int, ctas_per_sm: int, kv_heads: int) -> int:
    """CTAs per KV head: one wave of the device's CTA slots over the KV heads (at least 1)."""
    return max(1, num_sms * ctas_per_sm // kv_heads)


def tile_counts(lengths, bn: int) -> list[int]:
    """n_b: key tiles of each sequence of L_b keys."""
    return [ceil_div(max(int(n), 0), bn) for n in lengths]


def live_parts(total: int, parts: int) -> int:
    """The CTAs that get tiles: min(parts, T) (at least 1), so that every range is non-empty (the
    combine's CTAs between a cut sequence's first and last all hold a piece of it); CTAs c >= this
    exit at once."""
    return max(1, min(parts, total))


def cta_lo(c: int, total: int, parts: int) -> int:
    """lo_c: the first global tile of CTA c (lo_live = total) over live = live_parts(total, parts) CTAs:
    T // live tiles each, the first T % live CTAs one more (decode_schedule.split_range's partition)."""
    q, r = divmod(total, live_parts(total, parts))
    return c * q + min(c, r)


def cta_of(t: int, total: int, parts: int) -> int:
    """The CTA whose range holds global tile t (0 <= t < total)."""
    q, r = divmod(total, live_parts(total, parts))
    big = r * (q + 1)       # the tiles of the first r CTAs, q + 1 each
    return t // (q + 1) if t < big else r + (t - big) // q


def udiv_steps(a: int, b: int) -> int:
    """a // b (0 <= a < 2^31, 1 <= b < 2^30) by the kernel's restoring division, one quotient bit a
    step (its only division: a runtime divisor makes ptxas call a subroutine, and an extern call in
    the function serialises every wgmma, C7509)."""
    q = r = 0
    for i in range(30, -1, -1):
        r = (r << 1) | ((a >> i) & 1)
        if r >= b:
            r -= b
            q |= 1 << i
    return q


@dataclass(frozen=True)
class Item:
    """One work item of a CTA: sequence ``batch``'s local tiles [begin, end); ``final``: the whole
    sequence (O and LSE to out and lse), else a partial in split slot ``slot``."""

    batch: int
    begin: int
    end: int
    final: bool
    slot: int


def cta_items(counts: list[int], c: int, parts: int) -> list[Item]:
    """CTA c's work items, as the kernel walks them (empty sequences inside its range: no item)."""
    total = sum(counts)
    lo, hi = cta_lo(c, total, parts), cta_lo(c + 1, total, parts)
    items, start = [], 0
    first = None
    for b, n in enumerate(counts):
        begin, end = max(lo - start, 0), min(hi - start, n)
        if begin < end:
            first = b if first is None else first
            items.append(Item(b, begin, end, begin == 0 and end == n, 2 * c + (b != first)))
        start += n
    return items


def sequence_slots(counts: list[int], b: int, parts: int) -> list[int] | None:
    """The combine's view of sequence b: None when one CTA wrote it final, else the slots of its
    partials in CTA order ([] for an empty sequence: O = 0, LSE = +inf)."""
    total, n = sum(counts), counts[b]
    if n == 0:
        return []
    start = sum(counts[:b])
    first, last = cta_of(start, total, parts), cta_of(start + n - 1, total, parts)
    if first == last:
        return None
    return [2 * c + (c == first and start != cta_lo(c, total, parts)) for c in range(first, last + 1)]


def warp_scan(values: list[int]) -> list[int]:
    """Inclusive prefix sums of 32 lanes' values by the xor butterfly the kernel emits (each step:
    the partner's block total joins the lane's prefix when the lane is the upper half)."""
    prefix, total = list(values), list(values)
    for d in (1, 2, 4, 8, 16):
        other = [total[lane ^ d] for lane in range(32)]
        prefix = [prefix[lane] + (other[lane] if lane & d else 0) for lane in range(32)]
        total = [total[lane] + other[lane] for lane in range(32)]
    return prefix


def first_items(counts: list[int], c: int, parts: int) -> tuple[int, int, int]:
    """(b_first, P_{b_first}, b_end): the sequences the CTA walks, b_first .. b_end - 1, as the
    kernel's scan finds them 32 sequences a trip: b_first = #{b: P_b + n_b <= lo}, P_{b_first} the
    largest such P_b + n_b (0 if none), b_end = #{b: P_b < hi}."""
    total = sum(counts)
    lo, hi = cta_lo(c, total, parts), cta_lo(c + 1, total, parts)
    base = n_first = n_end = p_first = 0
    for k in range(0, len(counts), 32):
        lanes = [counts[k + lane] if k + lane < len(counts) else 0 for lane in range(32)]
        valid = [k + lane < len(counts) for lane in range(32)]
        incl = [base + x for x in warp_scan(lanes)]
        excl = [i - x for i, x in zip(incl, lanes)]
        n_first += sum(v and i <= lo for v, i in zip(valid, incl))
        n_end += sum(v and e < hi for v, e in zip(valid, excl))
        p_first = max([p_first] + [i for v, i in zip(valid, incl) if v and i <= lo])
        base = incl[31]
    return n_first, p_first, n_end


__all__ = ["MAX_BATCH", "MAX_TOTAL_TILES", "parts_for", "live_parts", "tile_counts", "cta_lo", "cta_of", "Item", "cta_items",
           "sequence_slots", "warp_scan", "first_items", "udiv_steps"]
