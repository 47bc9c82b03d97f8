"""Tile variants of the sm_90a bf16/f16 decode kernel (attention_decode_sm90_config re-exports them; MLIR-free).

Tile variants of the bf16/f16 decode kernel (issue #27's decode_dense bar; [O-decode]: bn and the ring depth were
never swept), for A/B only: default_config's kernel of a CONTIGUOUS head_dim-128 cache (bench decode's
decode_dense: B=64, Sk=8192, unsplit) with other tiles, through FA4MLIR_DECODE_TILE_VARIANT (tile_variant). The
default (bn 64, 3 stages: 16 KiB Q + 3 x 32 KiB K/V = ~112 KiB, two CTAs per SM) keeps 2 x 3 x 32 = 192 KiB of
K/V in flight per SM. "bn64s6": 6 stages (~208 KiB, one CTA per SM): the same bytes in flight from one CTA, no
second CTA's prologue/epilogue overlap, 255 registers; "bn128s3": 128-key tiles, 3 stages (~208 KiB, one CTA per
SM): half the ring waits, barriers and wgmma groups per key; "bn32s6": 32-key tiles, 6 stages (~112 KiB, two
CTAs per SM): the same bytes in flight in finer steps (a consumer waits on less of the ring at a time).
The ring-depth sweep at bn 64 and 128 ([O-decode]: never swept with numbers kept; the `decode-bf16-variants`
set, BF16_SWEEP): "s2": 2 stages (~80 KiB, two CTAs per SM: 2 x 2 x 32 KiB in flight); "s4": 4 stages (~144 KiB:
one CTA per SM, 128 KiB in flight); "bn128s2": 128-key tiles, 2 stages (~144 KiB, one CTA per SM, 128 KiB in
flight; "bn128s3" above is the 3-stage one); "evict_first": the default tiles with an L2 evict_first cache policy
on every K/V TMA load (DecodeConfig.kv_evict_first: K and V are streamed once, so L2 may drop them first).
UNSPLIT_RULE ([D-decode-bn128-unsplit]): default_config gives an unsplit call of at most UNSPLIT_RULE_MAX_ROWS packed
query rows over such a cache "bn128s2"'s tiles (decode_dense: 481.3-482.2 us vs 484.4-484.7 at bn 64 / 3 stages, four
H200 runs; decode_spec4's 16 rows were slower on it, 136.4-137.0 vs 133.3-133.8 us, so it keeps bn 64); "bn64s3" is
the tiles before the rule, for A/B ("default" is the rule's).
name -> (DecodeConfig fields, the CTAs per SM it is planned for: tests/test_decode_tile_variants.py and
tests/test_decode_bf16_variants.py check)
"""
from __future__ import annotations

from dataclasses import replace

from .fields import ConfigError

TILE_VARIANTS = {
    "default": None,
    "bn64s6": ({"bn": 64, "stages": 6}, 1),
    "bn128s3": ({"bn": 128, "stages": 3}, 1),
    "bn32s6": ({"bn": 32, "stages": 6}, 2),
    "s2": ({"bn": 64, "stages": 2}, 2),
    "s4": ({"bn": 64, "stages": 4}, 1),
    "bn128s2": ({"bn": 128, "stages": 2}, 1),
    "evict_first": ({"bn": 64, "stages": 3, "kv_evict_first": True}, 2),
    "bn64s3": ({"bn": 64, "stages": 3}, 2),
}
UNSPLIT_RULE = "bn128s2"
UNSPLIT_RULE_MAX_ROWS = 4
# the ring-depth / L2-hint sweep (the decode-bf16-variants set; the decode-fp8-variants set holds the others)
BF16_SWEEP = ("s2", "s4", "bn128s2", "evict_first", "bn64s3")
TILE_VARIANT_ENV = "FA4MLIR_DECODE_TILE_VARIANT"


def tile_variant(cfg, name: str, fp8_env: str):
    """default_config's bf16/f16 kernel ``cfg`` as TILE_VARIANTS entry ``name`` ("default": cfg itself).
    ConfigError for an unknown name, an FP8 cache (its variants: ``fp8_env``'s), and what the
    variants are not built for: a paged cache, head_dim other than 128, a compile-time mask, softcap, sinks,
    varlen_q."""
    if name not in TILE_VARIANTS:
        raise ConfigError(f"unknown decode tile variant {name!r} ({TILE_VARIANT_ENV}); known: {', '.join(TILE_VARIANTS)}")
    if TILE_VARIANTS[name] is None:
        return cfg
    if cfg.fp8:
        raise ConfigError(f"decode tile variant {name!r} is for bf16/f16 caches; an FP8 cache's variants are "
                          f"{fp8_env}'s, got {cfg.name()}")
    if cfg.paged or cfg.head_dim != 128 or cfg.windowed or cfg.softcap or cfg.sinks or cfg.varlen_q:
        raise ConfigError(f"decode tile variant {name!r} is built for a contiguous head_dim-128 cache without a "
                          f"compile-time mask, softcap, sinks or varlen q; got {cfg.name()}")
    fields, _ = TILE_VARIANTS[name]
    return replace(cfg, box_rows=fields.get("bn", cfg.bn), **fields).validate()
