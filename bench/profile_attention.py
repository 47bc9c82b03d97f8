"""Launch one attention kernel of a bundle a few times on the FA3 grid's shape, for a profiler
(MLIR-free, runs on the GPU machine):

    ncu --set detailed -k regex:attention --launch-skip 2 --launch-count 1 \\
        python3 bench/profile_attention.py BUNDLE NAME_OR_SUBSTRING SEQLEN
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

from bench.attention_rows import load_kernel
from fa4mlir.attention import AttnProblem
from fa4mlir.kernels.attention_sm90_config import AttnConfig, grid, launch_args
from fa4mlir.testing import torch_dtype


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("name")
    ap.add_argument("seqlen", type=int)
    ap.add_argument("--launches", type=int, default=4)
    a = ap.parse_args()
    kern = load_kernel(a.bundle, a.name)
    if kern is None:
        return 2
    art, cfg = kern.artifact, kern.artifact.config
    d, s = cfg["head_dim"], a.seqlen
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch_dtype(cfg["dtype"])) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    config = AttnConfig.from_key(cfg)
    problem = AttnProblem.of(q.shape, k.shape, config.dtype, causal=config.causal, softmax_scale=1 / math.sqrt(d))
    args = launch_args(config, problem, dict(q=q, k=k, v=v, o=o, lse=lse))
    for _ in range(a.launches):
        kern.launch(grid(config, problem, torch.cuda.get_device_properties(0).multi_processor_count), args)
    torch.cuda.synchronize()
    print(f"{art.name}: {a.launches} launches of B{b} S{s} H{h} D{d}; NaN in O: {bool(o.isnan().any())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
