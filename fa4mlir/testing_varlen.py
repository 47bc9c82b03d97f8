"""Ragged-batch numerics (tests, GPU and interpreter alike): the FA rule per sequence.

A ragged batch is checked as the dense problems it packs: sequence b's q rows cu_q[b] .. cu_q[b+1],
k and v rows cu_k[b] .. cu_k[b] + seqlen_k (seqused_k[b] when given), compared by
testing.compare_attention (FA rule against a float64 reference, rows that see no key exactly 0 and
+inf or the sink, no NaN). Rows of out and lse that belong to no sequence (the packed tensors' tail
past cu_q[-1]) must keep what they held: callers poison them with NaN and `untouched` says whether
they still are.
"""
from __future__ import annotations

from .testing import compare_attention


def sequences(cu_seqlens_q, cu_seqlens_k, seqused_k=None) -> list[tuple[int, int, int, int]]:
    """(q_start, q_len, k_start, k_len) per sequence, from host copies of the int32 tensors."""
    cq, ck = [int(x) for x in cu_seqlens_q], [int(x) for x in cu_seqlens_k]
    used = None if seqused_k is None else [int(x) for x in seqused_k]
    return [(cq[b], cq[b + 1] - cq[b], ck[b], (ck[b + 1] - ck[b]) if used is None else used[b])
            for b in range(len(cq) - 1)]


def compare_varlen(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, softmax_scale=None, causal: bool = False, *,
                   seqused_k=None, window_size=(-1, -1), attention_chunk: int = 0, softcap: float = 0.0,
                   sinks=None) -> dict:
    """compare_attention per sequence of packed q [total_q, H, D], k, v [total_k, Hkv, D], out like
    q and lse float32 [H, total_q] (FlashAttention-3/4's varlen layout); compared on their device
    (cu_seqlens and seqused_k are read back to the host). Returns {'ok', 'per_sequence': [report or
    None for an empty one], 'untouched': rows past cu_q[-1] still NaN}."""
    import torch
    seqs = sequences(cu_seqlens_q.cpu(), cu_seqlens_k.cpu(), None if seqused_k is None else seqused_k.cpu())
    reports, ok = [], True
    for q0, nq, k0, nk in seqs:
        if nq == 0:
            reports.append(None)
            continue
        sl = slice(q0, q0 + nq)
        rep = compare_attention(q[sl][None], k[k0:k0 + nk][None], v[k0:k0 + nk][None], out[sl][None],
                                lse[:, sl][None], softmax_scale, causal, window_size=window_size,
                                attention_chunk=attention_chunk, softcap=softcap, sinks=sinks)
        reports.append(rep)
        ok = ok and rep["ok"]
    end = seqs[-1][0] + seqs[-1][1] if seqs else 0
    untouched = bool(torch.isnan(out[end:].float()).all().item()) and bool(torch.isnan(lse[:, end:]).all().item())
    return {"ok": ok and untouched, "per_sequence": reports, "untouched": untouched}


__all__ = ["sequences", "compare_varlen"]
