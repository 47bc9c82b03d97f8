"""Where the sm_90a attention KV loops wait on their GEMMs, read from the SASS (deviceless).

For each loop that issues one KV block's wgmma (S = Q K^T and O += P V): its length, and where
ptxas put the wait for S (WARPGROUP.DEPBAR.LE gsb0, 0x1) and the wait for P.V (... 0x0). The
instructions between them are the softmax work that runs while this warpgroup's P.V is still on the
tensor cores (intra-warpgroup overlap); what comes after the second wait runs only once P.V is done.

    python bench/sass_loops.py                                   # the bf16 defaults (compiled here)
    python bench/sass_loops.py --config head_dim=128,causal=True # one AttnConfig
    python bench/sass_loops.py --cubin a.cubin [--hgmma 16]      # any cubin, e.g. FA4 CuTe's

FA4 CuTe keeps its cubins with CUTE_DSL_KEEP=cubin CUTE_DSL_DUMP_DIR=DIR (on the GPU machine;
notes/RESULTS.md, [R-pv-wait]). Needs nvdisasm (nvidia-cuda-nvdisasm).
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from fa4mlir.sass import disassemble, wgmma_loops, wgmma_waits


def loop_rows(sass: str, hgmma: int | None) -> list[dict]:
    """wgmma_waits of every wgmma loop (of `hgmma` HGMMA when given) plus its top opcodes."""
    rows = []
    for loop in wgmma_loops(sass):
        w = wgmma_waits(loop)
        if hgmma is not None and w["hgmma"] != hgmma:
            continue
        mix = collections.Counter(o.split(".")[0] for o, _ in loop)
        rows.append({**w, "mix": " ".join(f"{o}:{n}" for o, n in mix.most_common(8))})
    return rows


def _config_cubin(spec: str):
    """An AttnConfig from 'k=v,k=v' (attention_sm90_config.config_from_spec), compiled as the
    attention API compiles (compiler.compile_kernel: the kernel's own ptxas backend)."""
    from fa4mlir.compiler import compile_kernel
    from fa4mlir.kernels.attention_sm90_config import KERNEL
    from fa4mlir.kernels.attention_sm90_config import config_from_spec
    cfg = config_from_spec(spec)
    art = compile_kernel(KERNEL, cfg)
    return art.name, art.cubin, cfg.head_dim // 16 + cfg.bn // 16


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", default=[], help="AttnConfig fields k=v,k=v (repeatable)")
    ap.add_argument("--cubin", action="append", default=[], type=Path, help="a cubin file (repeatable)")
    ap.add_argument("--hgmma", type=int, default=None, help="only loops with this many HGMMA (cubins)")
    a = ap.parse_args(argv)
    targets = []
    for path in a.cubin:
        targets.append((path.name, path.read_bytes(), a.hgmma))
    specs = a.config or ([] if a.cubin else [f"head_dim={d},causal={c}" for d in (64, 128, 256)
                                             for c in (False, True)])
    for spec in specs:
        targets.append(_config_cubin(spec))
    print(f"{'kernel':58} {'instrs':>6} {'HGMMA':>5} {'S wait':>6} {'PV wait':>7} {'between':>7} "
          f"{'MUFU betw.':>10} {'MUFU':>5}  top opcodes")
    for name, cubin, hgmma in targets:
        for r in loop_rows(disassemble(cubin), hgmma):
            print(f"{name[:58]:58} {r['instructions']:6} {r['hgmma']:5} {str(r['s_wait']):>6} {str(r['pv_wait']):>7} "
                  f"{r['between']:7} {r['mufu_between']:10} {r['mufu']:5}  {r['mix']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
