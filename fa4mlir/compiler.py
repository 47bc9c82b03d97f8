"""The compiler's entry point: `compile_kernel(kernel_name, cfg, options)` builds, lowers and caches.

    art = compile_kernel("attention_fwd_sm90", cfg)                  # the kernel's own cubin backend
    art = compile_kernel("gemm_sm90", cfg, cubin_backend="ptxas")     # an explicit one

Options (`lowering.CompileOptions`) resolve once, here: an explicit argument, else the
FA4MLIR_CUBIN_BACKEND / FA4MLIR_DEBUG knob when the user set it, else the kernel's own choice
(`kernels.cubin_backend`: the attention kernels name the backend that honours their setmaxnreg
split). Nothing below reads or writes the environment for them, and they are part of the cache key
(with the config, the fa4mlir source fingerprint, the toolchain versions and the arch); N processes
asking for one key compile once. With FA4MLIR_DUMP_DIR set, a cache hit still re-runs the IR
stages so that every stage's artefact is dumped.

The config is validated (its typed fields, then its values and plans) before its key is
computed: an invalid config never reaches the cache or the toolchain.
"""
from __future__ import annotations

import time

from . import env, kernels, lowering
from .artifacts import KernelArtifact
from .cache import KernelCache, compute_key
from .lowering import CompileOptions
from .kernels.common.fields import ConfigError


def resolve_options(kernel_name: str, cubin_backend: str | None = None, debug: bool | None = None) -> CompileOptions:
    """The options a compile of `kernel_name` runs with (see the module docstring for the order)."""
    backend = cubin_backend or env.get_str("FA4MLIR_CUBIN_BACKEND") or kernels.cubin_backend(kernel_name)
    return CompileOptions(cubin_backend=backend, debug=env.debug() if debug is None else bool(debug))


def validated(kernel_name: str, cfg):
    """`cfg`, checked before any key is computed: a config of `kernel_name` (its key's "kernel")
    whose validate() accepts it (typed fields, then its values and plans)."""
    validate = getattr(cfg, "validate", None)
    if validate is None or not hasattr(cfg, "key"):
        raise ConfigError(f"{kernel_name}: expected its config (a dataclass with validate() and key()), "
                          f"got {type(cfg).__name__}")
    validate()
    kind = cfg.key().get("kernel")
    if kind != kernel_name:
        raise ConfigError(f"{type(cfg).__name__} is a config of {kind!r}, not of {kernel_name!r}")
    return cfg


def key_for(kernel_name: str, cfg, options: CompileOptions) -> str:
    """The cache key of `cfg` compiled with `options` (the config is validated first)."""
    cfg = validated(kernel_name, cfg)
    return compute_key(cfg.key(), kernels.arch(kernel_name), extra={"kernel": kernel_name, "options": options.key()})


def build_and_lower(kernel_name: str, cfg, options: CompileOptions, key: str) -> KernelArtifact:
    mod = kernels.module(kernel_name)
    t0 = time.perf_counter()
    kir = mod.build(cfg)
    kir.config["_build_seconds"] = time.perf_counter() - t0
    return lowering.lower(kir, options, key)


def compile_kernel(kernel_name: str, cfg, options: CompileOptions | None = None, cache: KernelCache | None = None, *,
                   cubin_backend: str | None = None, debug: bool | None = None) -> KernelArtifact:
    """The compiled artefact for `cfg`, from the disk cache or compiled now. `options` (resolved),
    or `cubin_backend` / `debug` resolved by resolve_options."""
    if options is None:
        options = resolve_options(kernel_name, cubin_backend, debug)
    key = key_for(kernel_name, cfg, options)
    cache = cache or KernelCache()
    built = []

    def build():
        built.append(True)
        return build_and_lower(kernel_name, cfg, options, key)

    art = cache.get_or_build(key, build)
    if env.dump_dir() is not None and not built:
        build_and_lower(kernel_name, cfg, options, key)  # dumps on cache hits too
    return art


__all__ = ["compile_kernel", "resolve_options", "validated", "key_for", "CompileOptions"]
