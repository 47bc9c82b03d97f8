"""Quick probe of every attention kernel in a bundle: a few correctness cases and one timing point
each, against torch SDPA (cuDNN). A development tool (the full checks are tests/gpu and
fa4mlir/bench/attention_bench.py); MLIR-free, runs on the GPU machine:

    python3 bench/attention_probe.py BUNDLE [--time-only] [--seqlen 16384 | --seqlen 1024,4096]
                                            [--match SUBSTRING ...] [--l2 1,16e6,52428800]
"""
from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F  # noqa: N812

from fa4mlir.bench.timers import HEAT_MS, make_timer
from fa4mlir.attention import AttnProblem
from fa4mlir.kernels.attention_sm90_config import L2_BYTES, AttnConfig, flops, grid, launch_args
from fa4mlir.runtime import Bundle, load
from fa4mlir.testing import attention_math, torch_dtype


CHECK_SMS = 3  # persistent kernels are checked on a grid sized for 3 SMs: every CTA loops over tiles


def run(kern, q, k, v, scale):
    b, sq, h, d = q.shape
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device=q.device, dtype=torch.float32)
    cfg = AttnConfig.from_key(kern.artifact.config)
    problem = AttnProblem.of(q.shape, k.shape, cfg.dtype, causal=cfg.causal, softmax_scale=scale)
    kern.launch(grid(cfg, problem, CHECK_SMS), launch_args(cfg, problem, dict(q=q, k=k, v=v, o=o, lse=lse)))
    return o, lse


def check(kern, b, sq, sk, h, hk, seed=0):
    cfg = kern.artifact.config
    dt, d, causal = torch_dtype(cfg["dtype"]), cfg["head_dim"], cfg["causal"]
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dt, generator=g)
    scale = 1 / math.sqrt(d)
    o, lse = run(kern, q, k, v, scale)
    torch.cuda.synchronize()
    ro, rl = attention_math(q, k, v, scale, causal, torch.float32)
    tl, _ = attention_math(q, k, v, scale, causal, dt)   # torch's own low-precision computation
    err = (o.float() - ro).abs().max().item()
    terr = (tl.float() - ro).abs().max().item()
    fin = torch.isfinite(rl)
    lerr = (lse[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
    inf_ok = bool((lse[~fin] == float("inf")).all()) and bool((o.float().transpose(1, 2)[~fin] == 0).all())
    nan = bool(o.isnan().any() or lse.isnan().any())
    ok = (not nan) and err <= 2 * terr + 1e-5 and lerr < 1e-3 and inf_ok
    print(f"  B{b} Sq{sq} Sk{sk} H{h}/{hk}: err {err:.3e} (torch {terr:.3e}) lse {lerr:.2e} "
          f"masked-rows-ok {inf_ok} nan {nan} -> {'OK' if ok else 'FAIL'}", flush=True)
    return ok


def bench(kern, seqlen, timer, l2_bytes=L2_BYTES, refs=True):
    """Times `kern` at the FA3 grid's point of `seqlen` with `timer` (make_timer's), and cuDNN and FA2
    with the same timer unless refs is False."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cfg = kern.artifact.config
    dt, d, causal = torch_dtype(cfg["dtype"]), cfg["head_dim"], cfg["causal"]
    b, h = 16384 // seqlen, 2048 // d
    q, k, v = (torch.randn(b, seqlen, h, d, device="cuda", dtype=dt) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, seqlen, device="cuda", dtype=torch.float32)
    config = AttnConfig.from_key(cfg)
    problem = AttnProblem.of(q.shape, k.shape, config.dtype, causal=causal, softmax_scale=1 / math.sqrt(d))
    args = launch_args(config, problem, dict(q=q, k=k, v=v, o=o, lse=lse), l2_bytes)
    gr = grid(config, problem, torch.cuda.get_device_properties(0).multi_processor_count)
    t = timer(lambda: kern.launch(gr, args))
    import time
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        kern.launch(gr, args)
    host_us = (time.perf_counter() - t0) * 1e4
    torch.cuda.synchronize()
    fl = flops(b, h, seqlen, seqlen, d, causal)
    tf = lambda ms: fl / ms / 1e9  # noqa: E731
    if not refs:
        print(f"  time S{seqlen} l2 {l2_bytes}: fa4mlir {tf(t):.1f} TFLOP/s (section shift {args[16]}, kernel "
              f"{t * 1e3:.0f} us)", flush=True)
        return
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    res = {}
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel([be]):
            res[name] = timer(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
    print(f"  time S{seqlen}: fa4mlir {tf(t):.1f} TFLOP/s  cudnn {tf(res['cudnn']):.1f}  fa2 {tf(res['fa2']):.1f}  "
          f"ratio vs cudnn {res['cudnn'] / t:.3f}  (host {host_us:.0f} us/launch, kernel {t * 1e3:.0f} us)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--time-only", action="store_true")
    ap.add_argument("--seqlen", default="16384", help="timing seqlen(s), comma-separated")
    ap.add_argument("--match", action="append", default=[],
                    help="only kernels whose name contains one of these (repeatable)")
    ap.add_argument("--l2", default=str(L2_BYTES),
                    help="L2 bytes that size a causal grid's sections (launch_args), comma-separated: each "
                         "is timed without the SDPA references (1: sections of one head)")
    ap.add_argument("--heat-ms", type=float, default=HEAT_MS,
                    help="before each timing, launch the timed kernel back to back this long (fa4mlir/bench/timers.py)")
    a = ap.parse_args()
    l2s = [int(float(x)) for x in a.l2.split(",")]
    timer, _ = make_timer(warmup_ms=20, rep_ms=200, heat_ms=a.heat_ms)   # heated: fa4mlir/bench/timers.py says why
    bad = 0
    for art in Bundle.open(a.bundle).artifacts():
        if art.config.get("kernel") != "attention_fwd_sm90":
            continue
        if a.match and not any(m in art.name for m in a.match):
            continue
        kern = load(art)
        print(f"{art.name} [{(art.key or '')[:10]}] ({art.resources.get('registers')} regs, "
              f"{art.config.get('cubin_backend')})", flush=True)
        if not a.time_only:
            for case in ((1, 128, 128, 1, 1), (2, 1000, 1000, 4, 2), (1, 128, 1000, 2, 1), (1, 1000, 128, 2, 2),
                         (1, 1, 3, 1, 1), (1, 4224, 4224, 2, 1)):
                bad += not check(kern, *case)
        for seqlen in (int(x) for x in a.seqlen.split(",")):
            if len(l2s) == 1:
                bench(kern, seqlen, timer, l2s[0])
            else:
                for l2 in l2s:
                    bench(kern, seqlen, timer, l2, refs=False)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
