"""Test support for the KV-cache operand (MLIR-free, numpy; torch CPU tensors accepted): the
float64/float32 reference of flash_attn_with_kvcache over a contiguous or paged, bf16/f16 or FP8
cache, the e4m3 codec, and the split-KV combine.

The reference follows the kernel contract of ``attention/kvcache.py`` step by step, so a GPU test
can compare a kernel against it on the same data:

1. clamp each length: ``cache_seqlens[b]`` to [0, capacity - seqlen_new];
2. append the new k/v (when given) at tokens ``cache_seqlens[b] ..`` of sequence b, through the
   page table, into copies of the caches (returned, to compare with the kernel's in-place writes);
3. gather each sequence's ``L_b = cache_seqlens[b] + seqlen_new`` rows by its page table (entries
   clamped into [0, num_pages)); nothing past L_b is read, so NaN there cannot reach the output;
4. dequantise an FP8 cache as the kernel does: ``float32(e4m3) * float32(scale)`` with the scale of
   the token's granularity (tensor, KV head, or page / token block and KV head), in float32, then
   widened to the compute dtype (a kernel that rounds the product to bf16 adds that rounding to its
   low-precision error, which the FA rule's PyTorch computation should then do too);
5. attention per sequence in ``compute_dtype`` (float64 by default), causal, window_size and
   attention_chunk aligned bottom-right per sequence (common.mask_family), softcap (s -> cap
   tanh(s / cap), before the mask) and sinks (one more logit per query head in the denominator, no
   value); rows that see no key: O = 0, LSE = +inf (LSE = the head's sink with sinks).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .kernels.common.decode_schedule import ceil_div, split_range
from .kernels.common.mask_family import IntOps, attention_mask, row_keys

E4M3_MAX = 448.0


def _e4m3_table() -> np.ndarray:
    """float32 value of every e4m3fn code (sign, 4 exponent bits of bias 7, 3 mantissa bits; no
    infinities, S.1111.111 is NaN)."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp, man = (codes >> 3) & 0xF, codes & 0x7
    value = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    value = sign * value
    value[(codes & 0x7F) == 0x7F] = np.nan
    return value.astype(np.float32)


E4M3_VALUES = _e4m3_table()


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """uint8 e4m3fn codes -> float32 values."""
    return E4M3_VALUES[np.asarray(codes, dtype=np.uint8)]


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """float values -> the nearest e4m3fn codes (ties to the even code, i.e. even mantissa),
    saturating to +-448; NaN -> the NaN code. For building test data."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.arange(256)[np.isfinite(E4M3_VALUES) & ((np.arange(256) & 0x80) == 0)]   # 0..126, ascending
    pos = E4M3_VALUES[finite].astype(np.float64)
    mag = np.minimum(np.abs(np.nan_to_num(x)), E4M3_MAX)
    hi = np.clip(np.searchsorted(pos, mag), 0, len(pos) - 1)
    lo = np.clip(hi - 1, 0, len(pos) - 1)
    d_lo, d_hi = mag - pos[lo], pos[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (finite[hi] % 2 == 0))
    code = np.where(pick_hi, finite[hi], finite[lo]).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


# ----------------------------------------------------------------------------------------------
# torch CPU tensors in, torch out
# ----------------------------------------------------------------------------------------------

def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _np(x: Any) -> np.ndarray | None:
    """numpy of an array or CPU torch tensor; an FP8 torch tensor as its uint8 codes."""
    if x is None:
        return None
    if _is_torch(x):
        import torch
        x = x.detach().cpu()
        if x.dtype == torch.float8_e4m3fn:
            return x.view(torch.uint8).numpy()
        if x.dtype in (torch.bfloat16, torch.float16):
            x = x.float()
        return x.numpy()
    return np.asarray(x)


# ----------------------------------------------------------------------------------------------
# The reference
# ----------------------------------------------------------------------------------------------

def _token_scales(scale: np.ndarray | None, b: int, pages: np.ndarray | None, tokens: np.ndarray, kv_heads: int,
                  page_size: int, capacity: int) -> np.ndarray | None:
    """float32 [L, kv_heads]: the scale each gathered token's row is multiplied by."""
    if scale is None:
        return None
    s = np.asarray(scale, dtype=np.float32)
    n = len(tokens)
    if s.size == 1:                                     # per tensor
        return np.full((n, kv_heads), s.reshape(-1)[0], np.float32)
    if s.shape == (kv_heads,):                          # per KV head
        return np.broadcast_to(s, (n, kv_heads))
    if pages is not None:                               # paged: per (page, KV head)
        return s[pages[tokens // page_size]]
    block = capacity // s.shape[1]                      # contiguous: per (token block, KV head)
    return s[b, tokens // block]


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool, window_size=(-1, -1),
            attention_chunk: int = 0, softcap: float = 0.0, sinks=None) -> tuple[np.ndarray, np.ndarray]:
    """q [Sq, H, D], k/v [L, Hkv, D] -> out [Sq, H, D], lse [H, Sq]; the mask of (causal,
    window_size, attention_chunk) bottom-right, softcap, sinks [H] (module docstring, step 5)."""
    sq, heads, _ = q.shape
    length, kv_heads = k.shape[0], k.shape[1]
    group = heads // kv_heads
    kh = np.repeat(k, group, axis=1).transpose(1, 0, 2)                  # [H, L, D]
    vh = np.repeat(v, group, axis=1).transpose(1, 0, 2)
    s = np.einsum("qhd,hkd->hqk", q, kh) * scale                          # [H, Sq, L]
    if softcap:
        s = softcap * np.tanh(s / softcap)
    mask = attention_mask(causal, tuple(window_size), attention_chunk)
    j = np.arange(length)[None, :]
    bounds = np.array([row_keys(mask, i, sq, length, IntOps) for i in range(sq)]).reshape(sq, 2)
    s = np.where((j < bounds[:, :1]) | (j >= bounds[:, 1:]), -np.inf, s)
    m = s.max(axis=-1, initial=-np.inf)
    sink = None
    if sinks is not None:
        sink = np.asarray(sinks, dtype=s.dtype)[:, None]                  # [H, 1]
        m = np.maximum(m, sink)
    seen = np.isfinite(m)
    p = np.exp(s - np.where(seen, m, 0)[..., None])
    denom = p.sum(axis=-1)
    if sink is not None:
        denom = denom + np.exp(sink - np.where(seen, m, 0))
    lse = np.where(seen, m + np.log(np.where(seen, denom, 1)), np.inf)
    out = np.einsum("hqk,hkd->qhd", p / np.where(seen, denom, 1)[..., None], vh)
    return out, lse


def kvcache_reference(q, k_cache, v_cache, cache_seqlens, page_table=None, *, k=None, v=None, softmax_scale=None,
                      causal: bool = True, k_scale=None, v_scale=None, fp8: bool | None = None,
                      compute_dtype=np.float64, window_size=(-1, -1), attention_chunk: int = 0, softcap: float = 0.0,
                      sinks=None) -> dict:
    """flash_attn_with_kvcache by the kernel contract (module docstring). Arrays: numpy or CPU torch;
    an FP8 cache is a torch float8_e4m3fn tensor or uint8 codes (``fp8`` None: uint8 means FP8).
    Returns {"out" [B, Sq, H, D], "lse" [B, H, Sq], "k_cache", "v_cache" (after the append, the
    input's dtype: codes for FP8), "seqlens_k" (L_b, int)}; torch tensors when q is one."""
    as_torch = _is_torch(q)
    qn = _np(q).astype(compute_dtype)
    kc, vc = _np(k_cache).copy(), _np(v_cache).copy()
    fp8 = kc.dtype == np.uint8 if fp8 is None else fp8
    lens = _np(cache_seqlens).astype(np.int64)
    table = None if page_table is None else _np(page_table).astype(np.int64)
    kn, vn = _np(k), _np(v)
    batch, _, heads, head_dim = qn.shape
    kv_heads = kc.shape[2]
    scale = head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
    if table is None:
        page_size, capacity = kc.shape[1], kc.shape[1]
    else:
        page_size = kc.shape[1]
        capacity = table.shape[1] * page_size
    seqlen_new = 0 if kn is None else kn.shape[1]
    num_pages = kc.shape[0]

    out = np.zeros(qn.shape, compute_dtype)
    lse = np.full((batch, heads, qn.shape[1]), np.inf, compute_dtype)
    seqlens_k = []
    for b in range(batch):
        start = int(np.clip(lens[b], 0, capacity - seqlen_new))                     # 1. clamp
        length = start + seqlen_new
        seqlens_k.append(length)
        tokens = np.arange(length)
        pages = None if table is None else np.clip(table[b], 0, num_pages - 1)
        if table is None:
            where = (np.full(length, b), tokens)
        else:
            where = (pages[tokens // page_size], tokens % page_size)
        if seqlen_new:                                                               # 2. append
            new = (where[0][start:], where[1][start:])
            kc[new], vc[new] = kn[b], vn[b]
        k_rows, v_rows = kc[where], vc[where]                                        # 3. gather
        if fp8:                                                                      # 4. dequantise
            ks = _token_scales(_np(k_scale), b, pages, tokens, kv_heads, page_size, capacity)
            vs = _token_scales(_np(v_scale), b, pages, tokens, kv_heads, page_size, capacity)
            k_rows = e4m3_decode(k_rows) * ks[..., None]
            v_rows = e4m3_decode(v_rows) * vs[..., None]
        o_b, lse_b = _attend(qn[b], k_rows.astype(compute_dtype), v_rows.astype(compute_dtype), scale, causal,
                             window_size, attention_chunk, softcap, None if sinks is None else _np(sinks))
        out[b], lse[b] = o_b, lse_b                                                  # 5. attend
    result = {"out": out, "lse": lse, "k_cache": kc, "v_cache": vc, "seqlens_k": seqlens_k}
    if as_torch:
        import torch
        result.update(out=torch.from_numpy(out), lse=torch.from_numpy(lse))
        for name, src in (("k_cache", k_cache), ("v_cache", v_cache)):
            t = torch.from_numpy(result[name])
            result[name] = t.view(torch.float8_e4m3fn) if fp8 and _is_torch(src) else t.to(src.dtype) if _is_torch(src) else t
    return result


# ----------------------------------------------------------------------------------------------
# Split KV: partial results and their combine
# ----------------------------------------------------------------------------------------------

def combine_splits(o_partial, lse_partial, sinks=None) -> tuple[np.ndarray, np.ndarray]:
    """The combine kernel's math, on the plan's workspace layouts: o_partial [S, ..., Sq, H, D] (each
    split normalised by its own row sum), lse_partial [S, ..., H, Sq] (natural log; -inf, or +inf,
    for a split that saw no key) -> out [..., Sq, H, D], lse [..., H, Sq]. lse = log sum_s exp(lse_s)
    (max-shifted), out = sum_s exp(lse_s - lse) o_s summed in split order (deterministic); a split
    of weight 0 contributes nothing, whatever its o holds; rows no split saw: out 0, lse +inf.
    ``sinks`` [H] (the combine's sink variant): one more term exp(sinks[h]) of each row's sum, with
    no value (a row no split saw: out 0, lse = its sink)."""
    o = np.asarray(o_partial, dtype=np.float64)
    lp = np.swapaxes(np.asarray(lse_partial, dtype=np.float64), -1, -2)      # [S, ..., Sq, H]
    lp = np.where(np.isposinf(lp), -np.inf, lp)
    m = lp.max(axis=0)
    if sinks is not None:
        sink = np.asarray(sinks, dtype=np.float64)
        m = np.maximum(m, sink)
    seen = np.isfinite(m)
    m0 = np.where(seen, m, 0.0)
    w = np.exp(lp - m0)                                   # exp(-inf) = 0 for empty splits
    total = w.sum(axis=0) + (np.exp(sink - m0) if sinks is not None else 0.0)
    total = np.where(seen, total, 1.0)
    lse = np.where(seen, m0 + np.log(total), np.inf)
    out = np.zeros(o.shape[1:])
    for s in range(o.shape[0]):                           # split order: the kernel's order
        ws = (w[s] / total)[..., None]
        out = out + np.where(ws > 0, ws * o[s], 0.0)
    return out, np.swapaxes(lse, -1, -2)


def split_partials(q: np.ndarray, k: np.ndarray, v: np.ndarray, softmax_scale: float, causal: bool, num_splits: int,
                   bn: int) -> tuple[np.ndarray, np.ndarray]:
    """What the split kernel writes for one sequence: q [Sq, H, D], k/v [L, Hkv, D] -> o_partial
    [S, Sq, H, D], lse_partial [S, H, Sq] (-inf where a split saw no key), split s covering KV tiles
    decode_schedule.split_range(ceil(L / bn), S, s)."""
    sq, heads, d = q.shape
    length = k.shape[0]
    o_p = np.zeros((num_splits, sq, heads, d))
    lse_p = np.full((num_splits, heads, sq), -np.inf)
    n_tiles = ceil_div(length, bn)
    for s in range(num_splits):
        t0, t1 = split_range(n_tiles, num_splits, s)
        lo, hi = t0 * bn, min(t1 * bn, length)
        if lo >= hi:
            continue
        group = heads // k.shape[1]
        kh = np.repeat(k[lo:hi], group, axis=1).transpose(1, 0, 2)
        vh = np.repeat(v[lo:hi], group, axis=1).transpose(1, 0, 2)
        sc = np.einsum("qhd,hkd->hqk", q, kh) * softmax_scale
        if causal:
            i = np.arange(sq)[:, None]
            j = np.arange(lo, hi)[None, :]
            sc = np.where(j > i + length - sq, -np.inf, sc)   # the full length's mask, in any split
        m = sc.max(axis=-1)
        seen = np.isfinite(m)
        p = np.exp(sc - np.where(seen, m, 0)[..., None])
        den = p.sum(axis=-1)
        lse_p[s] = np.where(seen, m + np.log(np.where(seen, den, 1)), -np.inf)
        o_p[s] = np.einsum("hqk,hkd->qhd", p / np.where(seen, den, 1)[..., None], vh)
    return o_p, lse_p


__all__ = ["E4M3_MAX", "E4M3_VALUES", "e4m3_decode", "e4m3_encode", "kvcache_reference", "combine_splits",
           "split_partials"]
