"""Packed 16-bit float words in registers (arch-neutral): an i32 holding two bf16 or f16 elements.

Used where a kernel reads bf16 q into the f16 operands of its GEMMs (the sm_90a FP8 decode's
conversion-through-SMEM and swap-AB kernels: attention_decode_sm90, attention_decode_sm90_swapab).
"""
from __future__ import annotations

from ...dsl import Value, vec


def bf16x2_to_f16x2(word: Value) -> Value:
    """Two bf16 (an i32) as two f16 (an i32, the same element order), through f32: a bf16's bits are a
    float32's high half, so the low element is ``word << 16`` and the high one ``word & 0xFFFF0000``
    read as float32; the f32 pair is rounded to f16 (to nearest)."""
    lo = (word << 16).bitcast("f32")
    hi = (word & 0xFFFF0000).bitcast("f32")
    return vec(lo, hi).to(("f16", 2)).bitcast("i32")
