"""Configuration and launch contract of the sm_90a sparse MLA decode (FlashMLA's flash_mla_with_kvcache
with indices; MLIR-free: the host API, attention/mla_sparse_decode.py, imports it).

    attention_mla_sparse_decode_sm90   grid (tokens x head_blocks, num_splits, 1), tokens = batch x
                                seqlen_q, head_blocks = ceil(h_q / 64): CTA (x, y) attends query token
                                x // head_blocks's heads (x % head_blocks) x 64 .. (rows past h_q are
                                zero and never stored) to split y's share of the KV tiles its top-k
                                indices name in the paged cache; unsplit it writes out [batch, seqlen_q,
                                h_q, 512] in q's dtype and lse [batch, h_q, seqlen_q], split the float32
                                partials attention_combine_sm90 (head dim 512) merges.

The kernel is the sparse prefill's (attention_mla_sparse_sm90: the same cp.async row gather, the same
consumers, its setmaxnreg 240 / 24 and register_pool_fits story); this config adds what changes its
code: q's dtype (bf16 or f16: the latent cache holds q's dtype), topk_length [batch] and the split.
The indices are FlashMLA's: page x page_size + offset, a row of the cache viewed as [num_pages x
page_size, 576] (kv_stride_s = the cache's token stride; the host checks pages are evenly strided).

Seam for the FP8 cache (FlashMLA's 656-byte layout; being built for the dense decode on h/mlafp8):
`kv_dtype` names the cache's element format ("": q's dtype); only q's dtype is accepted here. An FP8 cache changes
the gather role only (each row's 656 bytes land and are dequantised into the tile the consumers
already read): the consumers, the split and the combine stay as they are.
"""
from __future__ import annotations

from dataclasses import dataclass

from .attention_mla_sparse_sm90_config import (BN, CONSUMERS, D_QK, D_V, LOAD_REGS, MMA_REGS, SMEM_LIMIT, TILE_M,
                                               MLASparseConfig, register_pool_fits)
from .common.constants import LOG2E
from .common.fastdiv import divisor
from .common.fields import ConfigError, check_fields

KERNEL = "attention_mla_sparse_decode_sm90"
DTYPES = ("bf16", "f16")
MIN_HEADS, MAX_HEADS = 1, 128      # FlashMLA's sparse decode: 64 or 128; fewer rows are masked in one tile
MIN_TOPK, MAX_TOPK = BN, 2048 * 8


@dataclass(frozen=True)
class MLASparseDecodeConfig:
    dtype: str = "bf16"
    kv_dtype: str = ""              # "": q's dtype (the seam for FlashMLA's FP8 cache, module docstring)
    topk_length: bool = False       # the kernel reads topk_length [batch] int32 (else every token sees topk)
    split: bool = False             # float32 partials for the combine (else the final out and lse)

    @property
    def params(self) -> tuple:
        tensors = [("kv", "ptr"), ("q", "ptr"), ("indices", "ptr")]
        if self.topk_length:
            tensors.append(("topk_length", "ptr"))
        return (*tensors, *(SPLIT_OUTPUTS if self.split else OUTPUTS), *SCALARS)

    @property
    def threads(self) -> int:
        return MLASparseConfig().threads

    @staticmethod
    def tile_bytes() -> int:
        return MLASparseConfig.tile_bytes()

    # the prefill's buffers, unchanged
    exchange_bytes = staticmethod(MLASparseConfig.exchange_bytes)
    bias_bytes = staticmethod(MLASparseConfig.bias_bytes)
    rows_bytes = staticmethod(MLASparseConfig.rows_bytes)

    def smem_bytes(self) -> int:
        return MLASparseConfig().smem_bytes()

    def validate(self) -> "MLASparseDecodeConfig":
        check_fields(self, {"dtype": DTYPES})
        if self.dtype not in DTYPES:
            raise ConfigError(f"sparse MLA decode: dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.kv_dtype not in ("", self.dtype):
            raise ConfigError(f"sparse MLA decode: the cache must hold q's dtype {self.dtype} (kv_dtype \"\"), got "
                              f"{self.kv_dtype!r}; the FP8 cache is not built here")
        if self.smem_bytes() > SMEM_LIMIT:
            raise ConfigError(f"sparse MLA decode needs {self.smem_bytes()} bytes of SMEM (> {SMEM_LIMIT})")
        fits, need, pool = register_pool_fits(self.threads, MMA_REGS, LOAD_REGS, CONSUMERS)
        if not fits:
            raise ConfigError(f"setmaxnreg budgets need {need} registers, more than the launch allocation of {pool}")
        return self

    def key(self) -> dict:
        return {"kernel": KERNEL, **self.__dict__}

    def name(self) -> str:
        return f"{KERNEL}_{self.dtype}{'_topklen' if self.topk_length else ''}{'_split' if self.split else ''}"


# ----------------------------------------------------------------------------------------------
# Launch contract: (name, kind) in kernel-parameter order (topk_length in `params` when set)
# ----------------------------------------------------------------------------------------------

OUTPUTS = (("out", "ptr"), ("lse", "ptr"))
SPLIT_OUTPUTS = (("o_partial", "ptr"), ("lse_partial", "ptr"))
SCALARS = (("tokens", "i32"), ("batch", "i32"), ("seqlen_q", "i32"), ("num_splits", "i32"), ("s_kv", "i32"),
           ("heads", "i32"), ("head_blocks", "i32"), ("topk", "i32"), ("scale", "f32"), ("scale_log2", "f32"),
           ("q_stride_s", "i64"), ("q_stride_h", "i64"), ("kv_stride_s", "i64"), ("indices_stride_s", "i64"),
           ("out_stride_s", "i64"), ("out_stride_h", "i64"), ("head_blocks_mul", "i32"),
           ("head_blocks_shr", "i32"), ("seqlen_q_mul", "i32"), ("seqlen_q_shr", "i32"))


def head_blocks(heads: int) -> int:
    return -(-heads // TILE_M)


def launch_args(cfg: MLASparseDecodeConfig, tensors: dict, *, batch: int, seqlen_q: int, num_splits: int, s_kv: int,
                heads: int, topk: int, softmax_scale: float, q_strides: tuple, kv_stride: int, indices_stride: int,
                out_strides: tuple | None = None) -> dict:
    """The kernel's parameters by name (cfg.params): ``tensors`` by the contract's names; q's (token,
    head) element strides with token = b x seqlen_q + t (the host checks q's batch and seqlen_q dims
    merge), the cache's token stride, the indices' token stride, out's (token, head) strides. lse is
    [batch, heads, seqlen_q] contiguous; the partials [num_splits, batch, seqlen_q, heads, 512] and
    [num_splits, batch, heads, seqlen_q] (attention_combine_sm90's)."""
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
    missing = [n for n, _ in cfg.params if n not in args]
    if missing:
        raise KeyError(f"launch arguments missing: {missing}")
    return {n: args[n] for n, _ in cfg.params}


def grid(batch: int, seqlen_q: int, heads: int, num_splits: int) -> tuple[int, int, int]:
    """x = token x head block (the head block fastest: a token's blocks gather the same rows), y = split."""
    return (batch * seqlen_q * head_blocks(heads), num_splits, 1)


def split_range(n_tiles: int, split: int, num_splits: int) -> tuple[int, int]:
    """The KV tiles [begin, end) of split ``split`` (the kernel's arithmetic, for tests and the host):
    ceil(n_tiles / num_splits) each, the last splits possibly empty."""
    per = -(-n_tiles // num_splits)
    begin = min(split * per, n_tiles)
    return begin, min(begin + per, n_tiles)


__all__ = ["KERNEL", "DTYPES", "D_QK", "D_V", "BN", "TILE_M", "MIN_HEADS", "MAX_HEADS", "MIN_TOPK", "MAX_TOPK",
           "MLASparseDecodeConfig", "OUTPUTS", "SPLIT_OUTPUTS", "SCALARS", "launch_args", "grid", "head_blocks",
           "split_range"]
