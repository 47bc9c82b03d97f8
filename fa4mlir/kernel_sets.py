"""Named sets of kernels that `python -m fa4mlir bundle --set NAME` compiles into a bundle.

An entry is (kernel name, config) or (kernel name, config, compile-option overrides such as
{"cubin_backend": "ptxas"}); without overrides a kernel compiles with its own options
(fa4mlir.compiler.resolve_options).

    gpu-tests   what tests/gpu needs (GEMM bf16/f16 on sm_90a, the sm_100a GEMM, the debug deadlock
                kernel, the attention set, the attention-fa4-pieces set, the attention-tiles
                variants, attention-masks, attention-softcap-sinks, attention-varlen, head-dims and mla;
                the decode kernels are their own set, `--set decode`, which bench holds too)
    attention   the sm_90a attention forward kernel: default_configs for every dtype x head_dim x
                causal (26 kernels: 20 over D64, 96, 128, 192, 256, and a persistent one for short key
                sequences at D64 and D128 non-causal and D64 causal) and for the unequal head dims
                HEAD_DIM_PAIRS (qk 192 / v 128: 4 more), compiled with ptxas (the kernel's own backend:
                honours setmaxnreg)
    attention-fa4-pieces
                the sm_90a attention kernel with FlashAttention-4's softmax pieces on (polynomial exp2
                for 1 in 4 exps, lazy rescale at 8): bf16 D128 full and causal, f16 D64 causal
    attention-sm100
                the sm_100a FlashAttention-4 forward kernel: every attention_sm100_config.configs()
                entry (bf16/f16, D64/D128, causal or not, GQA 4 for bf16), compiled through
                nvJitLink's LTO (the kernel's own backend: NVVM IR, whole-program, honours
                setmaxnreg); runs only on an sm_100 GPU
    attention-sm100-serving
                the sm_100a kernel's serving features (attention_sm100_config.serving_configs(), note
                "Serving"): sliding windows, a chunk, softcap with sinks and ragged lengths (varlen),
                bf16 D64/D128, GQA 2; what tests/gpu/test_attention_sm100_serving_gpu.py runs (only
                on an sm_100 GPU) and tests/test_attention_sm100_serving.py interprets
    attention-sm100-kvserving
                the sm_100a kernel's windows, chunks, softcap and sinks on the KV-cache routes
                (attention_sm100_kvserving.kvcache_serving_configs(), note "KV-cache serving"): the decode
                route over 16/64-row pages, the row gather (page 5), a contiguous cache and an e4m3 cache,
                and the paged prefill CTA, bf16 D128, GQA 4; what tests/gpu/test_attention_sm100_kvserving_gpu.py
                runs (only on an sm_100 GPU) and tests/test_attention_sm100_kvserving.py interprets
    mla-sparse-sm100
                the sm_100a sparse MLA prefill (attention_mla_sparse_sm100: TMA gather4, D_v split over
                two CTAs per token) without and with topk_length + sinks, through nvJitLink's LTO;
                tests/test_mla_sparse_sm100.py compiles and interprets them; runs only on an sm_100 GPU
    mla-sparse-sm100-pair
                the sm_100a sparse MLA prefill as FlashMLA's CTA pair (attention_mla_sparse_sm100_pair:
                cta_group::2 MMAs and gather4, Q in TMEM by tcgen05.cp) without and with topk_length + sinks;
                FA4MLIR_MLA_SPARSE_SM100=pair routes flash_mla_sparse_fwd to it; tests/test_mla_sparse_sm100_pair.py
                compiles and interprets them; runs only on an sm_100 GPU
    mla-decode-sm100
                flash_mla_with_kvcache's sm_100a kernels (attention/mla_sm100.py, compute capability 10.0):
                attention_fwd_sm100's MLA decode route over bf16 and FP8 caches of page 64, heads
                16/32/64/128, causal or not, unsplit and split, the row gather's at page 8 (16 heads), and
                the combine built for sm_100a; runs only on an sm_100 GPU
    attention-masks
                the sm_90a attention kernel's sliding-window and chunked variants that
                tests/gpu/test_attention_masks.py and the interpreter cases (tests/interpret_sm90.py
                MASK_CASES) run: MASK_CASES here, each with default_configs' kernels (windows and
                chunks are compile-time, so a bundle holds each size it serves)
    attention-softcap-sinks
                the sm_90a attention kernel's softcap and sinks variants that
                tests/gpu/test_attention_softcap_sinks.py and the interpreter cases (tests/interpret_sm90.py
                SCORE_CASES) run: SCORE_CASES here, each with default_configs' kernels (softcap and sinks
                are compile-time flags; the cap and the sink values are launch arguments). Holds the
                bench anchor softcap_sink's kernels (bf16 D128 causal, softcap and sinks)
    score-mods  the sm_90a attention kernel with score_mod / mask_mod functions compiled in
                (kernels/common/score_mod.py): the built-in examples ALiBi, a relative-position bias table,
                the document mask (alone and with ALiBi) and softcap as a score_mod, at the cases of
                fa4mlir/testing_score_mod.py CASES (what tests/gpu/test_score_mod_gpu.py and
                tests/test_interpret_score_mod.py run), each with default_configs' kernels. A kernel is
                found by its function's fingerprint: a user's own function goes into a bundle through
                score_mod_kernels (README, "score_mod and mask_mod")
    attention-tiles
                bf16 tile variants of the sm_90a attention kernel next to the defaults (bm 192 =
                three consumer warpgroups, bn), what bench/attention_probe.py times to pick TILES
    decode      the sm_90a decode kernels (flash_attn_with_kvcache): the decode kernel for contiguous
                caches and for paged ones by fetch (page sizes whose TMA boxes would hold under 8 rows,
                1..7 and odd ones, and FP8 pages under 16 rows: the cp.async gather; 8, 24, 40: 8-row
                TMA boxes; 16, 32, 48: TMA boxes of the page; 64 and its multiples: one box per tile),
                each as the split kernel and as its unsplit variant (calls of one split), the combine
                and the append (k=, v=) kernels, for the head dims, dtypes and page sizes
                tests/gpu/test_kvcache_gpu.py and `bench decode` run; and the mask and score-modifier
                variants of DECODE_MASK_CASES (window_size, attention_chunk, softcap, sinks: compile-time
                DecodeConfig fields, one kernel per window size), split and unsplit, with the combine's
                sink variant, what tests/gpu/test_kvcache_mask_gpu.py runs
    mla-sparse-variants
                the mla set plus the sparse MLA kernels' seesaw variants (FA4MLIR_MLA_SPARSE_VARIANT=seesaw,
                MLASparseConfig.seesaw / MLASparseDecodeConfig.seesaw, bf16 kv, with the gather warp,
                FA4MLIR_MLA_SPARSE_PRODUCER=warp): what `bench mla --workloads
                mla_sparse,mla_sparse_decode,mla_sparse_decode_fp8` times as fa4mlir[seesaw] (the converter kernel's FP8 row;
                the 16-bit rows' A/B backends) and tests/gpu/test_mla_sparse_seesaw_gpu.py runs
    decode-fp8-variants
                the decode set plus attention_decode_sm90_config.FP8_VARIANTS (the conversion-through-SMEM
                kernel "smem", swap AB "swapab" / "swapabw") of bf16 D128 FP8 caches, contiguous and paged 16, each
                scale granularity, split and unsplit, and "balanced" (the balanced split schedule: contiguous
                and pages of 16, 64, 128, with its combine; balanced3cta): what `bench decode` times
    decode-bf16-variants
                decode_dense's decode kernel (bf16 D128 contiguous, unsplit) and every bf16 TILE_VARIANTS entry
                of it (bn128s2, UNSPLIT_RULE's tiles; bn64s3, the tiles before it): what `bench decode
                --workloads decode_dense --decode-variant` times
    prefill     what `bench prefill`'s fa4mlir rows run today (fa4mlir/bench/prefill_bench.py): the sm_90a
                attention kernel, bf16 D128 causal (the dense rows; prefill_chunked on the contiguous
                cache) and its sliding window PREFILL_WINDOW = (4096, 0) (the sliding_window row: a
                mask object of kernels/common/mask_family.py through default_configs(..., mask=)), and
                the decode kernels of a bf16 D128 cache in pages of 64, split and unsplit, with their
                combine (prefill_chunked through flash_attn_with_kvcache), the causal softcap and
                sinks variants (the softcap and sink rows) and the bf16 D128 causal varlen kernel
                (prefill_varlen through flash_attn_varlen_func) with its compact-grid variant (varlen_compact:
                `bench prefill`'s fa4mlir[compact] and bench/varlen_ab.py --grids, FA4MLIR_VARLEN_GRID=compact)
                and its persistent variant over the compact tiles (varlen_compact with persistent:
                fa4mlir[persistent], FA4MLIR_VARLEN_GRID=persistent),
                the decode kernel's varlen_q variants of
                that cache, split and unsplit, and the varlen kernel over its pools (page_size 64: what
                prefill_chunked through flash_attn_varlen_func(page_table=) runs at max_seqlen_q >= 256)
                with its PREFILL_WINDOW variant (the prefill_chunked_window row),
                and the causal kernel with the built-in ALiBi score_mod (the alibi row)
    prefill-poly0, prefill-poly2, prefill-poly8
                A/B twins for `bench prefill --workloads softcap_sink,alibi`: the prefill set's kernels
                of those rows (dense causal, sinks, ALiBi) with the softcap kernel's exp2_poly_stride
                set to 0 (every exp2 on the SFU: the default before [D-sfu-poly]), 2 or 8 instead of
                the default SFU_MOD_POLY_STRIDE (4, in the prefill set). A bundle of one of these sets
                alone runs its twin (flash_attn_func takes the one kernel of the default's tiles).
                Each kernel also with score_bias_init=True [D-bias-init] (`--prefill-tiles
                "score_bias_init=True"`: the ALiBi bias in the S accumulator; the others' code unchanged)
    prefill-softcap-variants
                the variants of the softcap row's kernel (bf16 D128 causal, SOFTCAP_VARIANTS:
                the running-max kernel, softcap_fold_q, softcap_tanh, softcap_fixed_max and exp2_poly_stride
                0 / 2 / 3 / 4, [D-softcap-fold]) beside the prefill
                set's dense causal, sinks and default softcap kernels (the softcap rule's fixed-max one and
                the running-max one) of `bench prefill --workloads softcap_sink`; softcap_variant_specs() is
                its --prefill-tiles argument
    score-mods  the sm_90a attention kernel with the built-in score_mods and mask_mods of
                testing_score_mod.CASES (ALiBi, relative bias, document mask, softcap as a score_mod), what
                tests/gpu/test_score_mod_gpu.py and the interpreter cases run
    attention-varlen
                the sm_90a attention kernel's ragged-batch (varlen) variants that
                tests/gpu/test_varlen_gpu.py and the interpreter cases (tests/interpret_varlen.py) run:
                VARLEN_CASES here, each attention_sm90_config_varlen.varlen_config, VARLEN_CHUNK_CASES
                (attention_chunk=), VARLEN_MOD_CASES (score_mod= / mask_mod=, built-in and
                testing_varlen's functions) and VARLEN_HEAD_DIM_CASES (MLA prefill's qk 192 / v 128, D96,
                D192; both tests/gpu/test_varlen_mods_gpu.py); VARLEN_COMPACT_CASES' compact-grid twins
                (tests/gpu/test_varlen_compact_gpu.py); VARLEN_PERSISTENT_CASES' persistent compact
                kernels (tests/gpu/test_varlen_persistent_gpu.py); and flash_attn_varlen_func(page_table=)'s kernels that
                tests/gpu/test_varlen_paged_gpu.py runs: the decode kernel's varlen_q variants of
                VARLEN_PAGED_CASES, split and unsplit, with their combines, of
                VARLEN_PAGED_MASK_CASES (window_size, softcap, sinks with a page_table), and the paged
                prefill kernels (the varlen kernel over the pools, AttnConfig.page_size) of
                VARLEN_PAGED_PREFILL_CASES and VARLEN_PAGED_PREFILL_MOD_CASES (window_size,
                attention_chunk, softcap, sinks) that tests/gpu/test_varlen_paged_prefill_gpu.py runs
    mla         the sm_90a absorbed MLA decode kernels (flash_mla_with_kvcache, attention/mla.py): bf16 and
                f16 caches in pages of 64 and a bf16 one in pages of 16, each split and unsplit, as the M64
                kernel and as DEFAULT_RULE's swap-AB kernel at N 8, 16, 24 and 32 (seqlen_q x heads <= 32,
                e.g. 16 heads at seqlen_q 1 and 2; attention_mla_decode_sm90_config.DEFAULT_RULE), and the
                head-dim-512 combine (what tests/gpu/test_mla_decode_gpu.py and `bench mla`'s decode rows run),
                the FP8-latent-cache variants (is_fp8_kvcache, bf16, pages 64 and 16, split and unsplit),
                mla_prefill's kernel, bf16 qk 192 / v 128 causal (`bench mla`'s prefill row), and the sparse
                prefill (flash_mla_sparse_fwd, attention/mla_sparse.py) with and without topk_length and sinks,
                over a bf16 kv and FlashMLA's FP8 rows (tests/gpu/test_mla_sparse_gpu.py, both caches, and
                `bench mla`'s sparse rows), and the sparse decode
                (flash_mla_with_kvcache with indices, attention/mla_sparse_decode.py) in bf16 and f16, with
                and without topk_length, split and unsplit (tests/gpu/test_mla_sparse_decode_gpu.py and `bench
                mla`'s sparse decode row), and the same four over FlashMLA's FP8 cache (is_fp8_kvcache with
                indices, bf16) in every variant: the converter-warpgroup kernel FP8_DECODE_DEFAULT_RULE picks,
                the gather kernel (FA4MLIR_MLA_SPARSE_FP8_VARIANT=gather), the converter over a cluster of two
                CTAs (..._FP8_VARIANT=crossover) and its lean hand-offs (..._FP8_VARIANT=crossover_lean and
                crossover_stasync, FP8_DECODE_CROSSOVER_RULE's; tests/gpu/test_mla_sparse_decode_gpu.py's fp8 cases,
                tests/gpu/test_mla_sparse_decode_fp8_{conv,crossover}_gpu.py and `bench mla`'s
                mla_sparse_decode_fp8 row)
    bench       the attention, decode, prefill and mla sets, and the GEMM variants the benchmark times against
                torch.matmul
    sm90        the sm_90a GEMMs of gpu-tests and bench
    head-dims   what tests/gpu/test_attention_head_dims_gpu.py and the interpreter cases (tests/interpret_sm90.py
                HEAD_DIM_CASES) run: D96, D192 and qk 192 / v 128, bf16 and f16, causal or not (in the
                attention set too; gpu-tests holds it)
    demo        the default GEMM of each arch and the D128 bf16 attention kernels of each arch (what
                `python -m fa4mlir` compiles)
"""
from __future__ import annotations

import importlib

from .kernel_sets_decode import DECODE_FP8_VARIANT_CASES, decode_bf16_variants, decode_variant_entries  # noqa: F401
from .kernel_sets_mla import (MLA_CASES, mla, mla_decode_sm100, mla_sparse_sm100,  # noqa: F401
                              mla_sparse_sm100_pair, mla_sparse_variant_entries, mla_sparse_variants)  # (sets named in SETS)


def _gemm90(**kw):
    from .kernels.gemm_sm90 import GemmConfig
    return ("gemm_sm90", GemmConfig(**kw))


def _gemm100(**kw):
    from .kernels.gemm_sm100 import GemmConfig
    return ("gemm_sm100", GemmConfig(**kw))


def attention() -> list:
    """What flash_attn_func looks up in a bundle: the default_configs of every dtype x head_dim x
    causal (the persistent one for short key sequences next to the one for the rest)."""
    from .kernels.attention_sm90_config import DTYPES, HEAD_DIM_PAIRS, HEAD_DIMS, KERNEL, default_configs
    out = [(KERNEL, cfg) for dtype in DTYPES for head_dim in HEAD_DIMS
           for causal in (False, True) for cfg in default_configs(dtype, head_dim, causal)]
    return out + [(KERNEL, cfg) for dtype in DTYPES for d, dv in HEAD_DIM_PAIRS
                  for causal in (False, True) for cfg in default_configs(dtype, d, causal, head_dim_v=dv)]


# (dtype, head_dim, head_dim_v, causal) of the head-dims set: what tests/gpu/test_attention_head_dims_gpu.py
# runs and the interpreter's HEAD_DIM_CASES
HEAD_DIM_CASES = [(dtype, d, dv, causal) for dtype in ("bf16", "f16") for d, dv in ((96, 0), (192, 0), (192, 128))
                  for causal in (False, True)]


def head_dims() -> list:
    from .kernels.attention_sm90_config import KERNEL, default_configs
    return [(KERNEL, c) for dtype, d, dv, causal in HEAD_DIM_CASES
            for c in default_configs(dtype, d, causal, head_dim_v=dv)]


# (dtype, head_dim, causal, window_size, attention_chunk) of the attention-masks set: what
# tests/gpu/test_attention_masks.py calls flash_attn_func with (a left-only window, left and right,
# causal with a window, chunks that do not divide the sequence), and the interpreter's MASK_CASES
MASK_CASES = [
    ("bf16", 128, False, (256, -1), 0),
    ("bf16", 64, False, (128, 64), 0),
    ("bf16", 128, True, (200, -1), 0),
    ("bf16", 256, True, (300, -1), 0),
    ("bf16", 64, True, (-1, -1), 300),
    ("f16", 128, False, (-1, -1), 300),
    ("bf16", 128, True, (100, -1), 96),
    # tests/interpret_sm90.py MASK_CASES
    ("bf16", 64, False, (70, -1), 0),
    ("bf16", 64, False, (90, 30), 0),
    ("bf16", 128, True, (100, -1), 0),
    ("bf16", 64, True, (-1, -1), 100),
    ("bf16", 128, False, (-1, -1), 150),
    # tests/gpu/test_transformers_gpu.py: sliding_window 65 (Mistral, Gemma-2, gpt-oss families, D64)
    ("bf16", 64, True, (64, -1), 0),
]


def attention_masks() -> list:
    from .kernels.attention_sm90_config import KERNEL, default_configs
    from .kernels.common.mask_family import attention_mask
    out = []
    for dtype, d, causal, window, chunk in MASK_CASES:
        mask = attention_mask(causal, window, chunk)
        out += [(KERNEL, c) for c in default_configs(dtype, d, causal, mask=mask)]
    return out


# (dtype, head_dim, causal, window_size, softcap, sinks) of the attention-softcap-sinks set: what
# tests/gpu/test_attention_softcap_sinks.py runs (every head dim, causal or not, bf16 and f16, a window,
# both at once) and the interpreter's SCORE_CASES
SCORE_CASES = [
    ("bf16", 64, False, (-1, -1), True, False),
    ("bf16", 64, True, (-1, -1), True, False),
    ("bf16", 128, False, (-1, -1), True, False),
    ("bf16", 128, True, (-1, -1), True, False),
    ("bf16", 256, False, (-1, -1), True, False),
    ("bf16", 256, True, (-1, -1), True, False),
    ("f16", 128, True, (-1, -1), True, False),
    ("bf16", 128, True, (256, -1), True, False),
    ("bf16", 64, False, (-1, -1), False, True),
    ("bf16", 64, True, (-1, -1), False, True),
    ("bf16", 128, False, (-1, -1), False, True),
    ("bf16", 128, True, (-1, -1), False, True),
    ("bf16", 256, True, (-1, -1), False, True),
    ("f16", 64, False, (-1, -1), False, True),
    ("bf16", 128, True, (200, -1), False, True),
    ("bf16", 128, True, (-1, -1), True, True),
    # tests/gpu/test_transformers_gpu.py: Gemma-2's sliding layers (softcap) and gpt-oss's (sinks), D64
    ("bf16", 64, True, (64, -1), True, False),
    ("bf16", 64, True, (64, -1), False, True),
]


def attention_softcap_sinks() -> list:
    from .kernels.attention_sm90_config import KERNEL, default_configs
    from .kernels.common.mask_family import attention_mask
    out = []
    for dtype, d, causal, window, softcap, sinks in SCORE_CASES:
        mask = attention_mask(causal, window, 0)
        out += [(KERNEL, c) for c in default_configs(dtype, d, causal, mask=mask, softcap=softcap, sinks=sinks)]
    return out


FA4_PIECES = dict(exp2_poly_stride=4, rescale_threshold=8.0)


def attention_fa4_pieces() -> list:
    """default_config's tiles with the polynomial exp2 and lazy rescale on (tests/gpu checks their
    numerics; flash_attn_func never picks them while the default kernels are in the bundle)."""
    from dataclasses import replace

    from .kernels.attention_sm90_config import KERNEL, default_config
    cases = (("bf16", 128, False), ("bf16", 128, True), ("f16", 64, True))
    return [(KERNEL, replace(default_config(*case), **FA4_PIECES).validate()) for case in cases]


# (head_dim, causal, tiles) for attention-tiles, next to default_config's: every variant compiles
# with 0 spills (tests check it). D64: 128 or 192 query rows (two or three consumer warpgroups),
# GEMM turns on or off; D64 and D128: a third (and fourth) K/V stage. Registers: AttnConfig's auto split.
_D64 = dict(stages=2)
TILE_VARIANTS = [
    (64, False, dict(bm=128, bn=128, stages=2, pingpong=False)),
    (64, False, dict(bm=192, bn=128, pingpong=False, **_D64)),
    (64, False, dict(bm=192, bn=112, pingpong=True, **_D64)),
    (64, True, dict(bm=192, bn=128, pingpong=True, **_D64)),
    (64, True, dict(bm=192, bn=128, pingpong=False, **_D64)),
    (64, True, dict(bm=192, bn=112, pingpong=True, **_D64)),
    (64, False, dict(bm=192, bn=128, pingpong=True, **{**_D64, "stages": 3})),
    (64, True, dict(bm=128, bn=128, stages=3, pingpong=False)),
    (64, True, dict(bm=128, bn=128, stages=4, pingpong=False)),
    (128, False, dict(bm=128, bn=128, stages=3, pingpong=True)),
    (128, True, dict(bm=128, bn=128, stages=3, pingpong=True)),
    (64, False, dict(bm=128, bn=128, stages=2, pingpong=False, persistent=True)),
    (64, True, dict(bm=128, bn=128, stages=2, pingpong=False, persistent=True)),
    (64, True, dict(bm=128, bn=128, stages=3, pingpong=False, persistent=True)),
    (128, False, dict(bm=128, bn=128, stages=2, pingpong=True, persistent=True)),
    (128, True, dict(bm=128, bn=128, stages=2, pingpong=True, persistent=True)),
    # causal with 64-column KV blocks: half the masked diagonal, twice the blocks; slower [R-bn64-causal]
    (64, True, dict(bm=128, bn=64, stages=2, pingpong=False, persistent=True)),
    (128, True, dict(bm=128, bn=64, stages=2, pingpong=True, persistent=True)),
    # ping-pong once its turn barriers stopped costing uniform registers [D-turn-barriers]
    (64, True, dict(bm=128, bn=128, stages=2, pingpong=True)),
    (128, False, dict(bm=128, bn=176, stages=2, pingpong=True)),
    # the D128 non-causal one-tile-per-CTA tile before 144-key blocks [D-tiles-d128]
    (128, False, dict(bm=128, bn=128, stages=2, pingpong=True)),
    # D256: 128 x 80 without turns (the tile before 128 x 64 with turns), and 64 keys without turns [D-tiles-d256]
    (256, False, dict(bm=128, bn=80, stages=2, pingpong=False)),
    (256, True, dict(bm=128, bn=80, stages=2, pingpong=False)),
    (256, False, dict(bm=128, bn=64, stages=2, pingpong=False)),
    (256, True, dict(bm=128, bn=64, stages=2, pingpong=False)),
    # O rescaled under S_j, before P V is issued (FA4 CuTe's order at D256): no gain [D-rb-d256]
    (256, False, dict(bm=128, bn=64, stages=2, pingpong=True, rescale_before_pv=True)),
    (256, True, dict(bm=128, bn=64, stages=2, pingpong=True, rescale_before_pv=True)),
]


def tile_variants() -> list:
    """The TILE_VARIANTS as bundle entries (bf16, compiled like the defaults)."""
    from .kernels.attention_sm90_config import KERNEL, AttnConfig
    return [(KERNEL, AttnConfig(dtype="bf16", head_dim=d, causal=c, **t).validate())
            for d, c, t in TILE_VARIANTS]


def attention_tiles() -> list:
    """The bf16 defaults of the TILE_VARIANTS' head dims, then the variants: what
    bench/attention_probe.py times side by side."""
    from .kernels.attention_sm90_config import KERNEL, default_configs
    heads = sorted({(d, c) for d, c, _ in TILE_VARIANTS})
    return [(KERNEL, cfg) for d, c in heads for cfg in default_configs("bf16", d, c)] + tile_variants()


def attention_sm100() -> list:
    from .kernels.attention_sm100_config import KERNEL, configs
    return [(KERNEL, cfg) for cfg in configs()]


def attention_sm100_serving() -> list:
    from .kernels.attention_sm100_config import KERNEL, serving_configs
    return [(KERNEL, cfg) for cfg in serving_configs()]


def attention_sm100_kvserving() -> list:
    from .kernels.attention_sm100_config import KERNEL
    from .kernels.attention_sm100_kvserving import kvcache_serving_configs
    return [(KERNEL, cfg) for cfg in kvcache_serving_configs()]


def demo() -> list:
    from .kernels import attention_sm100_config as sm100
    from .kernels.attention_sm90_config import KERNEL, default_configs
    return [_gemm90(), _gemm100(), *((KERNEL, c) for c in default_configs("bf16", 128, False)),
            (sm100.KERNEL, sm100.FA4Config())]


# (dtype, head_dim, page sizes; None: contiguous) of the decode set: one page size per box-rows class
DECODE_CASES = [
    ("bf16", 128, (None, 1, 8, 16, 32, 64)),
    ("bf16", 64, (None, 1, 8, 16, 64)),
    ("bf16", 256, (None, 64)),
    ("f16", 128, (None, 64)),
    ("f16", 64, (None,)),
]


# FP8 (e4m3) caches of the decode set: (dtype, head_dim, page size, scale granularity)
DECODE_FP8_CASES = [("bf16", 128, page, grain) for page, grain in (
    (None, "tensor"), (None, "kv_head"), (None, "block"), (16, "tensor"), (16, "kv_head"), (16, "block"), (64, "kv_head"),
    (64, "block"), (1, "block"), (1, "kv_head"))]


def decode() -> list:
    """The decode kernels of DECODE_CASES and DECODE_FP8_CASES (default_config's tiles; FP8: the
    kernels FP8_DEFAULT_RULE picks for calls of at most SWAP_AB_ROWS packed query rows and of more),
    each split and unsplit (a call of one split runs the unsplit variant alone: `[D-decode-unsplit]`), a
    combine and two append kernels (contiguous, paged) per (dtype, head_dim)."""
    from .kernels.attention_decode_sm90_config import (APPEND_KERNEL, COMBINE_KERNEL, KERNEL, SWAP_AB_ROWS, balanced_by_rule,
                                                       AppendConfig, CombineConfig, balanced_rule_config, default_config)
    out = [(KERNEL, default_config(dtype, d, page, unsplit=unsplit)) for dtype, d, pages in DECODE_CASES
           for page in pages for unsplit in (False, True)]
    # UNSPLIT_RULE's kernel for an unsplit call of few packed rows over a contiguous cache ([D-decode-bn128-unsplit])
    out += [(KERNEL, cfg) for cfg in {default_config(dtype, d, None, unsplit=True, rows=1): None
                                      for dtype, d, pages in DECODE_CASES if None in pages}
            if (KERNEL, cfg) not in out]
    # FP8: FP8_DEFAULT_RULE's kernel for calls of at most SWAP_AB_ROWS packed query rows (swap AB where it is
    # built) and for more rows (the conversion-through-SMEM kernel), once each
    fp8 = {default_config(dtype, d, page, grain, unsplit=unsplit, rows=rows): None
           for dtype, d, page, grain in DECODE_FP8_CASES for unsplit in (False, True) for rows in (SWAP_AB_ROWS, None)}
    out += [(KERNEL, cfg) for cfg in fp8]
    # ... and BALANCED_RULE's: a paged cache's split swap-AB kernel on the balanced split schedule, with its combine
    balanced = [balanced_rule_config(cfg) for cfg in fp8 if balanced_by_rule(cfg)]
    out += [(KERNEL, cfg) for cfg in balanced]
    out += [(COMBINE_KERNEL, CombineConfig(t, d, balanced_bn=bn)) for t, d, bn in
            sorted({(c.dtype, c.head_dim, c.bn) for c in balanced})]
    combos = sorted({(dtype, d) for dtype, d, _ in DECODE_CASES} | {(t, d) for t in ("bf16", "f16") for d in (64, 128, 256)})
    out += [(COMBINE_KERNEL, CombineConfig(dtype, d)) for dtype, d in combos]
    out += [(APPEND_KERNEL, AppendConfig(dtype, d, paged)) for dtype, d in combos for paged in (False, True)]
    return out + decode_masks(DECODE_MASK_CASES)


# flash_attn_with_kvcache's mask and score-modifier variants in the decode set, what
# tests/gpu/test_kvcache_mask_gpu.py runs: (dtype, head_dim, page size (None: contiguous), causal,
# window_size, attention_chunk, softcap, sinks); a window or chunk size is compile-time (a bundle holds
# each size it serves), the cap and the sink values are launch data
DECODE_MASK_CASES = [
    ("bf16", 128, None, True, (127, -1), 0, False, False),    # a left window, contiguous (TMA)
    ("bf16", 128, 64, True, (127, -1), 0, True, True),        # gpt-oss's: window, softcap, sinks, paged
    ("bf16", 128, 16, True, (-1, -1), 0, False, True),        # sinks alone
    ("f16", 64, None, True, (-1, -1), 0, True, False),        # softcap alone
    ("bf16", 64, None, False, (64, 16), 0, False, False),     # two-sided, not causal
    ("bf16", 128, None, True, (-1, -1), 256, False, False),   # attention_chunk
    ("bf16", 128, 1, True, (127, -1), 0, False, False),       # a window over the cp.async gather
]
# flash_attn_varlen_func(page_table=)'s, in the attention-varlen set (tests/gpu/test_kvcache_mask_gpu.py too)
VARLEN_PAGED_MASK_CASES = [
    ("bf16", 128, 64, True, (127, -1), 0, True, True),
    ("bf16", 64, 16, False, (48, 8), 0, False, False),
]


def decode_masks(cases, varlen_q: bool = False) -> list:
    """The decode kernels of mask / score-modifier `cases` (DECODE_MASK_CASES' rows), split and
    unsplit (sinks in the unsplit kernel; the split one's combine takes them: CombineConfig(sinks=True)),
    as attention/kvcache.decode_variant picks them; ``varlen_q``: flash_attn_varlen_func's variants."""
    from dataclasses import replace
    from .kernels.attention_decode_sm90_config import COMBINE_KERNEL, KERNEL, CombineConfig, decode_mask, default_config
    out = []
    for dtype, d, page, causal, window, chunk, softcap, sinks in cases:
        _, mask = decode_mask(causal, window, chunk)
        for unsplit in (False, True):
            cfg = default_config(dtype, d, page, unsplit=unsplit, **mask, softcap=softcap, sinks=sinks and unsplit)
            out.append((KERNEL, replace(cfg, varlen_q=varlen_q)))
        if sinks:
            out.append((COMBINE_KERNEL, CombineConfig(dtype, d, sinks=True)))
    return out


def decode_fp8_variants() -> list:
    """The `decode` set plus its A/B variants (kernel_sets_decode.decode_variant_entries)."""
    return decode() + decode_variant_entries()


# bench prefill's sliding_window row: anchors_serving's window_size=(4096, 0), causal, B=2 S=16384 H=16 D=128
PREFILL_WINDOW = (4096, 0)


def prefill() -> list:
    """The sm_90a kernels bench prefill's fa4mlir rows need that exist (the docstring's `prefill`)."""
    from .kernels.attention_decode_sm90_config import COMBINE_KERNEL, CombineConfig
    from .kernels.attention_decode_sm90_config import KERNEL as DECODE_KERNEL
    from .kernels.attention_decode_sm90_config import default_config as decode_config
    from .kernels.attention_sm90_config import KERNEL, default_configs
    from .kernels.attention_sm90_config_varlen import varlen_config
    from .kernels.common import score_mod
    from .kernels.common.mask_family import attention_mask
    window = attention_mask(True, PREFILL_WINDOW, 0)
    out = [(KERNEL, c) for c in default_configs("bf16", 128, True)]
    out += [(KERNEL, c) for c in default_configs("bf16", 128, True, mask=window)]
    # softcap_sink's rows: causal with a softcap (the cap is a launch argument), causal with sinks
    out += [(KERNEL, c) for feature in ({"softcap": True}, {"sinks": True})
            for c in default_configs("bf16", 128, True, **feature)]
    out += score_mod_kernels("bf16", 128, True, score_mod=score_mod.alibi, aux=(("f32", 1),))   # the alibi row
    out += [(DECODE_KERNEL, decode_config("bf16", 128, 64, unsplit=unsplit)) for unsplit in (False, True)]
    out.append((KERNEL, varlen_config("bf16", 128, True)))   # prefill_varlen
    out.append((KERNEL, varlen_config("bf16", 128, True, compact=True)))   # prefill_varlen, fa4mlir[compact]
    out.append((KERNEL, varlen_config("bf16", 128, True, persistent=True)))   # prefill_varlen, fa4mlir[persistent]
    out += varlen_paged([("bf16", 128, 64)])                  # prefill_chunked (varlen with page_table)
    out += varlen_paged_prefill([("bf16", 128, True, 64)],        # prefill_chunked's paged prefill kernel,
                                [("bf16", 128, True, 64, PREFILL_WINDOW, 0, False, False)])   # and windowed
    return out + [(COMBINE_KERNEL, CombineConfig("bf16", 128))]


def prefill_poly(stride: int) -> list:
    """bench prefill's softcap_sink and alibi rows' kernels, the softcap one with exp2_poly_stride
    `stride` (the `prefill-poly<stride>` sets, docstring)."""
    from dataclasses import replace

    from .kernels.attention_sm90_config import KERNEL, default_configs
    from .kernels.common import score_mod
    out = [(KERNEL, c) for c in default_configs("bf16", 128, True) + default_configs("bf16", 128, True, sinks=True)]
    out += [(KERNEL, replace(c, exp2_poly_stride=stride).validate())
            for c in default_configs("bf16", 128, True, softcap=True)]   # the running-max and the fixed-max kernel
    out += score_mod_kernels("bf16", 128, True, score_mod=score_mod.alibi, aux=(("f32", 1),))
    # `--prefill-tiles score_bias_init=False|True` times every row of those workloads with the knob toggled
    # [D-bias-init]: the alibi kernel without it (its default has it), the other rows' twins with it (no affine
    # score_mod: today's code, another name)
    return out + [(k, replace(c, score_bias_init=not c.score_bias_init).validate()) for k, c in out]


# The softcap row's variants (AttnConfig fields) [D-softcap-fold]: the tanh input scale folded into Q, the fixed
# max, each exp2 split. Timed by bench prefill's --prefill-tiles (softcap_variant_specs()). Each entry names every
# softcap field (over RUNNING_MAX_FIELDS, the running-max kernel's), so a spec means the same kernel whichever
# kernel the softcap rule picks for the call (common/softcap_rule.py); the first is the running-max kernel itself
# (the default before the rule: A/B), fold + fixed max + stride 0 is the rule's bf16 default
RUNNING_MAX_FIELDS = dict(softcap_fold_q=False, softcap_tanh="", softcap_fixed_max=False, exp2_poly_stride=4)
SOFTCAP_VARIANTS = tuple({**RUNNING_MAX_FIELDS, **fields} for fields in (
    dict(),                                             # the running-max kernel (SFU_MOD_POLY_STRIDE 4)
    dict(softcap_fold_q=True),
    dict(softcap_fold_q=True, exp2_poly_stride=0),
    dict(softcap_fold_q=True, exp2_poly_stride=2),
    dict(softcap_fold_q=True, exp2_poly_stride=3),
    dict(softcap_fold_q=True, softcap_tanh="f16x2"),    # tanh.approx.f16x2: MUFU.TANH.F16, if it runs faster
    dict(softcap_fixed_max=True),                       # no row max: caps <= FIXED_MAX_CAP (54.4)
    dict(softcap_fold_q=True, softcap_fixed_max=True),
    dict(softcap_fold_q=True, softcap_fixed_max=True, exp2_poly_stride=0),   # the softcap rule's bf16 kernel
    dict(softcap_fold_q=True, softcap_fixed_max=True, exp2_poly_stride=2),
    dict(exp2_poly_stride=0),
    dict(exp2_poly_stride=2),
    dict(exp2_poly_stride=3),
))


def softcap_variant_specs() -> str:
    """SOFTCAP_VARIANTS as `bench prefill --prefill-tiles`' argument ('spec;spec', FA4MLIR_PREFILL_TILES
    specs)."""
    return ";".join(",".join(f"{k}={v!r}" for k, v in fields.items()) for fields in SOFTCAP_VARIANTS)


def prefill_softcap_variants() -> list:
    """The prefill-softcap-variants set (docstring): bench prefill softcap_sink's rows' default kernels
    (dense causal 8k, sinks, softcap: the rule's and the running-max one) and the softcap kernel with each of
    SOFTCAP_VARIANTS."""
    from dataclasses import replace

    from .kernels.attention_sm90_config import KERNEL, default_configs
    out = [(KERNEL, c) for feature in ({}, {"sinks": True}, {"softcap": True})
           for c in default_configs("bf16", 128, True, **feature)]
    out += [(KERNEL, replace(c, **fields).validate()) for fields in SOFTCAP_VARIANTS
            for c in default_configs("bf16", 128, True, softcap=True) if not c.softcap_fixed_max]
    return list(dict.fromkeys(out))


# (dtype, head_dim, page size) of flash_attn_varlen_func(page_table=)'s kernels in the attention-varlen
# set: what tests/gpu/test_varlen_paged_gpu.py runs (TMA boxes of a page, of 16 and of 8 rows, the
# cp.async gather of page sizes 1 and 3, every head dim, f16)
VARLEN_PAGED_CASES = [
    ("bf16", 128, 64),
    ("bf16", 64, 16),
    ("f16", 128, 24),
    ("bf16", 256, 32),
    ("bf16", 128, 1),
    ("bf16", 64, 3),
]


def varlen_paged(cases=None) -> list:
    """The decode kernel's varlen_q variants (flash_attn_varlen_func with a page_table: attention/
    varlen_paged.py), split and unsplit, of `cases` (default VARLEN_PAGED_CASES); the combines are
    the decode set's (CombineConfig of the dtype and head_dim)."""
    from dataclasses import replace
    from .kernels.attention_decode_sm90_config import KERNEL, default_config
    return [(KERNEL, replace(default_config(dtype, d, page, unsplit=unsplit), varlen_q=True))
            for dtype, d, page in (VARLEN_PAGED_CASES if cases is None else cases) for unsplit in (False, True)]


# (dtype, head_dim, causal, page size) of the paged PREFILL kernels (attention_sm90_config_varlen.paged_varlen_config,
# what flash_attn_varlen_func(page_table=) runs for max_seqlen_q >= 256: attention/varlen_paged.py note
# "Which kernel") in the attention-varlen set: what tests/gpu/test_varlen_paged_prefill_gpu.py runs (pages
# of 16: 8 boxes per tile, 64: 2, 128: 1; causal and not)
VARLEN_PAGED_PREFILL_CASES = [
    ("bf16", 128, True, 64),
    ("bf16", 128, True, 16),
    ("bf16", 128, True, 128),
    ("bf16", 128, False, 64),
    ("f16", 128, True, 64),
]


# ... and their mask / score-modifier variants, what the same test runs with window_size, attention_chunk,
# softcap and sinks: (dtype, head_dim, causal, page size, window_size, attention_chunk, softcap, sinks).
# A window or chunk size is compile-time (a bundle holds each size it serves; the test's windows bound its
# sequences, so varlen_paged.prefill_mask keeps them), the cap and the sink values are launch data
VARLEN_PAGED_PREFILL_MOD_CASES = [
    ("bf16", 128, True, 64, (1023, -1), 0, False, False),   # a sliding window (chunked prefill past it)
    ("bf16", 128, True, 64, (1023, -1), 0, True, True),     # gpt-oss's: window, softcap, sinks
    ("bf16", 128, True, 16, (-1, -1), 256, False, False),   # attention_chunk (Llama-4), 8 boxes per tile
    ("bf16", 128, False, 128, (300, 64), 0, False, True),   # two-sided, not causal, sinks
    ("f16", 128, True, 64, (-1, -1), 0, True, False),       # softcap alone
]


def paged_prefill_mod_config(case):
    """The paged prefill kernel of a VARLEN_PAGED_PREFILL_MOD_CASES row."""
    from .kernels.attention_sm90_config_varlen import paged_varlen_config
    from .kernels.common.mask_family import attention_mask
    dtype, d, causal, page, window, chunk, softcap, sinks = case
    mask = attention_mask(causal, window, chunk)
    return paged_varlen_config(dtype, d, causal, page, None if mask.is_legacy else mask, softcap=softcap, sinks=sinks)


def varlen_paged_prefill(cases=None, mod_cases=None) -> list:
    """The sm_90a varlen kernels over the paged pools (AttnConfig.page_size) of `cases` (default
    VARLEN_PAGED_PREFILL_CASES) and `mod_cases` (default VARLEN_PAGED_PREFILL_MOD_CASES)."""
    from .kernels.attention_sm90_config import KERNEL
    from .kernels.attention_sm90_config_varlen import paged_varlen_config
    out = [(KERNEL, paged_varlen_config(dtype, d, causal, page))
           for dtype, d, causal, page in (VARLEN_PAGED_PREFILL_CASES if cases is None else cases)]
    return out + [(KERNEL, paged_prefill_mod_config(c))
                  for c in (VARLEN_PAGED_PREFILL_MOD_CASES if mod_cases is None else mod_cases)]


VARLEN_CASES = [
    ("bf16", 64, False, (-1, -1), False, False),
    ("bf16", 64, True, (-1, -1), False, False),
    ("bf16", 128, False, (-1, -1), False, False),
    ("bf16", 128, True, (-1, -1), False, False),
    ("bf16", 256, False, (-1, -1), False, False),
    ("bf16", 256, True, (-1, -1), False, False),
    ("f16", 128, True, (-1, -1), False, False),
    ("bf16", 128, True, (50, -1), False, False),
    ("bf16", 128, False, (-1, -1), True, True),
    ("bf16", 128, True, (-1, -1), True, True),
]
# (dtype, head_dim, window_size, attention_chunk) of causal varlen kernels with a chunk (tests/gpu/
# test_varlen_gpu.py's attention_chunk cases, tests/interpret_varlen.py's)
VARLEN_CHUNK_CASES = [
    ("bf16", 64, (-1, -1), 100),
    ("bf16", 128, (60, -1), 96),
]


# (dtype, head_dim, causal, score_mod, mask_mod) of varlen kernels with functions compiled in, by
# fa4mlir.testing_varlen.varlen_mods' names: tests/gpu/test_varlen_mods_gpu.py and the interpreter's
# MOD_CASES (tests/interpret_varlen.py)
VARLEN_MOD_CASES = [
    ("bf16", 64, False, "alibi", ""),
    ("bf16", 128, True, "relative_bias", ""),
    ("bf16", 64, True, "softcap", ""),
    ("bf16", 64, False, "", "document_mask"),
    ("bf16", 128, True, "sequence_bias", ""),
    ("bf16", 128, False, "", "sequence_document"),
    ("bf16", 64, True, "alibi", "document_mask"),
    ("bf16", 128, False, "packed_bias", ""),
]
# (dtype, head_dim, head_dim_v (0: equal), causal) of varlen kernels at the head dims beyond 64/128/256:
# MLA prefill's qk 192 / v 128, D96, D192 (tests/gpu/test_varlen_mods_gpu.py, HEAD_DIM_CASES of
# tests/interpret_varlen.py)
VARLEN_HEAD_DIM_CASES = [
    ("bf16", 192, 128, True),
    ("bf16", 192, 128, False),
    ("f16", 192, 128, True),
    ("bf16", 96, 0, True),
    ("bf16", 96, 0, False),
    ("bf16", 192, 0, True),
    ("bf16", 192, 0, False),
]


def varlen_mod_config(case):
    """The varlen kernel of a VARLEN_MOD_CASES row: its functions' fingerprints and aux spec."""
    from .kernels.attention_sm90_config_varlen import varlen_config
    from .kernels.common.score_mod import aux_spec
    from .testing_varlen import varlen_aux, varlen_mods
    dtype, d, causal, score, mask = case
    smod, mmod = varlen_mods(score, mask)
    aux = [("f32" if a.dtype.kind == "f" else "i32", a.ndim) for a in varlen_aux(score, mask, (1,), (1,), 1)]
    return varlen_config(dtype, d, causal, score_mod=smod.fingerprint() if smod else "",
                         mask_mod=mmod.fingerprint() if mmod else "", aux=aux_spec(aux))


# (dtype, head_dim, causal) of the compact-grid varlen kernels (AttnConfig.varlen_compact) in the attention-varlen
# set: what tests/gpu/test_varlen_compact_gpu.py runs (the anchors' prefill_varlen kernel's twin, its non-causal
# one, which bench/varlen_ab.py's non-causal case times, and bm 192's)
VARLEN_COMPACT_CASES = [("bf16", 128, True), ("bf16", 128, False), ("bf16", 64, False)]
# (dtype, head_dim, causal) of the persistent compact varlen kernels (varlen_compact with persistent) in the
# attention-varlen set: tests/gpu/test_varlen_persistent_gpu.py; the anchors' prefill_varlen kernel's twin (D128
# non-causal's 128 x 144 and D64's bm 192 do not fit a persistent kernel: SMEM, registers) [D-varlen-persistent]
VARLEN_PERSISTENT_CASES = [("bf16", 128, True)]


def attention_varlen() -> list:
    from .kernels.attention_decode_sm90_config import COMBINE_KERNEL, CombineConfig
    from .kernels.attention_sm90_config import KERNEL
    from .kernels.attention_sm90_config_varlen import varlen_config
    from .kernels.common.mask_family import attention_mask
    out = []
    for dtype, d, causal, window, softcap, sinks in VARLEN_CASES:
        mask = attention_mask(causal, window, 0)
        out.append((KERNEL, varlen_config(dtype, d, causal, None if mask.is_legacy else mask, softcap=softcap,
                                          sinks=sinks)))
    for dtype, d, window, chunk in VARLEN_CHUNK_CASES:    # attention_chunk=
        out.append((KERNEL, varlen_config(dtype, d, True, attention_mask(True, window, chunk))))
    out += [(KERNEL, varlen_mod_config(case)) for case in VARLEN_MOD_CASES]      # score_mod= / mask_mod=
    out += [(KERNEL, varlen_config(dtype, d, causal, head_dim_v=dv)) for dtype, d, dv, causal in VARLEN_HEAD_DIM_CASES]
    out += [(KERNEL, varlen_config(dtype, d, causal, compact=True)) for dtype, d, causal in VARLEN_COMPACT_CASES]
    out += [(KERNEL, varlen_config(dtype, d, causal, persistent=True)) for dtype, d, causal in VARLEN_PERSISTENT_CASES]
    out += varlen_paged() + decode_masks(VARLEN_PAGED_MASK_CASES, varlen_q=True) + varlen_paged_prefill()
    combines = sorted({(dtype, d) for dtype, d, _ in VARLEN_PAGED_CASES} | {c[:2] for c in VARLEN_PAGED_MASK_CASES})
    return out + [(COMBINE_KERNEL, CombineConfig(dtype, d)) for dtype, d in combines]


def score_mod_kernels(dtype: str, head_dim: int, causal: bool, *, score_mod=None, mask_mod=None, aux=(),
                      mask=None) -> list:
    """The bundle entries of flash_attn_func(..., score_mod=, mask_mod=, aux_tensors=) for (dtype,
    head_dim, causal): default_configs' kernels with the functions' fingerprints (functions or
    ScoreMods; the fingerprint registers them for the build) and `aux`, the aux tensors' (dtype,
    rank) in order (('f32', 1) for ALiBi's slopes). Compile and write them on a machine with MLIR:
        write_bundle(path, [compile_kernel(*e) for e in score_mod_kernels(...)])"""
    from .kernels.attention_sm90_config import KERNEL, default_configs
    from .kernels.common import score_mod as sm
    smod, mmod = sm.as_mod(score_mod, "score"), sm.as_mod(mask_mod, "mask")
    return [(KERNEL, c) for c in default_configs(dtype, head_dim, causal, mask=mask,
                                                 score_mod=smod.fingerprint() if smod else "",
                                                 mask_mod=mmod.fingerprint() if mmod else "", aux=sm.aux_spec(aux))]


def score_mods() -> list:
    """The `score-mods` set: testing_score_mod.CASES, each with default_configs' kernels."""
    from .testing_score_mod import CASES, aux_arrays, case_mods
    out = []
    for case in CASES:
        smod, mmod = case_mods(case)
        aux = [("f32" if a.dtype.kind == "f" else "i32", a.ndim) for a in aux_arrays(case)]
        out += score_mod_kernels(case.dtype, case.head_dim, case.causal, score_mod=smod, mask_mod=mmod, aux=aux)
    return out


def gpu_tests() -> list:
    out = [_gemm90(dtype="bf16"), _gemm90(dtype="f16"), _gemm100()] + attention() + attention_fa4_pieces()
    out += tile_variants() + attention_masks() + attention_softcap_sinks() + attention_varlen() + head_dims() + mla()
    out += mla_sparse_variant_entries()
    out += score_mods()
    try:
        deadlock = importlib.import_module("fa4mlir.kernels.deadlock_sm90")
        out += deadlock.bundle_entries()
    except ModuleNotFoundError:
        pass
    return out


def sm90() -> list:
    return [_gemm90(dtype="bf16"), _gemm90(dtype="f16")] + bench()


def bench() -> list:
    """The attention kernels flash_attn_func picks, the decode and prefill sets, and GEMM variants
    (each also through the whole-program ptxas backend: a compile-option override)."""
    cfgs = [_gemm90(stages=4), _gemm90(stages=3), _gemm90(bn=128, stages=6)]
    return attention() + decode() + prefill() + mla() + cfgs + [(*c, {"cubin_backend": "ptxas"}) for c in cfgs]


SETS = {"attention-sm100": attention_sm100, "attention-sm100-serving": attention_sm100_serving,
        "attention-sm100-kvserving": attention_sm100_kvserving, "mla-decode-sm100": mla_decode_sm100,
        "mla-sparse-sm100": mla_sparse_sm100, "mla-sparse-sm100-pair": mla_sparse_sm100_pair, "demo": demo,
        "gpu-tests": gpu_tests, "bench": bench, "sm90": sm90, "attention": attention,
        "attention-fa4-pieces": attention_fa4_pieces, "attention-tiles": attention_tiles,
        "attention-masks": attention_masks, "attention-softcap-sinks": attention_softcap_sinks, "decode": decode,
        "decode-fp8-variants": decode_fp8_variants, "decode-bf16-variants": decode_bf16_variants,
        "mla-sparse-variants": mla_sparse_variants,
        "prefill": prefill, "mla": mla, "attention-varlen": attention_varlen, "head-dims": head_dims,
        "score-mods": score_mods, "prefill-softcap-variants": prefill_softcap_variants,
        **{f"prefill-poly{k}": (lambda k=k: prefill_poly(k)) for k in (0, 2, 8)}}


def configs(names: list[str]) -> list:
    unknown = [n for n in names if n not in SETS]
    if unknown:
        raise ValueError(f"unknown bundle set(s) {unknown}; known: {', '.join(SETS)}")
    seen, out = set(), []
    for n in names:
        for entry in SETS[n]():
            k = (entry[0], entry[1], tuple(sorted(entry[2].items())) if len(entry) > 2 else ())
            if k not in seen:
                seen.add(k)
                out.append(entry)
    return out
