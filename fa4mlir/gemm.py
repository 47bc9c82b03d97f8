"""GEMM front end (MLIR-free at import): C = A . B^T for the shipped GEMM kernels.

`gemm(a, b)` takes torch tensors (or DLPack / __cuda_array_interface__ producers) A [M, K] and
B [N, K], row-major bf16/f16, and returns C [M, N]. The kernel comes from a bundle
(`bundle=` or FA4MLIR_BUNDLE) or, when MLIR is installed, from the cache/compiler.
"""
from __future__ import annotations

from .runtime import Bundle, LoadedKernel, load, tensor_info

_LOADED: dict = {}


def grid_for(config: dict, m: int, n: int) -> tuple[int, int, int]:
    return ((n + config["bn"] - 1) // config["bn"], (m + config["bm"] - 1) // config["bm"], 1)


def check_operands(a_info, b_info, c_info) -> tuple[int, int, int]:
    """Shapes, dtypes and alignment, checked before any launch; returns (M, N, K)."""
    for name, info in (("a", a_info), ("b", b_info), ("c", c_info)):
        if len(info.shape) != 2:
            raise ValueError(f"gemm: {name} must be 2-D, got shape {tuple(info.shape)}")
    (m, k), (n, kb), (mc, nc) = a_info.shape, b_info.shape, c_info.shape
    if k != kb:
        raise ValueError(f"gemm: a is [M, K] = {tuple(a_info.shape)} and b is [N, K] = {tuple(b_info.shape)}; K differs")
    if (mc, nc) != (m, n):
        raise ValueError(f"gemm: c must be [M, N] = [{m}, {n}], got {tuple(c_info.shape)}")
    if not (a_info.dtype == b_info.dtype == c_info.dtype) or a_info.dtype not in ("bf16", "f16"):
        raise TypeError(f"gemm: a, b, c must share dtype bf16 or f16; got {a_info.dtype}, {b_info.dtype}, {c_info.dtype}")
    if k % 8 or n % 8:
        raise ValueError(f"gemm: K and N must be multiples of 8 (TMA needs 16-byte row strides); got K={k}, N={n}")
    for name, info in (("a", a_info), ("b", b_info), ("c", c_info)):
        if info.strides[-1] != 1:
            raise ValueError(f"gemm: {name} must be row-major with unit inner stride, got strides {info.strides}")
    return m, n, k


def kernel_for(arch: str, dtype: str, bundle: Bundle | None = None, **config) -> LoadedKernel:
    name = {"sm_90a": "gemm_sm90", "sm_100a": "gemm_sm100"}[arch]
    cache_key = (name, dtype, id(bundle), tuple(sorted(config.items())))
    if cache_key not in _LOADED:
        if bundle is not None:
            art = bundle.find(arch=arch, kernel=name, dtype=dtype, **config)
        else:
            from . import compiler, kernels  # needs MLIR
            cfg_cls = kernels.module(name).GemmConfig
            art = compiler.compile_kernel(name, cfg_cls(dtype=dtype, **config))
        _LOADED[cache_key] = load(art)
    return _LOADED[cache_key]


def gemm(a, b, out=None, *, bundle: Bundle | None = None, arch: str = "sm_90a", stream=None, **config):
    """C = A . B^T; `out` (C) is allocated with torch when not given."""
    a_info, b_info = tensor_info(a), tensor_info(b)
    if out is None:
        import torch
        out = torch.empty((a_info.shape[0], b_info.shape[0]), dtype=a.dtype, device=a.device)
    m, n, k = check_operands(a_info, b_info, tensor_info(out))
    kern = kernel_for(arch, a_info.dtype, bundle, **config)
    kern.launch(grid_for(kern.artifact.config, m, n), [a, b, out, m, n, k], stream=stream)
    return out
