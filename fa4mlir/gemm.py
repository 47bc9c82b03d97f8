"""GEMM front end (MLIR-free at import): C = A . B^T for the shipped GEMM kernels.

`gemm(a, b)` takes torch tensors (or DLPack / __cuda_array_interface__ producers) A [M, K] and
B [N, K], row-major bf16/f16, and returns C [M, N]. The kernel comes from a bundle (`bundle=`, a
Bundle or a folder's path, or FA4MLIR_BUNDLE) or, when MLIR is installed, from the cache/compiler.

Every argument is checked before any driver call or compile, with the entry points' typed errors
(``fa4mlir.attention.errors``: ShapeError, DTypeError, LayoutError, DeviceError,
ArgumentTypeError, BundleError, all FlashAttnInputError). Empty products return what torch.mm
returns, with no kernel: M or N = 0 an empty C, K = 0 a C of zeros.
"""
from __future__ import annotations

import math
import os
import sys
import types
from typing import Any

from . import env
from .attention.checks import (_err, check_bundle, check_devices, check_pointer, check_stream, device_ordinal,
                               read_tensor)
from .attention.errors import ArgumentTypeError, BundleError, DeviceError, DTypeError, LayoutError, ShapeError
from .driver import device_info, resolve_stream
from .runtime import GMEM_ALIGN_BYTES, Bundle, LoadedKernel, TensorInfo, fill, load

API = "gemm"
ARCHS = {"sm_90a": ("gemm_sm90", 9), "sm_100a": ("gemm_sm100", 10)}   # arch -> (kernel, device major)
_LOADED: dict = {}
_BUNDLES: dict = {}   # path -> Bundle, opened once


def grid_for(config: dict, m: int, n: int) -> tuple[int, int, int]:
    return ((n + config["bn"] - 1) // config["bn"], (m + config["bm"] - 1) // config["bm"], 1)


def check_operands(a_info: TensorInfo, b_info: TensorInfo, c_info: TensorInfo | None) -> tuple[int, int, int]:
    """Shapes, dtypes and layouts of A [M, K], B [N, K] and C [M, N] (None: allocated later), checked
    before any launch; returns (M, N, K)."""
    named = [("a", a_info), ("b", b_info)] + [("c", c_info)] * (c_info is not None)
    for name, info in named:
        if len(info.shape) != 2:
            raise ShapeError(_err(f"{name} must be 2-D, got shape {tuple(info.shape)}; reshape it", API))
        if any(n < 0 for n in info.shape):
            raise ShapeError(_err(f"{name} has a negative size in shape {tuple(info.shape)}; fix its producer", API))
    (m, k), (n, kb) = a_info.shape, b_info.shape
    if k != kb:
        raise ShapeError(_err(f"a is [M, K] = {tuple(a_info.shape)} and b is [N, K] = {tuple(b_info.shape)}; K "
                              f"differs: pass b as [N, K] (C = A . B^T)", API))
    if c_info is not None and tuple(c_info.shape) != (m, n):
        raise ShapeError(_err(f"c must be [M, N] = [{m}, {n}], got {tuple(c_info.shape)}; allocate it so", API))
    dtypes = [info.dtype for _, info in named]
    if len(set(dtypes)) != 1 or dtypes[0] not in ("bf16", "f16"):
        raise DTypeError(_err(f"a, b{', c' * (c_info is not None)} must share dtype bf16 or f16; got "
                              f"{', '.join(dtypes)}: convert them", API))
    if k % 8 or n % 8:
        raise LayoutError(_err(f"K and N must be multiples of 8 (TMA needs 16-byte row strides); got K={k}, "
                               f"N={n}: zero-pad them", API))
    for name, info in named:
        if math.prod(info.shape) == 0:
            continue
        check_pointer(name, info, API)
        rows, cols = info.shape
        if cols > 1 and info.strides[1] != 1:
            raise LayoutError(_err(f"{name} must be row-major with unit inner stride, got strides {info.strides}; "
                                   f"pass {name}.contiguous()", API))
        if rows > 1 and (info.strides[0] < cols or info.strides[0] % 8):
            raise LayoutError(_err(f"{name} row stride {info.strides[0]} elements must be at least its {cols} "
                                   f"columns and a multiple of 8 (16 bytes); pass {name}.contiguous()", API))
        if info.ptr % GMEM_ALIGN_BYTES:
            raise LayoutError(_err(f"{name} data pointer {info.ptr:#x} is not {GMEM_ALIGN_BYTES}-byte aligned; "
                                   f"pass {name}.clone()", API))
    return m, n, k


def _bundle(bundle: Any) -> Bundle | None:
    """bundle= as a Bundle (a path opened once), else FA4MLIR_BUNDLE's, else None (the compiler)."""
    check_bundle(bundle, API)
    given_by = "bundle="
    if bundle is None and env.bundle_dir() is not None:
        bundle, given_by = str(env.bundle_dir()), "FA4MLIR_BUNDLE"
    if not isinstance(bundle, (str, os.PathLike)):
        return bundle
    path = os.fspath(bundle)
    if path not in _BUNDLES:
        try:
            _BUNDLES[path] = Bundle.open(path)
        except (OSError, ValueError) as e:
            raise BundleError(_err(f"{given_by} {path!r} is not a readable bundle ({e}); pass a folder written by "
                                   f"`python -m fa4mlir bundle`, a fa4mlir.Bundle, or no bundle (and "
                                   f"FA4MLIR_BUNDLE unset) to compile the kernel here", API)) from None
    return _BUNDLES[path]


def kernel_for(arch: str, dtype: str, bundle: Bundle | None = None, **config) -> LoadedKernel:
    name = ARCHS[arch][0]
    cache_key = (name, dtype, id(bundle), tuple(sorted(config.items())))
    if cache_key not in _LOADED:
        if bundle is not None:
            try:
                art = bundle.find(arch=arch, kernel=name, dtype=dtype, **config)
            except LookupError as e:
                raise BundleError(_err(f"{e}; build it with `python -m fa4mlir bundle --set bench`", API)) from None
        else:
            from . import compiler, kernels  # needs MLIR
            cfg_cls = kernels.module(name).GemmConfig
            art = compiler.compile_kernel(name, cfg_cls(dtype=dtype, **config))
        _LOADED[cache_key] = load(art)
    return _LOADED[cache_key]


def gemm(a, b, out=None, *, bundle: Bundle | str | os.PathLike | None = None, arch: str = "sm_90a", stream=None,
         **config):
    """C = A . B^T; `out` (C) is allocated with torch (on a's device) when not given."""
    if not isinstance(arch, str) or arch not in ARCHS:
        raise ArgumentTypeError(_err(f"arch must be one of {sorted(ARCHS)}, got {arch!r}; pass the arch of the "
                                     f"GPU (sm_90a: H100/H200, sm_100a: B200)", API))
    check_stream(stream, API)
    source = _bundle(bundle)
    given = {"a": a, "b": b, "c": out}
    infos = {n: read_tensor(n, x, API, shape) for (n, x), shape in zip(given.items(), ("[M, K]", "[N, K]", "[M, N]"))
             if x is not None or n != "c"}
    m, n, k = check_operands(infos["a"], infos["b"], infos.get("c"))
    ordinal = check_devices([(name, infos[name].device, device_ordinal(name, given[name], API)) for name in infos], API)
    torch = sys.modules.get("torch")
    if out is None and (torch is None or not isinstance(a, torch.Tensor)):
        raise ArgumentTypeError(_err(f"out (C) is allocated like a, which is not a torch tensor; pass out= as a "
                                     f"[{m}, {n}] {infos['a'].dtype} CUDA tensor-like", API))
    device = device_info()   # the first driver call
    if device.capability[0] != ARCHS[arch][1]:
        raise DeviceError(_err(f"arch {arch} needs an sm_{ARCHS[arch][1]}x GPU, but device {device.ordinal} is "
                               f"sm_{device.capability[0]}{device.capability[1]}; pass arch={device.arch!r} if "
                               f"a kernel exists for it", API))
    if ordinal is not None and ordinal != device.ordinal:
        raise DeviceError(_err(f"the tensors are on cuda:{ordinal} but fa4mlir's CUDA context is on device "
                               f"{device.ordinal}; call torch.cuda.set_device({ordinal}) before the first fa4mlir "
                               f"call", API))
    if out is None:
        out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m * n == 0:
        return out
    if k == 0:   # torch.mm's answer: zeros
        if stream is None and torch is not None and isinstance(out, torch.Tensor):
            out.zero_()
        else:
            uses_torch = any(info.is_torch for info in infos.values())
            fill(infos.get("c") or read_tensor("c", out, API), 0, resolve_stream(stream, uses_torch, device.ordinal))
        return out
    kern = kernel_for(arch, infos["a"].dtype, source, **config)
    kern.launch(grid_for(kern.artifact.config, m, n), [a, b, out, m, n, k], stream=stream)
    return out


class _CallableModule(types.ModuleType):
    """Importing this module (``from fa4mlir.gemm import grid_for``) binds it as the package's
    ``gemm`` attribute, where ``fa4mlir.gemm`` is otherwise the lazily exported function: the
    module called is that function, so ``fa4mlir.gemm(a, b)`` works either way."""

    def __call__(self, *args, **kw):
        return gemm(*args, **kw)


sys.modules[__name__].__class__ = _CallableModule
