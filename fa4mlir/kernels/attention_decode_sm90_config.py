"""Configuration and launch contract of the sm_90a decode kernels over the KV-cache operand
(MLIR-free: the host API imports it).

One or two kernels run one flash_attn_with_kvcache call (attention/kvcache.py plans them):

    attention_decode_sm90   split kernel: grid (m_tiles x num_splits, kv_heads or heads, batch);
                            each CTA attends one M tile of packed query rows to one contiguous
                            range of KV tiles of one sequence and writes float32 partial O
                            (normalised by its own row sum) and its LSE (natural log; -inf when
                            the range held no key the rows see).
    attention_combine_sm90  combine kernel: one warp per output row (batch, token, head) merges
                            the num_splits partials weighted by exp(lse_s - lse), in split order
                            (deterministic), writes O in q's dtype and the LSE.

A call whose schedule has one split (num_splits == 1: the plan's `unsplit`) runs the decode
kernel's `unsplit` variant alone (`[D-decode-unsplit]`): grid (m_tiles, ..., batch), each CTA
attends to every KV tile of its sequence and writes O in q's dtype straight into `out` (any
strides) and the LSE into `lse` (+inf for a row that sees no key), the bits the combine would
have written from that one split (attention_decode_sm90, note "Unsplit"): no float32 workspace,
no second launch.

`DecodeConfig` fixes what changes the decode kernel's code: dtype, head_dim, the KV tile `bn`,
ring depth `stages`, whether the cache is paged, how K/V rows are fetched (paging.fetch_plan):
TMA boxes of `box_rows` rows (a contiguous cache: bn; a paged one: gcd(bn, page_size)), which the
K/V descriptors are encoded with, or (`gather`, page sizes whose boxes would be under
paging.MIN_TMA_BOX_ROWS rows: 1..7, odd ones; an FP8 cache's under MIN_FP8_TMA_BOX_ROWS) a
cp.async gather, 16 bytes per lane, each lane reading its row's page-table entry; and whether it
writes partials for the combine or the final O (`unsplit`). Masks and score modifiers beyond the
runtime causal flag are compile-time variants, as in the prefill kernel (attention_sm90_config):
a sliding window (`window_left`, `window_right`) and `chunk` (common.mask_family, bottom-right per
sequence, causal staying a launch argument), `softcap` (the cap a launch argument) and `sinks`
(unsplit only: with several splits the sink enters in the combine, CombineConfig.sinks, so that it
counts once). Their fields are left out of key() and name() at their defaults, so the kernels built
before them keep their keys, names and code.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd

from .common.constants import LOG2E
from .common.fastdiv import divisor
from .common.decode_tile_variants import (BF16_SWEEP, TILE_VARIANT_ENV, TILE_VARIANTS, UNSPLIT_RULE,  # noqa: F401
                                          UNSPLIT_RULE_MAX_ROWS)  # (re-exported)
from .common.decode_tile_variants import tile_variant as _tile_variant
from .common.fields import ConfigError, check_fields, field_defaults, key_leaving_out
from .common.mask_family import Mask, attention_mask, mask_fields
from .common.paging import KVFetch, fetch_plan

KERNEL = "attention_decode_sm90"
COMBINE_KERNEL = "attention_combine_sm90"
# the same combine (plain loads, shuffles and stores: no arch-specific op) built for sm_100a, where an
# sm_90a cubin does not run: the sm_100a MLA decode's split-KV partials (attention/mla_sm100.py)
COMBINE_KERNEL_SM100 = "attention_combine_sm100"
COMBINE_ARCHS = {"sm_90a": COMBINE_KERNEL, "sm_100a": COMBINE_KERNEL_SM100}
APPEND_KERNEL = "kvcache_append_sm90"
APPEND_THREADS = 128
DTYPES = ("bf16", "f16")
HEAD_DIMS = (64, 128, 256)
TILE_M = 64                       # packed query rows per CTA: one consumer warpgroup's wgmma M
SMEM_LIMIT = 227 * 1024
MBARRIER_BYTES = 8
SWAP_AB_ROWS = 8                  # swap_ab: packed query rows per CTA, the wgmma N of S^T = K Q^T (a legal N)
SWAP_AB_EXCHANGE_BYTES = 512      # swap_ab: per-warp column maxima and sums, and the columns' alpha / m (f32)
# KV tile and ring depth per head_dim. Decode is memory-bound: what counts is the K/V bytes in
# flight per SM. D64 and D128 take two CTAs per SM (SMEM <= MAX_SMEM_2CTA, 160 threads of at most
# 204 registers), so one CTA's prologue (Q, the first tiles' latency) and epilogue overlap the other's
# streaming, with 2 x stages tiles in flight; D256 (a 32 KiB Q tile, 64 KiB per stage) one CTA.
# First choices, to be measured (bench decode).
DEFAULT_BN = {64: 64, 128: 64, 256: 64}
DEFAULT_STAGES = {64: 6, 128: 3, 256: 3}
SM_SMEM, CTA_SMEM_RESERVE = 233472, 1024    # an SM's 228 KiB; the 1 KiB the driver reserves per CTA
MAX_SMEM_2CTA = SM_SMEM // 2 - CTA_SMEM_RESERVE
MAX_CTAS_PER_SM = 3               # DecodeConfig.ctas: 4 would leave 56 KiB, under swap AB's 2 stages (~59 KiB)
BALANCED_RANGE_BYTES = 32         # balanced: the CTA's (lo, hi, b_first, ...) in SMEM (attention_decode_sm90_balanced)
COMBINE_WARPS = 4                 # output rows per combine CTA (one warp each)
COMBINE_HEAD_DIMS = HEAD_DIMS + (512,)    # 512: the MLA decode's V (attention_mla_decode_sm90)
SCALES = ("tensor", "kv_head", "block")   # FP8 scale granularities (kvcache.ScaleGranularity's values)
GATHER_WARPS = 2                      # producer warps of the gather (note "Gather"): measured, 1 vs 2
GATHER_MAX_CACHE_BYTES = 16 << 32     # the gather's row offsets are u32 counts of 16 bytes (note "Gather")


# fields in the compile key only when set: the keys, names and code of the kernels built before
# they existed stay the same


@dataclass(frozen=True)
class DecodeConfig:
    dtype: str = "bf16"
    head_dim: int = 128
    bn: int = 64                  # keys per KV tile (wgmma n of S, k of P V)
    stages: int = 6               # K and V ring depth
    paged: bool = False           # pool [num_pages, page_size, kv_heads, D] + page table, else [batch, S, kv_heads, D]
    box_rows: int = 64            # rows per TMA box: bn (contiguous, or page_size a multiple of bn), else gcd(bn, page_size)
    kv_dtype: str = ""            # "": the cache holds q's dtype; "e4m3": FP8, dequantised in the kernel (note "FP8")
    kv_scale: str = ""            # FP8 scale granularity of k_scale and v_scale: tensor | kv_head | block
    gather: bool = False          # paged: rows by a cp.async gather (box_rows 1), not TMA boxes
    unsplit: bool = False         # num_splits == 1: O in q's dtype and the LSE into out, lse (no combine)
    varlen_q: bool = False        # packed q [total_q, heads, D] by cu_seqlens_q (note "Varlen q" of the kernel)
    swap_ab: bool = False         # FP8 D128: S^T = K Q^T, K the wgmma A operand from registers (converted there, no
                                  # f16 K tile), at most SWAP_AB_ROWS packed query rows (attention_decode_sm90_swapab)
    swap_ab_warp_max: bool = False  # swap_ab: each warp's own running max, partial O rows merged at the end (one
                                    # barrier a tile, not two: attention_decode_sm90_swapab, note "Warp partials")
    balanced: bool = False        # swap_ab: the balanced split schedule (common/decode_balanced.py): a fixed grid of
                                  # `parts` CTAs per KV head, each an equal share of the batch's key tiles across
                                  # sequences (attention_decode_sm90_balanced); BALANCED_PARAMS after SPLIT_PARAMS
    swap_ab_ot: bool = False      # balanced swap_ab: O^T = V^T P^T (2 x m64n8: 8 accumulator registers, not m64n128's
                                  # 64), into O's layout through SMEM once per item (attention_decode_sm90_swapab)
    ctas: int = 0                 # swap_ab: CTAs per SM the kernel declares (its min-CTAs-per-SM hint: ptxas caps its registers
                                  # at 65536 / (ctas x threads)); 0: ctas_per_sm's choice by SMEM (2 or 1)
    # compile-time mask beyond the runtime causal flag (note "Window" of the kernel): FlashAttention's
    # window_size sides (-1: unbounded) and attention_chunk (0: none), canonical without causal
    window_left: int = -1
    window_right: int = -1
    chunk: int = 0
    softcap: bool = False         # s -> cap tanh(s / cap): launch takes softcap_scale, scale_log2 = cap log2(e)
    sinks: bool = False           # unsplit: a learned logit per query head in the denominator (split: the combine's)

    @property
    def params(self) -> tuple:
        """The launch contract: UNSPLIT_PARAMS for the unsplit variant, else SPLIT_PARAMS; a
        varlen_q kernel takes cu_seqlens_q after them (VARLEN_Q_PARAMS)."""
        base = UNSPLIT_PARAMS if self.unsplit else SPLIT_PARAMS + (BALANCED_PARAMS if self.balanced else ())
        return base + (VARLEN_Q_PARAMS if self.varlen_q else ()) + mod_params(self.softcap, self.sinks)

    @property
    def mask(self) -> Mask:
        """The compile-time mask (common.mask_family; NO_MASK by default): the runtime causal flag
        intersects it in the kernel."""
        return attention_mask(False, (self.window_left, self.window_right), self.chunk)

    @property
    def windowed(self) -> bool:
        """A window or a chunk: the kernel bounds each row's keys on the left too (note "Window")."""
        return bool(self.mask.parts)

    @property
    def d_chunks(self) -> int:
        return self.head_dim // 64

    @property
    def fp8(self) -> bool:
        return self.kv_dtype == "e4m3"

    @property
    def mma_dtype(self) -> str:
        """The GEMMs' operand type: q's dtype, or f16 for an FP8 cache (e4m3 converts to f16
        exactly; Q is rounded to f16 once)."""
        return "f16" if self.fp8 else self.dtype

    @property
    def producer_warps(self) -> int:
        """1 (TMA: one elected thread issues), GATHER_WARPS for the gather (its copies are
        issue-bound: one instruction per 16 bytes a lane)."""
        return GATHER_WARPS if self.gather else 1

    @property
    def producer_first_warp(self) -> int:
        """The producer's first warp: 4, behind the consumer warpgroup."""
        return 4

    @property
    def threads(self) -> int:
        # warps 0-3: the consumer warpgroup, then the producer
        return 32 * self.producer_first_warp + 32 * self.producer_warps

    @property
    def ctas_per_sm(self) -> int:
        """`ctas` where set, else the CTAs that fit one SM by SMEM (2 when the tile plan fits half an SM);
        registers follow: the kernel declares its CTAs per SM as a kernel attribute, which bounds them."""
        if self.ctas:
            return self.ctas
        return 2 if self.smem_bytes() <= MAX_SMEM_2CTA else 1

    @property
    def boxes_per_tile(self) -> int:
        return self.bn // self.box_rows

    def tile_bytes(self) -> int:
        """One K (or V) ring stage: bn rows of head_dim elements (2 bytes, or 1 for FP8)."""
        return self.bn * self.head_dim * (1 if self.fp8 else 2)

    def staged_bytes(self) -> int:
        """An FP8 cache's K (or V) tile converted to f16 for the tensor cores (none otherwise)."""
        return self.bn * self.head_dim * 2 if self.fp8 else 0

    def smem_bytes(self) -> int:
        q = TILE_M * self.head_dim * 2
        if self.swap_ab:    # Q^T of SWAP_AB_ROWS rows, V's f16 tile, P (64 rows of bn keys), the max/alpha/sum exchange
            return (SWAP_AB_ROWS * self.head_dim * 2 + 2 * self.stages * self.tile_bytes() + self.staged_bytes()
                    + TILE_M * self.bn * 2 + SWAP_AB_EXCHANGE_BYTES + 2 * 2 * self.stages * MBARRIER_BYTES
                    + (BALANCED_RANGE_BYTES if self.balanced else 0))
        return (q + 2 * self.stages * self.tile_bytes() + 2 * self.staged_bytes()
                + 2 * 2 * self.stages * MBARRIER_BYTES + (self.bn * 8 if self.gather else 0))

    def validate(self) -> "DecodeConfig":
        check_fields(self, {"dtype": DTYPES, "head_dim": HEAD_DIMS})
        if self.dtype not in DTYPES:
            raise ConfigError(f"decode dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.head_dim not in HEAD_DIMS:
            raise ConfigError(f"head_dim must be one of {HEAD_DIMS}, got {self.head_dim}")
        if self.bn % 16 or not 16 <= self.bn <= 256:
            raise ConfigError(f"bn must be a multiple of 16 in [16, 256], got {self.bn}")
        if self.stages < 2:
            raise ConfigError(f"stages must be >= 2, got {self.stages}")
        if self.box_rows < 1 or self.bn % self.box_rows:
            raise ConfigError(f"box_rows must divide bn={self.bn}, got {self.box_rows}")
        if not self.paged and self.box_rows != self.bn:
            raise ConfigError(f"a contiguous cache loads one box of bn={self.bn} rows per tile, got box_rows="
                              f"{self.box_rows}")
        if self.kv_dtype not in ("", "e4m3"):
            raise ConfigError(f"kv_dtype must be '' (q's dtype) or 'e4m3', got {self.kv_dtype!r}")
        if self.gather and (not self.paged or self.box_rows != 1):
            raise ConfigError(f"a cp.async gather is for a paged cache and fetches rows one by one (box_rows 1), got "
                              f"paged={self.paged}, box_rows={self.box_rows}")
        if self.fp8 and not self.gather and (self.box_rows * self.head_dim) % 128:
            raise ConfigError(f"an FP8 cache's TMA boxes land at multiples of box_rows x head_dim = "
                              f"{self.box_rows * self.head_dim} bytes; they must be 128-byte aligned")
        if (self.kv_scale not in SCALES) if self.fp8 else self.kv_scale:
            raise ConfigError(f"kv_scale must be one of {SCALES} for an FP8 cache and '' otherwise, got "
                              f"{self.kv_scale!r}")
        if self.swap_ab and (not self.fp8 or self.head_dim != 128 or self.bn != 64 or self.gather
                             or self.kv_scale == "block"):
            raise ConfigError(f"swap_ab (S^T = K Q^T, K from registers) is built for an FP8 cache at head_dim 128, bn 64, "
                              f"TMA fetches, tensor or kv_head scales; got {self.name()}")
        if self.swap_ab_warp_max and not self.swap_ab:
            raise ConfigError("swap_ab_warp_max is a form of swap_ab: set swap_ab too")
        if self.balanced and (not self.swap_ab or self.unsplit or self.varlen_q):
            raise ConfigError(f"balanced (the balanced split schedule) is built on swap_ab, split (it writes final O "
                              f"and partials itself), without varlen_q; got {self.name()}")
        if self.swap_ab_ot and (not self.balanced or self.swap_ab_warp_max):
            raise ConfigError(f"swap_ab_ot (O^T = V^T P^T) is built for the balanced swap-AB kernel with one max per "
                              f"column (not swap_ab_warp_max); got {self.name()}")
        if self.ctas and (not self.swap_ab or not 1 <= self.ctas <= MAX_CTAS_PER_SM
                          or self.smem_bytes() > SM_SMEM // self.ctas - CTA_SMEM_RESERVE):
            raise ConfigError(f"ctas (CTAs per SM the kernel declares) is built for swap_ab, 1..{MAX_CTAS_PER_SM}, "
                              f"with the SMEM of that many CTAs (<= {SM_SMEM} // ctas - {CTA_SMEM_RESERVE} bytes); "
                              f"got ctas={self.ctas}, {self.smem_bytes()} bytes: {self.name()}")
        if self.varlen_q and self.fp8:
            raise ConfigError("varlen_q (flash_attn_varlen_func's paged path) is built for bf16/f16 caches only, "
                              f"got kv_dtype={self.kv_dtype!r}")
        self._check_mask()
        if self.fp8 and (self.windowed or self.softcap or self.sinks):
            # measured: the D128 FP8 kernels with a window and softcap spill (~120 bytes) at the 168
            # registers of two CTAs per SM
            raise ConfigError(f"an FP8 cache's decode kernel with a window, chunk, softcap or sinks is not built (it "
                              f"spills at two CTAs per SM), got {self.name()}: dequantise the cache to {self.dtype}")
        if self.sinks and not self.unsplit:
            raise ConfigError("sinks enter once: in the combine when split (CombineConfig(sinks=True)), in the "
                              "decode kernel only for its unsplit variant; got sinks=True, unsplit=False")
        if self.smem_bytes() > SMEM_LIMIT:
            raise ConfigError(f"decode tile plan needs {self.smem_bytes()} bytes of SMEM (> {SMEM_LIMIT}): lower "
                              f"stages ({self.stages}) or bn ({self.bn})")
        return self

    def _check_mask(self) -> None:
        if self.window_left < -1 or self.window_right < -1 or self.chunk < 0:
            raise ConfigError(f"window_left and window_right must be >= -1 (-1: unbounded) and chunk >= 0 (0: none), "
                              f"got {self.window_left}, {self.window_right}, {self.chunk}")
        fields = mask_fields(self.mask)
        if fields["causal"]:
            raise ConfigError(f"window ({self.window_left}, {self.window_right}) is the causal mask's right side: "
                              f"causal is a launch argument of the decode kernel; pass causal=1 with window_right=-1")

    def key(self) -> dict:
        """The compile key: every field (VARIANT_FIELDS only when not at their defaults: varlen_q, the
        FP8 variants' fields, the mask and score-modifier fields, so that the keys, names and code of
        the kernels built before them are unchanged)."""
        return {"kernel": KERNEL, **key_leaving_out(self, VARIANT_FIELDS)}

    def name(self) -> str:
        fp8 = f"_e4m3_{self.kv_scale}" if self.fp8 else ""
        mods = f"{self.mask.tag()}{'_softcap' if self.softcap else ''}{'_sink' if self.sinks else ''}"
        return (f"{KERNEL}_{self.dtype}_d{self.head_dim}_n{self.bn}_s{self.stages}"
                f"_{self._fetch_name()}{fp8}"
                f"{'_swapab' if self.swap_ab else ''}{'w' if self.swap_ab_warp_max else ''}{'_bal' if self.balanced else ''}"
                f"{'_ot' if self.swap_ab_ot else ''}{f'_c{self.ctas}' if self.ctas else ''}"
                f"{'_unsplit' if self.unsplit else ''}{'_varlen' if self.varlen_q else ''}{mods}")

    def _fetch_name(self) -> str:
        if not self.paged:
            return "contig"
        return "paged_gather" if self.gather else f"paged_b{self.box_rows}"


# DecodeConfig's variant fields (common.fields), left out of key() at their defaults (added after kernels were
# shipped); bench/sanitize.py reads this table
VARIANT_FIELDS = field_defaults(DecodeConfig, ("varlen_q", "swap_ab",
                                               "swap_ab_warp_max", "balanced", "swap_ab_ot", "ctas", "window_left", "window_right", "chunk", "softcap",
                                               "sinks"))


def mod_params(softcap: bool, sinks: bool) -> tuple:
    """The score modifiers' launch parameters, after the rest of a decode or combine contract:
    softcap_scale (softmax_scale / cap, the factor before the tanh) and sinks (float32 [heads])."""
    return ((("softcap_scale", "f32"),) if softcap else ()) + ((("sinks", "ptr"),) if sinks else ())


def decode_mask(causal: bool, window_size: tuple = (-1, -1), attention_chunk: int = 0) -> tuple[bool, dict]:
    """FlashAttention's (causal, window_size, attention_chunk) as the decode kernel runs them: the
    runtime causal flag and DecodeConfig's compile-time mask fields (window_left, window_right,
    chunk), canonical (mask_family.mask_fields: a window (left, 0) is causal with (left, -1))."""
    f = mask_fields(attention_mask(bool(causal), tuple(window_size), int(attention_chunk)))
    return f["causal"], {"window_left": f["window_left"], "window_right": f["window_right"], "chunk": f["chunk"]}


@dataclass(frozen=True)
class CombineConfig:
    dtype: str = "bf16"
    head_dim: int = 128
    sinks: bool = False           # the sink logits join each row's sum (COMBINE_PARAMS + sinks)
    arch: str = "sm_90a"          # COMBINE_ARCHS: sm_100a is the kernel COMBINE_KERNEL_SM100 (same code)
    balanced_bn: int = 0          # > 0: the balanced schedule's combine over tiles of this many keys (variable split
                                  # counts per sequence, found from cache_seqlens: common/decode_balanced.py)

    @property
    def params(self) -> tuple:
        return COMBINE_PARAMS + (COMBINE_BALANCED_PARAMS if self.balanced_bn else ()) + mod_params(False, self.sinks)

    @property
    def kernel(self) -> str:
        """The kernel name of this config's arch (COMBINE_ARCHS)."""
        return COMBINE_ARCHS[self.arch]

    def validate(self) -> "CombineConfig":
        check_fields(self, {"dtype": DTYPES, "head_dim": COMBINE_HEAD_DIMS, "arch": tuple(COMBINE_ARCHS)})
        if self.dtype not in DTYPES or self.head_dim not in COMBINE_HEAD_DIMS or self.arch not in COMBINE_ARCHS:
            raise ConfigError(f"combine: dtype in {DTYPES}, head_dim in {COMBINE_HEAD_DIMS}, arch in "
                              f"{tuple(COMBINE_ARCHS)}; got {self.dtype}, {self.head_dim}, {self.arch}")
        if self.balanced_bn < 0 or (self.balanced_bn and self.sinks):
            raise ConfigError(f"combine: balanced_bn must be >= 0 and is built without sinks; got {self.balanced_bn}, "
                              f"sinks={self.sinks}")
        return self

    def key(self) -> dict:
        """The compile key; sinks, arch and balanced_bn only where set (COMBINE_VARIANT_FIELDS)."""
        return {"kernel": self.kernel, **key_leaving_out(self, COMBINE_VARIANT_FIELDS)}

    def name(self) -> str:
        bal = f"_bal{self.balanced_bn}" if self.balanced_bn else ""
        return f"{self.kernel}_{self.dtype}_d{self.head_dim}{'_sink' if self.sinks else ''}{bal}"


COMBINE_VARIANT_FIELDS = field_defaults(CombineConfig, ("sinks", "arch", "balanced_bn"))     # CombineConfig's (common.fields)


@dataclass(frozen=True)
class AppendConfig:
    """The kernel that writes new tokens k, v into the cache before the split kernel runs."""

    dtype: str = "bf16"
    head_dim: int = 128
    paged: bool = True

    def validate(self) -> "AppendConfig":
        check_fields(self, {"dtype": DTYPES, "head_dim": HEAD_DIMS})
        if self.dtype not in DTYPES or self.head_dim not in HEAD_DIMS:
            raise ConfigError(f"append: dtype in {DTYPES}, head_dim in {HEAD_DIMS}; got {self.dtype}, "
                              f"{self.head_dim}")
        return self

    def key(self) -> dict:
        return {"kernel": APPEND_KERNEL, **self.__dict__}

    def name(self) -> str:
        return f"{APPEND_KERNEL}_{self.dtype}_d{self.head_dim}_{'paged' if self.paged else 'contig'}"


def box_rows_for(bn: int, page_size: int | None) -> int:
    """Rows per TMA box: bn for a contiguous cache (None) or a page size that bn divides, else
    gcd(bn, page_size) (a box never straddles a page: paging.py, note "Box rows")."""
    return bn if page_size is None else gcd(bn, page_size)


# Boxes of fewer rows than this take one CTA per SM with twice the stages: the producer's
# page-table reads of a tile's many boxes need about 200 registers, more than two CTAs per SM leave
# (168 at 160 threads: ptxas spills there). paging.fetch_plan gathers those page sizes (1..7, odd
# ones) instead; the rule still sizes the FP8 gather, whose consumer spills at 168 registers too.
ONE_CTA_BOX_ROWS = 8


def default_config(dtype: str, head_dim: int, page_size: int | None, kv_scale: str = "",
                   unsplit: bool = False, rows: int | None = None, **variant) -> DecodeConfig:
    """The decode kernel for a cache of ``page_size`` (None: contiguous); ``kv_scale`` (tensor,
    kv_head, block) for an FP8 cache; ``unsplit`` for a call of one split (the tiles are the split
    kernel's: only the epilogue differs); ``rows``: an FP8 call's packed query rows per CTA (GQA
    group x seqlen_q, kvcache.plan_problem's gqa.rows), which FP8_DEFAULT_RULE reads (None: not
    known, the conversion-through-SMEM kernel, which serves every row count); ``variant``: the mask
    and score-modifier fields (window_left, window_right, chunk, softcap, sinks), which change no
    tile choice but UNSPLIT_RULE's (a call with any of them keeps bn 64)."""
    cfg = replace(_default_tiles(dtype, head_dim, page_size, kv_scale, unsplit), **variant)
    return fp8_variant(cfg, fp8_default_variant(cfg, rows)) if cfg.fp8 else unsplit_rule(cfg, rows)


def unsplit_rule(cfg: DecodeConfig, rows: int | None) -> DecodeConfig:
    """A bf16/f16 call of one split over a contiguous head_dim-128 cache with at most UNSPLIT_RULE_MAX_ROWS packed
    query rows (``rows`` known) and no compile-time mask, softcap, sinks or varlen q runs UNSPLIT_RULE's tiles
    (128-key tiles, 2 stages, one CTA per SM: [D-decode-bn128-unsplit]); every other call keeps ``cfg``. The split
    kernel is not changed, so the plan's split count (read off the split kernel's CTAs per SM) is unchanged."""
    if (cfg.unsplit and not cfg.fp8 and not cfg.paged and cfg.head_dim == 128 and rows is not None
            and rows <= UNSPLIT_RULE_MAX_ROWS
            and not (cfg.windowed or cfg.softcap or cfg.sinks or cfg.varlen_q)):
        return tile_variant(cfg, UNSPLIT_RULE)
    return cfg


def _default_tiles(dtype: str, head_dim: int, page_size: int | None, kv_scale: str, unsplit: bool) -> DecodeConfig:
    bn = DEFAULT_BN[head_dim]
    box_rows = box_rows_for(bn, page_size)
    gather = page_size is not None and fetch_plan(bn, page_size, fp8=bool(kv_scale)).fetch is KVFetch.CP_ASYNC_GATHER
    stages = DEFAULT_STAGES[head_dim]
    fp8 = dict(kv_dtype="e4m3", kv_scale=kv_scale) if kv_scale else {}
    two = DecodeConfig(dtype=dtype, head_dim=head_dim, bn=bn, stages=stages, paged=page_size is not None,
                       box_rows=1 if gather else box_rows, gather=gather, unsplit=unsplit, **fp8)
    if two.box_rows < ONE_CTA_BOX_ROWS and two.ctas_per_sm == 2 and (two.fp8 or not gather):
        # (an FP8 gather too: its consumer's conversion and block scales spill at 168 registers)
        return replace(two, stages=2 * stages)
    if two.fp8 and two.ctas_per_sm == 2:
        # FP8 stages are half the bytes: as many as still leave two CTAs per SM
        while replace(two, stages=two.stages + 1).ctas_per_sm == 2:
            two = replace(two, stages=two.stages + 1)
    return two


# ----------------------------------------------------------------------------------------------
# FP8 variants (issue #27's FP8 bar): alternatives to the conversion-through-SMEM FP8 kernel, timed;
# FP8_DEFAULT_RULE (below) makes two of them the default where they are built
# ----------------------------------------------------------------------------------------------

# "default": FP8_DEFAULT_RULE's choice; "smem": _default_tiles' kernel, K and V converted to f16 tiles in
# SMEM (the default before the rule); other name -> its DecodeConfig fields over default_config's tiles. "swapab":
# S^T = K Q^T, K_j the register A operand (attention_decode_sm90_swapab, note "Swap AB"; at most SWAP_AB_ROWS packed
# query rows, D128, tensor or kv_head scales), default_config's stages; "swapabw": the same with per-warp maxima
# (note "Warp partials") and 5 stages. The other variants once here (a converter warpgroup, 128-key tiles, the split
# and the bit conversions, swap AB at 5 stages, balanced at 5 and 12 stages) were timed and rejected (notes/RESULTS.md
# [R-decode-fp8-bits], [R-decode-fp8-overlap], [O-decode-fp8], [D-decode-fp8-swapab], [D-decode-3cta-default]).
# bf16/f16 caches have no variants.
FP8_VARIANTS = {
    "default": "rule",      # FP8_DEFAULT_RULE's choice for the call (fp8_default_variant)
    "smem": None,           # the conversion-through-SMEM kernel (_default_tiles): the default before the rule
    "swapab": {"swap_ab": True},
    "swapabw": {"swap_ab": True, "swap_ab_warp_max": True, "stages": 5},
    "balanced": "rule+balanced",   # FP8_DEFAULT_RULE's swap-AB kernel on the balanced split schedule (BALANCED)
    "balanced3cta": "rule+balanced",   # three CTAs (consumer warpgroups) per SM: BALANCED_FIELDS
}
BALANCED = "balanced"
# The balanced variants -> their ring depth (None: the rule's kernel's). For A/B (bench decode --decode-variant); built
# at bench decode's FP8 shapes (kv_head scales, pages of 16, 64, 128) in the decode-fp8-variants set.
BALANCED_VARIANTS = {BALANCED: None, "balanced3cta": 3}
# Balanced variants' other DecodeConfig fields. "balanced3cta": three consumer warpgroups per SM (`ctas`; the swap-AB
# kernel is latency-bound per consumer warpgroup: notes/RESULTS.md [M-decode-fp8-ncu]), 3 stages (~75 KiB: the most
# under an SM's third); ptxas gets 128 registers (15 warps over the SM's 4 register quarters: 4 warps x 32 x 128 =
# 16384), where O's m64n128 accumulators (64 registers) spilled 320 bytes in the tile loops, so O^T = V^T P^T
# (`swap_ab_ot`: 8). The plan's parts grow with the CTA slots (SMs x 3).
BALANCED_FIELDS = {"balanced3cta": {"ctas": 3, "swap_ab_ot": True, "swap_ab_warp_max": False}}   # one max a column
# scale granularities a variant is built for (others: all of SCALES)
FP8_VARIANT_SCALES = {"swapab": ("tensor", "kv_head"), "swapabw": ("tensor", "kv_head"),
                      **{name: ("tensor", "kv_head") for name in BALANCED_VARIANTS}}
FP8_VARIANT_ENV = "FA4MLIR_DECODE_FP8_VARIANT"

# FP8_DEFAULT_RULE, the FP8 decode kernel a call runs when no variant is named ([D-decode-fp8-swapab]):
# swap AB (S^T = K Q^T, K converted in registers into the wgmma A fragments) wherever it is built:
# head_dim 128, at most SWAP_AB_ROWS packed query rows per CTA (GQA group x seqlen_q), tensor or
# kv_head scales, TMA fetches; a contiguous cache takes "swapabw" (per-warp maxima, 5 stages), a
# TMA-paged one "swapab" (default_config's stages): the best of each on an nvidia-h200 (bench decode,
# bf16 D128, per-KV-head scales; notes/decode-fp8-swapab-h200-2026-11-26.json @ b1cd8a0): dense 262.6 us
# swapabw vs 268.2 swapab, 268.6 swapab5, 350.4 the SMEM kernel; paged 16: 326.9 swapab vs 327.4
# swapab5, 331.4 swapabw, 408.3 the SMEM kernel. Every other FP8 call (block scales, the cp.async
# gather of small pages, more packed rows, head_dim 64 or 256) runs "smem", the conversion-through-
# SMEM kernel: the kernel built for it, not a fallback from a faster one.
FP8_DEFAULT_RULE = {"contiguous": "swapabw", "paged": "swapab"}


def fp8_default_variant(cfg: DecodeConfig, rows: int | None) -> str:
    """FP8_DEFAULT_RULE's variant name for default_config's FP8 kernel ``cfg`` (its "smem" tiles)
    attending ``rows`` packed query rows per CTA (None: not known): swap AB where it is built, else
    "smem"."""
    swap = (cfg.head_dim == 128 and not cfg.gather and cfg.kv_scale in FP8_VARIANT_SCALES["swapab"]
            and rows is not None and rows <= SWAP_AB_ROWS and not (cfg.windowed or cfg.softcap or cfg.sinks))
    return FP8_DEFAULT_RULE["paged" if cfg.paged else "contiguous"] if swap else "smem"


# BALANCED_RULE: a call FP8_DEFAULT_RULE gives the split swap-AB kernel over a PAGED cache runs it on the balanced
# split schedule (common/decode_balanced.py; the variant "balanced"), where the schedule is built for the call
# (attention/kvcache.plan_problem: num_splits not given, batch <= MAX_BATCH, one M tile, key tiles in range;
# FA4MLIR_DECODE_FP8_VARIANT unset or "default"). A paged cache's lengths are ragged as a rule (and never read on
# the host). Timed on an nvidia-h200 (notes/RESULTS.md [D-decode-balanced-default]): bench decode's ragged paged
# FP8 rows 9-10% faster (pages 16 / 64 / 128: 296.7 / 297.0 / 295.1 us vs 328.0 / 321.6 / 321.2); the uniform
# contiguous decode_dense_fp8 19% slower on it (312.2 vs 262.7 us), so a contiguous cache keeps the plain split.
def balanced_by_rule(cfg: DecodeConfig) -> bool:
    """BALANCED_RULE's kernel test: ``cfg`` (the rule's FP8 kernel of a call) is a paged split swap-AB one."""
    return cfg.fp8 and cfg.swap_ab and cfg.paged and not cfg.unsplit and not cfg.balanced and not cfg.varlen_q


# BALANCED_RULE's kernel is the balanced variant BALANCED_RULE_VARIANT of the rule's split swap-AB kernel: three CTAs
# per SM with O^T = V^T P^T (BALANCED_FIELDS; notes/RESULTS.md [D-decode-3cta-default]: nvidia-h200, same process,
# paged FP8 16 / 64 / 128 306.2 / 303.0 / 300.8 us against 308.5 / 305.8 / 303.8 at two CTAs per SM, the variant
# "balanced" that stays for A/B)
BALANCED_RULE_VARIANT = "balanced3cta"


def balanced_rule_config(cfg: DecodeConfig) -> DecodeConfig:
    """BALANCED_RULE's kernel for the rule's split swap-AB kernel ``cfg`` (balanced_by_rule): the balanced schedule
    with BALANCED_RULE_VARIANT's stages and fields."""
    return _balanced(cfg, BALANCED_RULE_VARIANT)


def _balanced(cfg: DecodeConfig, name: str) -> DecodeConfig:
    """The swap-AB kernel ``cfg`` on the balanced schedule as BALANCED_VARIANTS entry ``name`` (its stages, None:
    cfg's, and BALANCED_FIELDS)."""
    stages = BALANCED_VARIANTS[name]
    return replace(cfg, balanced=True, stages=stages or cfg.stages, **BALANCED_FIELDS.get(name, {})).validate()


def fp8_variant(cfg: DecodeConfig, name: str, rows: int | None = None) -> DecodeConfig:
    """default_config's conversion-through-SMEM FP8 kernel ``cfg`` (default_config with rows None:
    the "smem" tiles) as variant ``name`` of FP8_VARIANTS ("default": fp8_default_variant's for
    ``rows`` packed query rows; ConfigError for an unknown name, a non-FP8 cfg, a gather (small-page)
    cache, or a scale granularity outside FP8_VARIANT_SCALES[name])."""
    if name not in FP8_VARIANTS:
        raise ConfigError(f"unknown FP8 decode variant {name!r}; known: {', '.join(FP8_VARIANTS)}")
    if not cfg.fp8:
        raise ConfigError(f"FP8 decode variant {name!r} is for an e4m3 cache; {cfg.name()} is not one")
    if cfg.swap_ab:
        raise ConfigError(f"FP8 decode variants apply to the conversion-through-SMEM kernel (default_config with "
                          f"rows=None), not to {cfg.name()}")
    if name in BALANCED_VARIANTS:    # the rule's swap-AB kernel (paged: swapab, contiguous: swapabw), balanced
        base = fp8_default_variant(cfg, rows)
        if base == "smem":
            raise ConfigError(f"FP8 decode variant {name!r} is built on swap AB (head_dim 128, at most {SWAP_AB_ROWS} "
                              f"packed rows, tensor or kv_head scales, TMA fetches); {cfg.name()} at rows={rows} is not")
        return _balanced(fp8_variant(cfg, base, rows), name)
    if name == "default":
        name = fp8_default_variant(cfg, rows)
    if FP8_VARIANTS[name] is None:
        return cfg
    if cfg.gather:    # small pages: the variants were neither compiled nor interpreted with the gather
        raise ConfigError(f"FP8 decode variant {name!r} is built for TMA fetches, not the cp.async gather of "
                          f"{cfg.name()}")
    if cfg.kv_scale not in FP8_VARIANT_SCALES.get(name, SCALES):
        raise ConfigError(f"FP8 decode variant {name!r} is built for scales {FP8_VARIANT_SCALES[name]}, not "
                          f"{cfg.kv_scale!r}")
    return replace(cfg, **FP8_VARIANTS[name]).validate()     # DecodeConfig fields over default_config's tiles


def tile_variant(cfg: DecodeConfig, name: str) -> DecodeConfig:
    """The bf16/f16 kernel's tile variant ``name`` for A/B (common/decode_tile_variants.py: what they are and why),
    naming FP8_VARIANT_ENV for an FP8 cache's variants."""
    return _tile_variant(cfg, name, FP8_VARIANT_ENV)


def runtime_config(dtype: str, head_dim: int, page_size: int | None, kv_scale: str = "",
                   unsplit: bool = False, variant: str | None = None, rows: int | None = None,
                   **mods) -> DecodeConfig:
    """The decode kernel a call of ``rows`` packed query rows per CTA runs: default_config's (with
    `mods`, its mask and score-modifier fields; for an FP8 cache FP8_DEFAULT_RULE's choice), or for
    an FP8 cache the FP8_VARIANTS entry named by ``variant`` or else the environment's
    FA4MLIR_DECODE_FP8_VARIANT (unset: "default", the rule; "smem": the conversion-through-SMEM
    kernel; for `bench decode --decode-variant`). bf16/f16 caches always get default_config's."""
    # rows for a 16-bit cache's UNSPLIT_RULE; an FP8 cache's rule reads them in fp8_variant below
    cfg = default_config(dtype, head_dim, page_size, kv_scale, unsplit=unsplit, rows=None if kv_scale else rows, **mods)
    import os
    if not cfg.fp8:
        return tile_variant(cfg, os.environ.get(TILE_VARIANT_ENV) or "default")
    name = variant or os.environ.get(FP8_VARIANT_ENV) or "default"
    return fp8_variant(cfg, name, rows)


# ----------------------------------------------------------------------------------------------
# Launch contracts: (name, kind) in kernel-parameter order; launch_args fills them by name.
# ----------------------------------------------------------------------------------------------

SPLIT_TENSORS = (("k_cache", "tma"), ("v_cache", "tma"), ("q", "ptr"), ("cache_seqlens", "ptr"),
                 ("page_table", "ptr"), ("o_partial", "ptr"), ("lse_partial", "ptr"), ("k_scale", "ptr"),
                 ("v_scale", "ptr"), ("k_pool", "ptr"), ("v_pool", "ptr"))   # k/v_pool: the caches' addresses (gather)
SPLIT_PARAMS = (*SPLIT_TENSORS,
                ("batch", "i32"), ("seqlen_q", "i32"), ("heads", "i32"), ("rows", "i32"), ("m_tiles", "i32"),
                ("num_splits", "i32"), ("seqlen_new", "i32"), ("capacity", "i32"), ("num_pages", "i32"), ("page_size", "i32"),
                ("page_table_stride", "i32"), ("cta_heads", "i32"), ("causal", "i32"), ("scale_log2", "f32"),
                ("q_stride_b", "i64"), ("q_stride_s", "i64"), ("q_stride_h", "i64"),
                ("kv_heads", "i32"), ("scale_blocks", "i32"),
                *((f"{t}_stride_{d}", "i64") for t in ("k_pool", "v_pool") for d in ("0", "1", "2")),
                *((f"{n}_{part}", "i32") for n in ("cta_heads", "group", "m_tiles", "page", "scale_block")
                  for part in ("mul", "shr")))
# The balanced schedule (DecodeConfig.balanced), after SPLIT_PARAMS: out and lse for the sequences a CTA holds
# whole (out's element strides), and `parts`, the CTAs per KV head (the grid's x)
BALANCED_PARAMS = (("out", "ptr"), ("lse", "ptr"), ("out_stride_b", "i64"), ("out_stride_s", "i64"),
                   ("out_stride_h", "i64"), ("parts", "i32"))
# The unsplit variant: the caller's out and lse where the split kernel takes the workspaces, and
# out's element strides (batch, seqlen, head; unit stride along D), after the split contract.
UNSPLIT_TENSORS = tuple({"o_partial": ("out", "ptr"), "lse_partial": ("lse", "ptr")}.get(n, (n, k))
                        for n, k in SPLIT_TENSORS)
UNSPLIT_PARAMS = (*UNSPLIT_TENSORS, *SPLIT_PARAMS[len(SPLIT_TENSORS):],
                  ("out_stride_b", "i64"), ("out_stride_s", "i64"), ("out_stride_h", "i64"))
# varlen_q kernels (flash_attn_varlen_func with a page_table): q's sequence offsets, after the
# split or unsplit contract
VARLEN_Q_PARAMS = (("cu_seqlens_q", "ptr"),)
APPEND_TENSORS = (("k", "ptr"), ("v", "ptr"), ("k_cache", "ptr"), ("v_cache", "ptr"), ("cache_seqlens", "ptr"),
                  ("page_table", "ptr"))
APPEND_PARAMS = (*APPEND_TENSORS, ("seqlen_new", "i32"), ("kv_heads", "i32"), ("capacity", "i32"),
                 ("num_pages", "i32"), ("page_size", "i32"), ("page_table_stride", "i32"), ("page_mul", "i32"),
                 ("page_shr", "i32"),
                 *((f"{t}_stride_{d}", "i64") for t in ("k", "v", "k_cache", "v_cache") for d in ("0", "1", "2")))
COMBINE_TENSORS = (("o_partial", "ptr"), ("lse_partial", "ptr"), ("out", "ptr"), ("lse", "ptr"))
COMBINE_PARAMS = (*COMBINE_TENSORS, ("total_rows", "i32"), ("num_splits", "i32"), ("seqlen_q", "i32"),
                  ("heads", "i32"), ("out_stride_b", "i64"), ("out_stride_s", "i64"), ("out_stride_h", "i64"),
                  *((f"{n}_{part}", "i32") for n in ("heads", "seqlen_q") for part in ("mul", "shr")))
# CombineConfig.balanced_bn: the lengths and the decode's `parts` (each row's split slots, decode_balanced)
COMBINE_BALANCED_PARAMS = (("cache_seqlens", "ptr"), ("batch", "i32"), ("capacity", "i32"), ("seqlen_new", "i32"),
                           ("parts", "i32"))


def _fill(table, args: dict) -> dict:
    missing = [n for n, _ in table if n not in args]
    if missing:
        raise KeyError(f"launch arguments missing: {missing}")
    return {n: args[n] for n, _ in table}


def split_launch_args(plan, tensors, q_strides: tuple[int, int, int], page_table_stride: int,
                      cache_strides: dict | None = None, out_strides: tuple[int, int, int] | None = None,
                      varlen_total_q: int | None = None) -> dict:
    """The decode kernel's parameters by name from a kvcache.KVCachePlan (SPLIT_PARAMS, or
    UNSPLIT_PARAMS when ``plan.unsplit``), the call's tensors by name (SPLIT_TENSORS or
    UNSPLIT_TENSORS; page_table: the cache_seqlens tensor stands in for a contiguous cache, never
    read; k_pool, v_pool: the k_cache, v_cache tensors again, read by the gather), q's element
    strides (batch, seqlen, head), ``cache_strides``, the element strides of dims 0-2 of k_cache
    and v_cache by name (default: contiguous caches), and unsplit ``out_strides``, out's element
    strides (batch, seqlen, head; default contiguous). ``varlen_total_q`` (a varlen_q kernel:
    q, out packed [total_q, heads, D], the strides' batch entries 0): the contract takes
    tensors["cu_seqlens_q"] too, and seqlen_q is total_q, the row count of the packed LSE [heads,
    total_q] and of the partials [num_splits, total_q, ...] (the kernel's note "Varlen q")."""
    p = plan.problem
    cache = p.cache
    gqa = plan.gqa
    cta_heads = gqa.group if gqa.packed else 1
    causal, _ = decode_mask(p.causal, getattr(p, "window_size", (-1, -1)), getattr(p, "attention_chunk", 0))
    softcap = float(getattr(p, "softcap", 0.0))
    sinks = bool(getattr(p, "sinks", False)) and plan.unsplit     # split: the combine adds them
    parts = getattr(plan, "parts", 0)
    table = UNSPLIT_PARAMS if plan.unsplit else SPLIT_PARAMS + (BALANCED_PARAMS if parts else ())
    if varlen_total_q is not None:
        table = table + VARLEN_Q_PARAMS
    table = table + mod_params(softcap > 0, sinks)
    args = {n: tensors[n] for n, kind in table if kind == "ptr" or kind == "tma"}
    if plan.unsplit or parts:     # balanced: out and lse for the sequences a CTA holds whole
        out_strides = out_strides or (p.seqlen_q * p.heads * p.head_dim, p.heads * p.head_dim, p.head_dim)
        args.update(zip(("out_stride_b", "out_stride_s", "out_stride_h"), (int(x) for x in out_strides)))
        args["parts"] = parts
    args.update(batch=p.batch, seqlen_q=p.seqlen_q, heads=p.heads, rows=gqa.rows, m_tiles=gqa.m_tiles,
                seqlen_new=p.seqlen_new,
                num_splits=plan.num_splits, capacity=cache.capacity, num_pages=cache.num_pages,
                page_size=cache.page_size, page_table_stride=int(page_table_stride), cta_heads=cta_heads, causal=int(causal),
                scale_log2=(softcap if softcap > 0 else float(p.softmax_scale)) * LOG2E, q_stride_b=int(q_strides[0]),
                q_stride_s=int(q_strides[1]), q_stride_h=int(q_strides[2]))
    if varlen_total_q is not None:
        args["seqlen_q"] = int(varlen_total_q)
    if softcap > 0:     # [D-softcap]: t = tanh(s softmax_scale / cap) in units of cap
        args["softcap_scale"] = float(p.softmax_scale) / softcap
    # FP8 block scales of a contiguous cache: [batch, scale_blocks, kv_heads], scale_block tokens each
    block = cache.scale_block or 1
    args["scale_blocks"] = cache.capacity // block if not cache.paged else 0
    args["kv_heads"] = cache.kv_heads
    if cache_strides is None:
        row = cache.kv_heads * p.head_dim
        cache_strides = {n: (cache.page_size * row, row, p.head_dim) for n in ("k_cache", "v_cache")}
    for t, n in (("k_pool", "k_cache"), ("v_pool", "v_cache")):
        for d in range(3):
            args[f"{t}_stride_{d}"] = int(cache_strides[n][d])
    for name, n in (("cta_heads", cta_heads), ("group", gqa.group), ("m_tiles", gqa.m_tiles),
                    ("page", cache.page_size), ("scale_block", block)):
        args[f"{name}_mul"], args[f"{name}_shr"] = divisor(int(n))
    return _fill(table, args)


def split_grid(plan) -> tuple[int, int, int]:
    return plan.grid


def append_launch_args(plan, tensors, strides: dict, page_table_stride: int) -> dict:
    """The append kernel's parameters: ``strides`` the element strides of dims 0-2 of k, v, k_cache
    and v_cache by name."""
    p = plan.problem
    cache = p.cache
    args = {n: tensors[n] for n, _ in APPEND_TENSORS}
    args.update(seqlen_new=p.seqlen_new, kv_heads=cache.kv_heads, capacity=cache.capacity, num_pages=cache.num_pages,
                page_size=cache.page_size, page_table_stride=int(page_table_stride))
    args["page_mul"], args["page_shr"] = divisor(int(cache.page_size))
    for t in ("k", "v", "k_cache", "v_cache"):
        for d in range(3):
            args[f"{t}_stride_{d}"] = int(strides[t][d])
    return _fill(APPEND_PARAMS, args)


def append_grid(plan) -> tuple[int, int, int]:
    """One CTA per (new token, sequence)."""
    return (plan.problem.seqlen_new, plan.problem.batch, 1)


def combine_launch_args(plan, tensors, out_strides: tuple[int, int, int]) -> dict:
    """The combine's parameters; with the problem's sinks (CombineConfig.sinks), tensors["sinks"] too."""
    p = plan.problem
    parts = getattr(plan, "parts", 0)
    table = COMBINE_PARAMS + (COMBINE_BALANCED_PARAMS if parts else ()) + mod_params(False, bool(getattr(p, "sinks", False)))
    args = {n: tensors[n] for n, kind in table if kind == "ptr"}
    if parts:       # the balanced schedule's combine (CombineConfig.balanced_bn): the lengths, the decode's parts
        args.update(batch=p.batch, capacity=p.cache.capacity, seqlen_new=p.seqlen_new, parts=parts)
    args.update(total_rows=p.batch * p.seqlen_q * p.heads, num_splits=plan.num_splits, seqlen_q=p.seqlen_q,
                heads=p.heads, out_stride_b=int(out_strides[0]), out_stride_s=int(out_strides[1]),
                out_stride_h=int(out_strides[2]))
    for name, n in (("heads", p.heads), ("seqlen_q", p.seqlen_q)):
        args[f"{name}_mul"], args[f"{name}_shr"] = divisor(int(n))
    return _fill(table, args)


def combine_grid(plan) -> tuple[int, int, int]:
    p = plan.problem
    rows = p.batch * p.seqlen_q * p.heads
    return (-(-rows // COMBINE_WARPS), 1, 1)


__all__ = ["balanced_by_rule", "APPEND_KERNEL", "AppendConfig", "APPEND_PARAMS", "APPEND_TENSORS", "append_launch_args", "append_grid",
           "KERNEL", "COMBINE_KERNEL", "COMBINE_KERNEL_SM100", "COMBINE_ARCHS", "DecodeConfig", "decode_mask", "mod_params", "CombineConfig", "default_config", "box_rows_for",
           "SPLIT_PARAMS", "VARLEN_Q_PARAMS", "COMBINE_PARAMS", "SPLIT_TENSORS", "COMBINE_TENSORS", "UNSPLIT_PARAMS", "UNSPLIT_TENSORS",
           "split_launch_args",
           "combine_launch_args", "split_grid", "combine_grid", "TILE_M", "COMBINE_WARPS", "DTYPES", "HEAD_DIMS"]
