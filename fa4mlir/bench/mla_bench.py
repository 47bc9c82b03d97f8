"""`python -m fa4mlir bench mla`: multi-head latent attention (issue 29's benchmark).

The MLA workloads of ../shared/anchors/anchors_serving.py, same shapes and seeds (bf16):
    mla_prefill    B=2, S=8192, H=16, q and k [B, S, H, 192] (128 nope + 64 rope), v [B, S, H, 128],
                   causal; torch.manual_seed(0), then q, k, v drawn by torch.randn on the GPU in that order
    mla_decode     FlashMLA's dense decode benchmark shape (issue 29): batch 128, 4096 cached tokens per
                   sequence in a paged latent cache (page 64, a shuffled block table), one KV head of 576
                   (V = its first 512 columns), 16 / 64 / 128 query heads, seqlen_q 1 and 2 (causal);
                   rows mla_decode_h{16,64,128}_q{1,2}; get_mla_metadata + flash_mla_with_kvcache
    mla_decode_fp8 the same over FlashMLA's FP8 latent cache (656-byte rows: the bf16 cache quantized
                   by FlashMLA's quantize_k_cache recipe, testing_mla.quantize_fp8_cache), bf16 q;
                   rows mla_decode_fp8_h{16,64,128}_q{1,2}; flash_mla_with_kvcache(is_fp8_kvcache=True),
                   checked against the dense equivalent over the dequantized rows
    mla_sparse     FlashMLA's sparse prefill shape: s_q 4096, 128 heads, topk 2048 distinct indices per
                   token into s_kv 32768 rows of [s_kv, 1, 576]; flash_mla_sparse_fwd
A workload is a name in WORKLOADS and a builder in BUILDERS (rows of Row, prefill_bench's). FlashMLA
itself is not installed on the GPU machine: the decode and sparse rows time fa4mlir alone, against
issue 29's absolute bars (FlashMLA's published H800 figures).

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
(mla_flops; the same as attention_sm90_config.flops with head_dim_v); the decode and sparse rows as
FlashMLA's benchmarks count them (attention.mla.flops_and_bytes: 2 x query rows x cached tokens x
(576 + 512), and the bytes of the cache (FP8: 656 a token), q and out; attention.mla_sparse.flops: 2 x s_q x topk x h_q x
(576 + 512)); rows with a byte count also get GB/s (`gbps` in the JSON).

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
MLA_DECODE = dict(batch=128, cached=4096, page_size=64)
DECODE_HEADS, DECODE_QS = (16, 64, 128), (1, 2)
MLA_SPARSE = dict(s_q=4096, heads=128, topk=2048, s_kv=32768)
DECODE_ROWS = tuple(f"mla_decode_h{h}_q{sq}" for h in DECODE_HEADS for sq in DECODE_QS)
FP8_DECODE_ROWS = tuple(f"mla_decode_fp8_h{h}_q{sq}" for h in DECODE_HEADS for sq in DECODE_QS)
# workload (the --workloads names) -> its rows
WORKLOADS = {"mla_prefill": ("mla_prefill",), "mla_decode": DECODE_ROWS, "mla_decode_fp8": FP8_DECODE_ROWS,
             "mla_sparse": ("mla_sparse",)}


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
    """(shape for the JSON, FLOPs) of a row; the decode and sparse rows' shapes hold `bytes`, the
    bytes FlashMLA's benchmark counts."""
    if row == "mla_prefill":
        s = MLA_PREFILL
        return dict(s), mla_flops(s["batch"], s["heads"], s["seqlen"], s["head_dim"], s["head_dim_v"], s["causal"])
    if row in DECODE_ROWS or row in FP8_DECODE_ROWS:
        from ..attention.mla import flops_and_bytes
        fp8 = row in FP8_DECODE_ROWS
        heads, sq = (int(x[1:]) for x in row.split("_")[-2:])
        d = MLA_DECODE
        flops, data = flops_and_bytes(d["batch"], sq, heads, d["cached"], fp8=fp8)
        return dict(d, heads=heads, seqlen_q=sq, bytes=data, **({"kv": "fp8"} if fp8 else {})), float(flops)
    if row == "mla_sparse":
        from ..attention.mla_sparse import flops
        d = MLA_SPARSE
        data = (d["s_q"] * d["topk"] * 576 + d["s_q"] * d["heads"] * (576 + 512)) * 2   # FlashMLA's count
        return dict(d, bytes=data), float(flops(d["s_q"], d["heads"], d["topk"]))
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


def mla_decode_rows(torch: Any, fa4=None, fp8: bool = False) -> list[Row]:
    """mla_decode's rows: one bf16 latent cache (batch 128 x 4096 tokens in pages of 64, a shuffled
    block table; seed 0) and, per (heads, seqlen_q), q drawn after it; causal (bottom-right). Checked
    on sequence 0 against the dense equivalent (its 4096 rows gathered: MQA over K = the rows, V = their
    first 512 columns) by the FA rule. fp8 (mla_decode_fp8): the cache quantized to FlashMLA's FP8
    layout, the check over its rows dequantized as the kernel does."""
    import fa4mlir
    from .prefill_workloads import DEV, causal_mask, checker, poisoner
    d = MLA_DECODE
    b, n, page = d["batch"], d["cached"], d["page_size"]
    pages = b * n // page
    torch.manual_seed(0)
    cache = torch.randn(pages, page, 1, 576, dtype=torch.bfloat16, device=DEV) / 4
    table = torch.randperm(pages, device=DEV).to(torch.int32).view(b, n // page)
    seqlens = torch.full((b,), n, dtype=torch.int32, device=DEV)
    if fp8:
        from ..testing_mla import dequantize_fp8_cache, quantize_fp8_cache
        cache = quantize_fp8_cache(cache)
        k0 = dequantize_fp8_cache(cache[table[0].long()]).reshape(1, n, 1, 576)
    else:
        k0 = cache[table[0].long()].reshape(1, n, 1, 576)             # sequence 0's rows, in order
    rows = []
    for heads in DECODE_HEADS:
        for sq in DECODE_QS:
            q = torch.randn(b, sq, heads, 576, dtype=torch.bfloat16, device=DEV) / 4
            meta = fa4mlir.get_mla_metadata(seqlens, sq * heads, 1, is_fp8_kvcache=fp8)
            check = checker(torch, lambda o: o[:1], (q[:1], k0, k0[..., :512], 576 ** -0.5),
                            mask=causal_mask(torch, sq, n))

            def call(q=q, meta=meta):
                return lambda: fa4mlir.flash_mla_with_kvcache(q, cache, table, seqlens, 512, meta[0], meta[1],
                                                              causal=True, is_fp8_kvcache=fp8)[0]   # out (lse too)
            name = f"mla_decode{'_fp8' if fp8 else ''}_h{heads}_q{sq}"
            shape, flops = row_shape(name)
            rows.append(Row(name, "mla_decode_fp8" if fp8 else "mla_decode", shape, flops, {"fa4mlir": call}, check,
                            poisoner(torch, b * sq * heads * 512, torch.bfloat16)))
    return rows


def mla_decode_fp8_rows(torch: Any, fa4=None) -> list[Row]:
    """mla_decode_fp8's rows (mla_decode_rows with fp8)."""
    return mla_decode_rows(torch, fa4, fp8=True)


def _sparse_check(torch: Any, q, kv, indices, scale: float, tokens: int = 32) -> Callable[[Any], dict]:
    """check(out) of flash_mla_sparse_fwd's (out, max_logits, lse) on its first `tokens` tokens:
    testing_mla.sparse_reference in float32 against the kernel's out, by the FA rule against the
    same reference in bf16; the NaN count of the whole output."""
    from ..testing import fa_rule
    from ..testing_mla import sparse_reference
    qs, kvs, ix = q[:tokens].cpu(), kv.cpu(), indices[:tokens].cpu()     # sparse_reference: CPU tensors
    want = sparse_reference(qs, kvs, ix, scale, torch.float32)[0].float()
    torch_err = float((sparse_reference(qs, kvs, ix, scale, torch.bfloat16)[0].float() - want).abs().max())

    def check(result) -> dict:
        out = result[0]
        err = float((out[:tokens].float().cpu() - want).abs().max())
        nan = int(torch.isnan(out).sum())
        ok, bound = fa_rule(err, torch_err)
        return {"max_err": err, "torch_err": torch_err, "bound": bound, "fa_rule_ok": ok and nan == 0, "nan_out": nan}
    return check


def mla_sparse_rows(torch: Any, fa4=None) -> list[Row]:
    """mla_sparse's row: q [4096, 128, 576], kv [32768, 1, 576] (bf16, /10 as FlashMLA draws them),
    2048 distinct random indices per token (seed 0)."""
    import fa4mlir
    from .prefill_workloads import DEV, poisoner
    d = MLA_SPARSE
    torch.manual_seed(0)
    q = torch.randn(d["s_q"], d["heads"], 576, dtype=torch.bfloat16, device=DEV) / 10
    kv = torch.randn(d["s_kv"], 1, 576, dtype=torch.bfloat16, device=DEV) / 10
    indices = torch.empty(d["s_q"], 1, d["topk"], dtype=torch.int32, device=DEV)
    for i in range(0, d["s_q"], 256):   # distinct rows per token, in chunks (a [4096, 32768] draw is 512 MiB)
        indices[i:i + 256, 0] = torch.rand(256, d["s_kv"], device=DEV).topk(d["topk"], dim=-1).indices.to(torch.int32)
    scale = 576 ** -0.5
    check = _sparse_check(torch, q, kv, indices, scale)
    shape, flops = row_shape("mla_sparse")
    call = {"fa4mlir": lambda: (lambda: fa4mlir.flash_mla_sparse_fwd(q, kv, indices, scale, 512))}
    return [Row("mla_sparse", "mla_sparse", shape, flops, call, check,
                poisoner(torch, d["s_q"] * d["heads"] * 512, torch.bfloat16))]


# workload -> builder(torch, fa4) -> rows
BUILDERS = {"mla_prefill": mla_prefill_rows, "mla_decode": mla_decode_rows, "mla_decode_fp8": mla_decode_fp8_rows,
            "mla_sparse": mla_sparse_rows}


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


def _line(r: dict) -> str:
    """prefill_bench's result line, and GB/s where the row counts bytes (decode, sparse)."""
    return format_result_line(r) + (f"  {r['gbps']:7.0f} GB/s" if r.get("gbps") else "")


def format_tables(result: dict) -> str:
    t = result.get("timer", {})
    lines = [f"mla, bf16, {result.get('device', '?')}: {t.get('name', '?')} {t.get('stat', 'median')} of "
             f"{result.get('settings', {}).get('rounds', '?')} round(s), heat {t.get('heat_ms', '?')} ms",
             f"{'row':17s} {'backend':31s} {'us':>9s} {'TFLOP/s':>8s}  {'max_err':>8s} {'FA bound':>8s}"]
    lines += [_line(r) for r in result["results"]]
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
                if rec.get("ms") and row.shape.get("bytes"):
                    rec["gbps"] = row.shape["bytes"] / (rec["ms"] * 1e-3) / 1e9
                result["results"].append(rec)
                print(_line(rec), flush=True)
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
