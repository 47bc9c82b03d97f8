"""From problem to plan (MLIR-free): which kernel runs an ``AttnProblem`` on a device, and how.

    source = source_for(bundle)                  # a bundle, FA4MLIR_BUNDLE's, else the compiler
    plan = select(problem, device, source)       # a Plan: launches of (kernel, grid, named args)
    prepared = plan.prepare(tensors)             # checked and packed once per tensor signature
    prepared.launch(addresses, stream)           # again and again with new addresses

A ``Plan`` holds no tensor: its launches name the call's tensors (``TensorRef``) where the launch
contract takes them, so one plan serves every call of its shape, and a plan of several launches
(split-KV and its combine, a backward) is the same object. Kernel choice lives here and in the
kernel's config module (``attention_sm90_config.default_config``): this module asks for the config
the tables choose and finds or compiles it.
"""
from __future__ import annotations

import ast
import os
import threading
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from .. import env
from ..artifacts import Bundle, KernelArtifact
from ..driver import DeviceInfo
from ..kernels import attention_sm90_config as attn_cfg
from ..kernels import cubin_backend as kernel_cubin_backend
from ..runtime import LoadedKernel, PreparedLaunch, load
from .checks import MAX_I32, _err, check_bundle
from ..kernels.common.score_mod import ModFunctionError
from .errors import BundleError, KnobError, ScoreModError, ShapeError
from .problem import AttnProblem

ARCH = "sm_90a"


@dataclass(frozen=True)
class TensorRef:
    """A launch argument that is one of the call's tensors, by name (q, k, v, o, lse)."""

    name: str


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan: the loaded kernel, its grid and its arguments by parameter name."""

    kernel: LoadedKernel
    grid: tuple[int, int, int]
    args: Mapping[str, Any]

    def bind(self, tensors: Mapping[str, Any]) -> dict:
        """The arguments with each TensorRef replaced by the call's tensor of that name."""
        return {n: tensors[a.name] if isinstance(a, TensorRef) else a for n, a in self.args.items()}


@dataclass(frozen=True)
class Plan:
    """The launches that compute a problem, in stream order."""

    problem: AttnProblem
    launches: tuple[Launch, ...]
    notes: tuple[str, ...] = ()   # why this kernel (the softcap rule's pick: attention_sm90_config.softcap_choice)

    def describe(self) -> str:
        """The plan in words: each launch's kernel and grid, then the notes (which softcap kernel, and why)."""
        lines = [f"{launch.kernel.artifact.name} grid {launch.grid}" for launch in self.launches]
        return "\n".join([*lines, *self.notes])

    def prepare(self, tensors: Mapping[str, Any]) -> "PreparedPlan":
        """Check and pack every launch against these tensors (runtime.LoadedKernel.prepare)."""
        return PreparedPlan(tuple(
            (launch.kernel.prepare(launch.grid, launch.bind(tensors)),
             tuple(a.name for p in launch.kernel.artifact.params if p.kind in ("tma", "ptr")
                   for a in [launch.args[p.name]]))
            for launch in self.launches))


@dataclass(frozen=True)
class PreparedPlan:
    """A plan checked and packed for one tensor signature: ``launch`` runs it with new addresses."""

    steps: tuple[tuple[PreparedLaunch, tuple[str, ...]], ...]   # each launch and its tensors' names, in order

    def launch(self, addresses: Mapping[str, int], stream: int) -> None:
        for prepared, names in self.steps:
            prepared.launch([addresses[n] for n in names], stream)


# ----------------------------------------------------------------------------------------------
# Kernel sources: a bundle, or the compiler
# ----------------------------------------------------------------------------------------------

# the compile-time fields a call must match exactly, with what keys that lack them mean (attention_sm90_config's
# table, declared once beside AttnConfig; bench/sanitize.py reads the same)
VARIANT_FIELDS = attn_cfg.VARIANT_FIELDS


def select_entry(entries: Sequence[dict], dtype: str, head_dim: int, causal: bool, where: str = "bundle",
                 seqlen_k: int | None = None, default: attn_cfg.AttnConfig | None = None) -> dict:
    """The bundle entry (a manifest dict) to run for (dtype, head_dim, causal): `default`, else
    default_config at seqlen_k (when given). Among several (benchmark variants), the one with the
    default's tiles (else, when the bundle lacks them, those for long sequences), then its code
    knobs (KNOB_FIELDS: exp2_poly_stride, rescale_threshold, rescale_before_pv; absent in older
    bundles: the defaults), then the one compiled with the kernel's own backend."""
    # Match on config["kernel"]: entry names carry the config too (attention_fwd_sm90_bf16_d128_...).
    want = {"kernel": attn_cfg.KERNEL, "dtype": dtype, "head_dim": head_dim, "causal": bool(causal)}
    mask = {k: getattr(default, k) for k in VARIANT_FIELDS} if default is not None else VARIANT_FIELDS
    hits = [e for e in entries if e.get("arch") == ARCH
            and all(e.get("config", {}).get(k) == v for k, v in want.items())
            and all(e.get("config", {}).get(k, d) == mask[k] for k, d in VARIANT_FIELDS.items())]
    if not hits:
        masked = "".join(f", {k}={v}" for k, v in mask.items() if v != VARIANT_FIELDS[k])
        raise BundleError(f"flash_attn_func: {where} has no {attn_cfg.KERNEL} ({ARCH}) kernel for "
                          f"dtype={dtype}, head_dim={head_dim}, causal={bool(causal)}{masked}; build it with "
                          f"`python -m fa4mlir bundle --set attention`"
                          f"{' (windows, chunks, softcap, sinks, head_dim_v and score_mod/mask_mod fingerprints are compile-time: add this one to a set)' if masked else ''}"
                          f"{_mod_hint(mask)}")
    default = default or attn_cfg.default_config(dtype, head_dim, causal, seqlen_k)
    tiles = {k: getattr(default, k) for k in attn_cfg.TILE_FIELDS}
    # the default for this seqlen_k, else (the bundle lacks its tiles) the one for long sequences;
    # the code knobs to narrow by are those of the default whose tiles matched (KNOBS differ by tiles)
    long_seq = attn_cfg.default_config(dtype, head_dim, causal, mask=default.mask, softcap=default.softcap,
                                       sinks=default.sinks, head_dim_v=default.head_dim_v, score_mod=default.score_mod,
                                       mask_mod=default.mask_mod, aux=default.aux)
    if default.softcap_fixed_max:   # the softcap rule's kernel on the long sequences' tiles
        long_seq = replace(long_seq, **attn_cfg.SOFTCAP_FIXED_FIELDS).validate()
    for cfg in (default, long_seq):
        same_tiles = [e for e in hits if all(e["config"].get(k) == getattr(cfg, k) for k in attn_cfg.TILE_FIELDS)]
        if same_tiles:
            hits, default = same_tiles, cfg
            break
    knobs = {k: getattr(default, k) for k in attn_cfg.KNOB_FIELDS}
    for narrow in (lambda e: all(e["config"].get(k, v) == v for k, v in knobs.items()),
                   lambda e: e["config"].get("cubin_backend") == kernel_cubin_backend(attn_cfg.KERNEL)):
        if len(hits) > 1 and any(narrow(e) for e in hits):
            hits = [e for e in hits if narrow(e)]
    if len(hits) > 1:
        keys = ", ".join(e.get("key", "")[:16] for e in hits)
        raise BundleError(f"flash_attn_func: {len(hits)} {attn_cfg.KERNEL} kernels in {where} match "
                          f"{want} with default tiles {tiles} (keys {keys}); remove the duplicates")
    return hits[0]


def _mod_hint(want: dict) -> str:
    """How to get a score_mod / mask_mod kernel into a bundle: it is found by its fingerprint only."""
    fps = [f"{k}={want[k]!r}" for k in ("score_mod", "mask_mod") if want.get(k)]
    if not fps:
        return ""
    return (f". A score_mod/mask_mod kernel is found by its function's fingerprint ({', '.join(fps)}): build the "
            f"bundle on a machine with MLIR from the same function source (kernel_sets.score_mods shows how, "
            f"fa4mlir.bundle_score_mod_kernels adds a user's), then ship it")


def find_artifact(bundle: Bundle, dtype: str, head_dim: int, causal: bool, seqlen_k: int | None = None, *,
                  default: attn_cfg.AttnConfig | None = None) -> KernelArtifact:
    """The bundle's kernel for (dtype, head_dim, causal): `default`, else default_config at
    seqlen_k, or what select_entry falls back to."""
    entry = select_entry(bundle.entries, dtype, head_dim, causal, where=f"bundle {bundle.root}", seqlen_k=seqlen_k,
                         default=default)
    match = {k: v for k, v in entry["config"].items() if k not in ("name", "arch")}
    return bundle.find(name=entry["name"], arch=entry["arch"], **match)


class KernelSource:
    """Where kernels come from: a bundle (select_entry picks the entry for a default config, or
    falls back) or the compiler (the default config, compiled with the kernel's own options).
    ``kernel`` loads each default config's kernel once."""

    def __init__(self, bundle: Bundle | None):
        self.bundle = bundle
        self._loaded: dict = {}
        self._lock = threading.Lock()

    def artifact(self, default: attn_cfg.AttnConfig) -> KernelArtifact:
        if self.bundle is not None:
            return find_artifact(self.bundle, default.dtype, default.head_dim, default.causal, default=default)
        from ..compiler import compile_kernel   # needs MLIR
        try:
            return compile_kernel(attn_cfg.KERNEL, default)
        except ModFunctionError as e:   # a score_mod / mask_mod the kernel builder could not compile
            raise ScoreModError(_err(str(e))) from None

    def kernel(self, default: attn_cfg.AttnConfig) -> LoadedKernel:
        """The loaded kernel for `default` (a default_config); launch it by the config it was built
        from (its artifact's), which a bundle may have chosen differently."""
        with self._lock:
            if default not in self._loaded:
                self._loaded[default] = load(self.artifact(default))
            return self._loaded[default]


_CONFIG_KERNELS: dict = {}
_CONFIG_KERNELS_LOCK = threading.Lock()


def config_kernel(source: KernelSource, cfg: Any, api: str, bundle_sets: Sequence[str], arch: str = ARCH) -> LoadedKernel:
    """The loaded kernel of ``cfg`` (a config with ``name()`` and ``key()``: the decode, combine,
    append, MLA decode and sparse MLA kernels' configs) from ``source``: its bundle's entry of that
    name for ``arch`` (sm_90a unless the config's kernel is another arch's), else compiled here;
    loaded once per (source, cfg). A bundle without it is a BundleError of entry point ``api``
    naming the kernel and the ``bundle_sets`` that build it (never another variant in its place)."""
    key = (id(source), cfg)
    with _CONFIG_KERNELS_LOCK:
        if key in _CONFIG_KERNELS:
            return _CONFIG_KERNELS[key][1]
    if source.bundle is not None:
        try:
            art = source.bundle.find(name=cfg.name(), arch=arch)
        except LookupError:
            build = f"`python -m fa4mlir bundle --set {bundle_sets[0]}`" + "".join(f" or `--set {s}`"
                                                                                  for s in bundle_sets[1:])
            raise BundleError(_err(f"bundle {source.bundle.root} has no {cfg.name()}; build it with {build} (or pass "
                                   f"no bundle to compile it here)", api)) from None
    else:
        from ..compiler import compile_kernel   # needs MLIR
        art = compile_kernel(cfg.key()["kernel"], cfg)
    kernel = load(art)
    with _CONFIG_KERNELS_LOCK:
        _CONFIG_KERNELS[key] = (source, kernel)     # the source is kept alive: its id stays unique
    return kernel


_SOURCES: dict = {}
_SOURCES_LOCK = threading.Lock()


def source_for(bundle: Bundle | str | os.PathLike | None = None) -> KernelSource:
    """The kernel source of a call: ``bundle`` (a Bundle, or a bundle folder's path), else the
    FA4MLIR_BUNDLE bundle, else the compiler (its compile options resolved per kernel by
    fa4mlir.compiler). One source per bundle object, path or compiler, kept for the process. A path
    that holds no readable bundle raises BundleError (nothing is compiled instead)."""
    check_bundle(bundle)
    given_by = "bundle="
    if isinstance(bundle, (str, os.PathLike)):
        key: Any = ("path", os.fspath(bundle))
    elif bundle is not None:
        key = ("bundle", id(bundle))
    elif env.bundle_dir() is not None:
        key, given_by = ("path", str(env.bundle_dir())), "FA4MLIR_BUNDLE"
    else:
        key = ("compiler", env.get_str("FA4MLIR_CUBIN_BACKEND"), env.debug())
    with _SOURCES_LOCK:
        if key not in _SOURCES:
            if key[0] == "path":
                bundle = _open_bundle(key[1], given_by)
            _SOURCES[key] = KernelSource(bundle)
        return _SOURCES[key]


def _open_bundle(path: str, given_by: str = "bundle=") -> Bundle:
    try:
        return Bundle.open(path)
    except (OSError, ValueError) as e:
        raise BundleError(_err(f"{given_by} {path!r} is not a readable bundle ({e}); pass a folder written by "
                               f"`python -m fa4mlir bundle --set attention`, a fa4mlir.Bundle, or no bundle "
                               f"(and FA4MLIR_BUNDLE unset) to compile the kernel here")) from None


# ----------------------------------------------------------------------------------------------
# Selection
# ----------------------------------------------------------------------------------------------

def dense_launch(config: attn_cfg.AttnConfig, kernel: LoadedKernel, problem: AttnProblem,
                 device: DeviceInfo) -> Launch:
    """The one launch of the dense sm_90a kernel: its grid (one CTA per SM for a persistent kernel)
    and its arguments by name, tensors as TensorRefs."""
    tiles = attn_cfg.query_tiles(config, problem.seqlen_q) * problem.heads * problem.batch
    if config.persistent:  # the kernel counts its tiles (causal: twice) in i32
        if 2 * tiles > MAX_I32:
            raise ShapeError(_err(f"batch x heads x query tiles = {tiles} is too many for the persistent "
                                  f"kernel (at most {MAX_I32 // 2})"))
    elif config.causal and tiles > MAX_I32:  # one 1-D grid (section_tile)
        raise ShapeError(_err(f"batch x heads x query tiles = {tiles} is too many for the causal kernel's "
                              f"grid (at most {MAX_I32})"))
    refs = {name: TensorRef(name) for name, _ in (*attn_cfg.TENSOR_PARAMS, *attn_cfg.SINK_PARAMS)}
    refs.update({f"aux{i}": TensorRef(f"aux{i}") for i in range(len(problem.aux_shapes))})
    return Launch(kernel, attn_cfg.grid(config, problem, device.num_sms),
                  attn_cfg.launch_args(config, problem, refs, device.l2_bytes))


# The measurement knob of the dense sm_90a kernel's tiles (fa4mlir.env: FA4MLIR_PREFILL_TILES): `bench
# prefill --prefill-tiles` times flash_attn_func on other tiles than default_config's, the data the
# TILES / KNOBS tables are set from. Never a fallback: a source without that variant is a BundleError.
PREFILL_TILES_ENV = "FA4MLIR_PREFILL_TILES"


def tile_override(spec: str | None = None) -> dict:
    """FA4MLIR_PREFILL_TILES (or `spec`), 'bn=144,persistent=False': {field: value} of AttnConfig's
    TILE_FIELDS and KNOB_FIELDS (values as Python literals); {} when unset. Other fields: ConfigError."""
    spec = os.environ.get(PREFILL_TILES_ENV, "") if spec is None else spec
    out = {}
    allowed = (*attn_cfg.TILE_FIELDS, *attn_cfg.KNOB_FIELDS)
    for item in filter(None, (x.strip() for x in spec.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise KnobError(_err(f"{PREFILL_TILES_ENV}: expected field=value with a field of {allowed}, got {item!r}"))
        try:
            out[key] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            raise KnobError(_err(f"{PREFILL_TILES_ENV}: {item!r} is not a Python literal")) from None
    return out


def select(problem: AttnProblem, device: DeviceInfo, source: KernelSource) -> Plan:
    """The plan for `problem` on `device` (an sm_90 GPU: checks.check_device_context): the kernel
    `source` has for its case (default_config's tiles for its seqlen_k where the source has them),
    launched once by the contract of the config it was built from. A softcap call's kernel is the
    softcap rule's (attention_sm90_config.softcap_rule, from the Python float problem.softcap: the
    fixed-max kernel for a bf16 cap up to FIXED_MAX_CAP, else the running-max one), named in the
    plan's notes (Plan.describe)."""
    default = attn_cfg.default_config(problem.dtype, problem.head_dim, problem.causal, problem.seqlen_k,
                                      mask=problem.mask, softcap=problem.softcap > 0, sinks=problem.sinks,
                                      head_dim_v=problem.head_dim_v, score_mod=problem.score_mod,
                                      mask_mod=problem.mask_mod, aux=problem.aux, cap=problem.softcap)
    fields = tile_override()
    wanted = replace(default, **fields).validate() if fields else default
    kernel = source.kernel(wanted)
    config = attn_cfg.AttnConfig.from_key(kernel.artifact.config)
    if any(getattr(config, k) != v for k, v in fields.items()):
        raise BundleError(_err(f"{PREFILL_TILES_ENV}={os.environ.get(PREFILL_TILES_ENV)!r}: the kernel source has "
                               f"no kernel of those tiles (it offered "
                               f"{ {k: getattr(config, k) for k in fields} }); add that tile variant to the bundle"))
    notes = (attn_cfg.softcap_choice(config, problem.softcap),) if config.softcap else ()
    return Plan(problem, (dense_launch(config, kernel, problem, device),), notes)


__all__ = ["Plan", "PreparedPlan", "Launch", "TensorRef", "KernelSource", "select", "source_for", "select_entry",
           "find_artifact", "dense_launch", "config_kernel", "ARCH"]
