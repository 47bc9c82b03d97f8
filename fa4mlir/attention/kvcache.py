"""The KV-cache operand and the flash_attn_with_kvcache problem (MLIR-free, deviceless checks).

The entry point this module prepares (names and layouts as FlashAttention-3's, whose call sites in
SGLang and vLLM should switch modules unchanged)::

    flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table=None, *, k=None, v=None,
                            softmax_scale=None, causal=True, window_size=(-1, -1), attention_chunk=0,
                            softcap=0.0, sinks=None, num_splits=None, k_scale=None,
                            v_scale=None, return_lse=False, out=None)

is ``kvcache_call.flash_attn_with_kvcache``; ``plan_kvcache`` takes its arguments, runs every check
below and returns the ``KVCacheProblem`` and the ``KVCachePlan`` (pack GQA, split count, fetch
choice, grid, workspaces) the decode kernels are launched with.

Operands
    q        [batch, seqlen_q, heads, D], bf16 or f16; seqlen_q 1 (decode), 2-16 (speculative
             decoding) or more (chunked prefill against the cache). D in 64, 128, 256; heads a
             multiple of kv_heads (GQA, MQA).
    k_cache, v_cache
             contiguous: [batch, seqlen_cache, kv_heads, D]; paged (page_table given): a pool
             [num_pages, page_size, kv_heads, D], page_size 1..256 (any, not only powers of two).
             q's dtype, or float8_e4m3fn with k_scale / v_scale.
    cache_seqlens  int32 [batch] on the device: tokens already in each sequence's cache.
    page_table     int32 [batch, max_pages]: sequence b's token t lives in pool page
             page_table[b, t // page_size], row t % page_size.
    k, v     optional new tokens [batch, seqlen_new, kv_heads, D] (q's dtype), written into the cache
             at cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 by the same call (in place), and
             attended to: sequence b attends to L_b = cache_seqlens[b] + seqlen_new keys.
    k_scale, v_scale  float32 dequantisation scales of an FP8 cache (value = e4m3 * scale), of one
             granularity each (``ScaleGranularity``, read from the shape): [] or [1] per tensor;
             [kv_heads] per KV head; paged [num_pages, kv_heads] per (page, KV head); contiguous
             [batch, num_blocks, kv_heads] per (token block of seqlen_cache // num_blocks tokens, KV
             head).
    out      optional [batch, seqlen_q, heads, D], q's dtype. The LSE, when asked for, is float32
             [batch, heads, seqlen_q], natural log.

Causal masks align bottom-right per sequence: query i of sequence b sees key j iff j <= i + L_b -
seqlen_q; a row that sees no key gets O = 0 and LSE = +inf (as flash_attn_func). window_size =
(left, right) and attention_chunk are FlashAttention-3/4's, aligned the same way (query i sees keys
diag - left .. diag + right, diag = i + L_b - seqlen_q; -1 unbounded; causal sets right to 0; a
chunk of attention_chunk keys holds diag), compiled into the decode kernel (one kernel per window,
as flash_attn_func's); the kernel starts at the first KV tile the window reaches, so a window makes
a long cache cheaper. softcap > 0 caps each scaled score to softcap * tanh(s / softcap); sinks
(float32 [heads], gpt-oss) adds one logit per query head to the softmax's denominator (no value):
a row that sees no key then gets O = 0 and LSE = sinks[head].

What is checked on the host, before any launch, raising the typed errors of ``errors``: every
dtype, rank, shape, stride and alignment above; that k_cache and v_cache agree (one page size and
pool); that the page table has one row per sequence, int32, unit inner stride and rows that do not
overlap; that max_pages * page_size (a sequence's capacity) holds the seqlen_new new tokens and
every pool row index fits in int32; FP8 caches have both scales (``KVScaleError``) and bf16/f16
caches none; the scales' shape (one of the granularities) and dtype; FP8 caches take no new k/v
(``UnsupportedFeatureError``: quantising appended tokens is not built).

What is not checked: the values of cache_seqlens and of the page table. They are device data and
reading them would synchronise with the host (and break CUDA-graph replay with new lengths). The
kernel contract instead, so that no value can make it read or write outside its tensors:

  - cache_seqlens[b] is clamped to [0, capacity - seqlen_new] (capacity = max_pages * page_size,
    or seqlen_cache): a longer length attends to (and appends at the end of) the last capacity
    tokens; a negative one is 0. Such a call is a caller bug with defined, bounded behaviour.
  - page-table entries are read only for the pages that hold tokens < L_b (unused entries may hold
    anything, -1 included); an entry outside [0, num_pages) is clamped into it (the output is then
    garbage, but nothing outside the pool is touched).
  - K/V rows at or past L_b are never read into the softmax (masked by index, not by a zero P), so
    NaN or garbage in unused pages and past each length cannot reach the output.

``testing_kvcache.kvcache_reference`` implements this contract, clamps included.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ..kernels import attention_decode_sm90_config as decode_cfg
from ..kernels import attention_sm90_config as attn_cfg
from ..kernels.common.decode_balanced import MAX_BATCH as BALANCED_MAX_BATCH
from ..kernels.common.decode_balanced import MAX_TOTAL_TILES as BALANCED_MAX_TILES
from ..kernels.common.decode_balanced import parts_for
from ..kernels.common.decode_schedule import MAX_SPLITS, PackGQA, balance_splits, num_splits_heuristic, pack_gqa
from ..kernels.common.paging import MAX_PAGE_SIZE, FetchPlan, PageDivisor, fetch_plan
from ..runtime import TensorInfo
from .checks import MAX_GRID_YZ, MAX_I32, check_layout, check_mask, check_scale, check_sinks, check_softcap
from .errors import (DTypeError, EmptyInputError, FlashAttnInputError, HeadDimError, HeadsRatioError, KVScaleError,
                     LayoutError, ShapeError, UnsupportedFeatureError)

ENTRY = "flash_attn_with_kvcache"
FP8_DTYPES = ("e4m3",)
INDEX_DTYPE = "i32"
SCALE_DTYPE = "f32"
CONTIGUOUS_DIMS = ("batch", "seqlen_cache", "kv_heads", "head_dim")
PAGED_DIMS = ("num_pages", "page_size", "kv_heads", "head_dim")
NEW_DIMS = ("batch", "seqlen_new", "kv_heads", "head_dim")
QO_DIMS = ("batch", "seqlen_q", "heads", "head_dim")


def _err(msg: str) -> str:
    return f"{ENTRY}: {msg}"


class ScaleGranularity(enum.Enum):
    """What one float32 dequantisation scale of an FP8 cache covers."""

    TENSOR = "tensor"                  # one scale for all of k_cache (or v_cache)
    KV_HEAD = "kv_head"                # one per KV head
    BLOCK_KV_HEAD = "block_kv_head"    # one per (page, KV head), or per (token block, KV head) contiguous


@dataclass(frozen=True)
class KVCacheOperand:
    """The cache as every attention kernel sees it: ``num_pages`` pages of ``page_size`` rows of
    [kv_heads, head_dim], sequence b's pages listed by its page-table row of ``max_pages`` entries.
    A contiguous cache is the case page_size = seqlen_cache, num_pages = batch, max_pages = 1, the
    identity page table (``paged`` False). FP8 caches carry a scale granularity per K and V;
    ``scale_block`` is the tokens one BLOCK_KV_HEAD scale covers (a page, or a contiguous cache's
    token block)."""

    paged: bool
    dtype: str
    num_pages: int
    page_size: int
    max_pages: int
    kv_heads: int
    head_dim: int
    k_scale: ScaleGranularity | None = None
    v_scale: ScaleGranularity | None = None
    scale_block: int | None = None

    @property
    def capacity(self) -> int:
        """Tokens one sequence can hold."""
        return self.max_pages * self.page_size

    @property
    def quantized(self) -> bool:
        return self.dtype in FP8_DTYPES

    @property
    def pool_rows(self) -> int:
        """Rows of the pool viewed as [num_pages * page_size, kv_heads, head_dim]."""
        return self.num_pages * self.page_size


@dataclass(frozen=True)
class KVCacheProblem:
    """What one flash_attn_with_kvcache call asks for. Lengths are per sequence and on the device;
    the host knows only the bound ``max_seqlen_k`` (capacity: cache_seqlens is clamped so that
    L_b <= capacity). Options (causal, scale, num_splits, return_lse, the mask and score
    modifiers) are set by with_options."""

    batch: int
    seqlen_q: int
    heads: int
    head_dim: int
    dtype: str
    cache: KVCacheOperand
    seqlen_new: int = 0
    causal: bool = True
    softmax_scale: float | None = None
    num_splits: int | None = None       # None: the heuristic
    return_lse: bool = False
    window_size: tuple = (-1, -1)       # FlashAttention's (left, right), checked (checks.check_mask)
    attention_chunk: int = 0
    softcap: float = 0.0                # 0: none
    sinks: bool = False                 # a float32 [heads] sinks tensor is given

    def with_options(self, *, causal: bool, softmax_scale: float, num_splits: int | None,
                     return_lse: bool, window_size: tuple = (-1, -1), attention_chunk: int = 0,
                     softcap: float = 0.0, sinks: bool = False) -> "KVCacheProblem":
        return replace(self, causal=bool(causal), softmax_scale=float(softmax_scale), num_splits=num_splits,
                       return_lse=bool(return_lse), window_size=tuple(window_size),
                       attention_chunk=int(attention_chunk), softcap=float(softcap), sinks=bool(sinks))

    @property
    def live_keys(self) -> int:
        """A bound on the keys one query token's rows reach (the schedule's split count is sized by
        it): the capacity, or less under a left window or a chunk (the decode kernel starts at the
        first KV tile the window reaches)."""
        keys = self.cache.capacity
        left, right = self.window_size
        if left >= 0:
            keys = min(keys, left + self.seqlen_q + max(right, 0))
        if self.attention_chunk:
            keys = min(keys, self.attention_chunk + self.seqlen_q)
        return keys

    @property
    def kv_heads(self) -> int:
        return self.cache.kv_heads

    @property
    def heads_per_kv(self) -> int:
        return self.heads // self.cache.kv_heads

    @property
    def max_seqlen_k(self) -> int:
        return self.cache.capacity

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.seqlen_q, self.heads, self.head_dim)

    @property
    def lse_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.heads, self.seqlen_q)


# ----------------------------------------------------------------------------------------------
# Checks: pure functions of TensorInfo
# ----------------------------------------------------------------------------------------------

def _as_entry(fn, *args):
    """A shared check of checks.py, its error message under this entry point's name."""
    try:
        return fn(*args)
    except FlashAttnInputError as exc:
        raise type(exc)(str(exc).replace("flash_attn_func:", f"{ENTRY}:", 1)) from None


def _layout(name: str, info: TensorInfo, dims: Sequence[str]) -> None:
    """checks.check_layout: strides and base a TMA descriptor can take."""
    _as_entry(check_layout, name, info, dims)


def _index_vector_layout(name: str, info: TensorInfo) -> None:
    """An int32/float32 array the kernel reads by index: unit inner stride, rows that do not
    overlap, 4-byte aligned base."""
    shape, strides = info.shape, info.strides
    if shape and shape[-1] > 1 and strides[-1] != 1:
        raise LayoutError(_err(f"{name} must have stride 1 along its last dimension, got strides {strides} "
                               f"(shape {shape}); pass {name}.contiguous()"))
    for d in range(len(shape) - 1):
        inner = math.prod(shape[d + 1:])
        if shape[d] > 1 and strides[d] < inner:
            raise LayoutError(_err(f"{name} has overlapping rows: stride {strides[d]} along dim {d} of shape "
                                   f"{shape} (at least {inner} needed; a broadcast or expand() view?); pass "
                                   f"{name}.contiguous()"))
    if info.ptr % 4:
        raise LayoutError(_err(f"{name} data pointer {info.ptr:#x} is not 4-byte aligned; pass {name}.clone()"))


def _rank4(name: str, info: TensorInfo, dims: Sequence[str]) -> None:
    if len(info.shape) != 4:
        raise ShapeError(_err(f"{name} must be 4-D [{', '.join(dims)}], got shape {tuple(info.shape)}"))


def _not_empty(name: str, info: TensorInfo, dims: Sequence[str]) -> None:
    empty = [f"{d}=0" for d, n in zip(dims, info.shape) if n == 0]
    if empty:
        raise EmptyInputError(_err(f"{name} has shape {tuple(info.shape)} with an empty dimension "
                                   f"({', '.join(empty)}); every dimension must be >= 1: skip the call"))


def _check_cache(q: TensorInfo, k_cache: TensorInfo, v_cache: TensorInfo, page_table: TensorInfo | None) -> KVCacheOperand:
    paged = page_table is not None
    dims = PAGED_DIMS if paged else CONTIGUOUS_DIMS
    for name, info in (("k_cache", k_cache), ("v_cache", v_cache)):
        _rank4(name, info, dims)
    for name, info in (("k_cache", k_cache), ("v_cache", v_cache)):
        if info.dtype != q.dtype and info.dtype not in FP8_DTYPES:
            raise DTypeError(_err(f"{name} has dtype {info.dtype}; expected q's dtype {q.dtype} or an FP8 "
                                  f"cache of {FP8_DTYPES} (torch.float8_e4m3fn) with k_scale and v_scale"))
    if k_cache.dtype != v_cache.dtype:
        raise DTypeError(_err(f"k_cache and v_cache must share one dtype, got {k_cache.dtype} and {v_cache.dtype}"))
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        what = "page sizes" if paged and k_cache.shape[1] != v_cache.shape[1] else "shapes"
        raise ShapeError(_err(f"k_cache and v_cache {what} differ: k_cache {tuple(k_cache.shape)}, v_cache "
                              f"{tuple(v_cache.shape)}; they must be one [{', '.join(dims)}] layout"))
    for name, info in (("k_cache", k_cache), ("v_cache", v_cache)):
        _not_empty(name, info, dims)
    batch, head_dim = q.shape[0], q.shape[3]
    n0, n1, kv_heads, d = k_cache.shape
    if d != head_dim:
        raise ShapeError(_err(f"head_dim differs: q has {head_dim}, k_cache/v_cache have {d}"))
    if paged:
        if not 1 <= n1 <= MAX_PAGE_SIZE:
            raise ShapeError(_err(f"page size {n1} (k_cache.shape[1] of the pool {tuple(k_cache.shape)}) must be "
                                  f"in 1..{MAX_PAGE_SIZE}"))
        max_pages = _check_page_table(page_table, batch)
        if n0 * n1 > MAX_I32:
            raise ShapeError(_err(f"the pool holds {n0} pages of {n1} rows = {n0 * n1} rows; row indices must "
                                  f"fit in int32: split the pool"))
        if max_pages * n1 > MAX_I32:
            raise ShapeError(_err(f"page_table has {max_pages} pages per sequence of {n1} tokens: a capacity of "
                                  f"{max_pages * n1} tokens, beyond int32"))
        return KVCacheOperand(True, k_cache.dtype, n0, n1, max_pages, kv_heads, d)
    if n0 != batch:
        raise ShapeError(_err(f"k_cache has batch {n0} (shape {tuple(k_cache.shape)}) and q has batch {batch}; a "
                              f"contiguous cache is [batch, seqlen_cache, kv_heads, head_dim] (for a paged pool "
                              f"[num_pages, page_size, kv_heads, head_dim] pass page_table)"))
    if n0 * n1 > MAX_I32:
        raise ShapeError(_err(f"k_cache holds {n0 * n1} rows (batch x seqlen_cache); row indices must fit in int32"))
    return KVCacheOperand(False, k_cache.dtype, n0, n1, 1, kv_heads, d)


def _check_page_table(page_table: TensorInfo, batch: int) -> int:
    if page_table.dtype != INDEX_DTYPE:
        raise DTypeError(_err(f"page_table must be int32, got {page_table.dtype}; pass page_table.to(torch.int32)"))
    if len(page_table.shape) != 2 or page_table.shape[0] != batch:
        raise ShapeError(_err(f"page_table must be [batch, max_pages] = [{batch}, max_pages], got shape "
                              f"{tuple(page_table.shape)}"))
    if page_table.shape[1] == 0:
        raise EmptyInputError(_err("page_table has max_pages = 0: every sequence needs at least one page slot"))
    _index_vector_layout("page_table", page_table)
    return page_table.shape[1]


def _check_seqlens(cache_seqlens: TensorInfo, batch: int) -> None:
    if cache_seqlens.dtype != INDEX_DTYPE:
        raise DTypeError(_err(f"cache_seqlens must be int32, got {cache_seqlens.dtype}; pass "
                              f"cache_seqlens.to(torch.int32)"))
    if tuple(cache_seqlens.shape) != (batch,):
        raise ShapeError(_err(f"cache_seqlens must be [batch] = [{batch}], got shape {tuple(cache_seqlens.shape)}"))
    _index_vector_layout("cache_seqlens", cache_seqlens)


def _check_new(q: TensorInfo, cache: KVCacheOperand, k: TensorInfo | None, v: TensorInfo | None) -> int:
    """seqlen_new of the new tokens k, v (0 when none)."""
    if (k is None) != (v is None):
        raise ShapeError(_err(f"k and v (new tokens) go together: got only {'k' if v is None else 'v'}"))
    if k is None:
        return 0
    if cache.quantized:
        raise UnsupportedFeatureError(_err("appending k/v to an FP8 cache is not supported (the new tokens would "
                                           "need quantising with the cache's scales): quantise and write them "
                                           "into the cache yourself and count them in cache_seqlens"))
    for name, info in (("k", k), ("v", v)):
        _rank4(name, info, NEW_DIMS)
        if info.dtype != q.dtype:
            raise DTypeError(_err(f"{name} (new tokens) has dtype {info.dtype}; expected q's dtype {q.dtype}"))
    if tuple(k.shape) != tuple(v.shape):
        raise ShapeError(_err(f"k and v (new tokens) must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}"))
    want = (q.shape[0], k.shape[1], cache.kv_heads, cache.head_dim)
    if tuple(k.shape) != want:
        raise ShapeError(_err(f"k and v (new tokens) must be [batch, seqlen_new, kv_heads, head_dim] = "
                              f"[{want[0]}, seqlen_new, {want[2]}, {want[3]}], got {tuple(k.shape)}"))
    for name, info in (("k", k), ("v", v)):
        _not_empty(name, info, NEW_DIMS)
    if k.shape[1] > cache.capacity:
        raise ShapeError(_err(f"{k.shape[1]} new tokens do not fit a sequence's capacity of {cache.capacity} "
                              f"tokens ({'max_pages x page_size' if cache.paged else 'seqlen_cache'}); grow the "
                              f"cache or append fewer tokens per call"))
    for name, info in (("k", k), ("v", v)):
        _layout(name, info, NEW_DIMS)
    return k.shape[1]


def scale_granularity(name: str, info: TensorInfo, cache: KVCacheOperand, batch: int) -> tuple[ScaleGranularity, int | None]:
    """The granularity a scale tensor's shape names, and the tokens one scale covers (BLOCK_KV_HEAD)."""
    shape = tuple(info.shape)
    if shape in ((), (1,)):
        return ScaleGranularity.TENSOR, None
    if shape == (cache.kv_heads,):
        return ScaleGranularity.KV_HEAD, None
    if cache.paged and shape == (cache.num_pages, cache.kv_heads):
        return ScaleGranularity.BLOCK_KV_HEAD, cache.page_size
    if (not cache.paged and len(shape) == 3 and shape[0] == batch and shape[2] == cache.kv_heads and shape[1] >= 1
            and cache.capacity % shape[1] == 0):
        return ScaleGranularity.BLOCK_KV_HEAD, cache.capacity // shape[1]
    block = (f"[num_pages, kv_heads] = [{cache.num_pages}, {cache.kv_heads}] per (page, KV head)" if cache.paged else
             f"[batch, num_blocks, kv_heads] = [{batch}, num_blocks, {cache.kv_heads}] per (token block, KV "
             f"head), num_blocks dividing seqlen_cache {cache.capacity}")
    raise ShapeError(_err(f"{name} has shape {shape}; an FP8 cache's scale is [] or [1] per tensor, "
                          f"[kv_heads] = [{cache.kv_heads}] per KV head, or {block}"))


def _check_scales(cache: KVCacheOperand, batch: int, k_scale: TensorInfo | None, v_scale: TensorInfo | None) -> KVCacheOperand:
    named = (("k_scale", k_scale), ("v_scale", v_scale))
    if not cache.quantized:
        given = [n for n, s in named if s is not None]
        if given:
            raise KVScaleError(_err(f"{' and '.join(given)} given for a {cache.dtype} cache; dequantisation scales "
                                    f"are for FP8 (e4m3) caches only: drop them (or pre-scale the cache)"))
        return cache
    missing = [n for n, s in named if s is None]
    if missing:
        raise KVScaleError(_err(f"an FP8 ({cache.dtype}) cache needs float32 k_scale and v_scale (value = e4m3 x "
                                f"scale); {' and '.join(missing)} missing: pass torch.ones(1) for unscaled values"))
    grains = []
    for name, info in named:
        if info.dtype != SCALE_DTYPE:
            raise DTypeError(_err(f"{name} must be float32, got {info.dtype}; pass {name}.float()"))
        grains.append(scale_granularity(name, info, cache, batch))
        _index_vector_layout(name, info)
    blocks = {b for _, b in grains if b is not None}
    if len(blocks) > 1:
        raise ShapeError(_err(f"k_scale and v_scale cover token blocks of different sizes {sorted(blocks)}; "
                              f"give them one block size"))
    return replace(cache, k_scale=grains[0][0], v_scale=grains[1][0], scale_block=blocks.pop() if blocks else None)


def check_kvcache_inputs(q: TensorInfo, k_cache: TensorInfo, v_cache: TensorInfo, cache_seqlens: TensorInfo,
                         page_table: TensorInfo | None = None, *, k: TensorInfo | None = None,
                         v: TensorInfo | None = None, k_scale: TensorInfo | None = None,
                         v_scale: TensorInfo | None = None, out: TensorInfo | None = None) -> KVCacheProblem:
    """Every host check of a flash_attn_with_kvcache call (module docstring); no device check.
    Returns the problem without options."""
    _rank4("q", q, QO_DIMS)
    if q.dtype not in attn_cfg.DTYPES:
        raise DTypeError(_err(f"q has dtype {q.dtype}; expected one of {attn_cfg.DTYPES} (an FP8 cache still "
                              f"takes bf16/f16 queries)"))
    _not_empty("q", q, QO_DIMS)
    cache = _check_cache(q, k_cache, v_cache, page_table)
    batch, seqlen_q, heads, head_dim = q.shape
    if head_dim not in decode_cfg.HEAD_DIMS:   # the decode kernel's (the prefill kernel also has 96 and 192)
        raise HeadDimError(_err(f"head_dim {head_dim} is not supported; the kernels are built for head_dim in "
                                f"{decode_cfg.HEAD_DIMS} (zero-pad q and the cache, pass softmax_scale = "
                                f"{head_dim ** -0.5:.6g})"))
    if heads % cache.kv_heads:
        raise HeadsRatioError(_err(f"q has {heads} heads and the cache {cache.kv_heads} KV heads; heads must be a "
                                   f"multiple of kv_heads (GQA/MQA)"))
    if batch > MAX_GRID_YZ or heads > MAX_GRID_YZ:
        raise ShapeError(_err(f"batch {batch} and heads {heads} must be at most {MAX_GRID_YZ} (CUDA grid limit)"))
    _check_seqlens(cache_seqlens, batch)
    seqlen_new = _check_new(q, cache, k, v)
    cache = _check_scales(cache, batch, k_scale, v_scale)
    _layout("q", q, QO_DIMS)
    for name, info in (("k_cache", k_cache), ("v_cache", v_cache)):
        _layout(name, info, PAGED_DIMS if cache.paged else CONTIGUOUS_DIMS)
    problem = KVCacheProblem(batch, seqlen_q, heads, head_dim, q.dtype, cache, seqlen_new)
    if out is not None:
        if tuple(out.shape) != problem.out_shape:
            raise ShapeError(_err(f"out must have q's shape {problem.out_shape}, got {tuple(out.shape)}"))
        if out.dtype != q.dtype:
            raise DTypeError(_err(f"out must have q's dtype {q.dtype}, got {out.dtype}"))
        _layout("out", out, QO_DIMS)
    return problem


def check_num_splits(num_splits: Any) -> int | None:
    """None or 0 (FlashAttention-3's spelling): the heuristic; else an int in 1..MAX_SPLITS."""
    if num_splits is None or (type(num_splits) is int and num_splits == 0):
        return None
    if type(num_splits) is not int or not 1 <= num_splits <= MAX_SPLITS:
        raise FlashAttnInputError(_err(f"num_splits must be None or 0 (heuristic) or an int in "
                                       f"1..{MAX_SPLITS}, got {num_splits!r}"))
    return num_splits


# ----------------------------------------------------------------------------------------------
# Plan: the decode schedule of one problem
# ----------------------------------------------------------------------------------------------

# Tile N (keys per KV tile) of the decode kernel per head_dim (its config's table: the plan's split
# count is in these tiles).
DECODE_BN = dict(decode_cfg.DEFAULT_BN)


@dataclass(frozen=True)
class KVCachePlan:
    """How the decode kernel will run one problem: M geometry (pack GQA), tile N, the fetch choice and
    page divisor of the operand, the split count, the grid (x: M tiles x splits, y: KV heads when
    packed else query heads, z: batch) and the split workspaces (float32 partial O [num_splits,
    batch, seqlen_q, heads, D] and LSE [num_splits, batch, heads, seqlen_q]; none unsplit: the
    decode kernel's unsplit variant writes out and lse itself, and no combine runs)."""

    problem: KVCacheProblem
    gqa: PackGQA
    bn: int
    fetch: FetchPlan
    page_div: PageDivisor
    num_splits: int
    parts: int = 0      # > 0: the balanced schedule (DecodeConfig.balanced): CTAs per KV head; num_splits = 2 parts slots

    @property
    def grid(self) -> tuple[int, int, int]:
        p = self.problem
        if self.parts:      # common/decode_balanced.py: a fixed grid of parts CTAs per KV head
            return (self.parts, p.kv_heads if self.gqa.packed else p.heads, 1)
        return (self.gqa.m_tiles * self.num_splits, p.kv_heads if self.gqa.packed else p.heads, p.batch)

    @property
    def unsplit(self) -> bool:
        """One split: the decode kernel's unsplit variant alone ([D-decode-unsplit])."""
        return self.num_splits == 1 and not self.parts

    @property
    def o_partial_shape(self) -> tuple[int, ...] | None:
        """[num_splits, batch, seqlen_q, heads, D]; balanced: [2 parts slots, seqlen_q, heads, D]."""
        if self.parts:
            p = self.problem
            return (self.num_splits, p.seqlen_q, p.heads, p.head_dim)
        return None if self.num_splits == 1 else (self.num_splits, *self.problem.out_shape)

    @property
    def lse_partial_shape(self) -> tuple[int, ...] | None:
        """[num_splits, batch, heads, seqlen_q]; balanced: [2 parts slots, heads, seqlen_q]."""
        if self.parts:
            return (self.num_splits, self.problem.heads, self.problem.seqlen_q)
        return None if self.num_splits == 1 else (self.num_splits, *self.problem.lse_shape)


def plan_problem(problem: KVCacheProblem, num_sms: int, arch: str = "sm_90a") -> KVCachePlan:
    """The schedule of a checked problem on a device of ``num_sms`` SMs (deviceless)."""
    gqa = pack_gqa(problem.seqlen_q, problem.heads, problem.kv_heads)
    ctas = problem.batch * problem.kv_heads * gqa.m_tiles_per_kv_head
    # a wave is every CTA the device holds at once: two per SM for the kernels that fit half an SM
    cache = problem.cache
    grain = {"tensor": "tensor", "kv_head": "kv_head", "block_kv_head": "block"}[cache.k_scale.value] \
        if cache.quantized and cache.k_scale else ""
    # default_config's kernel (FP8: FP8_DEFAULT_RULE's for gqa.rows packed rows), or an FP8 variant
    # (runtime_config: FA4MLIR_DECODE_FP8_VARIANT)
    kernel = decode_cfg.runtime_config(problem.dtype, problem.head_dim, cache.page_size if cache.paged else None, grain,
                                       rows=gqa.rows)
    bn = kernel.bn      # DECODE_BN[head_dim] unless an FP8 variant's tile differs
    slots = num_sms * kernel.ctas_per_sm
    fetch = fetch_plan(bn, cache.page_size, arch, paged=cache.paged, fp8=cache.quantized)   # default_config's
    if kernel.balanced or (decode_cfg.balanced_by_rule(kernel) and _fp8_variant_is_default()
                           and _balanced_refusal(problem, gqa, kernel) is None):
        # the variant "balanced" (or another BALANCED_VARIANTS entry), or BALANCED_RULE (attention_decode_sm90_config)
        # for a paged FP8 call: its kernel, balanced_rule_config's, sets the CTA slots (three per SM)
        if not kernel.balanced:
            kernel = decode_cfg.balanced_rule_config(kernel)
            slots = num_sms * kernel.ctas_per_sm
        return _plan_balanced(problem, gqa, kernel, fetch, slots)
    keys = problem.live_keys
    splits = problem.num_splits or num_splits_heuristic(ctas, keys, bn, slots)
    if problem.num_splits is None and cache.paged and splits == 1:
        # a paged cache's lengths are ragged as a rule (and unknown here): bound each CTA's range
        splits = balance_splits(ctas, keys, bn, slots)
    if gqa.m_tiles * splits > MAX_I32:
        raise ShapeError(_err(f"seqlen_q {problem.seqlen_q} x {splits} splits exceeds the grid; split the call"))
    plan = KVCachePlan(problem, gqa, bn, fetch, PageDivisor.of(cache.page_size), splits)
    if plan.unsplit:
        # the call runs the unsplit kernel, whose tiles UNSPLIT_RULE may make other than the split kernel's the split
        # count was read off ([D-decode-bn128-unsplit]): the plan carries the kernel's tile
        unsplit = decode_cfg.runtime_config(problem.dtype, problem.head_dim, cache.page_size if cache.paged else None,
                                            grain, unsplit=True, rows=gqa.rows, **decode_variant(plan))
        if unsplit.bn != bn:
            plan = replace(plan, bn=unsplit.bn, fetch=fetch_plan(unsplit.bn, cache.page_size, arch,
                                                                            paged=cache.paged, fp8=cache.quantized))
    return plan


BALANCED_WAVES_ENV = "FA4MLIR_DECODE_BALANCED_WAVES"
MAX_BALANCED_WAVES = 8


def balanced_waves() -> int:
    """FA4MLIR_DECODE_BALANCED_WAVES (env.py; default 1): the balanced schedule's waves of CTA slots."""
    from .. import env
    raw = env.get_str(BALANCED_WAVES_ENV) or "1"
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_BALANCED_WAVES:
        raise FlashAttnInputError(_err(f"{BALANCED_WAVES_ENV}={raw!r}: expected an int in 1..{MAX_BALANCED_WAVES}"))
    return int(raw)


def _fp8_variant_is_default() -> bool:
    """FA4MLIR_DECODE_FP8_VARIANT unset or "default" (runtime_config's reading): BALANCED_RULE applies."""
    import os
    return (os.environ.get(decode_cfg.FP8_VARIANT_ENV) or "default") == "default"


def _balanced_refusal(problem: KVCacheProblem, gqa: PackGQA, kernel) -> str | None:
    """Why the balanced schedule is not built for this call (None: it is): a given num_splits, more than
    MAX_BATCH sequences, more than one M tile, or more key tiles than an i32 counts."""
    n_tiles = problem.batch * math.ceil(problem.live_keys / kernel.bn)
    if problem.num_splits is not None:
        return (f"num_splits={problem.num_splits} with the balanced decode schedule, which chooses its own splits "
                f"per sequence: pass num_splits=None")
    if problem.batch > BALANCED_MAX_BATCH or gqa.m_tiles != 1 or n_tiles > BALANCED_MAX_TILES:
        return (f"the balanced decode schedule is built for batch <= {BALANCED_MAX_BATCH}, one M tile of packed rows "
                f"and at most {BALANCED_MAX_TILES} key tiles; got batch {problem.batch}, {gqa.m_tiles} M tiles, "
                f"{n_tiles} tiles")
    return None


def _plan_balanced(problem: KVCacheProblem, gqa: PackGQA, kernel, fetch: FetchPlan, slots: int) -> KVCachePlan:
    """The balanced schedule (FP8 variant "balanced", common/decode_balanced.py): parts CTAs per KV head
    over one wave of ``slots``, 2 parts split slots. UnsupportedFeatureError for what it is not built
    for: a given num_splits, more than MAX_BATCH sequences, more than one M tile, or more key tiles
    than an i32 counts."""
    refusal = _balanced_refusal(problem, gqa, kernel)
    if refusal is not None:
        raise UnsupportedFeatureError(_err(refusal))
    parts = parts_for(slots, balanced_waves(), problem.kv_heads if gqa.packed else problem.heads)
    return KVCachePlan(problem, gqa, kernel.bn, fetch, PageDivisor.of(problem.cache.page_size), 2 * parts, parts)


def decode_variant(plan: KVCachePlan) -> dict:
    """The decode kernel's mask and score-modifier fields of a plan (DecodeConfig): the
    compile-time mask of (causal, window_size, attention_chunk) (causal stays a launch argument),
    softcap, and sinks when unsplit (with several splits the combine adds them)."""
    p = plan.problem
    _, mask = decode_cfg.decode_mask(p.causal, p.window_size, p.attention_chunk)
    return {**mask, "softcap": p.softcap > 0, "sinks": p.sinks and plan.unsplit}


def check_kvcache_call(q, k_cache, v_cache, cache_seqlens, page_table=None, *, k=None, v=None, softmax_scale=None,
                       causal=True, num_splits=None, k_scale=None, v_scale=None, return_lse=False,
                       out=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, sinks=None) -> KVCacheProblem:
    """flash_attn_with_kvcache's arguments -> the checked problem with its options: every host
    check, no driver call. Tensors are torch tensors or other tensor-likes on one CUDA device;
    cache_seqlens and page_table are never read. window_size and attention_chunk: checks.check_mask
    (MaskError, ArgumentTypeError); softcap: checks.check_softcap (SoftcapError); sinks:
    checks.check_sinks (float32 [heads], unit stride)."""
    window, chunk = _as_entry(check_mask, window_size, attention_chunk)
    from ..runtime import tensor_info
    from .checks import check_devices
    named = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": cache_seqlens, "page_table": page_table,
             "k": k, "v": v, "k_scale": k_scale, "v_scale": v_scale, "out": out, "sinks": sinks}
    if isinstance(cache_seqlens, int):
        raise DTypeError(_err("cache_seqlens must be an int32 tensor [batch] on the device, not a Python int "
                              "(a host value cannot be updated by a CUDA graph replay): pass torch.full((batch,), "
                              "n, dtype=torch.int32, device=q.device)"))
    infos = {n: None if x is None else tensor_info(x) for n, x in named.items()}
    _as_entry(check_devices, [(n, i.device, getattr(getattr(named[n], "device", None), "index", None))
                              for n, i in infos.items() if i is not None])
    problem = check_kvcache_inputs(infos["q"], infos["k_cache"], infos["v_cache"], infos["cache_seqlens"],
                                   infos["page_table"], k=infos["k"], v=infos["v"], k_scale=infos["k_scale"],
                                   v_scale=infos["v_scale"], out=infos["out"])
    scale = _as_entry(check_scale, softmax_scale, problem.head_dim)
    if sinks is not None:
        _as_entry(check_sinks, problem, infos["sinks"])
    return problem.with_options(causal=causal, softmax_scale=scale, num_splits=check_num_splits(num_splits),
                                return_lse=return_lse, window_size=window, attention_chunk=chunk,
                                softcap=_as_entry(check_softcap, softcap, scale), sinks=sinks is not None)


def plan_kvcache(q, k_cache, v_cache, cache_seqlens, page_table=None, *, k=None, v=None, softmax_scale=None,
                 causal=True, num_splits=None, k_scale=None, v_scale=None, return_lse=False, out=None,
                 num_sms: int | None = None, arch: str = "sm_90a", window_size=(-1, -1), attention_chunk=0,
                 softcap=0.0, sinks=None) -> tuple[KVCacheProblem, KVCachePlan]:
    """flash_attn_with_kvcache's arguments -> (checked problem, plan) (check_kvcache_call, then
    plan_problem); launches nothing. ``num_sms`` defaults to the device's SM count (fa4mlir.driver)."""
    problem = check_kvcache_call(q, k_cache, v_cache, cache_seqlens, page_table, k=k, v=v, softmax_scale=softmax_scale,
                                 causal=causal, num_splits=num_splits, k_scale=k_scale, v_scale=v_scale,
                                 return_lse=return_lse, out=out, window_size=window_size,
                                 attention_chunk=attention_chunk, softcap=softcap, sinks=sinks)
    if num_sms is None:
        from ..driver import device_info
        num_sms = device_info().num_sms
    return problem, plan_problem(problem, num_sms, arch)


__all__ = ["ENTRY", "ScaleGranularity", "KVCacheOperand", "KVCacheProblem", "KVCachePlan", "DECODE_BN",
           "check_kvcache_inputs", "check_kvcache_call", "check_num_splits", "scale_granularity", "plan_problem", "plan_kvcache",
           "decode_variant"]
