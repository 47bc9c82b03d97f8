"""flash_attn_with_kvcache as torch custom ops (imports torch; kvcache_call loads it on the first call
that is not plain eager, so importing fa4mlir stays torch-free).

    fa4mlir::flash_attn_with_kvcache(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens,
        Tensor? page_table, float? softmax_scale, bool causal, int? num_splits, str? bundle)
        -> (Tensor out, Tensor lse)
    fa4mlir::flash_attn_with_kvcache_out(..., Tensor(a!) out, ...) -> Tensor lse

Both implementations are ``kvcache_call.with_kvcache`` (its call cache runs inside the op, where
torch.compile does not trace). The fake implementations give out's and lse's shapes and dtypes and
run the pure input checks when the sizes are concrete. Appending k/v and FP8 scales are not in the
schema: such calls take the direct path (which refuses them with their typed errors). The bundle
travels as in torch_ops (a path, or a registered Bundle object's token).
"""
from __future__ import annotations

from typing import Optional

import torch

from ..runtime import GMEM_ALIGN_BYTES, TensorInfo
from ..tensors import TORCH_DTYPES
from .kvcache import check_kvcache_inputs
from .kvcache_call import with_kvcache
from .torch_ops import NAMESPACE, _bundle, _bundle_arg, _plain_eager

plain_eager = _plain_eager


@torch.library.custom_op(f"{NAMESPACE}::flash_attn_with_kvcache", mutates_args=())
def kvcache_fwd(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                page_table: Optional[torch.Tensor], softmax_scale: Optional[float], causal: bool,
                num_splits: Optional[int], bundle: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    return with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale=softmax_scale, causal=causal,
                        num_splits=num_splits, bundle=_bundle(bundle))


@torch.library.custom_op(f"{NAMESPACE}::flash_attn_with_kvcache_out", mutates_args=("out",))
def kvcache_fwd_out(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                    page_table: Optional[torch.Tensor], out: torch.Tensor, softmax_scale: Optional[float],
                    causal: bool, num_splits: Optional[int], bundle: Optional[str]) -> torch.Tensor:
    _, lse = with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale=softmax_scale, causal=causal,
                          num_splits=num_splits, out=out, bundle=_bundle(bundle))
    return lse


def _info(x) -> TensorInfo | None:
    if x is None:
        return None
    return TensorInfo(GMEM_ALIGN_BYTES, tuple(x.shape), tuple(x.stride()),
                      TORCH_DTYPES.get(str(x.dtype).split(".")[-1], "?"), "cuda", True)


def _check_fake(q, k_cache, v_cache, cache_seqlens, page_table, out=None) -> None:
    tensors = [t for t in (q, k_cache, v_cache, cache_seqlens, page_table, out) if t is not None]
    if not all(isinstance(n, int) for t in tensors for n in (*t.shape, *t.stride())):
        return
    check_kvcache_inputs(_info(q), _info(k_cache), _info(v_cache), _info(cache_seqlens), _info(page_table),
                         out=_info(out))


@kvcache_fwd.register_fake
def _kvcache_fwd_fake(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale, causal, num_splits, bundle):
    _check_fake(q, k_cache, v_cache, cache_seqlens, page_table)
    batch, seqlen_q, heads, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((batch, heads, seqlen_q), dtype=torch.float32)


@kvcache_fwd_out.register_fake
def _kvcache_fwd_out_fake(q, k_cache, v_cache, cache_seqlens, page_table, out, softmax_scale, causal, num_splits,
                          bundle):
    _check_fake(q, k_cache, v_cache, cache_seqlens, page_table, out)
    batch, seqlen_q, heads, _ = q.shape
    return q.new_empty((batch, heads, seqlen_q), dtype=torch.float32)


_FWD = torch.ops.fa4mlir.flash_attn_with_kvcache.default
_FWD_OUT = torch.ops.fa4mlir.flash_attn_with_kvcache_out.default


def call(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale, causal, num_splits, out, bundle):
    """One op call: (out, lse)."""
    if softmax_scale is not None and type(softmax_scale) is not float:
        softmax_scale = float(softmax_scale)
    arg = _bundle_arg(bundle)
    if out is None:
        return _FWD(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale, bool(causal), num_splits, arg)
    lse = _FWD_OUT(q, k_cache, v_cache, cache_seqlens, page_table, out, softmax_scale, bool(causal), num_splits, arg)
    return out, lse


__all__ = ["kvcache_fwd", "kvcache_fwd_out", "call", "plain_eager"]
