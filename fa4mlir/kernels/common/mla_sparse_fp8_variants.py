"""The FP8 sparse MLA decode's variant table (MLIR-free data; attention_mla_sparse_sm90_config re-exports every
name and holds the rules that pick among them): what a flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...)
call can run, by name."""
from __future__ import annotations

# name -> the MLASparseDecodeConfig fields it sets (the others of FP8_VARIANT_FIELDS False). "converter": note
# "FP8 converter plan" (warpgroup 2 dequantizes from global memory into two bf16 tiles); "gather": note "FP8
# sparse SMEM plan" (the gather warp's cp.async staging stage, the consumers dequantize it): the default before
# FP8_DECODE_DEFAULT_RULE, kept for A/B (FA4MLIR_MLA_SPARSE_FP8_VARIANT=gather, bench mla's backend
# fa4mlir[gather]); "prefetch": the converter with its rolling prefetch (note "FP8 converter prefetch",
# attention_mla_sparse_prefetch_sm90; opt-in, FA4MLIR_MLA_SPARSE_FP8_VARIANT=prefetch, fa4mlir[prefetch]).
# "crossover": the converter over a cluster of the token's two 64-head CTAs (attention_mla_sparse_crossover_sm90,
# its note; opt-in, h_q a multiple of 128, FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover, fa4mlir[crossover]).
# "crossover_lean" and "crossover_ahead": the crossover with its note "Lean hand-off" (opt-in, h_q a multiple of
# 128; FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover_lean / crossover_ahead, fa4mlir[crossover_lean] / [crossover_ahead]).
# "crossover_stasync": crossover_lean with the converter's st.async hand-off (that module's note "st.async hand-off";
# opt-in, h_q a multiple of 128; FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover_stasync, fa4mlir[crossover_stasync]).
# "crossover_ahead_stasync": both, crossover_ahead's indices a tile ahead with the st.async hand-off (opt-in, h_q a
# multiple of 128; FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover_ahead_stasync, fa4mlir[crossover_ahead_stasync]).
# "crossover_stasync_hint": crossover_stasync with the converter's row loads carrying FlashMLA's cache hints (the
# crossover module's note "Load hints"; opt-in, h_q a multiple of 128; FA4MLIR_MLA_SPARSE_FP8_VARIANT=
# crossover_stasync_hint, fa4mlir[crossover_stasync_hint]); built in the bundle sets for bench mla's call (unsplit,
# no topk_length) and its topk_length + split twin only (FP8_DECODE_PAIR_VARIANTS).
PREFETCH_VARIANT = "prefetch"
CROSSOVER_VARIANT = "crossover"
LEAN_VARIANT = "crossover_lean"
AHEAD_VARIANT = "crossover_ahead"
STASYNC_VARIANT = "crossover_stasync"
AHEAD_STASYNC_VARIANT = "crossover_ahead_stasync"
HINT_VARIANT = "crossover_stasync_hint"
FP8_DECODE_VARIANTS = {"converter": {"fp8_converter": True}, "gather": {},
                       PREFETCH_VARIANT: {"fp8_converter": True, "converter_prefetch": True},
                       CROSSOVER_VARIANT: {"fp8_converter": True, "crossover": True},
                       LEAN_VARIANT: {"fp8_converter": True, "crossover": True, "crossover_lean": True},
                       AHEAD_VARIANT: {"fp8_converter": True, "crossover": True, "crossover_lean": True,
                                       "crossover_ahead": True},
                       STASYNC_VARIANT: {"fp8_converter": True, "crossover": True, "crossover_lean": True,
                                         "crossover_stasync": True},
                       AHEAD_STASYNC_VARIANT: {"fp8_converter": True, "crossover": True, "crossover_lean": True,
                                               "crossover_ahead": True, "crossover_stasync": True},
                       HINT_VARIANT: {"fp8_converter": True, "crossover": True, "crossover_lean": True,
                                      "crossover_stasync": True, "load_hints": True}}
FP8_VARIANT_FIELDS = ("fp8_converter", "converter_prefetch", "crossover", "crossover_lean", "crossover_ahead",
                      "crossover_stasync", "load_hints")
# the variants the bundle sets hold for two of the four FP8 calls only, (topk_length, split) in FP8_PAIR_CALLS:
# bench mla's mla_sparse_decode_fp8 call (unsplit, no topk_length) and its topk_length + split twin
FP8_DECODE_PAIR_VARIANTS = (HINT_VARIANT,)
FP8_PAIR_CALLS = ((False, False), (True, True))
# the variants that run the crossover's cluster (h_q a multiple of 2 x TILE_M)
CLUSTER_VARIANTS = tuple(n for n, f in FP8_DECODE_VARIANTS.items() if f.get("crossover"))
FP8_DECODE_VARIANT_ENV = "FA4MLIR_MLA_SPARSE_FP8_VARIANT"


def fp8_decode_variant_name(cfg) -> str:
    """The FP8_DECODE_VARIANTS name of the FP8 sparse decode kernel ``cfg`` (its FP8_VARIANT_FIELDS)."""
    fields = {f: getattr(cfg, f) for f in FP8_VARIANT_FIELDS}
    return next(n for n, v in FP8_DECODE_VARIANTS.items() if fields == {**dict.fromkeys(FP8_VARIANT_FIELDS, False), **v})
