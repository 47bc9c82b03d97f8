"""The attention entry points as torch custom ops (imports torch; dense.flash_attn_func loads it on
its first call with torch tensors, so importing fa4mlir stays torch-free).

    fa4mlir::flash_attn_fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale, bool causal,
                            str? bundle, SymInt window_left=-1, SymInt window_right=-1,
                            SymInt attention_chunk=0, float softcap=0., Tensor? sinks=None)
                            -> (Tensor out, Tensor lse)
    fa4mlir::flash_attn_fwd_out(Tensor q, Tensor k, Tensor v, Tensor(a3!) out, Tensor(a4!)? lse,
                                float? softmax_scale, bool causal, str? bundle, SymInt window_left=-1,
                                SymInt window_right=-1, SymInt attention_chunk=0, float softcap=0.,
                                Tensor? sinks=None) -> ()
    fa4mlir::flash_attn_varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k,
                                   SymInt max_seqlen_q, SymInt max_seqlen_k, Tensor? seqused_k,
                                   float? softmax_scale, bool causal, str? bundle, SymInt window_left=-1,
                                   SymInt window_right=-1, float softcap=0., Tensor? sinks=None,
                                   SymInt attention_chunk=0) -> (Tensor out, Tensor lse)

``flash_attn_varlen_fwd`` is varlen.flash_attn_varlen_func's functional op (calls without out= and
lse=; its implementation is varlen._flash_attn_varlen, no call cache), out [total_q, heads, D_v] and lse
float32 [heads, total_q].

``flash_attn_fwd`` is functional: it allocates out and lse (the usual call; what torch.compile's
graphs and CUDA-graph pools like best). ``flash_attn_fwd_out`` writes the caller's out= (and lse=)
in place and declares it (mutates_args), so a call with out= costs no copy: a copy into out= would
undo what a caller passing out= asks for (no allocation, a fixed address for a captured graph). The
schema takes no Bundle object: ``bundle`` is a bundle folder's path, or the token a Bundle object
was registered under (``_bundle_arg``), and the kernel source is looked up per path or object in
the implementation (plan.source_for).

Both implementations are ``dense._flash_attn``: its call cache (keyed by shapes, strides, the
environment and the kernel source) runs inside the op, where torch.compile does not trace. The fake
implementations give out's and lse's shapes and dtypes and run the pure input checks when the
sizes are concrete, so a bad call raises its typed error at trace time too. No autograd formula is
registered (no backward kernel yet): ``flash_attn`` raises ``AutogradError`` before calling the op
when an input requires grad under grad mode, and a direct call of the op on such inputs returns a
tensor whose backward raises torch's own "no autograd formula" error rather than a detached one.
Every launch runs on torch's current stream (captured by torch.cuda.graph, CUDA graph trees).
"""
from __future__ import annotations

import os
from typing import Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

from ..runtime import GMEM_ALIGN_BYTES, TensorInfo
from ..tensors import TORCH_DTYPES
from .checks import check_bundle, check_inputs, check_scale, check_softcap
from .checks import check_mask, check_max_seqlen, check_varlen_inputs
from .dense import _flash_attn, check_no_grad
from .varlen import _flash_attn_varlen

NAMESPACE = "fa4mlir"


@torch.library.custom_op(f"{NAMESPACE}::flash_attn_fwd", mutates_args=())
def flash_attn_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float],
                   causal: bool, bundle: Optional[str], window_left: int = -1, window_right: int = -1,
                   attention_chunk: int = 0, softcap: float = 0.0,
                   sinks: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """out [batch, seqlen_q, heads, head_dim_v] (q's dtype; v's head dim) and lse float32 [batch, heads, seqlen_q]."""
    return _flash_attn(q, k, v, softmax_scale, causal, None, None, _bundle(bundle), None, (window_left, window_right),
                       attention_chunk, softcap, sinks)


@torch.library.custom_op(f"{NAMESPACE}::flash_attn_fwd_out", mutates_args=("out", "lse"))
def flash_attn_fwd_out(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: Optional[torch.Tensor], softmax_scale: Optional[float], causal: bool,
                       bundle: Optional[str], window_left: int = -1, window_right: int = -1,
                       attention_chunk: int = 0, softcap: float = 0.0, sinks: Optional[torch.Tensor] = None) -> None:
    """Writes out (and lse when given) in place."""
    _flash_attn(q, k, v, softmax_scale, causal, out, lse, _bundle(bundle), None, (window_left, window_right),
                attention_chunk, softcap, sinks)


def _check_fake(q, k, v, softmax_scale, softcap=0.0) -> None:
    """The pure input checks on fake tensors whose sizes and strides are concrete (symbolic sizes:
    the implementation checks them at run time)."""
    dims = [*q.shape, *q.stride(), *k.shape, *k.stride(), *v.shape, *v.stride()]
    if not all(isinstance(n, int) for n in dims):
        return
    # no address at trace time: a stand-in aligned one (the implementation checks the real ones)
    infos = [TensorInfo(GMEM_ALIGN_BYTES, tuple(x.shape), tuple(x.stride()), TORCH_DTYPES.get(str(x.dtype).split(".")[-1], "?"),
                        "cuda", True) for x in (q, k, v)]
    problem = check_inputs(*infos)
    check_softcap(softcap, check_scale(softmax_scale, problem.head_dim))


@flash_attn_fwd.register_fake
def _flash_attn_fwd_fake(q, k, v, softmax_scale, causal, bundle, window_left=-1, window_right=-1, attention_chunk=0,
                         softcap=0.0, sinks=None):
    _check_fake(q, k, v, softmax_scale, softcap)
    batch, seqlen_q, heads, _ = q.shape
    return q.new_empty((batch, seqlen_q, heads, v.shape[-1])), q.new_empty((batch, heads, seqlen_q), dtype=torch.float32)


@flash_attn_fwd_out.register_fake
def _flash_attn_fwd_out_fake(q, k, v, out, lse, softmax_scale, causal, bundle, window_left=-1, window_right=-1,
                             attention_chunk=0, softcap=0.0, sinks=None):
    _check_fake(q, k, v, softmax_scale, softcap)


# ----------------------------------------------------------------------------------------------
# Bundles through the schema: a path, or a registered Bundle object's token
# ----------------------------------------------------------------------------------------------

_BUNDLES: dict = {}     # token -> Bundle object (kept alive: the call cache keys it by id)
_TOKEN_ATTR = "_fa4mlir_op_token"   # a Bundle object's token, on the object (Dynamo cannot key a dict by it)


def _bundle_arg(bundle) -> Optional[str]:
    """What the schema carries for ``bundle``: None, a path as given, or a Bundle object's token
    (anything else raises ArgumentTypeError)."""
    check_bundle(bundle)
    if bundle is None or isinstance(bundle, str):
        return bundle
    if isinstance(bundle, os.PathLike):
        return os.fspath(bundle)
    token = getattr(bundle, _TOKEN_ATTR, None)
    if token is None:
        token = f"fa4mlir-bundle-object-{len(_BUNDLES)}"
        setattr(bundle, _TOKEN_ATTR, token)
        _BUNDLES[token] = bundle
    return token


def _bundle(arg: Optional[str]):
    """The kernel source argument an op's bundle string names: a registered Bundle, else the path."""
    return _BUNDLES.get(arg, arg) if arg is not None else None


_FWD = torch.ops.fa4mlir.flash_attn_fwd.default
_FWD_OUT = torch.ops.fa4mlir.flash_attn_fwd_out.default


def _plain_eager(q) -> bool:
    """True when nothing records or transforms torch calls: q is a plain tensor, and no Dynamo
    trace, jit trace, dispatch mode (FakeTensorMode, make_fx, functionalization) or torch-function
    mode is active. Then the op's dispatch (about 5-7 µs of custom_op autograd wrapping per call,
    measured on this module's CPU test machine) buys nothing, and flash_attn calls its
    implementation directly."""
    return (type(q) is torch.Tensor and not torch.compiler.is_compiling() and not torch.jit.is_tracing()
            and _current_dispatch_mode() is None and not torch._C._is_torch_function_mode_enabled())


def flash_attn(q, k, v, softmax_scale, causal, return_lse, out, lse, bundle, window=(-1, -1), chunk=0, softcap=0.0,
               sinks=None):
    """dense.flash_attn_func on torch tensors: the autograd check, then one op call (in plain
    eager mode the op's implementation itself, which computes the same thing). window, chunk:
    checked window_size and attention_chunk (checks.check_mask); softcap (a number for the schema's
    float: checks.check_softcap) and sinks as flash_attn_func takes them."""
    check_no_grad(q, k, v, sinks)
    if softmax_scale is not None and type(softmax_scale) is not float:
        softmax_scale = check_scale(softmax_scale, q.shape[-1] if q.dim() else 1)  # ints, 0-d arrays
    if _plain_eager(q):
        out, lse = _flash_attn(q, k, v, softmax_scale, causal, out, lse, bundle, None, window, chunk, softcap, sinks)
        return (out, lse) if return_lse else out
    if type(softcap) is not float:   # the schema's float: ints and numpy scalars as floats, the rest refused
        softcap = check_softcap(softcap, check_scale(softmax_scale, max(q.shape[-1], 1) if q.dim() else 1))
    arg = _bundle_arg(bundle)
    if out is None and lse is None:
        out, lse = _FWD(q, k, v, softmax_scale, bool(causal), arg, *window, chunk, softcap, sinks)
    else:
        if out is None:
            out = q.new_empty((*q.shape[:-1], v.shape[-1])) if q.dim() == 4 and v.dim() == 4 else q.new_empty(q.shape)
        if lse is None and return_lse and q.dim() == 4:
            lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        _FWD_OUT(q, k, v, out, lse, softmax_scale, bool(causal), arg, *window, chunk, softcap, sinks)
    return (out, lse) if return_lse else out


@torch.library.custom_op(f"{NAMESPACE}::flash_attn_varlen_fwd", mutates_args=())
def flash_attn_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                          cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                          seqused_k: Optional[torch.Tensor], softmax_scale: Optional[float], causal: bool,
                          bundle: Optional[str], window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                          sinks: Optional[torch.Tensor] = None, attention_chunk: int = 0
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """out [total_q, heads, head_dim of v] (q's dtype) and lse float32 [heads, total_q]."""
    return _flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, None,
                              softmax_scale, causal, (window_left, window_right), softcap, sinks, True, None, None,
                              _bundle(bundle), attention_chunk)


@flash_attn_varlen_fwd.register_fake
def _flash_attn_varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                softmax_scale, causal, bundle, window_left=-1, window_right=-1, softcap=0.0, sinks=None,
                                attention_chunk=0):
    dims = [*q.shape, *q.stride(), *k.shape, *k.stride(), *v.shape, *v.stride()]
    if all(isinstance(n, int) for n in dims):   # concrete sizes: the pure checks at trace time too
        infos = [TensorInfo(GMEM_ALIGN_BYTES, tuple(x.shape), tuple(x.stride()),
                            TORCH_DTYPES.get(str(x.dtype).split(".")[-1], "?"), "cuda", True) for x in (q, k, v)]
        problem = check_varlen_inputs(*infos)
        check_softcap(softcap, check_scale(softmax_scale, problem.head_dim))
    total_q, heads = q.shape[0], q.shape[1]
    return q.new_empty((total_q, heads, v.shape[-1])), q.new_empty((heads, total_q), dtype=torch.float32)


_VARLEN = torch.ops.fa4mlir.flash_attn_varlen_fwd.default


def flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, softmax_scale,
                      causal, window_size, softcap, sinks, return_lse, bundle, attention_chunk=0):
    """varlen.flash_attn_varlen_func as one op call (tracing, torch.compile): the schema's scalars
    checked first (flags, window, max_seqlen, scale, softcap), then the op."""
    from .checks import check_flag
    check_no_grad(q, k, v, sinks)
    causal, return_lse = check_flag("causal", causal), check_flag("return_lse", return_lse)
    window, chunk = check_mask(window_size, attention_chunk)
    max_q, max_k = check_max_seqlen("max_seqlen_q", max_seqlen_q), check_max_seqlen("max_seqlen_k", max_seqlen_k)
    scale = check_scale(softmax_scale, max(q.shape[-1], 1) if q.dim() else 1)
    softcap = check_softcap(softcap, scale)
    out, lse = _VARLEN(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, seqused_k, scale, causal,
                       _bundle_arg(bundle), *window, softcap, sinks, chunk)
    return (out, lse) if return_lse else out


__all__ = ["flash_attn_fwd", "flash_attn_fwd_out", "flash_attn", "flash_attn_varlen_fwd", "flash_attn_varlen",
           "NAMESPACE"]
