"""Attention forward benchmark: fa4mlir vs torch SDPA (cuDNN, FA2) and FA4 CuTe on the FA3 grid.

Run on the GPU machine (no MLIR needed), from the repo root:

    python3 -m fa4mlir bench attention --bundle bundle --out attention.json --png attention.png
    python3 -m fa4mlir bench attention --bundle bundle --quick        # 2-point smoke

Grid (FlashAttention-3 paper): batch * seqlen = 16384 tokens, heads * head_dim = 2048, seqlen in
512..16384, head_dim in 64, 128, 256, causal and not. Every point runs in one process on the same
fresh `torch.randn` q, k, v ([B, S, H, D]; SDPA gets contiguous [B, H, S, D] copies made before
timing), with one timer for every backend: first --heat-ms (1 s) of back-to-back calls of the
timed backend itself, so it runs at its own sustained clock whatever ran before it (fa4mlir/bench/timers.py
says why), then `triton.testing.do_bench` median when triton imports (as
shared/anchors/anchors_fwd.py), else a CUDA-event median with the same warmup/rep/L2 flush.
TFLOP/s = attention_sm90_config.flops (4·B·H·S²·D, halved when causal) / time. Before any timing, a
warm-up pass calls every backend once at the shortest point of each (head_dim, causal): module loads,
FA4 CuTe's JIT compiles and cuDNN's graph builds happen there, not next to a timed point
(`--no-warmup-pass` skips it).

fa4mlir is timed through `fa4mlir.attention.flash_attn_func(..., bundle=...)` (label `api:<tile>`,
the tile of the bundle entry it selects). `--variants all` also times every attention kernel of the bundle
that matches dtype/head_dim/causal, launched directly with the kernel's launch contract (grid,
launch_args; output and LSE allocated inside the timed call, as the API and SDPA do), labelled by
tile (`bn128-s2-pp`: bn 128, 2 stages, ping-pong). The table's fa4mlir column is the fastest variant
whose output is within --tol of the reference (cuDNN; FA2 then FA4 when cuDNN fails).

JSON (schema "fa4mlir-attention-bench/1"): environment (device, torch, CUDA, cuDNN, triton, FA4
versions), timer, run settings, `variants` (config and compile resources, registers included, of
every bundle kernel considered), `points` (one per grid point: shape, flops, reference, `backends`
{name: {ms, tflops, max_abs_diff, ok} or {error}}, `fa4mlir_variants` {label: same + path}, flags),
`summary` (see `summarize`). Written after every point, so a run cut short keeps what it measured;
`--resume` runs only the points --out lacks (same device, dtype, timer and settings, else it stops
with what differs) and writes them all there: the full grid took 9 minutes with FA4 CuTe on an H200,
so a device call of 600 s can run it in two parts (e.g. `--head-dims 64,128`, then `--resume`).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .results import check_header
from .timers import HEAT_MS, make_timer

SCHEMA = "fa4mlir-attention-bench/1"
TOKENS = 16384                 # batch * seqlen, for every point
HIDDEN = 2048                  # heads * head_dim, for every point
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
QUICK_POINTS = ((128, 1024, False), (128, 4096, True))   # (head_dim, seqlen, causal)
TOLERANCE = 5e-2               # max |o - o_ref| above which a point is flagged
SUMMARY_MIN_SEQLEN = 1024      # the summary's geometric means leave out the launch-bound 512
REFERENCE_ORDER = ("cudnn", "fa2", "fa4-cute")
BACKENDS = {"fa4mlir": "fa4mlir", "cudnn": "cuDNN", "fa2": "FA2", "fa4-cute": "FA4-CuTe"}
BACKEND_DESCRIPTIONS = {
    "fa4mlir": "fa4mlir, fastest correct variant",
    "cudnn": "torch SDPA, CUDNN_ATTENTION",
    "fa2": "torch SDPA, FLASH_ATTENTION (FA2)",
    "fa4-cute": "FlashAttention-4 CuTe DSL",
}
DTYPES = {"bf16": ("bf16", "bfloat16"), "fp16": ("f16", "float16"), "f16": ("f16", "float16")}


# ----------------------------------------------------------------------------------------------
# The grid
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    head_dim: int
    seqlen: int
    causal: bool

    @property
    def batch(self) -> int:
        return TOKENS // self.seqlen

    @property
    def heads(self) -> int:
        return HIDDEN // self.head_dim

    @property
    def flops(self) -> float:
        from fa4mlir.kernels.attention_sm90_config import flops
        return flops(self.batch, self.heads, self.seqlen, self.seqlen, self.head_dim, self.causal)

    def to_json(self) -> dict:
        return {"head_dim": self.head_dim, "seqlen": self.seqlen, "causal": self.causal,
                "batch": self.batch, "heads": self.heads, "flops": self.flops}


def grid_points(head_dims: Iterable[int] = HEAD_DIMS, seqlens: Iterable[int] = SEQLENS,
                causal: str = "both") -> list[Point]:
    """Points ordered by head_dim, then causal (no first), then seqlen: the table order."""
    modes = {"both": (False, True), "no": (False,), "yes": (True,)}
    if causal not in modes:
        raise ValueError(f"causal must be one of {list(modes)}, got {causal!r}")
    points = []
    for d in head_dims:
        if d <= 0 or HIDDEN % d:
            raise ValueError(f"head_dim {d} does not divide heads*head_dim = {HIDDEN}; pick from {HEAD_DIMS}")
        for c in modes[causal]:
            for s in seqlens:
                if s <= 0 or TOKENS % s:
                    raise ValueError(f"seqlen {s} does not divide batch*seqlen = {TOKENS}; pick from {SEQLENS}")
                points.append(Point(int(d), int(s), c))
    return points


def quick_points() -> list[Point]:
    return [Point(d, s, c) for d, s, c in QUICK_POINTS]


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


# ----------------------------------------------------------------------------------------------
# fa4mlir variants: a bundle's attention kernels, labelled by tile
# ----------------------------------------------------------------------------------------------

_LABEL_KEYS = ("kernel", "dtype", "head_dim", "causal", "bn", "stages", "pingpong", "cubin_backend")


def variant_label(config: dict, with_backend: bool = False) -> str:
    """`bn128-s2-pp` (bn 128, 2 stages, ping-pong); other fields that differ from AttnConfig's
    defaults follow as key=value, and with_backend the cubin backend (`-ptxas`)."""
    from fa4mlir.kernels.attention_sm90_config import AttnConfig
    defaults = AttnConfig().__dict__
    parts = [f"bn{config.get('bn', '?')}", f"s{config.get('stages', '?')}",
             "pp" if config.get("pingpong", True) else "nopp"]
    parts += [f"{k}={v}" for k, v in sorted(config.items())
              if k not in _LABEL_KEYS and k in defaults and defaults[k] != v]
    if with_backend:
        parts.append(str(config.get("cubin_backend", "?")))
    return "-".join(parts)


def bundle_variants(artifacts: Iterable[Any], dtype: str, head_dim: int, causal: bool) -> list[tuple[str, Any]]:
    """(label, artifact) for each attention kernel matching dtype/head_dim/causal. Labels name the
    tile; the cubin backend, then the cache key, are added only where the tile alone is ambiguous."""
    from fa4mlir.kernels.attention_sm90_config import KERNEL
    hits = [a for a in artifacts if a.config.get("kernel") == KERNEL and a.config.get("dtype") == dtype
            and a.config.get("head_dim") == head_dim and bool(a.config.get("causal")) == causal]
    labels = [variant_label(a.config) for a in hits]
    labels = [variant_label(a.config, with_backend=True) if labels.count(lab) > 1 else lab
              for lab, a in zip(labels, hits)]
    return [(f"{lab}-{(a.key or a.cubin_sha256)[:8]}" if labels.count(lab) > 1 else lab, a)
            for lab, a in zip(labels, hits)]


def default_variants(variants: list[tuple[str, Any]], dtype: str, head_dim: int, causal: bool,
                     select_entry: Callable | None = None, entries: list | None = None,
                     seqlen_k: int | None = None) -> list[tuple[str, Any]]:
    """The variant(s) flash_attn_func runs at seqlen_k: the one its select_entry picks when given,
    else every variant with default_config's tiles."""
    if select_entry is not None and entries is not None:
        with contextlib.suppress(Exception):
            key = select_entry(entries, dtype, head_dim, causal, seqlen_k=seqlen_k).get("key")
            picked = [(lab, a) for lab, a in variants if a.key == key]
            if picked:
                return picked
    from fa4mlir.kernels.attention_sm90_config import TILE_FIELDS, default_config
    default = default_config(dtype, head_dim, causal, seqlen_k)
    tiles = {k: getattr(default, k) for k in TILE_FIELDS}
    return [(lab, a) for lab, a in variants if all(a.config.get(k) == v for k, v in tiles.items())]


def variant_info(label: str, artifact: Any) -> dict:
    r = artifact.resources
    return {"label": label, "name": artifact.name, "arch": artifact.arch, "key": artifact.key,
            "head_dim": artifact.config.get("head_dim"), "causal": artifact.config.get("causal"),
            "dtype": artifact.config.get("dtype"), "config": dict(artifact.config),
            "registers": r.get("registers"), "spill_stores": r.get("spill_stores"),
            "spill_loads": r.get("spill_loads"), "smem_bytes": artifact.smem_bytes,
            "threads": r.get("threads"), "cubin_backend": r.get("cubin_backend", artifact.config.get("cubin_backend")),
            "setmaxnreg_ignored": r.get("setmaxnreg_ignored")}


# ----------------------------------------------------------------------------------------------
# One point: time every candidate, then check outputs against the reference
# ----------------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """One thing to time. `make` builds the timed call (and may raise: recorded, never fatal);
    `to_bshd` maps its output to [B, S, H, D] for the check; `context` wraps warmup and timing."""

    name: str                                  # a BACKENDS key
    make: Callable[[], Callable[[], Any]]
    variant: str | None = None                 # fa4mlir only: the variant label
    path: str = ""                             # fa4mlir only: "flash_attn_func" or "launch"
    to_bshd: Callable[[Any], Any] = lambda o: o
    context: Callable[[], Any] = contextlib.nullcontext


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:600]


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def run_point(point: Point, candidates: list[Candidate], timer: Callable, *, sync: Callable[[], None],
              diff: Callable[[Any, Any], float], tol: float = TOLERANCE, flops: float | None = None,
              rounds: int = 1) -> dict:
    """Time each candidate, then compare the first and last outputs of each with the reference
    backend's first output. Every candidate is made and called once, then timed `rounds` times in
    turn (c1, c2, ..., c1, c2, ...: a drift of the GPU's clocks during the point spreads over all of
    them instead of favouring the ones timed first); its time is the median of its rounds, each
    kept in ms_rounds. Returns the point's JSON record."""
    flops = point.flops if flops is None else flops
    rec = {**point.to_json(), "flops": flops, "backends": {}, "fa4mlir_variants": {}, "flags": []}
    outputs: dict[tuple[str, str | None], tuple[Any, Any]] = {}
    entries: dict[tuple[str, str | None], dict] = {}

    def attempt(key, c, step):
        """step() inside the candidate's context; on failure record the error and return None."""
        try:
            with c.context():
                return step()
        except Exception as e:  # noqa: BLE001  (a backend's failure is a result, not a crash)
            entries[key] = {"error": _error_text(e)}
            with contextlib.suppress(Exception):
                sync()
            return None

    made: dict[tuple[str, str | None], tuple[Candidate, Callable, Any, list]] = {}
    for c in candidates:
        key = (c.name, c.variant)

        def first_call(c=c):
            fn = c.make()
            out = fn()
            sync()
            return fn, out
        got = attempt(key, c, first_call)
        if got is not None:
            made[key] = (c, *got, [])
    for _ in range(max(1, int(rounds))):
        for key, (c, fn, _, times) in list(made.items()):
            ms = attempt(key, c, lambda fn=fn: float(timer(fn)))
            if ms is None:
                del made[key]
            else:
                times.append(ms)
    for key, (c, fn, first, times) in made.items():
        def last_call(fn=fn):
            out = fn()
            sync()
            return (out,)
        got = attempt(key, c, last_call)
        if got is not None:
            ms = statistics.median(times)
            entries[key] = {"ms": ms, "tflops": flops / ms / 1e9,
                            **({"ms_rounds": times} if len(times) > 1 else {})}
            outputs[key] = (c.to_bshd(first), c.to_bshd(got[0]))
    for c in candidates:
        key = (c.name, c.variant)
        entry = entries[key]
        if c.variant is not None:
            entry = {"path": c.path, **entry}
        entries[key] = entry
        if c.name == "fa4mlir":
            rec["fa4mlir_variants"][c.variant] = entry
        else:
            rec["backends"][c.name] = entry
    reference = next((n for n in REFERENCE_ORDER if (n, None) in outputs), None)
    rec["reference"] = reference
    if reference is None:
        rec["flags"].append("no reference output (cuDNN, FA2 and FA4-CuTe all failed): nothing checked")
    else:
        ref = outputs[(reference, None)][0]
        for key, (first, last) in outputs.items():
            if key == (reference, None):
                continue
            entry = entries[key]
            try:
                d = max(float(diff(first, ref)), float(diff(last, ref)))
            except Exception as e:  # noqa: BLE001
                entry["check_error"], entry["ok"] = _error_text(e), False
                rec["flags"].append(f"{_name(*key)}: check failed: {entry['check_error']}")
                continue
            entry["max_abs_diff"], entry["ok"] = _finite(d), math.isfinite(d) and d <= tol
            if not entry["ok"]:
                rec["flags"].append(f"{_name(*key)}: max |o - o_{reference}| = {d:.3g} > {tol:g}")
    outputs.clear()
    rec["flags"] += [f"fa4mlir[{label}]: {e['error'][:300]}" for label, e in rec["fa4mlir_variants"].items()
                     if "error" in e]
    rec["backends"] = {"fa4mlir": best_variant(rec["fa4mlir_variants"]), **rec["backends"]}
    return rec


def _name(backend: str, variant: str | None) -> str:
    return f"{backend}[{variant}]" if variant else backend


def best_variant(variants: dict[str, dict]) -> dict:
    """The fastest variant that passed the check (or had nothing to check against); when none did,
    the fastest measured one (still flagged); else an error listing each variant's failure."""
    timed = {k: v for k, v in variants.items() if "ms" in v}
    good = {k: v for k, v in timed.items() if v.get("ok", True)}
    pool = good or timed
    if not pool:
        why = "; ".join(f"{k}: {v.get('error', '?')}" for k, v in variants.items())
        return {"error": why or "no fa4mlir variant for this point"}
    label = min(pool, key=lambda k: pool[k]["ms"])
    return {**pool[label], "variant": label}


# ----------------------------------------------------------------------------------------------
# Summary and tables (work on the JSON, so they run on a loaded file as well)
# ----------------------------------------------------------------------------------------------

def geomean(xs: Iterable[float]) -> float:
    xs = list(xs)
    if not xs or any(x <= 0 for x in xs):
        raise ValueError(f"geomean needs a non-empty list of positive numbers, got {xs}")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def tflops_of(point: dict, backend: str) -> float | None:
    return point.get("backends", {}).get(backend, {}).get("tflops")


def ratio(point: dict, backend: str) -> float | None:
    """fa4mlir TFLOP/s / backend TFLOP/s at one point, None where either was not measured."""
    mine, other = tflops_of(point, "fa4mlir"), tflops_of(point, backend)
    return mine / other if mine and other else None


def ratio_stats(points: list[dict], backend: str, min_seqlen: int = SUMMARY_MIN_SEQLEN) -> dict | None:
    """Geometric mean and minimum of fa4mlir/backend over points with seqlen >= min_seqlen."""
    rs = [(ratio(p, backend), p) for p in points if p["seqlen"] >= min_seqlen]
    rs = [(r, p) for r, p in rs if r is not None]
    if not rs:
        return None
    r_min, p_min = min(rs, key=lambda t: t[0])
    return {"geomean": geomean(r for r, _ in rs), "min": r_min, "n": len(rs),
            "min_at": {k: p_min[k] for k in ("head_dim", "seqlen", "causal")}}


def summarize(points: list[dict], min_seqlen: int = SUMMARY_MIN_SEQLEN) -> dict:
    groups = []
    for d, c in sorted({(p["head_dim"], p["causal"]) for p in points}):
        ps = [p for p in points if p["head_dim"] == d and p["causal"] == c]
        groups.append({"head_dim": d, "causal": c,
                       **{f"vs_{b}": ratio_stats(ps, b, min_seqlen) for b in ("cudnn", "fa2", "fa4-cute")}})
    checked = [p for p in points if p.get("backends", {}).get("fa4mlir", {}).get("ok") is not None]
    return {"min_seqlen": min_seqlen, "groups": groups,
            "overall": {f"vs_{b}": ratio_stats(points, b, min_seqlen) for b in ("cudnn", "fa2", "fa4-cute")},
            "fa4mlir_measured": sum(tflops_of(p, "fa4mlir") is not None for p in points),
            "fa4mlir_checked": len(checked),
            "fa4mlir_ok": sum(p["backends"]["fa4mlir"]["ok"] is True for p in checked),
            "fa4mlir_variants_flagged": sum(v.get("ok") is False or "error" in v for p in points
                                            for v in p.get("fa4mlir_variants", {}).values()),
            "points": len(points), "flags": [f"D={p['head_dim']} S={p['seqlen']} causal={p['causal']}: {f}"
                                             for p in points for f in p.get("flags", [])]}


def _f(x: float | None, fmt: str = "7.1f") -> str:
    return format(x, fmt) if x is not None else "-".rjust(len(format(0.0, fmt)))


def format_tables(result: dict) -> str:
    points = result["points"]
    lines = [f"attention forward, {result.get('dtype', '?')}, {result.get('device', '?')}: TFLOP/s "
             f"({result.get('timer', {}).get('name', '?')} median); B*S = {TOKENS}, H*D = {HIDDEN}"]
    for d, c in sorted({(p["head_dim"], p["causal"]) for p in points}):
        lines += ["", f"head_dim {d}, {'causal' if c else 'non-causal'}",
                  f"{'seqlen':>6} {'fa4mlir':>7}  {'variant':22s} {'cuDNN':>7} {'FA2':>7} {'FA4-CuTe':>8} "
                  f"{'/cuDNN':>6} {'/FA4':>6} {'maxdiff':>8}"]
        for p in sorted((p for p in points if p["head_dim"] == d and p["causal"] == c), key=lambda p: p["seqlen"]):
            mine = p["backends"].get("fa4mlir", {})
            flag = " !" if mine.get("ok") is False else ""
            variant = mine.get("variant") or ("error" if "error" in mine else "-")
            lines.append(f"{p['seqlen']:6d} {_f(mine.get('tflops'))}  {variant[:22]:22s} "
                         f"{_f(tflops_of(p, 'cudnn'))} {_f(tflops_of(p, 'fa2'))} "
                         f"{_f(tflops_of(p, 'fa4-cute'), '8.1f')} "
                         f"{_f(ratio(p, 'cudnn'), '6.3f')} {_f(ratio(p, 'fa4-cute'), '6.3f')} "
                         f"{_f(mine.get('max_abs_diff'), '8.1e')}{flag}")
    s = result.get("summary") or summarize(points)
    lines += ["", f"summary: fa4mlir / backend over points with seqlen >= {s['min_seqlen']} "
                  f"(geometric mean, min)"]

    def stats(st: dict | None) -> str:
        if st is None:
            return "not measured"
        at = st["min_at"]
        return (f"{st['geomean']:.3f}, min {st['min']:.3f} (D={at['head_dim']} S={at['seqlen']}"
                f"{' causal' if at['causal'] else ''}; {st['n']} pts)")
    for g in s["groups"]:
        lines.append(f"  D={g['head_dim']:<3d} {'causal    ' if g['causal'] else 'non-causal'}  "
                     f"vs cuDNN {stats(g['vs_cudnn'])}   vs FA4 {stats(g['vs_fa4-cute'])}")
    o = s["overall"]
    lines += [f"  all points      vs cuDNN {stats(o['vs_cudnn'])}",
              f"                  vs FA4   {stats(o['vs_fa4-cute'])}",
              f"                  vs FA2   {stats(o['vs_fa2'])}",
              f"correctness: fa4mlir measured at {s['fa4mlir_measured']}/{s['points']} points, "
              f"{s['fa4mlir_ok']}/{s['fa4mlir_checked']} checked within {result.get('tolerance', TOLERANCE):g}; "
              f"{s['fa4mlir_variants_flagged']} variant result(s) wrong or failed"]
    lines += [f"  ! {f}" for f in s["flags"]]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------

REQUIRED_KEYS = ("schema", "device", "dtype", "timer", "tolerance", "backends", "variants", "points")
POINT_KEYS = ("head_dim", "seqlen", "causal", "batch", "heads", "flops", "backends", "fa4mlir_variants",
              "reference", "flags")


def new_result(*, device: str, dtype: str, timer: dict, tolerance: float = TOLERANCE, **extra: Any) -> dict:
    return {"schema": SCHEMA, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device, "dtype": dtype, "timer": timer, "tolerance": tolerance,
            "grid": {"batch_x_seqlen": TOKENS, "heads_x_head_dim": HIDDEN},
            "backends": [{"key": k, "label": BACKENDS[k], "description": BACKEND_DESCRIPTIONS[k]} for k in BACKENDS],
            "variants": [], "points": [], "summary": None, "complete": False, **extra}


def validate_result(result: Any) -> dict:
    """Raise ValueError naming what is missing when `result` is not an attention-bench result."""
    check_header(result, SCHEMA, "an attention bench result", REQUIRED_KEYS, "fa4mlir.bench.attention_bench")
    for i, p in enumerate(result["points"]):
        missing = [k for k in POINT_KEYS if k not in p]
        if missing:
            raise ValueError(f"point #{i} lacks {missing}")
        if p["batch"] * p["seqlen"] != TOKENS or p["heads"] * p["head_dim"] != HIDDEN:
            raise ValueError(f"point #{i} is off the grid: B*S = {p['batch'] * p['seqlen']}, H*D = "
                             f"{p['heads'] * p['head_dim']}; expected {TOKENS} and {HIDDEN}")
    return result


def save_result(result: dict, path: str | os.PathLike) -> None:
    from fa4mlir.runtime import atomic_write
    atomic_write(Path(path), (json.dumps(result, indent=1, allow_nan=False) + "\n").encode())


def load_result(path: str | os.PathLike) -> dict:
    return validate_result(json.loads(Path(path).read_text()))


RESUME_KEYS = ("device", "dtype", "timer", "tolerance", "settings", "environment")


def resumable_points(old: dict, new: dict) -> list[dict]:
    """The points of an earlier result `old` that a run with header `new` may keep: both must agree
    on device, dtype, timer, tolerance, settings, software versions and FA4 CuTe's availability and
    version (else the parts' ratios would not compare); ValueError names each difference."""
    def fa4(r):
        info = r.get("fa4_cute") or {}
        return {"available": info.get("available"), "version": info.get("version")}
    diffs = [f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in RESUME_KEYS if old.get(k) != new.get(k)]
    if fa4(old) != fa4(new):
        diffs.append(f"fa4_cute: {fa4(old)} there, {fa4(new)} now")
    if diffs:
        raise ValueError("cannot resume: the result on file was measured differently (" + "; ".join(diffs)
                         + "); write to a new --out instead")
    return list(old["points"])


def point_key(p: dict) -> tuple[int, bool, int]:
    """Table order: head_dim, then causal (no first), then seqlen."""
    return p["head_dim"], p["causal"], p["seqlen"]


# ----------------------------------------------------------------------------------------------
# Torch glue: environment, tensors, backends of one point
# ----------------------------------------------------------------------------------------------

def _version(*dists: str) -> str | None:
    from importlib import metadata
    for d in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(d)
    return None


def import_fa4_cute() -> tuple[Callable | None, dict]:
    """flash_attn.cute's flash_attn_func (as anchors_fwd.py imports it), or None and why."""
    errors = []
    for mod in ("flash_attn.cute.interface", "flash_attn.cute"):
        try:
            fn = getattr(__import__(mod, fromlist=["flash_attn_func"]), "flash_attn_func")
            return fn, {"available": True, "module": mod, "version": _version("flash-attn-4", "flash_attn_4")}
        except Exception as e:  # noqa: BLE001
            errors.append(f"{mod}: {_error_text(e)}")
    return None, {"available": False, "error": "; ".join(errors)}


def import_api() -> tuple[Callable | None, Callable | None, str | None]:
    """(flash_attn_func, select_entry or None, None), or (None, None, why it does not import)."""
    try:
        from fa4mlir import attention
        return attention.flash_attn_func, getattr(attention, "select_entry", None), None
    except Exception as e:  # noqa: BLE001
        return None, None, _error_text(e)


def environment(torch: Any) -> dict:
    import platform
    props = torch.cuda.get_device_properties(0)
    return {"device": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
            "sm_count": props.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "triton": _version("triton"),
            "python": platform.python_version()}


def _raise(error: str) -> Callable:
    def make():
        raise RuntimeError(error)
    return make


def candidates_for(point: Point, q: Any, k: Any, v: Any, *, torch: Any, dtype: str, api: Callable | None,
                   api_error: str | None, select_entry: Callable | None, bundle: Any,
                   variants: list[tuple[str, Any]], mode: str, loaded: dict,
                   fa4_func: Callable | None) -> list[Candidate]:
    """cuDNN, FA2, FA4-CuTe, then fa4mlir: the API with the bundle, plus every variant by launch
    under --variants all (or the default tile alone by launch when the API does not import)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from fa4mlir.kernels import attention_sm90_config as acfg
    causal = point.causal
    q_bhsd, k_bhsd, v_bhsd = (x.transpose(1, 2).contiguous() for x in (q, k, v))

    def sdpa(name, backend):
        return Candidate(name, lambda: lambda: F.scaled_dot_product_attention(q_bhsd, k_bhsd, v_bhsd, is_causal=causal),
                         to_bshd=lambda o: o.transpose(1, 2), context=lambda: sdpa_kernel([backend]))
    out = [sdpa("cudnn", SDPBackend.CUDNN_ATTENTION), sdpa("fa2", SDPBackend.FLASH_ATTENTION)]
    if fa4_func is not None:
        def fa4_call():
            o = fa4_func(q, k, v, causal=causal)
            return o[0] if isinstance(o, tuple) else o
        out.append(Candidate("fa4-cute", lambda: fa4_call))

    defaults = default_variants(variants, dtype, point.head_dim, causal, select_entry,
                                getattr(bundle, "entries", None), point.seqlen)
    api_label = "api:" + (defaults[0][0] if len(defaults) == 1 else
                          variant_label(acfg.default_config(dtype, point.head_dim, causal, point.seqlen).key()))
    if api is not None:
        out.append(Candidate("fa4mlir", lambda: lambda: api(q, k, v, causal=causal, bundle=bundle),
                             variant=api_label, path="flash_attn_func"))
    else:
        out.append(Candidate("fa4mlir", _raise(f"fa4mlir.attention does not import: {api_error}"),
                             variant=api_label, path="flash_attn_func"))
    if mode == "best" and api is not None:
        return out
    chosen = variants if mode == "all" else defaults
    if not chosen and api is None:
        out.append(Candidate("fa4mlir", _raise(f"no {acfg.KERNEL} kernel for dtype={dtype} head_dim="
                                               f"{point.head_dim} causal={causal} in the bundle"),
                             variant="launch:none", path="launch"))
    for label, art in chosen:
        out.append(Candidate("fa4mlir", _launcher(torch, acfg, art, loaded, q, k, v, point), variant=label,
                             path="launch"))
    return out


def _launcher(torch: Any, acfg: Any, artifact: Any, loaded: dict, q, k, v, point: Point) -> Callable:
    """Builds the timed call for one bundle kernel, launched by its contract; loads it once per run."""
    def make():
        from fa4mlir.runtime import load
        key = artifact.key or artifact.cubin_sha256
        if key not in loaded:
            loaded[key] = load(artifact)
        kern = loaded[key]
        from fa4mlir.attention import AttnProblem
        b, s, h, d = point.batch, point.seqlen, point.heads, point.head_dim
        cfg = acfg.AttnConfig.from_key(artifact.config)
        problem = AttnProblem.of(q.shape, k.shape, cfg.dtype, causal=cfg.causal, softmax_scale=1.0 / math.sqrt(d))
        grid = acfg.grid(cfg, problem, torch.cuda.get_device_properties(q.device).multi_processor_count)

        def call():
            o = torch.empty_like(q)
            lse = torch.empty(b, h, s, device=q.device, dtype=torch.float32)
            kern.launch(grid, acfg.launch_args(cfg, problem, dict(q=q, k=k, v=v, o=o, lse=lse)))
            return o
        return call
    return make


def _torch_max_abs_diff(a: Any, b: Any) -> float:
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"output shape {tuple(a.shape)} differs from the reference's {tuple(b.shape)}")
    return float((a.float() - b.float()).abs().max().item())


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser, with_common: bool = True) -> None:
    """The attention bench flags (`python -m fa4mlir bench` adds --bundle/--out itself)."""
    if with_common:
        p.add_argument("--bundle", default=None, help="bundle folder (default: FA4MLIR_BUNDLE)")
        p.add_argument("--out", default="attention-bench.json", help="JSON result path")
    p.add_argument("--png", default=None, help="plot path (default: the JSON path with .png); needs matplotlib")
    p.add_argument("--head-dims", type=_int_list, default=list(HEAD_DIMS), help="e.g. 64,128 (default: 64,128,256)")
    p.add_argument("--seqlens", type=_int_list, default=list(SEQLENS), help="e.g. 1024,16384 (default: 512..16384)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--variants", choices=("best", "all"), default="best",
                   help="best: fa4mlir through flash_attn_func only (its default tile); all: also every "
                        "matching bundle kernel, launched directly")
    p.add_argument("--quick", action="store_true", help=f"2-point smoke: (D, S, causal) in {QUICK_POINTS}")
    p.add_argument("--tol", type=float, default=TOLERANCE, help="flag fa4mlir when max |O - O_ref| exceeds this")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--no-warmup-pass", dest="warmup_pass", action="store_false",
                   help="skip the pass that calls every backend once per (head_dim, causal) before timing")
    p.add_argument("--rep-ms", type=float, default=100.0)
    p.add_argument("--heat-ms", type=float, default=HEAT_MS,
                   help="before each timing, call the timed backend back to back this long (0: off)")
    p.add_argument("--resume", action="store_true",
                   help="keep the points --out already holds (same device, dtype, timer, settings) and "
                        "run only the others")
    p.add_argument("--rounds", type=int, default=3,
                   help="time every backend this many times per point, in turn; report the median")
    p.add_argument("--timer", choices=("auto", "events"), default="auto",
                   help="auto: triton do_bench when importable, else CUDA events")
    p.add_argument("--no-fa4", action="store_true", help="skip FlashAttention-4 CuTe even if importable")
    p.add_argument("--seed", type=int, default=0)


def _plot(result_path: str, png: str) -> None:
    cmd = f"python3 -m fa4mlir.bench.plot_attention {result_path} {png}"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"\nmatplotlib is not installed here; draw the plot elsewhere with:\n  {cmd}")
        return
    from .plot_attention import plot
    try:
        print(f"\nwrote {plot(load_result(result_path), png)}")
    except Exception as e:  # noqa: BLE001  (a failed plot never loses the measurements)
        print(f"\nplot failed ({_error_text(e)}); retry with:\n  {cmd}")


def run(args: argparse.Namespace) -> int:
    import torch

    from fa4mlir.runtime import Bundle
    if not torch.cuda.is_available():
        print("attention bench: torch sees no CUDA device; run it on the GPU machine", file=sys.stderr)
        return 2
    dtype, torch_dtype_name = DTYPES[args.dtype]
    torch_dtype = getattr(torch, torch_dtype_name)
    points = quick_points() if args.quick else grid_points(args.head_dims, args.seqlens, args.causal)
    timer, timer_desc = make_timer(args.warmup_ms, args.rep_ms, use_triton=args.timer == "auto",
                                   heat_ms=args.heat_ms)
    api, select_entry, api_error = import_api()
    fa4_func, fa4_info = (None, {"available": False, "error": "--no-fa4"}) if args.no_fa4 else import_fa4_cute()
    try:
        bundle = Bundle.open(args.bundle)
        artifacts, bundle_error = bundle.artifacts(), None
    except Exception as e:  # noqa: BLE001  (the other backends still run)
        bundle, artifacts, bundle_error = None, [], _error_text(e)
    env_info = environment(torch)
    result = new_result(device=env_info.pop("device"), dtype=dtype, timer=timer_desc, tolerance=args.tol,
                        environment=env_info, fa4_cute=fa4_info, api_error=api_error,
                        bundle=str(bundle.root) if bundle else args.bundle, bundle_error=bundle_error,
                        settings={"variants": args.variants, "quick": args.quick, "seed": args.seed,
                                  "warmup_pass": args.warmup_pass, "rounds": args.rounds,
                                  "reference_order": list(REFERENCE_ORDER)})
    if args.resume and Path(args.out).is_file():
        try:
            old = load_result(args.out)
            kept = resumable_points(old, result)
        except ValueError as e:
            print(f"attention bench: {e}", file=sys.stderr)
            return 2
        have = {point_key(p) for p in kept}
        points = [pt for pt in points if point_key(pt.to_json()) not in have]
        result["points"], result["resumed_points"] = kept, len(kept)
        result["variants"] = old["variants"]
        print(f"attention bench: resuming {args.out}: {len(kept)} point(s) kept", flush=True)
    print(f"attention bench: {len(points)} point(s), {dtype}, timer {timer_desc['name']}, "
          f"FA4-CuTe {'yes' if fa4_func else 'no'}, fa4mlir API {'yes' if api else 'no (' + str(api_error) + ')'}"
          + (f", bundle error: {bundle_error}" if bundle_error else ""), flush=True)
    torch.manual_seed(args.seed)
    loaded: dict = {}
    seen_variants = {(v["head_dim"], v["causal"], v["label"]) for v in result["variants"]}

    def candidates(point, variants):
        q, k, v = (torch.randn(point.batch, point.seqlen, point.heads, point.head_dim, device="cuda",
                               dtype=torch_dtype) for _ in range(3))
        return candidates_for(point, q, k, v, torch=torch, dtype=dtype, api=api, api_error=api_error,
                              select_entry=select_entry, bundle=bundle, variants=variants,
                              mode=args.variants, loaded=loaded, fa4_func=fa4_func)

    if args.warmup_pass:
        first = {}
        for point in points:
            key = (point.head_dim, point.causal)
            if key not in first or point.seqlen < first[key].seqlen:
                first[key] = point
        for point in first.values():
            for c in candidates(point, bundle_variants(artifacts, dtype, point.head_dim, point.causal)):
                with contextlib.suppress(Exception), c.context():   # failures are recorded when timed
                    c.make()()
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize()
        print(f"warm-up pass: {len(first)} (head_dim, causal) case(s)", flush=True)
    for i, point in enumerate(points, 1):
        variants = bundle_variants(artifacts, dtype, point.head_dim, point.causal)
        for label, art in variants:
            if (point.head_dim, point.causal, label) not in seen_variants:
                seen_variants.add((point.head_dim, point.causal, label))
                result["variants"].append(variant_info(label, art))
        try:
            cands = candidates(point, variants)
            rec = run_point(point, cands, timer, sync=torch.cuda.synchronize, diff=_torch_max_abs_diff, tol=args.tol,
                            rounds=args.rounds)
            del cands
        except Exception as e:  # noqa: BLE001  (e.g. out of memory making the inputs)
            rec = {**point.to_json(), "backends": {"fa4mlir": {"error": _error_text(e)}},
                   "fa4mlir_variants": {}, "reference": None, "flags": [f"point failed: {_error_text(e)}"]}
        result["points"] = sorted([*result["points"], rec], key=point_key)
        save_result(result, args.out)
        b = rec["backends"]
        print(f"[{i}/{len(points)}] D={point.head_dim} S={point.seqlen} causal={'yes' if point.causal else 'no'}: "
              + "  ".join(f"{BACKENDS[n]} {b[n]['tflops']:.1f}" if "tflops" in b.get(n, {}) else f"{BACKENDS[n]} -"
                          for n in BACKENDS)
              + (f"  ({b['fa4mlir'].get('variant')}, maxdiff {_f(b['fa4mlir'].get('max_abs_diff'), '.1e')})"
                 if "tflops" in b.get("fa4mlir", {}) else f"  fa4mlir: {b.get('fa4mlir', {}).get('error', '')[:200]}"),
              flush=True)
    result["summary"], result["complete"] = summarize(result["points"]), True
    save_result(result, args.out)
    print()
    print(format_tables(result))
    print(f"\nwrote {args.out}")
    _plot(args.out, args.png or str(Path(args.out).with_suffix(".png")))
    return exit_code(result["summary"])


def exit_code(summary: dict) -> int:
    """0 when fa4mlir was measured and correct at every point and no variant was flagged, else 1."""
    s = summary
    return 0 if s["fa4mlir_ok"] == s["fa4mlir_checked"] == s["points"] and not s["fa4mlir_variants_flagged"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
