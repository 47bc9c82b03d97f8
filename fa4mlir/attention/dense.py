"""flash_attn_func: dense attention forward on an sm_90a GPU (MLIR-free at import).

    out = flash_attn_func(q, k, v, softmax_scale=None, causal=False)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    out = flash_attn_func(q, k, v, causal=True, window_size=(4096, -1))   # sliding window
    out = flash_attn_func(q, k, v, causal=True, attention_chunk=8192)     # Llama-4's chunked attention
    out = flash_attn_func(q, k, v, causal=True, softcap=30.0)             # Gemma-2's capped scores
    out = flash_attn_func(q, k, v, causal=True, sinks=sinks)              # gpt-oss's sink logits

q is [batch, seqlen_q, heads, head_dim]; k and v are [batch, seqlen_k, kv_heads, head_dim]; one
dtype, bf16 or f16; head_dim 64, 96, 128, 192 or 256; heads a multiple of kv_heads (GQA, MQA). v's
head dim may differ where the kernel has the pair (attention_sm90_config.HEAD_DIM_PAIRS: q and k 192,
v 128, MLA prefill); out is then [batch, seqlen_q, heads, v's head dim]. out has q's shape (with v's
head dim) and dtype; lse is float32 [batch, heads, seqlen_q], the natural-log logsumexp of the scaled
scores. The causal mask is aligned bottom-right: query i sees key j iff j <= i + seqlen_k -
seqlen_q; a query row that sees no key gets out = 0 and lse = +inf (FlashAttention's convention).
window_size=(left, right) (keyword; FlashAttention-3/4's) keeps keys diag - left .. diag + right of
query i, diag = i + seqlen_k - seqlen_q, -1 leaving a side unbounded (causal sets right to 0);
attention_chunk=c (keyword; Llama-4's, as FA3/FA4) keeps the keys of diag's chunk of c keys. Both
combine with causal and with each other (kernels/common/masks.py). A window or chunk compiles into
the kernel (one kernel per size; a window or chunk that bounds nothing at the call's lengths runs
the causal or unmasked kernel). Bad values raise ArgumentTypeError (not ints, not a pair) or
MaskError (a pair of another length, a side < -1, a chunk < 0).
softcap=c (keyword; FlashAttention's) > 0 replaces each scaled score s by c * tanh(s / c) before the
softmax (0: none); one compiled kernel serves every cap. sinks= (keyword; gpt-oss's, FA4's
learnable_sink) is a float32 [heads] tensor of sink logits: each row's softmax gets one more logit,
sinks[head], in its denominator and no value, and lse includes it. A row that sees no key gets out
= 0 and lse = sinks[head] (the logsumexp of its one logit; FA4 CuTe returns NaN there, and inf where
exp(sink - row max) overflows float32, which this kernel never forms) [D-sinks]. Bad values raise
ArgumentTypeError (softcap not a number), SoftcapError (negative, NaN, infinite), ShapeError,
DTypeError, LayoutError or DeviceError (sinks not float32 [heads], contiguous, on q's device).
score_mod=, mask_mod=, aux_tensors= (keyword; FlexAttention's signatures, FA4 CuTe's names) compile
Python functions into the kernel (kernels/common/score_mod.py; bad ones raise ScoreModError).
softmax_scale defaults to 1 / sqrt(head_dim) and must lie in [2^-64, 2^64]. Empty problems return
what FlashAttention-2 returns, with no kernel: batch, seqlen_q or heads 0 give empty out and lse;
seqlen_k 0 (every row sees no key) gives out = 0 and lse = +inf.

Tensors: torch tensors or any __cuda_array_interface__ / DLPack producer, on one sm_90 GPU; strided
layouts are fine as long as TMA can address them (unit head_dim stride, 16-byte strides and base).
out and lse are written where given (out=, lse=), else allocated with torch on the inputs' device;
callers without torch pass both. The kernel runs on ``stream``, or when it is None on torch's current
stream if any argument is a torch tensor, else on the legacy default stream.

A call goes problem -> plan -> launch: ``checks`` turn the arguments into an ``AttnProblem`` (every
argument problem raises a typed ``FlashAttnInputError`` before any driver call or compile, see
``errors``; the first driver call asks for the device, whose capability is checked before any
kernel is compiled or loaded), ``plan.select`` picks the kernel from ``bundle=``, else the FA4MLIR_BUNDLE bundle, else the compiler,
and the plan is prepared against the tensors and launched. A call on torch tensors whose signature
(shapes, strides, dtypes and devices of every tensor, the scale, causal, the kernel source) was seen
before skips all of that (its flags are checked first): it checks the new addresses' alignment and launches the ``PreparedPlan``
that signature was prepared into (``_CALLS``, the last ``CALLS_KEPT``).

Torch tensors go through the torch custom ops of ``torch_ops`` (``fa4mlir::flash_attn_fwd``, and
``fa4mlir::flash_attn_fwd_out`` when out= or lse= is given), so torch.compile sees one op and
traces no id(), environment or cache lookup; ``_flash_attn`` (the call cache above) is the ops'
implementation and the path of every other tensor-like. A torch call whose q, k or v requires grad
while grad mode is on raises ``AutogradError`` before anything runs: there is no backward kernel
yet. (An explicit ``stream=`` takes the direct path: the op launches on torch's current stream.)
"""
from __future__ import annotations

import math
import os
import sys
import threading
from dataclasses import dataclass, replace
from typing import Any

from ..artifacts import Bundle
from ..driver import device_info, resolve_stream
from ..runtime import GMEM_ALIGN_BYTES, fill, tensor_info
from .checks import (_err, check_device_context, check_devices, check_inputs, check_lse, check_mask, check_mod_seqlens,
                     check_mods, check_options, check_out, check_scale, check_sinks, check_softcap, device_ordinal, read_tensor)
from .errors import ArgumentTypeError, AutogradError, UnsupportedFeatureError
from .plan import KernelSource, PreparedPlan, select, source_for
from .problem import AttnProblem

TENSORS = ("q", "k", "v", "o", "lse")
F32_INF_BITS = 0x7F800000


def _torch_to_allocate(q: Any, dims: AttnProblem):
    """torch, to allocate out and lse where the caller gave none; ArgumentTypeError (before any
    driver call) where it cannot: torch is not importable, or (for other tensor-likes than torch
    tensors) is built without CUDA."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or (not isinstance(q, torch.Tensor) and torch.version.cuda is None):
        why = "not importable" if torch is None else "built without CUDA"
        raise ArgumentTypeError(_err(f"torch is {why}, so out and lse cannot be allocated; pass out= "
                                     f"({dims.out_shape}, {dims.dtype}) and lse= ({dims.lse_shape}, float32) "
                                     f"as CUDA tensor-likes")) from None
    return torch


def _allocate(torch, q: Any, dims: AttnProblem, ordinal: int | None, out: Any, lse: Any) -> tuple[Any, Any]:
    if isinstance(q, torch.Tensor):
        device = q.device
    else:
        device = torch.device("cuda", ordinal if ordinal is not None else torch.cuda.current_device())
    if out is None:
        tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dims.dtype]
        out = torch.empty(dims.out_shape, dtype=tdtype, device=device)
    if lse is None:
        lse = torch.empty(dims.lse_shape, dtype=torch.float32, device=device)
    return out, lse


# ----------------------------------------------------------------------------------------------
# Call cache: what one tensor signature was checked and prepared into
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Call:
    """A checked call: its prepared plan, what to allocate for out and lse when they are not given,
    and the kernel source it was selected from (kept so that its id, part of the signature, stays
    unique)."""

    plan: PreparedPlan
    out_spec: tuple | None    # (shape, torch dtype)
    lse_shape: tuple | None
    source: KernelSource


CALLS_KEPT = 256
_CALLS: dict = {}
_lock = threading.Lock()
# the environment source_for reads: a change picks another kernel source
_SIGNATURE_ENV = ("FA4MLIR_BUNDLE", "FA4MLIR_CUBIN_BACKEND", "FA4MLIR_DEBUG", "FA4MLIR_PREFILL_TILES")


NO_WINDOW = (-1, -1)


def _signature(q, k, v, out, lse, softmax_scale, causal, bundle, window=NO_WINDOW, chunk=0, softcap=0.0,
               sinks=None) -> tuple | None:
    """What a call's checks and kernel choice depend on, every tensor's address aside: shapes,
    strides, dtypes and devices of q, k, v (and out and lse when given), the scale, causal, the
    kernel source (bundle, or the environment source_for reads). Torch tensors only (None otherwise): their
    attributes are cheap to read, where other tensor-likes need tensor_info."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tensor = torch.Tensor
    parts = []
    for x in (q, k, v, out, lse, sinks):
        if x is None:
            parts.append(None)
        elif isinstance(x, tensor):
            parts.append((x.shape, x.stride(), x.dtype, x.device))
        else:
            return None
    environ = os.environ
    # a bundle path is its own key (the ops pass one); a Bundle object is kept alive by its _Call
    return (*parts, type(softmax_scale), softmax_scale, bool(causal), window, chunk, type(softcap), softcap,
            bundle if isinstance(bundle, str) else id(bundle),
            tuple(environ.get(n) for n in _SIGNATURE_ENV))


def _remember(signature: tuple, call: _Call) -> None:
    with _lock:
        while len(_CALLS) >= CALLS_KEPT:
            _CALLS.pop(next(iter(_CALLS)))
        _CALLS[signature] = call


_TORCH_OPS: list = []   # fa4mlir.attention.torch_ops, once a call brought torch tensors


def _torch_ops(q, k, v, out, lse, sinks=None):
    """torch_ops when q, k, v (and out, lse, sinks when given) are torch tensors (torch then is
    imported), else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tensor = torch.Tensor
    if not (isinstance(q, tensor) and isinstance(k, tensor) and isinstance(v, tensor)
            and all(x is None or isinstance(x, tensor) for x in (out, lse, sinks))):
        return None
    if not _TORCH_OPS:
        from . import torch_ops
        _TORCH_OPS.append(torch_ops)
    return _TORCH_OPS[0]


def check_no_grad(q, k, v, sinks=None) -> None:
    """Raise AutogradError when grad mode is on and q, k, v or sinks (a torch tensor) requires grad
    (no backward kernel yet)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return
    which = [n for n, x in (("q", q), ("k", k), ("v", v), ("sinks", sinks))
             if isinstance(x, torch.Tensor) and x.requires_grad]
    if which:
        raise AutogradError(_err(
            f"{', '.join(which)} require{'s' if len(which) == 1 else ''} grad and grad mode is on, but "
            f"fa4mlir has no backward kernel yet: the output could not carry a gradient. Call it under "
            f"`with torch.no_grad():` or `with torch.inference_mode():` (inference, generation), or pass "
            f"detached tensors (q.detach()) if no gradient should flow through attention"))


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_lse=False, *, window_size=NO_WINDOW,
                    attention_chunk=0, softcap=0.0, sinks=None, score_mod=None, mask_mod=None, aux_tensors=None,
                    out=None, lse=None, bundle: Bundle | str | os.PathLike | None = None, stream=None):
    """Attention forward on an sm_90 GPU; see the module docstring. Returns out, or (out, lse)
    when return_lse. ``bundle``: a Bundle or a bundle folder's path. Every argument is checked
    before any driver call or compile (typed errors, ``errors``). score_mod, mask_mod, aux_tensors:
    Python functions compiled into the kernel (kernels/common/score_mod.py; README "score_mod and
    mask_mod"); such a call takes the direct path (no torch custom op, no call cache)."""
    if type(causal) is not bool or type(return_lse) is not bool or stream is not None or bundle is not None:
        causal, return_lse = check_options(causal, return_lse, stream, bundle)
    if window_size is not NO_WINDOW or type(attention_chunk) is not int or attention_chunk != 0:
        window_size, attention_chunk = check_mask(window_size, attention_chunk)
    if score_mod is not None or mask_mod is not None or aux_tensors is not None:
        check_no_grad(q, k, v, sinks)
        out, lse = _flash_attn(q, k, v, softmax_scale, causal, out, lse, bundle, stream, window_size, attention_chunk,
                               softcap, sinks, (score_mod, mask_mod, aux_tensors))
        return (out, lse) if return_lse else out
    ops = _torch_ops(q, k, v, out, lse, sinks)
    if ops is not None and stream is None:
        return ops.flash_attn(q, k, v, softmax_scale, causal, return_lse, out, lse, bundle, window_size, attention_chunk,
                              softcap, sinks)
    check_no_grad(q, k, v, sinks)
    out, lse = _flash_attn(q, k, v, softmax_scale, causal, out, lse, bundle, stream, window_size, attention_chunk,
                           softcap, sinks)
    return (out, lse) if return_lse else out


def _flash_attn(q, k, v, softmax_scale, causal, out, lse, bundle, stream, window=NO_WINDOW,
                chunk=0, softcap=0.0, sinks=None, mods=None) -> tuple[Any, Any]:
    """flash_attn_func's work on any tensor-likes, through the call cache: returns (out, lse).
    window, chunk: checked (check_mask) window_size and attention_chunk; softcap and sinks as
    flash_attn_func takes them; mods: (score_mod, mask_mod, aux_tensors) or None (a call with them
    skips the call cache: the fingerprint is checked per call, so a changed function is seen)."""
    signature = None
    try:
        if mods is not None:
            raise TypeError("score_mod calls have no signature")
        signature = _signature(q, k, v, out, lse, softmax_scale, causal, bundle, window, chunk, softcap, sinks)
        call = _CALLS.get(signature) if signature is not None else None
    except (TypeError, RuntimeError):  # an unhashable softmax_scale (a 0-d array), a sparse tensor: no signature
        signature = call = None
    if call is not None:
        torch = sys.modules["torch"]
        if out is None:
            out = torch.empty(call.out_spec[0], dtype=call.out_spec[1], device=q.device)
        if lse is None:
            lse = torch.empty(call.lse_shape, dtype=torch.float32, device=q.device)
        addresses = dict(zip(TENSORS, (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr())))
        if sinks is not None:
            addresses["sinks"] = sinks.data_ptr()
        if not any(a % GMEM_ALIGN_BYTES for a in addresses.values()):  # else the checks below say which
            call.plan.launch(addresses, resolve_stream(stream, True, q.device.index))
            return out, lse
    # 1. pure checks: every argument, no driver call
    check_options(causal, False, stream, bundle)   # again for direct callers (the ops' implementations)
    window, chunk = check_mask(window, chunk)
    given = {"q": q, "k": k, "v": v, "out": out, "lse": lse, "sinks": sinks}
    infos = {n: read_tensor(n, x) for n, x in given.items() if x is not None or n in ("q", "k", "v")}
    problem = check_inputs(infos["q"], infos["k"], infos["v"])
    scale = check_scale(softmax_scale, problem.head_dim)
    problem = problem.with_options(causal=causal, softmax_scale=scale, window_size=window, attention_chunk=chunk,
                                   softcap=check_softcap(softcap, scale), sinks=sinks is not None)
    if sinks is not None:
        check_sinks(problem, infos["sinks"])
    if mods is not None:
        fields, aux_infos = check_mods(*mods, problem.softcap)
        check_mod_seqlens(problem.seqlen_q, problem.seqlen_k)
        problem = replace(problem, **fields)
        infos.update(aux_infos)
        given.update({n: x for n, x in zip(aux_infos, mods[2] or ())})
    if out is not None:
        check_out(problem, infos["out"])
    if lse is not None:
        check_lse(problem, infos["lse"])
    ordinal = check_devices([(n, infos[n].device, device_ordinal(n, given[n])) for n in infos])
    torch = _torch_to_allocate(q, problem) if out is None or lse is None else None
    source = source_for(bundle)   # opens a bundle path; compiles nothing yet
    # 2. the device (the first driver call): one sm_90 GPU, the tensors' own
    device = device_info()
    check_device_context(ordinal, device.ordinal, device.capability)
    ordinal = ordinal if ordinal is not None else device.ordinal
    allocated = out is None, lse is None
    if out is None or lse is None:
        out, lse = _allocate(torch, q, problem, ordinal, out, lse)
    out_info, lse_info = infos.get("out") or tensor_info(out), infos.get("lse") or tensor_info(lse)
    uses_torch = any(i.is_torch for i in (*infos.values(), out_info, lse_info))
    if problem.is_empty or problem.sees_no_key:
        _no_kernel(problem, out, lse, out_info, lse_info, stream, uses_torch, ordinal, sinks)
        return out, lse
    # 3. the kernel (compiled or loaded once per source and config), planned, prepared, launched
    aux = {n: given[n] for n in infos if n.startswith("aux")}
    tensors = {"q": q, "k": k, "v": v, "o": out, "lse": lse, **({"sinks": sinks} if sinks is not None else {}), **aux}
    prepared = select(problem, device, source).prepare(tensors)
    addresses = {**{n: infos[n].ptr for n in ("q", "k", "v", *aux)}, "o": out_info.ptr, "lse": lse_info.ptr}
    if sinks is not None:
        addresses["sinks"] = infos["sinks"].ptr
    prepared.launch(addresses, resolve_stream(stream, uses_torch, ordinal))
    if signature is not None:
        # the signature of this call names out and lse as given or not; what fills them in is torch's
        _remember(signature, _Call(prepared, (problem.out_shape, out.dtype) if allocated[0] else None,
                                   problem.lse_shape if allocated[1] else None, source))
    return out, lse


def _no_kernel(problem: AttnProblem, out, lse, out_info, lse_info, stream, uses_torch: bool, ordinal: int,
               sinks=None) -> None:
    """What FlashAttention-2 returns for a problem with no work, without a kernel: nothing to write
    when out is empty (batch, seqlen_q or heads 0); when seqlen_k is 0 every query row sees no key,
    so out = 0 and lse = +inf (with sinks: lse = sinks[head], as the kernel writes for such a row).
    Torch outputs on the current stream are filled by torch, anything else by the driver's memsets
    on the call's stream (sinks there need torch: UnsupportedFeatureError otherwise)."""
    if problem.is_empty:
        return
    torch = sys.modules.get("torch")
    if sinks is not None:
        if torch is None or not all(isinstance(x, torch.Tensor) for x in (out, lse, sinks)) or stream is not None:
            raise UnsupportedFeatureError(_err("seqlen_k = 0 with sinks writes lse = sinks[head] with torch: pass "
                                               "torch tensors (and no stream=), or at least one key"))
        out.zero_()
        lse.copy_(sinks.view(1, -1, 1).expand(lse.shape))
        return
    if stream is None and torch is not None and isinstance(out, torch.Tensor) and isinstance(lse, torch.Tensor):
        out.zero_()
        lse.fill_(math.inf)
        return
    handle = resolve_stream(stream, uses_torch, ordinal)
    fill(out_info, 0, handle)
    fill(lse_info, F32_INF_BITS, handle)


__all__ = ["flash_attn_func", "check_no_grad", "AttnProblem", "CALLS_KEPT"]
