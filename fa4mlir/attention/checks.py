"""Pure, deviceless input checks shared by the attention entry points: functions of
``tensors.TensorInfo`` (and plain values) that raise the typed errors of ``errors`` and say what to
do. ``check_inputs`` derives the problem size (``AttnProblem``) from q, k, v."""
from __future__ import annotations

import math
from typing import Any, Sequence

from ..kernels import attention_sm90_config as attn_cfg
from ..runtime import DTYPES, GMEM_ALIGN_BYTES, TensorInfo
from .errors import DeviceError, DTypeError, EmptyInputError, HeadDimError, HeadsRatioError, LayoutError, ScaleError, ShapeError
from .problem import AttnProblem

MAX_GRID_YZ = 65535      # CUDA limit on gridDim.y (heads) and gridDim.z (batch)
MAX_I32 = 2**31 - 1      # seqlen_q and seqlen_k are i32 kernel params
MAX_STRIDE_BYTES = 2**40  # TMA global stride limit


# ----------------------------------------------------------------------------------------------
# Checks: pure functions of TensorInfo
# ----------------------------------------------------------------------------------------------

QKV_DIMS = ("batch", "seqlen", "heads", "head_dim")
LSE_DIMS = ("batch", "heads", "seqlen_q")


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


def check_inputs(q_info: TensorInfo, k_info: TensorInfo, v_info: TensorInfo) -> AttnProblem:
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
    (b, sq, h, d), (_, sk, hk, _) = q_info.shape, k_info.shape
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
    return AttnProblem(b, sq, sk, h, hk, d, q_info.dtype)


def check_outputs(dims: AttnProblem, out_info: TensorInfo, lse_info: TensorInfo) -> None:
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


