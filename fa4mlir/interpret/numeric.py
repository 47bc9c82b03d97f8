"""Values as numpy arrays: MLIR types to numpy dtypes, bf16 as raw uint16 bits, shared-memory swizzles.

A warp's SSA value is an array with a leading lane axis: shape (32,) for a scalar type, (32, N) for
vector<N x T> and for a homogeneous !llvm.struct of N fields (wgmma's accumulator registers). bf16 has no numpy dtype: it travels as its 16 raw bits (uint16), converted with
round-to-nearest-even as cvt.rn.bf16.f32 does. Pointers are int64 addresses.
"""
from __future__ import annotations

import numpy as np

from .._mlir import ir
from .faults import Unsupported

WARP = 32
LANES = np.arange(WARP)

_SCALAR = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
           "f32": np.float32, "f16": np.float16, "bf16": np.uint16, "f64": np.float64, "index": np.int64}
UNSIGNED = {np.dtype(np.int8): np.uint8, np.dtype(np.int16): np.uint16, np.dtype(np.int32): np.uint32,
            np.dtype(np.int64): np.uint64, np.dtype(np.bool_): np.bool_}


def _struct_fields(t) -> list[str] | None:
    """The field types of an !llvm.struct<(T, T, ...)> (None for any other type)."""
    return _fields_of(str(t))


def _fields_of(s: str) -> list[str] | None:
    """_struct_fields of a type printed as `s` (printing a type is the costly part)."""
    if not s.startswith("!llvm.struct<("):
        return None
    return [f.strip() for f in s[len("!llvm.struct<("):-2].split(",")]


def np_dtype(t: ir.Type):
    """The numpy dtype holding values of MLIR type `t` (element type for vectors and structs)."""
    if isinstance(t, ir.VectorType):
        t = ir.VectorType(t).element_type
    s = str(t)
    fields = _fields_of(s)
    if fields is not None:
        if len(set(fields)) != 1 or fields[0] not in _SCALAR:
            raise Unsupported(f"type {s}: only structs of one scalar type are modelled")
        s = fields[0]
    if s.startswith("!llvm.ptr"):
        return np.int64
    if s not in _SCALAR:
        raise Unsupported(f"type {s} has no numpy representation in the interpreter")
    return _SCALAR[s]


def vector_len(t: ir.Type) -> int | None:
    """N of vector<N x T> (1-D only) or of a struct of N fields, None for a scalar type."""
    if not isinstance(t, ir.VectorType):
        fields = _struct_fields(t)
        return None if fields is None else len(fields)
    shape = ir.VectorType(t).shape
    if len(shape) != 1:
        raise Unsupported(f"{t}: only 1-D vectors are modelled")
    return shape[0]


def lane_shape(t: ir.Type) -> tuple:
    n = vector_len(t)
    return (WARP,) if n is None else (WARP, n)


def is_bf16(t: ir.Type) -> bool:
    if isinstance(t, ir.VectorType):
        t = ir.VectorType(t).element_type
    return str(t) == "bf16"


def f32_to_bf16(x) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even (NaN stays NaN)."""
    x = np.asarray(x, np.float32)
    b = np.ascontiguousarray(x).view(np.uint32)
    rounded = ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def bf16_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def half_bits_to_f32(bits, dtype: str) -> np.ndarray:
    """16-bit MMA operands (raw bits) as float32: dtype 'bf16' or 'f16'."""
    bits = np.asarray(bits, np.uint16)
    return bf16_to_f32(bits) if dtype == "bf16" else bits.view(np.float16).astype(np.float32)


def _e4m3_f16_bits() -> np.ndarray:
    """f16 bits of every e4m3fn code (sign, 4 exponent bits of bias 7, 3 mantissa bits, no
    infinities; S.1111.111 is NaN, converted to the canonical f16 NaN 0x7FFF)."""
    codes = np.arange(256)
    exp, man = (codes >> 3) & 0xF, codes & 0x7
    mag = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    bits = np.where(codes & 0x80, -mag, mag).astype(np.float16).view(np.uint16)
    return np.where((codes & 0x7F) == 0x7F, np.uint16(0x7FFF), bits).astype(np.uint16)


E4M3_F16_BITS = _e4m3_f16_bits()


def e4m3x2_to_f16x2(pairs) -> np.ndarray:
    """cvt.rn.f16x2.e4m3x2 (exact): two e4m3 codes (the low and high byte of 16 bits) -> two f16
    as 32 bits (the low byte's in the low half), int32."""
    pairs = np.asarray(pairs).astype(np.uint16)
    lo, hi = E4M3_F16_BITS[pairs & 0xFF].astype(np.uint32), E4M3_F16_BITS[pairs >> 8].astype(np.uint32)
    return (lo | (hi << 16)).view(np.int32)


def tanh_f16x2(words) -> np.ndarray:
    """tanh.approx.f16x2: two f16 (low and high half of 32 bits) -> their tanh, each rounded to nearest f16
    (the hardware's own approximation error beyond that rounding is not modelled), int32."""
    words = np.asarray(words).astype(np.int32).view(np.uint32)
    halves = [(words & np.uint32(0xFFFF)).astype(np.uint16), (words >> np.uint32(16)).astype(np.uint16)]
    lo, hi = (np.tanh(h.view(np.float16).astype(np.float32)).astype(np.float16).view(np.uint16).astype(np.uint32)
              for h in halves)
    return (lo | (hi << np.uint32(16))).view(np.int32)


def prmt(a, b, selector: int) -> np.ndarray:
    """prmt.b32 d, a, b, selector (PTX ISA 9.7.9.7, default mode), per lane: byte k of d is byte
    n & 7 of {b, a} (a's bytes 0-3, b's 4-7) for the selector's nibble n = (selector >> 4 k) & 15,
    or, when n & 8, that byte's sign bit replicated over 8 bits. int32 in, int32 out."""
    src = np.stack([np.asarray(a).astype(np.int32).view(np.uint32), np.asarray(b).astype(np.int32).view(np.uint32)],
                   axis=-1)
    out = np.zeros(np.shape(a), np.uint32)
    for k in range(4):
        n = (selector >> (4 * k)) & 0xF
        byte = (src[..., (n & 7) // 4] >> np.uint32(8 * (n & 3))) & np.uint32(0xFF)
        if n & 8:
            byte = np.where(byte & np.uint32(0x80), np.uint32(0xFF), np.uint32(0))
        out |= byte.astype(np.uint32) << np.uint32(8 * k)
    return out.view(np.int32)


def swizzle(addr, span: int):
    """A shared-memory byte address under the `span`-byte swizzle (0 = none): the 16-byte unit
    index within a row of `span` bytes is XORed with the row index modulo span / 16
    (Swizzle<log2(span/16), 4, 3>; PTX ISA §5.5.6 "Tensor layouts" / CUTLASS's Swizzle)."""
    if span == 0:
        return addr
    return addr ^ ((addr >> 3) & ((span // 16 - 1) << 4))


def sw128_operand_offsets(rows: int, k: int, mn_major: bool, lbo: int, sbo: int, span: int = 128) -> np.ndarray:
    """Byte offset (before the swizzle) of element (row, k) of a rows x k 16-bit MMA operand in the
    canonical SWIZZLE_128B layouts that tcgen05 and wgmma share (PTX ISA §9.7.16.3.2 / §9.7.15.5.1;
    T = 8 elements = 16 bytes):
        K-major   ((8, m), (T, 2k)) : ((8T, SBO), (1, T))        a row is 128 contiguous bytes
        MN-major  ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))  64 rows per 128-byte line
    (K-major ignores LBO: a k16 step never leaves its 128-byte row.) `span` 64: the SWIZZLE_64B
    layouts, the same with 4T for 8T (a row, or a line of 32 MN rows, is 64 bytes)."""
    mn = np.arange(rows)[:, None]
    kk = np.arange(k)[None, :]
    if mn_major:
        line = span // 2
        return (mn // line) * lbo + (mn % line) * 2 + (kk % 8) * span + (kk // 8) * sbo
    return (mn // 8) * sbo + (mn % 8) * span + kk * 2


__all__ = ["sw128_operand_offsets", "WARP", "LANES", "np_dtype", "vector_len", "lane_shape", "is_bf16", "f32_to_bf16", "bf16_to_f32",
           "half_bits_to_f32", "swizzle", "UNSIGNED", "E4M3_F16_BITS", "e4m3x2_to_f16x2", "tanh_f16x2", "prmt"]
