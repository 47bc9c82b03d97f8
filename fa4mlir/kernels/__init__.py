"""The kernels fa4mlir ships, by name: each module has a frozen Config and `build(cfg) -> KernelIR`.

The table below is data only (module path, arch, cubin backend, whether its setmaxnreg split must
hold); importing a kernel module imports MLIR, so lookups stay lazy. The cubin backend is the
kernel's own compile option (`fa4mlir.compiler`): ptxas for the sm_90a attention kernel and
nvJitLink's LTO for the sm_100a one, the routes that honour their setmaxnreg register split;
nvJitLink (in process) for the rest. The attention kernels' consumers are budgeted more registers
than the launch gives every thread (240 of 168 at sm_90a, the MLA decode's too; 192 of 128 at sm_100a), which only
setmaxnreg moves to them: a backend that drops it (nvJitLink given PTX) spills them, so the compiler
refuses to pick one for them from the environment (`needs_setmaxnreg`).
"""
from __future__ import annotations

import importlib
from typing import NamedTuple


class KernelEntry(NamedTuple):
    module: str
    arch: str
    cubin_backend: str
    needs_setmaxnreg: bool   # a role's setmaxnreg budget exceeds the launch's registers per thread


KERNELS = {
    "gemm_sm90": KernelEntry("fa4mlir.kernels.gemm_sm90", "sm_90a", "nvjitlink", False),
    "gemm_sm100": KernelEntry("fa4mlir.kernels.gemm_sm100", "sm_100a", "nvjitlink", False),
    "attention_fwd_sm90": KernelEntry("fa4mlir.kernels.attention_fwd_sm90", "sm_90a", "ptxas", True),
    "attention_fwd_sm100": KernelEntry("fa4mlir.kernels.attention_fwd_sm100", "sm_100a", "nvjitlink-lto", True),
    "attention_decode_sm90": KernelEntry("fa4mlir.kernels.attention_decode_sm90", "sm_90a", "nvjitlink", False),
    "attention_combine_sm90": KernelEntry("fa4mlir.kernels.attention_combine_sm90", "sm_90a", "nvjitlink", False),
    "attention_combine_sm100": KernelEntry("fa4mlir.kernels.attention_combine_sm90", "sm_100a", "nvjitlink", False),
    "attention_mla_decode_sm90": KernelEntry("fa4mlir.kernels.attention_mla_decode_sm90", "sm_90a", "ptxas", True),
    "attention_mla_sparse_sm90": KernelEntry("fa4mlir.kernels.attention_mla_sparse_sm90", "sm_90a", "ptxas", True),
    "attention_mla_sparse_decode_sm90": KernelEntry("fa4mlir.kernels.attention_mla_sparse_sm90", "sm_90a", "ptxas",
                                                    True),
    "attention_mla_sparse_sm100": KernelEntry("fa4mlir.kernels.attention_mla_sparse_sm100", "sm_100a", "nvjitlink-lto",
                                              False),
    "attention_mla_sparse_sm100_pair": KernelEntry("fa4mlir.kernels.attention_mla_sparse_sm100_pair", "sm_100a",
                                                   "nvjitlink-lto", False),
    "kvcache_append_sm90": KernelEntry("fa4mlir.kernels.kvcache_append_sm90", "sm_90a", "nvjitlink", False),
    "deadlock_sm90": KernelEntry("fa4mlir.kernels.deadlock_sm90", "sm_90a", "nvjitlink", False),  # watchdog GPU test
}


def module(name: str):
    return importlib.import_module(_entry(name).module)


def _entry(name: str) -> KernelEntry:
    if name not in KERNELS:
        raise KeyError(f"unknown kernel {name!r}; fa4mlir ships {', '.join(sorted(KERNELS))}")
    return KERNELS[name]


def arch(name: str) -> str:
    return _entry(name).arch


def cubin_backend(name: str) -> str:
    """The kernel's own LLVM -> cubin route (fa4mlir.lowering.CompileOptions.cubin_backend)."""
    return _entry(name).cubin_backend


def needs_setmaxnreg(name: str) -> bool:
    """Whether the kernel's register split holds only when setmaxnreg is honoured: without it every
    thread keeps the launch's share, below what the kernel's consumers are budgeted, and they spill."""
    return _entry(name).needs_setmaxnreg
