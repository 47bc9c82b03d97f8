"""Test support (MLIR-free): GPU detection, GEMM and attention references, the FlashAttention rule.
(SASS disassembly and loop parsing: fa4mlir/sass.py.)

The FA rule: max |out - ref| against a float32 (or float64) reference is at most
`2 * max |torch_lowp - ref| + atol`, where torch_lowp is PyTorch's own bf16/fp16 computation of the
same thing. NaN never passes.
"""
from __future__ import annotations

import math
import subprocess
import sys

DEFAULT_ATOL = 1e-5

# Prepended to a `python -c` script: any import of mlir in that process raises ImportError (tests of
# the MLIR-free runtime and front ends).
BLOCK_MLIR = """
import sys

class BlockMlir:
    def find_spec(self, name, path=None, target=None):
        if name == "mlir" or name.startswith("mlir."):
            raise ImportError(f"mlir is blocked in this test (import of {name})")
        return None

sys.meta_path.insert(0, BlockMlir())
"""


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


class FaTally:
    """Max errors of a kernel's out and lse, and of PyTorch's own low-precision math, against one
    float reference, gathered piece by piece (a sequence, its rows that see a key), then judged by
    the FA rule: ``add`` per piece, ``check`` at the end (asserts; returns the errors)."""

    def __init__(self):
        self.errs = {"out": 0.0, "out_lowp": 0.0, "lse": 0.0, "lse_lowp": 0.0}

    def add(self, out, low_out, ref_out, lse, low_lse, ref_lse) -> None:
        """One piece: torch tensors of the kernel, the low-precision math and the reference."""
        e = self.errs
        e["out"] = max(e["out"], (out - ref_out).abs().max().item())
        e["out_lowp"] = max(e["out_lowp"], (low_out - ref_out).abs().max().item())
        e["lse"] = max(e["lse"], (lse - ref_lse).abs().max().item())
        e["lse_lowp"] = max(e["lse_lowp"], (low_lse - ref_lse).abs().max().item())

    def check(self) -> dict:
        ok_out, bound = fa_rule(self.errs["out"], self.errs["out_lowp"])
        ok_lse, lse_bound = fa_rule(self.errs["lse"], self.errs["lse_lowp"])
        assert ok_out and ok_lse, {**self.errs, "bound": bound, "lse_bound": lse_bound}
        return self.errs


def raises(exc, words, fn, *args, **kw):
    """fn(*args, **kw) raises exactly exc (not a subclass), and its message holds every one of words.
    Returns the exception."""
    import pytest
    with pytest.raises(exc) as excinfo:
        fn(*args, **kw)
    assert type(excinfo.value) is exc, f"{type(excinfo.value).__name__}: {excinfo.value}"
    for w in words:
        assert w in str(excinfo.value), f"{w!r} not in {excinfo.value}"
    return excinfo.value


def torch_dtype(name: str):
    """The torch dtype of a kernel dtype name ("bf16", "f16")."""
    import torch
    return {"bf16": torch.bfloat16, "f16": torch.float16}[name]


def check_gemm(artifact_or_kernel, m: int, n: int, k: int, *, seed: int | None = None, dtype=None) -> dict:
    """Run one GEMM launch on fresh random inputs with a NaN-poisoned output; compare by the FA rule."""
    import torch

    from .gemm import grid_for
    from .runtime import LoadedKernel, load
    kern = artifact_or_kernel if isinstance(artifact_or_kernel, LoadedKernel) else load(artifact_or_kernel)
    tdt = torch_dtype(kern.artifact.config.get("dtype", "bf16"))
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


# ----------------------------------------------------------------------------------------------
# Attention: reference, PyTorch's low-precision computation, the FA rule on out and lse
# ----------------------------------------------------------------------------------------------

def attention_visible(seqlen_q: int, seqlen_k: int, causal: bool = False, window_size=(-1, -1),
                      attention_chunk: int = 0, device=None):
    """bool [seqlen_q, seqlen_k]: key j visible to query i, by FlashAttention's rule (bottom-right
    aligned on diag = i + seqlen_k - seqlen_q): causal, j <= diag; window (left, right), diag - left
    <= j <= diag + right (-1: that side unbounded; causal sets right to 0); attention_chunk c, j in
    diag's chunk [diag - diag mod c, that + c). Written from FA's definitions
    (flash_attn.cute.testing), not from fa4mlir's mask objects, which it checks."""
    import torch
    diag = torch.arange(seqlen_q, device=device)[:, None] + (seqlen_k - seqlen_q)
    j = torch.arange(seqlen_k, device=device)[None, :]
    left, right = window_size
    right = 0 if causal else right
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    if attention_chunk:
        start = diag - torch.remainder(diag, attention_chunk)
        ok &= (j >= start) & (j < start + attention_chunk)
    return ok


def attention_rows_visible(seqlen_q: int, seqlen_k: int, causal: bool, device=None, window_size=(-1, -1),
                           attention_chunk: int = 0):
    """bool [seqlen_q]: query rows that see at least one key (bottom-right causal: row i sees key j
    iff j <= i + seqlen_k - seqlen_q, so rows i < seqlen_q - seqlen_k see none; not causal: every row,
    unless there is no key; attention_visible for windows and chunks)."""
    import torch
    if window_size != (-1, -1) or attention_chunk:
        return attention_visible(seqlen_q, seqlen_k, causal, window_size, attention_chunk, device).any(dim=1)
    rows = torch.arange(seqlen_q, device=device)
    if causal:
        return rows >= seqlen_q - seqlen_k
    return torch.full_like(rows, seqlen_k > 0, dtype=torch.bool)   # no key at all: no row sees one


def attention_math(q, k, v, softmax_scale: float, causal: bool, compute_dtype, window_size=(-1, -1),
                   attention_chunk: int = 0, softcap: float = 0.0, sinks=None):
    """Plain attention with every step in ``compute_dtype``: float32/float64 for the reference,
    q.dtype for PyTorch's own low-precision computation (scores, softmax and P.V each rounded).
    q [B, Sq, H, D], k/v [B, Sk, Hkv, D] (k/v heads repeated for GQA here only). Returns out
    [B, Sq, H, D] and lse [B, H, Sq] in ``compute_dtype``; rows that see no key get out 0, lse +inf.
    softcap > 0 caps each scaled score s to softcap * tanh(s / softcap) before the mask
    (FlashAttention's rule); sinks [H] (gpt-oss, FA4's learnable_sink) is one more logit per row, in
    the softmax's denominator and the lse, with no value: a row that sees no key then gets out 0
    and lse = its sink."""
    import torch
    heads, kv_heads = q.shape[2], k.shape[2]
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    q_c = q.to(compute_dtype).transpose(1, 2)                                      # [B, H, Sq, D]
    k_c = k.to(compute_dtype).repeat_interleave(heads // kv_heads, dim=2).transpose(1, 2)
    v_c = v.to(compute_dtype).repeat_interleave(heads // kv_heads, dim=2).transpose(1, 2)
    s = (q_c @ k_c.transpose(-1, -2)) * softmax_scale                             # [B, H, Sq, Sk]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if window_size != (-1, -1) or attention_chunk:
        seen = attention_visible(seqlen_q, seqlen_k, causal, window_size, attention_chunk, q.device)
        s = s.masked_fill(~seen, float("-inf"))
    elif causal:
        i = torch.arange(seqlen_q, device=q.device)[:, None]
        j = torch.arange(seqlen_k, device=q.device)[None, :]
        s = s.masked_fill(j > i + seqlen_k - seqlen_q, float("-inf"))
    if sinks is not None:
        sink = sinks.to(compute_dtype).view(1, -1, 1, 1).expand(*s.shape[:3], 1)
        s = torch.cat([s, sink], dim=-1)
        p = torch.softmax(s, dim=-1)[..., :-1]
        return (p @ v_c).transpose(1, 2), torch.logsumexp(s, dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isneginf(lse)
    p = torch.softmax(s, dim=-1).masked_fill(empty[..., None], 0)
    out = (p @ v_c).transpose(1, 2)
    return out, lse.masked_fill(empty, float("inf"))


def compare_attention(q, k, v, out, lse, softmax_scale=None, causal: bool = False, *,
                      atol: float = DEFAULT_ATOL, window_size=(-1, -1), attention_chunk: int = 0,
                      softcap: float = 0.0, sinks=None) -> dict:
    """The FA rule on out and on lse (rows that see a key), exact 0 / +inf on rows that see none
    (with sinks: out 0, lse = the head's sink up to float32 rounding), and no NaN anywhere. The
    reference is float64 for small problems, float32 otherwise; softcap and sinks as
    attention_math takes them."""
    import torch
    b, seqlen_q, heads, head_dim = q.shape
    seqlen_k = k.shape[1]
    scale = head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
    ref_dtype = torch.float64 if b * heads * seqlen_q * seqlen_k <= 2**24 else torch.float32
    mask = dict(window_size=tuple(window_size), attention_chunk=attention_chunk)
    mods = dict(softcap=float(softcap), sinks=sinks)
    ref_out, ref_lse = attention_math(q, k, v, scale, causal, ref_dtype, **mask, **mods)
    low_out, low_lse = attention_math(q, k, v, scale, causal, q.dtype, **mask, **mods)
    rows = attention_rows_visible(seqlen_q, seqlen_k, causal, q.device, **mask)

    def max_err(x, ref, dim):
        x, ref = x.index_select(dim, rows.nonzero()[:, 0]), ref.index_select(dim, rows.nonzero()[:, 0])
        return (x.double() - ref.double()).abs().max().item() if x.numel() else 0.0

    out_err, lowp_err = max_err(out, ref_out, 1), max_err(low_out, ref_out, 1)
    lse_err, lse_lowp_err = max_err(lse, ref_lse, 2), max_err(low_lse, ref_lse, 2)
    ok_out, bound = fa_rule(out_err, lowp_err, atol)
    ok_lse, lse_bound = fa_rule(lse_err, lse_lowp_err, atol)
    masked_out, masked_lse = out[:, ~rows], lse[:, :, ~rows]
    if sinks is None:
        lse_ok = bool(torch.isposinf(masked_lse).all().item())
    else:
        want = sinks.float().view(1, -1, 1).expand(b, -1, seqlen_q)[:, :, ~rows]
        lse_ok = bool(torch.allclose(masked_lse.float(), want, rtol=1e-6, atol=1e-6))
    masked_ok = bool((masked_out == 0).all().item()) and lse_ok
    nan_out, nan_lse = int(torch.isnan(out).sum().item()), int(torch.isnan(lse).sum().item())
    lse_finite = bool(torch.isfinite(lse[:, :, rows]).all().item())
    return {"shape": (b, seqlen_q, seqlen_k, heads, k.shape[2], head_dim), "dtype": str(q.dtype),
            "causal": causal, "max_err": out_err, "torch_err": lowp_err, "bound": bound,
            "lse_err": lse_err, "lse_torch_err": lse_lowp_err, "lse_bound": lse_bound,
            "masked_rows": int((~rows).sum().item()), "masked_ok": masked_ok, "nan_out": nan_out,
            "nan_lse": nan_lse, "lse_finite": lse_finite,
            "ok": ok_out and ok_lse and masked_ok and lse_finite and nan_out == 0 and nan_lse == 0}


def attention_inputs(batch: int, seqlen_q: int, seqlen_k: int, heads: int, kv_heads: int, head_dim: int,
                     dtype: str, seed: int):
    """Fresh standard-normal q [B, Sq, H, D], k and v [B, Sk, Hkv, D] on the GPU."""
    import torch
    tdt = torch_dtype(dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, seqlen_q, heads, head_dim, device="cuda", dtype=tdt, generator=gen)
    k = torch.randn(batch, seqlen_k, kv_heads, head_dim, device="cuda", dtype=tdt, generator=gen)
    v = torch.randn(batch, seqlen_k, kv_heads, head_dim, device="cuda", dtype=tdt, generator=gen)
    return q, k, v


def check_attention(batch: int, seqlen_q: int, seqlen_k: int, heads: int, kv_heads: int, head_dim: int,
                    dtype: str = "bf16", causal: bool = False, *, seed: int = 0, softmax_scale=None,
                    bundle=None) -> dict:
    """flash_attn_func on fresh random inputs, writing into NaN-poisoned out and lse; compare_attention."""
    import torch

    from .attention import flash_attn_func
    q, k, v = attention_inputs(batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, dtype, seed)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((batch, heads, seqlen_q), float("nan"), device="cuda", dtype=torch.float32)
    got = flash_attn_func(q, k, v, softmax_scale, causal, return_lse=True, out=out, lse=lse, bundle=bundle)
    assert got[0] is out and got[1] is lse
    torch.cuda.synchronize()
    return compare_attention(q, k, v, out, lse, softmax_scale, causal)


def run_with_timeout(cmd: list[str], timeout_s: float, **kw) -> subprocess.CompletedProcess:
    """Run a command that may hang (a GPU deadlock): a hang becomes a failure, not a stuck session."""
    return subprocess.run(cmd, timeout=timeout_s, capture_output=True, text=True, **kw)


if __name__ == "__main__":
    print(gpu_available())
    sys.exit(0)
