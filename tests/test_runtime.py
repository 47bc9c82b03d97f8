"""Deviceless tests of fa4mlir.runtime: artefact round-trip, tensor-likes and launch-argument checks.

The launch checks use a fake ``__cuda_array_interface__`` object: they run before any CUDA call,
so no GPU (nor driver) is needed.
"""

import collections
import ctypes
import struct
import threading

import numpy as np
import pytest

from fa4mlir import artifacts, runtime
from fa4mlir import driver as driver_mod
from fa4mlir.runtime import KernelArtifact, LoadedKernel, ParamSpec, TmaSpec


class FakeCudaArray:
    """A CUDA array as described by __cuda_array_interface__ v3; no memory behind it."""

    def __init__(self, shape, typestr="<f2", ptr=0x7F0000000000, strides=None):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
            "strides": strides, "version": 3,
        }


Q_SPEC = TmaSpec("f16", box=(64, 128), swizzle="128B")


def make_artifact(params=None, cluster=(1, 1, 1)):
    if params is None:
        params = (ParamSpec("q_desc", "tma", Q_SPEC), ParamSpec("o_gmem", "ptr"),
                  ParamSpec("seqlen", "i32"), ParamSpec("scale", "f32"))
    return KernelArtifact(name="attn_fwd", arch="sm_90a", cubin=b"\x7fELF-not-really", block=(384, 1, 1),
                          cluster=cluster, smem_bytes=200 * 1024, params=tuple(params), key="ab" * 32,
                          config={"head_dim": 64, "causal": False})


def good_args():
    return [FakeCudaArray((1024, 64)), 0x7F0000100000, 1024, 0.125]


def test_prepare_args_accepts_good_args_and_derives_tma_encoding():
    prepared = runtime.prepare_args(make_artifact(), good_args())
    enc = prepared.values[0]
    assert enc.global_dims == (64, 1024)  # shape reversed: innermost first
    assert enc.global_strides_bytes == (64 * 2,)  # dims 1.. in bytes
    assert enc.box == (64, 128) and enc.element_strides == (1, 1)
    assert prepared.values[1:] == (0x7F0000100000, 1024, 0.125)
    assert not prepared.uses_torch


def test_rank3_strides_are_reversed_in_bytes():
    spec = TmaSpec("bf16", box=(64, 64, 1))
    info = runtime.TensorInfo(0x1000, (8, 4096, 128), (128 * 4096, 128, 1), "bf16", "cuda")
    enc = runtime.tma_encoding(spec, info)
    assert enc.global_dims == (128, 4096, 8)
    assert enc.global_strides_bytes == (256, 256 * 4096)


@pytest.mark.parametrize("bad_index, bad_value, exc, words", [
    (0, FakeCudaArray((1024, 64), ptr=0x7F0000000008), ValueError, ["16-byte aligned", "0x7f0000000008"]),
    (0, FakeCudaArray((1024, 64), strides=(68 * 2, 2)), ValueError, ["stride of dim 0", "multiple of 16"]),
    (0, FakeCudaArray((1024, 64), strides=(128 * 2, 4)), ValueError, ["innermost stride 1"]),
    (0, FakeCudaArray((1024, 64), typestr="<f4"), TypeError, ["expected dtype f16", "got f32"]),
    (0, FakeCudaArray((16, 1024, 64)), ValueError, ["rank 2", "got rank 3"]),
    (0, np.zeros((1024, 64), np.float16), TypeError, ["expected a CUDA tensor", "cpu"]),
    (0, "not a tensor", TypeError, ["tensor-like", "str"]),
    (1, "not a pointer", TypeError, ["o_gmem", "int address"]),
    (2, 2**32, ValueError, ["seqlen", "32 bits"]),
    (2, 1.5, TypeError, ["seqlen", "integer"]),
    (3, "x", TypeError, ["scale", "float"]),
])
def test_bad_args_are_rejected_with_a_helpful_message(bad_index, bad_value, exc, words):
    args = good_args()
    args[bad_index] = bad_value
    with pytest.raises(exc) as info:
        runtime.prepare_args(make_artifact(), args)
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    assert f"arg #{bad_index}" in msg


@pytest.mark.parametrize("n", [3, 5])
def test_wrong_arg_count(n):
    args = (good_args() + [0])[:n]
    with pytest.raises(TypeError, match=r"takes 4 args \(q_desc: tma, o_gmem: ptr, seqlen: i32, scale: f32\), got"):
        runtime.prepare_args(make_artifact(), args)


@pytest.mark.parametrize("kwargs, words", [
    (dict(dtype="f16", box=(64, 257)), ["box[1] = 257", "1..256"]),
    (dict(dtype="f16", box=(0, 64)), ["box[0] = 0"]),
    (dict(dtype="f16", box=(128, 64), swizzle="128B"), ["256 bytes", "128B swizzle", "box[0] <= 64"]),
    (dict(dtype="f32", box=(16, 8), swizzle="32B"), ["box[0] <= 8"]),
    (dict(dtype="f16", box=(4, 8)), ["multiple of 16 bytes"]),
    (dict(dtype="f16", box=(8,) * 6), ["rank 1..5"]),
    (dict(dtype="f17", box=(64,)), ["dtype 'f17'"]),
    (dict(dtype="f16", box=(64,), swizzle="96B"), ["swizzle '96B'"]),
])
def test_bad_tma_specs(kwargs, words):
    with pytest.raises(ValueError) as info:
        TmaSpec(**kwargs)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_largest_legal_box_and_swizzle_are_accepted():
    assert TmaSpec("bf16", box=(64, 256), swizzle="128B").box_bytes == 64 * 256 * 2
    assert TmaSpec("u8", box=(32, 1, 1, 1, 256), swizzle="32B").elem_bytes == 1


class ExplodingDriver:
    """Stands in for cuda.bindings.driver: any attribute access means a CUDA call was attempted."""

    def __getattr__(self, name):
        raise AssertionError(f"CUDA call {name} attempted before argument validation finished")


@pytest.mark.parametrize("grid, args, exc", [
    ((8, 1, 1), good_args()[:3], TypeError),
    ((8, 1, 1), [FakeCudaArray((1024, 64), ptr=0x7F0000000004)] + good_args()[1:], ValueError),
    ((7, 1, 1), good_args(), ValueError),  # not a multiple of the cluster
    ((0, 1), good_args(), ValueError),
])
def test_launch_validates_before_any_cuda_call(monkeypatch, grid, args, exc):
    monkeypatch.setattr(driver_mod, "driver", lambda: ExplodingDriver())
    kernel = LoadedKernel(make_artifact(cluster=(2, 1, 1)), module=None, function=None)
    with pytest.raises(exc):
        kernel.launch(grid, args)


def test_launch_reaches_cuda_only_after_good_args(monkeypatch):
    monkeypatch.setattr(driver_mod, "driver", lambda: ExplodingDriver())
    kernel = LoadedKernel(make_artifact(cluster=(2, 1, 1)), module=None, function=None)
    with pytest.raises(AssertionError, match="CUDA call"):
        kernel.launch((8, 1, 1), good_args())


class RecordingDriver:
    """Stands in for cuda.bindings.driver at launch: records each launch with the parameter bytes
    its kernelParams array points at when the call is made."""

    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self, params):
        self.params, self.launches = params, []

    def CUstream(self, handle):
        return ("stream", handle)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, smem, stream, kernel_params, extra):
        pointers = (ctypes.c_uint64 * len(self.params)).from_address(kernel_params)
        data = [ctypes.string_at(ptr, 128 if p.kind == "tma" else 8) for ptr, p in zip(pointers, self.params)]
        self.launches.append(((gx, gy, gz), (bx, by, bz), smem, stream, list(pointers), data))
        return (self.CUresult.CUDA_SUCCESS,)


def fake_descriptor(enc, kernel=None):
    """128 bytes that say which encoding they came from: address, then the global dims."""
    return struct.pack("<Q4Q", enc.address, *(enc.global_dims + (0,) * 4)[:4]).ljust(128, b"\0")


@pytest.fixture
def recorded_launches(monkeypatch):
    encodes = []
    monkeypatch.setattr(runtime, "_TMA_CACHE", collections.OrderedDict())
    monkeypatch.setattr(runtime, "_encode_tma_uncached", lambda enc, kernel: encodes.append(enc) or fake_descriptor(enc))
    monkeypatch.setattr(runtime, "ensure_context", lambda: None)
    driver = RecordingDriver(make_artifact().params)
    monkeypatch.setattr(driver_mod, "driver", lambda: driver)
    return driver, encodes


def unpack(data):
    """(descriptor address, global dims), o_gmem, seqlen, scale from a launch's parameter bytes."""
    address, d0, d1 = struct.unpack_from("<QQQ", data[0])
    return ((address, (d0, d1)), struct.unpack_from("<Q", data[1])[0], struct.unpack_from("<i", data[2])[0],
            struct.unpack_from("<f", data[3])[0])


def test_param_block_aligns_descriptors_and_points_at_every_param():
    params = make_artifact(params=(ParamSpec("n", "i32"), ParamSpec("a", "tma", Q_SPEC), ParamSpec("x", "f32"),
                                   ParamSpec("b", "tma", Q_SPEC), ParamSpec("p", "ptr"))).params
    block = runtime.ParamBlock(params)
    pointers = list((ctypes.c_uint64 * 5).from_address(block.kernel_params))
    assert pointers[1] % 64 == 0 and pointers[3] % 64 == 0
    sizes = [8, 128, 8, 128, 8]
    spans = sorted(zip(pointers, sizes))
    assert all(a + n <= b for (a, n), (b, _) in zip(spans, spans[1:]))  # no two params overlap
    base = ctypes.addressof(block._view)
    assert all(base <= p and p + n <= base + len(block.data) for p, n in zip(pointers, sizes))
    block.put(0, "i32", -7)
    block.put(1, "tma", bytes(range(128)))
    block.put(2, "f32", 0.5)
    block.put(3, "tma", b"\xab" * 128)
    block.put(4, "ptr", 2**64 - 16)
    assert struct.unpack("<i", ctypes.string_at(pointers[0], 4)) == (-7,)
    assert ctypes.string_at(pointers[1], 128) == bytes(range(128))
    assert struct.unpack("<f", ctypes.string_at(pointers[2], 4)) == (0.5,)
    assert ctypes.string_at(pointers[3], 128) == b"\xab" * 128
    assert struct.unpack("<Q", ctypes.string_at(pointers[4], 8)) == (2**64 - 16,)


def test_launch_packs_every_arg_for_cuLaunchKernel(recorded_launches):
    driver, _ = recorded_launches
    LoadedKernel(make_artifact(), module=None, function="f").launch(8, good_args(), stream=5)
    (grid, block, smem, stream, _, data), = driver.launches
    assert (grid, block, smem, stream) == ((8, 1, 1), (384, 1, 1), 200 * 1024, ("stream", 5))
    assert unpack(data) == ((0x7F0000000000, (64, 1024)), 0x7F0000100000, 1024, 0.125)


def test_prepared_launch_swaps_in_new_addresses(recorded_launches):
    driver, encodes = recorded_launches
    prepared = LoadedKernel(make_artifact(), module=None, function="f").prepare(8, good_args())
    prepared.launch([0x7F0000000000, 0x7F0000100000], 3)
    prepared.launch([0x7F0000200000, 0x7F0000300000], 4)
    prepared.launch([0x7F0000000000, 0x7F0000400000], 4)
    got = [(launch[3], unpack(launch[5])) for launch in driver.launches]
    assert got == [(("stream", 3), ((0x7F0000000000, (64, 1024)), 0x7F0000100000, 1024, 0.125)),
                   (("stream", 4), ((0x7F0000200000, (64, 1024)), 0x7F0000300000, 1024, 0.125)),
                   (("stream", 4), ((0x7F0000000000, (64, 1024)), 0x7F0000400000, 1024, 0.125))]
    # prepare encoded nothing; each new address once (the third launch's Q descriptor was kept)
    assert [e.address for e in encodes] == [0x7F0000000000, 0x7F0000200000]
    with pytest.raises(ValueError, match="q_desc.*0x7f0000000008 is not 16-byte aligned"):
        prepared.launch([0x7F0000000008, 0], 0)
    with pytest.raises(ValueError, match="o_gmem.*outside"):
        prepared.launch([0x7F0000000000, -1], 0)
    with pytest.raises(TypeError, match="expected 2 addresses"):
        prepared.launch([0x7F0000000000], 0)
    assert len(driver.launches) == 3  # none of the bad calls launched


def test_prepared_launch_packs_per_thread():
    prepared = LoadedKernel(make_artifact(), module=None, function="f").prepare(8, good_args())
    blocks = [prepared._block()]
    worker = threading.Thread(target=lambda: blocks.append(prepared._block()))
    worker.start()
    worker.join()
    assert blocks[0] is prepared._block() and blocks[1] is not blocks[0]
    assert ctypes.string_at(blocks[1].kernel_params, 8) != ctypes.string_at(blocks[0].kernel_params, 8)


def test_artifact_json_round_trip():
    a = make_artifact(cluster=(2, 1, 1))
    meta = a.to_json()
    assert "cubin" not in meta and meta["cubin_sha256"] == a.cubin_sha256
    b = KernelArtifact.from_json(meta, a.cubin)
    assert b == a
    with pytest.raises(ValueError, match="sha256"):
        KernelArtifact.from_json(meta, a.cubin + b"!")


def test_dlpack_and_cai_parsing():
    x = np.zeros((4, 8, 64), np.float16)[:, ::2, :]
    info = runtime.tensor_info(x)
    assert (info.shape, info.strides, info.dtype, info.device) == ((4, 4, 64), (512, 128, 1), "f16", "cpu")
    assert info.ptr == x.ctypes.data
    cai = runtime.tensor_info(FakeCudaArray((3, 32), typestr="<i4", strides=(256, 4)))
    assert (cai.shape, cai.strides, cai.dtype, cai.device) == ((3, 32), (64, 1), "i32", "cuda")


def test_cuda_error_names_error_call_and_kernel():
    e = runtime.CudaError("CUDA_ERROR_INVALID_VALUE", "cuLaunchKernelEx", "attn_fwd")
    assert str(e) == "cuLaunchKernelEx failed with CUDA_ERROR_INVALID_VALUE for kernel 'attn_fwd'"


def test_runtime_imports_no_mlir_module():
    import ast
    import pathlib
    # the runtime's modules import each other and nothing of the compiler
    allowed = {".", ".artifacts", ".driver", ".tensors", ".env"}
    for module in (runtime, driver_mod, artifacts):
        imported = set()
        for node in ast.walk(ast.parse(pathlib.Path(module.__file__).read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(("." * node.level) + (node.module or ""))
        assert not any(m.split(".")[0] == "mlir" for m in imported), module
        assert {m for m in imported if m.startswith(".")} <= allowed, (module, imported)
