"""Pure, deviceless input checks shared by the attention entry points: functions of
``tensors.TensorInfo`` (and plain values) that raise the typed errors of ``errors`` and say what to
do. ``check_options`` checks the flags, stream and bundle; ``read_tensor`` reads a tensor-like
(typed errors for anything unreadable); ``check_inputs`` derives the problem size
(``AttnProblem``) from q, k, v. None of them makes a CUDA call or compiles."""
from __future__ import annotations

import dataclasses
import math
import operator
import os
from typing import Any, Sequence

from ..artifacts import Bundle
from ..driver import stream_handle
from ..kernels import attention_sm90_config as attn_cfg
from ..kernels.common.score_mod import (AUX_DTYPES, MAX_AUX_RANK, MAX_MOD_SEQLEN, ModFunctionError, as_mod, aux_spec,
                                       fn_name)
from ..runtime import DTYPES, GMEM_ALIGN_BYTES, TensorInfo, tensor_info
from ..tensors import TensorDTypeError, TensorLikeError, TensorStrideError
from .errors import (ArgumentTypeError, DeviceError, DTypeError, EmptyInputError, FlashAttnInputError, HeadDimError,
                     HeadsRatioError, LayoutError, MaskError, ScaleError, ScoreModError, SeqlensError, ShapeError,
                     SoftcapError)
from .problem import AttnProblem, VarlenProblem

MAX_GRID_YZ = 65535      # CUDA limit on gridDim.y (heads) and gridDim.z (batch)
MAX_I32 = 2**31 - 1      # seqlen_q and seqlen_k are i32 kernel params
MAX_STRIDE_BYTES = 2**40  # TMA global stride limit
# softmax_scale's range. The kernel multiplies raw float32 scores by softmax_scale * log2(e), a
# float32 parameter, and keeps the row max m as m * scale_log2: in [2^-64, 2^64] the parameter is a
# normal float32 (never flushed to zero) and scores up to 2^62 in magnitude stay finite once scaled
# (2^62 * 2^64 * log2(e) < 2^128, float32's overflow).
MIN_SOFTMAX_SCALE = 2.0**-64
MAX_SOFTMAX_SCALE = 2.0**64


# ----------------------------------------------------------------------------------------------
# Checks: pure functions of TensorInfo
# ----------------------------------------------------------------------------------------------

QKV_DIMS = ("batch", "seqlen", "heads", "head_dim")
LSE_DIMS = ("batch", "heads", "seqlen_q")


def _err(msg: str, api: str = "flash_attn_func") -> str:
    return f"{api}: {msg}"


# ----------------------------------------------------------------------------------------------
# Options and tensor-likes
# ----------------------------------------------------------------------------------------------

def _is_numpy_bool(value: Any) -> bool:
    """numpy.bool_ (named numpy.bool since numpy 2), without importing numpy."""
    return type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")


def check_flag(name: str, value: Any) -> bool:
    """A bool flag (causal, return_lse): a bool or a numpy bool; anything else (a string such as
    "False", an int, None) is refused rather than read by its truth value."""
    if type(value) is bool:
        return value
    if _is_numpy_bool(value):
        return bool(value)
    hint = " (a string is not parsed: 'False' would be true)" if isinstance(value, str) else ""
    raise ArgumentTypeError(_err(f"{name} must be a bool, got {type(value).__name__} {value!r}{hint}; pass "
                                 f"{name}=True or {name}=False"))


def check_stream(stream: Any, api: str = "flash_attn_func") -> int | None:
    """The stream's handle (driver.stream_handle), None for the default; typed errors otherwise.
    ``api`` names the entry point in the message (this and the other shared checks serve gemm too)."""
    if stream is None:
        return None
    try:
        return stream_handle(stream)
    except (TypeError, ValueError) as e:
        raise ArgumentTypeError(_err(str(e), api)) from None


def check_bundle(bundle: Any, api: str = "flash_attn_func") -> None:
    """bundle= is None, a Bundle, or a bundle folder's path (str or os.PathLike)."""
    if bundle is None or isinstance(bundle, (str, os.PathLike, Bundle)):
        return
    raise ArgumentTypeError(_err(f"bundle must be None, a bundle folder's path (str or pathlib.Path) or a "
                                 f"fa4mlir.Bundle, got {type(bundle).__name__} {bundle!r}; pass "
                                 f"bundle=fa4mlir.Bundle.open(path) or the path", api))


def check_options(causal: Any, return_lse: Any, stream: Any, bundle: Any) -> tuple[bool, bool]:
    """flash_attn_func's non-tensor options other than the scale: (causal, return_lse) as bools."""
    causal, return_lse = check_flag("causal", causal), check_flag("return_lse", return_lse)
    check_stream(stream)
    check_bundle(bundle)
    return causal, return_lse


def _mask_int(name: str, value: Any) -> int:
    """An int argument of the mask (a Python or numpy int; not a bool, float or string)."""
    if isinstance(value, bool) or _is_numpy_bool(value):
        value = None
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(_err(f"{name} must be an int, got {type(value).__name__} {value!r}")) from None


def check_mask(window_size: Any, attention_chunk: Any) -> tuple[tuple[int, int], int]:
    """FlashAttention's window_size (left, right) and attention_chunk, checked: ((left, right),
    chunk) as ints. ArgumentTypeError for anything but a pair of ints and an int; MaskError for a
    pair of another length, a side < -1 (-1: unbounded) or a chunk < 0 (0: none). A window wider
    than the sequence is legal (it bounds nothing)."""
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__"):
        raise ArgumentTypeError(_err(f"window_size must be a (left, right) pair of ints, got "
                                     f"{type(window_size).__name__} {window_size!r}; pass window_size=(-1, -1) "
                                     f"for no window"))
    if len(window_size) != 2:
        raise MaskError(_err(f"window_size must have 2 entries (left, right), got {len(window_size)}: "
                             f"{window_size!r}"))
    left, right = (_mask_int(f"window_size[{i}]", w) for i, w in enumerate(window_size))
    chunk = _mask_int("attention_chunk", attention_chunk)
    if left < -1 or right < -1:
        raise MaskError(_err(f"window_size entries must be >= -1 (-1: unbounded on that side; query i sees "
                             f"keys i + seqlen_k - seqlen_q - left .. + right), got {(left, right)}"))
    if chunk < 0:
        raise MaskError(_err(f"attention_chunk must be >= 0 (0: no chunking), got {chunk}"))
    return (left, right), chunk


def read_tensor(name: str, x: Any, api: str = "flash_attn_func", shape: str | None = None) -> TensorInfo:
    """``tensors.tensor_info`` of a tensor argument, with typed errors: None or a non-tensor
    (ArgumentTypeError), a dtype fa4mlir has no name for (DTypeError), byte strides that are not
    whole elements (LayoutError)."""
    if x is None:
        raise ArgumentTypeError(_err(f"{name} is None; pass a tensor (torch, __cuda_array_interface__ or "
                                     f"DLPack) of shape {shape or _SHAPES.get(name, '')}", api))
    try:
        return tensor_info(x)
    except TensorDTypeError as e:
        raise DTypeError(_err(f"{name}: {e}; convert it to bf16 or f16", api)) from None
    except TensorStrideError as e:
        raise LayoutError(_err(f"{name}: {e}", api)) from None
    except TensorLikeError as e:
        raise ArgumentTypeError(_err(f"{name}: {e}", api)) from None


_SHAPES = {"q": "[batch, seqlen_q, heads, head_dim]", "k": "[batch, seqlen_k, kv_heads, head_dim]",
           "v": "[batch, seqlen_k, kv_heads, head_dim_v]", "out": "[batch, seqlen_q, heads, head_dim_v]",
           "lse": "[batch, heads, seqlen_q]"}


def _numel(info: TensorInfo) -> int:
    return math.prod(info.shape)


def check_pointer(name: str, info: TensorInfo, api: str = "flash_attn_func") -> None:
    """A tensor with elements has a non-NULL address (an empty one may have none)."""
    if info.ptr == 0 and _numel(info) > 0:
        raise LayoutError(_err(f"{name} has a NULL data pointer but {_numel(info)} elements (shape "
                               f"{tuple(info.shape)}); pass an allocated tensor (only an empty one may be NULL)",
                               api))


def check_layout(name: str, info: TensorInfo, dim_names: Sequence[str] = QKV_DIMS) -> None:
    """Strides and base address a TMA descriptor can take: innermost stride 1, other strides
    positive 16-byte multiples that do not alias, base 16-byte aligned. Size-1 dims are ignored
    (their stride is arbitrary; runtime.tma_encoding replaces it), and so is a tensor with no element
    (nothing is addressed: its pointer may be NULL); a tensor with elements has a non-NULL address."""
    if _numel(info) == 0:
        return
    check_pointer(name, info)
    elem = DTYPES[info.dtype][0]
    align_elems = GMEM_ALIGN_BYTES // elem
    if any(s < 0 for s, n in zip(info.strides, info.shape) if n > 1):
        raise LayoutError(_err(f"{name} has negative strides {info.strides} (elements); TMA needs "
                               f"positive strides: pass {name}.contiguous() (or undo the flip)"))
    if info.shape[-1] > 1 and info.strides[-1] != 1:
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
        if any(n < 0 for n in info.shape):
            raise ShapeError(_err(f"{name} has a negative size in shape {tuple(info.shape)}; sizes are >= 0: "
                                  f"fix its producer (__cuda_array_interface__ / DLPack)"))
    for name, info in named:
        if info.dtype not in attn_cfg.DTYPES:
            raise DTypeError(_err(f"{name} has dtype {info.dtype}; expected one of {attn_cfg.DTYPES}: "
                                  f"convert it (e.g. {name}.to(torch.bfloat16))"))
    if not q_info.dtype == k_info.dtype == v_info.dtype:
        raise DTypeError(_err(f"q, k, v must share one dtype, got q={q_info.dtype}, k={k_info.dtype}, "
                              f"v={v_info.dtype}; convert them all to bf16 or all to f16"))
    (b, sq, h, d), (_, sk, hk, _), dv = q_info.shape, k_info.shape, v_info.shape[3]
    for name, info in (("k", k_info), ("v", v_info)):
        if info.shape[0] != b:
            raise ShapeError(_err(f"batch differs: q has batch {b} (shape {tuple(q_info.shape)}), {name} "
                                  f"has batch {info.shape[0]} (shape {tuple(info.shape)}); q, k, v need "
                                  f"one batch size"))
    if k_info.shape[3] != d:
        raise ShapeError(_err(f"head_dim differs: q has head_dim {d}, k has head_dim {k_info.shape[3]}; q and k "
                              f"need one head_dim (zero-pad the smaller)"))
    if tuple(k_info.shape[:3]) != tuple(v_info.shape[:3]):
        raise ShapeError(_err(f"k and v must have the same shape in [batch, seqlen_k, kv_heads], got k "
                              f"{tuple(k_info.shape)} and v {tuple(v_info.shape)}"))
    if d == 0:
        raise EmptyInputError(_err(f"head_dim is 0 (q {tuple(q_info.shape)}): attention needs head_dim in "
                                   f"{attn_cfg.HEAD_DIMS}; pass tensors with a head dimension"))
    if hk == 0 and h > 0:
        raise EmptyInputError(_err(f"k and v have kv_heads = 0 but q has {h} heads: every query head needs a "
                                   f"k/v head; pass k and v with kv_heads dividing {h}"))
    if d not in attn_cfg.HEAD_DIMS:
        up = [x for x in attn_cfg.HEAD_DIMS if x > d]
        hint = (f": zero-pad q, k, v to head_dim {up[0]}, pass softmax_scale={d ** -0.5:.6g} "
                f"(1/sqrt({d})) and slice out[..., :{d}]") if up else ""
        raise HeadDimError(_err(f"head_dim {d} is not supported; the sm_90a kernel is built for head_dim "
                                f"in {attn_cfg.HEAD_DIMS}{hint}"))
    if dv != d and (d, dv) not in attn_cfg.HEAD_DIM_PAIRS:
        raise HeadDimError(_err(f"q and k have head_dim {d} and v has head_dim {dv}; unequal head dims are "
                                f"supported only as (qk, v) in {attn_cfg.HEAD_DIM_PAIRS} (MLA prefill): "
                                f"zero-pad v to head_dim {d} and slice out[..., :{dv}]"))
    if hk and h % hk:
        raise HeadsRatioError(_err(f"q has {h} heads and k/v have {hk}; heads must be a multiple of "
                                   f"kv_heads (GQA/MQA: each k/v head serves heads // kv_heads q heads)"))
    if b > MAX_GRID_YZ or h > MAX_GRID_YZ:
        raise ShapeError(_err(f"batch {b} and heads {h} must be at most {MAX_GRID_YZ} (CUDA grid "
                              f"limit): split the call"))
    if sq > MAX_I32 or sk > MAX_I32:
        raise ShapeError(_err(f"seqlen_q {sq} and seqlen_k {sk} must fit in int32 (the kernel's sizes): split "
                              f"the call"))
    for name, info in named:
        check_layout(name, info)
    return AttnProblem(b, sq, sk, h, hk, d, q_info.dtype, head_dim_v=0 if dv == d else dv)


def check_out(dims: AttnProblem, out_info: TensorInfo) -> None:
    """out: q's shape (with v's head dim) and dtype, TMA layout."""
    if tuple(out_info.shape) != dims.out_shape:
        if dims.head_dim_v:
            raise ShapeError(_err(f"out must have q's shape with v's head_dim {dims.head_dim_v}, {dims.out_shape}, "
                                  f"got {tuple(out_info.shape)}; allocate it as q.new_empty({dims.out_shape})"))
        raise ShapeError(_err(f"out must have q's shape {dims.out_shape}, got {tuple(out_info.shape)}; "
                              f"allocate it like q (torch.empty_like(q))"))
    if out_info.dtype != dims.dtype:
        raise DTypeError(_err(f"out must have q's dtype {dims.dtype}, got {out_info.dtype}; allocate it like q"))
    check_layout("out", out_info)


def check_lse(dims: AttnProblem, lse_info: TensorInfo) -> None:
    """lse: float32 [batch, heads, seqlen_q], contiguous, 16-byte aligned."""
    if lse_info.dtype != "f32":
        raise DTypeError(_err(f"lse must be float32, got {lse_info.dtype}; allocate it with "
                              f"torch.empty({dims.lse_shape}, dtype=torch.float32)"))
    if tuple(lse_info.shape) != dims.lse_shape:
        raise ShapeError(_err(f"lse must have shape [batch, heads, seqlen_q] = {dims.lse_shape}, got "
                              f"{tuple(lse_info.shape)}; allocate it with torch.empty({dims.lse_shape}, "
                              f"dtype=torch.float32)"))
    if _numel(lse_info) == 0:
        return
    check_pointer("lse", lse_info)
    want = (dims.heads * dims.seqlen_q, dims.seqlen_q, 1)
    bad = [LSE_DIMS[i] for i, (n, s, w) in enumerate(zip(lse_info.shape, lse_info.strides, want))
           if n > 1 and s != w]
    if bad:
        raise LayoutError(_err(f"lse must be contiguous (strides {want}), got strides {lse_info.strides} "
                               f"(wrong along {', '.join(bad)}); pass a contiguous tensor"))
    if lse_info.ptr % GMEM_ALIGN_BYTES:
        raise LayoutError(_err(f"lse data pointer {lse_info.ptr:#x} is not {GMEM_ALIGN_BYTES}-byte aligned; "
                               f"allocate it fresh or slice at a multiple of 4 elements"))


def check_outputs(dims: AttnProblem, out_info: TensorInfo, lse_info: TensorInfo) -> None:
    """out (check_out) and lse (check_lse)."""
    check_out(dims, out_info)
    check_lse(dims, lse_info)


def check_scale(softmax_scale: Any, head_dim: int) -> float:
    """softmax_scale as a float in [MIN_SOFTMAX_SCALE, MAX_SOFTMAX_SCALE]; None means 1/sqrt(head_dim)."""
    if softmax_scale is None:
        return head_dim ** -0.5
    if isinstance(softmax_scale, (bool, str, bytes)) or _is_numpy_bool(softmax_scale):
        value = math.nan   # a flag or a string is not a scale, though float() reads it
    else:
        try:
            value = float(softmax_scale)
        except (TypeError, ValueError, OverflowError):
            value = math.nan
    if not MIN_SOFTMAX_SCALE <= value <= MAX_SOFTMAX_SCALE:  # NaN fails too
        raise ScaleError(_err(f"softmax_scale must be a finite positive number in [2^-64, 2^64] (the kernel "
                              f"scales scores by softmax_scale * log2(e) in float32), got {softmax_scale!r}; "
                              f"pass None for 1/sqrt(head_dim) = {max(head_dim, 1) ** -0.5:.6g}"))
    return value


# float32's normal range, which softmax_scale / softcap (the factor before the tanh) and softcap * log2(e)
# (the exp2 scale) must stay in [D-softcap]
F32_MIN_NORMAL = 2.0**-126
F32_MAX_POW2 = 2.0**127


def check_softcap(softcap: Any, softmax_scale: float) -> float:
    """softcap as a float >= 0 (0: none): ArgumentTypeError for anything but an int or float (a
    bool, a string, None), SoftcapError for a negative, NaN or infinite cap, or one whose
    softmax_scale / softcap or softcap * log2(e) leaves float32's normal range."""
    value = None
    if not (isinstance(softcap, (bool, str, bytes)) or _is_numpy_bool(softcap)):   # float() would read them
        try:
            value = float(softcap)
        except (TypeError, ValueError, OverflowError):
            value = None
    if value is None:
        raise ArgumentTypeError(_err(f"softcap must be a number (float), got {type(softcap).__name__} "
                                     f"{softcap!r}; pass softcap=0.0 for none or e.g. softcap=30.0"))
    if value == 0.0:
        return 0.0
    if not (value > 0 and math.isfinite(value)):
        raise SoftcapError(_err(f"softcap must be a finite number >= 0 (0: no cap; scores become softcap * "
                                f"tanh(score / softcap)), got {softcap!r}"))
    ratio, exp_scale = softmax_scale / value, value * attn_cfg.LOG2E
    if not (F32_MIN_NORMAL <= ratio <= F32_MAX_POW2 and exp_scale <= F32_MAX_POW2):
        raise SoftcapError(_err(f"softcap={value!r} with softmax_scale={softmax_scale!r} puts softmax_scale / "
                                f"softcap = {ratio:.3g} or softcap * log2(e) = {exp_scale:.3g} outside float32's "
                                f"normal range [2^-126, 2^127], which the kernel computes in; pass a cap in "
                                f"[{softmax_scale / F32_MAX_POW2:.3g}, {softmax_scale / F32_MIN_NORMAL:.3g}]"))
    return value


def check_sinks(dims: AttnProblem, sinks_info: TensorInfo) -> None:
    """sinks: float32 [heads], unit stride, 4-byte aligned (one logit per query head)."""
    if tuple(sinks_info.shape) != (dims.heads,):
        raise ShapeError(_err(f"sinks must have shape [heads] = ({dims.heads},) (one logit per query head), got "
                              f"{tuple(sinks_info.shape)}"))
    if sinks_info.dtype != "f32":
        raise DTypeError(_err(f"sinks must be float32, got {sinks_info.dtype}; convert it (sinks.float())"))
    if dims.heads == 0:
        return
    check_pointer("sinks", sinks_info)
    if dims.heads > 1 and sinks_info.strides[0] != 1:
        raise LayoutError(_err(f"sinks must be contiguous (stride 1), got stride {sinks_info.strides[0]}; pass "
                               f"sinks.contiguous()"))
    if sinks_info.ptr % 4:
        raise LayoutError(_err(f"sinks data pointer {sinks_info.ptr:#x} is not 4-byte aligned"))


def check_mods(score_mod: Any, mask_mod: Any, aux_tensors: Any, softcap: float) -> tuple[dict, dict]:
    """score_mod, mask_mod and aux_tensors (kernels/common/score_mod.py), checked before any compile or
    launch: (the AttnProblem fields they set, {aux{i}: TensorInfo}). ScoreModError for a function of
    the wrong arity or that captures what it may not, score_mod with softcap, aux_tensors without a
    function, a function that reads aux_tensors when none are given, and aux tensors that are not
    float32/int32, 1-D or 2-D, contiguous, non-empty (each index is clamped into them) and 4-byte
    aligned, or larger than int32 indexing."""
    try:
        smod, mmod = as_mod(score_mod, "score"), as_mod(mask_mod, "mask")
    except ModFunctionError as e:
        raise ScoreModError(_err(str(e))) from None
    if smod is not None and softcap:
        raise ScoreModError(_err(f"score_mod and softcap={softcap!r} are both given: pass one (softcap as a score_mod: "
                                 f"fa4mlir.softcap_score_mod({softcap!r}))"))
    if aux_tensors is not None and not isinstance(aux_tensors, (list, tuple)):
        raise ScoreModError(_err(f"aux_tensors must be a list of tensors, got {type(aux_tensors).__name__}"))
    aux = list(aux_tensors or ())
    if aux and smod is None and mmod is None:
        raise ScoreModError(_err(f"aux_tensors ({len(aux)} tensors) given without a score_mod or mask_mod to read them"))
    readers = [m for m in (smod, mmod) if m is not None and m.takes_aux()]
    if readers and not aux:
        raise ScoreModError(_err(f"{fn_name(readers[0].fn)} takes aux_tensors, but none are given: pass "
                                 f"aux_tensors=[...]"))
    infos, spec, shapes = {}, [], []
    for i, x in enumerate(aux):
        info = read_tensor(f"aux_tensors[{i}]", x)
        shape = tuple(info.shape)
        if info.dtype not in AUX_DTYPES or not 1 <= len(shape) <= MAX_AUX_RANK:
            raise ScoreModError(_err(f"aux_tensors[{i}] must be a float32 or int32 tensor of 1 or 2 dims, got "
                                     f"{info.dtype} of shape {shape}; convert it (t.float(), t.int())"))
        if min(shape) < 1 or _numel(info) > MAX_I32:
            raise ScoreModError(_err(f"aux_tensors[{i}] must hold 1 to 2^31 - 1 elements (indices are clamped into "
                                     f"it), got shape {shape}"))
        want = (shape[1], 1) if len(shape) == 2 else (1,)
        if any(n > 1 and st != w for n, st, w in zip(shape, info.strides, want)):
            raise ScoreModError(_err(f"aux_tensors[{i}] must be contiguous (strides {want}), got strides "
                                     f"{tuple(info.strides)}; pass t.contiguous()"))
        check_pointer(f"aux_tensors[{i}]", info)
        if info.ptr % 4:
            raise ScoreModError(_err(f"aux_tensors[{i}] data pointer {info.ptr:#x} is not 4-byte aligned"))
        infos[f"aux{i}"] = info
        spec.append((info.dtype, len(shape)))
        shapes.append(shape)
    fields = dict(score_mod=smod.fingerprint() if smod else "", mask_mod=mmod.fingerprint() if mmod else "",
                  aux=aux_spec(spec), aux_shapes=tuple(shapes),
                  mod_scales=(float(smod.pre_scale), float(smod.post_scale)) if smod else (1.0, 1.0))
    return fields, infos


def check_mod_seqlens(seqlen_q: int, seqlen_k: int) -> None:
    """ScoreModError when a score_mod / mask_mod call's sequences are longer than MAX_MOD_SEQLEN
    (2^24 - 256): the kernels hand the function q_idx and kv_idx as tile base + register offset, whose
    float32 conversion is exact only below 2^24 (kernels/common/score_mod_ir.py [D-index-fold])."""
    if max(seqlen_q, seqlen_k) > MAX_MOD_SEQLEN:
        raise ScoreModError(_err(f"a score_mod or mask_mod call takes seqlen_q and seqlen_k of at most {MAX_MOD_SEQLEN} "
                                 f"(2^24 - 256: its q_idx and kv_idx stay exact in float32), got seqlen_q={seqlen_q}, "
                                 f"seqlen_k={seqlen_k}; split the sequence"))


def device_ordinal(name: str, x: Any, api: str = "flash_attn_func") -> int | None:
    """The CUDA ordinal of a tensor-like when it says (torch, DLPack), else None."""
    dev = getattr(x, "device", None)
    if getattr(dev, "type", None) == "cuda" and getattr(dev, "index", None) is not None:
        return int(dev.index)
    if hasattr(x, "__dlpack_device__"):
        try:
            return operator.index(x.__dlpack_device__()[1])
        except Exception as e:  # the caller's object
            raise ArgumentTypeError(_err(f"{name}: __dlpack_device__() must return (device_type, device_id), "
                                         f"and raised or returned something else ({type(e).__name__}: {e}); "
                                         f"pass a DLPack producer", api)) from None
    return None


CUDA_DEVICES = ("cuda", "cuda_managed")


def check_devices(devices: Sequence[tuple[str, str, int | None]], api: str = "flash_attn_func") -> int | None:
    """devices: (name, device type, ordinal or None when unknown) per tensor. All must be CUDA and,
    where known, on one ordinal; returns that ordinal (None if none is known)."""
    for name, dev, _ in devices:
        if dev not in CUDA_DEVICES:
            raise DeviceError(_err(f"{name} is on device {dev!r}; expected a CUDA tensor: move it to the "
                                   f"GPU first (e.g. {name}.cuda())", api))
    known = {(name, o) for name, _, o in devices if o is not None}
    ordinals = {o for _, o in known}
    if len(ordinals) > 1:
        where = ", ".join(f"{n} on cuda:{o}" for n, o in sorted(known))
        raise DeviceError(_err(f"tensors are on different devices ({where}); put them all on one GPU", api))
    return ordinals.pop() if ordinals else None


def check_device_context(ordinal: int | None, context_ordinal: int, capability: tuple[int, int]) -> None:
    """The tensors' device must be the runtime's context device, and that device sm_90."""
    check_device_ordinal(ordinal, context_ordinal)
    if capability[0] != 9:
        raise DeviceError(_err(f"device {context_ordinal} is sm_{capability[0]}{capability[1]}; this kernel "
                               f"({attn_cfg.KERNEL}) needs an sm_90 GPU (H100/H200)"))


def check_device_ordinal(ordinal: int | None, context_ordinal: int) -> None:
    """The tensors' device must be the runtime's context device."""
    if ordinal is not None and ordinal != context_ordinal:
        raise DeviceError(_err(f"the tensors are on cuda:{ordinal} but fa4mlir's CUDA context is on "
                               f"device {context_ordinal} (the runtime binds one device per process: "
                               f"torch's current device at its first use); call "
                               f"torch.cuda.set_device({ordinal}) before the first fa4mlir call"))




# ----------------------------------------------------------------------------------------------
# Ragged batches (flash_attn_varlen_func): packed q/k/v and the sequence tensors
# ----------------------------------------------------------------------------------------------

VARLEN_API = "flash_attn_varlen_func"
PACKED_DIMS = ("total_tokens", "heads", "head_dim")


def check_varlen_inputs(q_info: TensorInfo, k_info: TensorInfo, v_info: TensorInfo) -> VarlenProblem:
    """Packed q [total_q, heads, head_dim], k [total_k, kv_heads, head_dim] and v [total_k, kv_heads,
    head_dim or a HEAD_DIM_PAIRS partner: MLA prefill's 128 for 192]: dtype, rank, head dims,
    heads ratio and TMA layout, as check_inputs does for the dense layout (the packed tensors run as
    a batch of one: the same checks, the same messages, HeadDimError for an unsupported pair). Returns the problem with batch and
    the maxima still 0 (check_seqlens fills them)."""
    for name, info in (("q", q_info), ("k", k_info), ("v", v_info)):
        if len(info.shape) != 3:
            raise ShapeError(_err(f"{name} must be 3-D [total_tokens, heads, head_dim] (sequences packed one "
                                  f"after another), got shape {tuple(info.shape)}; for [batch, seqlen, heads, "
                                  f"head_dim] use flash_attn_func", VARLEN_API))
    try:
        dense = check_inputs(*(dataclasses.replace(info, shape=(1, *info.shape), strides=(0, *info.strides))
                               for info in (q_info, k_info, v_info)))
    except FlashAttnInputError as e:   # the same check, in this entry point's name
        raise type(e)(str(e).replace("flash_attn_func:", f"{VARLEN_API}:", 1)) from None
    return VarlenProblem(0, 0, 0, dense.seqlen_q, dense.seqlen_k, dense.heads, dense.kv_heads, dense.head_dim,
                         dense.dtype, head_dim_v=dense.head_dim_v)


def check_max_seqlen(name: str, value: Any) -> int:
    """max_seqlen_q / max_seqlen_k: an int in [0, 2^31 - 1] (ArgumentTypeError, SeqlensError)."""
    if isinstance(value, bool) or _is_numpy_bool(value):
        value = None
    try:
        n = operator.index(value)
    except TypeError:
        raise ArgumentTypeError(_err(f"{name} must be an int (the longest sequence's length, known to the "
                                     f"caller: FlashAttention's contract), got {type(value).__name__} {value!r}",
                                     VARLEN_API)) from None
    if not 0 <= n <= MAX_I32:
        raise SeqlensError(_err(f"{name} must be in [0, 2^31 - 1], got {n}", VARLEN_API))
    return n


def check_seqlens(name: str, info: TensorInfo, length: int | None) -> int:
    """cu_seqlens_q / cu_seqlens_k (int32 [batch + 1]) or seqused_k (int32 [batch]): dtype
    (DTypeError), 1-D, `length` entries when given (SeqlensError), unit stride and a 4-byte aligned
    base (LayoutError). Returns the length. Their values are device data and are not read (no host
    sync): increasing, in [0, total], seqused_k <= the sequence's keys are the caller's word."""
    if info.dtype != "i32":
        raise DTypeError(_err(f"{name} must be int32 (FlashAttention's cu_seqlens dtype), got {info.dtype}; "
                              f"pass {name}.to(torch.int32)", VARLEN_API))
    if len(info.shape) != 1:
        raise SeqlensError(_err(f"{name} must be 1-D, got shape {tuple(info.shape)}", VARLEN_API))
    n = info.shape[0]
    if length is not None and n != length:
        want = "batch + 1" if name.startswith("cu_") else "batch"
        raise SeqlensError(_err(f"{name} must have {want} = {length} entries, got {n}", VARLEN_API))
    if name.startswith("cu_") and n < 1:
        raise SeqlensError(_err(f"{name} must have batch + 1 >= 1 entries (it starts with 0), got 0", VARLEN_API))
    if n and (n > 1 and info.strides[0] != 1):
        raise LayoutError(_err(f"{name} must be contiguous (stride 1), got stride {info.strides[0]}; pass "
                               f"{name}.contiguous()", VARLEN_API))
    if n:
        check_pointer(name, info, VARLEN_API)
        if info.ptr % 4:
            raise LayoutError(_err(f"{name} data pointer {info.ptr:#x} is not 4-byte aligned", VARLEN_API))
    return n


def check_varlen_outputs(dims: VarlenProblem, out_info: TensorInfo | None, lse_info: TensorInfo | None) -> None:
    """out: [total_q, heads, dim_v] (q's packed shape, v's head dim) in q's dtype, contiguous (the rows at a sequence's end are stored by
    address, attention_fwd_sm90_varlen); lse: float32 [heads, total_q], contiguous."""
    if out_info is not None:
        if tuple(out_info.shape) != dims.out_shape or out_info.dtype != dims.dtype:
            raise ShapeError(_err(f"out must be {dims.dtype} {dims.out_shape} (q's rows and heads, v's head_dim), got "
                                  f"{out_info.dtype} {tuple(out_info.shape)}; allocate it with "
                                  f"q.new_empty(q.shape[:2] + v.shape[2:])", VARLEN_API))
        want = (dims.heads * dims.dim_v, dims.dim_v, 1)
        if _numel(out_info) and tuple(out_info.strides) != want:
            raise LayoutError(_err(f"out must be contiguous (strides {want}), got {out_info.strides}; pass "
                                   f"torch.empty_like(q) or out.contiguous()", VARLEN_API))
        check_layout("out", out_info, PACKED_DIMS)
    if lse_info is not None:
        if lse_info.dtype != "f32" or tuple(lse_info.shape) != dims.lse_shape:
            raise ShapeError(_err(f"lse must be float32 [heads, total_q] = {dims.lse_shape} (FlashAttention-3/4's "
                                  f"varlen layout), got {lse_info.dtype} {tuple(lse_info.shape)}", VARLEN_API))
        if _numel(lse_info) and (tuple(lse_info.strides) != (dims.total_q, 1) or lse_info.ptr % GMEM_ALIGN_BYTES):
            raise LayoutError(_err(f"lse must be contiguous (strides ({dims.total_q}, 1)) and 16-byte aligned, "
                                   f"got strides {lse_info.strides} at {lse_info.ptr:#x}", VARLEN_API))
