"""The sm_90a kernels through the interpreter: the cases, the runner, and the fixtures the H200 test
compares against (tests/gpu/test_interpret_vs_gpu.py).

Each case is a kernel of the `gpu-tests` bundle set (so the H200 runs the same kernel's cubin) at
a tiny shape. `run(case)` interprets it on fixed bf16/f16 inputs and returns the inputs, the
interpreter's outputs and what the GPU side needs to launch the cubin (the bundle query, the grid,
the problem). Written as .npz files here (MLIR needed), read there (no MLIR):

    PYTHONPATH=. python -m tests.interpret_sm90 --out bundle/interpret      # here, after the bundle
    FA4MLIR_BUNDLE=$PWD/bundle python3 -m pytest -m gpu tests/gpu/test_interpret_vs_gpu.py   # there

(`make gpu-bundle` runs the first after building the bundle.)
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Case:
    """One kernel at one problem shape. `tiles`: the fields of a kernel_sets.TILE_VARIANTS entry
    (attention; empty: default_config's kernel), or GemmConfig fields (gemm)."""
    name: str
    kernel: str                        # "attention" or "gemm"
    dtype: str = "bf16"
    head_dim: int = 128
    causal: bool = False
    short: bool = False                # default_config's SHORT_TILES (persistent) kernel
    tiles: dict = field(default_factory=dict)
    seqlen_q: int = 0                  # attention: query rows; gemm: M
    seqlen_k: int = 0                  # attention: keys; gemm: N
    heads: int = 1                     # attention: query heads; gemm: K
    kv_heads: int = 1
    window: tuple = (-1, -1)           # attention: FlashAttention's window_size (common.masks)
    chunk: int = 0                     # attention: attention_chunk
    softcap: float = 0.0               # attention: the cap (a launch argument of the softcap kernel)
    sinks: bool = False                # attention: sink logits per head (inputs' "sinks")
    head_dim_v: int = 0                # attention: v and o head dim (0: head_dim)

    @property
    def dim_v(self) -> int:
        return self.head_dim_v or self.head_dim

    @property
    def mask(self):
        from fa4mlir.kernels.common.mask_family import attention_mask
        return attention_mask(self.causal, self.window, self.chunk)


# Every default tile of the sm_90a attention kernel (TILES and SHORT_TILES), f16, GQA, a few tile
# variants, and the two shipped GEMMs; shapes ragged and with at least two K/V blocks.
CASES = [
    Case("d64", "attention", head_dim=64, seqlen_q=200, seqlen_k=300),
    Case("d64-short", "attention", head_dim=64, short=True, seqlen_q=150, seqlen_k=200),
    Case("d64-causal", "attention", head_dim=64, causal=True, seqlen_q=200, seqlen_k=250),
    Case("d64-causal-short", "attention", head_dim=64, causal=True, short=True, seqlen_q=260, seqlen_k=200),
    Case("d128", "attention", head_dim=128, seqlen_q=128, seqlen_k=300),
    Case("d128-short", "attention", head_dim=128, short=True, seqlen_q=200, seqlen_k=260),
    Case("d128-causal", "attention", head_dim=128, causal=True, seqlen_q=256, seqlen_k=256),
    Case("d256", "attention", head_dim=256, seqlen_q=100, seqlen_k=150),
    Case("d256-causal", "attention", head_dim=256, causal=True, seqlen_q=128, seqlen_k=140),
    Case("d64-f16-causal-gqa", "attention", dtype="f16", head_dim=64, causal=True, seqlen_q=130, seqlen_k=200,
         heads=2, kv_heads=1),
    Case("d128-gqa", "attention", head_dim=128, seqlen_q=64, seqlen_k=200, heads=3, kv_heads=1),
    Case("d64-nopp", "attention", head_dim=64, tiles=dict(bm=128, bn=128, stages=2, pingpong=False),
         seqlen_q=128, seqlen_k=300),
    Case("d128-causal-bn64", "attention", head_dim=128, causal=True,
         tiles=dict(bm=128, bn=64, stages=2, pingpong=True, persistent=True), seqlen_q=200, seqlen_k=200),
    Case("d256-rescale-before-pv", "attention", head_dim=256,
         tiles=dict(bm=128, bn=64, stages=2, pingpong=True, rescale_before_pv=True), seqlen_q=64, seqlen_k=150),
    Case("gemm-bf16", "gemm", tiles=dict(bn=256, stages=4), seqlen_q=200, seqlen_k=264, heads=136),
    Case("gemm-f16", "gemm", dtype="f16", tiles=dict(bn=256, stages=4), seqlen_q=130, seqlen_k=264, heads=200),
]
# Sliding windows and chunks (kernels/common/masks.py): skipped blocks on the left, masked left and
# right edges, whole blocks between, seqlen_q != seqlen_k; tests/test_interpret_masks.py runs them
MASK_CASES = [
    Case("d64-window-left", "attention", head_dim=64, window=(70, -1), seqlen_q=200, seqlen_k=450),
    Case("d64-window-lr", "attention", head_dim=64, window=(90, 30), seqlen_q=150, seqlen_k=420),
    Case("d128-causal-window", "attention", head_dim=128, causal=True, window=(100, -1), seqlen_q=400, seqlen_k=400),
    Case("d64-causal-chunk", "attention", head_dim=64, causal=True, chunk=100, seqlen_q=200, seqlen_k=300),
    Case("d128-chunk-short", "attention", head_dim=128, short=True, chunk=150, seqlen_q=300, seqlen_k=260),
]
# Softcap and sinks (kernels/attention_fwd_sm90.py's module note): caps small enough that the tanh
# bends the scores, sinks of either sign, causal rows that see no key (seqlen_q > seqlen_k), a window;
# tests/test_interpret_softcap_sinks.py runs them
SCORE_CASES = [
    Case("d64-softcap", "attention", head_dim=64, softcap=2.0, seqlen_q=150, seqlen_k=300),
    Case("d128-causal-window-softcap", "attention", head_dim=128, causal=True, window=(256, -1), softcap=3.0,
         seqlen_q=64, seqlen_k=400),
    Case("d256-causal-sink", "attention", head_dim=256, causal=True, sinks=True, seqlen_q=140, seqlen_k=100,
         heads=2, kv_heads=1),
    Case("d128-causal-softcap-sink", "attention", head_dim=128, causal=True, softcap=2.0, sinks=True, seqlen_q=130,
         seqlen_k=70, heads=2, kv_heads=1),
    # the softcap rule (common/softcap_rule.py): the cases above run the bf16 fixed-max kernel; these the running-max
    # one (a cap above FIXED_MAX_CAP, and f16)
    Case("d128-causal-softcap60", "attention", head_dim=128, causal=True, softcap=60.0, seqlen_q=130, seqlen_k=200),
    Case("d128-f16-causal-softcap", "attention", dtype="f16", head_dim=128, causal=True, softcap=3.0, seqlen_q=130,
         seqlen_k=200),
]
# Head dims 96 (the 64-byte swizzle: three 32-column chunks) and 192, and qk 192 / v 128 (MLA prefill):
# kernel_sets.HEAD_DIM_CASES' kernels, at least two K/V blocks, ragged tails, GQA;
# tests/test_interpret_head_dims.py runs them
HEAD_DIM_CASES = [
    Case("d96", "attention", head_dim=96, seqlen_q=130, seqlen_k=300),
    Case("d96-f16-causal-gqa", "attention", dtype="f16", head_dim=96, causal=True, seqlen_q=200, seqlen_k=180,
         heads=2, kv_heads=1),
    Case("d192", "attention", head_dim=192, seqlen_q=70, seqlen_k=250),
    Case("d192-causal", "attention", head_dim=192, causal=True, seqlen_q=150, seqlen_k=260),
    Case("d192v128", "attention", head_dim=192, head_dim_v=128, seqlen_q=100, seqlen_k=270),
    Case("d192v128-f16-causal-gqa", "attention", dtype="f16", head_dim=192, head_dim_v=128, causal=True,
         seqlen_q=140, seqlen_k=200, heads=2, kv_heads=1),
]
CASES += MASK_CASES + SCORE_CASES + HEAD_DIM_CASES
BY_NAME = {c.name: c for c in CASES}


def config(case: Case):
    if case.kernel == "gemm":
        from fa4mlir.kernels.gemm_sm90 import GemmConfig
        return GemmConfig(dtype=case.dtype, **case.tiles).validate()
    from fa4mlir.kernels.attention_sm90_config import AttnConfig, default_config
    if case.tiles:          # a tile variant, as kernel_sets.tile_variants builds it (default knobs)
        return AttnConfig(dtype=case.dtype, head_dim=case.head_dim, causal=case.causal, **case.tiles).validate()
    mask = None if case.mask.is_legacy else case.mask
    return default_config(case.dtype, case.head_dim, case.causal, 1 if case.short else None, mask=mask,
                          softcap=case.softcap > 0, sinks=case.sinks, head_dim_v=case.head_dim_v, cap=case.softcap)


def _bits(x: np.ndarray, dtype: str) -> np.ndarray:
    import torch
    t = torch.from_numpy(x).to(torch.bfloat16 if dtype == "bf16" else torch.float16)
    return t.view(torch.int16).numpy().view(np.uint16).copy()


def _problem(case: Case):
    from fa4mlir.attention.problem import AttnProblem
    d = case.head_dim
    problem = AttnProblem.of((1, case.seqlen_q, case.heads, d), (1, case.seqlen_k, case.kv_heads, d), case.dtype,
                             causal=case.causal)
    return replace(problem, softcap=case.softcap, sinks=case.sinks, head_dim_v=case.head_dim_v)


def inputs(case: Case, seed: int = 0) -> dict:
    """Standard-normal inputs as 16-bit patterns: q, k, v [1, S, H, D] or a [M, K], b [N, K]; with
    sinks also float32 sinks [H], 3x standard normal (some above every row's scores, some below)."""
    rng = np.random.default_rng(seed)
    if case.kernel == "gemm":
        m, n, k = case.seqlen_q, case.seqlen_k, case.heads
        return {"a": _bits(rng.standard_normal((m, k), np.float32), case.dtype),
                "b": _bits(rng.standard_normal((n, k), np.float32), case.dtype)}
    d = case.head_dim
    out = {"q": _bits(rng.standard_normal((1, case.seqlen_q, case.heads, d), np.float32), case.dtype),
           "k": _bits(rng.standard_normal((1, case.seqlen_k, case.kv_heads, d), np.float32), case.dtype),
           "v": _bits(rng.standard_normal((1, case.seqlen_k, case.kv_heads, case.dim_v), np.float32), case.dtype)}
    if case.sinks:
        out["sinks"] = (3 * rng.standard_normal(case.heads)).astype(np.float32)
    return out


def launch(case: Case, tensors: dict, tile_config: dict | None = None):
    """(grid, args by name) of the case's kernel over `tensors` (numpy here, torch on the GPU):
    q, k, v, o, lse or a, b, c. MLIR-free (the GPU side calls it): a GEMM's tiles come from
    `tile_config` (the bundle artifact's config there; GemmConfig lives with the kernel builder)."""
    if case.kernel == "gemm":
        from fa4mlir.gemm import grid_for
        m, n, k = case.seqlen_q, case.seqlen_k, case.heads
        args = {"a_desc": tensors["a"], "b_desc": tensors["b"], "c": tensors["c"], "m": m, "n": n, "k": k}
        return grid_for(tile_config or config(case).__dict__, m, n), args
    from fa4mlir.kernels.attention_sm90_config import grid, launch_args
    cfg, problem = config(case), _problem(case)
    return grid(cfg, problem), launch_args(cfg, problem, tensors)


def bundle_query(case: Case) -> dict:
    """What picks the case's kernel out of a `gpu-tests` bundle (Bundle.find keywords; exact: the
    varlen, head_dim_v and score_mod variants hold every item of the plain key)."""
    from fa4mlir import kernels
    cfg = config(case)
    name = "gemm_sm90" if case.kernel == "gemm" else "attention_fwd_sm90"
    return {"arch": "sm_90a", "exact": True, "cubin_backend": kernels.cubin_backend(name), **cfg.key()}


def outputs_like(case: Case) -> dict:
    """NaN-poisoned outputs: o [1, Sq, H, D] + lse [1, H, Sq], or c [M, N]."""
    if case.kernel == "gemm":
        return {"c": np.full((case.seqlen_q, case.seqlen_k), 0x7FC0 if case.dtype == "bf16" else 0x7E00, np.uint16)}
    nan16 = 0x7FC0 if case.dtype == "bf16" else 0x7E00
    return {"o": np.full((1, case.seqlen_q, case.heads, case.dim_v), nan16, np.uint16),
            "lse": np.full((1, case.heads, case.seqlen_q), np.nan, np.float32)}


def run(case: Case, *, policy: str = "lazy", seed: int = 0) -> dict:
    """Interpret the case: {inputs..., outputs..., 'stats', 'seconds'}."""
    from fa4mlir import interpret
    from fa4mlir.kernels import attention_fwd_sm90, gemm_sm90
    t0 = time.perf_counter()
    module = gemm_sm90 if case.kernel == "gemm" else attention_fwd_sm90
    kernel = interpret.load(module.build(config(case)))
    t1 = time.perf_counter()
    tensors = {**inputs(case), **outputs_like(case)}
    grid, args = launch(case, tensors)
    done = kernel.launch(grid, args, policy=policy, seed=seed)
    t2 = time.perf_counter()
    return {**tensors, "kernel_name": kernel.name, "load_seconds": t1 - t0, "run_seconds": t2 - t1,
            "warp_ops": sum(c.stats["warp_ops"] for c in done), "ctas": len(done)}


def write_fixture(case: Case, out: Path) -> Path:
    got = run(case)
    meta = {"case": case.name, "kernel_name": got["kernel_name"], "bundle_query": bundle_query(case)}
    arrays = {k: v for k, v in got.items() if isinstance(v, np.ndarray)}
    path = out / f"{case.name}.npz"
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
    print(f"{case.name}: {got['kernel_name']}, {got['ctas']} CTA(s), {got['warp_ops']} warp-ops, "
          f"{got['load_seconds']:.1f} s load + {got['run_seconds']:.1f} s run -> {path}", flush=True)
    return path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Interpret the sm_90a cases; write the fixtures the H200 test reads.")
    ap.add_argument("--out", required=True, type=Path, help="folder (inside the carried bundle: bundle/interpret)")
    ap.add_argument("--case", action="append", choices=sorted(BY_NAME), help="only these cases")
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if not ns.case or case.name in ns.case:
            write_fixture(case, ns.out)


if __name__ == "__main__":
    main()
