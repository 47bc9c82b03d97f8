"""fa4mlir: a compiler for FlashAttention-4-class attention kernels.

Python DSL (fa4mlir.dsl) -> MLIR (fa4 dialect + upstream) -> fa4 passes -> PTX -> cubin ->
CUDA driver launch (fa4mlir.runtime, MLIR-free). Importing this package imports no MLIR: the
compiler parts load on first use, so a machine with only a kernel bundle can run kernels.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"
_LAZY = {
    "gemm": ("fa4mlir.gemm", "gemm"),
    "flash_attn_func": ("fa4mlir.attention", "flash_attn_func"),
    **{err: ("fa4mlir.attention", err) for err in (
        "FlashAttnInputError", "DTypeError", "ShapeError", "HeadDimError", "HeadsRatioError",
        "EmptyInputError", "LayoutError", "DeviceError", "ScaleError")},
    "AttnProblem": ("fa4mlir.attention", "AttnProblem"),
    "Bundle": ("fa4mlir.artifacts", "Bundle"),
    "load": ("fa4mlir.runtime", "load"),
    "write_bundle": ("fa4mlir.artifacts", "write_bundle"),
    "KernelBuilder": ("fa4mlir.dsl", "KernelBuilder"),
    "compile_kernel": ("fa4mlir.compiler", "compile_kernel"),
}


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'fa4mlir' has no attribute {name!r}")


__all__ = sorted(_LAZY)
