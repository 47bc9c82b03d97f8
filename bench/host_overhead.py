"""Host time per call of flash_attn_func, next to torch SDPA (cuDNN, FA2) and FA4 CuTe, on a problem
small enough that the GPU never holds the CPU back: a back-to-back loop of calls then runs at the
host's pace, and its wall time over the calls is what one call costs the CPU. MLIR-free; on the GPU
machine:

    python3 bench/host_overhead.py --bundle BUNDLE [--calls 3000] [--out host.json]

Rows (fa4mlir): `alloc` out and lse allocated by the call (the usual use); `given` out= and lse=
passed; `rotate8` eight sets of q, k, v, out, lse in turn (new addresses, descriptors kept);
`rotate64` sixty-four sets (more addresses than PreparedLaunch keeps: a TMA encode per tensor and
call); `first` the call cache emptied before each call (every check, the kernel lookup and the
packing: what each call cost before the cache); `op` the fa4mlir::flash_attn_fwd custom op called
through the dispatcher (what torch.compile's graphs and tracers call; a plain eager flash_attn_func
skips the dispatcher); `compiled` flash_attn_func inside torch.compile(fullgraph=True) (Inductor,
the compiled function's own call overhead included); `reduce-overhead` the same under
torch.compile(mode="reduce-overhead") (a CUDA-graph replay per call); `SDPA compiled` cuDNN SDPA
under torch.compile(fullgraph=True), for comparison. Each row also reports the GPU time per call of the
same loop (CUDA events), which must stay below the host time for the row to mean host cost.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def timed(fn, calls: int, torch) -> tuple[float, float]:
    """(host µs per call, GPU µs per call) of fn after a warm-up. Host: `calls` back-to-back calls
    timed with perf_counter. GPU: GPU_CALLS calls queued behind a GPU sleep long enough to cover
    their host time, between two events: the kernels alone, without the gaps a host-bound loop
    leaves between them."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(GPU_CALLS * host * 2 * 2e9))  # ~2 GHz clock cycles: twice their host time
    start.record()
    for _ in range(GPU_CALLS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return host * 1e6, start.elapsed_time(end) / GPU_CALLS * 1e3


GPU_CALLS = 200


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", required=True)
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--out", default=None, help="JSON result")
    p.add_argument("--shape", default="1,128,128,2,64", help="batch,seqlen_q,seqlen_k,heads,head_dim (bf16)")
    p.add_argument("--profile", default=None, metavar="CASE",
                   help="also print cProfile's top functions of this row (e.g. 'fa4mlir given')")
    args = p.parse_args(argv)

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from fa4mlir.bench.attention_bench import import_fa4_cute
    from fa4mlir import attention
    from fa4mlir.runtime import Bundle

    bundle = Bundle.open(args.bundle)
    b, sq, sk, h, d = (int(x) for x in args.shape.split(","))
    torch.manual_seed(0)

    def inputs():
        return tuple(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for s in (sq, sk, sk))

    q, k, v = inputs()
    fa4_func, fa4_info = import_fa4_cute()
    rows = []
    for causal in (False, True):
        def fa(q=q, k=k, v=v, **kw):
            return attention.flash_attn_func(q, k, v, causal=causal, bundle=bundle, **kw)

        out, lse = fa(return_lse=True)
        sets8 = [inputs() for _ in range(8)]
        sets64 = [inputs() for _ in range(64)]
        outs64 = [(torch.empty_like(x[0]), torch.empty(b, h, sq, device="cuda")) for x in sets64]
        turn = iter(range(10**9))

        def rotate(sets, outs):
            i = next(turn) % len(sets)
            return fa(*sets[i], out=outs[i][0], lse=outs[i][1])

        def first():
            attention.dense._CALLS.clear()
            return fa()

        cases = {
            "fa4mlir alloc": fa,
            "fa4mlir given": lambda: fa(out=out, lse=lse),
            "fa4mlir rotate8": lambda: rotate(sets8, outs64[:8]),
            "fa4mlir rotate64": lambda: rotate(sets64, outs64),
        }
        cases["fa4mlir first"] = first
        # the custom op and torch.compile: the bundle travels as its path (the op's schema)
        cases["fa4mlir op"] = lambda: torch.ops.fa4mlir.flash_attn_fwd(q, k, v, None, causal, args.bundle)

        def fa_path(q, k, v, causal=causal):
            return attention.flash_attn_func(q, k, v, causal=causal, bundle=args.bundle)
        torch._dynamo.reset()
        compiled = torch.compile(fa_path, fullgraph=True)
        overhead = torch.compile(fa_path, fullgraph=True, mode="reduce-overhead")
        cases["fa4mlir compiled"] = lambda: compiled(q, k, v)
        cases["fa4mlir reduce-overhead"] = lambda: (torch.compiler.cudagraph_mark_step_begin(), overhead(q, k, v))[1]
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FA2", SDPBackend.FLASH_ATTENTION)):
            def sdpa(backend=backend):
                with sdpa_kernel([backend]):
                    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            cases[name] = sdpa
        sdpa_compiled = torch.compile(lambda q, k, v, causal=causal: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal), fullgraph=True)
        cases["SDPA compiled"] = lambda: sdpa_compiled(qt, kt, vt)
        if fa4_func is not None:
            cases["FA4 CuTe"] = lambda: fa4_func(q, k, v, causal=causal)
        for name, fn in cases.items():
            calls = args.calls // 10 if name == "fa4mlir first" else args.calls
            host_us, gpu_us = timed(fn, calls, torch)
            if name == args.profile and not causal:
                import cProfile
                import pstats
                prof = cProfile.Profile()
                prof.runcall(lambda: [fn() for _ in range(calls)])
                pstats.Stats(prof).sort_stats("tottime").print_stats(18)
            rows.append({"case": name, "causal": causal, "host_us": host_us, "gpu_us": gpu_us,
                         "host_bound": host_us > gpu_us * 1.1, "calls": calls})
            print(f"{'causal' if causal else 'full  '} {name:<18} host {host_us:8.1f} us/call   "
                  f"GPU {gpu_us:8.1f} us/call{'' if rows[-1]['host_bound'] else '   (GPU-bound: not host cost)'}",
                  flush=True)
    result = {"shape": {"batch": b, "seqlen_q": sq, "seqlen_k": sk, "heads": h, "head_dim": d, "dtype": "bf16"},
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "fa4_cute": fa4_info,
              "python": sys.version.split()[0], "rows": rows}
    assert all(math.isfinite(r["host_us"]) for r in rows)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
