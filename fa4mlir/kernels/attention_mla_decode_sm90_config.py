"""Configuration and launch contract of the sm_90a absorbed-MLA decode kernel (MLIR-free: the host
API, attention/mla.py, imports it).

One flash_mla_with_kvcache call runs one or two kernels:

    attention_mla_decode_sm90   grid (m_tiles x num_splits, 1, batch): each CTA attends one M tile
                                of 64 packed query rows (seqlen_q x heads, token-major) to one
                                contiguous range of 64-token KV tiles of one sequence's latent
                                cache (576 columns; V = its first 512) and writes float32 partial
                                O [.., 512] and its LSE (split), or, with one split (`unsplit`),
                                O in q's dtype and the LSE straight into out and lse.
    attention_combine_sm90      the decode kernels' combine (CombineConfig(dtype, 512)): merges
                                the splits in split order (deterministic).

`MLADecodeConfig` fixes what changes the kernel's code: dtype, the page size's TMA box rows
(gcd(64, page_size): 64 for FlashMLA's page size 64, one box per page and 64-column chunk), and
whether it writes partials or the final O, and whether the cache is FlashMLA's FP8 latent
layout (`fp8`: 656-byte token rows, common/mla_fp8.py; q bf16). The head count, seqlen_q, lengths
and split count are launch arguments.

`swap_ab` (0 = off: out of key() and name(), so the M64 kernels' keys are as before it existed) builds
the swap-AB kernel (attention_mla_decode_sm90_swapab.py) for at most SWAP_AB_MAX_ROWS packed rows a
CTA: swap_ab = N, the rows of a CTA's tile (a legal wgmma N: 8, 16, 24, 32) in place of TILE_M = 64;
`swap_ab_rows` picks N for a call; `swap_ab_ring` (swapab_ring) gives each warpgroup one ring of more
one-chunk stages than a tile holds (attention_mla_decode_sm90_swapab_chunks). DEFAULT_RULE (`default_variant`)
makes it the default wherever it is built: a 16-bit cache and seqlen_q x heads <= SWAP_AB_MAX_ROWS (FlashMLA's 16-head decode);
every other call runs the M64 kernel (variant M64_VARIANT). DECODE_VARIANTS are the names
FA4MLIR_MLA_DECODE_VARIANT and bench mla --mla-decode-variant take (attention/mla.py);
`variant_config` turns a name into the config. (The opt-in seesaw_ss, seesaw_fm, full_s and swapab_chunks were
timed and removed: notes/RESULTS.md [R-mla-seesaw-ss-fm], [R-mla-decode-overlap], [A-mla-swapab-chunks-timed].)

Note "FP8 SMEM plan": Q (72 KiB) + one bf16 tile (72 KiB) the wgmmas read + the exchange (9 KiB)
leave 74 KiB of the 227: one staging stage of 64 x 656-byte rows (41 KiB) fits, two (82 KiB) do
not (`fp8_stages` derives the count). The stage is released once both warpgroups have dequantized
it into the bf16 tile, so the TMA of tile j + 1 overlaps tile j's GEMMs and softmax.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd

from .common.constants import LOG2E
from .common.fastdiv import divisor
from .common.fields import ConfigError, check_fields, field_defaults, key_leaving_out
from .common.paging import MIN_TMA_BOX_ROWS

KERNEL = "attention_mla_decode_sm90"
DTYPES = ("bf16", "f16")
D_QK = 576                 # latent 512 + rope 64: q's and the cache's head dim
D_V = 512                  # V: the cache's first 512 columns
BN = 64                    # tokens per KV tile
TILE_M = 64                # packed query rows per CTA: one wgmma M, shared by both consumer warpgroups
CONSUMERS = 2              # warpgroups; each owns 256 of V's 512 columns of O
STAGES = 2                 # KV ring depth: Q (72 KiB) + 2 x 72 KiB tiles fill the SM's SMEM
SMEM_LIMIT = 227 * 1024
MBARRIER_BYTES = 8
MIN_HEADS, MAX_HEADS = 1, 128
FP8_DTYPE = "bf16"         # FlashMLA's FP8 cache: q and out bf16, the latent dequantized to bf16
FP8_SCALE_GROUP = 128      # latent columns per float32 scale
# FlashMLA's FP8 token row: e4m3 latent, float32 scales, bf16 rope (656; common/mla_fp8.ROW_BYTES, which
# imports the DSL: the host API reads this one)
FP8_ROW_BYTES = D_V + 4 * (D_V // FP8_SCALE_GROUP) + 2 * (D_QK - D_V)
FP8_MAX_STAGES = 2
SWAP_AB_VARIANT = "swapab"     # the swap-AB kernel (FA4MLIR_MLA_DECODE_VARIANT, bench mla)
SWAP_AB_RING_VARIANT = "swapab_ring"       # swap AB over a ring of chunk stages a warpgroup (swap_ab_ring)
CHUNK_BYTES = BN * 64 * 2                  # one 64-column chunk of a 16-bit KV tile
M64_VARIANT = "m64"            # the kernel of TILE_M = 64 packed rows a CTA (the only one before DEFAULT_RULE)
RULE_VARIANT = "default"       # DEFAULT_RULE's pick for the call
SWAP_AB_NS = (8, 16, 24, 32)   # legal swap_ab tile rows: wgmma N, a multiple of 8 up to 32 (O^T: 4 N registers)
SWAP_AB_MAX_ROWS = SWAP_AB_NS[-1]
SEESAW_VARIANT = "seesaw"       # FlashMLA's seesaw schedule (attention_mla_decode_seesaw_sm90; bf16)
# variants that set default_config fields
VARIANTS = {SEESAW_VARIANT: {"seesaw": True}}
DECODE_VARIANTS = (RULE_VARIANT, SWAP_AB_VARIANT, M64_VARIANT, *VARIANTS, SWAP_AB_RING_VARIANT)
SWAP_AB_FORMS = {SWAP_AB_VARIANT: {}, SWAP_AB_RING_VARIANT: {"swap_ab_ring": True}}   # the swap-AB kernel's forms' fields
SWAP_AB_X_BYTES = 2 * SWAP_AB_MAX_ROWS * 4 * 4 * 2 + 2 * SWAP_AB_MAX_ROWS * 4   # column maxima, sums, m
# setmaxnreg budgets: the launch gives 168 registers to each of 384 threads (a sub-partition runs
# three of the twelve warps); the consumers' O (128) + S (32) + P (16) need more, the producer few
MMA_REGS, LOAD_REGS = 240, 24
SEESAW_X_BYTES = 4 * 4 * TILE_M   # seesaw: row maxima of the pair's two tiles, both warpgroups' row sums (float32)


@dataclass(frozen=True)
class MLADecodeConfig:
    dtype: str = "bf16"
    box_rows: int = 64             # rows per TMA box: gcd(BN, page_size), at least MIN_TMA_BOX_ROWS
    unsplit: bool = False          # one split: O in q's dtype and the LSE into out, lse (no combine)
    fp8: bool = False              # FlashMLA's FP8 latent cache (656-byte rows), dequantized in the kernel
    seesaw: bool = False           # each warpgroup its own tile of a pair over all 64 keys, P and the row maxima
                                   # across SMEM (attention_mla_decode_seesaw_sm90, FlashMLA's schedule)
    swap_ab: int = 0               # 0: off; N: the swap-AB kernel over tiles of N packed rows (module docstring)
    swap_ab_ring: bool = False     # swap_ab only: each warpgroup's ring `swap_ab_ring_stages` one-chunk stages, more
                                   # than a tile's nine (attention_mla_decode_sm90_swapab_chunks note "Chunk stages")

    @property
    def tile_rows(self) -> int:
        """Packed query rows of one CTA: TILE_M, or swap_ab's N."""
        return self.swap_ab or TILE_M

    @property
    def params(self) -> tuple:
        return UNSPLIT_PARAMS if self.unsplit else SPLIT_PARAMS

    @property
    def threads(self) -> int:
        return 128 * (CONSUMERS + 1)      # warps 0-7: the consumer warpgroups, warp 8 (of warpgroup 2): the producer

    @property
    def boxes_per_tile(self) -> int:
        return BN // self.box_rows

    @staticmethod
    def tile_bytes() -> int:
        """One bf16/f16 tile the wgmmas read (the ring stage itself unless fp8)."""
        return BN * D_QK * 2

    def stage_bytes(self) -> int:
        """One ring stage: the tile, or (fp8) BN staged 656-byte rows."""
        return BN * FP8_ROW_BYTES if self.fp8 else self.tile_bytes()

    @property
    def stages(self) -> int:
        return self.fp8_stages() if self.fp8 else STAGES

    def fp8_stages(self) -> int:
        """note "FP8 SMEM plan": as many staging stages as fit (at most FP8_MAX_STAGES)."""
        fixed = TILE_M * D_QK * 2 + self.tile_bytes() + 16 + self.exchange_bytes()
        per_stage = self.stage_bytes() + 2 * MBARRIER_BYTES
        return min(FP8_MAX_STAGES, (SMEM_LIMIT - fixed) // per_stage)

    def exchange_bytes(self) -> int:
        """note "Exchange": each warpgroup's P half (64 x 32 16-bit) and row maxima, and the row sums;
        seesaw: the two row-max vectors and the row sums (P rides in the tiles' rope columns)."""
        if self.seesaw:
            return SEESAW_X_BYTES
        return CONSUMERS * (TILE_M * BN // CONSUMERS * 2 + TILE_M * 4) + CONSUMERS * TILE_M * 4

    def smem_bytes(self) -> int:
        if self.swap_ab_ring:   # Q^T, each warpgroup's ring of chunk stages, P^T, the exchange, q_slot
            return self._swap_ab_fixed() + CONSUMERS * self.swap_ab_ring_stages() * (CHUNK_BYTES + 2 * MBARRIER_BYTES)
        if self.swap_ab:    # Q^T (N rows), the ring, each warpgroup's P^T (N x 64), the exchange, q_slot
            return (self.swap_ab * D_QK * 2 + STAGES * (self.tile_bytes() + 2 * MBARRIER_BYTES)
                    + CONSUMERS * self.swap_ab * BN * 2 + SWAP_AB_X_BYTES + 16)
        converted = self.tile_bytes() if self.fp8 else 0        # fp8: the bf16 tile next to the staging ring
        rings = D_QK // 64 if self.seesaw else 1                # seesaw: a ring per 64-column chunk
        return (TILE_M * D_QK * 2 + self.stages * (self.stage_bytes() + 2 * MBARRIER_BYTES * rings) + converted + 16
                + self.exchange_bytes())

    def _swap_ab_fixed(self) -> int:
        """The swap-AB kernel's SMEM besides its rings: Q^T, each warpgroup's P^T, the exchange, q_slot."""
        return self.swap_ab * D_QK * 2 + CONSUMERS * self.swap_ab * BN * 2 + SWAP_AB_X_BYTES + 16

    def swap_ab_ring_stages(self) -> int:
        """swap_ab_ring: the chunk stages of each warpgroup's ring, as many as the SMEM leaves (11 at N 32, 12 at
        N 16: two or three chunks of the next tile in flight besides the nine of the current one)."""
        return (SMEM_LIMIT - self._swap_ab_fixed()) // (CONSUMERS * (CHUNK_BYTES + 2 * MBARRIER_BYTES))

    def validate(self) -> "MLADecodeConfig":
        check_fields(self, {"dtype": DTYPES})
        if self.dtype not in DTYPES:
            raise ConfigError(f"MLA decode dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.box_rows < MIN_TMA_BOX_ROWS or BN % self.box_rows:
            raise ConfigError(f"box_rows must divide {BN} and be >= {MIN_TMA_BOX_ROWS} (page sizes that are "
                              f"multiples of 8), got {self.box_rows}")
        if self.fp8 and self.dtype != FP8_DTYPE:
            raise ConfigError(f"the FP8 latent cache is built for dtype {FP8_DTYPE!r} (FlashMLA's bf16 q; note "
                              f"\"FP8 SMEM plan\"), got dtype={self.dtype!r}")
        if self.swap_ab and (self.swap_ab not in SWAP_AB_NS or self.fp8):
            raise ConfigError(f"swap_ab must be 0 or one of {SWAP_AB_NS} (the CTA's packed rows: a wgmma N) with a "
                              f"16-bit cache (fp8 False), got swap_ab={self.swap_ab}, fp8={self.fp8}")
        if self.seesaw and (self.fp8 or self.dtype != "bf16" or self.swap_ab):
            raise ConfigError("the seesaw schedule is built for the bf16 latent cache (its P rescale unpacks bf16 "
                              f"pairs) and 64-row tiles, got dtype={self.dtype!r}, fp8={self.fp8}, "
                              f"swap_ab={self.swap_ab}")
        if self.swap_ab_ring and not ring_builds(self.box_rows):
            raise ConfigError(f"swap_ab_ring is built for 64-row boxes (pages that are multiples of {BN}), got "
                              f"box_rows={self.box_rows}: over smaller boxes its producer spills")
        if self.swap_ab_ring and not self.swap_ab:
            raise ConfigError(f"swap_ab_ring is a form of the swap-AB kernel: it needs swap_ab = N, got "
                              f"swap_ab={self.swap_ab}")
        if self.fp8 and self.stages < 1:
            raise ConfigError("the FP8 latent cache's staging stage does not fit the SMEM (note \"FP8 SMEM plan\")")
        if self.smem_bytes() > SMEM_LIMIT:
            raise ConfigError(f"MLA decode needs {self.smem_bytes()} bytes of SMEM (> {SMEM_LIMIT})")
        return self

    def key(self) -> dict:
        """The compile key; `fp8`, `swap_ab`, `swap_ab_ring` and `seesaw` only where set (the default kernels' keys
        as before they existed)."""
        return {"kernel": KERNEL, **key_leaving_out(self, VARIANT_FIELDS)}

    def name(self) -> str:
        return (f"{KERNEL}_{self.dtype}{'_fp8' if self.fp8 else ''}_b{self.box_rows}"
                f"{f'_swapab{self.swap_ab}' if self.swap_ab else ''}{'_ring' if self.swap_ab_ring else ''}"
                f"{'_seesaw' if self.seesaw else ''}{'_unsplit' if self.unsplit else ''}")


VARIANT_FIELDS = field_defaults(MLADecodeConfig, ("fp8", "swap_ab", "swap_ab_ring", "seesaw"))   # MLADecodeConfig's (common.fields)


def page_supported(page_size: int) -> bool:
    """Page sizes the kernel fetches by TMA boxes inside one page: multiples of MIN_TMA_BOX_ROWS."""
    return page_size >= 1 and gcd(BN, page_size) >= MIN_TMA_BOX_ROWS


def swap_ab_rows(seqlen_q: int, heads: int) -> int:
    """The swap-AB tile rows N for seqlen_q x heads packed rows (the least legal N holding them), or 0
    when they exceed SWAP_AB_MAX_ROWS."""
    rows = seqlen_q * heads
    return next((n for n in SWAP_AB_NS if rows <= n), 0)


# DEFAULT_RULE, the dense decode kernel a call runs when no variant is named (notes/RESULTS.md
# [D-mla-decode-swapab-default]): for a call of at most SWAP_AB_MAX_ROWS packed query rows (seqlen_q x
# heads), by its cache; more rows always run M64_VARIANT (swap AB's N is one wgmma N, at most 32).
# Why: at 16 heads over FlashMLA's benchmark shape (batch 128, 4096 tokens, page 64, bf16) the M64
# kernel spends 3/4 (seqlen_q 1) or 1/2 (seqlen_q 2) of its wgmma rows on padding, and the swap-AB
# kernel was faster on an nvidia-h200: 165.0 -> 151.8 us (seqlen_q 1), 170.7 -> 161.5 us (seqlen_q 2)
# ([D-mla-decode-swapab]). FlashMLA's FP8 cache keeps M64 (swap AB is not built for it: a config error).
# More rows run the seesaw schedule over a bf16 cache: faster on every 64- and 128-head row of bench mla on
# an nvidia-h200 (h128 seqlen_q 1 / 2: 445.0 -> 519.3 / 459.8 -> 550.8 TFLOP/s; h64: 404.9 -> 434.4 /
# 448.4 -> 524.2), the same errors ([D-mla-seesaw]); f16 and FP8 keep M64 (the seesaw is built for bf16).
# Over a bf16 cache the swap-AB kernel runs its ring of chunk stages (swapab_ring, [D-mla-decode-ring-default]):
# on an nvidia-h200, three runs in two sessions, 16 heads seqlen_q 1 / 2: 3924 -> 3951 / 3704 -> 3812, 3998 ->
# 4058 / 3785 -> 3891 and 4014 -> 4044 / 3793 -> 3904 GB/s (+0.7-1.5% / +2.6-3.0%), the same errors; f16 keeps
# the one-ring kernel (the ring is not timed over f16).
DEFAULT_RULE = {"rows <= 32": {"bf16": SWAP_AB_RING_VARIANT, "f16": SWAP_AB_VARIANT, "fp8": M64_VARIANT},
                "rows > 32": {"bf16": SEESAW_VARIANT, "f16": M64_VARIANT, "fp8": M64_VARIANT}}


def default_variant(seqlen_q: int, heads: int, fp8: bool, dtype: str = "bf16", page_size: int = BN) -> str:
    """DEFAULT_RULE's variant for a call of seqlen_q x heads packed rows over a cache of q's ``dtype``
    (``fp8``: FlashMLA's FP8 cache) and ``page_size``: the ring of chunk stages only where its pages hold whole
    64-row boxes (`ring_builds`), the one-ring swap AB elsewhere."""
    size = "rows <= 32" if swap_ab_rows(seqlen_q, heads) else "rows > 32"
    variant = DEFAULT_RULE[size]["fp8" if fp8 else dtype]
    return SWAP_AB_VARIANT if variant == SWAP_AB_RING_VARIANT and not ring_builds(page_size) else variant


def ring_builds(page_size: int) -> bool:
    """swap_ab_ring is built for pages of whole 64-row boxes: over 16-row boxes (pages of 16, 48, ..) its
    producer spilled 24-80 bytes at every N (ptxas 13.0), so the config refuses it there."""
    return gcd(BN, page_size) == BN


def variant_runs(variant: str, seqlen_q: int, heads: int, fp8: bool, dtype: str = "bf16", page_size: int = BN) -> bool:
    """Whether the named variant (DECODE_VARIANTS) is built for the call: swap AB for a 16-bit cache and at
    most SWAP_AB_MAX_ROWS packed rows (swapab_ring: with pages of whole 64-row boxes); seesaw for bf16; M64 and
    the rule for every call."""
    if variant == SWAP_AB_RING_VARIANT and not ring_builds(page_size):
        return False
    if variant in SWAP_AB_FORMS:
        return not fp8 and bool(swap_ab_rows(seqlen_q, heads))
    if variant in VARIANTS:
        return not fp8 and (not VARIANTS[variant].get("seesaw") or dtype == "bf16")
    return variant in DECODE_VARIANTS


def variant_config(cfg: "MLADecodeConfig", variant: str, seqlen_q: int, heads: int) -> "MLADecodeConfig":
    """``cfg`` (default_config's: the M64 kernel) as the named variant (M64_VARIANT, SWAP_AB_VARIANT, one of
    VARIANTS; RULE_VARIANT: DEFAULT_RULE's) for a call of seqlen_q x heads packed rows; not validated."""
    if variant == RULE_VARIANT:
        variant = default_variant(seqlen_q, heads, cfg.fp8, cfg.dtype, cfg.box_rows)
    if variant in SWAP_AB_FORMS:
        return replace(cfg, swap_ab=swap_ab_rows(seqlen_q, heads), **SWAP_AB_FORMS[variant])
    if variant in VARIANTS:
        return replace(cfg, **VARIANTS[variant])
    if variant != M64_VARIANT:
        raise ConfigError(f"MLA decode variant must be one of {DECODE_VARIANTS}, got {variant!r}")
    return cfg


def rule_config(dtype: str, page_size: int, seqlen_q: int, heads: int, unsplit: bool = False,
                fp8: bool = False) -> "MLADecodeConfig":
    """The kernel DEFAULT_RULE runs for a call of seqlen_q x heads packed rows over a cache of ``page_size``."""
    return variant_config(default_config(dtype, page_size, unsplit=unsplit, fp8=fp8), RULE_VARIANT, seqlen_q, heads)


def default_config(dtype: str, page_size: int, unsplit: bool = False, fp8: bool = False,
                   seesaw: bool = False) -> MLADecodeConfig:
    """The M64 kernel for a cache of ``page_size`` (DEFAULT_RULE's for more than SWAP_AB_MAX_ROWS packed rows
    or an FP8 cache; `rule_config` for any call); fp8: FlashMLA's FP8 latent cache (dtype is q's: bf16);
    seesaw: the seesaw schedule (bf16)."""
    return MLADecodeConfig(dtype=dtype, box_rows=gcd(BN, page_size), unsplit=unsplit, fp8=fp8, seesaw=seesaw)


VARIANT_ENV = "FA4MLIR_MLA_DECODE_VARIANT"    # the knob naming a DECODE_VARIANTS entry (attention/mla.py)


# ----------------------------------------------------------------------------------------------
# Launch contract: (name, kind) in kernel-parameter order
# ----------------------------------------------------------------------------------------------

SPLIT_TENSORS = (("kv_cache", "tma"), ("q", "ptr"), ("cache_seqlens", "ptr"), ("block_table", "ptr"),
                 ("o_partial", "ptr"), ("lse_partial", "ptr"))
SCALARS = (("batch", "i32"), ("seqlen_q", "i32"), ("heads", "i32"), ("rows", "i32"), ("m_tiles", "i32"),
           ("num_splits", "i32"), ("capacity", "i32"), ("num_pages", "i32"), ("page_size", "i32"),
           ("block_table_stride", "i32"), ("causal", "i32"), ("scale_log2", "f32"),
           ("q_stride_b", "i64"), ("q_stride_s", "i64"), ("q_stride_h", "i64"),
           *((f"{n}_{part}", "i32") for n in ("heads", "m_tiles", "page") for part in ("mul", "shr")))
SPLIT_PARAMS = (*SPLIT_TENSORS, *SCALARS)
UNSPLIT_TENSORS = tuple({"o_partial": ("out", "ptr"), "lse_partial": ("lse", "ptr")}.get(n, (n, k))
                        for n, k in SPLIT_TENSORS)
UNSPLIT_PARAMS = (*UNSPLIT_TENSORS, *SCALARS,
                  ("out_stride_b", "i64"), ("out_stride_s", "i64"), ("out_stride_h", "i64"))


def launch_args(cfg: MLADecodeConfig, tensors: dict, *, batch: int, seqlen_q: int, heads: int, num_splits: int,
                num_pages: int, page_size: int, max_pages: int, causal: bool, softmax_scale: float,
                q_strides: tuple, block_table_stride: int, out_strides: tuple | None = None) -> dict:
    """The kernel's parameters by name (cfg.params): ``tensors`` by the contract's tensor names
    (anything: addresses, arrays, TensorRefs), q's and (unsplit) out's element strides (batch,
    seqlen, head; unit stride along the head dim)."""
    rows = seqlen_q * heads
    m_tiles = -(-rows // cfg.tile_rows)
    args = {n: tensors[n] for n, kind in cfg.params if kind in ("ptr", "tma")}
    args.update(batch=batch, seqlen_q=seqlen_q, heads=heads, rows=rows, m_tiles=m_tiles, num_splits=num_splits,
                capacity=max_pages * page_size, num_pages=num_pages, page_size=page_size,
                block_table_stride=int(block_table_stride), causal=int(bool(causal)),
                scale_log2=float(softmax_scale) * LOG2E,
                q_stride_b=int(q_strides[0]), q_stride_s=int(q_strides[1]), q_stride_h=int(q_strides[2]))
    for name, n in (("heads", heads), ("m_tiles", m_tiles), ("page", page_size)):
        args[f"{name}_mul"], args[f"{name}_shr"] = divisor(int(n))
    if cfg.unsplit:
        out_strides = out_strides or (seqlen_q * heads * D_V, heads * D_V, D_V)
        args.update(out_stride_b=int(out_strides[0]), out_stride_s=int(out_strides[1]),
                    out_stride_h=int(out_strides[2]))
    missing = [n for n, _ in cfg.params if n not in args]
    if missing:
        raise KeyError(f"launch arguments missing: {missing}")
    return {n: args[n] for n, _ in cfg.params}


def grid(batch: int, seqlen_q: int, heads: int, num_splits: int, tile_rows: int = TILE_M) -> tuple[int, int, int]:
    """(M tiles of `tile_rows` (the config's tile_rows) x splits, 1, batch)."""
    return (-(-seqlen_q * heads // tile_rows) * num_splits, 1, batch)


__all__ = ["VARIANT_ENV", "VARIANTS", "SEESAW_VARIANT", "SEESAW_X_BYTES", "KERNEL", "DTYPES", "FP8_DTYPE", "FP8_ROW_BYTES", "D_QK", "D_V", "BN", "TILE_M", "CONSUMERS", "STAGES", "MLADecodeConfig", "default_config",
           "page_supported", "SPLIT_PARAMS", "UNSPLIT_PARAMS", "SPLIT_TENSORS", "UNSPLIT_TENSORS", "launch_args", "grid",
           "MIN_HEADS", "MAX_HEADS", "SWAP_AB_VARIANT", "SWAP_AB_RING_VARIANT", "SWAP_AB_NS", "SWAP_AB_MAX_ROWS", "swap_ab_rows",
           "M64_VARIANT", "RULE_VARIANT", "DECODE_VARIANTS", "DEFAULT_RULE", "default_variant", "variant_runs",
           "variant_config", "rule_config"]
