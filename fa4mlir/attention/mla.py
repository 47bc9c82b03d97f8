"""Absorbed MLA decode over a paged latent cache on an sm_90a GPU, with FlashMLA's API (MLIR-free at
import): its users switch by import.

    tile_scheduler_metadata, num_splits = get_mla_metadata(cache_seqlens, seqlen_q * heads // 1, 1)
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512,
                                      tile_scheduler_metadata, num_splits, causal=True)

Operands (FlashMLA's): q [batch, seqlen_q, heads, 576] bf16 or f16 (512 latent + 64 rope columns);
k_cache [num_pages, page_size, 1, 576] in q's dtype, one latent KV head, V = its first
head_dim_v = 512 columns (read once, from the same SMEM tile); block_table [batch, max_pages]
int32; cache_seqlens [batch] int32 on the device (never read on the host). Sequence b attends to
its first L_b = clamp(cache_seqlens[b], 0, max_pages x page_size) tokens; with causal and
seqlen_q > 1 (MTP) query token t sees keys < L_b - (seqlen_q - 1 - t) (bottom-right). Returns out
[batch, seqlen_q, heads, 512] in q's dtype and lse [batch, heads, seqlen_q] float32 (natural log);
a row that sees no key gets out 0 and lse +inf. Page sizes: multiples of 8 (FlashMLA's 64: one
TMA box per page and 64-column chunk). Heads 1..128, any seqlen_q.

Scheduling (where this differs from FlashMLA): FlashMLA's metadata balances each sequence's
actual length over the SMs (a device kernel reads cache_seqlens). Here every sequence gets the
same number of splits, chosen on the host from the shapes and the SM count only
(``plan_splits``): ``tile_scheduler_metadata`` is an int32 device tensor of shape [splits,
TILE_SCHEDULER_METADATA_SIZE] whose row s reads (s, splits, 0, ..), and ``num_splits`` FlashMLA's
[batch + 1] int32 prefix sums (b x splits). flash_mla_with_kvcache reads the split count from the
metadata's shape (no device read, no host synchronisation: CUDA-graph safe). A split covers
ceil(L_b / 64) / splits KV tiles (decode_schedule.split_range); a call of one split runs the
kernel's unsplit variant alone, else the split kernel and the combine (attention_combine_sm90,
splits summed in index order: deterministic for a given split count).

On an sm_100 GPU (compute capability 10.0) the dense call runs the sm_100a kernel instead
(attention/mla_sm100.py: its routing, and the typed errors for what that kernel does not take; the FP8
cache runs there too); any capability but 9.x and 10.0 is a DeviceError.

Sparse decode (``indices``, FlashMLA's DSA decode, over a bf16/f16 cache or, with
``is_fp8_kvcache=True``, the FP8 cache below): attention/mla_sparse_decode.py, called from here.

FP8 latent cache (``is_fp8_kvcache=True``, FlashMLA's V32 layout): k_cache float8_e4m3fn (or uint8)
[num_pages, page_size, 1, 656], each token row 512 e4m3 latent bytes, four float32 scales (one per
128 latent columns), then the 64 rope columns in bf16; q bf16, out bf16. The kernel dequantizes
each row to bf16(float32(e4m3) x scale) (FlashMLA's dequantize_k_cache) in SMEM and runs the bf16
GEMMs (attention_mla_decode_sm90, note "FP8 latent"). Token and page strides: multiples of 16
bytes (FlashMLA's own quantize_k_cache pads each page by one row: taken).

Kernel (attention_mla_decode_sm90_config.DEFAULT_RULE): a call of seqlen_q x heads <= 32 packed rows
over a 16-bit cache (FlashMLA's 16-head decode) runs the swap-AB kernel (attention_mla_decode_sm90_swapab.py:
S^T = K Q^T, N = 8..32 rows a CTA, no 64-row padding; faster on an nvidia-h200, notes/RESULTS.md
[D-mla-decode-swapab-default]), more rows over bf16 the seesaw schedule ([D-mla-seesaw-default]), every
other call the M64 kernel (64 packed rows a CTA). The plan's
notes name the pick. FA4MLIR_MLA_DECODE_VARIANT (read per call into the call cache's key; for A/B
timing, bench mla --mla-decode-variant) overrides it: unset or "default" (the rule), "m64" (the M64
kernel for any call), "swapab" (the swap-AB kernel: UnsupportedFeatureError where it is not built,
more than 32 rows or the FP8 cache, never a silent fallback), "seesaw" (bf16) or "swapab_ring" (where swapab
runs over pages of whole 64-row boxes: the swap-AB kernel over one ring of 11 / 12 one-chunk stages a warpgroup,
attention_mla_decode_sm90_swapab_chunks.py).

Not built (typed errors, UnsupportedFeatureError): more than one KV head, head dims other than
576/512.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from .. import env
from ..artifacts import Bundle
from ..driver import device_info, resolve_stream
from ..kernels import attention_decode_sm90_config as dec
from ..kernels import attention_mla_decode_sm90_config as mc
from ..runtime import LoadedKernel, TensorInfo
from .checks import (MAX_GRID_YZ, MAX_I32, check_bundle, check_device_context, check_device_ordinal, check_devices,
                     check_flag, check_layout, check_scale, read_tensor)
from .errors import (ArgumentTypeError, DTypeError, HeadDimError, HeadsRatioError, LayoutError, ShapeError,
                     UnsupportedFeatureError)
from .plan import Launch, Plan, TensorRef, config_kernel, source_for

ENTRY = "flash_mla_with_kvcache"
TILE_SCHEDULER_METADATA_SIZE = 8
MAX_SPLITS = 64               # per sequence (first guess: to be measured, bench mla)
FILL_FRACTION = 0.8           # CTAs (one per SM: 216 KiB of SMEM) at or above this share of the SMs: no split
CALLS_KEPT = 256
VARIANT_ENV = "FA4MLIR_MLA_DECODE_VARIANT"
VARIANTS = mc.DECODE_VARIANTS


def _err(msg: str, api: str = ENTRY) -> str:
    return f"{api}: {msg}"


def plan_splits(batch: int, seqlen_q_heads: int, num_sms: int) -> int:
    """Splits per sequence for ``batch`` sequences of ``seqlen_q_heads`` packed query rows (one CTA
    per 64 rows) on ``num_sms`` SMs, lengths unknown: 1 when the CTAs fill FILL_FRACTION of the SMs,
    else as many splits as keep the grid within one wave (at most MAX_SPLITS). A sequence shorter
    than splits x 64 tokens leaves its last splits empty (they write LSE -inf and weigh 0).
    A first guess, to be measured (bench mla)."""
    ctas = max(batch, 1) * -(-max(seqlen_q_heads, 1) // mc.TILE_M)
    if ctas >= FILL_FRACTION * num_sms:
        return 1
    return max(1, min(MAX_SPLITS, num_sms // ctas))


def get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k: int, num_heads_k: int, num_heads_q=None,
                     is_fp8_kvcache: bool = False, topk=None):
    """FlashMLA's get_mla_metadata: (tile_scheduler_metadata [splits, 8] int32, num_splits [batch + 1]
    int32), both on cache_seqlens' device, made without reading it (module docstring). With ``topk``
    (sparse decode) num_heads_q is required and the splits are mla_sparse_decode.plan_sparse_splits'."""
    check_flag("is_fp8_kvcache", is_fp8_kvcache)      # the same metadata either way
    if type(num_heads_k) is not int or num_heads_k != 1:
        raise HeadsRatioError(_err(f"num_heads_k must be 1 (one latent KV head), got {num_heads_k!r}", "get_mla_metadata"))
    if type(num_q_tokens_per_head_k) is not int or num_q_tokens_per_head_k < 1:
        raise ShapeError(_err(f"num_q_tokens_per_head_k must be an int >= 1 (seqlen_q x heads), got "
                              f"{num_q_tokens_per_head_k!r}", "get_mla_metadata"))
    torch = _torch(cache_seqlens, "cache_seqlens", "get_mla_metadata")
    if cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1:
        raise DTypeError(_err(f"cache_seqlens must be a 1-D int32 tensor [batch], got {cache_seqlens.dtype} of shape "
                              f"{tuple(cache_seqlens.shape)}", "get_mla_metadata"))
    batch = cache_seqlens.shape[0]
    if topk is None:
        splits = plan_splits(batch, num_q_tokens_per_head_k, device_info().num_sms)
    else:
        splits = _sparse_splits(batch, num_q_tokens_per_head_k, num_heads_q, topk)
    dev = cache_seqlens.device
    meta = torch.zeros((splits, TILE_SCHEDULER_METADATA_SIZE), dtype=torch.int32, device=dev)
    meta[:, 0] = torch.arange(splits, dtype=torch.int32, device=dev)
    meta[:, 1] = splits
    return meta, torch.arange(batch + 1, dtype=torch.int32, device=dev) * splits


def _sparse_splits(batch: int, num_q_tokens: int, num_heads_q, topk) -> int:
    from .mla_sparse_decode import plan_sparse_splits
    if type(num_heads_q) is not int or num_heads_q < 1 or num_q_tokens % num_heads_q:
        raise ShapeError(_err(f"with topk, num_heads_q must be an int >= 1 dividing num_q_tokens_per_head_k "
                              f"({num_q_tokens} = seqlen_q x heads), got {num_heads_q!r}", "get_mla_metadata"))
    if type(topk) is not int or topk < 1:
        raise ShapeError(_err(f"topk must be an int >= 1 (indices' last dim), got {topk!r}", "get_mla_metadata"))
    return plan_sparse_splits(batch, num_q_tokens // num_heads_q, num_heads_q, topk, device_info().num_sms)



@dataclass(frozen=True)
class MLAOutputs:
    """What a checked MLA decode call (dense: MLAProblem, sparse: mla_sparse_decode.SparseDecodeProblem)
    writes: out [batch, seqlen_q, heads, 512] (contiguous) and lse [batch, heads, seqlen_q], and per
    split (``splits``, set by the subclass) their float32 partials."""

    batch: int
    seqlen_q: int
    heads: int

    @property
    def out_shape(self) -> tuple:
        return (self.batch, self.seqlen_q, self.heads, mc.D_V)

    @property
    def lse_shape(self) -> tuple:
        return (self.batch, self.heads, self.seqlen_q)

    @property
    def out_strides(self) -> tuple:
        """out's (batch, seqlen_q, heads) strides, contiguous."""
        return (self.seqlen_q * self.heads * mc.D_V, self.heads * mc.D_V, mc.D_V)

    def outputs(self, torch, dtype, device) -> dict:
        """New out (``dtype``) and lse tensors, and with several splits the o_partial and lse_partial
        workspaces (float32), by the kernels' operand names."""
        f32 = torch.float32
        named = {"out": torch.empty(self.out_shape, dtype=dtype, device=device),
                 "lse": torch.empty(self.lse_shape, dtype=f32, device=device)}
        if self.splits > 1:
            named.update(o_partial=torch.empty((self.splits, *self.out_shape), dtype=f32, device=device),
                         lse_partial=torch.empty((self.splits, *self.lse_shape), dtype=f32, device=device))
        return named


@dataclass(frozen=True)
class MLAProblem(MLAOutputs):
    """A checked flash_mla_with_kvcache call: sizes, dtype, options and the split count."""

    num_pages: int
    page_size: int
    max_pages: int
    dtype: str
    splits: int
    softmax_scale: float
    causal: bool
    fp8: bool = False           # FlashMLA's FP8 latent cache (656-byte rows)
    variant: str = mc.RULE_VARIANT  # the decode kernel variant (VARIANTS; FA4MLIR_MLA_DECODE_VARIANT; "default":
                                    # DEFAULT_RULE's, which check_mla_inputs resolves to m64 or swapab)


FP8_CACHE_DTYPES = ("e4m3", "u8")


def check_cache_dtype(q: TensorInfo, k_cache: TensorInfo, fp8: bool, dtypes=mc.DTYPES) -> int:
    """q's and the latent cache's dtypes (dense and sparse calls; `dtypes`: the kernel's q dtypes): DTypeError
    otherwise; returns the cache row's width (576, or FlashMLA's 656 bytes for FP8)."""
    if fp8:
        if q.dtype != mc.FP8_DTYPE:
            raise DTypeError(_err(f"with is_fp8_kvcache=True q must be bf16 (FlashMLA's FP8 cache), got {q.dtype}"))
        if k_cache.dtype not in FP8_CACHE_DTYPES:
            raise DTypeError(_err(f"with is_fp8_kvcache=True k_cache must be float8_e4m3fn (or uint8) [num_pages, "
                                  f"page_size, 1, {mc.FP8_ROW_BYTES}] (FlashMLA's quantize_k_cache), got "
                                  f"{k_cache.dtype}; pass is_fp8_kvcache=False for a {k_cache.dtype} cache"))
        return mc.FP8_ROW_BYTES
    if q.dtype not in dtypes:
        raise DTypeError(_err(f"q must be bf16 or f16, got {q.dtype}"))
    if k_cache.dtype != q.dtype:
        hint = " (an FP8 cache: pass is_fp8_kvcache=True)" if k_cache.dtype in FP8_CACHE_DTYPES else ""
        raise DTypeError(_err(f"k_cache must have q's dtype {q.dtype}, got {k_cache.dtype}{hint}"))
    return mc.D_QK


def check_cache_shape(k_cache: TensorInfo, row: int, fp8: bool) -> tuple[int, int]:
    """The latent cache [num_pages, page_size, 1, row] (dense and sparse calls): ShapeError or HeadsRatioError
    otherwise; returns (num_pages, page_size)."""
    if len(k_cache.shape) != 4 or k_cache.shape[3] != row:
        what = " (FP8: 512 e4m3 + 4 float32 scales + 64 bf16 bytes a token)" if fp8 else ""
        raise ShapeError(_err(f"k_cache must be [num_pages, page_size, 1, {row}]{what}, got {tuple(k_cache.shape)}"))
    num_pages, page_size, kv_heads, _ = k_cache.shape
    if kv_heads != 1:
        raise HeadsRatioError(_err(f"k_cache must hold one latent KV head ([num_pages, page_size, 1, 576]), got "
                                   f"{kv_heads}"))
    return num_pages, page_size


def check_metadata(metadata: TensorInfo, num_splits: TensorInfo, batch: int) -> None:
    """get_mla_metadata's outputs for ``batch`` sequences (dense and sparse calls): ShapeError otherwise."""
    if metadata.dtype != "i32" or len(metadata.shape) != 2 or metadata.shape[1] != TILE_SCHEDULER_METADATA_SIZE \
            or not 1 <= metadata.shape[0] <= MAX_SPLITS:
        raise ShapeError(_err(f"tile_scheduler_metadata must be get_mla_metadata's int32 [splits in 1..{MAX_SPLITS}, "
                              f"{TILE_SCHEDULER_METADATA_SIZE}], got {metadata.dtype} {tuple(metadata.shape)}"))
    if num_splits.dtype != "i32" or tuple(num_splits.shape) != (batch + 1,):
        raise ShapeError(_err(f"num_splits must be get_mla_metadata's int32 [batch + 1 = {batch + 1}], got "
                              f"{num_splits.dtype} {tuple(num_splits.shape)}"))


def check_q_dims(q: TensorInfo, head_dim_v: Any) -> tuple:
    """q [batch, seqlen_q, heads, 576] and head_dim_v 512 (dense and sparse calls): q's shape, or
    ShapeError / HeadDimError."""
    if len(q.shape) != 4:
        raise ShapeError(_err(f"q must be 4-D [batch, seqlen_q, heads, 576], got shape {tuple(q.shape)}"))
    d = q.shape[3]
    if d != mc.D_QK:
        raise HeadDimError(_err(f"q's head dim must be {mc.D_QK} (512 latent + 64 rope), got {d}"))
    if type(head_dim_v) is not int or head_dim_v != mc.D_V:
        raise HeadDimError(_err(f"head_dim_v must be {mc.D_V} (V: the cache's first 512 columns), got {head_dim_v!r}"))
    return tuple(q.shape)


def check_mla_inputs(q: TensorInfo, k_cache: TensorInfo, block_table: TensorInfo, cache_seqlens: TensorInfo,
                     head_dim_v: Any, metadata: TensorInfo, num_splits: TensorInfo, softmax_scale=None,
                     causal: Any = False, is_fp8_kvcache: Any = False) -> MLAProblem:
    """Every host check of a call (deviceless: TensorInfo and plain values), typed errors naming
    what to pass; returns the problem."""
    causal = check_flag("causal", causal)
    fp8 = check_flag("is_fp8_kvcache", is_fp8_kvcache)
    row = check_cache_dtype(q, k_cache, fp8)
    batch, seqlen_q, heads, d = check_q_dims(q, head_dim_v)
    if not 1 <= batch <= MAX_GRID_YZ or seqlen_q < 1 or not mc.MIN_HEADS <= heads <= mc.MAX_HEADS:
        raise ShapeError(_err(f"q [batch, seqlen_q, heads, 576] needs batch in [1, {MAX_GRID_YZ}] (the grid's z), "
                              f"seqlen_q >= 1 and heads in [{mc.MIN_HEADS}, {mc.MAX_HEADS}], got {tuple(q.shape)}"))
    if seqlen_q * heads > MAX_I32 // MAX_SPLITS:
        raise ShapeError(_err(f"seqlen_q x heads = {seqlen_q * heads} is too many query rows (the grid's x counts "
                              f"M tiles x splits in int32)"))
    num_pages, page_size = check_cache_shape(k_cache, row, fp8)
    if num_pages < 1 or not mc.page_supported(page_size):
        raise LayoutError(_err(f"k_cache's page size must be a multiple of 8 (FlashMLA's is 64) with at least one page, "
                               f"got num_pages={num_pages}, page_size={page_size}"))
    if block_table.dtype != "i32" or cache_seqlens.dtype != "i32":
        raise DTypeError(_err(f"block_table and cache_seqlens must be int32, got {block_table.dtype} and "
                              f"{cache_seqlens.dtype}"))
    if len(block_table.shape) != 2 or block_table.shape[0] != batch or block_table.shape[1] < 1:
        raise ShapeError(_err(f"block_table must be [batch={batch}, max_pages >= 1], got {tuple(block_table.shape)}"))
    if block_table.shape[1] > 1 and block_table.strides[1] != 1:
        raise LayoutError(_err(f"block_table must have unit stride along its pages, got strides {block_table.strides}; "
                               f"pass block_table.contiguous()"))
    if tuple(cache_seqlens.shape) != (batch,) or (batch > 1 and cache_seqlens.strides[0] != 1):
        raise ShapeError(_err(f"cache_seqlens must be a contiguous [batch={batch}], got shape {tuple(cache_seqlens.shape)} "
                              f"strides {cache_seqlens.strides}"))
    if block_table.shape[1] * page_size >= 2**31:
        raise ShapeError(_err(f"max_pages x page_size = {block_table.shape[1] * page_size} exceeds int32"))
    check_metadata(metadata, num_splits, batch)
    for name, info in (("q", q), ("k_cache", k_cache)):
        check_layout(name, info)
    scale = check_scale(softmax_scale, d)
    variant = check_variant(requested_variant(), seqlen_q, heads, fp8, q.dtype, page_size)
    return MLAProblem(batch, seqlen_q, heads, num_pages, page_size, block_table.shape[1], q.dtype, metadata.shape[0],
                      scale, causal, fp8, variant)


def requested_variant() -> str:
    """FA4MLIR_MLA_DECODE_VARIANT (unset: "default")."""
    return (env.get_str(VARIANT_ENV) or "default").strip() or "default"


def check_variant(variant: str, seqlen_q: int, heads: int, fp8: bool, dtype: str = "bf16", page_size: int = mc.BN) -> str:
    """The decode kernel variant the call runs, "default" resolved by DEFAULT_RULE (swapab, seesaw or m64):
    UnsupportedFeatureError for an unknown name, and where a named variant is not built for the call
    ("swapab": more than SWAP_AB_MAX_ROWS packed rows, or the FP8 cache; seesaw: a cache other than bf16)."""
    if variant not in VARIANTS:
        raise UnsupportedFeatureError(_err(f"{VARIANT_ENV}={variant!r} is not a decode variant; pick one of {VARIANTS}"))
    if not mc.variant_runs(variant, seqlen_q, heads, fp8, dtype, page_size):
        raise UnsupportedFeatureError(_err(
            f"the {variant} decode ({VARIANT_ENV}={variant}) is not built for this call (swapab, swapab_ring: a 16-bit cache "
            f"and seqlen_q x heads <= {mc.SWAP_AB_MAX_ROWS}, swapab_ring: pages that are multiples of {mc.BN}; seesaw: bf16), got seqlen_q x "
            f"heads = {seqlen_q * heads}, dtype {dtype}, is_fp8_kvcache={fp8}, page_size {page_size}; unset "
            f"{VARIANT_ENV} for the default rule's kernel"))
    return mc.default_variant(seqlen_q, heads, fp8, dtype, page_size) if variant == mc.RULE_VARIANT else variant


# ----------------------------------------------------------------------------------------------
# Kernels and the plan
# ----------------------------------------------------------------------------------------------

def kernel_for(source, cfg) -> LoadedKernel:
    """``cfg``'s kernel (an MLADecodeConfig, the combine's CombineConfig or an MLASparseConfig) from
    ``source``: plan.config_kernel, its bundle's entry of that name (`--set mla`), else compiled here."""
    return config_kernel(source, cfg, ENTRY, ("mla",))


def configs_for(problem: MLAProblem) -> tuple:
    """The decode kernel (unsplit for one split) and the combine (None for one split)."""
    unsplit = problem.splits == 1
    cfg = mc.default_config(problem.dtype, problem.page_size, unsplit=unsplit, fp8=problem.fp8)
    cfg = mc.variant_config(cfg, problem.variant, problem.seqlen_q, problem.heads).validate()
    return cfg, None if unsplit else dec.CombineConfig(problem.dtype, mc.D_V).validate()


def build_plan(problem: MLAProblem, source, q_strides, block_table_stride: int, out_strides) -> Plan:
    """The launches, tensors by TensorRef: the decode kernel, then (several splits) the combine."""
    cfg, combine = configs_for(problem)
    names = {n for n, _ in (*mc.SPLIT_TENSORS, *mc.UNSPLIT_TENSORS, *dec.COMBINE_TENSORS)}
    refs = {n: TensorRef(n) for n in names}
    p = problem
    launches = [Launch(kernel_for(source, cfg), mc.grid(p.batch, p.seqlen_q, p.heads, p.splits, cfg.tile_rows),
                       mc.launch_args(cfg, refs, batch=p.batch, seqlen_q=p.seqlen_q, heads=p.heads, num_splits=p.splits,
                                      num_pages=p.num_pages, page_size=p.page_size, max_pages=p.max_pages, causal=p.causal,
                                      softmax_scale=p.softmax_scale, q_strides=q_strides,
                                      block_table_stride=block_table_stride, out_strides=out_strides))]
    if combine is not None:
        launches.append(Launch(kernel_for(source, combine), combine_grid(p), combine_args(p, refs, out_strides)))
    return Plan(problem, tuple(launches), (variant_note(problem, cfg),))


def variant_note(problem: MLAProblem, cfg) -> str:
    """Plan.describe's line on the decode kernel: which variant, and why."""
    rows = problem.seqlen_q * problem.heads
    if requested_variant() != mc.RULE_VARIANT:
        why = f"named by {VARIANT_ENV}"
    elif cfg.swap_ab:
        why = (f"DEFAULT_RULE: a {problem.dtype} cache and seqlen_q x heads = {rows} <= {mc.SWAP_AB_MAX_ROWS} "
               f"(N {cfg.swap_ab}{', a ring of chunk stages' if cfg.swap_ab_ring else ''})")
    elif cfg.seesaw:
        why = f"DEFAULT_RULE: a bf16 cache and seqlen_q x heads = {rows} > {mc.SWAP_AB_MAX_ROWS} (64-row M tiles)"
    else:
        why = (f"DEFAULT_RULE: {'the FP8 cache' if problem.fp8 else f'seqlen_q x heads = {rows} > {mc.SWAP_AB_MAX_ROWS}'}"
               f"{'' if problem.fp8 else f' over {problem.dtype}'} (64-row M tiles)")
    name = problem.variant if problem.variant != mc.RULE_VARIANT else \
        mc.SWAP_AB_RING_VARIANT if cfg.swap_ab_ring else mc.SWAP_AB_VARIANT if cfg.swap_ab else mc.SEESAW_VARIANT if cfg.seesaw else mc.M64_VARIANT
    return f"MLA decode kernel: {name} ({why})"


def combine_grid(p: MLAProblem) -> tuple[int, int, int]:
    return (-(-p.batch * p.seqlen_q * p.heads // dec.COMBINE_WARPS), 1, 1)


def combine_args(p: MLAProblem, refs: dict, out_strides) -> dict:
    """attention_combine_sm90's contract (attention_decode_sm90_config.COMBINE_PARAMS) for head dim 512."""
    from ..kernels.common.fastdiv import divisor
    args = {n: refs[n] for n, _ in dec.COMBINE_TENSORS}
    args.update(total_rows=p.batch * p.seqlen_q * p.heads, num_splits=p.splits, seqlen_q=p.seqlen_q, heads=p.heads,
                out_stride_b=int(out_strides[0]), out_stride_s=int(out_strides[1]), out_stride_h=int(out_strides[2]))
    for name, n in (("heads", p.heads), ("seqlen_q", p.seqlen_q)):
        args[f"{name}_mul"], args[f"{name}_shr"] = divisor(int(n))
    return {n: args[n] for n, _ in dec.COMBINE_PARAMS}


# ----------------------------------------------------------------------------------------------
# The call
# ----------------------------------------------------------------------------------------------

def _torch(x, name: str = "q", api: str = ENTRY):
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        raise ArgumentTypeError(_err(f"{name} must be a torch CUDA tensor (outputs and workspaces are torch's), got "
                                     f"{type(x).__name__}", api))
    return torch


def check_no_grad(torch, q) -> None:
    """AutogradError when q requires grad (there is no backward kernel for MLA decode)."""
    if torch.is_grad_enabled() and q.requires_grad:
        from .errors import AutogradError
        raise AutogradError(_err("q requires grad: there is no backward kernel for MLA decode; call under "
                                 "torch.no_grad() or detach q"))


@dataclass(frozen=True)
class _Call:
    plan: Any
    problem: MLAOutputs


class CallCache:
    """Prepared calls by signature (the call's tensors' shapes, strides, dtypes and devices, its
    options, the bundle and the environment that picks kernels), at most CALLS_KEPT, the oldest
    dropped first: a call seen before only launches."""

    ENV = ("FA4MLIR_BUNDLE", "FA4MLIR_CUBIN_BACKEND", "FA4MLIR_DEBUG", VARIANT_ENV)

    def __init__(self):
        self._calls: dict = {}
        self._lock = threading.Lock()

    def signature(self, tensors: dict, options: tuple, bundle):
        return (tuple((n, x.shape, x.stride(), x.dtype, x.device) for n, x in tensors.items()), options,
                bundle if isinstance(bundle, (str, type(None))) else id(bundle),
                tuple(os.environ.get(n) for n in self.ENV))

    def get(self, signature):
        """(the prepared call or None, the signature or None when it is unhashable: no caching)."""
        try:
            return self._calls.get(signature), signature
        except TypeError:       # an unhashable option
            return None, None

    def put(self, signature, call) -> None:
        if signature is None:
            return
        with self._lock:
            while len(self._calls) >= CALLS_KEPT:
                self._calls.pop(next(iter(self._calls)))
            self._calls[signature] = call


_CALLS = CallCache()


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata, num_splits,
                           softmax_scale=None, causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None, *, bundle: Bundle | str | os.PathLike | None = None):
    """FlashMLA's flash_mla_with_kvcache (module docstring): returns (out, lse). With ``indices`` the
    sparse decode (attention/mla_sparse_decode.py; block_table and cache_seqlens unread, may be
    None). Nothing is read from the device on the host; the launches go to torch's current stream."""
    extras = [n for n, x in (("attn_sink", attn_sink), ("extra_k_cache", extra_k_cache),
                             ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                             ("extra_topk_length", extra_topk_length)) if x is not None]
    if extras:
        raise UnsupportedFeatureError(_err(f"{', '.join(extras)} (FlashMLA's sparse-decode options) are not built yet; "
                                           f"pass None"))
    if indices is not None:
        from .mla_sparse_decode import sparse_decode
        return sparse_decode(q, k_cache, indices, head_dim_v, tile_scheduler_metadata, num_splits, softmax_scale,
                             causal, topk_length, is_fp8_kvcache, bundle=bundle)
    if topk_length is not None:
        raise UnsupportedFeatureError(_err("topk_length needs indices (sparse decode); pass None for the dense decode"))
    torch = _torch(q)
    tensors = {"q": q, "k_cache": k_cache, "block_table": block_table, "cache_seqlens": cache_seqlens,
               "tile_scheduler_metadata": tile_scheduler_metadata, "num_splits": num_splits}
    for name, x in tensors.items():
        _torch(x, name)
    check_no_grad(torch, q)
    options = (head_dim_v if type(head_dim_v) is int else repr(head_dim_v), softmax_scale, causal, is_fp8_kvcache)
    call, signature = _CALLS.get(_CALLS.signature(tensors, options, bundle))
    if call is None:
        call = _prepare(torch, tensors, head_dim_v, softmax_scale, causal, bundle, signature, is_fp8_kvcache)
    outputs = call.problem.outputs(torch, q.dtype, q.device)
    addresses = {"q": q.data_ptr(), "kv_cache": k_cache.data_ptr(), "block_table": block_table.data_ptr(),
                 "cache_seqlens": cache_seqlens.data_ptr(), **{n: x.data_ptr() for n, x in outputs.items()}}
    call.plan.launch(addresses, resolve_stream(None, True, q.device.index))
    return outputs["out"], outputs["lse"]


def _prepare(torch, tensors: dict, head_dim_v, softmax_scale, causal, bundle, signature, is_fp8_kvcache=False) -> _Call:
    check_bundle(bundle, ENTRY)
    infos = {n: read_tensor(n, x, ENTRY) for n, x in tensors.items()}
    ordinal = check_devices([(n, i.device, x.device.index) for (n, i), x in zip(infos.items(), tensors.values())], ENTRY)
    problem = check_mla_inputs(infos["q"], infos["k_cache"], infos["block_table"], infos["cache_seqlens"], head_dim_v,
                               infos["tile_scheduler_metadata"], infos["num_splits"], softmax_scale, causal,
                               is_fp8_kvcache)
    device = device_info()
    q = tensors["q"]
    plan = _plan_for(problem, device, ordinal, source_for(bundle), q.stride()[:3], tensors["block_table"].stride(0))
    named = {"q": q, "kv_cache": kv_operand(torch, tensors["k_cache"], problem.fp8), "block_table": tensors["block_table"],
             "cache_seqlens": tensors["cache_seqlens"], **problem.outputs(torch, q.dtype, q.device)}
    call = _Call(plan.prepare(named), problem)
    _CALLS.put(signature, call)
    return call


def _plan_for(problem: MLAProblem, device, ordinal, source, q_strides, block_table_stride: int) -> Plan:
    """The plan of the device's arch (mla_sm100.select_arch: 9.x the sm_90a kernels, 10.0 the sm_100a one,
    else DeviceError), after the device checks."""
    from .mla_sm100 import build_plan_sm100, select_arch
    check_device_ordinal(ordinal, device.ordinal)
    if select_arch(problem, device.capability) == "sm_100a":
        return build_plan_sm100(problem, source, block_table_stride)
    check_device_context(ordinal, device.ordinal, device.capability)
    return build_plan(problem, source, q_strides, block_table_stride, problem.out_strides)


def kv_operand(torch, k_cache, fp8: bool):
    """The kernel's kv_cache operand: the cache itself, or (FP8) its rows as 164 int32 words, the TMA
    element of common/mla_fp8.py (the same bytes and address)."""
    return k_cache.view(torch.uint8).view(torch.int32) if fp8 else k_cache


def flops_and_bytes(batch: int, seqlen_q: int, heads: int, cached_tokens: int, dtype_bytes: int = 2,
                    fp8: bool = False) -> tuple[int, int]:
    """FlashMLA's benchmark accounting (its tests/test_flash_mla.py; FP8: tests/lib.py
    count_flop_and_mem_vol_for_decode) of ``batch`` sequences of ``cached_tokens`` each: FLOPs = 2 x
    query rows x cached tokens x (576 + 512), bytes = the cache's tokens x 576 x the element size
    (FP8: x 656 bytes, the whole row) + (q's rows x 576 + out's rows x 512) x the element size."""
    rows = batch * seqlen_q * heads
    flops = 2 * rows * cached_tokens * (mc.D_QK + mc.D_V)
    cache = batch * cached_tokens * (mc.FP8_ROW_BYTES if fp8 else mc.D_QK * dtype_bytes)
    data = cache + (rows * mc.D_QK + rows * mc.D_V) * dtype_bytes
    return int(flops), int(data)


__all__ = ["get_mla_metadata", "flash_mla_with_kvcache", "check_mla_inputs", "check_metadata", "check_no_grad", "check_q_dims",
           "plan_splits", "MLAOutputs", "MLAProblem", "build_plan",
           "CallCache",
           "configs_for", "kernel_for", "check_variant", "requested_variant", "VARIANT_ENV", "VARIANTS", "flops_and_bytes", "kv_operand", "TILE_SCHEDULER_METADATA_SIZE", "ENTRY"]
