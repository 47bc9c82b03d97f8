"""The interpreter against the H200: each sm_90a case of tests/interpret_sm90.py, run by the hardware
from the bundle's cubin on the inputs the interpreter ran on, must give the interpreter's outputs up
to float32 summation order.

Fixtures: `$FA4MLIR_BUNDLE/interpret/<case>.npz`, written where MLIR is (`make gpu-bundle`, or
`PYTHONPATH=. python -m tests.interpret_sm90 --out bundle/interpret` after the bundle): the inputs'
16-bit patterns, the interpreter's O and LSE (or C), the bundle query of the kernel.

Tolerance. Both sides compute the same float32 algorithm on the same bf16/f16 inputs; they differ
in the order an MMA sums its products (the interpreter sums each MMA's products in float64 and
rounds once; the tensor cores use their own float32 order) and in ex2.approx / lg2.approx (the
interpreter's are exact; the hardware's are within 2 ulp of float32). Those float32 differences
are a fraction of a float32 ulp of the sum of the products' magnitudes, not of the result: where a
dot product cancels (|C| ~1e-3 from products summing to |A||B|^T ~1e2, seen on the H200 in f16)
they are ~1e-6 absolute. A GEMM rounds them once, to C: every element within one 16-bit ulp (2^-7
relative for bf16, 2^-10 for f16) of the larger magnitude, plus 2^-22 (|A| |B|^T). Attention also rounds P to
16 bits before P V, where a near-tie can round one P element one ulp apart, moving O by up to that
ulp times p_j |v_j| / l: O within two 16-bit ulps of the larger magnitude plus 2^-3 ulp-units
absolute (bf16: 2^-10, f16: 2^-13). LSE (float32) within 1e-5 (1 + |LSE|). Also printed: the share
of elements not bit-identical (a few per cent expected).
Softcap cases: the hardware's tanh.approx.f32 is within 2^-11 relative of tanh (PTX ISA 9.7.4.9), the
interpreter's is exact, so each capped score may differ by eps = 2^-11 min(cap, |s|max) (|s|max =
scale max|q| max|k| D bounds the scaled score); the LSE moves by at most eps (its gradient in the
scores sums to 1) and O by at most 2 eps max|v| (sum_j p_j eps_j (v_j - O)), added to both tolerances.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fa4mlir import env

pytestmark = pytest.mark.gpu

ULP = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10}


def _fixture_dir() -> Path | None:
    root = env.bundle_dir()
    return None if root is None else Path(root) / "interpret"


def _fixtures() -> list:
    d = _fixture_dir()
    return sorted(d.glob("*.npz")) if d is not None and d.is_dir() else []


def _id(path) -> str:
    return Path(path).stem


@pytest.fixture(scope="module")
def torch_cuda(require_arch):
    require_arch(9)
    import torch
    return torch


def _half(torch, bits: np.ndarray, dtype: str):
    t = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16 if dtype == "bf16" else torch.float16)
    return t.cuda()


def test_fixtures_are_there(bundle):
    """The bundle carries the interpreter's fixtures (else every comparison below would be absent,
    not passed)."""
    assert _fixtures(), (f"no interpreter fixtures in {_fixture_dir()}: run `PYTHONPATH=. python -m "
                         f"tests.interpret_sm90 --out <bundle>/interpret` where MLIR is, then carry the bundle")


@pytest.mark.parametrize("path", _fixtures(), ids=_id)
def test_h200_matches_the_interpreter(path, bundle, torch_cuda, capsys):
    from fa4mlir.runtime import load
    from tests.interpret_sm90 import BY_NAME, launch
    torch = torch_cuda
    data = np.load(path)
    meta = json.loads(str(data["meta"]))
    case = BY_NAME[meta["case"]]
    art = bundle.find(**meta["bundle_query"])
    assert art.name == meta["kernel_name"], (art.name, meta["kernel_name"])
    kern = load(art)
    dt = case.dtype
    if case.kernel == "gemm":
        tensors = {n: _half(torch, data[n], dt) for n in ("a", "b")}
        tensors["c"] = torch.full((case.seqlen_q, case.seqlen_k), float("nan"), device="cuda",
                                  dtype=tensors["a"].dtype)
        outs = ["c"]
    else:
        tensors = {n: _half(torch, data[n], dt) for n in ("q", "k", "v")}
        tensors["o"] = torch.full(tuple(data["o"].shape), float("nan"), device="cuda", dtype=tensors["q"].dtype)   # D_v wide
        tensors["lse"] = torch.full(data["lse"].shape, float("nan"), device="cuda", dtype=torch.float32)
        if "sinks" in data:
            tensors["sinks"] = torch.from_numpy(data["sinks"]).cuda()
        outs = ["o", "lse"]
    grid, args = launch(case, tensors, art.config)
    kern.launch(grid, args)
    torch.cuda.synchronize()
    lines = []
    tanh_eps = 0.0   # softcap: the hardware tanh's error in the capped scores (module note)
    if getattr(case, "softcap", 0.0):
        q, k, v = (_half(torch, data[n], dt).double().abs().max().item() for n in ("q", "k", "v"))
        tanh_eps = 2.0 ** -11 * min(case.softcap, case.head_dim ** -0.5 * q * k * case.head_dim)
        v_max = v
    for name in outs:
        gpu = tensors[name].float().cpu().numpy() if name != "lse" else tensors[name].cpu().numpy()
        if name == "lse":
            ref = data["lse"]
            tol = 1e-5 * (1 + np.abs(ref)) + tanh_eps
        else:
            ref = _half(torch, data[name], dt).float().cpu().numpy()
            mag = np.maximum(np.abs(gpu), np.abs(ref))
            if case.kernel == "gemm":
                a, b = (_half(torch, data[n], dt).double().cpu().numpy() for n in ("a", "b"))
                tol = ULP[dt] * mag + 2.0 ** -22 * (np.abs(a) @ np.abs(b).T)
            else:
                tol = 2 * ULP[dt] * mag + ULP[dt] / 8 + (2 * tanh_eps * v_max if tanh_eps else 0.0)
        both_inf = np.isinf(gpu) & np.isinf(ref) & (np.sign(gpu) == np.sign(ref))
        with np.errstate(invalid="ignore"):      # inf - inf where both_inf: replaced by 0 below
            diff = np.where(both_inf, 0.0, np.abs(gpu.astype(np.float64) - ref))
        bad = ~(diff <= tol)                     # NaN on either side is bad
        differ = float(np.mean(np.where(both_inf, False, gpu != ref)))
        lines.append(f"{name}: max |gpu - interp| {np.nanmax(diff):.3g}, {100 * differ:.2f}% not identical, "
                     f"{int(bad.sum())} outside tolerance")
        where = [f"{tuple(int(i) for i in ix)}: gpu {gpu[tuple(ix)]!r} interp {ref[tuple(ix)]!r} tol {tol[tuple(ix)]:.3g}"
                 for ix in np.argwhere(bad)[:8]]
        assert not bad.any(), f"{case.name} {name}: {int(bad.sum())} element(s) outside tolerance; {lines[-1]}; {where}"
    with capsys.disabled():
        print(f"\n{case.name} ({art.name}): " + "; ".join(lines))
