"""The decode kernels' A/B variant entries of kernel_sets (the `decode-fp8-variants` set beside the `decode` set's
rule kernels); kernel_sets re-exports them. Entries as kernel_sets' module docstring describes."""
from __future__ import annotations

# FP8 decode variants (attention_decode_sm90_config.FP8_VARIANTS) over these caches: bench decode's
# FP8 workloads (per-KV-head scales, contiguous and paged 16) and the other two granularities
DECODE_FP8_VARIANT_CASES = [("bf16", 128, page, grain) for page in (None, 16) for grain in ("tensor", "kv_head", "block")]


def decode_variant_entries() -> list:
    """Every FP8_VARIANTS entry but "default" (the `decode` set's rule) over DECODE_FP8_VARIANT_CASES
    of its scales (FP8_VARIANT_SCALES), split and unsplit, the balanced variants at bench decode's shapes:
    with the `decode` set, what `python -m fa4mlir bench decode --workloads decode_dense_fp8,decode_paged_16_fp8
    --decode-variant default,smem,swapab,swapabw,balanced` times."""
    from .kernels.attention_decode_sm90_config import (BALANCED, BALANCED_VARIANTS, COMBINE_KERNEL, FP8_VARIANT_SCALES,
                                                       FP8_VARIANTS, KERNEL, SCALES, SWAP_AB_ROWS,
                                                       CombineConfig, default_config, fp8_variant)
    out = [(KERNEL, fp8_variant(default_config(dtype, d, page, grain, unsplit=unsplit), name))
            for dtype, d, page, grain in DECODE_FP8_VARIANT_CASES for unsplit in (False, True)
            for name in FP8_VARIANTS if name != "default" and name not in BALANCED_VARIANTS
            and grain in FP8_VARIANT_SCALES.get(name, SCALES)]
    # "balanced" (split only: it writes final O itself) at bench decode's FP8 pages (64, 128: one kernel), its combine
    out += [(KERNEL, fp8_variant(default_config("bf16", 128, page, grain), BALANCED, SWAP_AB_ROWS))
            for page in (None, 16, 64, 128) for grain in FP8_VARIANT_SCALES[BALANCED]]
    # other BALANCED_VARIANTS at bench decode's paged FP8 rows (kv_head, boxes 16/64)
    out += [(KERNEL, fp8_variant(default_config("bf16", 128, page, "kv_head"), name, SWAP_AB_ROWS))
            for name in BALANCED_VARIANTS if name != BALANCED for page in (16, 64)]
    return out + [(COMBINE_KERNEL, CombineConfig("bf16", 128, balanced_bn=64))]


def decode_bf16_variants() -> list:
    """The `decode-bf16-variants` set: bench decode's decode_dense kernel (bf16 D128 contiguous, unsplit: one split
    there at every variant's CTAs per SM; no combine) and each bf16 TILE_VARIANTS entry of it (UNSPLIT_RULE's bn128s2
    and bn64s3, the tiles before it): what `python -m fa4mlir bench decode --workloads decode_dense --decode-variant
    default,bn64s3` times in one process ("default": UNSPLIT_RULE's bn128s2 since [D-decode-bn128-unsplit])."""
    from .kernels.attention_decode_sm90_config import KERNEL, TILE_VARIANTS, default_config, tile_variant
    base = default_config("bf16", 128, None, unsplit=True, rows=1)      # UNSPLIT_RULE's (decode_dense: 4 rows)
    cfgs = {base: None} | {tile_variant(base, name): None for name in TILE_VARIANTS if name != "default"}
    return [(KERNEL, cfg) for cfg in cfgs]
