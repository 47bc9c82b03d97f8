"""GEMM benchmark: every sm_90a GEMM in a bundle vs torch.matmul, same tensors, same timer.

Run on the GPU machine (no MLIR needed):  python -m fa4mlir bench --bundle BUNDLE --out gemm.json
Times are medians of triton.testing.do_bench; TFLOP/s = 2*M*N*K / time. Prints a table, writes JSON.
"""
from __future__ import annotations

import json
import sys

SIZES = ((8192, 8192, 8192), (4096, 4096, 4096))


def main(bundle_dir: str, out_path: str) -> int:
    import torch
    from triton.testing import do_bench

    from fa4mlir.gemm import grid_for
    from fa4mlir.runtime import Bundle, load
    from fa4mlir.testing import check_gemm

    bundle = Bundle.open(bundle_dir)
    kernels = [load(a) for a in bundle.artifacts() if a.config.get("kernel") == "gemm_sm90"]
    rows = []
    dev = torch.cuda.get_device_name()
    for m, n, k in SIZES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * m * n * k
        t_torch = do_bench(lambda: torch.matmul(a, b.T), warmup=50, rep=300, return_mode="median")
        for kern in kernels:
            if kern.artifact.config.get("dtype") != "bf16":
                continue
            check = check_gemm(kern, m, n, k)
            grid = grid_for(kern.artifact.config, m, n)
            fn = lambda: kern.launch(grid, [a, b, c, m, n, k])  # noqa: E731
            t = do_bench(fn, warmup=50, rep=300, return_mode="median")
            t_torch2 = do_bench(lambda: torch.matmul(a, b.T), warmup=50, rep=300, return_mode="median")
            tt = min(t_torch, t_torch2)
            rows.append({"device": dev, "kernel": kern.artifact.name, "m": m, "n": n, "k": k,
                         "ms": t, "tflops": flops / t / 1e9, "torch_ms": tt, "torch_tflops": flops / tt / 1e9,
                         "ratio": tt / t, "correct": check["ok"], "max_err": check["max_err"],
                         "registers": kern.artifact.resources.get("registers"),
                         "backend": kern.artifact.config.get("cubin_backend", "?")})
    print(f"\nGEMM bf16 on {dev} (median of do_bench)")
    print(f"{'kernel':40s} {'backend':9s} {'M=N=K':>6s} {'TFLOP/s':>8s} {'torch':>8s} {'ratio':>6s} ok")
    for r in rows:
        print(f"{r['kernel']:40s} {r['backend']:9s} {r['m']:6d} {r['tflops']:8.1f} {r['torch_tflops']:8.1f} {r['ratio']:6.3f} {r['correct']}")
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "gemm-bench.json"))
