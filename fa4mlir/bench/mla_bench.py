"""`python -m fa4mlir bench mla`: multi-head latent attention (issue 29's benchmark).

The MLA workloads of ../shared/anchors/anchors_serving.py, same shapes and seeds (bf16):
    mla_prefill    B=2, S=8192, H=16, q and k [B, S, H, 192] (128 nope + 64 rope), v [B, S, H, 128],
                   causal; torch.manual_seed(0), then q, k, v drawn by torch.randn on the GPU in that order
Room is left for the rest of issue 29's rows (dense and sparse MLA decode, sparse prefill): a
workload is a name in WORKLOADS and a builder in BUILDERS (rows of Row, prefill_bench's); their
kernels do not exist yet, so they are not listed.

Backends, in one process on the same tensors: fa4mlir (flash_attn_func with q, k 192 wide and v 128:
the sm_90a kernel's head_dim_v), FlashAttention-4 CuTe (flash_attn.cute's flash_attn_func, when it
imports) and cuDNN (torch SDPA's CUDNN_ATTENTION backend, on contiguous [B, H, S, D] copies made
before timing). A backend that cannot run a row is recorded as `unsupported` or `error`
(prefill_bench.failure); neither stops the run.

Per row, as prefill_bench.measure_row does: every backend is made and called once into NaN-poisoned
memory and checked (max error of the last 256 query rows of batch 0, as the anchors slice it,
against a float32 reference, by the FA rule: at most 2x the error of torch's own bf16 computation of
the same slice, plus 1e-5; the NaN count of the whole output), timed `--rounds` times in turn with
fa4mlir.bench.timers' heated timer (median kept), then called and checked again.

TFLOP/s: FLOPs as anchors_serving counts them, 2·B·H·S²·(D_qk + D_v) / 2 for causal MLA prefill
(mla_flops; the same as attention_sm90_config.flops with head_dim_v).

JSON (schema "fa4mlir-mla-bench/1", --out, default mla-bench.json), written after every workload:
environment, timer, settings, `rows` (shape, FLOPs), `results` (one per row and backend: status
measured | unsupported | error). Exit code 1 when a measured fa4mlir result breaks the FA rule, else 0.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from .prefill_bench import (CHECK_ROWS, STATUSES, Row, _error_text, exit_code, fa4mlir_ratios, failure,
                            format_result_line, measure_row)
from .results import check_header

SCHEMA = "fa4mlir-mla-bench/1"
MLA_PREFILL = dict(batch=2, seqlen=8192, heads=16, head_dim=192, head_dim_v=128, causal=True)
# workload (the --workloads names) -> its rows; issue 29's decode and sparse rows join here with their kernels
WORKLOADS = {"mla_prefill": ("mla_prefill",)}


def parse_workloads(text: str | None) -> list[str]:
    """--workloads (comma-separated WORKLOADS names; empty: all), checked: ValueError names an
    unknown one."""
    names = list(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip())) or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown mla workload(s) {unknown}; pick from {', '.join(WORKLOADS)}")
    return names


def mla_flops(batch: int, heads: int, seqlen: int, head_dim: int, head_dim_v: int, causal: bool = True) -> float:
    """anchors_serving's mla_prefill count: 2·B·H·S·S·(D_qk + D_v), halved when causal."""
    f = 2 * batch * heads * seqlen * seqlen * (head_dim + head_dim_v)
    return f / 2 if causal else f


def row_shape(row: str) -> tuple[dict, float]:
    """(shape for the JSON, FLOPs) of a row."""
    if row == "mla_prefill":
        s = MLA_PREFILL
        return dict(s), mla_flops(s["batch"], s["heads"], s["seqlen"], s["head_dim"], s["head_dim_v"], s["causal"])
    raise ValueError(f"unknown mla row {row!r}")


# ----------------------------------------------------------------------------------------------
# The torch side (GPU machine): tensors, references, backends
# ----------------------------------------------------------------------------------------------

def _sdpa_cudnn(torch: Any, q, k, v) -> Callable[[], Callable[[], Any]]:
    """torch SDPA's cuDNN backend, causal, on contiguous [B, H, S, D] copies made before timing."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def make():
        qh, kh, vh = (x.transpose(1, 2).contiguous() for x in (q, k, v))

        def call():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True).transpose(1, 2)
        return call
    return make


def mla_prefill_rows(torch: Any, fa4=None) -> list[Row]:
    """mla_prefill's row: anchors_serving.w_mla_prefill's tensors (seed 0; q, k, v in that order)."""
    from .decode_bench import _first
    from .prefill_workloads import DEV, causal_mask, checker, poisoner
    s = MLA_PREFILL
    b, n, h, d, dv = s["batch"], s["seqlen"], s["heads"], s["head_dim"], s["head_dim_v"]
    torch.manual_seed(0)
    q = torch.randn(b, n, h, d, dtype=torch.bfloat16, device=DEV)
    k = torch.randn(b, n, h, d, dtype=torch.bfloat16, device=DEV)
    v = torch.randn(b, n, h, dv, dtype=torch.bfloat16, device=DEV)
    check = checker(torch, lambda o: o[:1, -CHECK_ROWS:], (q[:1, -CHECK_ROWS:], k[:1], v[:1], d ** -0.5),
                    mask=causal_mask(torch, CHECK_ROWS, n))

    def fa4mlir_call():
        import fa4mlir
        return lambda: fa4mlir.flash_attn_func(q, k, v, causal=True)

    backends = {"fa4mlir": fa4mlir_call}
    if fa4 is not None:
        fa4_func = fa4[0]
        backends["fa4cute"] = lambda: (lambda: _first(fa4_func(q, k, v, causal=True)))
    backends["sdpa-cudnn"] = _sdpa_cudnn(torch, q, k, v)
    shape, flops = row_shape("mla_prefill")
    return [Row("mla_prefill", "mla_prefill", shape, flops, backends, check,
                poisoner(torch, b * n * h * dv, torch.bfloat16))]


# workload -> builder(torch, fa4) -> rows
BUILDERS = {"mla_prefill": mla_prefill_rows}


# ----------------------------------------------------------------------------------------------
# JSON (pure)
# ----------------------------------------------------------------------------------------------

REQUIRED_KEYS = ("schema", "created", "device", "environment", "timer", "fa4_cute", "settings", "rows", "results",
                 "complete")
ROW_KEYS = ("row", "workload", "shape", "flops")
RESULT_KEYS = ("workload", "row", "backend", "status")
MEASURED_KEYS = ("ms", "tflops", "times_ms", "max_err", "torch_err", "bound", "fa_rule_ok", "nan_out")


def new_result(*, device: str, environment: dict, timer: dict, fa4_cute: dict, settings: dict) -> dict:
    return {"schema": SCHEMA, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device, "environment": environment, "timer": timer, "fa4_cute": fa4_cute,
            "settings": settings, "rows": [], "results": [], "complete": False}


def validate_result(result: Any) -> dict:
    """Raise ValueError naming what is missing when `result` is not an mla-bench result."""
    check_header(result, SCHEMA, "an mla bench result", REQUIRED_KEYS, "fa4mlir.bench.mla_bench")
    for i, row in enumerate(result["rows"]):
        if [k for k in ROW_KEYS if k not in row]:
            raise ValueError(f"row #{i} lacks {[k for k in ROW_KEYS if k not in row]}")
    for i, r in enumerate(result["results"]):
        need = RESULT_KEYS + (MEASURED_KEYS if r.get("status") == "measured" else ("reason",))
        if [k for k in need if k not in r]:
            raise ValueError(f"result #{i} lacks {[k for k in need if k not in r]}")
        if r["status"] not in STATUSES:
            raise ValueError(f"result #{i} has status {r['status']!r}; expected one of {STATUSES}")
    return result


def save_result(result: dict, path: str | os.PathLike) -> None:
    from fa4mlir.artifacts import atomic_write
    atomic_write(Path(path), (json.dumps(validate_result(result), indent=1, allow_nan=False) + "\n").encode())


def load_result(path: str | os.PathLike) -> dict:
    return validate_result(json.loads(Path(path).read_text()))


def format_tables(result: dict) -> str:
    t = result.get("timer", {})
    lines = [f"mla, bf16, {result.get('device', '?')}: {t.get('name', '?')} {t.get('stat', 'median')} of "
             f"{result.get('settings', {}).get('rounds', '?')} round(s), heat {t.get('heat_ms', '?')} ms",
             f"{'row':17s} {'backend':31s} {'us':>9s} {'TFLOP/s':>8s}  {'max_err':>8s} {'FA bound':>8s}"]
    lines += [format_result_line(r) for r in result["results"]]
    ratios = [(row, fa4mlir_ratios(result["results"], row))
              for row in dict.fromkeys(r["row"] for r in result["results"])]
    if any(rs for _, rs in ratios):
        lines += ["", "fa4mlir TFLOP/s over other backends':"]
        lines += [f"  {row:17s} " + "  ".join(f"{b} {x:.3f}" for b, x in rs.items()) for row, rs in ratios if rs]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def run(args) -> int:
    """`python -m fa4mlir bench mla` (its flags: fa4mlir/__main__.py)."""
    try:
        names = parse_workloads(args.workloads)
    except ValueError as e:
        print(f"mla bench: {e}", file=sys.stderr)
        return 2
    import torch

    from .decode_bench import import_fa4
    from .prefill_workloads import environment
    from .timers import make_timer
    if not torch.cuda.is_available():
        print("mla bench: torch sees no CUDA device; run it on the GPU machine", file=sys.stderr)
        return 2
    if args.bundle:
        os.environ["FA4MLIR_BUNDLE"] = args.bundle
    timer, timer_desc = make_timer(args.warmup_ms, args.rep_ms, args.timer == "auto", args.heat_ms)
    fa4, fa4_info = (None, {"available": False, "error": "--no-fa4"}) if args.no_fa4 else import_fa4()
    env = environment(torch)
    result = new_result(device=env.pop("device"), environment=env, timer=timer_desc, fa4_cute=fa4_info,
                        settings={"workloads": names, "rounds": args.rounds,
                                  "bundle": os.environ.get("FA4MLIR_BUNDLE")})
    print(f"mla bench: {result['device']}, torch {torch.__version__}, FA4-CuTe {'yes' if fa4 else 'no'}, "
          f"workloads {names}", flush=True)
    for name in names:
        try:
            built = BUILDERS[name](torch, fa4)
        except Exception as e:  # noqa: BLE001  (e.g. out of memory making the inputs)
            result["results"] += [{"workload": name, "row": r, "backend": "*", **failure(e, "setup")}
                                  for r in WORKLOADS[name]]
            print(f"{name}: setup fails: {_error_text(e)}", flush=True)
            built = []
        for row in built:
            result["rows"].append({"row": row.name, "workload": row.workload, "shape": row.shape, "flops": row.flops})
            for rec in measure_row(row, timer, sync=torch.cuda.synchronize, rounds=args.rounds):
                result["results"].append(rec)
                print(format_result_line(rec), flush=True)
            ratios = fa4mlir_ratios(result["results"], row.name)
            if ratios:
                print(f"{row.name:17s} fa4mlir / other: " + "  ".join(f"{b} {x:.3f}" for b, x in ratios.items()),
                      flush=True)
        del built
        torch.cuda.empty_cache()
        save_result(result, args.out)
    result["complete"] = True
    save_result(result, args.out)
    print()
    print(format_tables(result))
    print(f"\nwrote {args.out}")
    return exit_code(result)
