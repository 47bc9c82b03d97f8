"""The typed errors of the entry points (flash_attn_func, and gemm's input checks): each a
FlashAttnInputError (a ValueError), raised before any driver call, compile or launch. Every message
says what was expected, what was got and what to pass instead."""
from __future__ import annotations


class FlashAttnInputError(ValueError):
    """An argument the kernels cannot take; raised before any driver call, compile or launch."""


class DTypeError(FlashAttnInputError, TypeError):
    """dtype not bf16/f16, q/k/v dtypes differ, or out/lse have the wrong dtype."""


class ShapeError(FlashAttnInputError):
    """Wrong rank, a negative size, mismatched batch/head_dim, k/v shapes differ, or out/lse of the
    wrong shape."""


class HeadDimError(FlashAttnInputError):
    """head_dim is not one the kernel is built for."""


class HeadsRatioError(FlashAttnInputError):
    """heads is not a multiple of kv_heads."""


class EmptyInputError(FlashAttnInputError):
    """A zero-sized dimension that leaves no answer: head_dim = 0, or kv_heads = 0 while heads > 0.
    (batch, seqlen_q, seqlen_k or heads = 0 are empty problems: they return what FlashAttention
    returns.)"""


class LayoutError(FlashAttnInputError):
    """Strides or base address TMA cannot address, a NULL data pointer, byte strides that are not
    whole elements (or an lse that is not contiguous)."""


class DeviceError(FlashAttnInputError):
    """Not a CUDA tensor, tensors on different devices, or a device that is not sm_90."""


class ScaleError(FlashAttnInputError):
    """softmax_scale is not a number in the range the kernel's float32 math takes
    (checks.MIN_SOFTMAX_SCALE .. checks.MAX_SOFTMAX_SCALE)."""


class SeqlensError(ShapeError):
    """flash_attn_varlen_func's cu_seqlens_q / cu_seqlens_k / seqused_k / max_seqlen_*: a length that
    does not match the batch, a negative or non-int max_seqlen, or a tensor that is not 1-D and
    contiguous. (Their dtype raises DTypeError, their device DeviceError; their values live on the
    device and are not checked, see attention/varlen.py.)"""


class ArgumentTypeError(FlashAttnInputError, TypeError):
    """An argument of the wrong kind: a tensor argument that is not a readable tensor-like (None, a
    list, a malformed __cuda_array_interface__ or DLPack object), a flag (causal, return_lse) that
    is not a bool, a stream that is not a stream, a bundle that is neither a Bundle nor a path, or
    out/lse missing where torch cannot allocate them."""


class MaskError(FlashAttnInputError):
    """window_size or attention_chunk out of range: window_size is (left, right), each an int >= -1
    (-1: unbounded), attention_chunk an int >= 0 (0: none)."""


class SoftcapError(FlashAttnInputError):
    """softcap is not a number the kernel takes: negative, NaN or infinite, or so small or large that
    softmax_scale / softcap or softcap * log2(e) leaves float32's normal range (0 turns it off)."""


class ScoreModError(FlashAttnInputError, TypeError):
    """score_mod / mask_mod / aux_tensors the kernels cannot take: a function of the wrong arity, one
    that captures a tensor or another unsupported value (kernels/common/score_mod.py), score_mod with
    softcap, aux_tensors that are not float32/int32, 1-D/2-D, contiguous, non-empty tensors on q's
    device, aux_tensors with no function to read them, or a function that reads them without any."""


class BundleError(FlashAttnInputError, LookupError):
    """bundle= (or FA4MLIR_BUNDLE) names no readable bundle, or the bundle has no kernel for the
    call: build one (``python -m fa4mlir bundle``), or pass no bundle to use the compiler."""


class AutogradError(FlashAttnInputError, NotImplementedError):
    """An input requires grad while grad mode is on: there is no backward kernel yet, and a
    detached output would silently drop the gradient."""


class UnsupportedFeatureError(FlashAttnInputError, NotImplementedError):
    """A feature a caller asks for that the kernels do not have yet (a padding or arbitrary mask,
    dropout, a static KV cache, or sinks where no kernel can write their lse)."""


class KVScaleError(ScaleError):
    """flash_attn_with_kvcache's k_scale / v_scale: missing for an FP8 (e4m3) cache, or given for a
    bf16/f16 cache (whose values would silently go unscaled). Their shape and dtype raise ShapeError
    and DTypeError like any tensor's."""


class KnobError(FlashAttnInputError):
    """An FA4MLIR_* measurement knob (fa4mlir.env) holds a value the call cannot take, e.g.
    FA4MLIR_PREFILL_TILES naming a field that is not a tile or code knob."""


ERRORS = (FlashAttnInputError, DTypeError, ShapeError, SeqlensError, HeadDimError, HeadsRatioError, EmptyInputError,
          LayoutError, DeviceError, ScaleError, MaskError, SoftcapError, ScoreModError, ArgumentTypeError, BundleError,
          AutogradError, UnsupportedFeatureError, KVScaleError, KnobError)

__all__ = [e.__name__ for e in ERRORS] + ["ERRORS"]
