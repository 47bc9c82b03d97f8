"""The MLA kernel sets of kernel_sets (split by concept: flash_mla_with_kvcache's dense and sparse decode,
flash_mla_sparse_fwd on sm_90a and sm_100a, mla_prefill's kernel); kernel_sets re-exports each and names
them in SETS. Entries as kernel_sets' module docstring describes."""
from __future__ import annotations


def _mla_prefill() -> list:
    """mla_prefill's kernel (bench mla's prefill row): bf16 qk 192 / v 128 causal."""
    from .kernels.attention_sm90_config import KERNEL, default_configs
    return [(KERNEL, c) for c in default_configs("bf16", 192, True, head_dim_v=128)]


# (dtype, page size) of the mla set: FlashMLA's page size 64 in both dtypes, and 16 (16-row TMA boxes)
MLA_CASES = [("bf16", 64), ("f16", 64), ("bf16", 16)]


def mla() -> list:
    """The absorbed MLA decode kernels (flash_mla_with_kvcache) of MLA_CASES, split and unsplit,
    the head-dim-512 combine per dtype, the sparse prefill's four (flash_mla_sparse_fwd) on the tile step with
    the gather warp, as SPARSE_DEFAULT_RULE's bf16 kernels (seesaw, producer warpgroup) and with the producer
    warpgroup on the tile step, four over FlashMLA's FP8 rows, and the sparse decode's eight
    (flash_mla_with_kvcache with indices), the bf16 four's rule and producer-warpgroup twins, four
    over the FP8 cache (the converter-warpgroup kernels FP8_DECODE_DEFAULT_RULE picks, the gather kernels
    of FA4MLIR_MLA_SPARSE_FP8_VARIANT=gather, the converter over a cluster of two CTAs of
    ..._FP8_VARIANT=crossover, and its lean hand-offs of ..._FP8_VARIANT=crossover_lean and crossover_stasync,
    FP8_DECODE_CROSSOVER_RULE's)."""
    from .kernels.attention_decode_sm90_config import COMBINE_KERNEL, CombineConfig
    from dataclasses import replace
    from .kernels.attention_mla_decode_sm90_config import D_V, KERNEL, SWAP_AB_NS, default_config
    out = [(KERNEL, default_config(dtype, page, unsplit=u)) for dtype, page in MLA_CASES for u in (False, True)]
    # DEFAULT_RULE's swap-AB kernels (seqlen_q x heads <= 32 over a 16-bit cache) for every N: what
    # tests/gpu/test_mla_decode_gpu.py's and bench mla's 16-head rows run (N 16, 32) and the other head
    # counts under the rule (N 8, 24), as the M64 kernels above served them before the rule
    out += [(KERNEL, replace(default_config(dtype, page, unsplit=u), swap_ab=n)) for dtype, page in MLA_CASES
            for n in SWAP_AB_NS for u in (False, True)]
    # over a bf16 cache of 64-row pages the rule's swap AB is its ring of chunk stages (swapab_ring): every N
    out += [(KERNEL, replace(default_config(dtype, page, unsplit=u), swap_ab=n, swap_ab_ring=True))
            for dtype, page in MLA_CASES if dtype == "bf16" and page % 64 == 0 for n in SWAP_AB_NS for u in (False, True)]
    # DEFAULT_RULE's seesaw kernels (more than 32 packed rows over a bf16 cache) for each bf16 cache type
    out += [(KERNEL, default_config(dtype, page, unsplit=u, seesaw=True)) for dtype, page in MLA_CASES
            if dtype == "bf16" for u in (False, True)]
    # FlashMLA's FP8 latent cache (is_fp8_kvcache=True; bf16 q): page sizes 64 and 16
    out += [(KERNEL, default_config("bf16", page, unsplit=u, fp8=True)) for page in (64, 16) for u in (False, True)]
    out += [(COMBINE_KERNEL, CombineConfig(dtype, D_V)) for dtype in sorted({d for d, _ in MLA_CASES})]
    # the sparse prefill (flash_mla_sparse_fwd), with and without topk_length and attention sinks
    from .kernels.attention_mla_sparse_sm90_config import KERNEL as SPARSE, MLASparseConfig
    out += [(SPARSE, MLASparseConfig(topk_length=t, sinks=s)) for t in (False, True) for s in (False, True)]
    # ... as SPARSE_DEFAULT_RULE's bf16 kernels (the seesaw step, the producer warpgroup), and the producer
    # warpgroup on the tile step (FA4MLIR_MLA_SPARSE_VARIANT=tile, _PRODUCER=warpgroup: bench mla's fa4mlir[pwg]);
    # the four above are the rule's f16 kernels' bf16 twins and bench mla's fa4mlir[tile] (the kernel before the rule)
    out += [(SPARSE, MLASparseConfig(topk_length=t, sinks=s, producer_warps=4, seesaw=w)) for w in (True, False)
            for t in (False, True) for s in (False, True)]
    # ... and SPARSE_DEFAULT_RULE's since [D-mla-sparse-pairfill-default]: the seesaw with FlashMLA's fill order
    # (seesaw_pairfill); the seesaw kernels above in tile order are bench mla's fa4mlir[seesaw_pwg]
    out += [(SPARSE, MLASparseConfig(topk_length=t, sinks=s, producer_warps=4, seesaw=True, pair_fill=True))
            for t in (False, True) for s in (False, True)]
    # ... and SPARSE_DEFAULT_RULE's since [D-mla-sparse-overlap-default]: the pair fill with the next pair's S_a under
    # P_b V (seesaw_overlap); the pair-fill kernels above are bench mla's fa4mlir[seesaw_pairfill]
    out += [(SPARSE, MLASparseConfig(topk_length=t, sinks=s, producer_warps=4, seesaw=True, pair_fill=True,
                                     overlap_s=True)) for t in (False, True) for s in (False, True)]
    # ... over FlashMLA's FP8 rows (kv [s_kv, 1, 656]), the same four
    out += [(SPARSE, MLASparseConfig(topk_length=t, sinks=s, kv_dtype="fp8")) for t in (False, True) for s in (False, True)]
    # the sparse decode (flash_mla_with_kvcache with indices) per dtype, with and without topk_length,
    # split (merged by the head-dim-512 combine above) and unsplit
    from .kernels.attention_mla_sparse_sm90_config import DECODE_DTYPES, DECODE_KERNEL, MLASparseDecodeConfig
    out += [(DECODE_KERNEL, MLASparseDecodeConfig(d, topk_length=t, split=s)) for d in DECODE_DTYPES
            for t in (False, True) for s in (False, True)]
    # ... the bf16 four as SPARSE_DEFAULT_RULE's (seesaw, producer warpgroup) and as the producer warpgroup on
    # the tile step (bench mla's fa4mlir[pwg]); the tile-step gather-warp four above are f16's default and bf16's A/B
    out += [(DECODE_KERNEL, MLASparseDecodeConfig("bf16", topk_length=t, split=s, producer_warps=4, seesaw=w))
            for w in (True, False) for t in (False, True) for s in (False, True)]
    out += [(DECODE_KERNEL, MLASparseDecodeConfig("bf16", topk_length=t, split=s, producer_warps=4, seesaw=True,
                                                  pair_fill=True, overlap_s=o))
            for o in (False, True) for t in (False, True) for s in (False, True)]
    # the sparse decode over FlashMLA's FP8 cache (is_fp8_kvcache=True with indices; bf16 q), the same four as
    # each variant: FP8_DECODE_DEFAULT_RULE's (the converter warpgroup) first, then "gather", "crossover",
    # "crossover_lean" (A/B) and "crossover_stasync" (FP8_DECODE_CROSSOVER_RULE's)
    from .kernels.attention_mla_sparse_sm90_config import FP8_DECODE_VARIANTS, fp8_decode_variant
    fp8 = [MLASparseDecodeConfig("bf16", kv_dtype="fp8", topk_length=t, split=s) for t in (False, True) for s in (False, True)]
    out += [(DECODE_KERNEL, fp8_decode_variant(c)) for c in fp8]
    out += [(DECODE_KERNEL, fp8_decode_variant(c, name)) for name in FP8_DECODE_VARIANTS for c in fp8
            if fp8_decode_variant(c, name) != fp8_decode_variant(c)]
    return out + _mla_prefill()


# (dtype, head_dim, causal, window_size, softcap, sinks) of the attention-varlen set: what
# tests/gpu/test_varlen_gpu.py runs (every head dim causal or not, f16, GQA, a window, softcap, sinks)
# and the interpreter's cases (tests/interpret_varlen.py)


def mla_sparse_sm100() -> list:
    from .kernels.attention_mla_sparse_sm100_config import KERNEL, MLASparseSm100Config
    return [(KERNEL, MLASparseSm100Config()), (KERNEL, MLASparseSm100Config(topk_length=True, sinks=True))]


def mla_sparse_sm100_pair() -> list:
    from .kernels.attention_mla_sparse_sm100_pair_config import KERNEL, MLASparsePairConfig
    return [(KERNEL, MLASparsePairConfig()), (KERNEL, MLASparsePairConfig(topk_length=True, sinks=True))]


def mla_decode_sm100() -> list:
    """flash_mla_with_kvcache's sm_100a kernels (attention/mla_sm100.py's route on compute capability 10.0):
    the MLA decode route of attention_fwd_sm100 over FlashMLA's bf16 page-64 cache and its FP8 one (656-byte
    rows) at heads 16, 32, 64 and 128, causal (MTP, seqlen_q > 1) or not, unsplit and split, and the
    head-dim-512 combine built for sm_100a (attention_combine_sm100); and the row gather's (pages of 8: no
    16-row TMA box) at 16 heads. The route compiles any other call it takes (f16, other page sizes)."""
    from .attention.mla_sm100 import ARCH, HEADS, kernel_config
    from .kernels.attention_decode_sm90_config import COMBINE_KERNEL_SM100, CombineConfig
    from .kernels.attention_sm100_config import KERNEL
    out = [(KERNEL, kernel_config("bf16", heads, 64, causal, split, fp8)) for fp8 in (False, True) for heads in HEADS
           for causal in (False, True) for split in (False, True)]
    out += [(KERNEL, kernel_config("bf16", 16, 8, causal, split)) for causal in (False, True) for split in (False, True)]
    return out + [(COMBINE_KERNEL_SM100, CombineConfig("bf16", 512, arch=ARCH))]


def mla_sparse_variant_entries() -> list:
    """The sparse MLA kernels' seesaw variant (attention_mla_sparse_sm90_config.SPARSE_VARIANTS, bf16 kv): the
    prefill as `bench mla`'s mla_sparse calls it and with topk_length and sinks, the decode unsplit (bench
    mla's mla_sparse_decode: one split) and split with topk_length, and the FP8 decode's converter kernel
    unsplit (mla_sparse_decode_fp8) (tests/gpu/test_mla_sparse_seesaw_gpu.py; the rule's kernels, the pair fill's
    and the overlap's, and the combine are the mla set's). (The producer warpgroup's L2 hints and the pair fill's
    pair-max and producer-fence variants were timed and rejected: notes/RESULTS.md [D-mla-sparse-seesaw-pwg-default],
    [R-mla-sparse-pairmax-timed], [R-mla-sparse-pfence].)"""
    from .kernels import attention_mla_sparse_sm90_config as sc
    sixteen = [(sc.KERNEL, sc.MLASparseConfig(seesaw=True)),
               (sc.KERNEL, sc.MLASparseConfig(topk_length=True, sinks=True, seesaw=True)),
               (sc.DECODE_KERNEL, sc.MLASparseDecodeConfig(seesaw=True)),
               (sc.DECODE_KERNEL, sc.MLASparseDecodeConfig(topk_length=True, split=True, seesaw=True))]
    return sixteen + [(sc.DECODE_KERNEL, sc.MLASparseDecodeConfig(kv_dtype="fp8", fp8_converter=True, seesaw=True))]


def mla_sparse_variants() -> list:
    """The mla set plus the sparse MLA seesaw kernels (mla_sparse_variant_entries): what `bench mla
    --workloads mla_sparse,mla_sparse_decode,mla_sparse_decode_fp8` times as fa4mlir, fa4mlir[tile], fa4mlir[pwg],
    fa4mlir[seesaw] and tests/gpu/test_mla_sparse_seesaw_gpu.py runs."""
    return mla() + mla_sparse_variant_entries()
