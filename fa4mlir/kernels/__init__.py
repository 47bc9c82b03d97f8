"""The kernels fa4mlir ships, by name: each module has a frozen Config and `build(cfg) -> KernelIR`.

The table below is data only (module paths, arch, default configs); importing a kernel module
imports MLIR, so lookups stay lazy.
"""
from __future__ import annotations

import importlib

# name -> (module, arch)
KERNELS = {
    "gemm_sm90": ("fa4mlir.kernels.gemm_sm90", "sm_90a"),
    "gemm_sm100": ("fa4mlir.kernels.gemm_sm100", "sm_100a"),
    "attention_fwd_sm90": ("fa4mlir.kernels.attention_fwd_sm90", "sm_90a"),
    "attention_fwd_sm100": ("fa4mlir.kernels.attention_fwd_sm100", "sm_100a"),
    "deadlock_sm90": ("fa4mlir.kernels.deadlock_sm90", "sm_90a"),  # watchdog GPU test only
}


def module(name: str):
    if name not in KERNELS:
        raise KeyError(f"unknown kernel {name!r}; fa4mlir ships {', '.join(sorted(KERNELS))}")
    return importlib.import_module(KERNELS[name][0])


def arch(name: str) -> str:
    return KERNELS[name][1]
