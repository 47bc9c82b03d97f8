"""The float reference of absorbed MLA decode (flash_mla_with_kvcache's contract; MLIR-free, for the
interpreter and GPU tests): one latent KV head of 576 columns per token in a paged pool
[num_pages, page_size, 1, 576], K = the whole row, V = its first ``head_dim_v`` columns; sequence b
attends to its first L_b = clamp(cache_seqlens[b], 0, max_pages x page_size) tokens, causal aligned
bottom-right (query token t sees keys < L_b - (seqlen_q - 1 - t)); a row that sees no key gets
out 0 and LSE +inf. Out [batch, seqlen_q, heads, head_dim_v], LSE [batch, heads, seqlen_q]."""
from __future__ import annotations

import numpy as np

from .testing import FaTally, attention_math


def gather_rows(kv_cache, block_table, length: int, b: int):
    """Sequence b's first ``length`` cache rows [length, 576] (torch, kv_cache's dtype)."""
    page_size = kv_cache.shape[1]
    t = np.arange(length)
    pages = np.asarray(block_table[b])[t // page_size]
    return kv_cache[pages, t % page_size, 0]


def check_mla(q, kv_cache, block_table, cache_seqlens, out, lse, *, head_dim_v: int = 512,
              softmax_scale: float | None = None, causal: bool = False) -> dict:
    """The FA rule for a flash_mla_with_kvcache result (CPU torch tensors; q and kv_cache in bf16 or
    f16), sequence by sequence, against the float64 reference, PyTorch's own low-precision math
    giving the bound; rows that see no key must be exactly 0 with LSE +inf; no NaN anywhere.
    Returns the tally's errors (asserts)."""
    import torch
    batch, seqlen_q, heads, d = q.shape
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    capacity = block_table.shape[1] * kv_cache.shape[1]
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    tally = FaTally()
    for b in range(batch):
        n = int(min(max(int(cache_seqlens[b]), 0), capacity))
        rows = gather_rows(kv_cache, block_table, n, b)[None, :, None, :]       # [1, n, 1, 576]
        args = (q[b:b + 1], rows, rows[..., :head_dim_v], scale, causal)
        ref_o, ref_l = attention_math(*args, torch.float64)
        low_o, low_l = attention_math(*args, q.dtype)
        o, lo = out[b:b + 1].double(), lse[b:b + 1].double()
        seen = torch.isfinite(ref_l)                                          # [1, H, Sq]
        empty = ~seen
        assert (o.transpose(1, 2)[empty] == 0).all() and torch.isposinf(lo[empty]).all(), b
        if seen.any():
            sel = seen.transpose(1, 2)                                        # [1, Sq, H]
            tally.add(o[sel], low_o.double()[sel], ref_o[sel], lo[seen], low_l.double()[seen], ref_l[seen])
    return tally.check()


__all__ = ["gather_rows", "check_mla"]
