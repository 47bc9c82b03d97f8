"""The limits FA4Config.supported() applies to MLA on the sm_100a kernel (MLIR-free; `self` is the FA4Config):
MLA prefill (note "MLA" of attention_sm100_config) and absorbed MLA decode (note "MLA decode"). Here, not in
the config module, to keep that one under 800 lines; configs share through kernels/common only.
"""
from __future__ import annotations

from .constants import SM100_SMEM_PER_CTA as SMEM_CARVEOUT
from .fields import ConfigError

MLA_DECODE_BN = 64              # keys per K tile of the MLA decode route (two 72 KiB stages)
MLA_DECODE_HEAD_DIMS = ((576, 512),)  # absorbed MLA decode (note "MLA decode"): 512 latent + 64 rope, V 512
MLA_DECODE_M = 64               # query rows of the MLA decode tile: tcgen05.mma M = 64 (Layout F)
O_HALF_LANE = 16                # Layout F's second lane alignment (PTX ISA 9.1 §9.7.16.10.5)
# MLA decode: at 48 registers ptxas spilled 12 bytes around the MMA thread's 80 MMAs per block; warps 4-7 have
# no role on the decode route (128 untouched), so 192 + 128 + 80 + 80 = 480 of 512 per thread-of-a-warpgroup.
MLA_DECODE_ROLE_REGS = {"mma": 80, "load": 80}
# Split-KV (MLA decode, note "MLA decode"): o_partial float32 [num_splits, batch, seqlen_q, heads, Dv] and
# lse_partial float32 [num_splits, batch, heads, seqlen_q] (natural log, -inf for a split without keys), the
# combine's workspaces (attention_combine_sm90), replace o and lse; num_splits comes last.
SPLIT_OUT = {"o": ("o_partial", "ptr"), "lse": ("lse_partial", "ptr")}
MIN_PAGED_BOX_ROWS = 16         # paged boxes below this: the decode route's row gather (note "Paged")


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
    if self.fp8 or self.gather or not self.plain:
        extra = "e4m3 K/V" if self.fp8 else f"page_size={self.page_size} (row gather)" if self.gather else \
            self.serving_tag().lstrip("_")
        return ConfigError(f"{what} with {extra}: built for a bf16/f16 cache, contiguous or in pages whose "
                           f"TMA boxes hold >= {MIN_PAGED_BOX_ROWS} rows, without serving features")
    if self.exp2_poly_stride != type(self).exp2_poly_stride:
        return ConfigError(f"{what} with exp2_poly_stride={self.exp2_poly_stride}: built and checked at the "
                           f"default {type(self).exp2_poly_stride} only")
    if self.stages not in (0, 2):
        return ConfigError(f"{what} with stages={self.stages}: two K stages are what SMEM holds (use 0 or 2)")
    return None


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


__all__ = ["decode_configs", "MLA_DECODE_HEAD_DIMS", "MLA_DECODE_M", "O_HALF_LANE", "MLA_DECODE_ROLE_REGS",
           "SPLIT_OUT", "mla_prefill_refusal", "mla_decode_refusal", "MLA_DECODE_BN", "MIN_PAGED_BOX_ROWS"]
