"""Test support (MLIR-free): GPU detection, references, the FlashAttention tolerance rule.

The FA rule: max |out - ref| against a float32 (or float64) reference is at most
`2 * max |torch_lowp - ref| + atol`, where torch_lowp is PyTorch's own bf16/fp16 computation of the
same thing. NaN never passes.
"""
from __future__ import annotations

import math
import subprocess
import sys

DEFAULT_ATOL = 1e-5


def gpu_available() -> tuple[bool, str]:
    """(True, "") when cuda.bindings sees a CUDA device, else (False, why). Never uses torch."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        return False, f"cuda.bindings not importable ({exc})"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:
        return False, f"no CUDA driver library ({exc})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"cuInit: {err.name}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return False, "no CUDA device"
    return True, ""


def fa_rule(out_err: float, lowp_err: float, atol: float = DEFAULT_ATOL) -> tuple[bool, float]:
    """(passes, bound) of the FA rule for measured max errors."""
    bound = 2.0 * lowp_err + atol
    ok = not (math.isnan(out_err) or math.isnan(lowp_err)) and out_err <= bound
    return ok, bound


def check_gemm(artifact_or_kernel, m: int, n: int, k: int, *, seed: int | None = None, dtype=None) -> dict:
    """Run one GEMM launch on fresh random inputs with a NaN-poisoned output; compare by the FA rule."""
    import torch

    from .gemm import grid_for
    from .runtime import LoadedKernel, load
    kern = artifact_or_kernel if isinstance(artifact_or_kernel, LoadedKernel) else load(artifact_or_kernel)
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[kern.artifact.config.get("dtype", "bf16")]
    gen = torch.Generator(device="cuda")
    gen.seed() if seed is None else gen.manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=tdt, generator=gen)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
    kern.launch(grid_for(kern.artifact.config, m, n), [a, b, c, m, n, k])
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    lowp = (a @ b.T).float()
    out_err = (c.float() - ref).abs().max().item()
    lowp_err = (lowp - ref).abs().max().item()
    ok, bound = fa_rule(out_err, lowp_err)
    unwritten = int(torch.isnan(c).sum().item())
    return {"kernel": kern.artifact.name, "m": m, "n": n, "k": k, "max_err": out_err, "torch_err": lowp_err,
            "bound": bound, "nan_or_unwritten": unwritten, "ok": ok and unwritten == 0}


def run_with_timeout(cmd: list[str], timeout_s: float, **kw) -> subprocess.CompletedProcess:
    """Run a command that may hang (a GPU deadlock): a hang becomes a failure, not a stuck session."""
    return subprocess.run(cmd, timeout=timeout_s, capture_output=True, text=True, **kw)


if __name__ == "__main__":
    print(gpu_available())
    sys.exit(0)
