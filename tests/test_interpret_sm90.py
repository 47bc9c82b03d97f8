"""Deviceless: the sm_90a attention and GEMM kernels executed by the interpreter (wgmma from SMEM
descriptors and register fragments, TMA, named-barrier turns, setmaxnreg, persistent tile loops),
numerics by the FA rule against a float64 reference (tests/interpret_sm90.py holds the cases).

The same cases, interpreted here and written into the bundle, are compared with the H200's
outputs by tests/gpu/test_interpret_vs_gpu.py. CI runs CI_CASES (one per kernel family, ~1-3 s
each); FA4MLIR_INTERPRET_SWEEP=1 runs every case under every schedule.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa4mlir import env, interpret  # noqa: E402
from fa4mlir.testing import compare_attention, fa_rule  # noqa: E402
from tests.interpret_sm90 import BY_NAME, CASES, Case, run  # noqa: E402

SWEEP = env.get_bool("FA4MLIR_INTERPRET_SWEEP")
CI_CASES = ["d64", "d128-causal", "d256", "d64-f16-causal-gqa", "gemm-bf16"]


def _tensor(bits: np.ndarray, dtype: str):
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16 if dtype == "bf16" else torch.float16)


def check(case: Case, got: dict) -> dict:
    """compare_attention's report (attention), or the FA rule on C against float64 (GEMM)."""
    if case.kernel == "gemm":
        a, b, c = (_tensor(got[n], case.dtype) for n in ("a", "b", "c"))
        ref = a.double() @ b.double().T
        err, lowp = (c.double() - ref).abs().max().item(), ((a @ b.T).double() - ref).abs().max().item()
        ok, bound = fa_rule(err, lowp)
        return {"ok": ok, "max_err": err, "bound": bound}
    q, k, v, o = (_tensor(got[n], case.dtype) for n in ("q", "k", "v", "o"))
    return compare_attention(q, k, v, o, torch.from_numpy(got["lse"]), case.head_dim ** -0.5, case.causal)


def _cases():
    if SWEEP:
        return [(c.name, pol) for c in CASES for pol in interpret.POLICIES]
    return [(n, "lazy") for n in CI_CASES]


@pytest.mark.parametrize("name,policy", _cases())
def test_sm90_kernel_through_the_interpreter(name, policy):
    case = BY_NAME[name]
    got = run(case, policy=policy, seed=1)
    report = check(case, got)
    assert report["ok"], report


def test_every_default_tile_is_a_case():
    """The cases cover every tile default_config picks (TILES and SHORT_TILES) and both GEMMs the
    gpu-tests bundle ships."""
    from fa4mlir.kernels.attention_sm90_config import SHORT_TILES, TILES
    from tests.interpret_sm90 import config
    covered = {(c.head_dim, c.causal, c.short) for c in CASES if c.kernel == "attention" and not c.tiles}
    want = {(d, c, False) for d, c in TILES} | {(d, c, True) for d, c in SHORT_TILES}
    # D128 causal: SHORT_TILES has no entry, default_config's one kernel is persistent
    assert want <= covered, want - covered
    assert {c.dtype for c in CASES if c.kernel == "gemm"} == {"bf16", "f16"}
    assert all(config(c) for c in CASES)


def test_every_case_is_a_kernel_of_the_gpu_tests_bundle():
    """The H200 comparison finds each case's cubin in a `gpu-tests` bundle: its config is one of that
    set's entries, with the kernel's own cubin backend (what Bundle.find is asked)."""
    from fa4mlir import kernel_sets, kernels
    from tests.interpret_sm90 import bundle_query
    entries = [{"cubin_backend": (over[0] if over else {}).get("cubin_backend", kernels.cubin_backend(name)),
                **cfg.key()} for name, cfg, *over in kernel_sets.configs(["gpu-tests"])]   # deduplicated, as bundled
    for case in CASES:
        query = {k: v for k, v in bundle_query(case).items() if k not in ("arch", "exact")}
        hits = [e for e in entries if e == query]   # Bundle.find(exact=True)
        assert len(hits) == 1, (case.name, query, len(hits))
