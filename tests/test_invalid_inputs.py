"""Deviceless catalogue of invalid inputs to the entry points (issue 31: every one typed, before
any driver call and any compile), and what the empty problems return.

Each case calls ``fa4mlir.flash_attn_func`` with one thing wrong over a valid call and asserts the
exact exception type, a regex of the words that say what to do, that the CUDA boundary saw no call
and that nothing was compiled. The boundary is a recording fake of ``cuda.bindings.driver`` put
where ``fa4mlir.driver`` hands it out (``driver()``, the seam every CUDA call goes through); it
answers the device queries (cuInit, the primary context, cuCtxGetDevice, attributes) and the
memsets, and fails anything else (module loads, launches, TMA encodes). Device cases (a capability
or context device the kernel cannot take, a bundle without the kernel) may ask the device and
nothing more. The compiler is a stub module in ``sys.modules["fa4mlir.compiler"]`` that records
and fails.

Tensors are fake ``__cuda_array_interface__`` / DLPack objects with no memory behind them (CI has
no torch); the torch cases (CPU tensors, importorskip) cover the torch custom ops, whose errors
must be the same typed ones.
"""
from __future__ import annotations

import ctypes
import math
import struct
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import fa4mlir
import fa4mlir.gemm
from fa4mlir import driver as driver_mod
from fa4mlir import runtime, tensors
from fa4mlir.attention import (ArgumentTypeError, AutogradError, BundleError, DeviceError, DTypeError, EmptyInputError,
                               HeadDimError, HeadsRatioError, LayoutError, ScaleError, ShapeError, checks, dense, plan)

# ----------------------------------------------------------------------------------------------
# Test doubles: the CUDA driver, the compiler, tensor-likes
# ----------------------------------------------------------------------------------------------

DEVICE_QUERIES = frozenset({"cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent",
                            "cuCtxSetCurrent", "cuCtxGetDevice", "cuDeviceGetAttribute"})
MEMSETS = frozenset({"cuMemsetD2D8Async", "cuMemsetD2D16Async", "cuMemsetD2D32Async"})


class FakeDriver:
    """cuda.bindings.driver as the runtime sees it: records every call by name and arguments,
    answers the device queries (one device of ``capability``) and the 2-D memsets, and fails any
    other cu* call (what would load, encode or launch)."""

    CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
    CUdevice_attribute = types.SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms", CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE="l2")

    def __init__(self, capability=(9, 0)):
        self.calls: list[tuple[str, tuple]] = []
        self.attributes = {"major": capability[0], "minor": capability[1], "sms": 132, "l2": 50 * 2**20}

    def _ok(self, name, args, *values):
        self.calls.append((name, args))
        return (0, *values)

    def cuInit(self, *a):
        return self._ok("cuInit", a)

    def cuDeviceGet(self, ordinal):
        return self._ok("cuDeviceGet", (ordinal,), ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        return self._ok("cuDevicePrimaryCtxRetain", (dev,), 0xC0)

    def cuCtxGetCurrent(self):
        return self._ok("cuCtxGetCurrent", (), None)

    def cuCtxSetCurrent(self, ctx):
        return self._ok("cuCtxSetCurrent", (ctx,))

    def cuCtxGetDevice(self):
        return self._ok("cuCtxGetDevice", (), 0)

    def cuDeviceGetAttribute(self, attr, dev):
        return self._ok("cuDeviceGetAttribute", (attr, dev), self.attributes[attr])

    def CUstream(self, handle):
        return ("stream", handle)

    def __getattr__(self, name):
        if name in MEMSETS:
            return lambda *a: self._ok(name, a)
        if name.startswith("cu") or name.startswith("CU"):
            def refused(*a):
                self.calls.append((name, a))
                raise AssertionError(f"CUDA call {name} reached the fake driver")
            return refused
        raise AttributeError(name)

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


@dataclass
class Boundary:
    driver: FakeDriver
    compiles: list = field(default_factory=list)


@pytest.fixture
def boundary(monkeypatch):
    """The fake driver and a compiler stub in place; no call cache, no kernel sources, no bundle."""
    fake = FakeDriver()
    monkeypatch.setattr(driver_mod, "driver", lambda: fake)
    monkeypatch.setattr(driver_mod, "_ctx", None)
    monkeypatch.setattr(driver_mod, "_DEVICE", [])
    monkeypatch.setattr(dense, "_CALLS", {})
    monkeypatch.setattr(plan, "_SOURCES", {})
    monkeypatch.delenv("FA4MLIR_BUNDLE", raising=False)
    state = Boundary(fake)

    def compile_kernel(*args, **kw):
        state.compiles.append((args, kw))
        raise AssertionError("the compiler was called")
    stub = types.ModuleType("fa4mlir.compiler")
    stub.compile_kernel = compile_kernel
    monkeypatch.setitem(sys.modules, "fa4mlir.compiler", stub)
    monkeypatch.setattr(fa4mlir, "compiler", stub, raising=False)   # `from . import compiler` reads it first
    monkeypatch.setattr(GEMM, "_LOADED", {})
    monkeypatch.setattr(GEMM, "_BUNDLES", {})
    return state


PTR = 0x7F0000000000
GEMM = sys.modules["fa4mlir.gemm"]   # the module (fa4mlir.gemm, the attribute, is the function)


def ptr(i: int) -> int:
    return PTR + i * 0x10000000


class CAI:
    """A CUDA array as ``__cuda_array_interface__`` (v3) describes it; no memory behind it."""

    def __init__(self, shape=None, typestr="<f2", data=None, strides=None, raw=None, **extra):
        self.__cuda_array_interface__ = raw if raw is not None else {
            "shape": tuple(shape), "typestr": typestr, "data": (PTR, False) if data is None else data,
            "strides": strides, "version": 3, **extra}


def cai(shape, i=0, typestr="<f2", address=None, strides=None, **extra):
    return CAI(shape, typestr, (ptr(i) if address is None else address, False), strides, **extra)


class Raising:
    """A tensor-like whose interface property raises."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("device memory was freed")


_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


class DLPack:
    """A ``__dlpack__`` producer whose DLTensor (in host memory) describes a tensor on ``device``
    (DLPack device type, id); no memory behind it."""

    def __init__(self, shape, i=0, code=4, bits=16, lanes=1, device=(2, 0), strides=None, ndim=None,
                 name=_CAPSULE_NAME, address=None):
        n = len(shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = (ctypes.c_int64 * n)(*strides) if strides else None
        self._t = tensors._DLTensor(
            data=ptr(i) if address is None else address, device=tensors._DLDevice(*device),
            ndim=n if ndim is None else ndim, dtype=tensors._DLDataType(code, bits, lanes),
            shape=ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)),
            strides=ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64)) if strides else None, byte_offset=0)
        self._device, self._name = device, name

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self._t), ctypes.addressof(self._name), None)

    def __dlpack_device__(self):
        return self._device


class DLPackBroken:
    """A ``__dlpack__`` producer that raises ``dlpack`` (an exception) or returns it."""

    def __init__(self, dlpack):
        self._dlpack = dlpack

    def __dlpack__(self, stream=None):
        if isinstance(self._dlpack, Exception):
            raise self._dlpack
        return self._dlpack

    def __dlpack_device__(self):
        return (2, 0)


class DLPackNoDevice(DLPack):
    def __dlpack_device__(self):
        raise BufferError("no device")


class StreamLike:
    def __init__(self, cuda_stream=None, protocol=None):
        if cuda_stream is not None:
            self.cuda_stream = cuda_stream
        if protocol is not None:
            self.__cuda_stream__ = lambda: protocol


# ----------------------------------------------------------------------------------------------
# The valid call each case changes one thing of
# ----------------------------------------------------------------------------------------------

Q, KV = (2, 128, 4, 64), (2, 96, 2, 64)
OUT, LSE = Q, (2, 4, 128)


def contiguous_bytes(shape, elem):
    strides, acc = [], elem
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def base() -> dict:
    return {"q": cai(Q, 0), "k": cai(KV, 1), "v": cai(KV, 2)}


def with_outputs(**over) -> dict:
    return {**base(), "out": cai(OUT, 3), "lse": cai(LSE, 4, "<f4"), **over}


def bundle_dir(tmp_path: Path, manifest: str | None) -> Path:
    root = tmp_path / "bundle"
    root.mkdir()
    if manifest is not None:
        (root / "manifest.json").write_text(manifest)
    return root


EMPTY_BUNDLE = '{"format": "fa4mlir-bundle", "version": 1, "kernels": []}'


@dataclass
class Case:
    """One invalid call: ``args(tmp_path)`` -> flash_attn_func's keyword arguments."""

    id: str
    args: Callable[[Path], dict]
    exc: type
    words: str
    device: bool = False          # may ask the device (and nothing else)
    capability: tuple = (9, 0)
    env: dict | None = None
    no_torch: bool = False        # torch not importable
    call: Callable | None = None  # instead of fa4mlir.flash_attn_func


def over(**changes) -> Callable[[Path], dict]:
    return lambda tmp_path: {**base(), **changes}


def outputs_and(**changes) -> Callable[[Path], dict]:
    return lambda tmp_path: with_outputs(**changes)


FLAG = r"must be a bool{1}.*pass {0}=True or {0}=False"
STREAM = r"stream: .*(expected None, an int handle|outside 0\.\.2\^64-1; pass a stream object)"
BUNDLE_TYPE = r"bundle must be None, a bundle folder's path .*pass bundle=fa4mlir\.Bundle\.open\(path\) or the path"
BUNDLE_PATH = r"is not a readable bundle .*pass a folder written by `python -m fa4mlir bundle"
SCALE = r"softmax_scale must be a finite positive number in \[2\^-64, 2\^64\].*pass None for 1/sqrt\(head_dim\)"
NOT_TENSOR = r"pass a (tensor|DLPack producer|contiguous copy|v3 interface|unmasked array)|a v3 interface has"


def flag_cases():
    for name, values in (("causal", ["False", "no", "True", "", 2, 1, 0, None, 1.0, [True], np.array([True]),
                                     b"1"]),
                         ("return_lse", ["no", "yes", None, 1, 0.0, np.array(False)])):
        for value in values:
            words = FLAG.format(name, r".*a string is not parsed" if isinstance(value, str) else "")
            yield Case(f"{name}={value!r}", over(**{name: value}), ArgumentTypeError, words)


def stream_cases():
    bad = [("float", 1.5), ("negative", -1), ("str", "0"), ("bool-true", True), ("bool-false", False),
           ("too-big", 2**64), ("object", object()), ("list", [0]), ("nan", math.nan), ("bytes", b"0"),
           ("protocol-not-tuple", StreamLike(protocol=5)), ("protocol-float-handle", StreamLike(protocol=(0, 1.5))),
           ("cuda_stream-negative", StreamLike(cuda_stream=-5)), ("cuda_stream-str", StreamLike(cuda_stream="x")),
           ("numpy-float", np.float32(3))]
    for name, value in bad:
        words = r"__cuda_stream__\(\) must return \(version, handle\)" if name == "protocol-not-tuple" else STREAM
        yield Case(f"stream-{name}", over(stream=value), ArgumentTypeError, words)


def bundle_cases():
    for name, value in (("int", 123), ("bool", True), ("list", ["bundle"]), ("object", object()), ("bytes", b"dir")):
        yield Case(f"bundle-{name}", over(bundle=value), ArgumentTypeError, BUNDLE_TYPE)
    # out and lse given: a valid call without torch (CI) gets this far
    yield Case("bundle-missing-path", outputs_and(bundle="/nonexistent/fa4mlir-bundle"), BundleError, BUNDLE_PATH)
    yield Case("bundle-missing-Path", outputs_and(bundle=Path("/nonexistent/fa4mlir-bundle")), BundleError, BUNDLE_PATH)
    yield Case("bundle-empty-string", outputs_and(bundle=""), BundleError, BUNDLE_PATH)
    yield Case("bundle-no-manifest", lambda t: {**with_outputs(), "bundle": bundle_dir(t, None)}, BundleError, BUNDLE_PATH)
    yield Case("bundle-manifest-not-json", lambda t: {**with_outputs(), "bundle": bundle_dir(t, "{not json")}, BundleError,
               BUNDLE_PATH + r".*")
    yield Case("bundle-manifest-other-format", lambda t: {**with_outputs(), "bundle": bundle_dir(t, '{"format": "x"}')},
               BundleError, BUNDLE_PATH)
    yield Case("FA4MLIR_BUNDLE-missing", outputs_and(), BundleError, r"FA4MLIR_BUNDLE '/nonexistent/b' is not a readable "
               r"bundle.*FA4MLIR_BUNDLE unset\) to compile", env={"FA4MLIR_BUNDLE": "/nonexistent/b"})
    yield Case("bundle-without-the-kernel", lambda t: {**with_outputs(), "bundle": bundle_dir(t, EMPTY_BUNDLE)},
               BundleError, r"has no attention_fwd_sm90 \(sm_90a\) kernel for dtype=f16, head_dim=64.*build it with "
               r"`python -m fa4mlir bundle --set attention`", device=True)


def scale_cases():
    for name, value in (("1e300", 1e300), ("-1e300", -1e300), ("zero", 0.0), ("negative", -0.125), ("nan", math.nan),
                        ("inf", math.inf), ("-inf", -math.inf), ("1e-300", 1e-300), ("2**65", 2**65),
                        ("10**400", 10**400), ("str", "0.125"), ("bool", True), ("numpy-1e39", np.float64(1e39)),
                        ("numpy-bool", np.bool_(True)), ("list", [0.125]), ("complex", 0.1 + 0j), ("bytes", b"0.1"),
                        ("subnormal-f32", 1e-40)):
        yield Case(f"softmax_scale-{name}", over(softmax_scale=value), ScaleError, SCALE)


def tensor_cases():
    for name in ("q", "k", "v"):
        yield Case(f"{name}=None", over(**{name: None}), ArgumentTypeError, rf"{name} is None; pass a tensor")
    for name, value in (("list", [[1.0]]), ("float", 3.0), ("str", "tensor"), ("dict", {"shape": Q})):
        yield Case(f"q-{name}", over(q=value), ArgumentTypeError, r"q: expected a tensor-like \(torch tensor, "
                   r"__cuda_array_interface__ or __dlpack__ object\)")
    yield Case("out-not-tensor", over(out=[1]), ArgumentTypeError, r"out: expected a tensor-like")
    yield Case("lse-not-tensor", over(lse="x"), ArgumentTypeError, r"lse: expected a tensor-like")
    good = {"shape": Q, "typestr": "<f2", "data": (PTR, False), "version": 3}
    malformed = [
        ("not-a-dict", "shape=..."), ("no-data", {k: v for k, v in good.items() if k != "data"}),
        ("no-shape", {k: v for k, v in good.items() if k != "shape"}),
        ("no-typestr", {k: v for k, v in good.items() if k != "typestr"}),
        ("shape-int", {**good, "shape": 4}), ("shape-floats", {**good, "shape": (2.0, 128.0, 4.0, 64.0)}),
        ("shape-bools", {**good, "shape": (True, True, True, True)}),
        ("data-int", {**good, "data": PTR}), ("data-negative", {**good, "data": (-16, False)}),
        ("data-str", {**good, "data": ("0x7f00", False)}), ("data-too-big", {**good, "data": (2**64, False)}),
        ("strides-length", {**good, "strides": (16, 2)}), ("strides-none-items", {**good, "strides": (None,) * 4}),
        ("mask", {**good, "mask": object()}),
    ]
    for name, raw in malformed:
        words = {"mask": r" with a mask is not supported; pass an unmasked array",
                 "strides-length": r" strides .* differ in length; give one stride per dimension"}.get(
                     name, r".*(lacks \[.*\]|must be a dict|must be a tuple|must be an address).*fix its producer")
        yield Case(f"cai-{name}", over(q=CAI(raw=raw)), ArgumentTypeError, r"q: __cuda_array_interface__" + words)
    yield Case("cai-property-raises", over(k=Raising()), ArgumentTypeError,
               r"k: reading __cuda_array_interface__ raised RuntimeError: device memory was freed; pass a tensor")
    yield Case("dlpack-raises", over(v=DLPackBroken(BufferError("read-only"))), ArgumentTypeError,
               r"v: __dlpack__\(\) raised BufferError: read-only; pass a tensor its producer can export")
    yield Case("dlpack-not-a-capsule", over(q=DLPackBroken(5)), ArgumentTypeError,
               r"q: __dlpack__\(\) returned int, not an unused 'dltensor' capsule; pass a DLPack producer")
    yield Case("dlpack-used-capsule", over(q=DLPack(Q, name=_USED_NAME)), ArgumentTypeError,
               r"not an unused 'dltensor' capsule")
    yield Case("dlpack-negative-ndim", over(q=DLPack(Q, ndim=-1)), ArgumentTypeError, r"ndim -1.*a DLTensor has.*fix its producer")
    yield Case("dlpack-device-raises", over(q=DLPackNoDevice(Q, code=2)), ArgumentTypeError,
               r"q: __dlpack_device__\(\) must return \(device_type, device_id\).*pass a DLPack producer")


def dtype_cases():
    yield Case("q-f32", over(q=cai(Q, 0, "<f4")), DTypeError, r"q has dtype f32; expected one of \('bf16', 'f16'\): "
               r"convert it")
    yield Case("q-i8", over(q=cai(Q, 0, "|i1")), DTypeError, r"q has dtype i8.*convert it")
    yield Case("q-big-endian", over(q=cai(Q, 0, ">f2")), DTypeError, r"typestr '>f2' is not supported; expected a "
               r"little-endian one.*convert it to bf16 or f16")
    yield Case("q-complex", over(q=cai(Q, 0, "<c8")), DTypeError, r"typestr '<c8' is not supported.*convert it")
    yield Case("q-typestr-int", over(q=CAI(Q, typestr=5)), DTypeError, r"typestr 5 is not supported")
    yield Case("k-bf16-q-f16", over(k=DLPack(KV, 1)), DTypeError, r"share one dtype, got q=f16, k=bf16, v=f16; "
               r"convert them all")
    yield Case("dlpack-lanes-2", over(q=DLPack(Q, lanes=2)), DTypeError, r"lanes=2\) is not supported")
    yield Case("dlpack-complex", over(q=DLPack(Q, code=5, bits=32)), DTypeError, r"code=5, bits=32.*not supported")
    yield Case("out-f32", lambda t: with_outputs(out=cai(OUT, 3, "<f4")), DTypeError,
               r"out must have q's dtype f16, got f32; allocate it like q")
    yield Case("lse-f16", lambda t: with_outputs(lse=cai(LSE, 4)), DTypeError,
               r"lse must be float32, got f16; allocate it with torch\.empty\(\(2, 4, 128\), dtype=torch\.float32\)")


def shape_cases():
    yield Case("q-rank-3", over(q=cai((2, 128, 256), 0)), ShapeError, r"q must be 4-D.*reshape it")
    yield Case("k-rank-5", over(k=cai((2, 96, 2, 1, 64), 1)), ShapeError, r"k must be 4-D.*reshape it")
    yield Case("q-negative-seqlen", over(q=cai((2, -1, 4, 64), 0)), ShapeError,
               r"q has a negative size in shape \(2, -1, 4, 64\); sizes are >= 0: fix its producer")
    yield Case("k-negative-batch", over(k=cai((-2, 96, 2, 64), 1), v=cai((-2, 96, 2, 64), 2)), ShapeError,
               r"k has a negative size")
    yield Case("dlpack-negative-heads", over(q=DLPack((2, 128, -4, 64), code=2)), ShapeError, r"negative size")
    yield Case("batch-mismatch", over(k=cai((3, 96, 2, 64), 1)), ShapeError, r"batch differs.*need one batch size")
    yield Case("head_dim-mismatch", over(k=cai((2, 96, 2, 128), 1), v=cai((2, 96, 2, 128), 2)), ShapeError,
               r"head_dim differs.*zero-pad the smaller")
    yield Case("k-v-differ", over(v=cai((2, 97, 2, 64), 2)), ShapeError, r"k and v must have the same shape")
    yield Case("out-shape", lambda t: with_outputs(out=cai((2, 128, 4, 128), 3)), ShapeError,
               r"out must have q's shape \(2, 128, 4, 64\).*allocate it like q")
    yield Case("out-negative", lambda t: with_outputs(out=cai((2, -128, 4, 64), 3)), ShapeError,
               r"out must have q's shape")
    yield Case("lse-shape", lambda t: with_outputs(lse=cai((2, 128, 4), 4, "<f4")), ShapeError,
               r"lse must have shape \[batch, heads, seqlen_q\] = \(2, 4, 128\).*allocate it with")
    big = (70000, 1, 1, 64)
    yield Case("batch-above-grid", over(q=cai(big, 0), k=cai(big, 1), v=cai(big, 2)), ShapeError,
               r"batch 70000 and heads 1 must be at most 65535 \(CUDA grid limit\): split the call")
    yield Case("seqlen-above-int32", over(q=cai((2, 2**31, 4, 64), 0)), ShapeError,
               r"must fit in int32.*split the call")
    yield Case("head_dim-80", over(**{n: cai((2, 128, 4, 80), i) for i, n in enumerate("qkv")}), HeadDimError,
               r"head_dim 80 is not supported.*zero-pad q, k, v to head_dim 96")
    yield Case("head_dim-512", over(**{n: cai((2, 128, 4, 512), i) for i, n in enumerate("qkv")}), HeadDimError,
               r"head_dim 512 is not supported; the sm_90a kernel is built for head_dim in \(64, 96, 128, 192, 256\)")
    yield Case("v-head_dim-64-of-128", over(v=cai((2, 96, 2, 128), 2)), HeadDimError,
               r"q and k have head_dim 64 and v has head_dim 128; unequal head dims are supported only as "
               r"\(qk, v\) in \(\(192, 128\),\) \(MLA prefill\)")
    qk192 = (2, 96, 2, 192)
    yield Case("v-head_dim-192-64", over(q=cai((2, 128, 4, 192), 0), k=cai(qk192, 1), v=cai((2, 96, 2, 64), 2)),
               HeadDimError, r"v has head_dim 64; unequal head dims are supported only as")
    yield Case("out-shape-mla", lambda t: with_outputs(q=cai((2, 128, 4, 192), 0), k=cai(qk192, 1),
                                                       v=cai((2, 96, 2, 128), 2), out=cai((2, 128, 4, 192), 3)),
               ShapeError, r"out must have q's shape with v's head_dim 128, \(2, 128, 4, 128\)")
    yield Case("heads-ratio", over(k=cai((2, 96, 3, 64), 1), v=cai((2, 96, 3, 64), 2)), HeadsRatioError,
               r"heads must be a multiple of kv_heads")
    yield Case("head_dim-0", over(**{n: cai((2, 128, 4, 0), i) for i, n in enumerate("qkv")}), EmptyInputError,
               r"head_dim is 0.*pass tensors with a head dimension")
    yield Case("kv_heads-0", over(k=cai((2, 96, 0, 64), 1), v=cai((2, 96, 0, 64), 2)), EmptyInputError,
               r"kv_heads = 0 but q has 4 heads.*pass k and v with kv_heads dividing 4")


def layout_cases():
    null = {"q": cai(Q, address=0), "k": cai(KV, address=0), "out": cai(OUT, address=0),
            "lse": cai(LSE, typestr="<f4", address=0)}
    for name, tensor in null.items():
        yield Case(f"{name}-NULL", (lambda n, x: lambda t: with_outputs(**{n: x}))(name, tensor), LayoutError,
                   rf"{name} has a NULL data pointer but \d+ elements.*pass an allocated tensor")
    yield Case("q-misaligned", over(q=cai(Q, 0, address=PTR + 2)), LayoutError,
               r"q data pointer 0x7f0000000002 is not 16-byte aligned.*pass q\.clone\(\)")
    yield Case("lse-misaligned", lambda t: with_outputs(lse=cai(LSE, 4, "<f4", address=ptr(4) + 4)), LayoutError,
               r"lse data pointer .* is not 16-byte aligned; allocate it fresh")
    b, s, h, d = Q
    yield Case("q-inner-stride-2", over(q=cai(Q, 0, strides=(s * h * d * 4, h * d * 4, d * 4, 4))), LayoutError,
               r"q must have stride 1 along head_dim.*pass q\.contiguous\(\)")
    yield Case("byte-strides-odd", over(q=cai(Q, 0, strides=(s * h * d * 2, h * d * 2, d * 2, 3))), LayoutError,
               r"q: __cuda_array_interface__ strides .* are not multiples of the element size 2 bytes.*pass a "
               r"contiguous copy")
    yield Case("negative-stride", over(q=cai(Q, 0, strides=(s * h * d * 2, -h * d * 2, d * 2, 2))), LayoutError,
               r"q has negative strides.*pass q\.contiguous\(\)")
    kb, ks, kh, kd = KV
    yield Case("k-broadcast-heads", over(k=cai(KV, 1, strides=(ks * kd * 2, kd * 2, 0, 2))), LayoutError,
               r"k has stride 0 along heads.*pass k and v with kv_heads heads")
    yield Case("v-overlapping", over(v=cai(KV, 2, strides=(ks * kh * kd * 2, kd * 2, kd * 2, 2))), LayoutError,
               r"v has overlapping strides.*pass v\.contiguous\(\)")
    yield Case("k-row-not-16B", over(k=cai(KV, 1, strides=(ks * kh * 66 * 2, kh * 66 * 2, 66 * 2, 2))), LayoutError,
               r"k stride along heads is 66 elements = 132 bytes; TMA needs a multiple of 16 bytes.*pass "
               r"k\.contiguous\(\), or pad")
    yield Case("lse-not-contiguous", lambda t: with_outputs(lse=cai(LSE, 4, "<f4", strides=(2048, 4, 16))),
               LayoutError, r"lse must be contiguous.*pass a contiguous tensor")
    yield Case("out-inner-stride", lambda t: with_outputs(out=cai(OUT, 3, strides=(s * h * d * 4, h * d * 4, d * 4, 4))),
               LayoutError, r"out must have stride 1 along head_dim.*pass out\.contiguous\(\)")


def device_cases():
    yield Case("dlpack-on-cpu", over(q=DLPack(Q, code=2, device=(1, 0))), DeviceError,
               r"q is on device 'cpu'; expected a CUDA tensor: move it to the GPU first")
    yield Case("dlpack-on-cuda-host", over(k=DLPack(KV, 1, code=2, device=(3, 0))), DeviceError,
               r"k is on device 'cuda_host'.*move it to the GPU first")
    yield Case("numpy-arrays", lambda t: {n: np.zeros(s, np.float16) for n, s in (("q", Q), ("k", KV), ("v", KV))},
               DeviceError, r"q is on device 'cpu'.*move it to the GPU first \(e\.g\. q\.cuda\(\)\)")
    yield Case("different-gpus", over(q=DLPack(Q, code=2, device=(2, 0)), k=DLPack(KV, 1, code=2, device=(2, 1)),
                                      v=DLPack(KV, 2, code=2, device=(2, 1))), DeviceError,
               r"tensors are on different devices \(k on cuda:1, q on cuda:0, v on cuda:1\); put them all on one GPU")
    yield Case("sm_80", lambda t: with_outputs(), DeviceError, r"device 0 is sm_80; this kernel .* needs an sm_90 GPU",
               device=True, capability=(8, 0))
    yield Case("sm_100", lambda t: with_outputs(), DeviceError, r"device 0 is sm_100.*needs an sm_90 GPU",
               device=True, capability=(10, 0))
    on_1 = {n: DLPack(s, i, code=2, device=(2, 1)) for i, (n, s) in enumerate((("q", Q), ("k", KV), ("v", KV)))}
    yield Case("tensors-not-on-context-device", lambda t: {**on_1, "out": cai(OUT, 3), "lse": cai(LSE, 4, "<f4")},
               DeviceError, r"tensors are on cuda:1 but fa4mlir's CUDA context is on device 0.*call "
               r"torch\.cuda\.set_device\(1\) before the first fa4mlir call", device=True)
    yield Case("no-torch-to-allocate", over(), ArgumentTypeError, r"torch is not importable, so out and lse cannot be "
               r"allocated; pass out= \(\(2, 128, 4, 64\), f16\) and lse= \(\(2, 4, 128\), float32\)", no_torch=True)
    yield Case("no-torch-to-allocate-lse", over(out=cai(OUT, 3)), ArgumentTypeError, r"pass out=.* and lse=",
               no_torch=True)


# ----------------------------------------------------------------------------------------------
# fa4mlir.gemm: C [M, N] = A [M, K] . B [N, K]^T
# ----------------------------------------------------------------------------------------------

A, B, C = (256, 128), (512, 128), (256, 512)


def gemm_args(**changes) -> Callable[[Path], dict]:
    return lambda tmp_path: {"a": cai(A, 0), "b": cai(B, 1), "out": cai(C, 2), **changes}


def gemm(**kw):
    return fa4mlir.gemm(**kw)


def gemm_cases():
    def case(id, args, exc, words, **kw):
        return Case(f"gemm-{id}", args, exc, words, call=gemm, **kw)
    yield case("a=None", gemm_args(a=None), ArgumentTypeError, r"gemm: a is None; pass a tensor .* of shape \[M, K\]")
    yield case("b-list", gemm_args(b=[[1.0]]), ArgumentTypeError, r"gemm: b: expected a tensor-like")
    yield case("a-malformed", gemm_args(a=CAI(raw={"shape": A})), ArgumentTypeError, r"lacks .*fix its producer")
    yield case("a-rank-3", gemm_args(a=cai((2, 128, 128), 0)), ShapeError, r"a must be 2-D.*reshape it")
    yield case("a-negative", gemm_args(a=cai((-256, 128), 0)), ShapeError, r"negative size.*fix its producer")
    yield case("K-differs", gemm_args(b=cai((512, 64), 1)), ShapeError, r"K differs: pass b as \[N, K\]")
    yield case("c-shape", gemm_args(out=cai((512, 256), 2)), ShapeError, r"c must be \[M, N\] = \[256, 512\].*"
               r"allocate it so")
    yield case("f32", gemm_args(**{n: cai(s, i, "<f4") for i, (n, s) in enumerate((("a", A), ("b", B), ("out", C)))}),
               DTypeError, r"must share dtype bf16 or f16; got f32, f32, f32: convert them")
    yield case("mixed-dtypes", gemm_args(b=DLPack(B, 1)), DTypeError, r"got f16, bf16, f16: convert them")
    yield case("big-endian", gemm_args(a=cai(A, 0, ">f2")), DTypeError, r"a: .*little-endian.*convert it")
    yield case("K-not-8", gemm_args(a=cai((256, 100), 0), b=cai((512, 100), 1)), LayoutError,
               r"K and N must be multiples of 8.*zero-pad them")
    yield case("a-NULL", gemm_args(a=cai(A, address=0)), LayoutError, r"a has a NULL data pointer.*pass an allocated")
    yield case("a-col-major", gemm_args(a=cai(A, 0, strides=(2, 512))), LayoutError,
               r"a must be row-major with unit inner stride.*pass a\.contiguous\(\)")
    yield case("b-row-stride", gemm_args(b=cai(B, 1, strides=(2 * 100, 2))), LayoutError,
               r"b row stride 100 elements must be at least its 128 columns and a multiple of 8")
    yield case("a-misaligned", gemm_args(a=cai(A, 0, address=PTR + 8)), LayoutError,
               r"a data pointer .* is not 16-byte aligned; pass a\.clone\(\)")
    yield case("a-on-cpu", gemm_args(a=DLPack(A, code=2, device=(1, 0))), DeviceError,
               r"a is on device 'cpu'.*move it to the GPU first")
    yield case("arch-sm_80", gemm_args(arch="sm_80"), ArgumentTypeError, r"arch must be one of \['sm_100a', "
               r"'sm_90a'\], got 'sm_80'; pass the arch of the GPU")
    yield case("arch-int", gemm_args(arch=90), ArgumentTypeError, r"arch must be one of")
    yield case("stream-float", gemm_args(stream=1.5), ArgumentTypeError, STREAM)
    yield case("bundle-int", gemm_args(bundle=5), ArgumentTypeError, BUNDLE_TYPE.replace("bundle must", "gemm: bundle must"))
    yield case("bundle-missing", gemm_args(bundle="/nonexistent/b"), BundleError, BUNDLE_PATH)
    yield case("no-out-for-non-torch", gemm_args(out=None), ArgumentTypeError,
               r"out \(C\) is allocated like a, which is not a torch tensor; pass out= as a \[256, 512\] f16")
    yield case("sm_80-device", gemm_args(), DeviceError, r"arch sm_90a needs an sm_9x GPU, but device 0 is sm_80; "
               r"pass arch='sm_80a'", device=True, capability=(8, 0))
    yield case("bundle-without-gemm", lambda t: {**gemm_args()(t), "bundle": bundle_dir(t, EMPTY_BUNDLE)}, BundleError,
               r"no kernel in bundle .* matches .*build it with `python -m fa4mlir bundle", device=True)


CASES = [*flag_cases(), *stream_cases(), *bundle_cases(), *scale_cases(), *tensor_cases(), *dtype_cases(),
         *shape_cases(), *layout_cases(), *device_cases(), *gemm_cases()]


def test_the_catalogue_holds_at_least_100_cases():
    assert len(CASES) + len(TORCH_CASES) >= 100 and len(CASES) >= 100   # the torch-free ones alone, for CI
    assert len({c.id for c in CASES}) == len(CASES)


def expect_typed(case: Case, boundary: Boundary, monkeypatch, tmp_path):
    boundary.driver.attributes.update(major=case.capability[0], minor=case.capability[1])
    for name, value in (case.env or {}).items():
        monkeypatch.setenv(name, value)
    if case.no_torch:
        monkeypatch.setitem(sys.modules, "torch", None)
    kwargs = case.args(tmp_path)
    with pytest.raises(case.exc, match=case.words) as info:
        (case.call or fa4mlir.flash_attn_func)(**kwargs)
    assert type(info.value) is case.exc, f"{type(info.value).__name__}: {info.value}"
    assert isinstance(info.value, fa4mlir.FlashAttnInputError)
    assert str(info.value).startswith("flash_attn_func: ") or str(info.value).startswith("gemm: ")
    names = boundary.driver.names()
    if case.device:
        assert names and set(names) <= DEVICE_QUERIES, names
    else:
        assert names == [], f"the driver was called before the error: {names}"
    assert boundary.compiles == []


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_input_is_typed_before_any_driver_call(case, boundary, monkeypatch, tmp_path):
    expect_typed(case, boundary, monkeypatch, tmp_path)


# ----------------------------------------------------------------------------------------------
# Torch tensors: the same typed errors through the torch custom ops (CPU tensors)
# ----------------------------------------------------------------------------------------------

def torch_qkv(dtype="bfloat16", q_shape=Q, kv_shape=KV):
    torch = sys.modules["torch"]
    dt = getattr(torch, dtype)
    return {"q": torch.zeros(q_shape, dtype=dt), "k": torch.zeros(kv_shape, dtype=dt), "v": torch.zeros(kv_shape, dtype=dt)}


def torch_over(**changes):
    def make(tmp_path):
        torch = sys.modules["torch"]
        args = torch_qkv()
        for name, change in changes.items():
            args[name] = change(torch, args) if callable(change) else change
        return args
    return make


def op_call(op: str, fake: bool = False):
    """Call torch.ops.fa4mlir.<op> with flash_attn_func's keywords (under FakeTensorMode: the fake)."""
    def call(q, k, v, softmax_scale=None, causal=False, out=None, lse=None, bundle=None):
        torch = sys.modules["torch"]
        fn = getattr(torch.ops.fa4mlir, op)
        args = (q, k, v, softmax_scale, causal, bundle) if op == "flash_attn_fwd" else \
            (q, k, v, out, lse, softmax_scale, causal, bundle)
        if not fake:
            return fn(*args)
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode() as mode:
            return fn(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
    return call


TORCH_CASES = [
    Case("torch-f32", torch_over(q=lambda t, a: a["q"].float()), DTypeError, r"q has dtype f32.*convert it"),
    Case("torch-complex", torch_over(q=lambda t, a: a["q"].to(t.complex64)), DTypeError,
         r"torch dtype torch\.complex64 is not supported.*convert it to bf16 or f16"),
    Case("torch-sparse", torch_over(k=lambda t, a: a["k"].float().to_sparse().to(t.bfloat16)), ArgumentTypeError,
         r"k: a torch tensor with layout torch\.sparse_coo has no strides; pass x\.to_dense\(\)"),
    Case("torch-requires-grad", torch_over(q=lambda t, a: a["q"].requires_grad_(True)), AutogradError,
         r"q requires grad.*torch\.no_grad\(\)"),
    Case("torch-cpu-tensors", torch_over(), DeviceError, r"q is on device 'cpu'.*q\.cuda\(\)"),
    Case("torch-causal-tensor", torch_over(causal=lambda t, a: t.tensor(True)), ArgumentTypeError,
         FLAG.format("causal", "")),
    Case("torch-causal-str", torch_over(causal="False"), ArgumentTypeError, FLAG.format("causal", "")),
    Case("torch-k-None", torch_over(k=None), ArgumentTypeError, r"k is None; pass a tensor"),
    Case("torch-q-numpy-k", torch_over(q=lambda t, a: a["q"].half(), k=lambda t, a: np.zeros(KV, np.float16),
                                       v=lambda t, a: a["v"].half()), DeviceError, r"q is on device 'cpu'"),
    Case("torch-out-dtype", torch_over(out=lambda t, a: t.zeros(Q, dtype=t.float16)), DTypeError,
         r"out must have q's dtype bf16, got f16"),
    Case("torch-lse-shape", torch_over(lse=lambda t, a: t.zeros((2, 128, 4), dtype=t.float32)), ShapeError,
         r"lse must have shape \[batch, heads, seqlen_q\]"),
    Case("torch-k-expanded", torch_over(k=lambda t, a: t.zeros((2, 96, 1, 64), dtype=t.bfloat16).expand(KV),
                                        v=lambda t, a: t.zeros((2, 96, 1, 64), dtype=t.bfloat16).expand(KV)),
         LayoutError, r"k has stride 0 along heads.*pass k and v with kv_heads heads"),
    Case("torch-inner-stride", torch_over(q=lambda t, a: t.zeros((2, 128, 4, 128), dtype=t.bfloat16)[..., ::2]),
         LayoutError, r"q must have stride 1 along head_dim"),
    Case("torch-scale-1e300", torch_over(softmax_scale=1e300), ScaleError, SCALE),
    Case("torch-stream-float", torch_over(stream=1.5), ArgumentTypeError, STREAM),
    Case("torch-bundle-int", torch_over(bundle=7), ArgumentTypeError, BUNDLE_TYPE),
    # the custom ops called directly: their implementation (eager) and their fake (FakeTensorMode)
    Case("op-f32", torch_over(q=lambda t, a: a["q"].float()), DTypeError, r"q has dtype f32",
         call=op_call("flash_attn_fwd")),
    Case("op-head_dim-80", lambda t: torch_qkv(q_shape=(2, 128, 4, 80), kv_shape=(2, 96, 2, 80)), HeadDimError,
         r"head_dim 80 is not supported", call=op_call("flash_attn_fwd")),
    Case("op-scale-1e300", torch_over(softmax_scale=1e300), ScaleError, SCALE, call=op_call("flash_attn_fwd")),
    Case("op-k-v-differ", torch_over(v=lambda t, a: t.zeros((2, 97, 2, 64), dtype=t.bfloat16)), ShapeError,
         r"k and v must have the same shape", call=op_call("flash_attn_fwd")),
    Case("op-bundle-missing", torch_over(bundle="/nonexistent/b"), BundleError, BUNDLE_PATH,
         call=op_call("flash_attn_fwd")),
    Case("op-out-dtype", torch_over(out=lambda t, a: t.zeros(Q, dtype=t.float16)), DTypeError,
         r"out must have q's dtype bf16", call=op_call("flash_attn_fwd_out")),
    Case("fake-rank-3", torch_over(q=lambda t, a: t.zeros((2, 128, 256), dtype=t.bfloat16)), ShapeError,
         r"q must be 4-D", call=op_call("flash_attn_fwd", fake=True)),
    Case("fake-scale-nan", torch_over(softmax_scale=math.nan), ScaleError, SCALE,
         call=op_call("flash_attn_fwd", fake=True)),
    Case("fake-heads-ratio", lambda t: torch_qkv(kv_shape=(2, 96, 3, 64)), HeadsRatioError,
         r"heads must be a multiple of kv_heads", call=op_call("flash_attn_fwd", fake=True)),
]


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c.id for c in TORCH_CASES])
def test_invalid_torch_input_is_typed_before_any_driver_call(case, boundary, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    import fa4mlir.attention.torch_ops  # noqa: F401  (registers the ops)
    if case.id.startswith("op-bundle"):
        monkeypatch.setattr(checks, "CUDA_DEVICES", ("cuda", "cpu"))   # CPU tensors stand for CUDA ones
    expect_typed(case, boundary, monkeypatch, tmp_path)


# ----------------------------------------------------------------------------------------------
# Empty problems: what FlashAttention-2 returns, with no kernel
# ----------------------------------------------------------------------------------------------

def test_seqlen_k_0_fills_given_outputs_with_driver_memsets(boundary):
    """Non-torch outputs: O = 0 (a 16-bit memset of zeros) and LSE = +inf (0x7F800000), one memset
    each for dense tensors, on the call's stream; no compile, no load, no launch."""
    out, lse = cai(OUT, 3), cai(LSE, 4, "<f4")
    got = fa4mlir.flash_attn_func(cai(Q, 0), cai((2, 0, 2, 64), 1), cai((2, 0, 2, 64), 2), out=out, lse=lse,
                                  return_lse=True, stream=7)
    assert got[0] is out and got[1] is lse
    memsets = [(n, a) for n, a in boundary.driver.calls if n in MEMSETS]
    assert memsets == [("cuMemsetD2D16Async", (ptr(3), 2 * math.prod(OUT), 0, math.prod(OUT), 1, ("stream", 7))),
                       ("cuMemsetD2D32Async", (ptr(4), 4 * math.prod(LSE), 0x7F800000, math.prod(LSE), 1,
                                               ("stream", 7)))]
    assert struct.unpack("<f", struct.pack("<I", 0x7F800000))[0] == math.inf
    assert set(boundary.driver.names()) <= DEVICE_QUERIES | MEMSETS and boundary.compiles == []


@pytest.mark.parametrize("q_shape, kv_shape", [((2, 0, 4, 64), KV), ((0, 128, 4, 64), (0, 96, 2, 64)),
                                               ((2, 128, 0, 64), (2, 96, 0, 64)), ((0, 0, 4, 64), (0, 0, 2, 64))],
                         ids=["seqlen_q-0", "batch-0", "heads-0", "everything-0"])
def test_empty_outputs_need_no_driver_work(boundary, q_shape, kv_shape):
    """Empty tensors may have NULL pointers; out and lse come back as given, untouched."""
    b, sq, h, d = q_shape
    out, lse = cai(q_shape, address=0), cai((b, h, sq), typestr="<f4", address=0)
    got = fa4mlir.flash_attn_func(cai(q_shape, address=0), cai(kv_shape, 1), cai(kv_shape, 2), out=out, lse=lse,
                                  return_lse=True)
    assert got == (out, lse)
    assert set(boundary.driver.names()) <= DEVICE_QUERIES and boundary.compiles == []


def test_a_size_one_dim_with_a_negative_stride_is_accepted(boundary):
    """batch and heads of size 1 with negative strides: never stepped, so never wrong."""
    q = cai((1, 16, 1, 64), 0, strides=(-4096, 128, -2, 2))
    kv = cai((1, 0, 1, 64), 1)
    fa4mlir.flash_attn_func(q, kv, kv, out=cai((1, 16, 1, 64), 3), lse=cai((1, 1, 16), 4, "<f4"), causal=np.bool_(True))
    assert boundary.compiles == []


def test_fill_splits_strided_tensors_into_2d_memsets(boundary):
    """A [B, H, S, D] tensor seen as [B, S, H, D] is dense: one memset. Rows padded to 72 elements:
    D elements per row, pitch 144 bytes, one memset per (batch) over seqlen*heads rows merged."""
    b, s, h, d = 2, 8, 4, 64
    runtime.fill(runtime.TensorInfo(PTR, (b, s, h, d), (h * s * d, d, s * d, 1), "bf16", "cuda"), 0, 5)
    padded = runtime.TensorInfo(PTR, (b, s, h, d), (s * h * 72 + 64, h * 72, 72, 1), "f16", "cuda")
    runtime.fill(padded, 0, 5)
    memsets = [a for n, a in boundary.driver.calls if n in MEMSETS]
    assert memsets == [(PTR, 2 * b * s * h * d, 0, b * s * h * d, 1, ("stream", 5)),
                       (PTR, 144, 0, d, s * h, ("stream", 5)),
                       (PTR + 2 * (s * h * 72 + 64), 144, 0, d, s * h, ("stream", 5))]


def test_valid_streams_and_flags_are_accepted():
    assert driver_mod.stream_handle(None) is None
    for stream, handle in ((0, 0), (2, 2), (np.int64(9), 9), (2**64 - 1, 2**64 - 1), (StreamLike(cuda_stream=11), 11),
                           (StreamLike(protocol=(0, 13)), 13)):
        assert driver_mod.stream_handle(stream) == handle
    assert checks.check_flag("causal", np.bool_(False)) is False and checks.check_flag("causal", True) is True


def test_fa4mlir_gemm_stays_callable_once_its_module_is_imported():
    """`import fa4mlir.gemm` (this file does) binds the module over the lazily exported function."""
    assert fa4mlir.gemm is GEMM and callable(fa4mlir.gemm)


def test_gemm_empty_products_need_no_kernel(boundary):
    """K = 0: C = 0 (torch.mm's answer) by one memset; M = 0: C as given, untouched."""
    c = cai(C, 2)
    assert fa4mlir.gemm(cai((256, 0), 0), cai((512, 0), 1), c, stream=3) is c
    assert [a for n, a in boundary.driver.calls if n in MEMSETS] == [(ptr(2), 2 * 256 * 512, 0, 256 * 512, 1,
                                                                       ("stream", 3))]
    empty = cai((0, 512), address=0)
    assert fa4mlir.gemm(cai((0, 128), address=0), cai(B, 1), empty) is empty
    assert set(boundary.driver.names()) <= DEVICE_QUERIES | MEMSETS and boundary.compiles == []


@pytest.fixture
def torch_cpu(boundary, monkeypatch):
    """CPU torch tensors standing for CUDA ones (the device check lets "cpu" pass)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(checks, "CUDA_DEVICES", ("cuda", "cpu"))
    return torch


def test_torch_seqlen_k_0_returns_zero_out_and_inf_lse(torch_cpu, boundary):
    torch = torch_cpu
    args = torch_qkv(kv_shape=(2, 0, 2, 64))
    out, lse = fa4mlir.flash_attn_func(**args, return_lse=True, causal=True)
    assert out.shape == Q and out.dtype == torch.bfloat16 and lse.shape == LSE and lse.dtype == torch.float32
    assert torch.equal(out, torch.zeros_like(out)) and bool(torch.isposinf(lse).all())
    given_out, given_lse = torch.full(Q, 7.0, dtype=torch.bfloat16), torch.full(LSE, 7.0)
    fa4mlir.flash_attn_func(**args, out=given_out, lse=given_lse)
    assert torch.equal(given_out, torch.zeros_like(given_out)) and bool(torch.isposinf(given_lse).all())
    out, lse = torch.ops.fa4mlir.flash_attn_fwd(*args.values(), None, False, None)   # the op itself
    assert not out.any() and bool(torch.isposinf(lse).all())
    assert set(boundary.driver.names()) <= DEVICE_QUERIES and boundary.compiles == []


@pytest.mark.parametrize("q_shape, kv_shape", [((2, 0, 4, 64), KV), ((0, 128, 4, 64), (0, 96, 2, 64))],
                         ids=["seqlen_q-0", "batch-0"])
def test_torch_empty_problems_return_empty_outputs(torch_cpu, boundary, q_shape, kv_shape):
    out, lse = fa4mlir.flash_attn_func(**torch_qkv(q_shape=q_shape, kv_shape=kv_shape), return_lse=True)
    b, sq, h, _ = q_shape
    assert out.shape == q_shape and lse.shape == (b, h, sq) and out.numel() == lse.numel() == 0
    assert set(boundary.driver.names()) <= DEVICE_QUERIES and boundary.compiles == []


def test_torch_seqlen_k_0_with_a_stream_fills_on_that_stream(torch_cpu, boundary):
    args = torch_qkv(kv_shape=(2, 0, 2, 64))
    fa4mlir.flash_attn_func(**args, stream=StreamLike(cuda_stream=21))
    streams = {a[-1] for n, a in boundary.driver.calls if n in MEMSETS}
    assert streams == {("stream", 21)} and boundary.compiles == []
