"""MLA on the sm_100a kernel's FA4Config (MLIR-free; `self` is the FA4Config): the limits supported() applies
to MLA prefill (note "MLA" of attention_sm100_config) and absorbed MLA decode (note "MLA decode"), the MLA
decode geometry (MLADecodeGeometry: 64-row tiles, packed heads, O's halves in TMEM's two lane halves; its
TMEM plan and launch parameters) and the MLA code shapes. Here, not in the config module, to keep that one
under 800 lines; configs share through kernels/common only.
"""
from __future__ import annotations

from math import gcd

from .constants import SM100_SMEM_PER_CTA as SMEM_CARVEOUT
from .fields import ConfigError
from .tmem import TMEM_LANES, tmem_alloc_columns

MLA_DECODE_BN = 64              # keys per K tile of the MLA decode route (two 72 KiB stages)
MLA_DECODE_HEAD_DIMS = ((576, 512),)  # absorbed MLA decode (note "MLA decode"): 512 latent + 64 rope, V 512
MLA_DECODE_M = 64               # query rows of the MLA decode tile: tcgen05.mma M = 64 (Layout F)
O_HALF_LANE = 16                # Layout F's second lane alignment (PTX ISA 9.1 §9.7.16.10.5)
# MLA decode: at 48 registers ptxas spilled 12 bytes around the MMA thread's 80 MMAs per block; warps 4-7 have
# no role on the decode route (128 untouched), so 192 + 128 + 80 + 80 = 480 of 512 per thread-of-a-warpgroup.
MLA_DECODE_ROLE_REGS = {"mma": 80, "load": 80}
# FlashMLA's FP8 latent cache (note "MLA FP8" of attention_sm100_mla_decode; kv_dtype="e4m3", kv_scale="row"):
# 656-byte token rows (512 e4m3, four float32 scales, 64 bf16 rope), dequantized by warps 4-7, one 16-bit K
# stage beside one raw stage (two of each exceed SMEM). Warps 4-7 (the FP8 convert role, or the row gather of
# pages without 16-row boxes, note "MLA gather") run at 160 registers: 192 + 160 + 80 + 80 = 512
MLA_FP8_SCALE = "row"
MLA_FP8_ROW_BYTES = 512 + 4 * 4 + 64 * 2
MLA_FREE_WARPS_REGS = 160
# Split-KV (MLA decode, note "MLA decode"): o_partial float32 [num_splits, batch, seqlen_q, heads, Dv] and
# lse_partial float32 [num_splits, batch, heads, seqlen_q] (natural log, -inf for a split without keys), the
# combine's workspaces (attention_combine_sm90), replace o and lse; num_splits comes last.
SPLIT_OUT = {"o": ("o_partial", "ptr"), "lse": ("lse_partial", "ptr")}
MIN_PAGED_BOX_ROWS = 16         # paged boxes below this: the decode route's row gather (note "Paged"; MLA: "MLA gather")
MLA_DECODE_PAGE_SIZES = (64, 16)   # 1 and 4 TMA boxes per 64-key tile
# why head_dim_v 512 is refused off the decode route (FA4Config.plan_fits)
MLA_DECODE_ROUTE_HINT = ("; absorbed MLA decode (576/512) is built on the decode route only (num_q_tiles=1, "
                         "fuse_gqa=True: 64 query rows, O's halves in Layout F's two lane halves, note \"MLA decode\"); "
                         "two 128-row Q tiles would need 2 x 512 TMEM columns for O alone")


class MLADecodeGeometry:
    """FA4Config's tile geometry where MLA decode departs from the 128-row tiles (note "MLA decode"): a
    mixin of properties over the config's fields (head_dim, head_dim_v, group, padded_head_dim_v)."""

    @property
    def mla_decode(self) -> bool:
        """head_dim/head_dim_v the absorbed MLA decode pair 576/512 (note "MLA decode")."""
        return (self.head_dim, self.head_dim_v) in MLA_DECODE_HEAD_DIMS

    @property
    def tile_heads(self) -> int:
        """Query heads packed into one decode tile: the GQA group, or for MLA decode min(group, 64)
        (128 heads take two CTAs per token, each reading the latent cache)."""
        return min(self.group, MLA_DECODE_M) if self.mla_decode else self.group

    @property
    def mma_m(self) -> int:
        """Rows of one Q tile = tcgen05.mma M: 128, or 64 for MLA decode (note "MLA decode")."""
        return MLA_DECODE_M if self.mla_decode else TMEM_LANES

    MLA_FP8_SCALE = MLA_FP8_SCALE      # kv_scale of FlashMLA's FP8 rows (FA4Config's FP8 refusal reads it)

    def fp8_tiles(self, stages: int) -> dict:
        """The e4m3 tiles' SMEM plan entries: k8_tile / v8_tile bytes (bn rows of head_dim / head_dim_v bytes,
        or for MLA decode bn of FlashMLA's 656-byte rows and no V: note "MLA FP8") and their `stages` rings."""
        k8, v8 = (self.bn * MLA_FP8_ROW_BYTES, 0) if self.mla_decode else (self.bn * self.head_dim,
                                                                            self.bn * self.head_dim_v)
        return dict(k8_tile=k8, v8_tile=v8, k8=stages * k8, v8=stages * v8)

    @property
    def mla_gather(self) -> bool:
        """MLA decode over pages whose TMA boxes would hold under 16 rows: its row gather (note "MLA gather")."""
        return self.mla_decode and self.page_size > 0 and gcd(self.bn, self.page_size) < MIN_PAGED_BOX_ROWS

    @property
    def mla_fp8(self) -> bool:
        """MLA decode over FlashMLA's FP8 latent cache (kv_scale "row": scales inline in each 656-byte row)."""
        return self.mla_decode and self.kv_dtype == "e4m3" and self.kv_scale == MLA_FP8_SCALE

    @property
    def o_cols(self) -> int:
        """TMEM columns of O per lane: head_dim_v, or half of it where O's halves share the columns in
        Layout F's two lane halves (note "MLA decode")."""
        return self.padded_head_dim_v // 2 if self.mla_decode else self.padded_head_dim_v


def mla_decode_tmem_plan(self) -> dict:
    """MLA decode's TMEM columns: O's two halves in lane halves 0 / 16 (o_cols each), then S; P and the
    correction columns alias S as in the other plans."""
    used = self.o_cols + self.bn
    return {"O0": 0, "S0": self.o_cols, "P0": self.o_cols + self.bn // 2, "C0": self.o_cols, "used": used,
            "alloc": tmem_alloc_columns(used)}


def mla_decode_group_refusal(self) -> ConfigError | None:
    """ConfigError unless MLA decode's min(group, 64) packed heads tile the group and the 64 rows."""
    if self.group % self.tile_heads or MLA_DECODE_M % self.tile_heads:
        return ConfigError(f"group={self.group}: MLA decode packs min(group, {MLA_DECODE_M}) heads into its "
                           f"{MLA_DECODE_M} rows, so the group must divide {MLA_DECODE_M} or be a multiple of it")
    return None


def mla_decode_params(self, base: tuple) -> tuple:
    """The launch contract `base` as MLA decode takes it: V is the K tile's first 512 columns (no v
    parameter); split_kv writes float32 partials for the combine in place of o and lse, then num_splits."""
    if self.mla_decode:
        base = tuple(p for p in base if p[0] != "v")
    if self.split_kv:
        base = (*(SPLIT_OUT.get(n, (n, kind)) for n, kind in base), ("num_splits", "i32"))
    return base


def mla_prefill_refusal(self) -> ConfigError | None:
    """The MLA prefill space's limits (note "MLA"): the plain two-Q-tile prefill CTA over a contiguous
    K/V, the default exp2_poly_stride, stages 0 (its one K/V stage) -- what mla_configs() compiles."""
    if self.paged or self.decode or not self.plain:
        what = f"page_size={self.page_size}, num_q_tiles={self.num_q_tiles}" + \
            (f", {self.serving_tag().lstrip('_')}" if not self.plain else "")
        return ConfigError(f"MLA head_dim/head_dim_v {self.head_dim}/{self.head_dim_v} with {what}: MLA is built "
                           f"for the plain contiguous two-Q-tile prefill kernel only (note \"MLA\")")
    if self.exp2_poly_stride != type(self).exp2_poly_stride:
        return ConfigError(f"MLA {self.head_dim}/{self.head_dim_v} with exp2_poly_stride={self.exp2_poly_stride}: "
                           f"MLA is built and checked at the default {type(self).exp2_poly_stride} only")
    if self.stages not in (0, 1):
        return ConfigError(f"MLA {self.head_dim}/{self.head_dim_v} with stages={self.stages}: one K/V stage is "
                           f"all SMEM holds next to the two 192-wide Q tiles (use 0 or 1)")
    return None

def mla_decode_refusal(self) -> ConfigError | None:
    """The MLA decode space's limits (note "MLA decode"): the decode route with one latent KV head, BN 64,
    a contiguous cache or per-page TMA boxes, bf16/f16 K/V, no serving features, the default
    exp2_poly_stride, stages 0 or 2 -- what mla_decode_configs() compiles."""
    what = f"MLA decode {self.head_dim}/{self.head_dim_v}"
    if not (self.decode and self.fuse_gqa):
        return ConfigError(f"{what} with num_q_tiles={self.num_q_tiles}, fuse_gqa={self.fuse_gqa}: built on the "
                           f"decode route only (num_q_tiles=1, fuse_gqa=True)")
    if self.num_kv_heads != 1:
        return ConfigError(f"{what} with num_kv_heads={self.num_kv_heads}: absorbed MLA has one latent KV head")
    if self.bn != MLA_DECODE_BN:
        return ConfigError(f"{what} with bn={self.bn}: built for bn={MLA_DECODE_BN} (a 64 x 576 K tile is 72 KiB; "
                           f"two stages and the 64-row Q tile fill the {SMEM_CARVEOUT}-byte carve-out)")
    if (self.fp8 and not self.mla_fp8) or (self.gather and self.fp8) or not self.plain:
        extra = f"FP8 rows in pages of {self.page_size} (no {MIN_PAGED_BOX_ROWS}-row boxes)" if self.gather and \
            self.fp8 else f"e4m3 K/V scaled per {self.kv_scale}" if self.fp8 else self.serving_tag().lstrip("_")
        return ConfigError(f"{what} with {extra}: built for a bf16/f16 cache, contiguous or paged (pages without "
                           f"{MIN_PAGED_BOX_ROWS}-row TMA boxes by the row gather), or FlashMLA's FP8 rows (kv_scale="
                           f"'{MLA_FP8_SCALE}') in pages of {MIN_PAGED_BOX_ROWS}-row boxes, without serving features")
    if self.mla_fp8 and (self.dtype != "bf16" or not self.paged):
        return ConfigError(f"{what} over FlashMLA's FP8 rows with dtype={self.dtype}, page_size={self.page_size}: "
                           f"built for bf16 q (the rows' rope is bf16) over a paged cache")
    if self.exp2_poly_stride != type(self).exp2_poly_stride:
        return ConfigError(f"{what} with exp2_poly_stride={self.exp2_poly_stride}: built and checked at the "
                           f"default {type(self).exp2_poly_stride} only")
    if self.stages not in ((0, 1) if self.mla_fp8 else (0, 2)):
        return ConfigError(f"{what} with stages={self.stages}: " + ("one 16-bit K stage and one FP8 stage are what "
                           "SMEM holds (use 0 or 1)" if self.mla_fp8 else "two K stages are what SMEM holds (use 0 or 2)"))
    return None


def prefill_configs(cls, head_dims, dtypes) -> list:
    """Note "MLA"'s code shapes: `head_dims` (192/128) on the plain two-Q-tile prefill CTA, each of `dtypes`,
    causal or not, every GQA group class (1, a power of two, other)."""
    return [cls(dtype=dtype, head_dim=qk, head_dim_v=ov, causal=causal, num_q_heads=12 * group, num_kv_heads=12)
            for qk, ov in head_dims for dtype in dtypes for causal in (False, True) for group in (1, 4, 3)]


def decode_configs(cls) -> list:
    """Note "MLA decode"'s kernels: absorbed MLA (576/512, one latent KV head) on the decode route over a paged
    latent cache (page 64, and 16: four boxes per tile) or a contiguous one, heads 16 (x 4 tokens per tile),
    64 (one token) and 128 (two CTAs per token), causal (MTP) or not, bf16 and f16; and split-KV (float32
    partials for the combine) at 16 and 128 heads. Kept out of
    supported_configs() (CI's sweep); tests/test_attention_sm100_mla_decode.py compiles, verifies and
    interprets them."""
    base = dict(head_dim=576, head_dim_v=512, num_kv_heads=1, bn=MLA_DECODE_BN, num_q_tiles=1, fuse_gqa=True)
    return [cls(**base, dtype="bf16", num_q_heads=16, causal=True, page_size=64),
            cls(**base, dtype="bf16", num_q_heads=64, page_size=64),
            cls(**base, dtype="bf16", num_q_heads=128, causal=True, page_size=64),
            cls(**base, dtype="f16", num_q_heads=32, page_size=16),
            cls(**base, dtype="bf16", num_q_heads=16),
            cls(**base, dtype="bf16", num_q_heads=16, causal=True, page_size=64, split_kv=True),
            cls(**base, dtype="bf16", num_q_heads=128, page_size=64, split_kv=True)]


def decode_fp8_configs(cls) -> list:
    """Note "MLA FP8"'s kernels: FlashMLA's FP8 latent cache (656-byte rows, bf16 q) at page 64, 16 heads
    causal (MTP) and 128 heads split-KV, and at page 16 (four boxes a tile), 32 heads. Apart from decode_configs() (whose tests check the bf16 kernels'
    two K stages); tests/test_attention_sm100_mla_decode_fp8.py compiles, verifies and interprets them."""
    base = dict(head_dim=576, head_dim_v=512, num_kv_heads=1, bn=MLA_DECODE_BN, num_q_tiles=1, fuse_gqa=True,
                dtype="bf16", kv_dtype="e4m3", kv_scale=MLA_FP8_SCALE, page_size=64)
    return [cls(**base, num_q_heads=16, causal=True), cls(**base, num_q_heads=128, split_kv=True),
            cls(**{**base, "page_size": 16}, num_q_heads=32)]


def decode_gather_configs(cls) -> list:
    """Note "MLA gather"'s kernels: pages of 8 (16 heads, causal) and 24 rows (128 heads, split-KV), whose
    TMA boxes would hold 8 rows; tests/test_attention_sm100_mla_decode_gather.py compiles, verifies and
    interprets them."""
    base = dict(head_dim=576, head_dim_v=512, num_kv_heads=1, bn=MLA_DECODE_BN, num_q_tiles=1, fuse_gqa=True)
    return [cls(**base, num_q_heads=16, causal=True, page_size=8),
            cls(**base, num_q_heads=128, page_size=24, split_kv=True)]


__all__ = ["decode_configs", "decode_fp8_configs", "decode_gather_configs", "MLA_FP8_SCALE", "MLA_FP8_ROW_BYTES", "MLA_FREE_WARPS_REGS", "prefill_configs", "MLA_DECODE_HEAD_DIMS", "MLA_DECODE_M", "O_HALF_LANE",
           "MLA_DECODE_ROLE_REGS", "SPLIT_OUT", "mla_prefill_refusal", "mla_decode_refusal", "MLA_DECODE_BN",
           "MIN_PAGED_BOX_ROWS", "MLA_DECODE_PAGE_SIZES", "MLA_DECODE_ROUTE_HINT", "MLADecodeGeometry",
           "mla_decode_tmem_plan", "mla_decode_group_refusal", "mla_decode_params"]
