"""MLIR-free kernel runtime: argument checks, TMA descriptors, launch.

A program that only runs prebuilt kernels needs this module and ``cuda.bindings`` (plus
``fa4mlir.env``, ``fa4mlir.tensors`` (tensor-likes), ``fa4mlir.artifacts`` (artefacts, bundles) and
``fa4mlir.driver`` (context, devices, streams)); never MLIR. Every host-side check on launch
arguments runs before any CUDA call, so argument errors raise ValueError/TypeError even on a
machine without a GPU. Arguments are given in ParamSpec order or by parameter name.

Note [TMA descriptor layout]: a descriptor is encoded from the tensor's shape reversed
(innermost dimension first), the byte strides of dims 1.. of that reversed order, the artefact's
box (innermost first) and element strides all 1. It is passed by value as the kernel's
``.param .align 64 .b8 name[128]``.
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import operator
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Sequence

from . import driver as _cuda
from . import tensors
from .artifacts import (L2_PROMOTIONS, MAX_TMA_RANK, OOB_FILLS, BUNDLE_FORMAT, BUNDLE_VERSION, MANIFEST, Bundle,
                        KernelArtifact, ParamSpec, TmaSpec, _dim3, atomic_write, write_bundle)
from .driver import CudaError, device_info, ensure_context, resolve_stream, torch_current_stream

DTYPES = tensors.DTYPES  # name -> (bytes per element, CUtensorMapDataType member suffix)
# what the runtime reads of a tensor-like (fa4mlir.tensors), re-exported: runtime.TensorInfo, runtime.tensor_info
TensorInfo, tensor_info = tensors.TensorInfo, tensors.tensor_info
TMA_DESC_BYTES = 128
TMA_DESC_ALIGN = 64
GMEM_ALIGN_BYTES = 16
DEFAULT_SMEM_LIMIT_BYTES = 48 * 1024
_log = _cuda.log


# ----------------------------------------------------------------------------------------------
# Host-side argument checks (no CUDA calls)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TmaEncoding:
    """The arguments of cuTensorMapEncodeTiled for one tensor, innermost dimension first."""

    dtype: str
    address: int
    global_dims: tuple[int, ...]
    global_strides_bytes: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    l2_promotion: str
    oob_fill: str


def _where(kernel: str, index: int, p: ParamSpec) -> str:
    return f"kernel {kernel!r} arg #{index} ({p.name!r}, {p.kind})"


def _cuda_tensor(x: Any, where: str) -> TensorInfo:
    try:
        info = tensor_info(x)
    except TypeError as e:
        raise TypeError(f"{where}: {e}") from None
    if info.device not in ("cuda", "cuda_managed"):
        raise TypeError(f"{where}: expected a CUDA tensor, got one on device {info.device!r}; "
                        f"move it to the GPU first (e.g. x.cuda())")
    return info


def tma_encoding(spec: TmaSpec, info: TensorInfo, where: str = "tma arg") -> TmaEncoding:
    """Check a tensor against a TmaSpec and derive the encode arguments (see Note [TMA descriptor layout])."""
    elem = spec.elem_bytes
    rank = len(info.shape)
    if info.dtype != spec.dtype:
        raise TypeError(f"{where}: expected dtype {spec.dtype}, got {info.dtype}; "
                        f"convert the tensor (e.g. x.to(torch.{_torch_name(spec.dtype)}))")
    if not 1 <= rank <= MAX_TMA_RANK:
        raise ValueError(f"{where}: expected a tensor of rank 1..{MAX_TMA_RANK}, got rank {rank} "
                         f"(shape {info.shape}); reshape it")
    if rank != len(spec.box):
        raise ValueError(f"{where}: expected rank {len(spec.box)} to match TMA box {spec.box}, got rank "
                         f"{rank} (shape {info.shape}); reshape the tensor to rank {len(spec.box)}")
    if info.ptr % GMEM_ALIGN_BYTES:
        raise ValueError(f"{where}: base address {info.ptr:#x} is not {GMEM_ALIGN_BYTES}-byte aligned "
                         f"(offset {info.ptr % GMEM_ALIGN_BYTES}); expected a {GMEM_ALIGN_BYTES}-byte "
                         f"aligned start: slice at an aligned offset or pass x.clone()")
    if any(n < 1 or n > 2**32 for n in info.shape):
        raise ValueError(f"{where}: shape {info.shape} has a dimension outside 1..2^32; TMA needs "
                         f"non-empty dimensions")
    if info.strides[-1] != 1 and info.shape[-1] != 1:
        raise ValueError(f"{where}: expected innermost stride 1 element, got strides {info.strides} "
                         f"(elements); pass x.contiguous()")
    strides = list(info.strides)
    for d in reversed(range(rank - 1)):
        if info.shape[d] == 1:  # a size-1 dim's stride is arbitrary (torch); any valid one will do
            strides[d] = strides[d + 1] * info.shape[d + 1]
    for d in range(rank - 1):
        stride_bytes = strides[d] * elem
        if stride_bytes % GMEM_ALIGN_BYTES or not 0 < stride_bytes < 2**40:
            raise ValueError(f"{where}: stride of dim {d} is {strides[d]} elements = {stride_bytes} "
                             f"bytes; expected a positive multiple of {GMEM_ALIGN_BYTES} bytes "
                             f"(below 2^40); pad the inner dimension or pass x.contiguous() with a "
                             f"16-byte-multiple row")
    return TmaEncoding(
        dtype=spec.dtype, address=info.ptr,
        global_dims=tuple(reversed(info.shape)),
        global_strides_bytes=tuple(strides[d] * elem for d in reversed(range(rank - 1))),
        box=spec.box, element_strides=(1,) * rank,
        swizzle=spec.swizzle, l2_promotion=spec.l2_promotion, oob_fill=spec.oob_fill)


def _torch_name(dtype: str) -> str:
    return {v: k for k, v in tensors.TORCH_DTYPES.items()}.get(dtype, dtype)


@dataclass(frozen=True)
class PreparedArgs:
    """Checked launch arguments: a value per param (int, float or TmaEncoding) and whether any was torch."""

    values: tuple[Any, ...]
    uses_torch: bool


def ordered_args(artifact: KernelArtifact, args: Mapping[str, Any] | Sequence[Any]) -> Sequence[Any]:
    """``args`` in ParamSpec order: a sequence as given, a mapping by parameter name (every name
    once, no other)."""
    if not isinstance(args, Mapping):
        return args
    names = [p.name for p in artifact.params]
    missing = [n for n in names if n not in args]
    extra = sorted(set(args) - set(names))
    if missing or extra:
        raise TypeError(f"kernel {artifact.name!r} takes parameters {names}; missing {missing}, unknown {extra}: "
                        f"pass one value per parameter name")
    return [args[n] for n in names]


def prepare_args(artifact: KernelArtifact, args: Mapping[str, Any] | Sequence[Any]) -> PreparedArgs:
    """Match args (in order, or by name) to the kernel's ParamSpecs and check them all; makes no
    CUDA call."""
    params = artifact.params
    args = ordered_args(artifact, args)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"kernel {artifact.name!r}: args must be a list/tuple or a dict by name, got "
                        f"{type(args).__name__}")
    if len(args) != len(params):
        sig = ", ".join(f"{p.name}: {p.kind}" for p in params)
        raise TypeError(f"kernel {artifact.name!r} takes {len(params)} args ({sig}), got {len(args)}; "
                        f"pass one value per parameter in this order")
    values, uses_torch = [], False
    for i, (p, a) in enumerate(zip(params, args)):
        where = _where(artifact.name, i, p)
        if p.kind == "tma":
            info = _cuda_tensor(a, where)
            values.append(tma_encoding(p.tma, info, where))  # type: ignore[arg-type]
            uses_torch |= info.is_torch
        elif p.kind == "ptr":
            if tensors.is_tensor_like(a):
                info = _cuda_tensor(a, where)
                values.append(info.ptr)
                uses_torch |= info.is_torch
            else:
                try:
                    addr = operator.index(a)
                except TypeError:
                    raise TypeError(f"{where}: expected a CUDA tensor-like or an int address, got "
                                    f"{type(a).__name__}") from None
                if not 0 <= addr < 2**64:
                    raise ValueError(f"{where}: address {addr} is outside 0..2^64-1")
                values.append(addr)
        elif p.kind in ("i32", "i64"):
            bits = 32 if p.kind == "i32" else 64
            try:
                v = operator.index(a)
            except TypeError:
                raise TypeError(f"{where}: expected an integer, got {type(a).__name__}") from None
            if not -(2 ** (bits - 1)) <= v < 2**bits:
                raise ValueError(f"{where}: {v} does not fit in {bits} bits")
            values.append(v)
        else:
            if not isinstance(a, (int, float)) and not hasattr(a, "__float__"):
                raise TypeError(f"{where}: expected a float, got {type(a).__name__}")
            values.append(float(a))
    return PreparedArgs(tuple(values), uses_torch)


# ----------------------------------------------------------------------------------------------
# CUDA driver: descriptor encode, module load, launch
# ----------------------------------------------------------------------------------------------

def _enum(enum_type: Any, prefix: str, suffix: str) -> Any:
    return getattr(enum_type, f"{prefix}{suffix}")


def encode_tma(enc: TmaEncoding, kernel: str | None = None) -> bytes:
    """The 128-byte descriptor for a TmaEncoding, via cuTensorMapEncodeTiled. A descriptor is a pure
    function of its encoding (address, dims, strides, box, modes), so the last TMA_CACHE_SIZE are
    kept: repeated launches on the same tensors skip the driver call (tens of microseconds each)."""
    hit = _TMA_CACHE.get(enc)
    if hit is not None:
        _TMA_CACHE.move_to_end(enc)
        return hit
    desc = _encode_tma_uncached(enc, kernel)
    _TMA_CACHE[enc] = desc
    if len(_TMA_CACHE) > TMA_CACHE_SIZE:
        _TMA_CACHE.popitem(last=False)
    return desc


TMA_CACHE_SIZE = 512
_TMA_CACHE: "collections.OrderedDict[TmaEncoding, bytes]" = collections.OrderedDict()


def _encode_tma_uncached(enc: TmaEncoding, kernel: str | None) -> bytes:
    driver = _cuda.driver()
    tmap = _cuda.check(driver.cuTensorMapEncodeTiled(
        _enum(driver.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_", DTYPES[enc.dtype][1]),
        len(enc.global_dims), enc.address,
        [driver.cuuint64_t(n) for n in enc.global_dims],
        [driver.cuuint64_t(s) for s in enc.global_strides_bytes],
        [driver.cuuint32_t(b) for b in enc.box],
        [driver.cuuint32_t(e) for e in enc.element_strides],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        _enum(driver.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_", enc.swizzle.upper()),
        _enum(driver.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_", L2_PROMOTIONS[enc.l2_promotion]),
        _enum(driver.CUtensorMapFloatOOBfill, "CU_TENSOR_MAP_FLOAT_OOB_FILL_", OOB_FILLS[enc.oob_fill]),
    ), "cuTensorMapEncodeTiled", kernel)
    return ctypes.string_at(tmap.getPtr(), TMA_DESC_BYTES)


class ParamBlock:
    """Host memory for one launch's parameters: each parameter's bytes at its offset (TMA
    descriptors 64-byte aligned, everything else in an 8-byte slot) and, after them, the void*[]
    array that cuLaunchKernel reads, already pointing at them. One bytearray, so that filling it
    is slice assignment and struct.pack_into, with no ctypes object per parameter."""

    def __init__(self, params: Sequence[ParamSpec]):
        offsets, size = [], 0
        for p in params:
            align, nbytes = (TMA_DESC_ALIGN, TMA_DESC_BYTES) if p.kind == "tma" else (8, 8)
            size = -(-size // align) * align
            offsets.append(size)
            size += nbytes
        array_at = -(-size // 8) * 8
        self.data = bytearray(array_at + 8 * max(len(params), 1) + TMA_DESC_ALIGN)
        self._view = (ctypes.c_char * len(self.data)).from_buffer(self.data)  # pins the buffer
        address = ctypes.addressof(self._view)
        shift = -address % TMA_DESC_ALIGN
        self.offsets = tuple(shift + o for o in offsets)
        if params:
            struct.pack_into(f"<{len(params)}Q", self.data, shift + array_at,
                             *(address + o for o in self.offsets))
        self.kernel_params = address + shift + array_at

    def put(self, index: int, kind: str, value: Any) -> None:
        """Write one parameter: a descriptor's 128 bytes (tma) or a scalar of its kind."""
        at = self.offsets[index]
        if kind == "tma":
            self.data[at:at + TMA_DESC_BYTES] = value
        elif kind == "f32":
            struct.pack_into("<f", self.data, at, value)
        else:
            fmt = {"ptr": "<Q", "i32": "<i" if value < 2**31 else "<I",
                   "i64": "<q" if value < 2**63 else "<Q"}[kind]
            struct.pack_into(fmt, self.data, at, value)


def _pack(artifact: KernelArtifact, prepared: PreparedArgs) -> ParamBlock:
    """A ParamBlock holding every param value (TMA encodings as their descriptors)."""
    block = ParamBlock(artifact.params)
    for i, (p, v) in enumerate(zip(artifact.params, prepared.values)):
        block.put(i, p.kind, encode_tma(v, artifact.name) if p.kind == "tma" else v)
    return block


def _launch(kernel: "LoadedKernel", grid3: tuple[int, int, int], block: ParamBlock, stream: int) -> None:
    """cuLaunchKernel (cuLaunchKernelEx with a cluster shape) of a filled ParamBlock."""
    art = kernel.artifact
    driver = _cuda.driver()
    ensure_context()
    if art.cluster == (1, 1, 1):
        _cuda.check(driver.cuLaunchKernel(kernel.function, *grid3, *art.block, art.smem_bytes,
                                     driver.CUstream(stream), block.kernel_params, 0),
               "cuLaunchKernel", art.name)
        return
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid3
    config.blockDimX, config.blockDimY, config.blockDimZ = art.block
    config.sharedMemBytes = art.smem_bytes
    config.hStream = driver.CUstream(stream)
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = art.cluster
    config.attrs = [attr]
    config.numAttrs = 1
    _cuda.check(driver.cuLaunchKernelEx(config, kernel.function, block.kernel_params, 0), "cuLaunchKernelEx", art.name)


def _grid3(art: KernelArtifact, grid: Any) -> tuple[int, int, int]:
    grid3 = _dim3(grid, f"kernel {art.name!r} grid")
    if any(g % c for g, c in zip(grid3, art.cluster)):
        raise ValueError(f"kernel {art.name!r}: grid {grid3} is not a multiple of cluster "
                         f"{art.cluster}; round the grid up to whole clusters")
    return grid3


class LoadedKernel:
    """A kernel loaded into the current context; ``launch`` checks args, then launches."""

    def __init__(self, artifact: KernelArtifact, module: Any, function: Any):
        self.artifact, self.module, self.function = artifact, module, function

    def launch(self, grid: Any, args: Mapping[str, Any] | Sequence[Any], stream: Any = None) -> None:
        """Launch on ``grid`` (1-3 ints, in blocks; a multiple of the cluster shape) with ``args`` in
        ParamSpec order (or a dict by parameter name). With stream None: torch's current stream if any arg is a torch tensor, else
        the default stream. All argument checks run before any CUDA call."""
        grid3 = _grid3(self.artifact, grid)
        prepared = prepare_args(self.artifact, args)
        handle = resolve_stream(stream, prepared.uses_torch)
        _launch(self, grid3, _pack(self.artifact, prepared), handle)

    def prepare(self, grid: Any, args: Mapping[str, Any] | Sequence[Any]) -> "PreparedLaunch":
        """Check ``grid`` and ``args`` as launch does and keep them packed, to be launched again
        and again with other tensor addresses (PreparedLaunch.launch)."""
        return PreparedLaunch(self, _grid3(self.artifact, grid), prepare_args(self.artifact, args))

    def unload(self) -> None:
        """Unload the module (the kernel can no longer be launched)."""
        if self.module is not None:
            _cuda.check(_cuda.driver().cuModuleUnload(self.module), "cuModuleUnload", self.artifact.name)
            self.module = self.function = None


class PreparedLaunch:
    """A launch whose grid and arguments were checked and packed once (LoadedKernel.prepare):
    ``launch(addresses, stream)`` runs it again with new addresses for its tensor parameters, every
    TMA and ptr one in order; everything else (shapes, strides, dtypes, scalars) is as prepared.
    That costs a few dictionary lookups, a write per address and one driver call, where launch
    checks and packs every argument. The caller keeps what it prepares per tensor signature
    (flash_attn_func does): a new address is the one thing launch checks (TMA bases 16-byte
    aligned). Descriptors of the last DESCRIPTORS_KEPT addresses per parameter are kept; each
    thread packs into a ParamBlock of its own."""

    DESCRIPTORS_KEPT = 16

    def __init__(self, kernel: LoadedKernel, grid3: tuple[int, int, int], prepared: PreparedArgs):
        art = kernel.artifact
        self.kernel, self.grid = kernel, grid3
        self._values = prepared.values
        self._addressed = tuple((i, p.kind) for i, p in enumerate(art.params) if p.kind in ("tma", "ptr"))
        # the TMA encodings with the address left out: a new address is all that changes
        self._encodings = {i: replace(prepared.values[i], address=0)
                           for i, kind in self._addressed if kind == "tma"}
        self._descriptors: dict[tuple[int, int], bytes] = {}
        self._local = threading.local()

    def _block(self) -> ParamBlock:
        block = getattr(self._local, "block", None)
        if block is None:
            params = self.kernel.artifact.params
            block = ParamBlock(params)
            for i, (p, v) in enumerate(zip(params, self._values)):
                if p.kind not in ("tma", "ptr"):
                    block.put(i, p.kind, v)
            self._local.block = block
        return block

    def _descriptor(self, index: int, address: int) -> bytes:
        desc = self._descriptors.get((index, address))
        if desc is None:
            desc = encode_tma(replace(self._encodings[index], address=address), self.kernel.artifact.name)
            if len(self._descriptors) >= self.DESCRIPTORS_KEPT * len(self._encodings):
                self._descriptors.clear()
            self._descriptors[(index, address)] = desc
        return desc

    def launch(self, addresses: Sequence[int], stream: int) -> None:
        """Launch with ``addresses`` (ints, one per TMA/ptr parameter in order) on stream handle
        ``stream`` (an int; 0 is the legacy default stream)."""
        art = self.kernel.artifact
        if len(addresses) != len(self._addressed):
            raise TypeError(f"kernel {art.name!r}: expected {len(self._addressed)} addresses (one per "
                            f"tma/ptr parameter), got {len(addresses)}")
        block = self._block()
        for (i, kind), address in zip(self._addressed, addresses):
            if kind == "tma":
                if address % GMEM_ALIGN_BYTES:
                    raise ValueError(f"{_where(art.name, i, art.params[i])}: base address {address:#x} is "
                                     f"not {GMEM_ALIGN_BYTES}-byte aligned")
                block.put(i, kind, self._descriptor(i, address))
            else:
                if not 0 <= address < 2**64:
                    raise ValueError(f"{_where(art.name, i, art.params[i])}: address {address} is outside "
                                     f"0..2^64-1")
                block.put(i, kind, address)
        _launch(self.kernel, self.grid, block, stream)


def fill(info: TensorInfo, bits: int, stream: int) -> None:
    """Set every element of a CUDA tensor to the value whose bit pattern is ``bits`` (0 is zero in
    every dtype; 0x7F800000 is float32 +inf) on stream handle ``stream``, with the driver's 2-D
    memsets and no kernel. Size-1 dims are dropped and dims contiguous with the next inner one
    merged, so a dense tensor (of any dim order) takes one memset; otherwise its innermost run is
    a row, the next dim the rows, and each index of the dims outside them one memset. Elements of 1,
    2 or 4 bytes."""
    elem = DTYPES[info.dtype][0]
    if elem not in (1, 2, 4):
        raise ValueError(f"fill: {info.dtype} elements are {elem} bytes; the driver's memsets set 1, 2 or 4")
    if not all(info.shape):
        return
    merged: list[tuple[int, int]] = []   # (stride, size), outer to inner
    for stride, size in sorted(((s, n) for s, n in zip(info.strides, info.shape) if n > 1), reverse=True):
        if merged and merged[-1][0] == stride * size:
            merged[-1] = (stride, merged[-1][1] * size)
        else:
            merged.append((stride, size))
    width = merged.pop()[1] if merged and merged[-1][0] == 1 else 1   # elements per row
    if merged:
        row_stride, height = merged.pop()
        pitch = row_stride * elem
    else:
        pitch, height = width * elem, 1
    driver = _cuda.driver()
    ensure_context()
    call = f"cuMemsetD2D{8 * elem}Async"
    memset = getattr(driver, call)
    for index in itertools.product(*(range(n) for _, n in merged)):
        address = info.ptr + elem * sum(i * s for i, (s, _) in zip(index, merged))
        _cuda.check(memset(address, pitch, bits, width, height, driver.CUstream(stream)), call)


def load(artifact: KernelArtifact) -> LoadedKernel:
    """Load the artefact's cubin into the primary context and look up its entry function."""
    driver = _cuda.driver()
    ensure_context()
    name = artifact.name
    image = ctypes.create_string_buffer(artifact.cubin, len(artifact.cubin) + 1)  # NUL ends PTX text
    module = _cuda.check(driver.cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData", name)
    function = _cuda.check(driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction", name)
    if artifact.smem_bytes > DEFAULT_SMEM_LIMIT_BYTES:
        _cuda.check(driver.cuFuncSetAttribute(
            function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            artifact.smem_bytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", name)
    _log(f"loaded {name} ({artifact.arch}, {len(artifact.cubin)} B cubin, smem {artifact.smem_bytes} B)")
    return LoadedKernel(artifact, module, function)


__all__ = ["KernelArtifact", "ParamSpec", "TmaSpec", "Bundle", "write_bundle", "atomic_write", "TensorInfo",
           "tensor_info", "DTYPES", "TmaEncoding", "tma_encoding", "prepare_args", "ordered_args", "encode_tma",
           "LoadedKernel", "PreparedLaunch", "ParamBlock", "load", "fill", "CudaError", "ensure_context", "device_info",
           "resolve_stream", "torch_current_stream", "GMEM_ALIGN_BYTES", "BUNDLE_FORMAT", "BUNDLE_VERSION",
           "MANIFEST", "L2_PROMOTIONS", "OOB_FILLS", "MAX_TMA_RANK"]
