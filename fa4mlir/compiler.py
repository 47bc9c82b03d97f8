"""Build + lower + cache: `get_artifact(kernel_name, cfg)` is what every front end calls.

The cache key is computed (config key + fa4mlir source fingerprint + toolchain versions + arch +
output-changing knobs); N processes asking for one key compile once. With FA4MLIR_DUMP_DIR set, a
cache hit still re-runs the IR stages so that every stage's artefact is dumped.
"""
from __future__ import annotations

import time

from . import env, kernels, lowering
from .cache import KernelCache, compute_key
from .runtime import KernelArtifact


def key_for(kernel_name: str, cfg) -> str:
    return compute_key(cfg.key(), kernels.arch(kernel_name), extra={"kernel": kernel_name})


def build_and_compile(kernel_name: str, cfg, key: str) -> KernelArtifact:
    mod = kernels.module(kernel_name)
    t0 = time.perf_counter()
    kir = mod.build(cfg)
    kir.config["_build_seconds"] = time.perf_counter() - t0
    return lowering.compile_kernel(kir, key)


def get_artifact(kernel_name: str, cfg, cache: KernelCache | None = None) -> KernelArtifact:
    """The compiled artefact for `cfg`, from the disk cache or compiled now."""
    key = key_for(kernel_name, cfg)
    cache = cache or KernelCache()
    built = []

    def build():
        built.append(True)
        return build_and_compile(kernel_name, cfg, key)

    art = cache.get_or_build(key, build)
    if env.dump_dir() is not None and not built:
        build_and_compile(kernel_name, cfg, key)  # dumps on cache hits too
    return art
