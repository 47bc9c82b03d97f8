"""Kernel artefacts and bundles (MLIR-free): what a compiled kernel is, and its on-disk forms.

``KernelArtifact`` is a cubin plus everything needed to launch it without the compiler (its
parameters as ``ParamSpec``s, TMA expectations as ``TmaSpec``s, block, cluster, SMEM, the config it
was built from). A bundle is a folder of cubins plus ``manifest.json`` (``write_bundle``,
``Bundle``), loadable on a machine with no compiler.
"""
from __future__ import annotations

import hashlib
import json
import operator
import os
import re
import struct
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import env
from .tensors import DTYPES

SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
L2_PROMOTIONS = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}
OOB_FILLS = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}
PARAM_KINDS = ("ptr", "i32", "i64", "f32", "tma")
MAX_TMA_RANK = 5
MAX_BOX_DIM = 256


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
        """Inverse of ``to_json``; the metadata must name the cubin's sha256 and its arch (an ELF
        cubin's SM), and the cubin must match both."""
        want = d.get("cubin_sha256")
        if not isinstance(want, str):
            raise ValueError(f"kernel {d.get('name')!r}: metadata has no cubin_sha256, so nothing binds it "
                             f"to its cubin; rebuild the bundle/cache entry")
        if hashlib.sha256(cubin).hexdigest() != want:
            raise ValueError(f"kernel {d.get('name')!r}: cubin sha256 does not match its metadata; "
                             f"the cubin file is corrupt or stale, rebuild the bundle/cache entry")
        check_cubin_arch(cubin, d.get("arch"), f"kernel {d.get('name')!r}")
        params = tuple(ParamSpec(p["name"], p["kind"], TmaSpec(**p["tma"]) if p.get("tma") else None)
                       for p in d.get("params", ()))
        return cls(name=d["name"], arch=d["arch"], cubin=bytes(cubin), block=tuple(d["block"]),
                   cluster=tuple(d.get("cluster", (1, 1, 1))), smem_bytes=int(d.get("smem_bytes", 0)),
                   params=params, resources=dict(d.get("resources", {})), key=d.get("key", ""),
                   config=dict(d.get("config", {})))


EM_CUDA = 190   # ELF e_machine of a cubin


def cubin_sm(cubin: bytes) -> int | None:
    """The SM number an ELF cubin is built for (90 for sm_90a), or None when the image is not an
    ELF (PTX text, which the driver compiles for the device). The SM sits in e_flags: bits 8-15 from
    the CUDA ELF ABI version 8 on (what nvJitLink and ptxas 12.8+ write), bits 0-7 before."""
    if len(cubin) < 52 or cubin[:4] != b"\x7fELF":
        return None
    if cubin[4] != 2 or struct.unpack_from("<H", cubin, 18)[0] != EM_CUDA:
        raise ValueError("the cubin is an ELF file but not a 64-bit CUDA one (e_machine != EM_CUDA)")
    flags = struct.unpack_from("<I", cubin, 48)[0]
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def check_cubin_arch(cubin: bytes, arch: Any, where: str) -> None:
    """An ELF cubin's SM must be the one `arch` ('sm_90a') names."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch) if isinstance(arch, str) else None
    if m is None:
        raise ValueError(f"{where}: arch {arch!r} is not an sm_XY[a] name")
    try:
        sm = cubin_sm(cubin)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if sm is not None and sm != int(m.group(1)):
        raise ValueError(f"{where}: the cubin is built for sm_{sm} but its metadata says {arch}; the entry is "
                         f"mislabelled: rebuild it")


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


# manifest entry field -> the type it must have
_ENTRY_FIELDS = {"name": str, "arch": str, "cubin": str, "cubin_sha256": str, "block": list, "params": list,
                 "config": dict}


def _check_entry(path: Path, index: int, e: Any) -> None:
    """A manifest entry has the fields a lookup and a load read, of the right types."""
    if not isinstance(e, dict):
        raise ValueError(f"{path}: kernel entry #{index} is a {type(e).__name__}, not an object; rebuild the bundle")
    for field_name, kind in _ENTRY_FIELDS.items():
        if not isinstance(e.get(field_name), kind):
            got = "missing" if field_name not in e else f"a {type(e[field_name]).__name__}"
            raise ValueError(f"{path}: kernel entry #{index} ({e.get('name')!r}) field {field_name!r} must be a "
                             f"{kind.__name__}, is {got}; rebuild the bundle")


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
        kernels = manifest.get("kernels", [])
        if not isinstance(kernels, list):
            raise ValueError(f"{path}: 'kernels' must be a list, got {type(kernels).__name__}; rebuild the bundle")
        for i, e in enumerate(kernels):
            _check_entry(path, i, e)
        return cls(root, kernels)

    def names(self) -> list[str]:
        """Kernel entry names in the bundle, sorted, without duplicates."""
        return sorted({e["name"] for e in self.entries})

    def artifacts(self) -> list[KernelArtifact]:
        return [self._artifact(e) for e in self.entries]

    def _artifact(self, e: dict) -> KernelArtifact:
        root = self.root.resolve()
        path = (root / e["cubin"]).resolve()
        if root not in path.parents:
            raise ValueError(f"bundle {self.root}: kernel {e['name']!r} names cubin {e['cubin']!r}, outside the "
                             f"bundle folder; a bundle's cubins are files inside it: rebuild the bundle")
        try:
            return KernelArtifact.from_json(e, path.read_bytes())
        except (KeyError, TypeError) as err:
            raise ValueError(f"bundle {self.root}: kernel {e['name']!r} has malformed metadata ({err!r}); "
                             f"rebuild the bundle") from None

    def find(self, name: str | None = None, arch: str | None = None, *, exact: bool = False,
             **config_match: Any) -> KernelArtifact:
        """The one kernel with this name/arch whose config holds every ``config_match`` item; with
        ``exact``, whose config is exactly ``config_match`` (no other items: a kernel whose key leaves
        out unset fields, e.g. the attention kernel's varlen, is told from its variants that set them)."""
        want = {k: _jsonable(v) for k, v in config_match.items()}
        hits = [e for e in self.entries
                if (name is None or e["name"] == name) and (arch is None or e["arch"] == arch)
                and all(k in e.get("config", {}) and e["config"][k] == v for k, v in want.items())
                and (not exact or set(e.get("config", {})) == set(want))]
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


__all__ = ["TmaSpec", "ParamSpec", "KernelArtifact", "Bundle", "write_bundle", "atomic_write", "BUNDLE_FORMAT",
           "BUNDLE_VERSION", "MANIFEST"]
