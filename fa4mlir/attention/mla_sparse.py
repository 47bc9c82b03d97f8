"""Sparse MLA prefill on an sm_90a GPU (DeepSeek-V3.2's DSA) with FlashMLA's API and definitions
(MLIR-free at import): its users switch by import.

    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512,
                                                attn_sink=None, topk_length=None)

Operands (FlashMLA's flash_mla_sparse_fwd): q [s_q, h_q, 576] bf16 (512 latent + 64 rope columns),
h_q a multiple of 64 (FlashMLA: 64 or 128); kv [s_kv, 1, 576] bf16, one latent KV head, V = its
first d_v = 512 columns; indices [s_q, 1, topk] int32, topk a multiple of 64 (FlashMLA's
DeepSeek-V3.2: 2048): query token i attends to kv rows indices[i, 0, :], an entry that is negative
(-1: padding) or >= s_kv is invalid and ignored, a duplicated entry counts once per occurrence, the
order does not matter; topk_length [s_q] int32 (optional): token i uses only its first
topk_length[i] entries (clamped into [0, topk]); attn_sink [h_q] float32 (optional): out is further
multiplied by exp(lse) / (exp(lse) + exp(attn_sink[h]))  (-inf: no effect; +inf: out 0).

Returns FlashMLA's (out, max_logits, lse): out [s_q, h_q, 512] bf16; max_logits [s_q, h_q] float32,
the largest scaled score sm_scale x q.k (natural units; -inf for a token with no valid entry); lse
[s_q, h_q] float32, the natural-log log-sum-exp of the scaled scores (FlashMLA's tests/ref.py:
its README's older base-2 wording is superseded), +inf for a token with no valid entry, whose out is
0. attn_sink changes neither max_logits nor lse. An invalid entry's kv row is never read (its copy
is zero-filled), so NaN in rows no valid entry names cannot reach out.

The kernel (attention_mla_sparse_sm90): one CTA per (token, 64 heads), the token's entries gathered
64 rows a tile by cp.async; no split (topk <= 2048 in DSA). Aliases: ``softmax_scale`` for
sm_scale and ``sinks`` for attn_sink (keywords). Nothing is read from the device on the host.

FP8 kv (FlashMLA's 656-byte V32 rows, the cache its sparse decode reads; FlashMLA's own sparse prefill
takes bf16 only): kv float8_e4m3fn (or uint8) [s_kv, 1, 656], each row 512 e4m3 latent bytes, four
float32 scales (one per 128 latent columns), the 64 rope columns in bf16, its row stride a multiple of
16 bytes; q and out bf16. The kernel lands each named row by cp.async and dequantizes it in SMEM to
bf16(float32(e4m3) x scale) (FlashMLA's dequantize_k_cache; attention_mla_sparse_sm90, note "FP8
gather"); the definitions above hold for the dequantized rows.

On an sm_100 GPU (compute capability 10.0) the call runs the sm_100a kernel instead
(attention/mla_sparse_sm100.py: its routing, and the typed errors for what that kernel does not take).

Not built: d_qk 512 (FlashMLA's MODEL1). The sparse decode
over the paged cache (flash_mla_with_kvcache with indices) is attention/mla_sparse_decode.py, on
this kernel.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from .. import env
from ..artifacts import Bundle
from ..driver import device_info, resolve_stream
from ..kernels import attention_mla_sparse_sm90_config as sc
from ..runtime import TensorInfo
from .checks import (MAX_I32, check_bundle, check_device_context, check_device_ordinal, check_devices, check_layout,
                     check_scale, read_tensor)
from .errors import (ArgumentTypeError, DTypeError, HeadDimError, HeadsRatioError, KnobError, LayoutError, ShapeError,
                     UnsupportedFeatureError)
from .mla import CallCache, _torch, kernel_for
from .mla_sparse_sm100 import KERNEL_ENV, build_plan_sm100, select_arch
from .plan import Launch, Plan, TensorRef, source_for

ENTRY = "flash_mla_sparse_fwd"
MLA_DIMS = ("tokens", "heads", "head_dim")


def _err(msg: str) -> str:
    return f"{ENTRY}: {msg}"


@dataclass(frozen=True)
class SparseProblem:
    """A checked flash_mla_sparse_fwd call."""

    s_q: int
    s_kv: int
    heads: int
    topk: int
    dtype: str
    softmax_scale: float
    has_topk_length: bool
    has_sinks: bool
    fp8: bool = False           # kv in FlashMLA's 656-byte FP8 rows
    producer: int | None = None     # requested_producer's producer_warps, None: SPARSE_DEFAULT_RULE's
    variant: str = "default"    # the entry of sc.SPARSE_VARIANTS it runs (FA4MLIR_MLA_SPARSE_VARIANT; "default": the rule)

    @property
    def config(self) -> sc.MLASparseConfig:
        cfg = sc.MLASparseConfig(self.dtype, topk_length=self.has_topk_length, sinks=self.has_sinks,
                                 kv_dtype="fp8" if self.fp8 else "",
                                 producer_warps=producer_warps(self.producer, self.dtype, self.fp8))
        return sc.sparse_variant(cfg, self.variant)


def producer_warps(producer: int | None, dtype: str, fp8: bool) -> int:
    """producer_warps: the requested producer's, or SPARSE_DEFAULT_RULE's for the call (None)."""
    return producer if producer is not None else sc.PRODUCER_VARIANTS[sc.default_sparse(dtype, fp8)[1]]


def requested_producer(fp8: bool, entry: str = ENTRY) -> int | None:
    """FA4MLIR_MLA_SPARSE_PRODUCER: the sm_90a sparse kernels' producer_warps (sc.PRODUCER_VARIANTS: "warp", the
    gather warp; "warpgroup", the producer warpgroup with half stages; for A/B, the mla bundle set holds both), or
    None (unset or "default":
    sc.SPARSE_DEFAULT_RULE's). Read per call into the call cache's key; KnobError for an unknown name or a
    warpgroup over an FP8 kv (not built there), before any launch."""
    name = (env.get_str(sc.PRODUCER_ENV) or "default").strip() or "default"
    if name == "default":
        return None
    if name not in sc.PRODUCER_VARIANTS:
        raise KnobError(f"{entry}: {sc.PRODUCER_ENV}={name!r} is not a sparse producer; known: default, "
                        f"{', '.join(sc.PRODUCER_VARIANTS)} (unset it for the default)")
    producer = sc.PRODUCER_VARIANTS[name]
    if producer != 1 and fp8:
        raise KnobError(f"{entry}: {sc.PRODUCER_ENV}={name} is built for a 16-bit kv, not FlashMLA's FP8 rows; unset it")
    return producer


VARIANT_ENV = sc.SPARSE_VARIANT_ENV


def requested_variant(entry: str = ENTRY) -> str:
    """FA4MLIR_MLA_SPARSE_VARIANT: the entry of sc.SPARSE_VARIANTS the sm_90a sparse kernels (this prefill, the
    sparse decode over a 16-bit cache and, one split, its FP8 converter kernel) run: unset or "default", or "seesaw" (FlashMLA's seesaw tile step,
    attention_mla_sparse_seesaw_sm90; a bundle must hold it: the mla-sparse-variants set), or "seesaw_pairfill"
    (the seesaw with FlashMLA's fill order of a pair's halves, 16-bit kv and the producer warpgroup), or
    "seesaw_overlap" (the pair fill with the next pair's S_a under P_b V). Read per call
    into the call cache's key; KnobError for an unknown name, before any launch."""
    name = (env.get_str(VARIANT_ENV) or "default").strip()
    if name not in sc.SPARSE_VARIANTS:
        raise KnobError(f"{entry}: {VARIANT_ENV}={name!r} is not a sparse MLA variant; known: "
                        f"{', '.join(sc.SPARSE_VARIANTS)} (unset it for the default)")
    return name


def check_variant(variant: str, fp8: bool, entry: str = ENTRY, producer_warps: int | None = None) -> None:
    """UnsupportedFeatureError where the requested variant is not built (seesaw and sc.PAIR_FILL_VARIANTS:
    FlashMLA's FP8 rows); KnobError for sc.PAIR_FILL_VARIANTS with the gather warp (``producer_warps``,
    the call's resolved producer: they order the producer warpgroup's half stages)."""
    if variant in (sc.SEESAW_VARIANT, *sc.PAIR_FILL_VARIANTS) and fp8:
        raise UnsupportedFeatureError(f"{entry}: {VARIANT_ENV}={variant!r} is built for the 16-bit kv only, not "
                                      f"FlashMLA's FP8 rows; unset it")
    if variant in sc.PAIR_FILL_VARIANTS and producer_warps is not None and producer_warps != 4:
        raise KnobError(f"{entry}: {VARIANT_ENV}={variant!r} orders the producer warpgroup's half stages; this call's "
                        f"producer is the gather warp: set {sc.PRODUCER_ENV}=warpgroup (or unset it over bf16)")


FP8_KV_DTYPES = ("e4m3", "u8")


def check_sparse_inputs(q: TensorInfo, kv: TensorInfo, indices: TensorInfo, sm_scale: Any, d_v: Any = sc.D_V,
                        attn_sink: TensorInfo | None = None, topk_length: TensorInfo | None = None) -> SparseProblem:
    """Every host check of a call (deviceless: TensorInfo and plain values), typed errors naming
    what to pass; returns the problem."""
    fp8 = kv.dtype in FP8_KV_DTYPES
    if q.dtype not in sc.DTYPES or not (fp8 or kv.dtype == q.dtype):
        raise DTypeError(_err(f"q and kv must be bf16 (FlashMLA's sparse prefill), or q bf16 and kv FlashMLA's FP8 rows "
                              f"(float8_e4m3fn or uint8 [s_kv, 1, {sc.FP8_ROW_BYTES}]), got {q.dtype} and {kv.dtype}"))
    width = sc.FP8_ROW_BYTES if fp8 else sc.D_QK
    if len(q.shape) != 3:
        raise ShapeError(_err(f"q must be 3-D [s_q, h_q, 576], got shape {tuple(q.shape)}"))
    s_q, heads, d = q.shape
    if d != sc.D_QK:
        raise HeadDimError(_err(f"q's head dim must be {sc.D_QK} (512 latent + 64 rope), got {d}"))
    if type(d_v) is not int or d_v != sc.D_V:
        raise HeadDimError(_err(f"d_v must be {sc.D_V} (V: kv's first 512 columns), got {d_v!r}"))
    if heads < sc.TILE_M or heads % sc.TILE_M:
        raise ShapeError(_err(f"h_q must be a positive multiple of {sc.TILE_M} (FlashMLA: 64 or 128), got {heads}"))
    if s_q < 1 or s_q * (heads // sc.TILE_M) > MAX_I32:
        raise ShapeError(_err(f"s_q must be in [1, {MAX_I32 // (heads // sc.TILE_M)}] (the grid's x counts tokens x "
                              f"head blocks), got {s_q}"))
    if len(kv.shape) != 3 or kv.shape[2] != width:
        what = " (FP8: 512 e4m3 + 4 float32 scales + 64 bf16 bytes a row)" if fp8 else ""
        raise ShapeError(_err(f"kv must be [s_kv, 1, {width}]{what}, got {tuple(kv.shape)}"))
    s_kv, kv_heads, _ = kv.shape
    if kv_heads != 1:
        raise HeadsRatioError(_err(f"kv must hold one latent KV head ([s_kv, 1, 576]), got {kv_heads}"))
    if not 1 <= s_kv <= MAX_I32:
        raise ShapeError(_err(f"kv needs 1 <= s_kv <= 2^31 - 1 rows, got {s_kv}"))
    if indices.dtype != "i32":
        raise DTypeError(_err(f"indices must be int32, got {indices.dtype}"))
    if len(indices.shape) != 3 or indices.shape[:2] != (s_q, 1):
        raise ShapeError(_err(f"indices must be [s_q={s_q}, 1, topk], got {tuple(indices.shape)}"))
    topk = indices.shape[2]
    if topk < sc.BN or topk % sc.BN:
        raise ShapeError(_err(f"topk (indices' last dim) must be a positive multiple of {sc.BN}, got {topk}; pad with -1"))
    if indices.strides[2] != 1 or (s_q > 1 and indices.strides[0] < 1):
        raise LayoutError(_err(f"indices must have unit stride along topk and a positive token stride, got strides "
                               f"{indices.strides}; pass indices.contiguous()"))
    if attn_sink is not None and (attn_sink.dtype != "f32" or tuple(attn_sink.shape) != (heads,)
                                  or (heads > 1 and attn_sink.strides[0] != 1)):
        raise ShapeError(_err(f"attn_sink must be a contiguous float32 [h_q={heads}], got {attn_sink.dtype} of shape "
                              f"{tuple(attn_sink.shape)}"))
    if topk_length is not None and (topk_length.dtype != "i32" or tuple(topk_length.shape) != (s_q,)
                                    or (s_q > 1 and topk_length.strides[0] != 1)):
        raise ShapeError(_err(f"topk_length must be a contiguous int32 [s_q={s_q}], got {topk_length.dtype} of shape "
                              f"{tuple(topk_length.shape)}"))
    check_layout("q", q, MLA_DIMS)
    check_layout("kv", kv, MLA_DIMS)
    scale = check_scale(sm_scale, d)
    return SparseProblem(s_q, s_kv, heads, topk, q.dtype, scale, topk_length is not None, attn_sink is not None, fp8,
                         requested_producer(fp8))


def build_plan(problem: SparseProblem, source, q_strides, kv_stride: int, indices_stride: int) -> Plan:
    """One launch of the sparse kernel, tensors by TensorRef (out, max_logits, lse contiguous)."""
    cfg = problem.config.validate()
    refs = {n: TensorRef(n) for n, kind in cfg.params if kind == "ptr"}
    p = problem
    args = sc.launch_args(cfg, refs, s_q=p.s_q, s_kv=p.s_kv, heads=p.heads, topk=p.topk, softmax_scale=p.softmax_scale,
                          q_strides=q_strides, kv_stride=kv_stride, indices_stride=indices_stride)
    return Plan(problem, (Launch(kernel_for(source, cfg), sc.grid(p.s_q, p.heads), args),))


@dataclass(frozen=True)
class _Call:
    plan: Any
    problem: SparseProblem


class _SparseCalls(CallCache):
    ENV = (*CallCache.ENV, KERNEL_ENV)      # the sm_100a kernel the call runs (mla_sparse_sm100.requested_kernel)


_CALLS = _SparseCalls()


def flash_mla_sparse_fwd(q, kv, indices, sm_scale=None, d_v: int = sc.D_V, attn_sink=None, topk_length=None, *,
                         softmax_scale=None, sinks=None, bundle: Bundle | str | os.PathLike | None = None):
    """FlashMLA's flash_mla_sparse_fwd (module docstring): returns (out, max_logits, lse). The launch
    goes to torch's current stream."""
    if softmax_scale is not None:
        if sm_scale is not None:
            raise ArgumentTypeError(_err("pass sm_scale or softmax_scale, not both"))
        sm_scale = softmax_scale
    if sinks is not None:
        if attn_sink is not None:
            raise ArgumentTypeError(_err("pass attn_sink or sinks, not both"))
        attn_sink = sinks
    torch = _torch(q, "q", ENTRY)
    tensors = {"q": q, "kv": kv, "indices": indices}
    for name, x in (("attn_sink", attn_sink), ("topk_length", topk_length)):
        if x is not None:
            tensors[name] = x
    for name, x in tensors.items():
        _torch(x, name, ENTRY)
    if torch.is_grad_enabled() and (q.requires_grad or kv.requires_grad):
        from .errors import AutogradError
        raise AutogradError(_err("q or kv requires grad: there is no backward kernel for sparse MLA; call under "
                                 "torch.no_grad() or detach them"))
    variant = requested_variant()
    options = (d_v if type(d_v) is int else repr(d_v), sm_scale, variant, env.get_str(sc.PRODUCER_ENV))
    call, signature = _CALLS.get(_CALLS.signature(tensors, options, bundle))
    if call is None:
        call = _prepare(torch, tensors, sm_scale, d_v, bundle, signature, variant)
    p = call.problem
    out = torch.empty((p.s_q, p.heads, sc.D_V), dtype=q.dtype, device=q.device)
    max_logits = torch.empty((p.s_q, p.heads), dtype=torch.float32, device=q.device)
    lse = torch.empty((p.s_q, p.heads), dtype=torch.float32, device=q.device)
    addresses = {"q": q.data_ptr(), "kv": kv.data_ptr(), "indices": indices.data_ptr(), "out": out.data_ptr(),
                 "max_logits": max_logits.data_ptr(), "lse": lse.data_ptr()}
    if attn_sink is not None:
        addresses["sinks"] = attn_sink.data_ptr()
    if topk_length is not None:
        addresses["topk_length"] = topk_length.data_ptr()
    call.plan.launch(addresses, resolve_stream(None, True, q.device.index))
    return out, max_logits, lse


def _prepare(torch, tensors: dict, sm_scale, d_v, bundle, signature, variant: str = "default") -> _Call:
    check_bundle(bundle, ENTRY)
    infos = {n: read_tensor(n, x, ENTRY) for n, x in tensors.items()}
    ordinal = check_devices([(n, i.device, x.device.index) for (n, i), x in zip(infos.items(), tensors.values())], ENTRY)
    problem = check_sparse_inputs(infos["q"], infos["kv"], infos["indices"], sm_scale, d_v, infos.get("attn_sink"),
                                  infos.get("topk_length"))
    check_variant(variant, problem.fp8, producer_warps=producer_warps(problem.producer, problem.dtype, problem.fp8))
    problem = replace(problem, variant=variant)
    device = device_info()
    q, kv, indices = tensors["q"], tensors["kv"], tensors["indices"]
    check_device_ordinal(ordinal, device.ordinal)
    if select_arch(problem, device.capability, indices.stride(0)) == "sm_100a":
        if problem.producer is not None and problem.producer != 1:
            raise KnobError(_err(f"{sc.PRODUCER_ENV} selects an sm_90a kernel variant; this call runs the sm_100a "
                                 "kernel: unset it"))
        if variant != "default":
            raise UnsupportedFeatureError(_err(f"{VARIANT_ENV}={variant!r} names an sm_90a kernel variant; this "
                                               f"call runs the sm_100a kernel: unset it"))
        plan = build_plan_sm100(problem, source_for(bundle))
        kv, indices = kv.select(1, 0), indices.select(1, 0)     # the sm_100a contract's [s_kv, 576], [s_q, topk]
    else:
        check_device_context(ordinal, device.ordinal, device.capability)
        plan = build_plan(problem, source_for(bundle), q.stride()[:2], kv.stride(0), indices.stride(0))
    dev = q.device
    named = {"q": q, "kv": kv, "indices": indices,
             "out": torch.empty((problem.s_q, problem.heads, sc.D_V), dtype=q.dtype, device=dev),
             "max_logits": torch.empty((problem.s_q, problem.heads), dtype=torch.float32, device=dev),
             "lse": torch.empty((problem.s_q, problem.heads), dtype=torch.float32, device=dev)}
    if "attn_sink" in tensors:
        named["sinks"] = tensors["attn_sink"]
    if "topk_length" in tensors:
        named["topk_length"] = tensors["topk_length"]
    call = _Call(plan.prepare(named), problem)
    _CALLS.put(signature, call)
    return call


def flops(s_q: int, heads: int, topk: int, topk_length=None) -> int:
    """FlashMLA's FLOP count of a call (tests/lib.py count_flop_and_mem_vol): 2 x attended entries x
    h_q x (576 + 512), attended = s_q x topk, or the sum of topk_length (a host sequence) when given."""
    return sc.flops(s_q, heads, topk, topk_length)


__all__ = ["flash_mla_sparse_fwd", "check_sparse_inputs", "requested_producer", "producer_warps", "SparseProblem", "build_plan", "flops",
           "ENTRY", "VARIANT_ENV", "requested_variant", "check_variant"]
