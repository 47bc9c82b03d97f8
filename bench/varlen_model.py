"""A deviceless wave model of the causal varlen grids (not a timing: it prices each tile in KV blocks).

    python3 bench/varlen_model.py [--batch anchor|16x8192|16x2048] [--sms 132] [--overheads 0.5,1,2,2.5,4]

For the anchors' prefill_varlen batch (16 causal sequences of 256..8192 tokens, seed 11, H 32, Hk 8, D 128,
the bm 128 x bn 128 kernel; or bench/varlen_ab.py's 16 x 8192, 16 x 2048) it lists each schedule's makespan against the even split of the work over the
SMs (one CTA per SM: the kernel's SMEM allows no second one), for a per-tile overhead c (launch, prologue,
the epilogue not overlapped with a next tile's loads) in units of one KV block's time:

- sections: the default grid (common.varlen_schedule), blocks handed out in index order to the SM that
  frees first; an empty block (past its sequence) costs `--empty` blocks;
- compact: common.varlen_compact's grid, the same order less the empty blocks;
- lpt: one tile per CTA in longest-first order over the whole batch (FA3's LPT; the old [D-varlen-order]
  was such an order and lost to sections on L2, which this model does not price);
- persistent-static: a persistent kernel striding the compact order (CTA i runs tiles i, i + SMs, ...),
  its overhead c_p = `--persistent-overhead` x c (the next tile's Q and K load under this tile's epilogue);
- persistent-lpt: a persistent kernel taking tiles from a device counter in longest-first order of
  chunks (an atomic per tile), overhead c_p.

Efficiency = work / (SMs x makespan), work the KV blocks of all tiles. `calibrate` solves for the c that
makes the compact model's 16 x 8192 / 16 x 2048 throughput ratio match a measured one (RESULTS
[D-varlen-sections]: 587.6 / 488.4 TFLOP/s on the sections grid, which has no empty blocks at equal lengths). The model knows no L2, no
bandwidth and no intra-tile imbalance: it ranks the schedules' wave tails, it measures nothing.
"""
from __future__ import annotations

import argparse
import heapq
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def anchor_lengths() -> list[int]:
    """The anchors' prefill_varlen lengths (bench/varlen_ab.py's `anchor` case: torch's CPU generator, seed 11)."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(11)
    return torch.randint(256, 8193, (16,), generator=g).tolist()


def batch_lengths(name: str) -> list[int]:
    """A bench/varlen_ab.py batch's lengths: 'anchor', or 'NxL' (N sequences of L tokens)."""
    if name == "anchor":
        return anchor_lengths()
    n, length = name.split("x")
    return [int(length)] * int(n)


def calibrate(ratio: float, sms: int = 132, lo: float = 0.0, hi: float = 16.0) -> float:
    """The per-tile overhead c (KV blocks) at which the compact model's 16 x 8192 over 16 x 2048 efficiency
    is `ratio` (bisection: the ratio grows with c)."""
    long, short = batch_lengths("16x8192"), batch_lengths("16x2048")

    def model_ratio(c):
        a = schedules(long, 32, 4, 128, 128, sms, c, 0.0, 1.0)
        b = schedules(short, 32, 4, 128, 128, sms, c, 0.0, 1.0)
        return (a["work"] / a["compact"]) / (b["work"] / b["compact"])
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model_ratio(mid) < ratio else (lo, mid)
    return (lo + hi) / 2


def list_schedule(costs, sms: int) -> float:
    """Makespan of `costs` handed out in order, each to the SM that frees first (the hardware's block
    dispatch, or a device counter)."""
    free = [0.0] * sms
    for c in costs:
        t = heapq.heappop(free)
        heapq.heappush(free, t + c)
    return max(free)


def static_schedule(costs, sms: int) -> float:
    """Makespan of CTA i running costs[i], costs[i + sms], ... (a static stride)."""
    return max(sum(costs[i::sms]) for i in range(sms))


def blocks(m_block: int, length: int, bm: int, bn: int) -> int:
    """KV blocks of causal query tile m_block of a sequence of `length` tokens (seqlen_q == seqlen_k)."""
    return -(-min((m_block + 1) * bm, length) // bn)


def schedules(lengths, heads: int, heads_per_kv: int, bm: int, bn: int, sms: int, c: float, c_empty: float,
              persistent_share: float) -> dict:
    from fa4mlir.kernels.attention_sm90_config import L2_BYTES, SECTION_L2_SHARE
    from fa4mlir.kernels.common import varlen_compact, varlen_schedule
    batch, mx = len(lengths), max(lengths)
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    kv_head = mx * 2 * 128 * 2
    shift = 0
    while (2 << shift) <= batch * heads and (-(-((2 << shift) - 1) // heads_per_kv) + 1) * kv_head <= \
            L2_BYTES * SECTION_L2_SHARE:
        shift += 1   # attention_sm90_config.section_shift's rule, D 128
    sections = varlen_schedule.tile_order(mx, bm, heads, batch, shift)
    compact = [t for t in varlen_compact.tile_order(cu, cu[-1], mx, bm, heads, shift) if t is not None]
    work = [blocks(m, lengths[b], bm, bn) for m, _, b in compact]
    cp = c * persistent_share
    out = {"shift": shift, "tiles": len(compact), "blocks": len(sections), "work": sum(work)}
    out["sections"] = list_schedule([blocks(m, lengths[b], bm, bn) + c if m * bm < lengths[b] else c_empty
                                     for m, _, b in sections], sms)
    out["compact"] = list_schedule([w + c for w in work], sms)
    out["lpt"] = list_schedule(sorted((w + c for w in work), reverse=True), sms)
    out["persistent-static"] = static_schedule([w + cp for w in work], sms)
    out["persistent-lpt"] = list_schedule(sorted((w + cp for w in work), reverse=True), sms)
    return out


NAMES = ("sections", "compact", "lpt", "persistent-static", "persistent-lpt")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="anchor", help="anchor, 16x8192, 16x2048 (bench/varlen_ab.py's causal cases)")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--calibrate", type=float, default=None,
                    help="a measured 16x8192 / 16x2048 TFLOP/s ratio: print the c it implies and stop")
    ap.add_argument("--overheads", default="0.5,1,2,2.5,4", help="per-tile overheads c, in KV blocks")
    ap.add_argument("--empty", type=float, default=0.25, help="an empty block's cost, in KV blocks")
    ap.add_argument("--persistent-overhead", type=float, default=0.25,
                    help="a persistent kernel's per-tile overhead as a share of c")
    args = ap.parse_args(argv)
    if args.calibrate is not None:
        print(f"c = {calibrate(args.calibrate, args.sms):.2f} KV blocks per tile")
        return 0
    lengths = batch_lengths(args.batch)
    print(f"batch {args.batch}: {lengths}")
    for c in (float(x) for x in args.overheads.split(",")):
        r = schedules(lengths, 32, 4, 128, 128, args.sms, c, args.empty, args.persistent_overhead)
        ideal = r["work"] / args.sms
        print(f"c = {c:g} (empty {args.empty:g}, persistent {c * args.persistent_overhead:g}): {r['tiles']} tiles, "
              f"{r['blocks']} blocks, {r['work']} KV blocks, section shift {r['shift']}")
        for name in NAMES:
            print(f"  {name:18s} makespan {r[name]:9.1f}  efficiency {ideal / r[name]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
