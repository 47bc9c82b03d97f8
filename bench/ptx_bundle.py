"""A bundle of hand-edited PTX variants of one sm90 attention kernel, for timing on the GPU machine.

A schedule experiment that is quicker to try in PTX than in the DSL (move a wait, add a branch,
reorder a reduction) goes: dump the kernel's PTX (FA4MLIR_DUMP_DIR=DIR keeps `05-ptx.ptx`), edit
copies of it, then

    python bench/ptx_bundle.py --out bundles/ptx --config head_dim=128,causal=False \\
        base=DIR/.../05-ptx.ptx late_wait=edited.ptx

compiles each file with the standalone ptxas (as FA4MLIR_CUBIN_BACKEND=ptxas does) and writes one
bundle entry per file under the metadata of the kernel built from --config (its launch contract:
parameters, block, SMEM), keyed by the variant's name; on the GPU machine

    python3 bench/attention_probe.py bundles/ptx [--time-only] --seqlen 16384,2048

checks and times them side by side (the probe prints each entry's key). Compile-side only: needs
MLIR (to build the reference kernel) and ptxas. Every variant must keep the kernel's name and
parameters; the probe's correctness cases catch an edit that breaks the numerics.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="bundle folder to write")
    ap.add_argument("--config", default="", help="the reference kernel: k=v,... over its case's default "
                    "config (attention_sm90_config.config_from_spec)")
    ap.add_argument("variants", nargs="+", help="NAME=FILE.ptx, one bundle entry each")
    a = ap.parse_args(argv)
    from fa4mlir import lowering
    from fa4mlir.compiler import compile_kernel
    from fa4mlir.kernels.attention_sm90_config import KERNEL
    from fa4mlir.kernels.attention_sm90_config import config_from_spec
    from fa4mlir.runtime import write_bundle

    ref = compile_kernel(KERNEL, config_from_spec(a.config))
    arts = []
    for spec in a.variants:
        name, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"expected NAME=FILE.ptx, got {spec!r}")
        cubin, log = lowering.ptx_to_cubin_ptxas(Path(path).read_text(), ref.arch, Path(path).name)
        res = lowering.parse_ptxas_report(log)
        print(f"{name}: {path} -> {len(cubin)} B cubin, {res.registers} registers, "
              f"{res.spill_stores} B spill stores", flush=True)
        arts.append(dataclasses.replace(ref, cubin=cubin, key=name))
    print(f"wrote {write_bundle(a.out, arts)} ({ref.name}, {len(arts)} variants)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
