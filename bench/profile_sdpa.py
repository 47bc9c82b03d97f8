"""Run torch SDPA's cuDNN backend on the FA3 grid's shape, for a profiler (what cuDNN launches:
kernel name, grid, block, registers, SMEM). MLIR-free, runs on the GPU machine:

    ncu --section LaunchStats --section Occupancy python3 bench/profile_sdpa.py HEAD_DIM SEQLEN [--causal]
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.attention import SDPBackend, sdpa_kernel


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("head_dim", type=int)
    ap.add_argument("seqlen", type=int)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backend", choices=("cudnn", "fa2"), default="cudnn")
    a = ap.parse_args()
    d, s = a.head_dim, a.seqlen
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}[a.backend]
    with sdpa_kernel([be]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
    torch.cuda.synchronize()
    print(f"{a.backend} B{b} H{h} S{s} D{d} causal={a.causal}: 3 calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
