"""The kernels fa4mlir ships, by name: each module has a frozen Config and `build(cfg) -> KernelIR`.

The table below is data only (module path, arch, cubin backend); importing a kernel module
imports MLIR, so lookups stay lazy. The cubin backend is the kernel's own compile option
(`fa4mlir.compiler`): ptxas for the sm_90a attention kernel and nvJitLink's LTO for the sm_100a one,
the routes that honour their setmaxnreg register split; nvJitLink (in process) for the rest.
"""
from __future__ import annotations

import importlib

# name -> (module, arch, cubin backend)
KERNELS = {
    "gemm_sm90": ("fa4mlir.kernels.gemm_sm90", "sm_90a", "nvjitlink"),
    "gemm_sm100": ("fa4mlir.kernels.gemm_sm100", "sm_100a", "nvjitlink"),
    "attention_fwd_sm90": ("fa4mlir.kernels.attention_fwd_sm90", "sm_90a", "ptxas"),
    "attention_fwd_sm100": ("fa4mlir.kernels.attention_fwd_sm100", "sm_100a", "nvjitlink-lto"),
    "deadlock_sm90": ("fa4mlir.kernels.deadlock_sm90", "sm_90a", "nvjitlink"),  # watchdog GPU test only
}


def module(name: str):
    return importlib.import_module(_entry(name)[0])


def _entry(name: str) -> tuple:
    if name not in KERNELS:
        raise KeyError(f"unknown kernel {name!r}; fa4mlir ships {', '.join(sorted(KERNELS))}")
    return KERNELS[name]


def arch(name: str) -> str:
    return _entry(name)[1]


def cubin_backend(name: str) -> str:
    """The kernel's own LLVM -> cubin route (fa4mlir.lowering.CompileOptions.cubin_backend)."""
    return _entry(name)[2]
