"""The attention entry points (MLIR-free at import): problem -> plan -> launch.

    errors.py   the typed errors every entry point raises before any driver call (FlashAttnInputError)
    checks.py   pure, deviceless checks of every argument (flags, stream, bundle, tensor-likes read
                into TensorInfo, scale): they build the AttnProblem
    problem.py  AttnProblem: what a call asks for (sizes, dtype, causal, scale)
    plan.py     select(problem, device, source) -> Plan: launches of (kernel, grid, named args);
                kernel sources (a bundle, FA4MLIR_BUNDLE's, the compiler)
    dense.py    flash_attn_func and its call cache of prepared plans
    kvcache.py  the KV-cache operand (contiguous, paged, FP8) and flash_attn_with_kvcache's checks and
                decode plan (plan_kvcache)
    kvcache_call.py  flash_attn_with_kvcache: the decode plan's two launches (split kernel, combine)
    mla.py      FlashMLA's get_mla_metadata and flash_mla_with_kvcache: absorbed MLA decode over a
                paged latent cache (attention_mla_decode_sm90, then the combine)
    mla_sparse.py  FlashMLA's flash_mla_sparse_fwd: sparse MLA prefill over top-k gathered rows
                (attention_mla_sparse_sm90)
    mla_sparse_decode.py  FlashMLA's flash_mla_with_kvcache with indices: sparse MLA decode over the
                paged latent cache (the same kernel, MLASparseDecodeConfig)
    varlen.py   flash_attn_varlen_func: ragged batches packed by cu_seqlens (VarlenProblem), one launch
    torch_ops.py  (imports torch; loaded on the first call with torch tensors) the fa4mlir:: torch
                custom ops flash_attn_func goes through, with their fake (meta) implementations

Import direction: errors <- problem <- checks <- plan <- dense <- this package. The kernel's side
of the launch contract (its parameter table, grid and arguments) is its config module's
(kernels/attention_sm90_config.py: LAUNCH_PARAMS, grid, launch_args).
"""
from __future__ import annotations

from .checks import (MAX_SOFTMAX_SCALE, MIN_SOFTMAX_SCALE, check_device_context, check_devices, check_flag, check_mask,
                     check_inputs, check_layout, check_lse, check_options, check_out, check_outputs, check_scale,
                     check_mods, check_sinks, check_softcap, check_stream, read_tensor)
from .dense import flash_attn_func
from .kvcache_call import flash_attn_with_kvcache
from .mla import flash_mla_with_kvcache, get_mla_metadata
from .mla_sparse import flash_mla_sparse_fwd
from .varlen import flash_attn_varlen_func
from .errors import (ERRORS, ArgumentTypeError, AutogradError, BundleError, DeviceError, DTypeError, EmptyInputError,
                     FlashAttnInputError, HeadDimError, HeadsRatioError, KnobError, KVScaleError, LayoutError, MaskError, ScaleError,
                     ScoreModError, SeqlensError, ShapeError, SoftcapError, UnsupportedFeatureError)
from .plan import ARCH, KernelSource, Launch, Plan, PreparedPlan, TensorRef, find_artifact, select, select_entry, source_for
from .problem import AttnProblem, VarlenProblem

__all__ = ["flash_attn_func", "flash_attn_with_kvcache", "flash_attn_varlen_func", "flash_mla_with_kvcache",
           "get_mla_metadata", "flash_mla_sparse_fwd", "AttnProblem", "VarlenProblem",
           "SeqlensError", "Plan", "PreparedPlan", "Launch", "TensorRef", "KernelSource", "select",
           "source_for", "select_entry", "find_artifact", "check_inputs", "check_outputs", "check_out", "check_lse",
           "check_scale", "check_softcap", "check_sinks", "check_flag", "check_mask", "check_stream", "check_options", "read_tensor", "check_devices",
           "check_device_context", "check_layout", "MIN_SOFTMAX_SCALE", "MAX_SOFTMAX_SCALE", "ARCH", "ERRORS",
           "FlashAttnInputError", "DTypeError", "ShapeError", "HeadDimError", "HeadsRatioError", "EmptyInputError",
           "LayoutError", "DeviceError", "ScaleError", "MaskError", "ArgumentTypeError", "BundleError", "AutogradError",
           "UnsupportedFeatureError", "KVScaleError", "KnobError", "SoftcapError", "ScoreModError", "check_mods"]
