"""FlashAttention forward front end (MLIR-free at import) for the sm_90a attention kernel.

    out = flash_attn_func(q, k, v, softmax_scale=None, causal=False)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)

q is [batch, seqlen_q, heads, head_dim]; k and v are [batch, seqlen_k, kv_heads, head_dim]; one
dtype, bf16 or f16; head_dim 64, 128 or 256; heads a multiple of kv_heads (GQA, MQA). out has q's
shape and dtype; lse is float32 [batch, heads, seqlen_q], the natural-log logsumexp of the scaled
scores. The causal mask is aligned bottom-right: query i sees key j iff j <= i + seqlen_k -
seqlen_q; a query row that sees no key gets out = 0 and lse = +inf (FlashAttention's convention).
softmax_scale defaults to 1 / sqrt(head_dim).

Tensors: torch tensors or any __cuda_array_interface__ / DLPack producer, on one sm_90 GPU; strided
layouts are fine as long as TMA can address them (unit head_dim stride, 16-byte strides and base).
out and lse are written where given (out=, lse=), else allocated with torch on the inputs' device;
callers without torch pass both. The kernel runs on ``stream``, or when it is None on torch's current
stream if any argument is a torch tensor, else on the legacy default stream.

The kernel comes from ``bundle=``, else from the FA4MLIR_BUNDLE bundle, else from the compiler
(needs MLIR; compiles ``default_config`` in ``KERNEL_ENV``): the persistent tiles when seqlen_k is at
most ``SHORT_SEQLEN_K`` of the case (D64 and D128 non-causal: 8192, D64 causal: 4096; D128
causal is persistent at every length), else the others. Every argument
problem raises a ``FlashAttnInputError`` (a ValueError) subclass before any launch:

    DTypeError       (also a TypeError) dtype not bf16/f16, q/k/v dtypes differ, out/lse dtype,
                     an argument that is not a tensor-like
    ShapeError       not 4-D; batch or head_dim differ; k and v shapes differ; out/lse shape
    HeadDimError     head_dim not in HEAD_DIMS
    HeadsRatioError  heads not a multiple of kv_heads
    EmptyInputError  a dimension is 0
    LayoutError      head_dim stride not 1; other strides not 16-byte multiples; negative or
                     overlapping strides; base not 16-byte aligned; lse not contiguous
    DeviceError      not a CUDA tensor; tensors on different devices; device not sm_90
    ScaleError       softmax_scale not a finite positive number

A call on torch tensors whose signature (shapes, strides, dtypes and devices of every tensor,
the scale, causal, the bundle, the kernel environment) was seen before skips the checks and the
kernel lookup: it checks the new addresses' alignment and launches the ``runtime.PreparedLaunch``
that signature was prepared into (``_CALLS``, the last ``CALLS_KEPT``).

The checks are pure functions of ``runtime.TensorInfo`` (``check_inputs``, ``check_outputs``,
``check_devices``, ``check_device_context``, ``check_scale``) so that they can be tested without a GPU.
"""
from __future__ import annotations

import math
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Sequence

from . import env
from .kernels import attention_sm90_config as attn_cfg
from .runtime import (DTYPES, GMEM_ALIGN_BYTES, Bundle, KernelArtifact, LoadedKernel, TensorInfo,
                      load, resolve_stream, tensor_info)

ARCH = "sm_90a"
# The kernel's compile environment: ptxas honours setmaxnreg (nvJitLink drops it, ptxas C7504), and
# the kernel's 24/240 register split depends on it. Used by the compiler path and bundles.attention.
KERNEL_ENV = {"FA4MLIR_CUBIN_BACKEND": "ptxas"}
MAX_GRID_YZ = 65535      # CUDA limit on gridDim.y (heads) and gridDim.z (batch)
MAX_I32 = 2**31 - 1      # seqlen_q and seqlen_k are i32 kernel params
MAX_STRIDE_BYTES = 2**40  # TMA global stride limit


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------

class FlashAttnInputError(ValueError):
    """A flash_attn_func argument the kernel cannot take; raised before any launch."""


class DTypeError(FlashAttnInputError, TypeError):
    """dtype not bf16/f16, q/k/v dtypes differ, or out/lse have the wrong dtype."""


class ShapeError(FlashAttnInputError):
    """Wrong rank, mismatched batch/head_dim, k/v shapes differ, or out/lse of the wrong shape."""


class HeadDimError(FlashAttnInputError):
    """head_dim is not one the kernel is built for."""


class HeadsRatioError(FlashAttnInputError):
    """heads is not a multiple of kv_heads."""


class EmptyInputError(FlashAttnInputError):
    """A tensor has a zero-sized dimension."""


class LayoutError(FlashAttnInputError):
    """Strides or base address TMA cannot address (or an lse that is not contiguous)."""


class DeviceError(FlashAttnInputError):
    """Not a CUDA tensor, tensors on different devices, or a device that is not sm_90."""


class ScaleError(FlashAttnInputError):
    """softmax_scale is not a finite positive number."""


ERRORS = (FlashAttnInputError, DTypeError, ShapeError, HeadDimError, HeadsRatioError,
          EmptyInputError, LayoutError, DeviceError, ScaleError)

# ----------------------------------------------------------------------------------------------
# Checks: pure functions of TensorInfo
# ----------------------------------------------------------------------------------------------

QKV_DIMS = ("batch", "seqlen", "heads", "head_dim")
LSE_DIMS = ("batch", "heads", "seqlen_q")


@dataclass(frozen=True)
class AttnDims:
    """The problem size that check_inputs derives from q, k, v."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str

    @property
    def heads_per_kv(self) -> int:
        return self.heads // self.kv_heads

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.seqlen_q, self.heads, self.head_dim)

    @property
    def lse_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.heads, self.seqlen_q)


def _err(msg: str) -> str:
    return f"flash_attn_func: {msg}"


def check_layout(name: str, info: TensorInfo, dim_names: Sequence[str] = QKV_DIMS) -> None:
    """Strides and base address a TMA descriptor can take: innermost stride 1, other strides
    positive 16-byte multiples that do not alias, base 16-byte aligned. Size-1 dims are ignored
    (their stride is arbitrary; runtime.tma_encoding replaces it)."""
    elem = DTYPES[info.dtype][0]
    align_elems = GMEM_ALIGN_BYTES // elem
    if any(s < 0 for s in info.strides):
        raise LayoutError(_err(f"{name} has negative strides {info.strides} (elements); TMA needs "
                               f"positive strides: pass {name}.contiguous() (or undo the flip)"))
    if info.strides[-1] != 1:
        raise LayoutError(_err(f"{name} must have stride 1 along {dim_names[-1]}, got strides "
                               f"{info.strides} (elements); pass {name}.contiguous()"))
    big = [(s, n, d) for d, (s, n) in enumerate(zip(info.strides, info.shape)) if n > 1]
    for s, n, d in reversed(big):  # innermost first: the root cause
        if d != len(info.shape) - 1 and (s % align_elems or s * elem >= MAX_STRIDE_BYTES):
            raise LayoutError(_err(
                f"{name} stride along {dim_names[d]} is {s} elements = {s * elem} bytes; TMA needs a "
                f"multiple of {GMEM_ALIGN_BYTES} bytes ({align_elems} {info.dtype} elements) below "
                f"2^40: pass {name}.contiguous(), or pad the inner dimensions to a multiple of "
                f"{align_elems} elements"))
    ordered = sorted(big)
    if ordered and ordered[0][0] == 0:
        raise LayoutError(_err(
            f"{name} has stride 0 along {dim_names[ordered[0][2]]} (strides {info.strides}, shape "
            f"{info.shape}): a broadcast view whose elements overlap; pass {name}.contiguous() (for "
            f"GQA/MQA pass k and v with kv_heads heads instead of expanding them)"))
    for (s0, n0, d0), (s1, _, d1) in zip(ordered, ordered[1:]):
        if s1 < s0 * n0:
            raise LayoutError(_err(
                f"{name} has overlapping strides {info.strides} for shape {info.shape}: dim "
                f"{dim_names[d1]} (stride {s1}) aliases dim {dim_names[d0]} ({n0} x stride {s0}); "
                f"pass {name}.contiguous() (for GQA/MQA pass k and v with kv_heads heads instead of "
                f"expanding them)"))
    if info.ptr % GMEM_ALIGN_BYTES:
        raise LayoutError(_err(
            f"{name} data pointer {info.ptr:#x} is not {GMEM_ALIGN_BYTES}-byte aligned (offset "
            f"{info.ptr % GMEM_ALIGN_BYTES} bytes); TMA needs a {GMEM_ALIGN_BYTES}-byte aligned base: "
            f"pass {name}.clone(), or slice at an offset that is a multiple of {align_elems} elements"))


def check_inputs(q_info: TensorInfo, k_info: TensorInfo, v_info: TensorInfo) -> AttnDims:
    """dtype, rank, sizes, head_dim, heads ratio and TMA layout of q, k, v (no device check);
    returns the problem size."""
    named = (("q", q_info), ("k", k_info), ("v", v_info))
    for name, info in named:
        if len(info.shape) != 4:
            raise ShapeError(_err(f"{name} must be 4-D [batch, seqlen, heads, head_dim], got shape "
                                  f"{tuple(info.shape)}; reshape it (e.g. x.view(batch, seqlen, heads, "
                                  f"head_dim); split a packed qkv first)"))
    for name, info in named:
        if info.dtype not in attn_cfg.DTYPES:
            raise DTypeError(_err(f"{name} has dtype {info.dtype}; expected one of {attn_cfg.DTYPES}: "
                                  f"convert it (e.g. {name}.to(torch.bfloat16))"))
    if not q_info.dtype == k_info.dtype == v_info.dtype:
        raise DTypeError(_err(f"q, k, v must share one dtype, got q={q_info.dtype}, k={k_info.dtype}, "
                              f"v={v_info.dtype}; convert them all to bf16 or all to f16"))
    for name, info in named:
        empty = [f"{d}=0" for d, n in zip(QKV_DIMS, info.shape) if n == 0]
        if empty:
            raise EmptyInputError(_err(f"{name} has shape {tuple(info.shape)} with an empty dimension "
                                       f"({', '.join(empty)}); every dimension must be >= 1: skip the "
                                       f"call for empty inputs"))
    (b, sq, h, d), (bk, sk, hk, dk) = q_info.shape, k_info.shape
    for name, info in (("k", k_info), ("v", v_info)):
        if info.shape[0] != b:
            raise ShapeError(_err(f"batch differs: q has batch {b} (shape {tuple(q_info.shape)}), {name} "
                                  f"has batch {info.shape[0]} (shape {tuple(info.shape)}); q, k, v need "
                                  f"one batch size"))
        if info.shape[3] != d:
            raise ShapeError(_err(f"head_dim differs: q has head_dim {d}, {name} has head_dim "
                                  f"{info.shape[3]}; q, k, v need one head_dim (zero-pad the smaller)"))
    if tuple(k_info.shape) != tuple(v_info.shape):
        raise ShapeError(_err(f"k and v must have the same shape [batch, seqlen_k, kv_heads, head_dim], "
                              f"got k {tuple(k_info.shape)} and v {tuple(v_info.shape)}"))
    if d not in attn_cfg.HEAD_DIMS:
        up = [x for x in attn_cfg.HEAD_DIMS if x > d]
        hint = (f": zero-pad q, k, v to head_dim {up[0]}, pass softmax_scale={d ** -0.5:.6g} "
                f"(1/sqrt({d})) and slice out[..., :{d}]") if up else ""
        raise HeadDimError(_err(f"head_dim {d} is not supported; the sm_90a kernel is built for head_dim "
                                f"in {attn_cfg.HEAD_DIMS}{hint}"))
    if h % hk:
        raise HeadsRatioError(_err(f"q has {h} heads and k/v have {hk}; heads must be a multiple of "
                                   f"kv_heads (GQA/MQA: each k/v head serves heads // kv_heads q heads)"))
    if b > MAX_GRID_YZ or h > MAX_GRID_YZ:
        raise ShapeError(_err(f"batch {b} and heads {h} must be at most {MAX_GRID_YZ} (CUDA grid "
                              f"limit): split the call"))
    if sq > MAX_I32 or sk > MAX_I32:
        raise ShapeError(_err(f"seqlen_q {sq} and seqlen_k {sk} must fit in int32"))
    for name, info in named:
        check_layout(name, info)
    return AttnDims(b, sq, sk, h, hk, d, q_info.dtype)


def check_outputs(dims: AttnDims, out_info: TensorInfo, lse_info: TensorInfo) -> None:
    """out: q's shape and dtype, TMA layout; lse: float32 [batch, heads, seqlen_q], contiguous."""
    if tuple(out_info.shape) != dims.out_shape:
        raise ShapeError(_err(f"out must have q's shape {dims.out_shape}, got {tuple(out_info.shape)}"))
    if out_info.dtype != dims.dtype:
        raise DTypeError(_err(f"out must have q's dtype {dims.dtype}, got {out_info.dtype}"))
    check_layout("out", out_info)
    if lse_info.dtype != "f32":
        raise DTypeError(_err(f"lse must be float32, got {lse_info.dtype}; allocate it with "
                              f"torch.empty({dims.lse_shape}, dtype=torch.float32)"))
    if tuple(lse_info.shape) != dims.lse_shape:
        raise ShapeError(_err(f"lse must have shape [batch, heads, seqlen_q] = {dims.lse_shape}, got "
                              f"{tuple(lse_info.shape)}"))
    want = (dims.heads * dims.seqlen_q, dims.seqlen_q, 1)
    bad = [LSE_DIMS[i] for i, (n, s, w) in enumerate(zip(lse_info.shape, lse_info.strides, want))
           if n > 1 and s != w]
    if bad:
        raise LayoutError(_err(f"lse must be contiguous (strides {want}), got strides {lse_info.strides} "
                               f"(wrong along {', '.join(bad)}); pass a contiguous tensor"))
    if lse_info.ptr % GMEM_ALIGN_BYTES:
        raise LayoutError(_err(f"lse data pointer {lse_info.ptr:#x} is not {GMEM_ALIGN_BYTES}-byte aligned; "
                               f"allocate it fresh or slice at a multiple of 4 elements"))


def check_scale(softmax_scale: Any, head_dim: int) -> float:
    """softmax_scale as a float; None means 1/sqrt(head_dim)."""
    if softmax_scale is None:
        return head_dim ** -0.5
    if isinstance(softmax_scale, (bool, str, bytes)):
        value = math.nan
    else:
        try:
            value = float(softmax_scale)
        except (TypeError, ValueError):
            value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ScaleError(_err(f"softmax_scale must be a finite positive number, got {softmax_scale!r}; "
                              f"pass None for 1/sqrt(head_dim) = {head_dim ** -0.5:.6g}"))
    return value


CUDA_DEVICES = ("cuda", "cuda_managed")


def check_devices(devices: Sequence[tuple[str, str, int | None]]) -> int | None:
    """devices: (name, device type, ordinal or None when unknown) per tensor. All must be CUDA and,
    where known, on one ordinal; returns that ordinal (None if none is known)."""
    for name, dev, _ in devices:
        if dev not in CUDA_DEVICES:
            raise DeviceError(_err(f"{name} is on device {dev!r}; expected a CUDA tensor: move it to the "
                                   f"GPU first (e.g. {name}.cuda())"))
    known = {(name, o) for name, _, o in devices if o is not None}
    ordinals = {o for _, o in known}
    if len(ordinals) > 1:
        where = ", ".join(f"{n} on cuda:{o}" for n, o in sorted(known))
        raise DeviceError(_err(f"tensors are on different devices ({where}); put them all on one GPU"))
    return ordinals.pop() if ordinals else None


def check_device_context(ordinal: int | None, context_ordinal: int, capability: tuple[int, int]) -> None:
    """The tensors' device must be the runtime's context device, and that device sm_90."""
    if ordinal is not None and ordinal != context_ordinal:
        raise DeviceError(_err(f"the tensors are on cuda:{ordinal} but fa4mlir's CUDA context is on "
                               f"device {context_ordinal} (the runtime binds one device per process: "
                               f"torch's current device at its first use); call "
                               f"torch.cuda.set_device({ordinal}) before the first fa4mlir call"))
    if capability[0] != 9:
        raise DeviceError(_err(f"device {context_ordinal} is sm_{capability[0]}{capability[1]}; this kernel "
                               f"({attn_cfg.KERNEL}) needs an sm_90 GPU (H100/H200)"))


# ----------------------------------------------------------------------------------------------
# Kernel lookup
# ----------------------------------------------------------------------------------------------

def select_entry(entries: Sequence[dict], dtype: str, head_dim: int, causal: bool, where: str = "bundle",
                 seqlen_k: int | None = None) -> dict:
    """The bundle entry to run for (dtype, head_dim, causal) and, when given, seqlen_k. Among
    several (benchmark variants), the one with default_config's tiles for seqlen_k (else, when the
    bundle lacks it, those for long sequences), then default_config's code knobs (KNOB_FIELDS:
    exp2_poly_stride, rescale_threshold, rescale_before_pv; absent in older bundles: the
    defaults), then the ptxas-compiled one."""
    # Match on config["kernel"]: entry names carry the config too (attention_fwd_sm90_bf16_d128_...).
    want = {"kernel": attn_cfg.KERNEL, "dtype": dtype, "head_dim": head_dim, "causal": bool(causal)}
    hits = [e for e in entries if e.get("arch") == ARCH
            and all(e.get("config", {}).get(k) == v for k, v in want.items())]
    if not hits:
        raise LookupError(f"flash_attn_func: {where} has no {attn_cfg.KERNEL} ({ARCH}) kernel for "
                          f"dtype={dtype}, head_dim={head_dim}, causal={bool(causal)}; build it with "
                          f"`python -m fa4mlir bundle --set attention`")
    default = attn_cfg.default_config(dtype, head_dim, causal, seqlen_k)
    tiles = {k: getattr(default, k) for k in attn_cfg.TILE_FIELDS}
    # the default for this seqlen_k, else (the bundle lacks its tiles) the one for long sequences;
    # the code knobs to narrow by are those of the default whose tiles matched (KNOBS differ by tiles)
    for cfg in (default, attn_cfg.default_config(dtype, head_dim, causal)):
        same_tiles = [e for e in hits if all(e["config"].get(k) == getattr(cfg, k) for k in attn_cfg.TILE_FIELDS)]
        if same_tiles:
            hits, default = same_tiles, cfg
            break
    knobs = {k: getattr(default, k) for k in attn_cfg.KNOB_FIELDS}
    for narrow in (lambda e: all(e["config"].get(k, v) == v for k, v in knobs.items()),
                   lambda e: e["config"].get("cubin_backend") == KERNEL_ENV["FA4MLIR_CUBIN_BACKEND"]):
        if len(hits) > 1 and any(narrow(e) for e in hits):
            hits = [e for e in hits if narrow(e)]
    if len(hits) > 1:
        keys = ", ".join(e.get("key", "")[:16] for e in hits)
        raise LookupError(f"flash_attn_func: {len(hits)} {attn_cfg.KERNEL} kernels in {where} match "
                          f"{want} with default tiles {tiles} (keys {keys}); remove the duplicates")
    return hits[0]


def find_artifact(bundle: Bundle, dtype: str, head_dim: int, causal: bool, seqlen_k: int | None = None) -> KernelArtifact:
    entry = select_entry(bundle.entries, dtype, head_dim, causal, where=f"bundle {bundle.root}", seqlen_k=seqlen_k)
    config = {k: v for k, v in entry["config"].items() if k not in ("name", "arch")}
    return bundle.find(name=entry["name"], arch=entry["arch"], **config)


@contextmanager
def _env_defaults(values: dict):
    """Set the knobs in ``values`` that the user has not set, for the duration of the block."""
    added = [k for k in values if k not in os.environ]
    os.environ.update({k: values[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def compile_artifact(dtype: str, head_dim: int, causal: bool, seqlen_k: int | None = None) -> KernelArtifact:
    """default_config through the compiler and its disk cache (needs MLIR)."""
    return compile_config(attn_cfg.default_config(dtype, head_dim, causal, seqlen_k))


def compile_config(config: attn_cfg.AttnConfig) -> KernelArtifact:
    """Any AttnConfig through the compiler and its disk cache, in KERNEL_ENV (needs MLIR)."""
    from . import compiler
    with _env_defaults(KERNEL_ENV):
        return compiler.get_artifact(attn_cfg.KERNEL, config)


_lock = threading.Lock()
_LOADED: dict = {}        # cache key -> (bundle or None, LoadedKernel); the bundle ref pins its id
_ENV_BUNDLES: dict = {}   # FA4MLIR_BUNDLE path -> Bundle


def kernel_for(dtype: str, head_dim: int, causal: bool, bundle: Bundle | None = None,
               seqlen_k: int | None = None) -> LoadedKernel:
    """The loaded kernel, from ``bundle``, else the FA4MLIR_BUNDLE bundle, else the compiler;
    seqlen_k picks between the tiles for short and long key sequences (default_config)."""
    with _lock:
        if bundle is None and env.bundle_dir() is not None:
            path = str(env.bundle_dir())
            if path not in _ENV_BUNDLES:
                _ENV_BUNDLES[path] = Bundle.open(path)
            bundle = _ENV_BUNDLES[path]
        source = ("bundle", id(bundle)) if bundle is not None else (
            "compiler", tuple(sorted({**env.output_changing_values(), **{
                k: os.environ.get(k, v) for k, v in KERNEL_ENV.items()}}.items())))
        short = attn_cfg.is_short(head_dim, causal, seqlen_k)
        seqlen_k = 1 if short else None   # one cache entry per choice of tiles, not per length
        key = (source, dtype, head_dim, bool(causal), short)
        if key not in _LOADED:
            art = (find_artifact(bundle, dtype, head_dim, causal, seqlen_k) if bundle is not None
                   else compile_artifact(dtype, head_dim, causal, seqlen_k))
            _LOADED[key] = (bundle, load(art))
        return _LOADED[key][1]


# ----------------------------------------------------------------------------------------------
# Front end
# ----------------------------------------------------------------------------------------------

def launch_plan(kernel_config: dict, dims: AttnDims, q, k, v, out, lse, scale: float,
                num_sms: int | None = None, l2_bytes: int = attn_cfg.L2_BYTES) -> tuple[tuple, list]:
    """(grid, args) of one launch: the contract of attention_sm90_config (num_sms sizes the grid of a
    persistent kernel, l2_bytes the sections of a causal one)."""
    tiles = attn_cfg.query_tiles(kernel_config, dims.seqlen_q) * dims.heads * dims.batch
    if kernel_config.get("persistent"):  # the kernel counts its tiles (causal: twice) in i32
        if 2 * tiles > MAX_I32:
            raise ShapeError(_err(f"batch x heads x query tiles = {tiles} is too many for the persistent "
                                  f"kernel (at most {MAX_I32 // 2})"))
    elif kernel_config.get("causal") and tiles > MAX_I32:  # one 1-D grid (section_tile)
        raise ShapeError(_err(f"batch x heads x query tiles = {tiles} is too many for the causal kernel's "
                              f"grid (at most {MAX_I32})"))
    grid = attn_cfg.grid(kernel_config, dims.batch, dims.heads, dims.seqlen_q, num_sms)
    args = attn_cfg.launch_args(kernel_config, q, k, v, out, lse, dims.batch, dims.heads, dims.seqlen_q, dims.seqlen_k,
                                dims.heads_per_kv, scale, l2_bytes)
    return grid, args


def _device_ordinal(x: Any) -> int | None:
    """The CUDA ordinal of a tensor-like when it says (torch, DLPack), else None."""
    dev = getattr(x, "device", None)
    if getattr(dev, "type", None) == "cuda" and getattr(dev, "index", None) is not None:
        return int(dev.index)
    if hasattr(x, "__dlpack_device__"):
        return int(x.__dlpack_device__()[1])
    return None


# [(ordinal, capability, SMs, L2 bytes)] once queried: the runtime binds one context per process
_CONTEXT_DEVICE: list = []


def _context_device() -> tuple[int, tuple[int, int], int, int]:
    """(ordinal, compute capability, multiprocessor count, L2 bytes) of the runtime's CUDA context device."""
    if _CONTEXT_DEVICE:
        return _CONTEXT_DEVICE[0]
    from . import runtime
    driver = runtime._driver()
    runtime.ensure_context()
    dev = runtime._check(driver.cuCtxGetDevice(), "cuCtxGetDevice")
    attr = driver.CUdevice_attribute
    major = runtime._check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                           "cuDeviceGetAttribute")
    minor = runtime._check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                           "cuDeviceGetAttribute")
    sms = runtime._check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                         "cuDeviceGetAttribute")
    l2 = runtime._check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev),
                        "cuDeviceGetAttribute")
    _CONTEXT_DEVICE.append((int(dev), (int(major), int(minor)), int(sms), int(l2)))
    return _CONTEXT_DEVICE[0]


def _allocate(q: Any, dims: AttnDims, ordinal: int | None, out: Any, lse: Any) -> tuple[Any, Any]:
    try:
        import torch
    except ImportError:
        raise ImportError("flash_attn_func: torch is not importable, so out and lse cannot be allocated; "
                          f"pass out= ({dims.out_shape}, {dims.dtype}) and lse= ({dims.lse_shape}, "
                          f"float32) as CUDA tensor-likes") from None
    if isinstance(q, torch.Tensor):
        device = q.device
    else:
        device = torch.device("cuda", ordinal if ordinal is not None else torch.cuda.current_device())
    if out is None:
        tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dims.dtype]
        out = torch.empty(dims.out_shape, dtype=tdtype, device=device)
    if lse is None:
        lse = torch.empty(dims.lse_shape, dtype=torch.float32, device=device)
    return out, lse


# ----------------------------------------------------------------------------------------------
# Call cache: what one tensor signature was checked and prepared into
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Call:
    """A checked call: its prepared launch (runtime.PreparedLaunch), what to allocate for out and
    lse when they are not given, and the bundle it was looked up in (kept so that its id, part of
    the signature, stays unique)."""

    launch: Any
    out_spec: tuple    # (shape, torch dtype)
    lse_shape: tuple
    bundle: Any


CALLS_KEPT = 256
_CALLS: dict = {}
# the environment kernel_for reads: a change picks another kernel
_SIGNATURE_ENV = tuple(dict.fromkeys(["FA4MLIR_BUNDLE", *KERNEL_ENV,
                                      *(k for k, knob in env.KNOBS.items() if knob.output_changing)]))


def _signature(q, k, v, out, lse, softmax_scale, causal, bundle) -> tuple | None:
    """What a call's checks and kernel choice depend on, every tensor's address aside: shapes,
    strides, dtypes and devices of q, k, v (and out and lse when given), the scale, causal, the
    bundle and the environment kernel_for reads. Torch tensors only (None otherwise): their
    attributes are cheap to read, where other tensor-likes need tensor_info."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tensor = torch.Tensor
    parts = []
    for x in (q, k, v, out, lse):
        if x is None:
            parts.append(None)
        elif isinstance(x, tensor):
            parts.append((x.shape, x.stride(), x.dtype, x.device))
        else:
            return None
    environ = os.environ
    return (*parts, type(softmax_scale), softmax_scale, bool(causal), id(bundle),
            tuple(environ.get(n) for n in _SIGNATURE_ENV))


def _remember(signature: tuple, call: _Call) -> None:
    with _lock:
        while len(_CALLS) >= CALLS_KEPT:
            _CALLS.pop(next(iter(_CALLS)))
        _CALLS[signature] = call


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_lse=False, *,
                    out=None, lse=None, bundle: Bundle | None = None, stream=None):
    """Attention forward on an sm_90 GPU; see the module docstring. Returns out, or (out, lse)
    when return_lse.

    A call on torch tensors whose signature (every shape, stride, dtype and device, the scale,
    causal, the bundle and the kernel environment: _signature) was seen before skips the checks:
    it allocates what is missing, checks the addresses' 16-byte alignment and launches what that
    signature was prepared into (the last CALLS_KEPT signatures are kept)."""
    signature = None
    try:
        signature = _signature(q, k, v, out, lse, softmax_scale, causal, bundle)
        call = _CALLS.get(signature) if signature is not None else None
    except TypeError:  # an unhashable softmax_scale (a 0-d array): no signature
        signature = call = None
    if call is not None:
        torch = sys.modules["torch"]
        if out is None:
            out = torch.empty(call.out_spec[0], dtype=call.out_spec[1], device=q.device)
        if lse is None:
            lse = torch.empty(call.lse_shape, dtype=torch.float32, device=q.device)
        addresses = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr())
        if not any(a % GMEM_ALIGN_BYTES for a in addresses):  # else the checks below say which
            call.launch.launch(addresses, resolve_stream(stream, True, q.device.index))
            return (out, lse) if return_lse else out
    infos = {}
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
        if x is None:
            continue
        try:
            infos[name] = tensor_info(x)
        except TypeError as e:
            raise DTypeError(_err(f"{name}: {e}")) from None
    dims = check_inputs(infos["q"], infos["k"], infos["v"])
    scale = check_scale(softmax_scale, dims.head_dim)
    given = {"q": q, "k": k, "v": v, "out": out, "lse": lse}
    ordinal = check_devices([(n, infos[n].device, _device_ordinal(given[n])) for n in infos])
    context_ordinal, capability, num_sms, l2_bytes = _context_device()
    check_device_context(ordinal, context_ordinal, capability)
    allocated = out is None, lse is None
    if out is None or lse is None:
        out, lse = _allocate(q, dims, ordinal if ordinal is not None else context_ordinal, out, lse)
    out_info, lse_info = tensor_info(out), tensor_info(lse)
    check_outputs(dims, out_info, lse_info)
    kern = kernel_for(dims.dtype, dims.head_dim, causal, bundle, dims.seqlen_k)
    grid, args = launch_plan(kern.artifact.config, dims, q, k, v, out, lse, scale, num_sms, l2_bytes)
    prepared = kern.prepare(grid, args)
    prepared.launch([infos[n].ptr for n in ("q", "k", "v")] + [out_info.ptr, lse_info.ptr],
                    resolve_stream(stream, any(i.is_torch for i in (*infos.values(), out_info, lse_info)),
                                    ordinal if ordinal is not None else context_ordinal))
    if signature is not None:
        # the signature of this call names out and lse as given or not; what fills them in is torch's
        _remember(signature, _Call(prepared, (dims.out_shape, out.dtype) if allocated[0] else None,
                                   dims.lse_shape if allocated[1] else None, bundle))
    return (out, lse) if return_lse else out


__all__ = ["flash_attn_func", "check_inputs", "check_outputs", "check_scale", "check_devices",
           "check_device_context", "check_layout", "select_entry", "find_artifact", "kernel_for",
           "launch_plan", "AttnDims", "KERNEL_ENV", *(e.__name__ for e in ERRORS)]
