"""MLIR-free kernel runtime: artefacts, TMA descriptors, launch, bundles.

A program that only runs prebuilt kernels needs this module and ``cuda.bindings`` (plus
``fa4mlir.env`` and ``fa4mlir.tensors``, which reads tensor-likes); never MLIR. Every host-side
check on launch arguments runs before any CUDA call, so argument errors raise ValueError/TypeError
even on a machine without a GPU.

Note [TMA descriptor layout]: a descriptor is encoded from the tensor's shape reversed
(innermost dimension first), the byte strides of dims 1.. of that reversed order, the artefact's
box (innermost first) and element strides all 1. It is passed by value as the kernel's
``.param .align 64 .b8 name[128]``.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import json
import operator
import os
import struct
import sys
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from . import env, tensors

DTYPES = tensors.DTYPES  # name -> (bytes per element, CUtensorMapDataType member suffix)
# what the runtime reads of a tensor-like (fa4mlir.tensors), re-exported: runtime.TensorInfo, runtime.tensor_info
TensorInfo, tensor_info = tensors.TensorInfo, tensors.tensor_info
SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
L2_PROMOTIONS = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}
OOB_FILLS = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}
PARAM_KINDS = ("ptr", "i32", "i64", "f32", "tma")
TMA_DESC_BYTES = 128
TMA_DESC_ALIGN = 64
GMEM_ALIGN_BYTES = 16
MAX_TMA_RANK = 5
MAX_BOX_DIM = 256
DEFAULT_SMEM_LIMIT_BYTES = 48 * 1024


class CudaError(RuntimeError):
    """A CUDA driver call failed; names the CUDA error, the call and the kernel."""

    def __init__(self, error_name: str, call: str, kernel: str | None = None, detail: str = ""):
        self.error_name, self.call, self.kernel = error_name, call, kernel
        where = f" for kernel {kernel!r}" if kernel else ""
        super().__init__(f"{call} failed with {error_name}{where}{': ' + detail if detail else ''}")


# ----------------------------------------------------------------------------------------------
# Artefact
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TmaSpec:
    """What the kernel expects of one TMA descriptor; box is innermost dimension first."""

    dtype: str
    box: tuple[int, ...]
    swizzle: str = "none"
    oob_fill: str = "zero"
    l2_promotion: str = "none"

    def __post_init__(self) -> None:
        object.__setattr__(self, "box", tuple(int(b) for b in self.box))
        if self.dtype not in DTYPES:
            raise ValueError(f"TmaSpec dtype {self.dtype!r} is not known; expected one of {sorted(DTYPES)}")
        if not 1 <= len(self.box) <= MAX_TMA_RANK:
            raise ValueError(f"TmaSpec box {self.box} has rank {len(self.box)}; expected rank 1..{MAX_TMA_RANK}")
        for i, b in enumerate(self.box):
            if not 1 <= b <= MAX_BOX_DIM:
                raise ValueError(f"TmaSpec box[{i}] = {b}; expected 1..{MAX_BOX_DIM} (a TMA hardware "
                                 f"limit); split the tile into several TMA copies of at most {MAX_BOX_DIM}")
        for what, value, allowed in (("swizzle", self.swizzle, SWIZZLE_BYTES),
                                     ("oob_fill", self.oob_fill, OOB_FILLS),
                                     ("l2_promotion", self.l2_promotion, L2_PROMOTIONS)):
            if value not in allowed:
                raise ValueError(f"TmaSpec {what} {value!r}; expected one of {list(allowed)}")
        inner_bytes = self.box[0] * DTYPES[self.dtype][0]
        if inner_bytes % 16:
            raise ValueError(f"TmaSpec box[0] = {self.box[0]} {self.dtype} = {inner_bytes} bytes; the "
                             f"innermost box extent must be a multiple of 16 bytes")
        span = SWIZZLE_BYTES[self.swizzle]
        if span and inner_bytes > span:
            raise ValueError(f"TmaSpec box[0] = {self.box[0]} {self.dtype} = {inner_bytes} bytes exceeds the "
                             f"{self.swizzle} swizzle span; expected box[0] <= "
                             f"{span // DTYPES[self.dtype][0]}, or use a wider swizzle")

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype][0]

    @property
    def box_bytes(self) -> int:
        n = self.elem_bytes
        for b in self.box:
            n *= b
        return n


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter, in PTX order."""

    name: str
    kind: str
    tma: TmaSpec | None = None

    def __post_init__(self) -> None:
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"param {self.name!r}: kind {self.kind!r}; expected one of {PARAM_KINDS}")
        if (self.kind == "tma") != (self.tma is not None):
            raise ValueError(f"param {self.name!r}: a TmaSpec is required for kind 'tma' and only for it")


def _dim3(value: Any, what: str) -> tuple[int, int, int]:
    if isinstance(value, int):
        value = (value,)
    dims = tuple(operator.index(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ValueError(f"{what} {tuple(value)}: expected 1 to 3 positive integers")
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]


@dataclass(frozen=True)
class KernelArtifact:
    """A compiled kernel: cubin bytes plus everything needed to launch it without the compiler."""

    name: str
    arch: str
    cubin: bytes = field(repr=False)
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)
    smem_bytes: int = 0
    params: tuple[ParamSpec, ...] = ()
    resources: dict = field(default_factory=dict)
    key: str = ""
    config: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "block", _dim3(self.block, f"kernel {self.name!r} block"))
        object.__setattr__(self, "cluster", _dim3(self.cluster, f"kernel {self.name!r} cluster"))
        object.__setattr__(self, "params", tuple(self.params))
        if not isinstance(self.cubin, (bytes, bytearray)):
            raise TypeError(f"kernel {self.name!r}: cubin must be bytes, got {type(self.cubin).__name__}")
        if self.smem_bytes < 0:
            raise ValueError(f"kernel {self.name!r}: smem_bytes {self.smem_bytes} < 0")

    @property
    def cubin_sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()

    def to_json(self) -> dict:
        """Metadata as a JSON-able dict; the cubin is stored separately (its sha256 is kept)."""
        d = asdict(self)
        del d["cubin"]
        d["cubin_sha256"] = self.cubin_sha256
        return json.loads(json.dumps(d))

    @classmethod
    def from_json(cls, d: dict, cubin: bytes) -> "KernelArtifact":
        """Inverse of ``to_json``; checks the cubin against the recorded sha256."""
        want = d.get("cubin_sha256")
        if want is not None and hashlib.sha256(cubin).hexdigest() != want:
            raise ValueError(f"kernel {d.get('name')!r}: cubin sha256 does not match its metadata; "
                             f"the cubin file is corrupt or stale, rebuild the bundle/cache entry")
        params = tuple(ParamSpec(p["name"], p["kind"], TmaSpec(**p["tma"]) if p.get("tma") else None)
                       for p in d.get("params", ()))
        return cls(name=d["name"], arch=d["arch"], cubin=bytes(cubin), block=tuple(d["block"]),
                   cluster=tuple(d.get("cluster", (1, 1, 1))), smem_bytes=int(d.get("smem_bytes", 0)),
                   params=params, resources=dict(d.get("resources", {})), key=d.get("key", ""),
                   config=dict(d.get("config", {})))


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


def prepare_args(artifact: KernelArtifact, args: Sequence[Any]) -> PreparedArgs:
    """Match args to the kernel's ParamSpecs and check them all; makes no CUDA call."""
    params = artifact.params
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"kernel {artifact.name!r}: args must be a list/tuple, got {type(args).__name__}")
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
# CUDA driver: context, module load, descriptor encode, launch
# ----------------------------------------------------------------------------------------------

_DRIVER: list = []


def _driver():
    """cuda.bindings.driver, imported on first use (so that argument checks run without it)."""
    if not _DRIVER:
        from cuda.bindings import driver
        _DRIVER.append(driver)
    return _DRIVER[0]


def _check(result: Any, call: str, kernel: str | None = None) -> Any:
    """Unpack a cuda.bindings result tuple, raising CudaError on a non-success status."""
    driver = _driver()
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != driver.CUresult.CUDA_SUCCESS:
        name_err, name = driver.cuGetErrorName(err)
        text = name.decode() if name_err == driver.CUresult.CUDA_SUCCESS and name else str(err)
        raise CudaError(text, call, kernel)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


_ctx_lock = threading.Lock()
_ctx: Any = None


def _log(msg: str) -> None:
    if env.verbose():
        print(f"[fa4mlir.runtime] {msg}", file=sys.stderr)


def ensure_context() -> Any:
    """Retain the primary context (torch's current device if torch's CUDA is initialised, else
    device 0) on first use and make it current on this thread."""
    global _ctx
    driver = _driver()
    with _ctx_lock:
        if _ctx is None:
            _check(driver.cuInit(0), "cuInit")
            ordinal = 0
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                ordinal = torch.cuda.current_device()
            dev = _check(driver.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
            _ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _log(f"retained primary context of device {ordinal}")
    current = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is None or int(current) != int(_ctx):
        _check(driver.cuCtxSetCurrent(_ctx), "cuCtxSetCurrent")
    return _ctx


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
    driver = _driver()
    tmap = _check(driver.cuTensorMapEncodeTiled(
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


def torch_current_stream(device_index: int | None = None) -> int:
    """The handle of torch's current stream on a device (None: the current device). Through
    torch._C._cuda_getCurrentRawStream where torch has it (what Triton's launcher calls: a fraction
    of the microseconds torch.cuda.current_stream takes), else the public API."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return int(torch.cuda.current_stream(device_index).cuda_stream)
    return int(raw(torch.cuda.current_device() if device_index is None else device_index))


def resolve_stream(stream: Any, uses_torch: bool, device_index: int | None = None) -> int:
    """A launch's stream handle: ``stream`` (None: torch's current stream on ``device_index`` when
    the arguments are torch tensors, else the legacy default stream 0)."""
    if stream is None:
        return torch_current_stream(device_index) if uses_torch else 0
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    try:
        return int(stream)
    except TypeError:
        raise TypeError(f"stream: expected None, an int handle, a CUstream, a torch stream or a "
                        f"__cuda_stream__ object, got {type(stream).__name__}") from None


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
    driver = _driver()
    ensure_context()
    if art.cluster == (1, 1, 1):
        _check(driver.cuLaunchKernel(kernel.function, *grid3, *art.block, art.smem_bytes,
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
    _check(driver.cuLaunchKernelEx(config, kernel.function, block.kernel_params, 0), "cuLaunchKernelEx", art.name)


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

    def launch(self, grid: Any, args: Sequence[Any], stream: Any = None) -> None:
        """Launch on ``grid`` (1-3 ints, in blocks; a multiple of the cluster shape) with ``args`` in
        ParamSpec order. With stream None: torch's current stream if any arg is a torch tensor, else
        the default stream. All argument checks run before any CUDA call."""
        grid3 = _grid3(self.artifact, grid)
        prepared = prepare_args(self.artifact, args)
        handle = resolve_stream(stream, prepared.uses_torch)
        _launch(self, grid3, _pack(self.artifact, prepared), handle)

    def prepare(self, grid: Any, args: Sequence[Any]) -> "PreparedLaunch":
        """Check ``grid`` and ``args`` as launch does and keep them packed, to be launched again
        and again with other tensor addresses (PreparedLaunch.launch)."""
        return PreparedLaunch(self, _grid3(self.artifact, grid), prepare_args(self.artifact, args))

    def unload(self) -> None:
        """Unload the module (the kernel can no longer be launched)."""
        if self.module is not None:
            _check(_driver().cuModuleUnload(self.module), "cuModuleUnload", self.artifact.name)
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


def load(artifact: KernelArtifact) -> LoadedKernel:
    """Load the artefact's cubin into the primary context and look up its entry function."""
    driver = _driver()
    ensure_context()
    name = artifact.name
    image = ctypes.create_string_buffer(artifact.cubin, len(artifact.cubin) + 1)  # NUL ends PTX text
    module = _check(driver.cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData", name)
    function = _check(driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction", name)
    if artifact.smem_bytes > DEFAULT_SMEM_LIMIT_BYTES:
        _check(driver.cuFuncSetAttribute(
            function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            artifact.smem_bytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", name)
    _log(f"loaded {name} ({artifact.arch}, {len(artifact.cubin)} B cubin, smem {artifact.smem_bytes} B)")
    return LoadedKernel(artifact, module, function)


# ----------------------------------------------------------------------------------------------
# Bundles: a folder of cubins + manifest.json, loadable without the compiler
# ----------------------------------------------------------------------------------------------

BUNDLE_FORMAT = "fa4mlir-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"


def _cubin_filename(a: KernelArtifact) -> str:
    return f"{a.name}-{(a.key or a.cubin_sha256)[:16]}.cubin"


def atomic_write(path: Path, data: bytes) -> None:
    """Write data to path via a temp file in the same folder and os.replace (no partial file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bundle(directory: str | os.PathLike, artifacts: Sequence[KernelArtifact]) -> Path:
    """Write ``manifest.json`` plus one ``<name>-<key[:16]>.cubin`` per kernel; returns the folder."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    kernels, seen = [], set()
    for a in artifacts:
        fname = _cubin_filename(a)
        if fname in seen:
            raise ValueError(f"two kernels in one bundle map to {fname}; give them distinct keys")
        seen.add(fname)
        atomic_write(root / fname, a.cubin)
        kernels.append({**a.to_json(), "cubin": fname})
    manifest = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "kernels": kernels}
    atomic_write(root / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return root


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v))


class Bundle:
    """A bundle opened from disk; kernels are looked up by name and config values."""

    def __init__(self, root: Path, entries: list[dict]):
        self.root, self.entries = root, entries

    @classmethod
    def open(cls, directory: str | os.PathLike | None = None) -> "Bundle":
        """Open a bundle folder (default: FA4MLIR_BUNDLE), checking its format and version."""
        root = Path(directory) if directory is not None else env.bundle_dir()
        if root is None:
            raise ValueError("no bundle directory given and FA4MLIR_BUNDLE is unset; pass a path or "
                             "set FA4MLIR_BUNDLE to a folder written by write_bundle")
        path = root / MANIFEST
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: expected a bundle folder written by "
                                    f"fa4mlir write_bundle; build the bundle first")
        try:
            manifest = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}); rebuild the bundle") from None
        if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
            got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
            raise ValueError(f"{path}: expected format {BUNDLE_FORMAT!r}, got {got!r}; this is not an "
                             f"fa4mlir bundle")
        if manifest.get("version") != BUNDLE_VERSION:
            raise ValueError(f"{path}: bundle version {manifest.get('version')!r}, this runtime reads "
                             f"version {BUNDLE_VERSION}; rebuild the bundle with a matching fa4mlir")
        return cls(root, list(manifest.get("kernels", [])))

    def names(self) -> list[str]:
        """Kernel entry names in the bundle, sorted, without duplicates."""
        return sorted({e["name"] for e in self.entries})

    def artifacts(self) -> list[KernelArtifact]:
        return [self._artifact(e) for e in self.entries]

    def _artifact(self, e: dict) -> KernelArtifact:
        return KernelArtifact.from_json(e, (self.root / e["cubin"]).read_bytes())

    def find(self, name: str | None = None, arch: str | None = None, **config_match: Any) -> KernelArtifact:
        """The one kernel with this name/arch whose config holds every ``config_match`` item."""
        want = {k: _jsonable(v) for k, v in config_match.items()}
        hits = [e for e in self.entries
                if (name is None or e["name"] == name) and (arch is None or e["arch"] == arch)
                and all(k in e.get("config", {}) and e["config"][k] == v for k, v in want.items())]
        query = ", ".join([f"name={name!r}"] * (name is not None) + [f"arch={arch!r}"] * (arch is not None)
                          + [f"{k}={v!r}" for k, v in want.items()])
        if not hits:
            have = "; ".join(f"{e['name']} ({e['arch']}) {e.get('config', {})}" for e in self.entries)
            raise LookupError(f"no kernel in bundle {self.root} matches {query or 'anything'}; "
                              f"the bundle holds: {have or 'nothing'}; rebuild it with this config")
        if len(hits) > 1:
            keys = ", ".join(e.get("key", "")[:16] for e in hits)
            raise LookupError(f"{len(hits)} kernels in bundle {self.root} match {query} (keys {keys}); "
                              f"add config items to pick one")
        return self._artifact(hits[0])

    def load(self, name: str | None = None, arch: str | None = None, **config_match: Any) -> LoadedKernel:
        """``load(self.find(...))``."""
        return load(self.find(name, arch, **config_match))
