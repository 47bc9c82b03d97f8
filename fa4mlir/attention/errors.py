"""The typed errors of the attention entry points: each a FlashAttnInputError (a ValueError),
raised before anything is launched."""
from __future__ import annotations


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


class AutogradError(FlashAttnInputError, NotImplementedError):
    """An input requires grad while grad mode is on: there is no backward kernel yet, and a
    detached output would silently drop the gradient."""


class UnsupportedFeatureError(FlashAttnInputError, NotImplementedError):
    """A feature a caller asks for that the kernels do not have yet (a padding or arbitrary mask,
    dropout, a sliding window, softcap, attention sinks, a static KV cache)."""


class KVScaleError(ScaleError):
    """flash_attn_with_kvcache's k_scale / v_scale: missing for an FP8 (e4m3) cache, or given for a
    bf16/f16 cache (whose values would silently go unscaled). Their shape and dtype raise ShapeError
    and DTypeError like any tensor's."""


ERRORS = (FlashAttnInputError, DTypeError, ShapeError, HeadDimError, HeadsRatioError,
          EmptyInputError, LayoutError, DeviceError, ScaleError, AutogradError, UnsupportedFeatureError)
ERRORS += (KVScaleError,)

__all__ = [e.__name__ for e in ERRORS] + ["ERRORS"]
