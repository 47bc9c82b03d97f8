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

The environment cannot make a kernel spill: a knob that names a backend dropping setmaxnreg
(nvjitlink) for a kernel that needs its split (`kernels.needs_setmaxnreg`: the attention kernels)
raises lowering.BackendError naming the knob and the fix; an explicit argument asking for one
builds it, with a SetmaxnregDroppedWarning (the benchmarks and tests that measure the spill). A
backend the kernel's arch cannot take (nvjitlink-lto before sm_100) is refused the same way. The
config is validated (its typed fields, then its values and plans) before its key is computed:
an invalid config never reaches the cache or the toolchain.
"""
from __future__ import annotations

import time
import warnings

from . import env, kernels, lowering
from .artifacts import KernelArtifact
from .cache import KernelCache, compute_key
from .lowering import BackendError, CompileOptions, SetmaxnregDroppedWarning
from .kernels.common.fields import ConfigError

KNOB = "FA4MLIR_CUBIN_BACKEND"


def resolve_options(kernel_name: str, cubin_backend: str | None = None, debug: bool | None = None) -> CompileOptions:
    """The options a compile of `kernel_name` runs with (see the module docstring for the order and
    what is refused)."""
    knob = env.get_str(KNOB)
    backend = cubin_backend or knob or kernels.cubin_backend(kernel_name)
    options = CompileOptions(cubin_backend=backend, debug=env.debug() if debug is None else bool(debug))
    check_backend(kernel_name, options, source=None if cubin_backend else f"{KNOB}={knob}" if knob else "")
    return options


def check_backend(kernel_name: str, options: CompileOptions, source: str | None = None) -> None:
    """Refuse a backend `kernel_name` cannot be built with as it needs (BackendError); warn when the
    caller asked for one that drops its setmaxnreg split. `source`: where the backend came from
    ("FA4MLIR_CUBIN_BACKEND=..." for the knob, "" for the kernel's own, None for the caller's)."""
    backend, arch = options.cubin_backend, kernels.arch(kernel_name)
    said = f"cubin backend {backend!r}" + (f" (from {source})" if source else "")
    if backend == "nvjitlink-lto" and not lowering.lto_supports(arch):
        raise BackendError(f"{said} cannot compile {kernel_name} for {arch}: libNVVM reads this compiler's "
                           f"LLVM IR only for sm_100 and later. Use {kernels.cubin_backend(kernel_name)!r} "
                           f"(the kernel's own){'; unset ' + KNOB if source and source.startswith(KNOB) else ''}.")
    if backend in lowering.SETMAXNREG_BACKENDS or not kernels.needs_setmaxnreg(kernel_name):
        return
    why = (f"{kernel_name}'s register split needs setmaxnreg, which {backend!r} drops (nvJitLink compiles "
           f"PTX relocatably: ptxas C7504), so its consumers keep the launch's share of registers and spill")
    if source is None:
        warnings.warn(f"{said}, asked for explicitly: {why}", SetmaxnregDroppedWarning, stacklevel=3)
        return
    raise BackendError(f"{said}: {why}. Unset {KNOB} (the kernel's own backend is "
                       f"{kernels.cubin_backend(kernel_name)!r}) or set it to one of "
                       f"{', '.join(lowering.SETMAXNREG_BACKENDS)}; to build the spilling kernel on purpose, "
                       f"pass cubin_backend={backend!r} to compile_kernel.")


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
    else:
        check_backend(kernel_name, options)     # resolved by the caller: its explicit choice
    key = key_for(kernel_name, cfg, options)
    cache = cache or KernelCache()
    built = []

    def build():
        built.append(True)
        return build_and_lower(kernel_name, cfg, options, key)

    art = cache.get_or_build(key, build)
    if not built:
        env.log_event("cache_hit", kernel=kernel_name, key=key[:16])
    if env.dump_dir() is not None and not built:
        build_and_lower(kernel_name, cfg, options, key)  # dumps on cache hits too
    return art


__all__ = ["compile_kernel", "resolve_options", "check_backend", "validated", "key_for", "CompileOptions",
           "BackendError", "SetmaxnregDroppedWarning"]


def _worker_init(sets: list[str]) -> None:
    """A compile worker: the sets' entries again, so the score_mod functions they name are registered
    here too (a fingerprint registers its function when it is computed)."""
    from . import kernel_sets
    kernel_sets.configs(sets)


def _compile_entry(entry) -> tuple[KernelArtifact, float]:
    name, cfg, *overrides = entry
    t0 = time.perf_counter()
    return compile_kernel(name, cfg, **(overrides[0] if overrides else {})), time.perf_counter() - t0


def compile_entries(entries, sets: list[str], jobs: int):
    """Yield (artifact, seconds) of kernel_sets entries (from the named `sets`) compiled in `jobs`
    spawned processes, in the entries' order (the disk cache's writes are atomic, so workers share it)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
                             initargs=(list(sets),)) as pool:
        yield from pool.map(_compile_entry, entries)
