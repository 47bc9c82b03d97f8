"""A/B of the varlen kernels of two (or more) bundles, or grids, on the same tensors, on a GPU (MLIR-free).

    python3 bench/varlen_ab.py BUNDLE_A BUNDLE_B [--out ab.json]
    python3 bench/varlen_ab.py BUNDLE --grids sections,compact,persistent [--out ab.json]

Times fa4mlir.flash_attn_varlen_func(bundle=...) for each bundle and each grid (FA4MLIR_VARLEN_GRID:
sections, the default, compact, kernels/common/varlen_compact.py, or persistent, the persistent kernel
over the compact tiles [D-varlen-persistent]; the bundle must hold the kernel of each: the prefill or
bench set holds all three for the anchors' causal batch (D128 causal: the non-causal case has no persistent
kernel, whose SMEM its 128 x 144 tiles outgrow, so it is reported and skipped); a case whose kernel a bundle
lacks is reported and skipped) in turn, alternating, two rounds,
on: the anchors' prefill_varlen batch (16 causal sequences of 256..8192 tokens, seed 11, H 32, Hk 8,
D 128), 16 x 8192 and 16 x 2048 causal, and the anchors' batch non-causal. Each timing is the
benchmarks' heated do_bench median (fa4mlir.bench.timers.make_timer, heat 1000 ms), so the order of
the bundles does not bias the clock. Prints a table and the largest difference between the bundles'
outputs (the same kernel math should agree to the bit), and writes the rows as JSON.
"""
from __future__ import annotations

import argparse
import json


def cases(torch):
    g = torch.Generator(device="cpu").manual_seed(11)
    anchor = torch.randint(256, 8193, (16,), generator=g).tolist()
    return [("anchor", anchor, True), ("16x8192", [8192] * 16, True), ("16x2048", [2048] * 16, True),
            ("anchor", anchor, False)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundles", nargs="*", help="bundle directories (none: FA4MLIR_BUNDLE, or the compiler)")
    ap.add_argument("--grids", default="sections", help="comma-separated FA4MLIR_VARLEN_GRID values to time")
    ap.add_argument("--out", default="varlen-ab.json")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    import fa4mlir
    from fa4mlir.kernels.common.varlen_compact import GRIDS
    from fa4mlir.bench.prefill_workloads import with_varlen_grid
    from fa4mlir.bench.timers import make_timer
    grids = args.grids.split(",")
    if any(g not in GRIDS for g in grids):
        ap.error(f"--grids takes {', '.join(GRIDS)}, got {args.grids!r}")
    variants = [(b, g) for b in args.bundles or [None] for g in grids]
    timer, desc = make_timer(heat_ms=1000)
    heads, kv_heads, d = 32, 8, 128
    rows = []
    for name, lens, causal in cases(torch):
        cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(lens), 0)
        total, mx = int(cu[-1]), max(lens)
        cu = cu.cuda()
        q = torch.randn(total, heads, d, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(total, kv_heads, d, dtype=torch.bfloat16, device="cuda")
        v = torch.randn_like(k)
        flops = sum(4 * heads * n * n * d / (2 if causal else 1) for n in lens)
        outs = []
        for rnd in range(args.rounds):
            for b, grid in variants:
                def plain(b=b):
                    return fa4mlir.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=causal, bundle=b)
                call = with_varlen_grid(plain, grid)
                try:
                    o = call()
                except (LookupError, ValueError) as e:   # BundleError: no such kernel in the bundle; ConfigError: none built
                    print(f"{name:10s} causal={causal:d} r{rnd} {grid:8s} {b}: not in the bundle ({str(e)[:120]})")
                    continue
                torch.cuda.synchronize()
                if rnd == 0:
                    outs.append(o.float())
                ms = timer(call)
                rows.append({"case": name, "causal": causal, "bundle": b, "grid": grid, "round": rnd, "ms": ms,
                             "tflops": flops / ms / 1e9})
                print(f"{name:10s} causal={causal:d} r{rnd} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s  {grid:8s} {b}",
                      flush=True)
        if outs:
            diff = max(float((o - outs[0]).abs().max()) for o in outs)
            print(f"   largest |difference| between the variants' outputs: {diff}")
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "timer": desc, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
