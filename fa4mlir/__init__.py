"""fa4mlir: a compiler for FlashAttention-4-class attention kernels.

Python DSL (fa4mlir.dsl) -> MLIR (fa4 dialect + upstream) -> fa4 passes -> PTX -> cubin ->
CUDA driver launch (fa4mlir.runtime, MLIR-free). Importing this package imports no MLIR: the
compiler parts load on first use, so a machine with only a kernel bundle can run kernels.

Import rules (checked by tests/test_layering.py, which parses every module's imports; a lazy
import inside a function counts too). Lower layers never import higher ones:

    host       __init__, env, tensors, driver, artifacts, runtime, cache: pure Python. No MLIR (not
               even transitively) and nothing from _mlir, dialect, dsl, passes, kernels, lowering,
               compiler.
    _mlir      the one module that imports `mlir`.
    dialect    imports _mlir only (the op table, builders, and query.py: finding the kernel
               function, ops by name, PassError, the fa4.unverified marker).
    dsl        imports _mlir, dialect and runtime's ParamSpec/TmaSpec; never passes, kernels,
               lowering, compiler.
    passes     import _mlir and dialect; never kernels, dsl, lowering, compiler. Whatever a pass and
               a kernel both need lives in dialect.
    kernels    import dsl, dialect and kernels/common; never passes, lowering, compiler.
               kernels/*_config.py and the pure common pieces (constants, fastdiv, naming, tmem,
               paging, decode_schedule, attention_decode_sm90_config, attention_mla_decode_sm90_config) import no MLIR: the host API imports them. A config imports no other kernel module;
               what two configs or kernels share lives in kernels/common/, which imports no kernel.
    lowering, compiler, kernel_sets, __main__ sit on top.
    interpret  the CPU interpreter of nvvm-stage IR: imports _mlir, dialect, lowering (its stages)
               and the host's artefact specs; nothing of the package imports it.
    attention  the entry points: kernel configs and the kernel table only (launch contracts, tile
               tables), the compiler lazily (the "else the compiler" kernel source); no IR layer.
    bench      fa4mlir/bench/: what `python -m fa4mlir bench` runs (torch, triton at run time).
    sass, testing, testing_kvcache, testing_score_mod  test support (MLIR-free); nothing below imports them.
    bench/     the checkout's developer probes, not part of the package: no module of fa4mlir
               imports it.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"
_LAZY = {
    "gemm": ("fa4mlir.gemm", "gemm"),
    "flash_attn_func": ("fa4mlir.attention", "flash_attn_func"),
    "flash_attn_with_kvcache": ("fa4mlir.attention", "flash_attn_with_kvcache"),
    "flash_mla_with_kvcache": ("fa4mlir.attention.mla", "flash_mla_with_kvcache"),
    "get_mla_metadata": ("fa4mlir.attention.mla", "get_mla_metadata"),
    "flash_mla_sparse_fwd": ("fa4mlir.attention.mla_sparse", "flash_mla_sparse_fwd"),
    "flash_attn_varlen_func": ("fa4mlir.attention", "flash_attn_varlen_func"),
    **{err: ("fa4mlir.attention", err) for err in (
        "FlashAttnInputError", "DTypeError", "ShapeError", "HeadDimError", "HeadsRatioError",
        "EmptyInputError", "LayoutError", "DeviceError", "ScaleError", "MaskError", "ArgumentTypeError", "BundleError",
        "AutogradError", "UnsupportedFeatureError", "KVScaleError", "KnobError", "SoftcapError", "SeqlensError",
        "ScoreModError")},
    "ScoreMod": ("fa4mlir.kernels.common.score_mod", "ScoreMod"),
    "softcap_score_mod": ("fa4mlir.kernels.common.score_mod", "softcap_score_mod"),
    "score_mod_kernels": ("fa4mlir.kernel_sets", "score_mod_kernels"),
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
