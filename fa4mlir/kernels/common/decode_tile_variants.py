"""Tile variants of the sm_90a bf16/f16 decode kernel (attention_decode_sm90_config re-exports them; MLIR-free).

Tile variants of the bf16/f16 decode kernel (issue #27's decode_dense bar), for A/B only: default_config's kernel of
a CONTIGUOUS head_dim-128 cache (bench decode's decode_dense: B=64, Sk=8192, unsplit) with other tiles, through
FA4MLIR_DECODE_TILE_VARIANT (tile_variant). UNSPLIT_RULE ([D-decode-bn128-unsplit]): default_config gives an unsplit
call of at most UNSPLIT_RULE_MAX_ROWS packed query rows over such a cache "bn128s2"'s tiles (128-key tiles, 2 stages,
~144 KiB, one CTA per SM; decode_spec4's 16 rows were slower on it, so more rows keep bn 64); "bn64s3" is the tiles
before the rule (bn 64, 3 stages: 16 KiB Q + 3 x 32 KiB K/V = ~112 KiB, two CTAs per SM), for A/B ("default" is the
rule's). The other ring depths, tiles and the L2 evict_first hint once here were timed and rejected (notes/RESULTS.md
[D-decode-bn128-unsplit], [O-decode]).
name -> (DecodeConfig fields, the CTAs per SM it is planned for: tests/test_decode_bf16_variants.py checks)
"""
from __future__ import annotations

from dataclasses import replace

from .fields import ConfigError

TILE_VARIANTS = {
    "default": None,
    "bn128s2": ({"bn": 128, "stages": 2}, 1),
    "bn64s3": ({"bn": 64, "stages": 3}, 2),
}
UNSPLIT_RULE = "bn128s2"
UNSPLIT_RULE_MAX_ROWS = 4
# the variants of the decode-bf16-variants set (every one but "default")
BF16_SWEEP = ("bn128s2", "bn64s3")
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
