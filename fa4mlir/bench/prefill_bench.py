"""`python -m fa4mlir bench prefill`: serving prefill (ragged, chunked, masks, softcap, sinks, ALiBi).

The prefill workloads of ../shared/anchors/anchors_serving.py, same shapes and seeds (bf16, D128):
    prefill_varlen     16 causal sequences of 256..8192 tokens (seed 11) packed by cu_seqlens, H=32, Hk=8
    prefill_chunked    B=8: 2048 new queries against a paged cache of 8192+2048 keys, page 64, causal,
                       H=32, Hk=8
    prefill_chunked_window
                       (not an anchors_serving workload) prefill_chunked's shape and tensors with
                       window_size=(4096, 0): each query sees its 4097 latest keys; fa4mlir's paged
                       prefill kernel's window variant (the `prefill` set), next to prefill_chunked
    sliding_window     B=2, S=16384, H=16, causal with window_size=(4096, 0)
    softcap_sink       B=2, S=8192, H=16, causal: rows `softcap` (cap 30) and `sink` (a float32 sink
                       logit per head, gpt-oss semantics), on q, k, v drawn as randn * 2
    alibi              softcap_sink's shape and tensors, an ALiBi bias (slopes 2^(-8 (h+1) / H)) as a
                       score_mod: fa4mlir's built-in ALiBi score_mod (flash_attn_func(score_mod=,
                       aux_tensors=[slopes]), the dense_causal_8k kernel with the function compiled in)
                       and FlexAttention's
and next to each masked or modified row the dense causal kernel of the same shape and tensors
(`dense_causal_16k` beside sliding_window, `dense_causal_8k` beside softcap, sink and alibi,
`prefill_chunked` beside prefill_chunked_window), so that
the cost of each feature against the plain kernel is printed (time and TFLOP/s ratios).

Backends, in one process on the same tensors: fa4mlir (flash_attn_func with window_size=, softcap=,
sinks=, score_mod=; flash_attn_varlen_func on prefill_varlen (the `prefill` set's varlen kernel, and as
`fa4mlir[compact]` its compact-grid variant, FA4MLIR_VARLEN_GRID=compact: kernels/common/varlen_compact.py, and
`fa4mlir[persistent]` the persistent kernel over the compact tiles, FA4MLIR_VARLEN_GRID=persistent) and on
prefill_chunked with page_table= (its 2048 queries per sequence run the prefill kernel over the
paged pool, the `prefill` set's page-64 kernel: attention/varlen_paged.py, note "Which kernel"); for prefill_chunked also flash_attn_func on the contiguous cache and
flash_attn_with_kvcache on the paged one), FlashAttention-4 CuTe
(flash_attn.cute's flash_attn_func / flash_attn_varlen_func, when it imports), FlexAttention
(torch.compile'd, block masks and score_mods as the anchors build them), and torch's FA2 / cuDNN
(SDPA on the dense rows, varlen_attn on prefill_varlen). A backend that cannot run a row (no such
entry point or keyword, no kernel in the bundle: TypeError, NotImplementedError, LookupError such as
fa4mlir's BundleError, AttributeError) is recorded as `unsupported: <reason>`; any other failure as
`error`; neither stops the run.

Per row: every backend is made and called once into NaN-poisoned memory (a NaN block of the
output's size is freed into torch's caching allocator just before the call, so a fresh output
lands on it; the NaN count of the whole output is reported), its output checked against a float32
reference on a slice (as anchors_serving does) by the FA rule (fa4mlir.testing.fa_rule's: at most
2x the error of torch's own bf16 computation of the same slice, plus 1e-5); then all backends are
timed `--rounds` times in turn with fa4mlir.bench.timers' heated timer (--heat-ms of back-to-back
calls, then triton do_bench's median), the median kept; then each is called and checked again.

TFLOP/s: FLOPs counted exactly as anchors_serving counts them (the functions below mirror its
expressions; tests/test_prefill_bench.py checks them against brute-force pair counts): causal
sequences 4·H·D·S²/2 each (FlashAttention's convention: the visible pairs less half the
diagonal), the chunk's 4·B·H·D·(Sq·Sc + Sq²/2), the window's visible pairs exactly
(4·B·H·D·Σ_i min(i + 1, W + 1); the windowed chunk's 4·B·H·D·Σ_i min(Sc + i + 1, W + 1)).

JSON (schema "fa4mlir-prefill-bench/1", --out, default prefill-bench.json), written after every
workload: environment, timer, settings, `rows` (shape, FLOPs, baseline row), `results` (one per row
and backend: status measured | unsupported | error), `feature_costs`. Exit code 1 when a measured
fa4mlir result breaks the FA rule, else 0.
"""
from __future__ import annotations

import os
from typing import Any

from . import runner
from .runner import measured

SCHEMA = "fa4mlir-prefill-bench/1"
D = 128
# workload (the --workloads names) -> (family: the tensors its rows share, rows); a family's rows run
# on one set of tensors, its dense row first
WORKLOADS = {
    "prefill_varlen": ("varlen", ("prefill_varlen",)),
    "prefill_chunked": ("chunked", ("prefill_chunked",)),
    "prefill_chunked_window": ("chunked", ("prefill_chunked", "prefill_chunked_window")),
    "sliding_window": ("s16k", ("dense_causal_16k", "sliding_window")),
    "softcap_sink": ("s8k", ("dense_causal_8k", "softcap", "sink")),
    "alibi": ("s8k", ("dense_causal_8k", "alibi")),
}
BASELINE = {"prefill_chunked_window": "prefill_chunked", "sliding_window": "dense_causal_16k", "softcap": "dense_causal_8k", "sink": "dense_causal_8k",
            "alibi": "dense_causal_8k"}
FAMILY_ROWS = {"varlen": ("prefill_varlen",), "chunked": ("prefill_chunked", "prefill_chunked_window"),
               "s16k": ("dense_causal_16k", "sliding_window"), "s8k": ("dense_causal_8k", "softcap", "sink", "alibi")}
VARLEN = dict(num_seqs=16, min_len=256, max_len=8192, seed=11, heads=32, kv_heads=8)
CHUNKED = dict(batch=8, seqlen_q=2048, seqlen_cache=8192, heads=32, kv_heads=8, page=64, window=4096)
S16K = dict(batch=2, seqlen=16384, heads=16, window=4096)
S8K = dict(batch=2, seqlen=8192, heads=16, softcap=30.0)
CHECK_ROWS = 256        # the reference slice: anchors_serving's last (first, for chunked) 256 query rows
# ----------------------------------------------------------------------------------------------
# Workload selection and FLOPs (pure)
# ----------------------------------------------------------------------------------------------

def parse_workloads(text: str | None) -> list[str]:
    """--workloads (comma-separated WORKLOADS names; empty: all), checked: ValueError names an
    unknown one."""
    names = list(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip())) or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown prefill workload(s) {unknown}; pick from {', '.join(WORKLOADS)}")
    return names


def families(names: list[str]) -> dict[str, list[str]]:
    """Workload names -> {family: rows}, in FAMILY_ROWS' order, each row once (alibi and
    softcap_sink share dense_causal_8k and their tensors)."""
    wanted = {row for n in names for row in WORKLOADS[n][1]}
    out = {fam: [r for r in rows if r in wanted] for fam, rows in FAMILY_ROWS.items()}
    return {fam: rows for fam, rows in out.items() if rows}


def row_workload(row: str) -> str:
    """The first workload that lists `row` (dense_causal_8k: softcap_sink, also alibi's baseline)."""
    return next(w for w, (_, rows) in WORKLOADS.items() if row in rows)


def causal_flops(batch: int, heads: int, seqlen: int, head_dim: int = D) -> float:
    """anchors_serving's softcap_sink count: 4·B·H·S·S·D / 2."""
    return 4 * batch * heads * seqlen * seqlen * head_dim / 2


def varlen_flops(lens, heads: int, head_dim: int = D) -> float:
    """anchors_serving's prefill_varlen count: Σ 4·H·L·L·D / 2 over the sequences."""
    return sum(4 * heads * int(n) * int(n) * head_dim / 2 for n in lens)


def chunked_flops(batch: int, seqlen_q: int, seqlen_cache: int, heads: int, head_dim: int = D) -> float:
    """anchors_serving's prefill_chunked count: 4·B·H·D·(Sq·Sc + Sq·Sq / 2)."""
    return 4 * batch * heads * head_dim * (seqlen_q * seqlen_cache + seqlen_q * seqlen_q / 2)


def chunked_window_flops(batch: int, seqlen_q: int, seqlen_cache: int, heads: int, window: int,
                         head_dim: int = D) -> float:
    """prefill_chunked_window's count: 4·B·H·D·Σ_i min(Sc + i + 1, W + 1) (the visible pairs)."""
    return 4 * batch * heads * head_dim * sum(min(seqlen_cache + i + 1, window + 1) for i in range(seqlen_q))


def window_flops(batch: int, seqlen: int, heads: int, window: int, head_dim: int = D) -> float:
    """anchors_serving's sliding_window count: 4·B·H·D·Σ_i min(i + 1, W + 1) (the visible pairs)."""
    return 4 * batch * heads * head_dim * sum(min(i + 1, window + 1) for i in range(seqlen))


def varlen_lens(torch: Any) -> list[int]:
    """prefill_varlen's sequence lengths: anchors_serving's seeded draw (CPU generator, seed 11)."""
    g = torch.Generator(device="cpu").manual_seed(VARLEN["seed"])
    return [int(n) for n in torch.randint(VARLEN["min_len"], VARLEN["max_len"] + 1, (VARLEN["num_seqs"],), generator=g)]


def row_shape(row: str, lens: list[int] | None = None) -> tuple[dict, float]:
    """(shape for the JSON, FLOPs) of a row; prefill_varlen needs its lengths."""
    if row == "prefill_varlen":
        h, hk = VARLEN["heads"], VARLEN["kv_heads"]
        return {"lens": list(lens), "total_tokens": sum(lens), "heads": h, "kv_heads": hk, "head_dim": D,
                "causal": True}, varlen_flops(lens, h)
    if row == "prefill_chunked":
        c = CHUNKED
        return ({"batch": c["batch"], "seqlen_q": c["seqlen_q"], "seqlen_k": c["seqlen_cache"] + c["seqlen_q"],
                 "heads": c["heads"], "kv_heads": c["kv_heads"], "head_dim": D, "page_size": c["page"], "causal": True},
                chunked_flops(c["batch"], c["seqlen_q"], c["seqlen_cache"], c["heads"]))
    if row == "prefill_chunked_window":
        c = CHUNKED
        shape, _ = row_shape("prefill_chunked")
        return ({**shape, "window_size": [c["window"], 0]},
                chunked_window_flops(c["batch"], c["seqlen_q"], c["seqlen_cache"], c["heads"], c["window"]))
    s = S16K if row in ("dense_causal_16k", "sliding_window") else S8K
    shape = {"batch": s["batch"], "seqlen": s["seqlen"], "heads": s["heads"], "head_dim": D, "causal": True}
    if row == "sliding_window":
        return {**shape, "window_size": [s["window"], 0]}, window_flops(s["batch"], s["seqlen"], s["heads"], s["window"])
    extra = {"softcap": {"softcap": s.get("softcap")}, "sink": {"sinks": "float32 [heads]"},
             "alibi": {"score_mod": "alibi"}}.get(row, {})
    return {**shape, **extra}, causal_flops(s["batch"], s["heads"], s["seqlen"])


# ----------------------------------------------------------------------------------------------
# Feature costs, tables, JSON (pure: they work on the JSON)
# ----------------------------------------------------------------------------------------------

def feature_costs(results: list[dict]) -> list[dict]:
    """For each feature row and each backend measured both there and on the row's dense causal
    baseline (same shape, same tensors): time ratio and TFLOP/s ratio feature / dense."""
    got, out = measured(results), []
    for (row, backend), r in got.items():
        base = got.get((BASELINE.get(row, ""), backend))
        if base is not None:
            out.append({"row": row, "baseline": BASELINE[row], "backend": backend,
                        "time_ratio": r["ms"] / base["ms"], "tflops_ratio": r["tflops"] / base["tflops"]})
    return out


def format_tables(result: dict) -> str:
    lines = runner.table_lines(result, "prefill, bf16")
    costs = result.get("feature_costs") or feature_costs(result["results"])
    if costs:
        lines += ["", "feature cost against the dense causal kernel of the same shape (feature / dense):"]
        lines += [f"  {c['row']:15s} / {c['baseline']:17s} {c['backend']:31s} time x{c['time_ratio']:.3f}  "
                  f"TFLOP/s x{c['tflops_ratio']:.3f}" for c in costs]
    return "\n".join(lines)


REQUIRED_KEYS = ("schema", "created", "device", "environment", "timer", "fa4_cute", "flex", "settings", "rows",
                 "results", "feature_costs", "complete")
ROW_KEYS = ("row", "workload", "shape", "flops", "baseline")


def new_result(*, device: str, environment: dict, timer: dict, fa4_cute: dict, flex: dict, settings: dict) -> dict:
    return runner.new_result(SCHEMA, device=device, environment=environment, timer=timer,
                             backends={"fa4_cute": fa4_cute, "flex": flex}, settings=settings,
                             lists=("rows", "results", "feature_costs"))


def validate_result(result: Any) -> dict:
    """Raise ValueError naming what is missing when `result` is not a prefill-bench result."""
    return runner.validate_result(result, SCHEMA, "a prefill bench result", REQUIRED_KEYS, ROW_KEYS,
                                  "fa4mlir.bench.prefill_bench")


def save_result(result: dict, path: str | os.PathLike) -> None:
    runner.save_result(result, path, validate_result)


def load_result(path: str | os.PathLike) -> dict:
    return runner.load_result(path, validate_result)


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def run(args) -> int:
    """`python -m fa4mlir bench prefill` (its flags: fa4mlir/__main__.py)."""
    session = runner.start(args, "prefill", parse_workloads)
    if isinstance(session, int):
        return session
    from .prefill_workloads import build_family, import_flex
    torch, fa4 = session.torch, session.fa4
    tiles = [x.strip() for x in (getattr(args, "prefill_tiles", "") or "").split(";") if x.strip()]
    flex, flex_info = (None, {"available": False, "error": "--no-flex"}) if args.no_flex else import_flex(torch)
    result = new_result(device=session.device, environment=session.environment, timer=session.timer_desc,
                        fa4_cute=session.fa4_info, flex=flex_info,
                        settings={"workloads": session.names, "rounds": args.rounds,
                                  "bundle": os.environ.get("FA4MLIR_BUNDLE"), "prefill_tiles": tiles})
    plan = families(session.names)
    print(f"prefill bench: {result['device']}, torch {torch.__version__}, FA4-CuTe "
          f"{'yes' if fa4 else 'no'}, flex {'yes' if flex else 'no'}, rows {[r for rs in plan.values() for r in rs]}",
          flush=True)
    for family, rows in plan.items():
        runner.run_group(session, result, family, rows,
                         lambda family=family, rows=rows: build_family(torch, family, rows, fa4=fa4, flex=flex,
                                                                           tiles=tiles),
                         args.rounds, row_entry=lambda row: {"row": row.name, "workload": row.workload,
                                                             "shape": row.shape, "flops": row.flops,
                                                             "baseline": BASELINE.get(row.name)})
        result["feature_costs"] = feature_costs(result["results"])
        save_result(result, args.out)
    return runner.finish(result, args.out, save_result, format_tables)
