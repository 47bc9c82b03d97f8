"""flash_attn_with_kvcache: attention of new queries over a KV cache on an sm_90a GPU (MLIR-free at import).

    out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens)                    # contiguous cache
    out, lse = flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens, page_table,
                                       causal=True, return_lse=True)                     # paged cache
    out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, causal=True,
                                  window_size=(127, 0), softcap=30.0, sinks=sinks)       # gpt-oss style

Operands, layouts and the kernel contract (lengths clamped, unused pages never read into the
result) are kvcache.py's; this module runs a checked call: ``kvcache.plan_kvcache`` (every host
check, typed errors, then the decode plan: pack GQA, num_splits, grid) -> launches on torch's
current stream: with several splits the split kernel (attention_decode_sm90: float32 partial O and
LSE per split) and the combine (attention_combine_sm90: O in q's dtype, LSE); with one split the
decode kernel's unsplit variant alone, writing O in q's dtype and the LSE into out and lse (no
workspace, no combine: `[D-decode-unsplit]`) -> out (and lse, float32 [batch, heads, seqlen_q],
natural log, when return_lse).

Nothing in a call reads device data on the host or synchronises: cache_seqlens and the page
table are only read by the kernels, the workspaces and outputs come from torch's caching allocator
on the current stream, so a call can be captured in a CUDA graph and replayed after cache_seqlens,
the page table or the cache contents change (same shapes and addresses). A call whose signature
(shapes, strides, dtypes and device of every tensor, the options, the kernel source) was seen
before skips the checks and relaunches the prepared plan with the new addresses (``_CALLS``).

New tokens ``k``, ``v`` [batch, seqlen_new, kv_heads, D] are written into the cache (in place) at
cache_seqlens[b] .. + seqlen_new - 1 by a first launch (kvcache_append_sm90) and attended to:
sequence b attends to L_b = clamp(cache_seqlens[b], 0, capacity - seqlen_new) + seqlen_new keys
(cache_seqlens itself is not updated: the caller advances it, as with FlashAttention-3).
FP8 (e4m3) caches take float32 k_scale and v_scale of one granularity (per tensor, per KV head, per
page or token block and KV head), dequantised in the kernel (attention_decode_sm90, note "FP8");
appending to an FP8 cache, k and v scales of different granularities and head_dim 64 with an odd
page size are refused before anything runs (``UnsupportedFeatureError``). window_size,
attention_chunk, softcap and sinks (kvcache.py) select a decode kernel variant (DecodeConfig's
compile-time mask and score-modifier fields; with several splits the sinks enter in the combine's
sink variant, unsplit in the decode kernel's epilogue). Tensors must be torch CUDA tensors (the
workspaces are torch's).
"""
from __future__ import annotations


import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ..artifacts import Bundle
from ..driver import device_info, resolve_stream
from ..kernels import attention_decode_sm90_config as dec
from ..runtime import LoadedKernel
from .checks import check_bundle, check_device_context, check_flag
from .errors import ArgumentTypeError, LayoutError, UnsupportedFeatureError
from .kvcache import ENTRY, KVCachePlan, check_kvcache_call, decode_variant, plan_problem
from .plan import Launch, Plan, PreparedPlan, TensorRef, config_kernel, source_for

SPLIT_NAMES = tuple(n for n, _ in dec.SPLIT_TENSORS)
COMBINE_NAMES = tuple(n for n, _ in dec.COMBINE_TENSORS)
APPEND_NAMES = tuple(n for n, _ in dec.APPEND_TENSORS)
CALLS_KEPT = 256


def _err(msg: str) -> str:
    return f"{ENTRY}: {msg}"


def kernel_for(source, cfg) -> LoadedKernel:
    """The loaded kernel of ``cfg`` (a DecodeConfig, CombineConfig or AppendConfig) from
    ``source`` (plan.KernelSource): plan.config_kernel, its bundle's entry of that name (`--set
    decode`), else compiled here."""
    return config_kernel(source, cfg, ENTRY, ("decode",))


GRAINS = {"tensor": "tensor", "kv_head": "kv_head", "block_kv_head": "block"}   # ScaleGranularity -> kv_scale


def configs_for(plan: KVCachePlan) -> tuple[dec.DecodeConfig, dec.CombineConfig | None]:
    """The decode and combine kernels of a plan: the split kernel and the combine, or (one split,
    ``plan.unsplit``) the unsplit variant and None; UnsupportedFeatureError for an FP8 cache the
    decode kernel has no variant for (k and v scales of different granularities; TMA boxes of an
    FP8 row group not 128-byte aligned: head_dim 64 with an odd page size; a swap_ab variant named
    (FA4MLIR_DECODE_FP8_VARIANT) over more than SWAP_AB_ROWS packed query rows: the default rule
    never picks it there)."""
    p = plan.problem
    cache = p.cache
    page_size = cache.page_size if cache.paged else None
    kv_scale = ""
    if cache.quantized:
        if cache.k_scale is not cache.v_scale:
            raise UnsupportedFeatureError(_err(f"k_scale and v_scale of different granularities ({cache.k_scale.value}, "
                                               f"{cache.v_scale.value}) are not built: give both one granularity"))
        kv_scale = GRAINS[cache.k_scale.value]
    # FP8: attention_decode_sm90_config.FP8_DEFAULT_RULE picks swap AB for plan.gqa.rows <= SWAP_AB_ROWS
    # (head_dim 128, tensor / kv_head scales, TMA fetches), else the conversion-through-SMEM kernel
    split = dec.runtime_config(p.dtype, p.head_dim, page_size, kv_scale, unsplit=plan.unsplit, rows=plan.gqa.rows,
                               **decode_variant(plan))
    try:
        split.validate()
    except ValueError as exc:
        raise UnsupportedFeatureError(_err(f"no decode kernel for this cache: {exc}")) from None
    if split.swap_ab and plan.gqa.rows > dec.SWAP_AB_ROWS:
        raise UnsupportedFeatureError(_err(f"the FP8 decode variant swap_ab attends at most {dec.SWAP_AB_ROWS} packed "
                                           f"query rows per CTA (GQA group x seqlen_q), got {plan.gqa.rows}"))
    if plan.parts and not split.balanced:       # BALANCED_RULE: the plan put the rule's kernel on the schedule
        split = dec.balanced_rule_config(split)
    if split.balanced != bool(plan.parts):
        raise AssertionError(f"plan parts {plan.parts} for kernel {split.name()}")
    return split, None if plan.unsplit else dec.CombineConfig(p.dtype, p.head_dim, sinks=p.sinks,
                                                              balanced_bn=split.bn if split.balanced else 0)


def build_plan(kv_plan: KVCachePlan, source, q_strides, page_table_stride: int, out_strides,
               append_strides: dict | None = None, cache_strides: dict | None = None) -> Plan:
    """The launches of a decode call, tensors named by TensorRef (SPLIT_NAMES, COMBINE_NAMES, and
    k, v with new tokens; a contiguous cache's page_table slot takes cache_seqlens, never read):
    the append (new tokens k, v into the cache; ``append_strides``: the element strides of dims 0-2
    of k, v, k_cache, v_cache), the decode kernel (``cache_strides``: the element strides of dims
    0-2 of k_cache and v_cache, default contiguous), the combine; unsplit (one split), the decode
    kernel's unsplit variant writes out (``out_strides``) and lse, and no combine runs."""
    split_cfg, combine_cfg = configs_for(kv_plan)
    if split_cfg.bn != kv_plan.bn:
        raise AssertionError(f"plan tile {kv_plan.bn} != kernel tile {split_cfg.bn}")
    p = kv_plan.problem
    refs = {n: TensorRef(n) for n in SPLIT_NAMES + COMBINE_NAMES + APPEND_NAMES}
    refs["k_pool"], refs["v_pool"] = TensorRef("k_cache"), TensorRef("v_cache")   # the gather's row addresses
    if not p.cache.paged:
        refs["page_table"] = TensorRef("cache_seqlens")
    if not p.cache.quantized:     # the scale parameters are never read: any device address
        refs["k_scale"] = refs["v_scale"] = TensorRef("cache_seqlens")
    refs["sinks"] = TensorRef("sinks")
    launches = []
    if p.seqlen_new:
        append_cfg = dec.AppendConfig(p.dtype, p.head_dim, p.cache.paged)
        launches.append(Launch(kernel_for(source, append_cfg), dec.append_grid(kv_plan),
                               dec.append_launch_args(kv_plan, refs, append_strides, page_table_stride)))
    if split_cfg.gather:
        _check_gather_span(kv_plan, cache_strides)
    launches.append(Launch(kernel_for(source, split_cfg), dec.split_grid(kv_plan),
                           dec.split_launch_args(kv_plan, refs, q_strides, page_table_stride, cache_strides,
                                                 out_strides)))
    if combine_cfg is not None:
        launches.append(Launch(kernel_for(source, combine_cfg), dec.combine_grid(kv_plan),
                               dec.combine_launch_args(kv_plan, refs, out_strides)))
    return Plan(p, tuple(launches))


def _check_gather_span(kv_plan: KVCachePlan, cache_strides: dict | None) -> None:
    """The gather addresses a row by a u32 count of 16 bytes from the cache's start: every row of
    k_cache and v_cache must lie within GATHER_MAX_CACHE_BYTES (64 GiB) of it."""
    cache, p = kv_plan.problem.cache, kv_plan.problem
    esize = 1 if cache.quantized else 2
    row = cache.kv_heads * p.head_dim
    strides = cache_strides or {n: (cache.page_size * row, row, p.head_dim) for n in ("k_cache", "v_cache")}
    for name, st in strides.items():
        last = ((cache.num_pages - 1) * st[0] + (cache.page_size - 1) * st[1] + (cache.kv_heads - 1) * st[2]
                + p.head_dim) * esize
        if last > dec.GATHER_MAX_CACHE_BYTES:
            raise UnsupportedFeatureError(_err(
                f"{name} spans {last} bytes; page size {cache.page_size} is fetched by the cp.async gather, "
                f"which addresses rows within {dec.GATHER_MAX_CACHE_BYTES} bytes (64 GiB) of the cache's start: "
                "use a page size that is a multiple of 16, or a smaller pool"))


# ----------------------------------------------------------------------------------------------
# The call
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Call:
    plan: PreparedPlan
    kv_plan: KVCachePlan
    source: Any


_CALLS: dict = {}
_lock = threading.Lock()
_SIGNATURE_ENV = ("FA4MLIR_BUNDLE", "FA4MLIR_CUBIN_BACKEND", "FA4MLIR_DEBUG", dec.FP8_VARIANT_ENV,
                  "FA4MLIR_DECODE_BALANCED_WAVES", dec.TILE_VARIANT_ENV)


def _signature(tensors: dict, options: tuple, bundle) -> tuple | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    parts = []
    for name, x in tensors.items():
        if x is None:
            parts.append(None)
        elif isinstance(x, torch.Tensor):
            parts.append((name, x.shape, x.stride(), x.dtype, x.device))
        else:
            return None
    try:
        hash(options)
    except TypeError:
        return None
    return (*parts, options, bundle if isinstance(bundle, str) else id(bundle),
            tuple(os.environ.get(n) for n in _SIGNATURE_ENV))


def _torch(q):
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(q, torch.Tensor):
        raise ArgumentTypeError(_err(f"q must be a torch CUDA tensor (the split workspaces are allocated with torch), "
                                     f"got {type(q).__name__}"))
    return torch


def _outputs(torch, q, kv_plan: KVCachePlan, out):
    """The split workspaces (None, None when unsplit), out (the caller's, or new) and lse."""
    p = kv_plan.problem
    dev = q.device
    f32 = torch.float32
    o_partial = lse_partial = None
    if not kv_plan.unsplit:
        o_partial = torch.empty(kv_plan.o_partial_shape, dtype=f32, device=dev)
        lse_partial = torch.empty(kv_plan.lse_partial_shape, dtype=f32, device=dev)
    if out is None:
        out = torch.empty(p.out_shape, dtype=q.dtype, device=dev)
    lse = torch.empty(p.lse_shape, dtype=f32, device=dev)
    return o_partial, lse_partial, out, lse


_KV_OPS: list = []   # kvcache_ops, once a call brought torch tensors (no import statement under a trace)


def _kvcache_ops():
    if not _KV_OPS:
        from . import kvcache_ops
        _KV_OPS.append(kvcache_ops)
    return _KV_OPS[0]


def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table=None, *, k=None, v=None,
                            softmax_scale=None, causal=True, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            sinks=None, num_splits=None, k_scale=None, v_scale=None,
                            return_lse=False, out=None, bundle: Bundle | str | os.PathLike | None = None):
    """Attention of q over the KV cache; see the module docstring and kvcache.py. Returns out, or
    (out, lse) when return_lse. Under torch.compile, a dispatch mode or a trace, a call goes through
    the custom ops of kvcache_ops (fa4mlir::flash_attn_with_kvcache, ..._out); in plain eager mode
    through their implementation directly (so do calls with new k/v, FP8 scales, a window, a chunk,
    a softcap or sinks, which the custom ops do not take)."""
    causal = check_flag("causal", causal) if type(causal) is not bool else causal
    return_lse = check_flag("return_lse", return_lse) if type(return_lse) is not bool else return_lse
    mods = dict(window_size=window_size, attention_chunk=attention_chunk, softcap=softcap, sinks=sinks)
    plain = (sinks is None and isinstance(softcap, (int, float)) and not softcap and attention_chunk == 0
             and isinstance(window_size, tuple) and window_size == (-1, -1))
    extras = plain and k is None and v is None and k_scale is None and v_scale is None
    torch = sys.modules.get("torch")
    if extras and torch is not None and isinstance(q, torch.Tensor):
        kvcache_ops = _kvcache_ops()
        if not kvcache_ops.plain_eager(q):
            out, lse = kvcache_ops.call(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale, causal,
                                        num_splits, out, bundle)
            return (out, lse) if return_lse else out
    out, lse = with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table, k=k, v=v, softmax_scale=softmax_scale,
                            causal=causal, num_splits=num_splits, k_scale=k_scale, v_scale=v_scale, out=out,
                            bundle=bundle, **mods)
    return (out, lse) if return_lse else out


def with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table=None, *, k=None, v=None, softmax_scale=None,
                 causal=True, num_splits=None, k_scale=None, v_scale=None, out=None, bundle=None,
                 window_size=(-1, -1), attention_chunk=0, softcap=0.0, sinks=None):
    """The implementation (the custom ops' too): checks or the call cache, then the two launches.
    Returns (out, lse)."""
    tensors = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": cache_seqlens,
               "page_table": page_table, "k": k, "v": v, "k_scale": k_scale, "v_scale": v_scale, "out": out,
               "sinks": sinks}
    window = tuple(window_size) if isinstance(window_size, (tuple, list)) else window_size
    options = (softmax_scale, causal, num_splits, window, attention_chunk, softcap)
    signature = _signature(tensors, options, bundle)
    call = _CALLS.get(signature) if signature is not None else None
    if call is None:
        call = _prepare(tensors, options, bundle, signature)
    torch = sys.modules["torch"]
    o_partial, lse_partial, out, lse = _outputs(torch, q, call.kv_plan, out)
    addresses = {"q": q.data_ptr(), "k_cache": k_cache.data_ptr(), "v_cache": v_cache.data_ptr(),
                 "cache_seqlens": cache_seqlens.data_ptr(),
                 "page_table": (page_table if page_table is not None else cache_seqlens).data_ptr(),
                 "out": out.data_ptr(), "lse": lse.data_ptr()}
    if o_partial is not None:
        addresses.update(o_partial=o_partial.data_ptr(), lse_partial=lse_partial.data_ptr())
    if k is not None:
        addresses.update(k=k.data_ptr(), v=v.data_ptr())
    if k_scale is not None:
        addresses.update(k_scale=k_scale.data_ptr(), v_scale=v_scale.data_ptr())
    if sinks is not None:
        addresses["sinks"] = sinks.data_ptr()
    call.plan.launch(addresses, resolve_stream(None, True, q.device.index))
    return out, lse


def _prepare(tensors: dict, options: tuple, bundle, signature) -> _Call:
    """The checked call: every host check, the plan, the kernels, prepared against the tensors."""
    softmax_scale, causal, num_splits, window_size, attention_chunk, softcap = options
    check_bundle(bundle, ENTRY)
    q = tensors["q"]
    problem = check_kvcache_call(**tensors, softmax_scale=softmax_scale, causal=causal, num_splits=num_splits,
                                 window_size=window_size, attention_chunk=attention_chunk, softcap=softcap)
    torch = _torch(q)
    for name in ("k_scale", "v_scale"):    # the kernel indexes them densely
        if tensors[name] is not None and not tensors[name].is_contiguous():
            raise LayoutError(_err(f"{name} must be contiguous (the kernel indexes it densely), got strides "
                                   f"{tensors[name].stride()}; pass {name}.contiguous()"))
    device = device_info()
    check_device_context(q.device.index, device.ordinal, device.capability)
    kv_plan = plan_problem(problem, device.num_sms)
    source = source_for(bundle)
    page_table = tensors["page_table"]
    pt_stride = page_table.stride(0) if page_table is not None else 0
    out = tensors["out"]
    out_strides = out.stride()[:3] if out is not None else (problem.seqlen_q * problem.heads * problem.head_dim,
                                                            problem.heads * problem.head_dim, problem.head_dim)
    append_strides = None
    if problem.seqlen_new:
        append_strides = {n: tensors[n].stride()[:3] for n in ("k", "v", "k_cache", "v_cache")}
    cache_strides = {n: tensors[n].stride()[:3] for n in ("k_cache", "v_cache")}
    plan = build_plan(kv_plan, source, q.stride()[:3], pt_stride, out_strides, append_strides, cache_strides)
    o_partial, lse_partial, out_t, lse = _outputs(torch, q, kv_plan, out)
    named = {**{n: tensors[n] for n in ("q", "k_cache", "v_cache", "cache_seqlens", "k", "v", "k_scale", "v_scale",
                                        "sinks")},
             "page_table": page_table if page_table is not None else tensors["cache_seqlens"],
             "out": out_t, "lse": lse}
    if o_partial is not None:
        named.update(o_partial=o_partial, lse_partial=lse_partial)
    call = _Call(plan.prepare(named), kv_plan, source)
    if signature is not None:
        with _lock:
            while len(_CALLS) >= CALLS_KEPT:
                _CALLS.pop(next(iter(_CALLS)))
            _CALLS[signature] = call
    return call


__all__ = ["flash_attn_with_kvcache", "with_kvcache", "build_plan", "configs_for", "kernel_for"]
