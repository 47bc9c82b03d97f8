"""Plot an attention bench result: TFLOP/s vs seqlen, one panel per (head_dim, causal), one line per
backend (fa4mlir's line is its fastest correct variant; --variants adds each variant, dashed).

    python3 -m fa4mlir.bench.plot_attention attention.json attention.png [--variants]

Needs matplotlib (`pip install matplotlib`, or the `bench` extra of fa4mlir); reads only the JSON.
"""
from __future__ import annotations

import argparse
import json
import sys

STYLE = {"fa4mlir": dict(color="tab:red", marker="o", linewidth=2.4, zorder=5),
         "cudnn": dict(color="tab:blue", marker="s", linewidth=1.6),
         "fa2": dict(color="tab:gray", marker="^", linewidth=1.6),
         "fa4-cute": dict(color="tab:green", marker="D", linewidth=1.6)}


def series(points: list[dict], head_dim: int, causal: bool, backend: str, variant: str | None = None):
    """(seqlens, TFLOP/s) of one backend (or one fa4mlir variant) in one panel, measured points only."""
    xs, ys = [], []
    for p in sorted(points, key=lambda p: p["seqlen"]):
        if p["head_dim"] != head_dim or p["causal"] != causal:
            continue
        entry = (p.get("fa4mlir_variants", {}).get(variant, {}) if variant
                 else p.get("backends", {}).get(backend, {}))
        if entry.get("tflops") is not None:
            xs.append(p["seqlen"])
            ys.append(entry["tflops"])
    return xs, ys


def plot(result: dict, png: str, variants: bool = False) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["points"]
    if not points:
        raise ValueError("the result holds no points: nothing to plot")
    head_dims = sorted({p["head_dim"] for p in points})
    causals = sorted({p["causal"] for p in points})
    labels = {b["key"]: b["label"] for b in result.get("backends", [])}
    fig, axes = plt.subplots(len(head_dims), len(causals), figsize=(5.2 * len(causals), 3.6 * len(head_dims)),
                             squeeze=False, sharey=True)
    seqlens = sorted({p["seqlen"] for p in points})
    for r, d in enumerate(head_dims):
        for c, causal in enumerate(causals):
            ax = axes[r][c]
            for backend, style in STYLE.items():
                xs, ys = series(points, d, causal, backend)
                if xs:
                    ax.plot(xs, ys, label=labels.get(backend, backend), **style)
            if variants:
                names = sorted({v for p in points if p["head_dim"] == d and p["causal"] == causal
                                for v in p.get("fa4mlir_variants", {})})
                for name in names:
                    xs, ys = series(points, d, causal, "fa4mlir", variant=name)
                    if xs:
                        ax.plot(xs, ys, linestyle="--", linewidth=1, marker=".", label=f"fa4mlir {name}")
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens, [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens])
            ax.grid(True, alpha=0.3)
            ax.set_title(f"head_dim {d}, {'causal' if causal else 'non-causal'}", fontsize=10)
            if r == len(head_dims) - 1:
                ax.set_xlabel("seqlen (batch = 16384 / seqlen)")
            if c == 0:
                ax.set_ylabel("TFLOP/s")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="lower right")
            else:
                ax.text(0.5, 0.5, "no measurements", ha="center", va="center", transform=ax.transAxes)
    top = max((y for ax in axes.flat for line in ax.get_lines() for y in line.get_ydata()), default=1.0)
    axes[0][0].set_ylim(0, 1.08 * top)  # shared by every panel; set once all lines are drawn
    timer = result.get("timer", {}).get("name", "?")
    fig.suptitle(f"attention forward, {result.get('dtype', '?')}, {result.get('device', '?')} "
                 f"({timer} median; H*D = 2048)", fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json")
    p.add_argument("png")
    p.add_argument("--variants", action="store_true", help="also draw every fa4mlir variant, dashed")
    args = p.parse_args(argv)
    with open(args.json) as f:
        result = json.load(f)
    print(f"wrote {plot(result, args.png, args.variants)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
