"""The benchmarks' timer: a call is timed at its own sustained clock, whatever ran before it.

An H200 running attention at these sizes sits at its 700 W board limit, and its SM clock (1500 to
1980 MHz) follows the power of the last second or so, not of the kernel being timed. Timed with
do_bench's 25 ms warm-up, the same kernel read 5-10% apart depending on which backend ran before it
(bench/attention_order.py; notes/RESULTS.md, [D-heat]). After a second of calls
of the timed kernel itself, its rate stays flat and no longer depends on what ran before. So
`make_timer(heat_ms=...)` first calls the function back to back for heat_ms, then times it.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

HEAT_MS = 1000.0   # back-to-back calls of the timed function before each timing (see the docstring)

_L2_FLUSH: list = []


def heat(fn: Callable[[], object], ms: float, sync: Callable[[], None],
         clock: Callable[[], float] = time.perf_counter, batch: int = 4) -> int:
    """Calls fn back to back until `ms` of wall time have passed, `batch` calls between syncs (the
    queue never holds more than that), and returns the number of calls; none when ms <= 0."""
    calls, t0 = 0, clock()
    while (clock() - t0) * 1e3 < ms:
        for _ in range(batch):
            fn()
        calls += batch
        sync()
    return calls


def make_timer(warmup_ms: float = 25, rep_ms: float = 100, use_triton: bool = True,
               heat_ms: float = 0.0) -> tuple[Callable, dict]:
    """(timer(fn) -> median ms, description for the JSON): `heat` for heat_ms, then
    triton.testing.do_bench's median (or the same method with CUDA events when triton does not
    import, or use_triton is False)."""
    why = "--timer events"
    base, desc = None, None
    if use_triton:
        try:
            import triton
            from triton.testing import do_bench
            base = lambda fn: float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))  # noqa: E731
            desc = {"name": "triton.testing.do_bench", "triton": triton.__version__}
        except Exception as e:  # noqa: BLE001  (any import failure means: use CUDA events)
            why = f"{type(e).__name__}: {e}"
    if base is None:
        base = lambda fn: cuda_event_median_ms(fn, warmup_ms, rep_ms)  # noqa: E731
        desc = {"name": "cuda-events", "why": why}
    desc = {**desc, "stat": "median", "warmup_ms": warmup_ms, "rep_ms": rep_ms, "l2_flush": True,
            "heat_ms": heat_ms}
    if heat_ms <= 0:
        return base, desc

    def timer(fn):
        import torch
        heat(fn, heat_ms, torch.cuda.synchronize)
        return base(fn)
    return timer, desc


def l2_flush_buffer():
    """The 256 MiB device buffer whose zeroing flushes the L2 between timed calls (made once)."""
    import torch
    if not _L2_FLUSH:
        _L2_FLUSH.append(torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda"))
    return _L2_FLUSH[0]


def cuda_event_median_ms(fn: Callable, warmup_ms: float, rep_ms: float) -> float:
    """do_bench's method with torch CUDA events: estimate from 5 calls, warm for warmup_ms, then time
    rep_ms worth of calls one event pair each, zeroing a 256 MiB buffer before each (L2 flush)."""
    import torch
    flush = l2_flush_buffer()
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        fn()
    n_rep = max(1, int(rep_ms / estimate_ms))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return float(statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)))
