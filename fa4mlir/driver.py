"""The CUDA driver boundary of the runtime (MLIR-free): the driver module, result checks, the one
primary context per process, device queries and stream handles.

Everything else reaches CUDA through this module (``driver()``, ``check``, ``ensure_context``,
``device_info``), so a test double of the CUDA boundary replaces its functions and nothing else.
"""
from __future__ import annotations

import operator
import sys
import threading
from dataclasses import dataclass
from typing import Any

from . import env


class CudaError(RuntimeError):
    """A CUDA driver call failed; names the CUDA error, the call and the kernel."""

    def __init__(self, error_name: str, call: str, kernel: str | None = None, detail: str = ""):
        self.error_name, self.call, self.kernel = error_name, call, kernel
        where = f" for kernel {kernel!r}" if kernel else ""
        super().__init__(f"{call} failed with {error_name}{where}{': ' + detail if detail else ''}")


_DRIVER: list = []


def driver():
    """cuda.bindings.driver, imported on first use (so that argument checks run without it)."""
    if not _DRIVER:
        from cuda.bindings import driver as cuda_driver
        _DRIVER.append(cuda_driver)
    return _DRIVER[0]


def check(result: Any, call: str, kernel: str | None = None) -> Any:
    """Unpack a cuda.bindings result tuple, raising CudaError on a non-success status."""
    drv = driver()
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != drv.CUresult.CUDA_SUCCESS:
        name_err, name = drv.cuGetErrorName(err)
        text = name.decode() if name_err == drv.CUresult.CUDA_SUCCESS and name else str(err)
        raise CudaError(text, call, kernel)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def log(msg: str) -> None:
    if env.verbose():
        print(f"[fa4mlir.runtime] {msg}", file=sys.stderr)


_ctx_lock = threading.Lock()
_ctx: Any = None


def ensure_context() -> Any:
    """Retain the primary context (torch's current device if torch's CUDA is initialised, else
    device 0) on first use and make it current on this thread."""
    global _ctx
    drv = driver()
    with _ctx_lock:
        if _ctx is None:
            check(drv.cuInit(0), "cuInit")
            ordinal = 0
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                ordinal = torch.cuda.current_device()
            dev = check(drv.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
            _ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            log(f"retained primary context of device {ordinal}")
    current = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is None or int(current) != int(_ctx):
        check(drv.cuCtxSetCurrent(_ctx), "cuCtxSetCurrent")
    return _ctx


@dataclass(frozen=True)
class DeviceInfo:
    """What kernel selection and launch planning read of the context's device."""

    ordinal: int
    capability: tuple[int, int]
    num_sms: int
    l2_bytes: int

    @property
    def arch(self) -> str:
        """The kernel arch this device runs: sm_90a, sm_100a, ... (the 'a' features are per major)."""
        return f"sm_{self.capability[0]}{self.capability[1]}a"


_DEVICE: list = []


def device_info() -> DeviceInfo:
    """The runtime context's device (queried once per process: the runtime binds one context)."""
    if _DEVICE:
        return _DEVICE[0]
    drv = driver()
    ensure_context()
    dev = check(drv.cuCtxGetDevice(), "cuCtxGetDevice")
    attr = drv.CUdevice_attribute

    def get(a):
        return int(check(drv.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute"))

    info = DeviceInfo(int(dev), (get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                 get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
                      get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), get(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE))
    _DEVICE.append(info)
    return info


def torch_current_stream(device_index: int | None = None) -> int:
    """The handle of torch's current stream on a device (None: the current device). Through
    torch._C._cuda_getCurrentRawStream where torch has it (what Triton's launcher calls: a fraction
    of the microseconds torch.cuda.current_stream takes), else the public API."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return int(torch.cuda.current_stream(device_index).cuda_stream)
    return int(raw(torch.cuda.current_device() if device_index is None else device_index))


STREAM_KINDS = ("None, an int handle (0: the legacy default stream), a cuda.bindings CUstream, a torch "
                "stream or a __cuda_stream__ object")


def stream_handle(stream: Any) -> int | None:
    """The handle ``stream`` names, checked without a CUDA call (None stays None): an int in
    0..2^64-1 (0 the legacy default stream, 1 CU_STREAM_LEGACY, 2 CU_STREAM_PER_THREAD, else a
    CUstream's address), a cuda.bindings CUstream, a torch stream (``cuda_stream``) or an object
    with ``__cuda_stream__()`` -> (version, handle). TypeError for anything else (a bool, a float,
    a string), ValueError for an int outside that range."""
    if stream is None:
        return None
    what = f"{type(stream).__name__} {stream!r}"
    if isinstance(stream, bool):
        raise TypeError(f"stream: expected {STREAM_KINDS}, got the bool {stream!r}")
    if hasattr(stream, "__cuda_stream__"):
        got = stream.__cuda_stream__()
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError(f"stream: __cuda_stream__() must return (version, handle), got {got!r}")
        handle, what = got[1], f"{type(stream).__name__}.__cuda_stream__() handle {got[1]!r}"
    elif hasattr(stream, "cuda_stream"):
        handle, what = stream.cuda_stream, f"{type(stream).__name__}.cuda_stream {stream.cuda_stream!r}"
    elif type(stream).__name__ == "CUstream":  # cuda.bindings.driver.CUstream: int() is its handle
        handle = int(stream)
    else:
        handle = stream
    if isinstance(handle, bool):
        raise TypeError(f"stream: expected {STREAM_KINDS}, got {what}")
    try:
        handle = operator.index(handle)
    except TypeError:
        raise TypeError(f"stream: expected {STREAM_KINDS}, got {what}") from None
    if not 0 <= handle < 2**64:
        raise ValueError(f"stream: handle {handle} is outside 0..2^64-1; pass a stream object or its handle "
                         f"(0 for the legacy default stream)")
    return handle


def resolve_stream(stream: Any, uses_torch: bool, device_index: int | None = None) -> int:
    """A launch's stream handle: ``stream`` (``stream_handle``; None: torch's current stream on
    ``device_index`` when the arguments are torch tensors, else the legacy default stream 0)."""
    handle = stream_handle(stream)
    if handle is None:
        return torch_current_stream(device_index) if uses_torch else 0
    return handle


__all__ = ["CudaError", "DeviceInfo", "driver", "check", "ensure_context", "device_info", "resolve_stream", "stream_handle",
           "torch_current_stream"]
