"""MLA on the sm_100a kernel (MLIR-free): the limits supported() applies to MLA prefill (note "MLA" of
attention_sm100_config) and absorbed MLA decode (note "MLA decode"), and the configs the tests compile for
each (kept out of supported_configs(), CI's sweep). FA4Config's refusal calls these with itself as `self`.
"""
from __future__ import annotations

from .attention_sm100_config import (DTYPES, MIN_PAGED_BOX_ROWS, MLA_DECODE_BN, MLA_HEAD_DIMS, SMEM_CARVEOUT,
                                     FA4Config)
from .common.fields import ConfigError


def mla_prefill_refusal(self: FA4Config) -> ConfigError | None:
    """The MLA prefill space's limits (note "MLA"): the plain two-Q-tile prefill CTA over a contiguous
    K/V, the default exp2_poly_stride, stages 0 (its one K/V stage) -- what mla_configs() compiles."""
    if self.paged or self.decode or not self.plain:
        what = f"page_size={self.page_size}, num_q_tiles={self.num_q_tiles}" + \
            (f", {self.serving_tag().lstrip('_')}" if not self.plain else "")
        return ConfigError(f"MLA head_dim/head_dim_v {self.head_dim}/{self.head_dim_v} with {what}: MLA is built "
                           f"for the plain contiguous two-Q-tile prefill kernel only (note \"MLA\")")
    if self.exp2_poly_stride != FA4Config.exp2_poly_stride:
        return ConfigError(f"MLA {self.head_dim}/{self.head_dim_v} with exp2_poly_stride={self.exp2_poly_stride}: "
                           f"MLA is built and checked at the default {FA4Config.exp2_poly_stride} only")
    if self.stages not in (0, 1):
        return ConfigError(f"MLA {self.head_dim}/{self.head_dim_v} with stages={self.stages}: one K/V stage is "
                           f"all SMEM holds next to the two 192-wide Q tiles (use 0 or 1)")
    return None

def mla_decode_refusal(self: FA4Config) -> ConfigError | None:
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
    if self.exp2_poly_stride != FA4Config.exp2_poly_stride:
        return ConfigError(f"{what} with exp2_poly_stride={self.exp2_poly_stride}: built and checked at the "
                           f"default {FA4Config.exp2_poly_stride} only")
    if self.stages not in (0, 2):
        return ConfigError(f"{what} with stages={self.stages}: two K stages are what SMEM holds (use 0 or 2)")
    return None


def mla_configs() -> list[FA4Config]:
    """Note "MLA"'s code shapes: head_dim 192 / head_dim_v 128 on the plain
    two-Q-tile prefill CTA, bf16 and f16, causal or not, every GQA group class (1, a power of two,
    other). Kept out of supported_configs() (CI's sweep); tests/test_attention_sm100_mla.py compiles,
    verifies and interprets them."""
    return [FA4Config(dtype=dtype, head_dim=qk, head_dim_v=ov, causal=causal, num_q_heads=12 * group,
                      num_kv_heads=12)
            for qk, ov in MLA_HEAD_DIMS for dtype in DTYPES for causal in (False, True) for group in (1, 4, 3)]


MLA_DECODE_PAGE_SIZES = (64, 16)   # 1 and 4 TMA boxes per 64-key tile


def mla_decode_configs() -> list[FA4Config]:
    """Note "MLA decode"'s kernels: absorbed MLA (576/512, one latent KV head) on the decode route over a paged
    latent cache (page 64, and 16: four boxes per tile) or a contiguous one, heads 16 (x 4 tokens per tile),
    64 (one token) and 128 (two CTAs per token), causal (MTP) or not, bf16 and f16; and split-KV (float32
    partials for the combine) at 16 and 128 heads. Kept out of
    supported_configs() (CI's sweep); tests/test_attention_sm100_mla_decode.py compiles, verifies and
    interprets them."""
    base = dict(head_dim=576, head_dim_v=512, num_kv_heads=1, bn=MLA_DECODE_BN, num_q_tiles=1, fuse_gqa=True)
    return [FA4Config(**base, dtype="bf16", num_q_heads=16, causal=True, page_size=64),
            FA4Config(**base, dtype="bf16", num_q_heads=64, page_size=64),
            FA4Config(**base, dtype="bf16", num_q_heads=128, causal=True, page_size=64),
            FA4Config(**base, dtype="f16", num_q_heads=32, page_size=16),
            FA4Config(**base, dtype="bf16", num_q_heads=16),
            FA4Config(**base, dtype="bf16", num_q_heads=16, causal=True, page_size=64, split_kv=True),
            FA4Config(**base, dtype="bf16", num_q_heads=128, page_size=64, split_kv=True)]


__all__ = ["mla_prefill_refusal", "mla_decode_refusal", "mla_configs", "mla_decode_configs"]
