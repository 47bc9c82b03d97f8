"""Every FA4MLIR_* environment knob, in one table, with typed getters.

MLIR-free: the runtime and the cache import this module. Add a knob by adding a row to
``KNOBS``. A knob that changes generated code is read in exactly one place, ``fa4mlir.compiler
.resolve_options``, into the compile's options, which are part of its cache key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Knob:
    """One environment variable: its name, default (as the string it would be set to) and meaning."""

    name: str
    default: str | None
    kind: str  # "bool", "path", "str"
    meaning: str


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("FA4MLIR_CACHE_DIR", "~/.cache/fa4mlir", "path", "directory of the on-disk kernel cache"),
        Knob("FA4MLIR_CACHE", "1", "bool", "1: use the kernel cache; 0: always compile"),
        Knob("FA4MLIR_DUMP_DIR", None, "path", "if set, write every compiler stage's IR/PTX here"),
        Knob("FA4MLIR_DEBUG", "0", "bool", "1: emit debug checks in kernels (changes the code; read once "
             "per compile into its options, part of the cache key)"),
        Knob("FA4MLIR_BUNDLE", None, "path", "kernel bundle directory the runtime and GPU tests load"),
        Knob("FA4MLIR_VERBOSE", "0", "bool", "1: log compiles, cache hits and kernel loads to stderr"),
        Knob("FA4MLIR_COMPILE_LOG", None, "path", "if set, append a JSON line per compile (seconds by stage), "
             "kernel-cache hit, IR-stage run and interpreter translation and launch to this file, with the "
             "pid and the pytest test running (where a test run's CPU goes: bench/compile_log.py sums it)"),
        Knob("FA4MLIR_INTERPRET_SWEEP", "0", "bool", "1: tests/test_interpret_attention.py also runs its "
             "broad sweep of the sm_100a kernel through the interpreter (minutes; CI runs 4 cases)"),
        Knob("FA4MLIR_DECODE_FP8_VARIANT", None, "str", "flash_attn_with_kvcache over an FP8 cache runs this "
             "entry of attention_decode_sm90_config.FP8_VARIANTS instead of FP8_DEFAULT_RULE's kernel (smem: the "
             "conversion-through-SMEM kernel; bench decode --decode-variant; a bundle must hold it: the "
             "decode-fp8-variants set)"),
        Knob("FA4MLIR_DECODE_TILE_VARIANT", None, "str", "flash_attn_with_kvcache over a bf16/f16 cache runs this "
             "entry of attention_decode_sm90_config.TILE_VARIANTS (unset or 'default': default_config's tiles, "
             "UNSPLIT_RULE's bn128s2 for an unsplit call of <= 4 packed rows; bn64s3: the tiles before that rule; "
             "bn128s2: that rule's tiles; built for a contiguous head_dim-128 cache "
             "without mask variants, else ConfigError); for A/B (bench decode --decode-variant); a bundle must hold "
             "it: the decode-bf16-variants set (decode_dense's kernels, all of them); read per call into the call "
             "cache's key"),
        Knob("FA4MLIR_DECODE_BALANCED_WAVES", "1", "str", "the balanced FP8 decode schedule (FA4MLIR_DECODE_FP8_VARIANT"
             "=balanced) runs this many waves of the device's CTA slots (1..8: parts = SMs x CTAs per SM x waves / "
             "KV heads CTAs per KV head; a launch argument, the same kernels); for A/B; read per call into the "
             "call cache's key"),
        Knob("FA4MLIR_MLA_DECODE_VARIANT", None, "str", "flash_mla_with_kvcache's dense decode runs this kernel "
             "variant (attention_mla_decode_sm90_config.DECODE_VARIANTS): unset or 'default', DEFAULT_RULE's (the "
             "swap-AB kernel for seqlen_q x heads <= 32 over a 16-bit cache, the seesaw schedule for more rows over "
             "a bf16 cache, else the M64 kernel); 'm64' (the kernel of 64-row M tiles, for any call); 'swapab' "
             "(attention_mla_decode_sm90_swapab.py: seqlen_q x heads <= 32 over a 16-bit cache only, else "
             "UnsupportedFeatureError); 'seesaw' (bf16); 'swapab_ring' (swap AB over a ring of 11 / 12 "
             "one-chunk stages a warpgroup; where swapab runs over pages of whole 64-row boxes); bench mla "
             "--mla-decode-variant; a bundle must hold it: the mla set holds them all; read per call into the "
             "call cache's key"),
        Knob("FA4MLIR_VARLEN_GRID", None, "str", "flash_attn_varlen_func's grid (packed k and v): unset or "
             "'sections', the default (ceil(max_seqlen_q / bm) tiles per sequence, the empty ones exit), or "
             "'compact' (one block per working tile, AttnConfig.varlen_compact: an A/B variant; a bundle must "
             "hold it: the bench or prefill set), or 'persistent' (min(SMs, working-tile bound) CTAs striding "
             "over the compact grid's tiles: varlen_compact with persistent, an A/B variant; the bench or prefill "
             "set holds the anchors' kernel); read at every call"),
        Knob("FA4MLIR_MLA_SPARSE_FP8_VARIANT", None, "str", "flash_mla_with_kvcache(is_fp8_kvcache=True, "
             "indices=...) runs this entry of attention_mla_sparse_sm90_config.FP8_DECODE_VARIANTS instead of "
             "FP8_DECODE_DEFAULT_RULE's kernel (the converter warpgroup; as 'crossover_stasync' at heads a multiple of "
             "128, FP8_DECODE_CROSSOVER_RULE): 'converter', the plain converter (fa4mlir[converter]); 'gather', the "
             "kernel before the rule, for A/B (bench mla's backend fa4mlir[gather]); 'crossover', the converter over "
             "a cluster of a token's two 64-head CTAs (heads a multiple of 128); 'crossover_lean', the crossover with "
             "its note 'Lean hand-off' (opt-in, heads a multiple of 128, fa4mlir[crossover_lean]); "
             "'crossover_stasync', crossover_lean with the converter's st.async hand-off (heads a multiple of 128, "
             "fa4mlir[crossover_stasync]); read per call into the call cache's key; the mla bundle set holds them all"),
        Knob("FA4MLIR_MLA_SPARSE_SM100", None, "str", "flash_mla_sparse_fwd on compute capability 10.0 runs this "
             "sm_100a kernel: unset or 'split', attention_mla_sparse_sm100 (two independent CTAs per token, the "
             "mla-sparse-sm100 set); 'pair', attention_mla_sparse_sm100_pair (FlashMLA's head128 CTA pair, h_q 128 "
             "and topk a multiple of 128 only, else ShapeError; the mla-sparse-sm100-pair set); read per call into "
             "the call cache's key; another value is a KnobError"),
        Knob("FA4MLIR_MLA_SPARSE_PRODUCER", None, "str", "the sm_90a sparse MLA kernels over a 16-bit kv "
             "(flash_mla_sparse_fwd, flash_mla_with_kvcache with indices) run this entry of "
             "attention_mla_sparse_sm90_config.PRODUCER_VARIANTS: unset or 'default' (SPARSE_DEFAULT_RULE's: the "
             "producer warpgroup over bf16, the gather warp otherwise), 'warp' (the gather warp), 'warpgroup' "
             "(producer_warps=4); for A/B (bench mla's fa4mlir[tile], fa4mlir[pwg]); "
             "read per call into the call cache's key; KnobError over an FP8 kv or on sm_100a"),
        Knob("FA4MLIR_MLA_SPARSE_VARIANT", None, "str", "flash_mla_sparse_fwd and flash_mla_with_kvcache(indices=...) "
             "over a 16-bit kv (or the FP8 cache's converter kernel, one split) run this entry of "
             "attention_mla_sparse_sm90_config.SPARSE_VARIANTS on sm_90a: unset or 'default' (SPARSE_DEFAULT_RULE's: "
             "the seesaw over bf16, in FlashMLA's pair-fill order with the producer warpgroup, the tile step otherwise), 'tile' (the shared tile step), 'seesaw' (FlashMLA's "
             "seesaw tile step, attention_mla_sparse_seesaw_sm90; over FP8 rows only the unsplit decode's converter: "
             "else UnsupportedFeatureError) or 'seesaw_pairfill' (the seesaw with FlashMLA's fill order of a pair's "
             "halves: 16-bit kv and the producer warpgroup, else UnsupportedFeatureError / KnobError) or "
             "'seesaw_overlap' (the pair fill with the next pair's S_a under P_b V; SPARSE_DEFAULT_RULE's prefill over "
             "bf16); for A/B (bench mla's fa4mlir[tile], fa4mlir[seesaw], fa4mlir[seesaw_pwg], "
             "fa4mlir[seesaw_overlap]); read per call into the call cache's key; a bundle must hold it: the mla and "
             "mla-sparse-variants sets"),
        Knob("FA4MLIR_PREFILL_TILES", None, "str", "flash_attn_func runs its case's default kernel with these "
             "AttnConfig tile / code-knob fields replaced ('bn=144,persistent=False'; for measurement: bench "
             "prefill --prefill-tiles); a kernel source without that variant raises BundleError, never falls back"),
        Knob("FA4MLIR_CUBIN_BACKEND", None, "str",
             "overrides each kernel's own LLVM->cubin route (one the kernel cannot take is refused: "
             "nvjitlink for the attention kernels, nvjitlink-lto before sm_100): nvjitlink (upstream PTX, "
             "nvJitLink in process; ignores setmaxnreg, ptxas C7504), nvjitlink-lto (NVVM IR -> libNVVM LTO-IR -> "
             "nvJitLink -lto, in process; honours setmaxnreg) or ptxas (upstream PTX, a ptxas on PATH "
             "or from the nvidia-cuda-nvcc wheel; honours setmaxnreg); read once per compile into its "
             "options (part of the cache key)"),
    )
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _knob(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"unknown knob {name!r}; known knobs: {', '.join(sorted(KNOBS))}") from None


def get_str(name: str) -> str | None:
    """The knob's value as set in the environment, else its default (None if it has none)."""
    knob = _knob(name)
    return os.environ.get(name, knob.default)


def get_bool(name: str) -> bool:
    """The knob read as a boolean; raises ValueError on a value that is not 0/1/true/false/yes/no."""
    knob = _knob(name)
    if knob.kind != "bool":
        raise TypeError(f"{name} is a {knob.kind} knob, not a bool knob")
    raw = (get_str(name) or "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of 0/1/true/false/yes/no/on/off; "
                     f"unset it or set it to 0 or 1")


def get_path(name: str) -> Path | None:
    """The knob read as a path (``~`` expanded), or None when unset and without default."""
    knob = _knob(name)
    if knob.kind != "path":
        raise TypeError(f"{name} is a {knob.kind} knob, not a path knob")
    raw = get_str(name)
    if raw is None or raw == "":
        return None
    return Path(raw).expanduser()


def cache_dir() -> Path:
    """FA4MLIR_CACHE_DIR, or its default when unset or empty."""
    return get_path("FA4MLIR_CACHE_DIR") or Path(KNOBS["FA4MLIR_CACHE_DIR"].default).expanduser()


def cache_enabled() -> bool:
    return get_bool("FA4MLIR_CACHE")


def dump_dir() -> Path | None:
    return get_path("FA4MLIR_DUMP_DIR")


def debug() -> bool:
    return get_bool("FA4MLIR_DEBUG")


def bundle_dir() -> Path | None:
    return get_path("FA4MLIR_BUNDLE")


def verbose() -> bool:
    return get_bool("FA4MLIR_VERBOSE")


def log_event(event: str, **fields) -> None:
    """Append one JSON line {event, pid, test, **fields} to FA4MLIR_COMPILE_LOG (nothing when unset).
    `test`: the pytest test running in this process (PYTEST_CURRENT_TEST), or null."""
    path = get_path("FA4MLIR_COMPILE_LOG")
    if path is None:
        return
    import json
    line = json.dumps({"event": event, "pid": os.getpid(), "test": os.environ.get("PYTEST_CURRENT_TEST"),
                       **fields}, default=str)
    with open(path, "a") as f:      # one write of one line, O_APPEND: workers' lines do not interleave
        f.write(line + "\n")


def describe() -> str:
    """The knob table as text: name, default, current value, meaning."""
    rows = [f"{'name':<20} {'default':<18} {'current':<18} meaning"]
    for k in KNOBS.values():
        cur = os.environ.get(k.name, "")
        rows.append(f"{k.name:<20} {str(k.default):<18} {cur:<18} {k.meaning}")
    return "\n".join(rows)
