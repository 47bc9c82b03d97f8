"""Tensor-likes as the runtime sees them (MLIR-free): torch tensors, ``__cuda_array_interface__``
and ``__dlpack__`` objects read into a ``TensorInfo`` (address, shape, element strides, dtype,
device), and the dtype table the runtime's TMA descriptors use.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Sequence

# name -> (bytes per element, CUtensorMapDataType member suffix)
DTYPES: dict[str, tuple[int, str]] = {
    "u8": (1, "UINT8"), "i8": (1, "UINT8"), "e4m3": (1, "UINT8"), "e5m2": (1, "UINT8"),
    "u16": (2, "UINT16"), "i16": (2, "UINT16"), "f16": (2, "FLOAT16"), "bf16": (2, "BFLOAT16"),
    "u32": (4, "UINT32"), "i32": (4, "INT32"), "f32": (4, "FLOAT32"), "tf32": (4, "TFLOAT32"),
    "u64": (8, "UINT64"), "i64": (8, "INT64"), "f64": (8, "FLOAT64"),
}


@dataclass(frozen=True)
class TensorInfo:
    """What the runtime needs of a tensor-like: address, shape, element strides, dtype, device."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device: str
    is_torch: bool = False


TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64",
                 "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                 "uint16": "u16", "uint32": "u32", "uint64": "u64",
                 "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
_CAI_DTYPES = {"f2": "f16", "f4": "f32", "f8": "f64", "u1": "u8", "i1": "i8", "u2": "u16",
               "i2": "i16", "u4": "u32", "i4": "i32", "u8": "u64", "i8": "i64"}
_DL_DTYPES = {(0, 8): "i8", (0, 16): "i16", (0, 32): "i32", (0, 64): "i64", (1, 8): "u8",
              (1, 16): "u16", (1, 32): "u32", (1, 64): "u64", (2, 16): "f16", (2, 32): "f32",
              (2, 64): "f64", (4, 16): "bf16"}
_DL_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 13: "cuda_managed"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def _is_torch_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _from_torch(x: Any) -> TensorInfo:
    dtype = TORCH_DTYPES.get(str(x.dtype).removeprefix("torch."))
    if dtype is None:
        raise TypeError(f"torch dtype {x.dtype} is not supported; expected one of {sorted(TORCH_DTYPES)}")
    return TensorInfo(int(x.data_ptr()), tuple(x.shape), tuple(x.stride()), dtype, x.device.type, True)


def _from_cai(x: Any) -> TensorInfo:
    cai = x.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise TypeError("__cuda_array_interface__ with a mask is not supported; pass an unmasked array")
    typestr = cai["typestr"]
    dtype = _CAI_DTYPES.get(typestr[1:])
    if dtype is None or typestr[0] == ">":
        raise TypeError(f"__cuda_array_interface__ typestr {typestr!r} is not supported; expected a "
                        f"little-endian one of {sorted('<' + t for t in _CAI_DTYPES)}")
    shape = tuple(int(n) for n in cai["shape"])
    elem = DTYPES[dtype][0]
    if cai.get("strides") is None:
        strides = _contiguous_strides(shape)
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(s % elem for s in byte_strides):
            raise ValueError(f"__cuda_array_interface__ strides {byte_strides} bytes are not multiples of "
                             f"the element size {elem}; pass an element-aligned array")
        strides = tuple(s // elem for s in byte_strides)
    return TensorInfo(int(cai["data"][0]), shape, strides, dtype, "cuda")


def _from_dlpack(x: Any) -> TensorInfo:
    capsule = x.__dlpack__()
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    addr = get_pointer(capsule, b"dltensor")
    t = _DLTensor.from_address(addr)
    device = _DL_DEVICES.get(t.device.device_type, f"dlpack-device-{t.device.device_type}")
    dtype = _DL_DTYPES.get((t.dtype.code, t.dtype.bits))
    if dtype is None or t.dtype.lanes != 1:
        raise TypeError(f"DLPack dtype (code={t.dtype.code}, bits={t.dtype.bits}, lanes={t.dtype.lanes}) "
                        f"is not supported; expected one of {sorted(_DL_DTYPES.values())}")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _contiguous_strides(shape)
    ptr = (t.data or 0) + t.byte_offset
    del t, capsule  # the capsule's destructor returns the producer's reference; x keeps the memory
    return TensorInfo(ptr, shape, strides, dtype, device)


def is_tensor_like(x: Any) -> bool:
    return _is_torch_tensor(x) or hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__")


def tensor_info(x: Any) -> TensorInfo:
    """Shape, element strides, dtype, address and device of a torch tensor, a
    ``__cuda_array_interface__`` object or a ``__dlpack__`` object (in that order of preference)."""
    if _is_torch_tensor(x):
        return _from_torch(x)
    if hasattr(x, "__cuda_array_interface__"):
        return _from_cai(x)
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(x)
    raise TypeError(f"expected a tensor-like (torch tensor, __cuda_array_interface__ or __dlpack__ "
                    f"object), got {type(x).__name__}")
