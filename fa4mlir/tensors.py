"""Tensor-likes as the runtime sees them (MLIR-free): torch tensors, ``__cuda_array_interface__``
and ``__dlpack__`` objects read into a ``TensorInfo`` (address, shape, element strides, dtype,
device), and the dtype table the runtime's TMA descriptors use.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

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


class TensorLikeError(TypeError):
    """An argument that cannot be read as a tensor: not a torch tensor, ``__cuda_array_interface__``
    or ``__dlpack__`` object, or one whose interface is malformed (a field missing or of the wrong
    type, a capsule that is not a DLTensor)."""


class TensorDTypeError(TensorLikeError):
    """A tensor-like whose dtype has no fa4mlir name (``DTYPES``)."""


class TensorStrideError(TensorLikeError, ValueError):
    """A tensor-like whose byte strides are not whole elements (they have no element strides)."""


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
        raise TensorDTypeError(f"torch dtype {x.dtype} is not supported; expected one of {sorted(TORCH_DTYPES)}")
    if str(x.layout) != "torch.strided":
        raise TensorLikeError(f"a torch tensor with layout {x.layout} has no strides; pass x.to_dense()")
    return TensorInfo(int(x.data_ptr()), tuple(x.shape), tuple(x.stride()), dtype, x.device.type, True)


def _ints(value: Any, what: str) -> tuple[int, ...]:
    """A tuple of ints (no bools) from an interface's shape or strides field."""
    if not isinstance(value, (tuple, list)):
        raise TensorLikeError(f"{what} must be a tuple of ints, got {type(value).__name__}; fix its producer")
    if any(isinstance(n, bool) or not isinstance(n, int) for n in value):
        raise TensorLikeError(f"{what} must be a tuple of ints, got {tuple(value)!r}; fix its producer")
    return tuple(int(n) for n in value)


def _pointer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise TensorLikeError(f"{what} must be an address (an int in 0..2^64-1), got {value!r}; fix its producer")
    return int(value)


def _element_strides(byte_strides: tuple[int, ...], elem: int, what: str) -> tuple[int, ...]:
    if any(s % elem for s in byte_strides):
        raise TensorStrideError(f"{what} {byte_strides} (bytes) are not multiples of the element size {elem} "
                                f"bytes; an element-aligned array has element strides: pass a contiguous copy")
    return tuple(s // elem for s in byte_strides)


def _from_cai(cai: Any) -> TensorInfo:
    where = "__cuda_array_interface__"
    if not isinstance(cai, Mapping):
        raise TensorLikeError(f"{where} must be a dict, got {type(cai).__name__}; fix its producer")
    missing = [f for f in ("shape", "typestr", "data") if f not in cai]
    if missing:
        raise TensorLikeError(f"{where} lacks {missing}; a v3 interface has shape, typestr, data (and "
                              f"strides, version): fix its producer")
    if cai.get("mask") is not None:
        raise TensorLikeError(f"{where} with a mask is not supported; pass an unmasked array")
    typestr = cai["typestr"]
    dtype = _CAI_DTYPES.get(typestr[1:]) if isinstance(typestr, str) else None
    if dtype is None or typestr[0] not in "<|":
        raise TensorDTypeError(f"{where} typestr {typestr!r} is not supported; expected a "
                               f"little-endian one of {sorted('<' + t for t in _CAI_DTYPES)}")
    shape = _ints(cai["shape"], f"{where} shape")
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TensorLikeError(f"{where} data must be a tuple (address, read_only), got {data!r}; fix its producer")
    ptr = _pointer(data[0], f"{where} data address")
    elem = DTYPES[dtype][0]
    if cai.get("strides") is None:
        strides = _contiguous_strides(shape)
    else:
        byte_strides = _ints(cai["strides"], f"{where} strides")
        if len(byte_strides) != len(shape):
            raise TensorLikeError(f"{where} strides {byte_strides} and shape {shape} differ in length; "
                                  f"give one stride per dimension (or None for C order)")
        strides = _element_strides(byte_strides, elem, f"{where} strides")
    return TensorInfo(ptr, shape, strides, dtype, "cuda")


MAX_DLPACK_NDIM = 64


def _from_dlpack(x: Any) -> TensorInfo:
    try:
        capsule = x.__dlpack__()
    except Exception as e:  # the producer's refusal (e.g. a dtype DLPack lacks, a read-only array)
        raise TensorLikeError(f"__dlpack__() raised {type(e).__name__}: {e}; pass a tensor its producer can "
                              f"export (or a torch tensor)") from e
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    try:
        addr = get_pointer(capsule, b"dltensor")
    except ValueError:
        raise TensorLikeError(f"__dlpack__() returned {type(capsule).__name__}, not an unused 'dltensor' "
                              f"capsule; pass a DLPack producer (or the tensor itself)") from None
    t = _DLTensor.from_address(addr)
    device = _DL_DEVICES.get(t.device.device_type, f"dlpack-device-{t.device.device_type}")
    dtype = _DL_DTYPES.get((t.dtype.code, t.dtype.bits))
    if dtype is None or t.dtype.lanes != 1:
        raise TensorDTypeError(f"DLPack dtype (code={t.dtype.code}, bits={t.dtype.bits}, lanes={t.dtype.lanes}) "
                               f"is not supported; expected one of {sorted(_DL_DTYPES.values())}")
    if not 0 <= t.ndim <= MAX_DLPACK_NDIM or (t.ndim and not t.shape):
        raise TensorLikeError(f"DLPack tensor has ndim {t.ndim} and shape pointer {'set' if t.shape else 'NULL'}; "
                              f"a DLTensor has 0..{MAX_DLPACK_NDIM} dimensions and their sizes: fix its producer")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _contiguous_strides(shape)
    ptr = (t.data or 0) + t.byte_offset
    del t, capsule  # the capsule's destructor returns the producer's reference; x keeps the memory
    return TensorInfo(ptr, shape, strides, dtype, device)


_ABSENT = object()


def is_tensor_like(x: Any) -> bool:
    return _is_torch_tensor(x) or hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__")


def tensor_info(x: Any) -> TensorInfo:
    """Shape, element strides, dtype, address and device of a torch tensor, a
    ``__cuda_array_interface__`` object or a ``__dlpack__`` object (in that order of preference)."""
    if _is_torch_tensor(x):
        return _from_torch(x)
    try:
        cai = getattr(x, "__cuda_array_interface__", _ABSENT)
    except Exception as e:  # a property of the caller's object that raised
        raise TensorLikeError(f"reading __cuda_array_interface__ raised {type(e).__name__}: {e}; pass a tensor "
                              f"whose interface can be read") from e
    if cai is not _ABSENT:
        return _from_cai(cai)
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(x)
    raise TensorLikeError(f"expected a tensor-like (torch tensor, __cuda_array_interface__ or __dlpack__ "
                          f"object), got {type(x).__name__}")
