"""The float reference of absorbed MLA decode (flash_mla_with_kvcache's contract; MLIR-free, for the
interpreter and GPU tests): one latent KV head of 576 columns per token in a paged pool
[num_pages, page_size, 1, 576], K = the whole row, V = its first ``head_dim_v`` columns; sequence b
attends to its first L_b = clamp(cache_seqlens[b], 0, max_pages x page_size) tokens, causal aligned
bottom-right (query token t sees keys < L_b - (seqlen_q - 1 - t)); a row that sees no key gets
out 0 and LSE +inf. Out [batch, seqlen_q, heads, head_dim_v], LSE [batch, heads, seqlen_q]."""
from __future__ import annotations

import numpy as np

from .testing import FaTally, attention_math, fa_rule


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


FP8_TILE = 128          # latent columns per scale (FlashMLA's V32 FP8 layout)
FP8_ROW_BYTES = 656     # 512 e4m3 + 4 float32 scales + 64 bf16


def quantize_fp8_cache(kv):
    """FlashMLA's quantize_k_cache (tests/quant.py, V32 layout) of a bf16 latent cache [num_pages,
    page_size, 1, 576]: float8_e4m3fn [num_pages, page_size, 1, 656], each token's 512 latent
    columns divided by its group's scale (amax / 448 rounded up to a power of two, at least 1e-4:
    FlashMLA's ue8m0 cast) and cast to e4m3, the four float32 scales, the 64 rope columns as bf16.
    Rows holding a NaN quantize to NaN bytes and scales (what a real cache's unused rows may hold)."""
    import torch
    n, page, heads, d = kv.shape
    assert heads == 1 and d == 576 and kv.dtype == torch.bfloat16
    rows = kv.reshape(n, page, d)
    out = torch.zeros((n, page, FP8_ROW_BYTES), dtype=torch.uint8, device=kv.device)
    scales = out[..., 512:528].view(torch.float32)
    out[..., 528:] = rows[..., 512:].contiguous().view(torch.uint8)
    for g in range(512 // FP8_TILE):
        cols = rows[..., g * FP8_TILE:(g + 1) * FP8_TILE].float()
        inv = cols.abs().amax(dim=-1) / 448.0
        inv = torch.pow(2, torch.clamp_min(inv, 1e-4).log2().ceil())
        scales[..., g] = inv
        q8 = (cols / inv[..., None]).to(torch.float8_e4m3fn)
        out[..., g * FP8_TILE:(g + 1) * FP8_TILE] = q8.view(torch.uint8)
    return out.view(torch.float8_e4m3fn).view(n, page, 1, FP8_ROW_BYTES)


def dequantize_fp8_cache(cache):
    """FlashMLA's dequantize_k_cache (V32 layout), exactly as the kernel does it (common/mla_fp8.py):
    bf16(float32(e4m3) x float32 scale) per 128-column group, the rope copied: bf16 [num_pages,
    page_size, 1, 576]."""
    import torch
    n, page, heads, width = cache.shape
    assert heads == 1 and width == FP8_ROW_BYTES
    raw = cache.reshape(n, page, width).view(torch.uint8)
    out = torch.empty((n, page, 576), dtype=torch.bfloat16, device=cache.device)
    out[..., 512:] = raw[..., 528:].contiguous().view(torch.bfloat16)
    scales = raw[..., 512:528].contiguous().view(torch.float32)
    for g in range(512 // FP8_TILE):
        cols = raw[..., g * FP8_TILE:(g + 1) * FP8_TILE].contiguous().view(torch.float8_e4m3fn).float()
        out[..., g * FP8_TILE:(g + 1) * FP8_TILE] = (cols * scales[..., g:g + 1]).to(torch.bfloat16)
    return out.view(n, page, 1, 576)


def sparse_reference(q, kv, indices, softmax_scale: float, compute_dtype, *, d_v: int = 512, sinks=None,
                     topk_length=None):
    """flash_mla_sparse_fwd's definition (FlashMLA tests/ref.py ref_sparse_attn_fwd) with every step
    in ``compute_dtype`` (float64: the reference; q.dtype: PyTorch's own low-precision math). q [s_q,
    h_q, 576], kv [s_kv, 1, 576], indices [s_q, 1, topk]; an entry is invalid when negative, >= s_kv
    or at or past topk_length[i]; invalid rows read as zeros (the kernel's cp.async zero fill: a NaN in
    an unused KV row reaches nothing). Returns (out [s_q, h_q, d_v], max_logits [s_q, h_q] = the max
    scaled score, -inf for a token with no valid entry, lse [s_q, h_q] natural log, +inf for such a
    token); sinks [h_q] scale out by exp(lse) / (exp(lse) + exp(sink)) and change neither."""
    import torch
    s_q, _, topk = indices.shape
    s_kv = kv.shape[0]
    idx = torch.as_tensor(np.asarray(indices)).long().reshape(s_q, topk)
    invalid = (idx < 0) | (idx >= s_kv)
    if topk_length is not None:
        lens = torch.as_tensor(np.asarray(topk_length)).long()
        invalid |= torch.arange(topk)[None, :] >= lens[:, None]
    rows = kv[:, 0][idx.masked_fill(invalid, 0)].to(compute_dtype)                # [s_q, topk, 576]
    rows = rows.masked_fill(invalid[..., None], 0)
    scores = (q.to(compute_dtype) @ rows.transpose(1, 2)) * softmax_scale          # [s_q, h_q, topk]
    scores = scores.masked_fill(invalid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    max_logits = scores.max(dim=-1).values
    lse_for_o = lse
    if sinks is not None:
        sink = sinks.to(compute_dtype)[None, :].expand_as(lse)
        lse_for_o = torch.logsumexp(torch.stack([lse, sink]), dim=0)
    lse_for_o = lse_for_o.masked_fill(lse_for_o == float("-inf"), float("inf"))
    out = torch.exp(scores - lse_for_o[..., None]) @ rows[..., :d_v]
    return out, max_logits, lse.masked_fill(lse == float("-inf"), float("inf"))


def check_mla_sparse(q, kv, indices, out, max_logits, lse, softmax_scale: float, *, sinks=None,
                     topk_length=None) -> dict:
    """The FA rule for a flash_mla_sparse_fwd result (CPU torch tensors) against the float64
    sparse_reference, PyTorch's own low-precision math giving the bound, for out, lse and
    max_logits; a token with no valid entry must give out exactly 0, lse +inf and max_logits -inf
    (sinks or not); no NaN anywhere. Returns the errors (asserts)."""
    import torch
    assert not torch.isnan(out).any() and not torch.isnan(lse).any() and not torch.isnan(max_logits).any()
    kw = dict(sinks=sinks, topk_length=topk_length)
    ref_o, ref_m, ref_l = sparse_reference(q, kv, indices, softmax_scale, torch.float64, **kw)
    low_o, low_m, low_l = sparse_reference(q, kv, indices, softmax_scale, q.dtype, **kw)
    o, m, lo = out.double(), max_logits.double(), lse.double()
    empty = torch.isposinf(ref_l)                                                  # [s_q, h_q]
    assert (o[empty] == 0).all() and torch.isposinf(lo[empty]).all() and torch.isneginf(m[empty]).all()
    seen = ~empty
    assert seen.any(), "no token has a valid entry: nothing to check by the FA rule"
    tally = FaTally()
    tally.add(o[seen], low_o.double()[seen], ref_o[seen], lo[seen], low_l.double()[seen], ref_l[seen])
    errs = tally.check()
    errs["max_logits"] = (m[seen] - ref_m[seen]).abs().max().item()
    errs["max_logits_lowp"] = (low_m.double()[seen] - ref_m[seen]).abs().max().item()
    ok, bound = fa_rule(errs["max_logits"], errs["max_logits_lowp"])
    assert ok, {**errs, "max_logits_bound": bound}
    return errs


def check_mla_sparse_decode(q, k_cache, indices, out, lse, softmax_scale: float, *, topk_length=None) -> dict:
    """The FA rule for a sparse flash_mla_with_kvcache result (CPU torch tensors) against the float64
    sparse_reference of the same rows: q [b, s_q, h, 576], k_cache [pages, page_size, 1, 576] viewed
    as [pages x page_size, 1, 576] (FlashMLA's indices name its rows: page x page_size + offset),
    indices [b, s_q, topk], topk_length [b] (host), out [b, s_q, h, 512], lse [b, h, s_q]. A query row
    with no valid entry must give out exactly 0 and lse +inf; no NaN anywhere. Returns the errors."""
    import torch
    b, s_q, h, d = q.shape
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    q2, kv = q.reshape(b * s_q, h, d), k_cache.reshape(-1, 1, d)
    idx = np.asarray(indices).reshape(b * s_q, 1, -1)
    lens = None if topk_length is None else np.repeat(np.asarray(topk_length), s_q)
    ref_o, _, ref_l = sparse_reference(q2, kv, idx, softmax_scale, torch.float64, topk_length=lens)
    low_o, _, low_l = sparse_reference(q2, kv, idx, softmax_scale, q.dtype, topk_length=lens)
    o = out.double().reshape(b * s_q, h, -1)
    lo = lse.double().transpose(1, 2).reshape(b * s_q, h)
    empty = torch.isposinf(ref_l)
    assert (o[empty] == 0).all() and torch.isposinf(lo[empty]).all()
    seen = ~empty
    assert seen.any(), "no query row has a valid entry: nothing to check by the FA rule"
    tally = FaTally()
    tally.add(o[seen], low_o.double()[seen], ref_o[seen], lo[seen], low_l.double()[seen], ref_l[seen])
    return tally.check()


__all__ = ["gather_rows", "check_mla", "quantize_fp8_cache", "dequantize_fp8_cache", "sparse_reference", "check_mla_sparse",
           "check_mla_sparse_decode"]
