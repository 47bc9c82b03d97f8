"""Sparse MLA decode over the paged latent cache on an sm_90a GPU (DeepSeek-V3.2's DSA decode): FlashMLA's
flash_mla_with_kvcache with ``indices`` (MLIR-free at import). flash_mla_with_kvcache (attention/mla.py)
sends a call with indices here.

    tile_scheduler_metadata, num_splits = get_mla_metadata(cache_seqlens, seqlen_q * heads, 1, heads,
                                                           topk=indices.shape[-1])
    out, lse = flash_mla_with_kvcache(q, k_cache, None, None, 512, tile_scheduler_metadata, num_splits,
                                      indices=indices, topk_length=None)

Operands (FlashMLA's): q [batch, seqlen_q, heads, 576] bf16 or f16, heads 1..128 (FlashMLA: 64 or
128); k_cache [num_pages, page_size, 1, 576] in q's dtype, one latent KV head, V = its first 512
columns; indices [batch, seqlen_q, topk] int32: indices[b, t, k] = page x page_size + offset, the
cache row (page, offset) query token t of sequence b attends (FlashMLA's flash_mla_interface.py:
"the index of the page block where token t resides x block_size + the offset of token t among the
page block"): they already name a cache row, so block_table and cache_seqlens are not read (FlashMLA:
"Can be None when sparse attention is used"). An entry that is negative (-1: padding) or >=
num_pages x page_size is ignored (FlashMLA names -1; past the cache is ignored here rather than
read), a duplicated entry counts once per occurrence, the order does not matter; a row no valid entry
names is never read (NaN there cannot reach out). topk a multiple of 64 (DeepSeek-V3.2: 2048).
topk_length [batch] int32 (optional, FlashMLA's): sequence b uses only its first topk_length[b]
entries (clamped into [0, topk]). causal must be False (FlashMLA asserts it).

Returns (out [batch, seqlen_q, heads, 512] in q's dtype, lse [batch, heads, seqlen_q] float32,
natural log); a row with no valid entry gets out 0 and lse +inf (FlashMLA's tests/ref.py
ref_sparse_attn_decode).

Scheduling: one CTA per (query token, 64 heads); when batch x seqlen_q x ceil(heads / 64) CTAs fill
less than mla.FILL_FRACTION of the SMs, each token's topk tiles are split over CTAs
(``plan_sparse_splits``, read from get_mla_metadata's shape as the dense decode does: no device
read, no host synchronisation) and attention_combine_sm90 (head dim 512) merges the partials.

FP8 cache (``is_fp8_kvcache=True``, FlashMLA's sparse-decode cache, its V32 layout):

    out, lse = flash_mla_with_kvcache(q, k_cache, None, None, 512, tile_scheduler_metadata, num_splits,
                                      is_fp8_kvcache=True, indices=indices)

k_cache float8_e4m3fn (or uint8) [num_pages, page_size, 1, 656]: each token row 512 e4m3 latent
bytes, four float32 scales (one per 128 latent columns), the 64 rope columns in bf16; q and out
bf16. An index names row page x page_size + offset, addressed by the page and row strides as
FlashMLA does (so its quantize_k_cache's padded pages, a page stride of page_size + 1 rows, work);
both strides multiples of 16 bytes. Each named row is dequantized to bf16(float32(e4m3) x scale)
(FlashMLA's dequantize_k_cache), the rope copied; everything else as above. The kernel
(dc.FP8_DECODE_DEFAULT_RULE, FA4MLIR_MLA_SPARSE_FP8_VARIANT names another for A/B): "converter", a third
warpgroup loading each row from global memory into registers and storing bf16 into two tiles
(attention_mla_sparse_sm90, note "FP8 converter"); "gather", the kernel before the rule: cp.async into
a staging stage the consumers dequantize (note "FP8 gather"); "crossover", opt-in, heads a multiple of 128:
the converter over a cluster of a token's two 64-head CTAs, each converting half of every tile into both
(attention_mla_sparse_crossover_sm90, note "Crossover"); "crossover_lean", opt-in, heads a multiple of 128: the
crossover with that module's note "Lean hand-off"; "crossover_stasync", heads a multiple of 128 (the rule's there,
dc.FP8_DECODE_CROSSOVER_RULE): crossover_lean with that module's note "st.async hand-off".

Not built (typed errors, UnsupportedFeatureError): attn_sink and extra_k_cache /
extra_indices_in_kvcache / extra_topk_length (FlashMLA's MODEL1 options), d_qk 512, the sm_100a
kernel.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .. import env
from ..artifacts import Bundle
from ..driver import device_info, resolve_stream
from ..kernels import attention_decode_sm90_config as dec
from ..kernels import attention_mla_sparse_sm90_config as dc
from ..runtime import TensorInfo
from .checks import (MAX_I32, check_bundle, check_device_context, check_devices, check_flag, check_layout, check_scale,
                     read_tensor)
from .errors import DTypeError, KnobError, LayoutError, ShapeError, UnsupportedFeatureError
from .mla import (ENTRY, FILL_FRACTION, MAX_SPLITS, CallCache, MLAOutputs, _Call, _err, _torch, check_cache_dtype,
                  check_cache_shape, check_metadata, check_no_grad, check_q_dims, combine_args, combine_grid, kernel_for)
from .mla_sparse import check_variant, producer_warps, requested_producer
from .mla_sparse import requested_variant as sparse_variant
from .plan import Launch, Plan, TensorRef, source_for

VARIANT_ENV = dc.FP8_DECODE_VARIANT_ENV
RETIRED_CONVERTER_ENV = "FA4MLIR_MLA_SPARSE_FP8_CONVERTER"     # the opt-in bool before FP8_DECODE_DEFAULT_RULE
CACHE_DIMS = ("pages", "page_size", "kv_heads", "head_dim")
Q_DIMS = ("batch", "seqlen_q", "heads", "head_dim")


def plan_sparse_splits(batch: int, seqlen_q: int, heads: int, topk: int, num_sms: int) -> int:
    """Splits of each token's topk tiles: 1 when the batch x seqlen_q x ceil(heads / 64) CTAs fill
    FILL_FRACTION of the SMs, else as many as keep the grid within one wave, at most MAX_SPLITS and
    at most topk / 64 (one tile each). A first guess, to be measured (bench mla)."""
    ctas = max(batch, 1) * max(seqlen_q, 1) * dc.head_blocks(max(heads, 1))
    if ctas >= FILL_FRACTION * num_sms:
        return 1
    return max(1, min(MAX_SPLITS, num_sms // ctas, max(topk, dc.BN) // dc.BN))


@dataclass(frozen=True)
class SparseDecodeProblem(MLAOutputs):
    """A checked sparse flash_mla_with_kvcache call; ``splits`` from the metadata's shape."""

    s_kv: int
    topk: int
    dtype: str
    splits: int
    softmax_scale: float
    has_topk_length: bool
    fp8: bool = False               # FlashMLA's FP8 cache (656-byte rows, addressed by page and row strides)
    page_size: int = 0
    fp8_variant: str = ""           # FP8 only: the entry of dc.FP8_DECODE_VARIANTS it runs ("default": the rule)
    producer: int | None = None     # mla_sparse.requested_producer's (FA4MLIR_MLA_SPARSE_PRODUCER), None: the rule's
    variant: str = "default"        # the entry of dc.SPARSE_VARIANTS (FA4MLIR_MLA_SPARSE_VARIANT; "default": the rule)

    def config(self, split: bool) -> dc.MLASparseDecodeConfig:
        cfg = dc.MLASparseDecodeConfig(self.dtype, kv_dtype="fp8" if self.fp8 else "", topk_length=self.has_topk_length,
                                       split=split, producer_warps=producer_warps(self.producer, self.dtype, self.fp8))
        if self.fp8:
            name = self.fp8_variant or "default"
            if name == "default":       # FP8_DECODE_CROSSOVER_RULE: the converter, as crossover where heads pair
                name = dc.fp8_decode_rule_variant(cfg, self.heads, self.variant)
            cfg = dc.fp8_decode_variant(cfg, name)
        return dc.sparse_variant(cfg, self.variant)


def _merges(info: TensorInfo, outer: int, inner: int) -> bool:
    """Dims ``outer`` and ``inner`` of ``info`` fold into one (stride_outer = n_inner x stride_inner)."""
    return info.shape[outer] == 1 or info.shape[inner] == 1 or \
        info.strides[outer] == info.shape[inner] * info.strides[inner]


def token_stride(shape, strides) -> int:
    """The stride of the folded (batch, seqlen_q) token dim (``_merges`` holds)."""
    return int(strides[1] if shape[1] > 1 else strides[0])


def check_sparse_decode_inputs(q: TensorInfo, k_cache: TensorInfo, indices: TensorInfo, head_dim_v: Any,
                               metadata: TensorInfo, num_splits: TensorInfo, softmax_scale=None, causal: Any = False,
                               topk_length: TensorInfo | None = None, is_fp8_kvcache: Any = False) -> SparseDecodeProblem:
    """Every host check of a sparse call (deviceless), typed errors naming what to pass."""
    if check_flag("causal", causal):
        raise UnsupportedFeatureError(_err("causal must be False with indices (sparse decode; FlashMLA asserts it)"))
    fp8 = check_flag("is_fp8_kvcache", is_fp8_kvcache)
    row = check_cache_dtype(q, k_cache, fp8, dc.DECODE_DTYPES)
    batch, seqlen_q, heads, d = check_q_dims(q, head_dim_v)
    tokens = batch * seqlen_q
    if batch < 1 or seqlen_q < 1 or not dc.DECODE_MIN_HEADS <= heads <= dc.DECODE_MAX_HEADS \
            or tokens * dc.head_blocks(max(heads, 1)) > MAX_I32:
        raise ShapeError(_err(f"q [batch, seqlen_q, heads, 576] needs batch, seqlen_q >= 1, heads in "
                              f"[{dc.DECODE_MIN_HEADS}, {dc.DECODE_MAX_HEADS}] and batch x seqlen_q x ceil(heads / 64) within "
                              f"int32 (the grid's x), got {tuple(q.shape)}"))
    num_pages, page_size = check_cache_shape(k_cache, row, fp8)
    s_kv = num_pages * page_size
    if not 1 <= s_kv <= MAX_I32:
        raise ShapeError(_err(f"k_cache needs 1 <= num_pages x page_size <= 2^31 - 1 rows (the indices are int32), "
                              f"got {num_pages} x {page_size}"))
    if not fp8 and not _merges(k_cache, 0, 1):     # (FP8: addressed by page and row strides, as FlashMLA does)
        raise LayoutError(_err(f"k_cache's pages must be evenly strided (page stride = page_size x token stride: an "
                               f"index names row page x page_size + offset), got strides {k_cache.strides}; pass "
                               f"k_cache.contiguous()"))
    if indices.dtype != "i32":
        raise DTypeError(_err(f"indices must be int32, got {indices.dtype}"))
    if len(indices.shape) != 3 or tuple(indices.shape[:2]) != (batch, seqlen_q):
        raise ShapeError(_err(f"indices must be [batch={batch}, seqlen_q={seqlen_q}, topk], got "
                              f"{tuple(indices.shape)}"))
    topk = indices.shape[2]
    if topk % dc.BN or not dc.DECODE_MIN_TOPK <= topk <= dc.DECODE_MAX_TOPK:
        raise ShapeError(_err(f"topk (indices' last dim) must be a multiple of {dc.BN} in [{dc.DECODE_MIN_TOPK}, "
                              f"{dc.DECODE_MAX_TOPK}], got {topk}; pad with -1"))
    if indices.strides[2] != 1 or not _merges(indices, 0, 1) or (tokens > 1 and indices.strides[1] < 1):
        raise LayoutError(_err(f"indices must have unit stride along topk and batch, seqlen_q dims that fold into one "
                               f"(positive strides), got strides {indices.strides}; pass indices.contiguous()"))
    if not _merges(q, 0, 1):
        raise LayoutError(_err(f"q's batch and seqlen_q dims must fold into one (stride_batch = seqlen_q x "
                               f"stride_seqlen_q), got strides {q.strides}; pass q.contiguous()"))
    if topk_length is not None and (topk_length.dtype != "i32" or tuple(topk_length.shape) != (batch,)
                                    or (batch > 1 and topk_length.strides[0] != 1)):
        raise ShapeError(_err(f"topk_length must be a contiguous int32 [batch={batch}], got {topk_length.dtype} of "
                              f"shape {tuple(topk_length.shape)}"))
    check_metadata(metadata, num_splits, batch)
    check_layout("q", q, Q_DIMS)
    check_layout("k_cache", k_cache, CACHE_DIMS)
    scale = check_scale(softmax_scale, d)
    problem = SparseDecodeProblem(batch, seqlen_q, heads, s_kv, topk, q.dtype, metadata.shape[0], scale,
                                  topk_length is not None, fp8, page_size, requested_variant() if fp8 else "",
                                  requested_producer(fp8, ENTRY), sparse_variant(ENTRY))
    check_variant_built(problem)
    return problem


def check_variant_built(problem: SparseDecodeProblem) -> None:
    """UnsupportedFeatureError where FA4MLIR_MLA_SPARSE_VARIANT names a variant not built for the call's kernel
    (seesaw over the FP8 cache: the converter kernel, unsplit, only; dc.PAIR_FILL_VARIANTS (seesaw_pairfill,
    seesaw_overlap): a 16-bit cache and the producer warpgroup, else mla_sparse.check_variant's errors), or where
    FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover (or crossover_lean, crossover_stasync) meets
    heads not a multiple of 128 (its cluster pairs a token's two 64-head blocks)."""
    if problem.fp8 and problem.fp8_variant in dc.CLUSTER_VARIANTS and problem.heads % (2 * dc.TILE_M):
        raise UnsupportedFeatureError(_err(f"{VARIANT_ENV}={problem.fp8_variant!r} runs the token's two 64-head "
                                           f"blocks as a cluster of two CTAs: heads must be a multiple of "
                                           f"{2 * dc.TILE_M}, got {problem.heads}; unset it"))
    if problem.variant in dc.PAIR_FILL_VARIANTS:
        check_variant(problem.variant, problem.fp8, ENTRY,
                      producer_warps(problem.producer, problem.dtype, problem.fp8))
        return
    if problem.variant != dc.SEESAW_VARIANT or not problem.fp8:
        return
    cfg = dc.fp8_decode_variant(dc.MLASparseDecodeConfig(problem.dtype, kv_dtype="fp8", split=problem.splits > 1),
                                problem.fp8_variant)
    if not cfg.fp8_converter or cfg.split or cfg.crossover:
        raise UnsupportedFeatureError(_err(f"{dc.SPARSE_VARIANT_ENV}={problem.variant!r} over the FP8 cache is built "
                                           f"for the converter kernel of one split only, not FP8 variant "
                                           f"{dc.CROSSOVER_VARIANT!r} (this call: "
                                           f"{problem.splits} splits, {cfg.name()}); unset it"))


def requested_variant() -> str:
    """FA4MLIR_MLA_SPARSE_FP8_VARIANT: the entry of dc.FP8_DECODE_VARIANTS the FP8 sparse decode runs (unset or
    "default": FP8_DECODE_DEFAULT_RULE's, the converter, run as "crossover_stasync" where the heads pair (a multiple
    of 128; FP8_DECODE_CROSSOVER_RULE); "converter": the plain converter; "gather": the kernel before the rule, for A/B;
    "crossover": the converter over a cluster of two CTAs (heads a multiple of 128); "crossover_lean": the crossover
    with its note "Lean hand-off" (opt-in, heads a multiple of 128); "crossover_stasync": crossover_lean with its
    note "st.async hand-off" (heads a multiple of 128); a bundle must hold it: the mla set holds all). Read per call
    into the call cache's key; KnobError for an unknown name, or for the retired FA4MLIR_MLA_SPARSE_FP8_CONVERTER set
    (its 0 would now run the converter without a word), before any launch."""
    if RETIRED_CONVERTER_ENV in os.environ:
        raise KnobError(_err(f"{RETIRED_CONVERTER_ENV} is retired: the converter kernel is the default; unset it and "
                             f"set {VARIANT_ENV}=gather for the kernel before the rule"))
    name = (env.get_str(VARIANT_ENV) or "default").strip()
    if name != "default" and name not in dc.FP8_DECODE_VARIANTS:
        raise KnobError(_err(f"{VARIANT_ENV}={name!r} is not an FP8 sparse decode variant; known: default, "
                             f"{', '.join(dc.FP8_DECODE_VARIANTS)} (unset it for the default)"))
    return name


def build_plan(problem: SparseDecodeProblem, source, q_strides, kv_stride: int, indices_stride: int,
               kv_page_stride: int = 0) -> Plan:
    """The sparse decode kernel, then (several splits) the head-dim-512 combine; tensors by TensorRef.
    ``q_strides`` are q's (seqlen_q, heads) strides (batch folds into seqlen_q), ``kv_stride`` the
    cache's token stride (FP8: in bytes, with ``kv_page_stride`` its page stride),
    ``indices_stride`` the indices' seqlen_q stride; out and lse contiguous."""
    p = problem
    split = p.splits > 1
    cfg = p.config(split).validate()
    names = {n for n, kind in cfg.params if kind == "ptr"} | {n for n, _ in dec.COMBINE_TENSORS}
    refs = {n: TensorRef(n) for n in names}
    args = dc.decode_launch_args(cfg, refs, batch=p.batch, seqlen_q=p.seqlen_q, num_splits=p.splits, s_kv=p.s_kv,
                          heads=p.heads, topk=p.topk, softmax_scale=p.softmax_scale, q_strides=q_strides,
                          kv_stride=kv_stride, indices_stride=indices_stride, page_size=p.page_size,
                          kv_page_stride=kv_page_stride)
    launches = [Launch(kernel_for(source, cfg), dc.decode_grid(p.batch, p.seqlen_q, p.heads, p.splits), args)]
    if split:
        combine = dec.CombineConfig(p.dtype, dc.D_V).validate()
        launches.append(Launch(kernel_for(source, combine), combine_grid(p), combine_args(p, refs, p.out_strides)))
    return Plan(p, tuple(launches))


_CALLS = CallCache()


def sparse_decode(q, k_cache, indices, head_dim_v, tile_scheduler_metadata, num_splits, softmax_scale=None,
                  causal=False, topk_length=None, is_fp8_kvcache=False, *,
                  bundle: Bundle | str | os.PathLike | None = None):
    """flash_mla_with_kvcache's sparse path (module docstring): returns (out, lse). Nothing is read
    from the device on the host; the launches go to torch's current stream."""
    torch = _torch(q)
    tensors = {"q": q, "k_cache": k_cache, "indices": indices, "tile_scheduler_metadata": tile_scheduler_metadata,
               "num_splits": num_splits}
    if topk_length is not None:
        tensors["topk_length"] = topk_length
    for name, x in tensors.items():
        _torch(x, name)
    check_no_grad(torch, q)
    options = ("sparse", head_dim_v if type(head_dim_v) is int else repr(head_dim_v), softmax_scale, causal,
               is_fp8_kvcache, requested_variant() if is_fp8_kvcache is True else "", sparse_variant(ENTRY),
               env.get_str(dc.PRODUCER_ENV))
    call, signature = _CALLS.get(_CALLS.signature(tensors, options, bundle))
    if call is None:
        call = _prepare(torch, tensors, head_dim_v, softmax_scale, causal, bundle, signature, is_fp8_kvcache)
    outputs = call.problem.outputs(torch, q.dtype, q.device)
    addresses = {"q": q.data_ptr(), "kv": k_cache.data_ptr(), "indices": indices.data_ptr(),
                 **{n: x.data_ptr() for n, x in outputs.items()}}
    if topk_length is not None:
        addresses["topk_length"] = topk_length.data_ptr()
    call.plan.launch(addresses, resolve_stream(None, True, q.device.index))
    return outputs["out"], outputs["lse"]


def _prepare(torch, tensors: dict, head_dim_v, softmax_scale, causal, bundle, signature, is_fp8_kvcache=False) -> _Call:
    check_bundle(bundle, ENTRY)
    infos = {n: read_tensor(n, x, ENTRY) for n, x in tensors.items()}
    ordinal = check_devices([(n, i.device, x.device.index) for (n, i), x in zip(infos.items(), tensors.values())], ENTRY)
    problem = check_sparse_decode_inputs(infos["q"], infos["k_cache"], infos["indices"], head_dim_v,
                                         infos["tile_scheduler_metadata"], infos["num_splits"], softmax_scale, causal,
                                         infos.get("topk_length"), is_fp8_kvcache)
    device = device_info()
    check_device_context(ordinal, device.ordinal, device.capability)
    q, k_cache, indices = tensors["q"], tensors["k_cache"], tensors["indices"]
    q_strides = (token_stride(q.shape, q.stride()), q.stride(2))
    kv_stride, page_stride = cache_strides(k_cache.shape, k_cache.stride())
    plan = build_plan(problem, source_for(bundle), q_strides, kv_stride, token_stride(indices.shape, indices.stride()),
                      page_stride)
    named = {"q": q, "kv": k_cache, "indices": indices, **problem.outputs(torch, q.dtype, q.device)}
    if "topk_length" in tensors:
        named["topk_length"] = tensors["topk_length"]
    call = _Call(plan.prepare(named), problem)
    _CALLS.put(signature, call)
    return call


def cache_strides(shape, strides) -> tuple[int, int]:
    """The cache's (row, page) strides in elements (FP8: bytes); a size-1 dim's stride, arbitrary in
    torch, is never used (every offset along it is 0) and given as 0."""
    return (int(strides[1]) if shape[1] > 1 else 0), (int(strides[0]) if shape[0] > 1 else 0)


def flops_and_bytes(batch: int, seqlen_q: int, heads: int, indices, topk_length=None,
                    token_bytes: int = dc.D_QK * 2, dtype_bytes: int = 2) -> tuple[int, int]:
    """FlashMLA's benchmark accounting (tests/lib.py count_flop_and_mem_vol_for_decode) of a sparse
    call: FLOPs = 2 x heads x attended x (576 + 512), attended = batch x seqlen_q x topk, or
    sum(topk_length) x seqlen_q; bytes = q (rows x 576) + out (rows x 512) in the element size + the
    distinct entries of the indices (after topk_length masks entries to -1; -1 counts once, as
    FlashMLA's unique() does) x ``token_bytes`` (FlashMLA assumes its 656-byte FP8 row; here the
    cache's 576 x 2). ``indices`` and ``topk_length``: host numpy arrays or sequences."""
    import numpy as np
    idx = np.asarray(indices, dtype=np.int64).reshape(batch, seqlen_q, -1).copy()
    topk = idx.shape[-1]
    if topk_length is None:
        attended = batch * seqlen_q * topk
    else:
        lens = np.asarray(topk_length, dtype=np.int64).reshape(batch)
        attended = int(lens.sum()) * seqlen_q
        idx[np.arange(topk)[None, None, :] >= lens[:, None, None]] = -1
    rows = batch * seqlen_q * heads
    flops = 2 * heads * attended * (dc.D_QK + dc.D_V)
    data = rows * dc.D_QK * dtype_bytes + len(np.unique(idx)) * token_bytes + rows * dc.D_V * dtype_bytes
    return int(flops), int(data)


__all__ = ["sparse_decode", "token_stride", "cache_strides", "check_sparse_decode_inputs", "plan_sparse_splits", "SparseDecodeProblem", "build_plan",
           "flops_and_bytes"]
