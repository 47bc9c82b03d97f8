"""Configuration and launch contract of the sm_90a sparse MLA prefill kernel (FlashMLA's
flash_mla_sparse_fwd; MLIR-free: the host API, attention/mla_sparse.py, imports it).

    attention_mla_sparse_sm90   grid (s_q x h_q / 64, 1, 1): CTA x attends query token x // (h_q / 64)'s
                                64 heads (x % (h_q / 64)) x 64 .. to the KV rows its top-k indices
                                name, 64 rows a tile, gathered by cp.async; writes out [s_q, h_q, 512]
                                in q's dtype, max_logits and lse [s_q, h_q] float32.

    attention_mla_sparse_decode_sm90   the same kernel module built from MLASparseDecodeConfig: the sparse
                                decode over the paged latent cache (flash_mla_with_kvcache with indices;
                                the section at the end of this file), also over FlashMLA's FP8 cache
                                (kv_dtype "fp8": names ..._bf16_fp8..., is_fp8_kvcache=True)

`MLASparseConfig` fixes what changes the kernel's code: the dtype, whether the call passes
topk_length and attention sinks (each a tensor the kernel then reads), and whether kv is FlashMLA's
FP8 rows (kv_dtype "fp8": kv [s_kv, 1, 656] bytes, names ..._bf16_fp8...; the kernel's note "FP8
gather"). s_q, s_kv, h_q, topk and the strides are launch arguments.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .common.constants import LOG2E
from .common.fastdiv import divisor
from .common.fields import ConfigError, check_fields, field_defaults, key_leaving_out

KERNEL = "attention_mla_sparse_sm90"
DTYPES = ("bf16",)         # FlashMLA's sparse prefill takes bf16 only
D_QK = 576                 # latent 512 + rope 64 (q's and kv's head dim)
D_V = 512                  # V: kv's first 512 columns
BN = 64                    # gathered KV rows per tile; topk must be a multiple
TILE_M = 64                # query heads per CTA
CONSUMERS = 2              # warpgroups; each owns 256 of V's 512 columns of O
STAGES = 2                 # KV ring depth: Q (72 KiB) + 2 x 72 KiB tiles fill the SM's SMEM
SMEM_LIMIT = 227 * 1024
MBARRIER_BYTES = 8
HEADS = (64, 128)          # h_q FlashMLA's sm_90a kernel takes
# setmaxnreg budgets (attention_mla_decode_sm90, note "Design"): the launch gives each of the 384
# threads 168 registers (64 Ki / 384, in steps of 8): a pool of 64512, of which 240 x 256 consumer
# threads leave 24 x 128 to the gather's warpgroup. With 32 the sum (65536) exceeds the pool and the
# consumers' setmaxnreg.inc waits forever: the kernel hung on an H200 (the interpreter does not model
# the pool; register_pool_fits checks it)
MMA_REGS, LOAD_REGS = 240, 24
REGISTER_FILE = 65536
# FlashMLA's FP8 cache (kv_dtype "fp8"; the decode section's note "FP8 sparse SMEM plan")
KV_DTYPES = ("", "fp8")     # "": q's dtype; "fp8": FlashMLA's 656-byte FP8 rows
FP8_DTYPE = "bf16"          # FlashMLA's FP8 cache: q and out bf16
FP8_SCALE_GROUP = 128       # latent columns per float32 scale
# FlashMLA's FP8 token row: e4m3 latent, float32 scales, bf16 rope (656; common/mla_fp8.ROW_BYTES, which
# imports the DSL: the host API reads this one)
FP8_ROW_BYTES = D_V + 4 * (D_V // FP8_SCALE_GROUP) + 2 * (D_QK - D_V)
FP8_MAX_STAGES = 2
# The converter variant (MLASparseDecodeConfig.fp8_converter; note "FP8 converter plan"; the FP8 decode's
# default by FP8_DECODE_DEFAULT_RULE): a third
# warpgroup dequantizes straight from global memory into two bf16 tiles. 2 x 200 + 104 = 504 registers a
# thread of the three warpgroups: exactly the launch pool (384 threads x 168)
CONVERTER_MMA_REGS, CONVERTER_REGS = 200, 104
CONVERTER_BUFFERS = 2
# The producer-warpgroup gather (producer_warps=4; the kernel's note "Producer warpgroup"; FlashMLA's sm90 sparse
# prefill: phase1.cuh, config.h): warpgroup 2 whole gathers, 8 threads a row, and each ring stage is two halves
# with their own full / free barriers (K columns 0..255, chunks 0-3, and 256..575, chunks 4-8), so S starts on
# the first half while the second lands. FlashMLA's budgets: 2 x 216 + 72 = 504, the launch pool's share
PRODUCER_WARPS = (1, 4)
WG_MMA_REGS, WG_PRODUCER_REGS = 216, 72
HALF_CHUNKS = 4             # chunks (64 columns) of a stage's first half: V's columns of consumer warpgroup 0
# The host's A/B knob over a 16-bit kv (attention/mla_sparse.py, requested_producer): name -> producer_warps
# (the producer warpgroup with FlashMLA's L2 hints, "warpgroup_l2", was timed and rejected:
# notes/RESULTS.md [D-mla-sparse-seesaw-pwg-default])
PRODUCER_VARIANTS = {"warp": 1, "warpgroup": 4}
PRODUCER_ENV = "FA4MLIR_MLA_SPARSE_PRODUCER"


def register_pool_fits(threads: int, mma_regs: int, load_regs: int, consumers: int) -> tuple[bool, int, int]:
    """(fits, needed, pool): the setmaxnreg budgets of `consumers` warpgroups at mma_regs and one at
    load_regs against the launch allocation, threads x (REGISTER_FILE / threads rounded down to 8)."""
    pool = threads * (REGISTER_FILE // threads // 8 * 8)
    need = 128 * (consumers * mma_regs + load_regs)
    return need <= pool, need, pool


def fp8_plan() -> tuple[int, int]:
    """note "FP8 sparse SMEM plan": (staging stages, SMEM bytes) of a kernel over the FP8 cache: Q, the
    bf16 tile, the exchange, biases, row offsets and as many 656-byte-row stages as fit (at most
    FP8_MAX_STAGES)."""
    fixed = (TILE_M * D_QK * 2 + MLASparseConfig.tile_bytes() + 16 + MLASparseConfig.exchange_bytes()
             + MLASparseConfig.bias_bytes() + MLASparseConfig.rows_bytes())
    per_stage = BN * FP8_ROW_BYTES + 2 * MBARRIER_BYTES
    stages = min(FP8_MAX_STAGES, (SMEM_LIMIT - fixed) // per_stage)
    return stages, fixed + stages * per_stage


@dataclass(frozen=True)
class MLASparseConfig:
    dtype: str = "bf16"
    topk_length: bool = False      # the kernel reads topk_length [s_q] int32 (else every token sees topk)
    sinks: bool = False            # the kernel reads attention sinks [h_q] float32
    kv_dtype: str = ""             # "": q's dtype; "fp8": FlashMLA's 656-byte FP8 rows, kv [s_kv, 1, 656]
    producer_warps: int = 1        # 1: the gather warp; 4: the producer warpgroup with half stages (PRODUCER_WARPS)
    seesaw: bool = False           # FlashMLA's seesaw tile step (attention_mla_sparse_seesaw_sm90); opt-in,
                                   # 16-bit kv (SEESAW_VARIANT, FA4MLIR_MLA_SPARSE_VARIANT)
    pair_fill: bool = False        # seesaw + producer_warps=4: FlashMLA's fill order of a pair's halves (note
                                   # "Pair fill"; PAIR_FILL_VARIANT)
    overlap_s: bool = False        # pair_fill: warpgroup 0 issues the next pair's S_a under P_b V (note "Overlap";
                                   # OVERLAP_VARIANT, SPARSE_DEFAULT_RULE's over bf16)

    @property
    def fp8(self) -> bool:
        return self.kv_dtype == "fp8"

    @property
    def stages(self) -> int:
        return fp8_plan()[0] if self.fp8 else STAGES

    @property
    def regs(self) -> tuple[int, int]:
        """(consumer, producer warpgroup) setmaxnreg budgets."""
        return (WG_MMA_REGS, WG_PRODUCER_REGS) if self.producer_warps == 4 else (MMA_REGS, LOAD_REGS)

    def stage_bytes(self) -> int:
        """One ring stage: the tile, or (fp8) BN staged 656-byte rows."""
        return BN * FP8_ROW_BYTES if self.fp8 else self.tile_bytes()

    @property
    def params(self) -> tuple:
        tensors = [("kv", "ptr"), ("q", "ptr"), ("indices", "ptr")]
        if self.topk_length:
            tensors.append(("topk_length", "ptr"))
        if self.sinks:
            tensors.append(("sinks", "ptr"))
        return (*tensors, *OUTPUTS, *SCALARS)

    @property
    def threads(self) -> int:
        return 128 * (CONSUMERS + 1)      # warps 0-7: the consumer warpgroups, warp 8 (of warpgroup 2): the gather

    @staticmethod
    def tile_bytes() -> int:
        return BN * D_QK * 2

    @staticmethod
    def exchange_bytes() -> int:
        """attention_mla_decode_sm90, note "Exchange": each warpgroup's P half (64 x 32 16-bit) and
        row maxima, and the row sums."""
        return CONSUMERS * (TILE_M * BN // CONSUMERS * 2 + TILE_M * 4) + CONSUMERS * TILE_M * 4

    @staticmethod
    def bias_bytes() -> int:
        """Per stage, each gathered row's score bias (0 or -inf, float32): attention_mla_sparse_sm90,
        note "Bias"."""
        return STAGES * BN * 4

    @staticmethod
    def rows_bytes() -> int:
        """The gather's table of the tile's row offsets (int64 elements): attention_mla_sparse_sm90,
        note "Gather"."""
        return BN * 8

    def smem_bytes(self) -> int:
        if self.fp8:
            return fp8_plan()[1]
        if self.producer_warps == 4:    # two pipelines (the halves' barriers), no row table
            return (TILE_M * D_QK * 2 + STAGES * self.tile_bytes() + 4 * STAGES * MBARRIER_BYTES + 16
                    + self.exchange_bytes() + self.bias_bytes())
        return (TILE_M * D_QK * 2 + STAGES * self.tile_bytes() + 2 * STAGES * MBARRIER_BYTES + 16
                + self.exchange_bytes() + self.bias_bytes() + self.rows_bytes())

    def validate(self) -> "MLASparseConfig":
        check_fields(self, {"dtype": DTYPES, "kv_dtype": KV_DTYPES, "producer_warps": PRODUCER_WARPS})
        if self.dtype not in DTYPES:
            raise ConfigError(f"sparse MLA: dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise ConfigError(f"sparse MLA: kv_dtype must be \"\" (kv holds q's dtype) or \"fp8\" (FlashMLA's "
                              f"656-byte FP8 rows), got {self.kv_dtype!r}")
        check_producer(self)
        if self.fp8 and self.stages < 1:
            raise ConfigError("the FP8 cache's staging stage does not fit the SMEM (note \"FP8 sparse SMEM plan\")")
        _check_seesaw(self)
        check_pair_fill(self)
        check_overlap(self)
        if self.smem_bytes() > SMEM_LIMIT:
            raise ConfigError(f"sparse MLA needs {self.smem_bytes()} bytes of SMEM (> {SMEM_LIMIT})")
        fits, need, pool = register_pool_fits(self.threads, *self.regs, CONSUMERS)
        if not fits:
            raise ConfigError(f"setmaxnreg budgets need {need} registers (128 x ({CONSUMERS} x {self.regs[0]} + "
                              f"{self.regs[1]})), more than the launch allocation of {pool}: setmaxnreg.inc would "
                              f"wait forever")
        return self

    def key(self) -> dict:
        """The compile key; kv_dtype only where set (the bf16 kernels' keys as before it existed)."""
        return {"kernel": KERNEL, **key_leaving_out(self, VARIANT_FIELDS)}

    def name(self) -> str:
        return (f"{KERNEL}_{self.dtype}{'_fp8' if self.fp8 else ''}{'_pwg' if self.producer_warps == 4 else ''}"
                f"{'_topklen' if self.topk_length else ''}{'_sinks' if self.sinks else ''}"
                f"{'_seesaw' if self.seesaw else ''}{'_pairfill' if self.pair_fill else ''}"
                f"{'_overlap' if self.overlap_s else ''}")


VARIANT_FIELDS = field_defaults(MLASparseConfig, ("kv_dtype", "producer_warps", "seesaw", "pair_fill",
                                                  "overlap_s"))  # (common.fields)


def check_producer(cfg) -> None:
    """producer_warps (either config): 1 or 4, and 4 only over a 16-bit cache (the FP8 kernels keep their own
    producers: the gather warp's staging stage, the converter warpgroup)."""
    if cfg.producer_warps not in PRODUCER_WARPS:
        raise ConfigError(f"sparse MLA: producer_warps must be one of {PRODUCER_WARPS}, got {cfg.producer_warps!r}")
    if cfg.producer_warps == 4 and cfg.fp8:
        raise ConfigError("sparse MLA: producer_warps=4 (the producer warpgroup) is built for a 16-bit cache, "
                          "not kv_dtype=\"fp8\"")

# The sparse kernels' variants (prefill and decode; FA4MLIR_MLA_SPARSE_VARIANT, bench mla's backend
# fa4mlir[seesaw]): name -> the config fields it sets. "seesaw": FlashMLA's seesaw tile step
# (attention_mla_sparse_seesaw_sm90), built for the 16-bit cache and the unsplit FP8 decode's converter kernel
# (SMEM and registers as the default's).
SEESAW_VARIANT = "seesaw"
TILE_VARIANT = "tile"       # the shared tile step (common/mla_sm90.py), both warpgroups on one tile
# "seesaw_pairfill": the seesaw with FlashMLA's fill order of a pair's halves (note "Pair fill"); it needs the
# producer warpgroup (PRODUCER_VARIANTS "warpgroup"); SPARSE_DECODE_DEFAULT_RULE's variant over bf16
PAIR_FILL_VARIANT = "seesaw_pairfill"
# "seesaw_overlap": the pair fill with warpgroup 0 issuing the next pair's S_a under its P_b V (note "Overlap";
# SPARSE_DEFAULT_RULE's variant over bf16, the producer warpgroup as PAIR_FILL_VARIANT)
OVERLAP_VARIANT = "seesaw_overlap"
# (the pair fill's "seesaw_pairmax", "seesaw_overlap_pairmax" and "seesaw_overlap_pfence" were timed and rejected:
# notes/RESULTS.md [R-mla-sparse-pairmax-timed], [R-mla-sparse-pfence])
PAIR_FILL_VARIANTS = (PAIR_FILL_VARIANT, OVERLAP_VARIANT)  # (producer_warps=4)
SPARSE_VARIANTS = {"default": {}, TILE_VARIANT: {}, SEESAW_VARIANT: {"seesaw": True},
                   PAIR_FILL_VARIANT: {"seesaw": True, "pair_fill": True},
                   OVERLAP_VARIANT: {"seesaw": True, "pair_fill": True, "overlap_s": True}}
# Note "Pair fill" (pair_fill=True; attention_mla_sparse_seesaw_sm90's note of that name; FlashMLA's sm90 sparse
# prefill, phase1.cuh): the producer warpgroup fills a pair (a = j, b = j + 1) of tiles half by half in the
# order its readers need them, a's columns 0..255, b's 256..575, a's 256..575, b's 0..255 (FlashMLA: V0L, V1R,
# V0R, V1L), and warpgroup 1 issues S_b over b's second half first; it waits for a's half 256..575 (its V and
# P_a) only after S_b, so the two warpgroups' S GEMMs start one half apart rather than a whole tile.
# Note "Overlap" (overlap_s=True, OVERLAP_VARIANT; attention_mla_sparse_seesaw_sm90's note of that name): on
# the pair fill, warpgroup 0 issues the next pair's S_a right after its P_b V, before that P V retires (FlashMLA's
# warpgroup 0 order), rather than retiring P_b V and releasing b before the next pair's S_a.

# SPARSE_DEFAULT_RULE, what a call runs with neither knob set (FA4MLIR_MLA_SPARSE_VARIANT, _PRODUCER unset or
# "default"; each knob, when set, replaces its half): kv dtype -> (SPARSE_VARIANTS name, PRODUCER_VARIANTS name).
# bf16: FlashMLA's whole recipe, the seesaw tile step with the producer warpgroup and half stages, timed on an
# nvidia-h200 against the kernel before the rule (notes/RESULTS.md [D-mla-sparse-seesaw-pwg-default]): sparse
# prefill 485.4 vs 390.0 TFLOP/s, sparse decode 411.3 vs 335.2. f16 (its producer-warpgroup kernels were never
# timed) and FlashMLA's FP8 rows (the producer warpgroup is built for a 16-bit kv; the FP8 seesaw was 10% slower,
# [R-mla-sparse-seesaw]) keep the tile step and the gather warp. Since [D-mla-sparse-pairfill-default] the bf16
# seesaw fills a pair's halves in FlashMLA's order (PAIR_FILL_VARIANT, note "Pair fill"): nvidia-h200, same process,
# sparse prefill 498.4 vs 480.9 TFLOP/s, sparse decode 428.6 vs 409.3 (the seesaw in tile order stays the A/B
# backend fa4mlir[seesaw_pwg]). Since [D-mla-sparse-overlap-default] warpgroup 0 also issues the next pair's S_a
# under its P_b V (OVERLAP_VARIANT, note "Overlap"; bit-identical to the pair fill): nvidia-h200, same process, three
# runs, sparse prefill 493.2 / 496.6 / 492.5 vs 484.1 / 488.4 / 486.6 TFLOP/s (+1.2-1.9%; a fourth, 487.1 vs 480.7); the
# pair fill stays the A/B backend fa4mlir[seesaw_pairfill]. The sparse decode (SPARSE_DECODE_DEFAULT_RULE) keeps the
# pair fill: the overlap read 427.8 / 429.1 / 429.8 / 426.9 against 429.7 / 431.6 / 428.7 / 429.6 in the same runs
# (-0.9% to +0.3%, mean -0.4%), no gain.
SPARSE_DEFAULT_RULE = {"bf16": (OVERLAP_VARIANT, "warpgroup")}
SPARSE_DECODE_DEFAULT_RULE = {"bf16": (PAIR_FILL_VARIANT, "warpgroup")}
SPARSE_DEFAULT = (TILE_VARIANT, "warp")


def default_sparse(dtype: str, fp8: bool) -> tuple:
    """SPARSE_DEFAULT_RULE's (variant, producer) for a call over a ``dtype`` (q's) kv, or FlashMLA's FP8 rows."""
    return SPARSE_DEFAULT if fp8 else SPARSE_DEFAULT_RULE.get(dtype, SPARSE_DEFAULT)
SPARSE_VARIANT_ENV = "FA4MLIR_MLA_SPARSE_VARIANT"


def _check_seesaw(cfg) -> None:
    if not isinstance(cfg.seesaw, bool):
        raise ConfigError(f"seesaw must be a bool, got {cfg.seesaw!r}")
    if cfg.seesaw and cfg.fp8 and not (getattr(cfg, "fp8_converter", False) and not cfg.split):
        raise ConfigError("the sparse seesaw schedule is built for the 16-bit kv and for the unsplit FP8 decode's "
                          "converter kernel (split, its consumers at setmaxnreg 200 spilled), not this FP8 config")


def sparse_variant(cfg, name: str = "default"):
    """The sparse kernel ``cfg`` (MLASparseConfig or MLASparseDecodeConfig) as variant ``name`` of
    SPARSE_VARIANTS ("default": SPARSE_DEFAULT_RULE's for cfg's dtype, SPARSE_DECODE_DEFAULT_RULE's for a 16-bit
    decode; its pair fill (and overlap) is the producer warpgroup's
    fill order, so with the gather warp (FA4MLIR_MLA_SPARSE_PRODUCER=warp) the rule's step is the seesaw in tile
    order); ConfigError for an unknown name or a variant not built for cfg (seesaw: see _check_seesaw)."""
    if name not in SPARSE_VARIANTS:
        raise ConfigError(f"unknown sparse MLA variant {name!r}; known: {', '.join(SPARSE_VARIANTS)}")
    if name == "default":
        name = default_sparse(cfg.dtype, cfg.fp8)[0]
        if isinstance(cfg, MLASparseDecodeConfig) and not cfg.fp8:     # the decode's own half of the rule
            name = SPARSE_DECODE_DEFAULT_RULE.get(cfg.dtype, SPARSE_DEFAULT)[0]
        if name in PAIR_FILL_VARIANTS and cfg.producer_warps != 4:
            name = SEESAW_VARIANT
    out = replace(cfg, **{"seesaw": False, "pair_fill": False, "overlap_s": False, **SPARSE_VARIANTS[name]})
    _check_seesaw(out)
    check_pair_fill(out)
    check_overlap(out)
    return out


def check_pair_fill(cfg) -> None:
    """pair_fill (note "Pair fill"): a bool, set only with the seesaw over a 16-bit kv and the producer warpgroup."""
    if not isinstance(cfg.pair_fill, bool):
        raise ConfigError(f"pair_fill must be a bool, got {cfg.pair_fill!r}")
    if cfg.pair_fill and not (cfg.seesaw and cfg.producer_warps == 4 and not cfg.fp8):
        raise ConfigError(f"pair_fill=True (variant {PAIR_FILL_VARIANT!r}) orders the producer warpgroup's half stages "
                          f"for the seesaw over a 16-bit kv: it needs seesaw=True, producer_warps=4 (the producer "
                          f"'warpgroup') and kv_dtype \"\"; got seesaw={cfg.seesaw}, "
                          f"producer_warps={cfg.producer_warps}, kv_dtype={cfg.kv_dtype!r}")


def check_overlap(cfg) -> None:
    """overlap_s (note "Overlap"): a bool, set only on the pair fill (seesaw, producer warpgroup, 16-bit kv)."""
    if not isinstance(cfg.overlap_s, bool):
        raise ConfigError(f"overlap_s must be a bool, got {cfg.overlap_s!r}")
    if cfg.overlap_s and not cfg.pair_fill:
        raise ConfigError(f"overlap_s=True (variant {OVERLAP_VARIANT!r}) is built on the pair fill: it needs "
                          f"pair_fill=True (seesaw=True, producer_warps=4, a 16-bit kv)")


# ----------------------------------------------------------------------------------------------
# Launch contract: (name, kind) in kernel-parameter order (the optional tensors in `params`)
# ----------------------------------------------------------------------------------------------

OUTPUTS = (("out", "ptr"), ("max_logits", "ptr"), ("lse", "ptr"))
SCALARS = (("s_q", "i32"), ("s_kv", "i32"), ("heads", "i32"), ("topk", "i32"), ("scale", "f32"),
           ("scale_log2", "f32"), ("q_stride_s", "i64"), ("q_stride_h", "i64"), ("kv_stride_s", "i64"),
           ("indices_stride_s", "i64"), ("out_stride_s", "i64"), ("out_stride_h", "i64"),
           ("head_blocks_mul", "i32"), ("head_blocks_shr", "i32"))


def launch_args(cfg: MLASparseConfig, tensors: dict, *, s_q: int, s_kv: int, heads: int, topk: int,
                softmax_scale: float, q_strides: tuple, kv_stride: int, indices_stride: int,
                out_strides: tuple | None = None) -> dict:
    """The kernel's parameters by name (cfg.params): ``tensors`` by the contract's tensor names
    (addresses, arrays, TensorRefs); q's (token, head) and out's element strides, kv's and the
    indices' token strides (unit stride along the last dim). max_logits and lse are [s_q, heads]
    contiguous."""
    args = {n: tensors[n] for n, kind in cfg.params if kind == "ptr"}
    out_strides = out_strides or (heads * D_V, D_V)
    args.update(s_q=s_q, s_kv=s_kv, heads=heads, topk=topk, scale=float(softmax_scale),
                scale_log2=float(softmax_scale) * LOG2E, q_stride_s=int(q_strides[0]), q_stride_h=int(q_strides[1]),
                kv_stride_s=int(kv_stride), indices_stride_s=int(indices_stride),
                out_stride_s=int(out_strides[0]), out_stride_h=int(out_strides[1]))
    args["head_blocks_mul"], args["head_blocks_shr"] = divisor(heads // TILE_M)
    missing = [n for n, _ in cfg.params if n not in args]
    if missing:
        raise KeyError(f"launch arguments missing: {missing}")
    return {n: args[n] for n, _ in cfg.params}


def grid(s_q: int, heads: int) -> tuple[int, int, int]:
    """x = token x head block, the head block fastest (a token's two blocks gather the same rows)."""
    return (s_q * (heads // TILE_M), 1, 1)


def flops(s_q: int, heads: int, topk: int, topk_length=None) -> int:
    """FlashMLA's count (tests/lib.py count_flop_and_mem_vol): 2 x attended pairs x heads x (576 + 512),
    attended = s_q x topk, or the sum of topk_length when given."""
    attended = s_q * topk if topk_length is None else int(sum(int(n) for n in topk_length))
    return 2 * attended * heads * (D_QK + D_V)


# ----------------------------------------------------------------------------------------------
# The sparse decode (FlashMLA's flash_mla_with_kvcache with indices): the same kernel, note "Decode"
# ----------------------------------------------------------------------------------------------
#
#     attention_mla_sparse_decode_sm90   grid (tokens x head_blocks, num_splits, 1), tokens = batch x
#                                 seqlen_q, head_blocks = ceil(h_q / 64): CTA (x, y) attends query token
#                                 x // head_blocks's heads (x % head_blocks) x 64 .. (rows past h_q are
#                                 zero and never stored) to split y's share of the KV tiles its top-k
#                                 indices name in the paged cache; unsplit it writes out [batch, seqlen_q,
#                                 h_q, 512] in q's dtype and lse [batch, h_q, seqlen_q], split the float32
#                                 partials attention_combine_sm90 (head dim 512) merges.
#
# The kernel is the sparse prefill's (attention_mla_sparse_sm90: the same cp.async row gather, the same
# consumers, its setmaxnreg 240 / 24 and register_pool_fits story); this config adds what changes its
# code: q's dtype (bf16 or f16: the latent cache holds q's dtype), topk_length [batch] and the split.
# The indices are FlashMLA's: page x page_size + offset, a row of the cache viewed as [num_pages x
# page_size, 576] (kv_stride_s = the cache's token stride; the host checks pages are evenly strided).
#
# The FP8 cache (`kv_dtype="fp8"`, FlashMLA's 656-byte V32 layout: flash_mla_with_kvcache(is_fp8_kvcache=True,
# indices=...)): q and out bf16; the gather lands each named row's 656 bytes by cp.async in a staging stage
# and the consumers dequantize it into the bf16 tile they already read (attention_mla_sparse_sm90, note
# "FP8 gather"); the consumers' GEMMs, the split and the combine stay as they are. Its rows are addressed
# by page and offset (FlashMLA's stride_kv_block, stride_kv_row: its quantize_k_cache pads each page by
# one row), so four scalars follow the contract's (DECODE_FP8_SCALARS).
#
# Note "FP8 sparse SMEM plan": Q (72 KiB) + the bf16 tile (72 KiB) + the exchange (9 KiB) + the biases
# and row offsets (1 KiB) leave 73 KiB of the 227: one staging stage of 64 x 656-byte rows (41 KiB)
# fits, two do not (`stages` derives the count). The biases keep two slots, indexed by the tile's
# parity rather than the stage: the consumers release the stage right after dequantizing it and read
# its biases later, in the softmax.
#
# Note "FP8 converter plan" (fp8_converter=True, FP8_DECODE_DEFAULT_RULE's default; FlashMLA's sm90 sparse_fp8 decode structure): no
# staging stage. Warpgroup 2 (warps 8-11, setmaxnreg CONVERTER_REGS) looks each row's index up itself,
# loads its e4m3 bytes, scales and rope straight from global memory into registers, dequantizes and
# stores bf16 into one of two bf16 tiles, the 16-bit kernel's ring (kv_pipe: full / empty mbarrier per
# tile, 128 producer arrivals); the consumer warpgroups (setmaxnreg CONVERTER_MMA_REGS) run the 16-bit
# kernel's tile step on the other tile. SMEM: Q 72 KiB + 2 x 72 KiB tiles + the exchange (9 KiB) + two
# bias slots (0.5 KiB) + q_slot + 4 mbarriers = 230,960 of 232,448 bytes: two full 64-row tiles fit.

DECODE_KERNEL = "attention_mla_sparse_decode_sm90"
DECODE_DTYPES = ("bf16", "f16")
DECODE_MIN_HEADS, DECODE_MAX_HEADS = 1, 128   # FlashMLA's: 64 or 128; fewer heads are masked rows of a tile
DECODE_MIN_TOPK, DECODE_MAX_TOPK = BN, 2048 * 8


@dataclass(frozen=True)
class MLASparseDecodeConfig:
    dtype: str = "bf16"
    kv_dtype: str = ""              # "": q's dtype; "fp8": FlashMLA's 656-byte FP8 rows (module section "FP8")
    topk_length: bool = False       # the kernel reads topk_length [batch] int32 (else every token sees topk)
    split: bool = False             # float32 partials for the combine (else the final out and lse)
    fp8_converter: bool = False     # fp8 only: the converter warpgroup (note "FP8 converter plan"; the host's
                                    # default by FP8_DECODE_DEFAULT_RULE, fp8_decode_variant)
    producer_warps: int = 1         # 16-bit cache: 1 the gather warp, 4 the producer warpgroup (MLASparseConfig's)
    seesaw: bool = False            # MLASparseConfig.seesaw's tile step (SPARSE_VARIANTS): 16-bit kv, or fp8 with
                                    # fp8_converter and no split
    pair_fill: bool = False         # MLASparseConfig.pair_fill's fill order (seesaw, producer_warps=4, 16-bit kv)
    overlap_s: bool = False         # MLASparseConfig.overlap_s's (pair_fill; OVERLAP_VARIANT, opt-in)
    crossover: bool = False         # fp8_converter only: FlashMLA's crossover, the two 64-head CTAs of a token as a
                                    # cluster of 2, each converting half of every tile into both (h_q a multiple of
                                    # 128; attention_mla_sparse_crossover_sm90; FP8_DECODE_VARIANTS' "crossover")
    crossover_lean: bool = False    # crossover only: the consumers' release into the peer at CTA scope (its note
                                    # "Lean hand-off"; FP8_DECODE_VARIANTS' "crossover_lean", opt-in)
    crossover_stasync: bool = False  # crossover_lean only: the converter hands the peer's half over by st.async
                                    # onto a ready barrier (note "st.async hand-off"; "crossover_stasync",
                                    # FP8_DECODE_CROSSOVER_RULE's)

    @property
    def fp8(self) -> bool:
        return self.kv_dtype == "fp8"

    @property
    def regs(self) -> tuple[int, int]:
        """(consumer, producer warpgroup) setmaxnreg budgets."""
        if self.fp8_converter:
            return CONVERTER_MMA_REGS, CONVERTER_REGS
        return (WG_MMA_REGS, WG_PRODUCER_REGS) if self.producer_warps == 4 else (MMA_REGS, LOAD_REGS)

    @property
    def params(self) -> tuple:
        tensors = [("kv", "ptr"), ("q", "ptr"), ("indices", "ptr")]
        if self.topk_length:
            tensors.append(("topk_length", "ptr"))
        scalars = (*DECODE_SCALARS, *DECODE_FP8_SCALARS) if self.fp8 else DECODE_SCALARS
        return (*tensors, *(DECODE_SPLIT_OUTPUTS if self.split else DECODE_OUTPUTS), *scalars)

    @property
    def threads(self) -> int:
        return MLASparseConfig().threads

    @staticmethod
    def tile_bytes() -> int:
        """The 16-bit tile the wgmmas read (the ring stage itself unless fp8)."""
        return MLASparseConfig.tile_bytes()

    def stage_bytes(self) -> int:
        """One ring stage: the tile, or (fp8) BN staged 656-byte rows."""
        return BN * FP8_ROW_BYTES if self.fp8 else self.tile_bytes()

    @property
    def stages(self) -> int:
        """note "FP8 sparse SMEM plan" (fp8_plan); the converter: its two bf16 tiles; else STAGES."""
        if self.fp8_converter:
            return CONVERTER_BUFFERS
        return fp8_plan()[0] if self.fp8 else STAGES

    # the prefill's buffers, unchanged (fp8: the biases' two slots by tile parity, note "FP8 sparse SMEM plan")
    exchange_bytes = staticmethod(MLASparseConfig.exchange_bytes)
    bias_bytes = staticmethod(MLASparseConfig.bias_bytes)
    rows_bytes = staticmethod(MLASparseConfig.rows_bytes)

    def smem_bytes(self) -> int:
        if self.fp8_converter:      # the 16-bit kernel's plan: Q, two bf16 tiles, their biases (no row table)
            return MLASparseConfig().smem_bytes() - self.rows_bytes()
        return MLASparseConfig(kv_dtype=self.kv_dtype, producer_warps=self.producer_warps).smem_bytes()

    def validate(self) -> "MLASparseDecodeConfig":
        check_fields(self, {"dtype": DECODE_DTYPES, "kv_dtype": KV_DTYPES, "producer_warps": PRODUCER_WARPS})
        if self.dtype not in DECODE_DTYPES:
            raise ConfigError(f"sparse MLA decode: dtype must be one of {DECODE_DTYPES}, got {self.dtype!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise ConfigError(f"sparse MLA decode: kv_dtype must be \"\" (the cache holds q's dtype) or \"fp8\" "
                              f"(FlashMLA's 656-byte FP8 rows), got {self.kv_dtype!r}")
        if self.fp8 and self.dtype != FP8_DTYPE:
            raise ConfigError(f"sparse MLA decode over the FP8 cache is built for q in {FP8_DTYPE!r} (FlashMLA's), got "
                              f"dtype={self.dtype!r}")
        if self.fp8 and self.stages < 1:
            raise ConfigError("the FP8 cache's staging stage does not fit the SMEM (note \"FP8 sparse SMEM plan\")")
        if not isinstance(self.fp8_converter, bool):
            raise ConfigError(f"fp8_converter must be a bool, got {self.fp8_converter!r}")
        if self.fp8_converter and not self.fp8:
            raise ConfigError("fp8_converter=True dequantizes FlashMLA's FP8 cache: it needs kv_dtype=\"fp8\"")
        if not isinstance(self.crossover, bool):
            raise ConfigError(f"crossover must be a bool, got {self.crossover!r}")
        if self.crossover and (not self.fp8_converter or self.seesaw):
            raise ConfigError("crossover=True is the converter warpgroup's cluster of two CTAs: it needs "
                              "fp8_converter=True and no seesaw")
        if not isinstance(self.crossover_lean, bool):
            raise ConfigError(f"crossover_lean must be a bool, got {self.crossover_lean!r}")
        if self.crossover_lean and not self.crossover:
            raise ConfigError("crossover_lean=True is the crossover's hand-off (note \"Lean hand-off\"): it needs "
                              "crossover=True")
        if not isinstance(self.crossover_stasync, bool):
            raise ConfigError(f"crossover_stasync must be a bool, got {self.crossover_stasync!r}")
        if self.crossover_stasync and not self.crossover_lean:
            raise ConfigError("crossover_stasync=True is built on the lean hand-off (note \"st.async hand-off\"): it "
                              "needs crossover_lean=True")
        check_producer(self)
        _check_seesaw(self)
        check_pair_fill(self)
        check_overlap(self)
        if self.smem_bytes() > SMEM_LIMIT:
            raise ConfigError(f"sparse MLA decode needs {self.smem_bytes()} bytes of SMEM (> {SMEM_LIMIT})")
        fits, need, pool = register_pool_fits(self.threads, *self.regs, CONSUMERS)
        if not fits:
            raise ConfigError(f"setmaxnreg budgets need {need} registers, more than the launch allocation of {pool}")
        return self

    def key(self) -> dict:
        """The compile key; fp8_converter only where set (the other kernels' keys as before it existed)."""
        return {"kernel": DECODE_KERNEL, **key_leaving_out(self, DECODE_VARIANT_FIELDS)}

    def name(self) -> str:
        return (f"{DECODE_KERNEL}_{self.dtype}{'_fp8' if self.fp8 else ''}{'_conv' if self.fp8_converter else ''}"
                f"{'_xo' if self.crossover else ''}{'_lean' if self.crossover_lean else ''}"
                f"{'_stasync' if self.crossover_stasync else ''}{'_pwg' if self.producer_warps == 4 else ''}"
                f"{'_topklen' if self.topk_length else ''}{'_split' if self.split else ''}"
                f"{'_seesaw' if self.seesaw else ''}{'_pairfill' if self.pair_fill else ''}"
                f"{'_overlap' if self.overlap_s else ''}")


DECODE_VARIANT_FIELDS = field_defaults(MLASparseDecodeConfig, ("fp8_converter", "producer_warps", "seesaw",
                                                               "pair_fill", "crossover", "crossover_lean",
                                                               "crossover_stasync", "overlap_s"))


# ----------------------------------------------------------------------------------------------
# FP8 sparse decode variants: the kernel a flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...) call runs
# ----------------------------------------------------------------------------------------------

# The FP8 variant table: kernels/common/mla_sparse_fp8_variants.py (re-exported)
from .common.mla_sparse_fp8_variants import (  # noqa: F401, E402
    CLUSTER_VARIANTS, CROSSOVER_VARIANT, FP8_DECODE_VARIANT_ENV, FP8_DECODE_VARIANTS, FP8_VARIANT_FIELDS, LEAN_VARIANT,
    STASYNC_VARIANT, fp8_decode_variant_name)

# FP8_DECODE_DEFAULT_RULE, the FP8 sparse decode kernel a call runs when no variant is named
# ([D-mla-sparse-fp8-default]): the converter wherever it is built, which is every FP8 sparse decode kernel
# (bf16 q, with or without topk_length, split or not: the converter's SMEM and register plan does not depend
# on the call) -- on an nvidia-h200 (bench mla, mla_sparse_decode_fp8: B64, s_q 2, 128 heads, topk 2048;
# notes/mla-sparse-fp8-conv-h200-2026-11-26.json @ b1cd8a0) 351.1 us against the gather kernel's 426.9, bit-identical
# out and lse on the 7 GPU cases. A config the rule does not cover (none today: the predicate below names
# what the converter is built for: converter_built) runs "gather", the kernel built for it, not a fallback
# from a faster one.
FP8_DECODE_DEFAULT_RULE = "converter"


def converter_built(cfg: MLASparseDecodeConfig) -> bool:
    """Whether the converter variant is built for the sparse decode kernel ``cfg``: every FP8 one (bf16 q;
    with or without topk_length, split or not)."""
    return cfg.fp8 and cfg.dtype == FP8_DTYPE


def fp8_decode_default_variant(cfg: MLASparseDecodeConfig) -> str:
    """FP8_DECODE_DEFAULT_RULE's variant name for the FP8 sparse decode kernel ``cfg``: the converter where
    it is built (converter_built), else "gather"."""
    return FP8_DECODE_DEFAULT_RULE if converter_built(cfg) else "gather"


# FP8_DECODE_CROSSOVER_RULE ([D-mla-sparse-fp8-crossover-default], [D-mla-sparse-fp8-stasync-default]): where a
# call's heads pair into clusters (heads a multiple of 2 x TILE_M) and the tile step runs (the seesaw is built on the
# plain converter), the rule's converter runs over the cluster as "crossover_stasync" (the crossover with CTA-scope
# peer releases and the peer's half written by st.async onto its full barrier): nvidia-h200, bench mla's
# mla_sparse_decode_fp8 (B64, s_q 2, 128 heads, topk 2048), two runs in one process: 272.3 / 272.6 TFLOP/s against
# the crossover's 231.9 / 231.1, out and lse bit-identical to the crossover's
# on the GPU tests. Before it the rule ran "crossover": 232.5 against the plain converter's 211.4.
FP8_DECODE_CROSSOVER_RULE = STASYNC_VARIANT


def fp8_decode_rule_variant(cfg: MLASparseDecodeConfig, heads: int, step: str = "default") -> str:
    """The FP8 sparse decode variant a call of ``heads`` query heads runs when FA4MLIR_MLA_SPARSE_FP8_VARIANT is
    unset: FP8_DECODE_CROSSOVER_RULE's where it applies (``step``: the call's SPARSE_VARIANTS name), else
    fp8_decode_default_variant's."""
    name = fp8_decode_default_variant(cfg)
    if name == FP8_DECODE_DEFAULT_RULE and heads % (2 * TILE_M) == 0 and step in ("default", TILE_VARIANT):
        return FP8_DECODE_CROSSOVER_RULE
    return name


def fp8_decode_variant(cfg: MLASparseDecodeConfig, name: str = "default") -> MLASparseDecodeConfig:
    """The FP8 sparse decode kernel ``cfg`` (any fp8_converter) as variant ``name`` of FP8_DECODE_VARIANTS
    ("default": fp8_decode_default_variant's); ConfigError for an unknown name or a 16-bit cache's cfg."""
    if name != "default" and name not in FP8_DECODE_VARIANTS:
        raise ConfigError(f"unknown FP8 sparse decode variant {name!r}; known: default, {', '.join(FP8_DECODE_VARIANTS)}")
    if not cfg.fp8:
        raise ConfigError(f"FP8 sparse decode variant {name!r} is for FlashMLA's FP8 cache; {cfg.name()} is not one")
    name = fp8_decode_default_variant(cfg) if name == "default" else name
    return replace(cfg, **{**dict.fromkeys(FP8_VARIANT_FIELDS, False), **FP8_DECODE_VARIANTS[name]})


# ----------------------------------------------------------------------------------------------
# Launch contract: (name, kind) in kernel-parameter order (topk_length in `params` when set)
# ----------------------------------------------------------------------------------------------

DECODE_OUTPUTS = (("out", "ptr"), ("lse", "ptr"))
DECODE_SPLIT_OUTPUTS = (("o_partial", "ptr"), ("lse_partial", "ptr"))
DECODE_SCALARS = (("tokens", "i32"), ("batch", "i32"), ("seqlen_q", "i32"), ("num_splits", "i32"), ("s_kv", "i32"),
           ("heads", "i32"), ("head_blocks", "i32"), ("topk", "i32"), ("scale", "f32"), ("scale_log2", "f32"),
           ("q_stride_s", "i64"), ("q_stride_h", "i64"), ("kv_stride_s", "i64"), ("indices_stride_s", "i64"),
           ("out_stride_s", "i64"), ("out_stride_h", "i64"), ("head_blocks_mul", "i32"),
           ("head_blocks_shr", "i32"), ("seqlen_q_mul", "i32"), ("seqlen_q_shr", "i32"))
# fp8 only: a row's page and offset (index = page x page_size + offset) and the page's byte stride
# (kv_stride_s then is the row's byte stride)
DECODE_FP8_SCALARS = (("page_size", "i32"), ("page_mul", "i32"), ("page_shr", "i32"), ("kv_stride_page", "i64"))


def head_blocks(heads: int) -> int:
    return -(-heads // TILE_M)


def decode_launch_args(cfg: MLASparseDecodeConfig, tensors: dict, *, batch: int, seqlen_q: int, num_splits: int, s_kv: int,
                heads: int, topk: int, softmax_scale: float, q_strides: tuple, kv_stride: int, indices_stride: int,
                out_strides: tuple | None = None, page_size: int | None = None,
                kv_page_stride: int | None = None) -> dict:
    """The kernel's parameters by name (cfg.params): ``tensors`` by the contract's names; q's (token,
    head) element strides with token = b x seqlen_q + t (the host checks q's batch and seqlen_q dims
    merge), the cache's token stride, the indices' token stride, out's (token, head) strides. lse is
    [batch, heads, seqlen_q] contiguous; the partials [num_splits, batch, seqlen_q, heads, 512] and
    [num_splits, batch, heads, seqlen_q] (attention_combine_sm90's). fp8: kv_stride and
    kv_page_stride are the cache's row and page strides in bytes, page_size its rows a page."""
    args = {n: tensors[n] for n, kind in cfg.params if kind == "ptr"}
    out_strides = out_strides or (heads * D_V, D_V)
    blocks = head_blocks(heads)
    args.update(tokens=batch * seqlen_q, batch=batch, seqlen_q=seqlen_q, num_splits=num_splits, s_kv=s_kv,
                heads=heads, head_blocks=blocks, topk=topk, scale=float(softmax_scale),
                scale_log2=float(softmax_scale) * LOG2E, q_stride_s=int(q_strides[0]), q_stride_h=int(q_strides[1]),
                kv_stride_s=int(kv_stride), indices_stride_s=int(indices_stride),
                out_stride_s=int(out_strides[0]), out_stride_h=int(out_strides[1]))
    args["head_blocks_mul"], args["head_blocks_shr"] = divisor(blocks)
    args["seqlen_q_mul"], args["seqlen_q_shr"] = divisor(seqlen_q)
    if cfg.fp8:
        args.update(page_size=int(page_size), kv_stride_page=int(kv_page_stride))
        args["page_mul"], args["page_shr"] = divisor(int(page_size))
    missing = [n for n, _ in cfg.params if n not in args]
    if missing:
        raise KeyError(f"launch arguments missing: {missing}")
    return {n: args[n] for n, _ in cfg.params}


def decode_grid(batch: int, seqlen_q: int, heads: int, num_splits: int) -> tuple[int, int, int]:
    """x = token x head block (the head block fastest: a token's blocks gather the same rows), y = split."""
    return (batch * seqlen_q * head_blocks(heads), num_splits, 1)


def split_range(n_tiles: int, split: int, num_splits: int) -> tuple[int, int]:
    """The KV tiles [begin, end) of split ``split`` (the kernel's arithmetic, for tests and the host):
    ceil(n_tiles / num_splits) each, the last splits possibly empty."""
    per = -(-n_tiles // num_splits)
    begin = min(split * per, n_tiles)
    return begin, min(begin + per, n_tiles)


__all__ = ["fp8_plan", "SPARSE_DECODE_DEFAULT_RULE", "KERNEL", "DTYPES", "D_QK", "D_V", "BN", "TILE_M", "CONSUMERS", "STAGES", "HEADS", "MLASparseConfig",
           "OUTPUTS", "SCALARS", "launch_args", "grid", "flops", "DECODE_KERNEL", "DECODE_DTYPES", "MLASparseDecodeConfig",
           "DECODE_OUTPUTS", "DECODE_SPLIT_OUTPUTS", "DECODE_SCALARS", "DECODE_FP8_SCALARS", "KV_DTYPES", "FP8_DTYPE",
           "FP8_ROW_BYTES", "decode_launch_args", "decode_grid", "head_blocks",
           "split_range", "SEESAW_VARIANT", "SPARSE_VARIANTS", "SPARSE_VARIANT_ENV", "sparse_variant",
           "PAIR_FILL_VARIANT", "check_pair_fill", "OVERLAP_VARIANT", "check_overlap", "PAIR_FILL_VARIANTS"]
