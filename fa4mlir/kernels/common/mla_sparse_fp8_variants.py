"""The FP8 sparse MLA decode's variant table (MLIR-free data; attention_mla_sparse_sm90_config re-exports every
name and holds the rules that pick among them): what a flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...)
call can run, by name."""
from __future__ import annotations

# name -> the MLASparseDecodeConfig fields it sets (the others of FP8_VARIANT_FIELDS False). "converter": note "FP8
# converter plan" (warpgroup 2 dequantizes from global memory into two bf16 tiles); "gather": note "FP8 sparse SMEM
# plan" (the gather warp's cp.async staging stage, the consumers dequantize it): the default before
# FP8_DECODE_DEFAULT_RULE, kept for A/B (FA4MLIR_MLA_SPARSE_FP8_VARIANT=gather, bench mla's backend fa4mlir[gather]).
# "crossover": the converter over a cluster of the token's two 64-head CTAs (attention_mla_sparse_crossover_sm90, its
# note; opt-in, h_q a multiple of 128, FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover, fa4mlir[crossover]). "crossover_lean":
# the crossover with its note "Lean hand-off" (opt-in, h_q a multiple of 128;
# FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover_lean, fa4mlir[crossover_lean]). "crossover_stasync": crossover_lean with the
# converter's st.async hand-off (that module's note "st.async hand-off"; FP8_DECODE_CROSSOVER_RULE's, h_q a multiple of
# 128; FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover_stasync, fa4mlir[crossover_stasync]). (The converter's rolling prefetch
# "prefetch", "crossover_ahead", "crossover_ahead_stasync" and "crossover_stasync_hint" were timed and rejected:
# notes/RESULTS.md [R-mla-sparse-fp8-prefetch-timed], [O-mla-next-2026-11-27], [R-mla-sparse-fp8-hint].)
CROSSOVER_VARIANT = "crossover"
LEAN_VARIANT = "crossover_lean"
STASYNC_VARIANT = "crossover_stasync"
FP8_DECODE_VARIANTS = {"converter": {"fp8_converter": True}, "gather": {},
                       CROSSOVER_VARIANT: {"fp8_converter": True, "crossover": True},
                       LEAN_VARIANT: {"fp8_converter": True, "crossover": True, "crossover_lean": True},
                       STASYNC_VARIANT: {"fp8_converter": True, "crossover": True, "crossover_lean": True,
                                         "crossover_stasync": True}}
FP8_VARIANT_FIELDS = ("fp8_converter", "crossover", "crossover_lean", "crossover_stasync")
# the variants that run the crossover's cluster (h_q a multiple of 2 x TILE_M)
CLUSTER_VARIANTS = tuple(n for n, f in FP8_DECODE_VARIANTS.items() if f.get("crossover"))
FP8_DECODE_VARIANT_ENV = "FA4MLIR_MLA_SPARSE_FP8_VARIANT"


def fp8_decode_variant_name(cfg) -> str:
    """The FP8_DECODE_VARIANTS name of the FP8 sparse decode kernel ``cfg`` (its FP8_VARIANT_FIELDS)."""
    fields = {f: getattr(cfg, f) for f in FP8_VARIANT_FIELDS}
    return next(n for n, v in FP8_DECODE_VARIANTS.items() if fields == {**dict.fromkeys(FP8_VARIANT_FIELDS, False), **v})
