"""The runner `bench prefill` and `bench mla` share (MLIR-free: it runs on the GPU machine).

A benchmark is rows (``Row``: a shape, its FLOPs, backends and a check) in groups that share their
tensors. Per row, ``measure_row``: every backend is made and called once into NaN-poisoned memory
and checked by the FA rule, timed `--rounds` times in turn with fa4mlir.bench.timers' heated timer
(median kept), then called and checked again; a backend that cannot run a row is recorded as
`unsupported` (UNSUPPORTED kinds) or `error`, and neither stops the run. The CLI side: ``start``
(workloads, torch, timer, FA4-CuTe), ``run_group`` (build, measure, record and print a group's rows),
``finish`` (save, tables, exit code); the JSON header (``new_result``), its check
(``validate_result``) and the result table (``table_lines``) take each benchmark's schema and keys.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .results import check_header

UNSUPPORTED = (TypeError, NotImplementedError, LookupError, AttributeError)
STATUSES = ("measured", "unsupported", "error")
RESULT_KEYS = ("workload", "row", "backend", "status")
MEASURED_KEYS = ("ms", "tflops", "times_ms", "max_err", "torch_err", "bound", "fa_rule_ok", "nan_out")


class Unsupported(NotImplementedError):
    """A backend declared unable to run a row (e.g. fa4mlir's ALiBi before score_mod exists)."""


# ----------------------------------------------------------------------------------------------
# One row: make, poison, call and check; time in rounds; call and check again (pure: fakes test it)
# ----------------------------------------------------------------------------------------------

@dataclass
class Row:
    """A row to time. `backends` {label: make}: make() builds the timed call (it may raise: the
    row records why); check(out) -> {max_err, torch_err, bound, fa_rule_ok, nan_out}."""

    name: str
    workload: str
    shape: dict
    flops: float
    backends: dict[str, Callable[[], Callable[[], Any]]]
    check: Callable[[Any], dict]
    poison: Callable[[], None] = lambda: None
    notes: dict[str, str] = field(default_factory=dict)


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:400]


def failure(e: BaseException, when: str = "") -> dict:
    """The record of a backend that raised: unsupported (UNSUPPORTED kinds) or error."""
    status = "unsupported" if isinstance(e, UNSUPPORTED) else "error"
    return {"status": status, "reason": (f"{when}: " if when else "") + _error_text(e)}


FA_ATOL = 1e-5   # fa4mlir.testing.DEFAULT_ATOL


def fa_rule(out_err: float, lowp_err: float, atol: float = FA_ATOL) -> tuple[bool, float]:
    """(passes, bound) of the FA rule, as fa4mlir.testing.fa_rule (mirrored: fa4mlir.testing reaches
    the compiler lazily, and this module imports nothing that does; a test keeps the two equal)."""
    bound = 2.0 * lowp_err + atol
    return not (math.isnan(out_err) or math.isnan(lowp_err)) and out_err <= bound, bound


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _merge_checks(first: dict, last: dict) -> dict:
    errs = [c["max_err"] for c in (first, last)]
    err = math.nan if any(math.isnan(e) for e in errs) else max(errs)
    return {"max_err": _finite(err), "torch_err": _finite(first["torch_err"]), "bound": _finite(first["bound"]),
            "fa_rule_ok": bool(first["fa_rule_ok"] and last["fa_rule_ok"]),
            "nan_out": max(first["nan_out"], last["nan_out"])}


def measure_row(row: Row, timer: Callable, *, sync: Callable[[], None], rounds: int = 3) -> list[dict]:
    """Each backend made, called once into poison and checked; then timed `rounds` times in turn
    (b1, b2, ..., b1, b2, ...), the median kept; then called and checked once more. One record per
    backend, in row.backends' order."""
    records: dict[str, dict] = {}
    live: dict[str, tuple[Callable, dict, list]] = {}

    def attempt(label, step, when=""):
        try:
            return step()
        except Exception as e:  # noqa: BLE001  (a backend's failure is a result, not a crash)
            records[label] = failure(e, when)
            with contextlib.suppress(Exception):
                sync()
            return None

    for label, make in row.backends.items():
        def first_call(make=make):
            fn = make()
            row.poison()
            out = fn()
            sync()
            return fn, row.check(out)
        got = attempt(label, first_call)
        if got is not None:
            live[label] = (*got, [])
    for _ in range(max(1, int(rounds))):
        for label, (fn, _, times) in list(live.items()):
            ms = attempt(label, lambda fn=fn: float(timer(fn)), "while timed")
            if ms is None:
                del live[label]
            else:
                times.append(ms)
    for label, (fn, first, times) in live.items():
        def last_call(fn=fn):
            out = fn()
            sync()
            return row.check(out)
        last = attempt(label, last_call, "last call")
        if last is not None:
            ms = statistics.median(times)
            records[label] = {"status": "measured", "ms": ms, "tflops": row.flops / ms / 1e9, "times_ms": times,
                              **_merge_checks(first, last)}
    return [{"workload": row.workload, "row": row.name, "backend": label, **records[label],
             **({"note": row.notes[label]} if label in row.notes else {})} for label in row.backends]


# ----------------------------------------------------------------------------------------------
# Ratios, tables, exit code (pure: they work on the JSON)
# ----------------------------------------------------------------------------------------------

def measured(results: list[dict]) -> dict[tuple[str, str], dict]:
    """The measured results by (row, backend)."""
    return {(r["row"], r["backend"]): r for r in results if r.get("status") == "measured"}


def fa4mlir_ratios(results: list[dict], row: str) -> dict[str, float]:
    """fa4mlir's TFLOP/s over each other non-fa4mlir backend's on one row (where both were measured)."""
    got = {b: r for (rw, b), r in measured(results).items() if rw == row}
    mine = got.get("fa4mlir")
    if mine is None:
        return {}
    return {b: mine["tflops"] / r["tflops"] for b, r in got.items() if not b.startswith("fa4mlir")}


def ratios_line(row: str, ratios: dict[str, float]) -> str:
    """The line printed under a measured row: fa4mlir's TFLOP/s over the other backends'."""
    return f"{row:17s} fa4mlir / other: " + "  ".join(f"{b} {x:.3f}" for b, x in ratios.items())


def _f(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x is not None else "-".rjust(len(format(0.0, fmt)))


def format_result_line(r: dict) -> str:
    head = f"{r['row']:17s} {r['backend']:31s}"
    if r["status"] != "measured":
        return f"{head} {r['status']}: {r['reason'][:150]}"
    flag = "" if r["fa_rule_ok"] else "  ! FA rule" + (f" (NaN x{r['nan_out']})" if r["nan_out"] else "")
    return (f"{head} {r['ms'] * 1e3:9.1f} {r['tflops']:8.1f}  {_f(r['max_err'], '8.2e')} "
            f"{_f(r['bound'], '8.2e')}{flag}")


def table_lines(result: dict, title: str, line: Callable[[dict], str] = format_result_line) -> list[str]:
    """The result table: a header naming `title` ("prefill, bf16"), device and timer; one `line` a
    result; then fa4mlir's TFLOP/s ratios per row, where any were measured."""
    t = result.get("timer", {})
    lines = [f"{title}, {result.get('device', '?')}: {t.get('name', '?')} {t.get('stat', 'median')} of "
             f"{result.get('settings', {}).get('rounds', '?')} round(s), heat {t.get('heat_ms', '?')} ms",
             f"{'row':17s} {'backend':31s} {'us':>9s} {'TFLOP/s':>8s}  {'max_err':>8s} {'FA bound':>8s}"]
    lines += [line(r) for r in result["results"]]
    rows = list(dict.fromkeys(r["row"] for r in result["results"]))
    ratios = [(row, fa4mlir_ratios(result["results"], row)) for row in rows]
    if any(rs for _, rs in ratios):
        lines += ["", "fa4mlir TFLOP/s over other backends':"]
        lines += [f"  {row:17s} " + "  ".join(f"{b} {x:.3f}" for b, x in rs.items()) for row, rs in ratios if rs]
    return lines


def exit_code(result: dict) -> int:
    """1 when a measured fa4mlir result (any fa4mlir* label) breaks the FA rule, else 0."""
    bad = [r for r in result["results"] if r["backend"].startswith("fa4mlir") and r["status"] == "measured"
           and not r["fa_rule_ok"]]
    return 1 if bad else 0


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------

def new_result(schema: str, *, device: str, environment: dict, timer: dict, backends: dict, settings: dict,
               lists: tuple[str, ...] = ("rows", "results")) -> dict:
    """A result's header, in key order: schema, created, device, environment, timer, the optional
    backends' import reports (`backends`: {"fa4_cute": info, ...}), settings, an empty list per
    `lists` key, and complete (False until the run ends)."""
    return {"schema": schema, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device, "environment": environment, "timer": timer, **backends, "settings": settings,
            **{k: [] for k in lists}, "complete": False}


def validate_result(result: Any, schema: str, kind: str, required: tuple, row_keys: tuple, writer: str) -> dict:
    """Raise ValueError naming what is missing when `result` is not `kind` ("a prefill bench result"):
    the header (results.check_header), each row's `row_keys`, each result's keys and status."""
    check_header(result, schema, kind, required, writer)
    for i, row in enumerate(result["rows"]):
        if [k for k in row_keys if k not in row]:
            raise ValueError(f"row #{i} lacks {[k for k in row_keys if k not in row]}")
    for i, r in enumerate(result["results"]):
        need = RESULT_KEYS + (MEASURED_KEYS if r.get("status") == "measured" else ("reason",))
        if [k for k in need if k not in r]:
            raise ValueError(f"result #{i} lacks {[k for k in need if k not in r]}")
        if r["status"] not in STATUSES:
            raise ValueError(f"result #{i} has status {r['status']!r}; expected one of {STATUSES}")
    return result


def save_result(result: dict, path: str | os.PathLike, validate: Callable[[Any], dict]) -> None:
    from fa4mlir.artifacts import atomic_write
    atomic_write(Path(path), (json.dumps(validate(result), indent=1, allow_nan=False) + "\n").encode())


def load_result(path: str | os.PathLike, validate: Callable[[Any], dict]) -> dict:
    return validate(json.loads(Path(path).read_text()))


# ----------------------------------------------------------------------------------------------
# CLI (the GPU machine)
# ----------------------------------------------------------------------------------------------

@dataclass
class Session:
    """What ``start`` set up for a run: torch, the checked workload names, the timer, FA4-CuTe (or
    None) and the device's name and environment (prefill_workloads.environment, device popped)."""

    torch: Any
    names: list[str]
    timer: Callable
    timer_desc: dict
    fa4: Any
    fa4_info: dict
    device: str
    environment: dict


def start(args, what: str, parse_workloads: Callable[[str | None], list[str]]) -> Session | int:
    """The start of `python -m fa4mlir bench <what>`: --workloads checked before torch is touched,
    a CUDA device (else 2, said on stderr), --bundle as FA4MLIR_BUNDLE, the timer and FA4-CuTe (unless
    --no-fa4)."""
    try:
        names = parse_workloads(args.workloads)
    except ValueError as e:
        print(f"{what} bench: {e}", file=sys.stderr)
        return 2
    import torch

    from .decode_bench import import_fa4
    from .prefill_workloads import environment
    from .timers import make_timer
    if not torch.cuda.is_available():
        print(f"{what} bench: torch sees no CUDA device; run it on the GPU machine", file=sys.stderr)
        return 2
    if args.bundle:
        os.environ["FA4MLIR_BUNDLE"] = args.bundle
    timer, timer_desc = make_timer(args.warmup_ms, args.rep_ms, args.timer == "auto", args.heat_ms)
    fa4, fa4_info = (None, {"available": False, "error": "--no-fa4"}) if args.no_fa4 else import_fa4()
    env = environment(torch)
    device = env.pop("device")
    return Session(torch, names, timer, timer_desc, fa4, fa4_info, device, env)


def run_group(session: Session, result: dict, group: str, row_names, build: Callable[[], list[Row]], rounds: int, *,
              row_entry: Callable[[Row], dict], line: Callable[[dict], str] = format_result_line,
              annotate: Callable[[Row, dict], None] | None = None) -> None:
    """One group of rows sharing their tensors: `build()` them (a failure, e.g. out of memory making
    the inputs, records every name of `row_names` as failed at setup), then per row its `row_entry`
    into result["rows"], each backend's record (`annotate`d) into result["results"], printed by `line`,
    and fa4mlir's ratios; the tensors are freed after."""
    torch = session.torch
    try:
        built = build()
    except Exception as e:  # noqa: BLE001  (e.g. out of memory making the inputs)
        result["results"] += [{"workload": group, "row": r, "backend": "*", **failure(e, "setup")} for r in row_names]
        print(f"{group}: setup fails: {_error_text(e)}", flush=True)
        built = []
    for row in built:
        result["rows"].append(row_entry(row))
        for rec in measure_row(row, session.timer, sync=torch.cuda.synchronize, rounds=rounds):
            if annotate is not None:
                annotate(row, rec)
            result["results"].append(rec)
            print(line(rec), flush=True)
        ratios = fa4mlir_ratios(result["results"], row.name)
        if ratios:
            print(ratios_line(row.name, ratios), flush=True)
    del built
    torch.cuda.empty_cache()


def finish(result: dict, out: str, save: Callable[[dict, str], None], format_tables: Callable[[dict], str]) -> int:
    """The end of a run: the result marked complete and saved to `out`, its tables printed; the exit code."""
    result["complete"] = True
    save(result, out)
    print()
    print(format_tables(result))
    print(f"\nwrote {out}")
    return exit_code(result)
