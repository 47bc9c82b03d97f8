"""The FP8 decode variants' SASS loops, deviceless: per variant (attention_decode_sm90_config
.FP8_VARIANTS) of bench decode's FP8 caches, the split kernel's registers and SMEM, and for each
loop of its code (a backward branch) the instructions, HGMMAs, e4m3 conversions (F2FP), shared loads and
stores and barriers: where the conversion runs (the consumer's wgmma loop) and what it costs per 16 e4m3 bytes.

    python bench/sass_decode_fp8.py                          # every variant, contiguous and paged 16
    python bench/sass_decode_fp8.py --variant smem --page 16 --grain block

Needs nvdisasm (nvidia-cuda-nvdisasm). Counts are static (one trip of each loop), not timings.
"""
from __future__ import annotations

import argparse
import collections
import sys

from fa4mlir.sass import backward_branch_spans, disassemble

CLASSES = {"hgmma": ("HGMMA",), "cvt_e4m3": ("F2FP.F16.E4M3",),
           "pack": ("F2FP.F16.F32", "F2FP.BF16"),
           "lds": ("LDS",), "sts": ("STS",), "bar": ("BAR",), "syncs": ("SYNCS",), "mufu": ("MUFU",),
           "shfl": ("SHFL",), "fmul": ("FMUL",)}


def loops(sass: str) -> list[list[tuple[str, str]]]:
    """The innermost SASS loops (label .. backward branch to it, holding no other such span) in
    program order, as (opcode, operands). A span holding others is left out: ptxas may lay
    another role's code out inside it."""
    ops, spans = backward_branch_spans(sass)
    inner = [(a, b) for a, b in spans if not any((c, d) != (a, b) and a <= c and d <= b for c, d in spans)]
    return [ops[a:b + 1] for a, b in inner]


def loop_row(loop: list[tuple[str, str]]) -> dict:
    counts = collections.Counter()
    for op, _ in loop:
        for name, prefixes in CLASSES.items():
            if op.startswith(prefixes):
                counts[name] += 1
    return {"instructions": len(loop), **{n: counts[n] for n in CLASSES}}


def rows(variant: str, page: int | None, grain: str) -> dict:
    from fa4mlir.compiler import compile_kernel
    from fa4mlir.kernels import attention_decode_sm90_config as dec
    cfg = dec.fp8_variant(dec.default_config("bf16", 128, page, grain), variant)
    art = compile_kernel(dec.KERNEL, cfg)
    found = [loop_row(x) for x in loops(disassemble(art.cubin))]
    # the loops that convert or multiply: the KV loops (the rest are the producer's and Q's)
    kv = [r for r in found if r["hgmma"] or r["cvt_e4m3"]]
    # a converting loop's instructions per 16-byte e4m3 piece a thread converts (its trip's pieces
    # from its cvt count: 8 cvts, two e4m3 each, per piece), the shortest such loop
    conv = [r for r in kv if r["cvt_e4m3"]]
    per_piece = min((r["instructions"] / (r["cvt_e4m3"] / 8) for r in conv), default=None)
    return {"variant": variant, "kernel": cfg.name(), "registers": art.resources.get("registers"),
            "spills": art.resources.get("spill_stores", 0) + art.resources.get("spill_loads", 0),
            "smem": art.smem_bytes, "ctas_per_sm": cfg.ctas_per_sm, "threads": cfg.threads,
            "instructions_per_16B": per_piece and round(per_piece, 1),
            "loops": kv}


def main(argv: list[str] | None = None) -> int:
    from fa4mlir.kernels.attention_decode_sm90_config import FP8_VARIANTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", default=[], help=f"one of {', '.join(FP8_VARIANTS)} (repeatable)")
    ap.add_argument("--page", action="append", default=[], help="page size, or 'none' for a contiguous cache")
    ap.add_argument("--grain", default="kv_head", help="tensor | kv_head | block")
    args = ap.parse_args(argv)
    pages = [None if p == "none" else int(p) for p in args.page] or [None, 16]
    for page in pages:
        for v in args.variant or list(FP8_VARIANTS):
            r = rows(v, page, args.grain)
            print(f"{r['kernel']}: {r['registers']} registers, {r['spills']} spill bytes, {r['smem']} B SMEM, "
                  f"{r['ctas_per_sm']} CTA/SM x {r['threads']} threads; instructions of the shortest converting loop "
                  f"per 16-byte e4m3 piece it converts a thread: {r['instructions_per_16B']}")
            for x in r["loops"]:
                print("    " + "  ".join(f"{k} {n}" for k, n in x.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
