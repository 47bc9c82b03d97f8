"""Does a backend's timing depend on what ran just before it? A development tool for the attention
benchmark's method (fa4mlir/bench/attention_bench.py times cuDNN, FA2, FA4 CuTe and fa4mlir in turn, so each
backend always follows the same one). MLIR-free; on the GPU machine:

    python3 bench/attention_order.py --bundle BUNDLE [--points 256:4096:0,128:16384:0] [--reps 3]
                                     [--heat-ms 300] [--out order.json]

For every point, repetition, predecessor P (each backend, or `idle`: the GPU left idle) and target T:
run P back to back for --heat-ms (or sleep that long), then time T with do_bench alone (median,
--warmup-ms / --rep-ms as attention_bench.py's defaults, no heat of its own). Also times T after
--heat-ms of itself (`self`). A thread samples the SM clock and board power through NVML
(nvidia-ml-py) while T is timed (the power reading lags by about a second). Prints, per point,
each target's median TFLOP/s and SM clock by predecessor; writes every sample to --out.

    python3 bench/attention_order.py --bundle BUNDLE --series-ms 2500 --heat-ms 1000 --reps 1

runs each target back to back for 2.5 s after 1 s of each predecessor instead, and prints its
TFLOP/s in 100 ms buckets: how long it takes to reach its sustained rate (what fa4mlir/bench/timers.py's
heat is sized by).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for bench and fa4mlir
from fa4mlir.bench import timers  # noqa: E402
from fa4mlir.bench.attention_bench import Point, candidates_for, import_fa4_cute  # noqa: E402


class Sampler:
    """SM clock (MHz) and power (W) every `period` s through NVML, in a thread; `window()` averages
    the samples taken between two host times. Empty when NVML does not load (then no clocks shown)."""

    def __init__(self, period: float = 0.005):
        self.samples: list[tuple[float, float, float]] = []
        self.error = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml, self._h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception as e:  # noqa: BLE001  (clocks are extra information)
            self.error, self._nvml = f"{type(e).__name__}: {e}", None
        self._stop, self._period = threading.Event(), period
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        if self._nvml:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._nvml:
            self._thread.join()

    def _run(self):
        n, h = self._nvml, self._h
        while not self._stop.is_set():
            clock = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
            power = n.nvmlDeviceGetPowerUsage(h) / 1000.0
            self.samples.append((time.perf_counter(), clock, power))
            time.sleep(self._period)

    def window(self, t0: float, t1: float) -> tuple[float | None, float | None]:
        got = [(c, p) for t, c, p in self.samples if t0 <= t <= t1]
        if not got:
            return None, None
        return statistics.mean(c for c, _ in got), statistics.mean(p for _, p in got)


def heat(fn, ms: float) -> None:
    """fn back to back for ms (timers.heat), or the GPU left idle that long when fn is None."""
    torch.cuda.synchronize()
    if fn is None:
        time.sleep(ms / 1e3)
    else:
        timers.heat(fn, ms, torch.cuda.synchronize, batch=8)


def series(fn, ms: float, flush) -> list[tuple[float, float]]:
    """Calls fn back to back for `ms` (each after an L2 flush, as do_bench does), timing each with
    events; returns (ms since the start, call ms) per call."""
    out, t0 = [], time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        evs = []
        for _ in range(8):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            evs.append((s, e))
        torch.cuda.synchronize()
        now = (time.perf_counter() - t0) * 1e3
        out += [(now, s.elapsed_time(e)) for s, e in evs]
    return out


def backends(d: int, s: int, causal: bool, bundle: str) -> dict:
    """{backend: call} on fresh inputs of the FA3 grid's point (head_dim d, seqlen s): the attention
    bench's candidates (attention_bench.candidates_for), each call inside its backend's context."""
    from fa4mlir.attention import flash_attn_func
    from fa4mlir.runtime import Bundle
    point = Point(d, s, causal)
    q, k, v = (torch.randn(point.batch, s, point.heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cands = candidates_for(point, q, k, v, torch=torch, dtype="bf16", api=flash_attn_func, api_error=None,
                           select_entry=None, bundle=Bundle.open(bundle), variants=[], mode="best", loaded={},
                           fa4_func=import_fa4_cute()[0])

    def in_context(c):
        fn = c.make()

        def call():
            with c.context():
                return fn()
        return call
    out = {c.name: in_context(c) for c in cands}
    for fn in out.values():   # module loads, JIT compiles, graph builds
        fn()
    torch.cuda.synchronize()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--points", default="256:4096:0,256:8192:0,128:16384:0", help="D:S:causal, comma-separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--heat-ms", type=float, default=300.0)
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--rep-ms", type=float, default=100.0)
    ap.add_argument("--targets", default="", help="only these targets (comma-separated; default all)")
    ap.add_argument("--out", default="order.json")
    ap.add_argument("--series-ms", type=float, default=0.0,
                    help="instead: after each predecessor, run the target this long and print its TFLOP/s "
                         "in 100 ms buckets (how long a backend takes to reach its sustained speed)")
    a = ap.parse_args()
    if a.series_ms:
        return run_series(a)
    records = []
    with Sampler() as smp:
        if smp.error:
            print(f"no NVML clocks: {smp.error}", flush=True)
        for spec in a.points.split(","):
            d, s, c = (int(x) for x in spec.split(":"))
            fns = backends(d, s, bool(c), a.bundle)
            fl = Point(d, s, bool(c)).flops
            targets = [t for t in fns if not a.targets or t in a.targets.split(",")]
            preds = ["idle", *fns, "self"]
            for rep in range(a.reps):
                for pred in preds:
                    for tgt in targets:
                        heat(fns[tgt] if pred == "self" else fns.get(pred), a.heat_ms)
                        t0 = time.perf_counter()
                        ms = do_bench(fns[tgt], warmup=a.warmup_ms, rep=a.rep_ms, return_mode="median")
                        clock, power = smp.window(t0, time.perf_counter())
                        records.append({"head_dim": d, "seqlen": s, "causal": bool(c), "rep": rep, "pred": pred,
                                        "target": tgt, "ms": ms, "tflops": fl / ms / 1e9, "sm_mhz": clock,
                                        "watts": power})
            print(f"\nD{d} S{s} causal={bool(c)}: median TFLOP/s (SM MHz, W) of {a.reps} reps, rows = target, "
                  f"columns = what ran for {a.heat_ms:.0f} ms before", flush=True)
            print(f"{'':10s}" + "".join(f"{p:>22s}" for p in preds))
            for tgt in targets:
                row = f"{tgt:10s}"
                for pred in preds:
                    rs = [r for r in records if (r["head_dim"], r["seqlen"], r["causal"]) == (d, s, bool(c))
                          and r["target"] == tgt and r["pred"] == pred]
                    tf = statistics.median(r["tflops"] for r in rs)
                    mhz = [r["sm_mhz"] for r in rs if r["sm_mhz"]]
                    w = [r["watts"] for r in rs if r["watts"]]
                    extra = f" ({statistics.median(mhz):.0f}, {statistics.median(w):.0f})" if mhz else ""
                    row += f"{tf:>10.1f}{extra:>12s}"
                print(row, flush=True)
            with open(a.out, "w") as f:
                json.dump({"args": vars(a), "nvml_error": smp.error, "records": records}, f, indent=1)
    return 0


def run_series(a) -> int:
    flush = timers.l2_flush_buffer()
    records = []
    for spec in a.points.split(","):
        d, s, c = (int(x) for x in spec.split(":"))
        fns = backends(d, s, bool(c), a.bundle)
        fl = Point(d, s, bool(c)).flops
        targets = [t for t in fns if t != "fa2" and (not a.targets or t in a.targets.split(","))]
        print(f"\nD{d} S{s} causal={bool(c)}: TFLOP/s in 100 ms buckets after {a.heat_ms:.0f} ms of the predecessor",
              flush=True)
        for rep in range(a.reps):
            for pred in ["idle", *targets]:
                for tgt in targets:
                    heat(fns.get(pred), a.heat_ms)
                    pts = series(fns[tgt], a.series_ms, flush)
                    buckets = {}
                    for t, ms in pts:
                        buckets.setdefault(int(t // 100), []).append(ms)
                    tf = [fl / statistics.median(v) / 1e9 for _, v in sorted(buckets.items())]
                    records.append({"head_dim": d, "seqlen": s, "causal": bool(c), "rep": rep, "pred": pred,
                                    "target": tgt, "calls": pts})
                    print(f"  {tgt:9s} after {pred:9s} " + " ".join(f"{x:4.0f}" for x in tf), flush=True)
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "records": records}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
