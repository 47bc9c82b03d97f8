"""Ragged-batch numerics (tests, GPU and interpreter alike): the FA rule per sequence.

A ragged batch is checked as the dense problems it packs: sequence b's q rows cu_q[b] .. cu_q[b+1],
k and v rows cu_k[b] .. cu_k[b] + seqlen_k (seqused_k[b] when given), compared by
testing.compare_attention (FA rule against a float64 reference, rows that see no key exactly 0 and
+inf or the sink, no NaN). Rows of out and lse that belong to no sequence (the packed tensors' tail
past cu_q[-1]) must keep what they held: callers poison them with NaN and `untouched` says whether
they still are. With score_mod / mask_mod, compare_varlen_scored applies the functions' torch twins
per sequence (batch the sequence, q_idx / kv_idx positions in it: attention_fwd_sm90_varlen's note
[varlen-mod-indices]); sequence_bias, sequence_document and packed_bias are functions whose values
depend on that convention.
"""
from __future__ import annotations

from .kernels.common.score_mod import fma
from .testing import DEFAULT_ATOL, compare_attention, fa_rule


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


# ---- score_mod / mask_mod on ragged batches ---------------------------------------------------------
# Functions that read batch (the sequence) and absolute q_idx / kv_idx: packed rows in their place
# would give other values, so these check the convention [varlen-mod-indices] (ALiBi and the
# relative bias, which see only kv_idx - q_idx, would not tell).
def sequence_bias(score, batch, head, q_idx, kv_idx, aux_tensors):
    """score + qb[batch, q_idx] * kb[batch, kv_idx]; aux_tensors = [qb float32 [batch, max_seqlen_q],
    kb float32 [batch, max_seqlen_k]]."""
    return fma(aux_tensors[0][batch, q_idx], aux_tensors[1][batch, kv_idx], score)


def sequence_document(batch, head, q_idx, kv_idx, aux_tensors):
    """Document masking inside each sequence: doc[batch, q_idx] == doc[batch, kv_idx]; doc int32
    [batch, n] the LAST of aux_tensors (n >= every sequence's lengths)."""
    doc = aux_tensors[-1]
    return doc[batch, q_idx].eq(doc[batch, kv_idx])


def packed_bias(score, batch, head, q_idx, kv_idx, aux_tensors):
    """The packed-position recipe: score + bias[cu_seqlens_q[batch] + q_idx] (the row's packed
    index); aux_tensors = [cu_seqlens_q int32 [batch + 1], bias float32 [total_q]]."""
    return score + aux_tensors[1][aux_tensors[0][batch] + q_idx]


VARLEN_SCORE_MODS = {"sequence_bias": sequence_bias, "packed_bias": packed_bias}
VARLEN_MASK_MODS = {"sequence_document": sequence_document}


def varlen_mods(score: str, mask: str, cap: float = 2.0):
    """(score_mod, mask_mod) ScoreMods (or None) of a ragged case: built-ins by name (testing_score_mod's
    names, "softcap" as softcap_score_mod(cap)) or VARLEN_SCORE_MODS / VARLEN_MASK_MODS."""
    from .kernels.common import score_mod as sm
    score_fn = {**sm.BUILTIN_SCORE_MODS, **VARLEN_SCORE_MODS}.get(score)
    mod = sm.softcap_score_mod(cap) if score == "softcap" else sm.ScoreMod(score_fn) if score else None
    mask_fn = {**sm.BUILTIN_MASK_MODS, **VARLEN_MASK_MODS}.get(mask)
    return mod, sm.ScoreMod(mask_fn, kind="mask") if mask else None


def varlen_aux(score: str, mask: str, seqlens_q, seqlens_k, heads: int, seed: int = 0) -> list:
    """A ragged case's aux tensors (numpy), in the functions' order: ALiBi slopes [heads], a
    relative-bias table [heads, 63], sequence_bias's qb [batch, max_q] and kb [batch, max_k] (0.5
    std), packed_bias's cu_seqlens_q and bias [total_q]; then the mask's document ids, runs of 5..40
    positions: [n] for document_mask (shared by the sequences), [batch, n] for sequence_document."""
    import numpy as np
    rng = np.random.default_rng(seed + 11)
    batch, n_q, n_k = len(seqlens_q), max(max(seqlens_q), 1), max(max(seqlens_k), 1)
    out = []
    if score == "alibi":
        out.append(np.array([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], np.float32))
    elif score == "relative_bias":
        out.append((0.5 * rng.standard_normal((heads, 63))).astype(np.float32))
    elif score == "sequence_bias":
        out += [(0.5 * rng.standard_normal((batch, n))).astype(np.float32) for n in (n_q, n_k)]
    elif score == "packed_bias":
        out += [np.concatenate([[0], np.cumsum(seqlens_q)]).astype(np.int32),
                rng.standard_normal(max(sum(seqlens_q), 1)).astype(np.float32)]

    def ids(n):
        doc, got = 0, []
        while len(got) < n:
            got += [doc] * int(rng.integers(5, 41))
            doc += 1
        return got[:n]
    if mask == "document_mask":
        out.append(np.array(ids(max(n_q, n_k)), np.int32))
    elif mask == "sequence_document":
        out.append(np.array([ids(max(n_q, n_k)) for _ in range(batch)], np.int32))
    return out


def varlen_torch_mods(score: str, mask: str, aux: list, cu_seqlens_q, cap: float = 2.0):
    """The torch twins of a ragged case's functions (built-ins by name, as testing_score_mod, or
    VARLEN_SCORE_MODS / VARLEN_MASK_MODS): fns(b) -> (score_fn or None, mask_fn or None) on sequence
    b's [1, H, sq, sk] scores, each of (s or None, h, qi, kv) index grids (positions in the sequence)."""
    import torch
    aux = [torch.as_tensor(a) for a in aux]
    cq = [int(x) for x in cu_seqlens_q]

    def fns(b):
        score_fn = mask_fn = None
        if score == "alibi":
            score_fn = lambda s, h, qi, kv: s + aux[0].to(s.dtype)[h] * (kv - qi).to(s.dtype)   # noqa: E731
        elif score == "relative_bias":
            t, half = aux[0], (aux[0].shape[1] - 1) // 2
            score_fn = lambda s, h, qi, kv: s + t.to(s.dtype)[h, (kv - qi + half).clamp(0, t.shape[1] - 1)]  # noqa: E731
        elif score == "softcap":
            score_fn = lambda s, h, qi, kv: cap * torch.tanh(s / cap)   # noqa: E731
        elif score == "sequence_bias":
            score_fn = lambda s, h, qi, kv: s + aux[0].to(s.dtype)[b, qi] * aux[1].to(s.dtype)[b, kv]   # noqa: E731
        elif score == "packed_bias":
            score_fn = lambda s, h, qi, kv: s + aux[1].to(s.dtype)[cq[b] + qi]   # noqa: E731
        if mask == "document_mask":
            doc = aux[-1].long()
            mask_fn = lambda h, qi, kv: doc[qi] == doc[kv]   # noqa: E731
        elif mask == "sequence_document":
            doc = aux[-1].long()
            mask_fn = lambda h, qi, kv: doc[b, qi] == doc[b, kv]   # noqa: E731
        return score_fn, mask_fn
    return fns


def compare_varlen_scored(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal: bool, fns, *,
                          atol: float = DEFAULT_ATOL) -> dict:
    """The FA rule over a ragged batch with score_mod / mask_mod: sequence b against float64
    attention with fns(b)'s functions (testing_score_mod.scored_attention; positions within the
    sequence), PyTorch's own error at q.dtype the yardstick, taken over all sequences; rows that see
    no key out 0 and lse +inf; no NaN; rows past cu_q[-1] untouched (NaN). CPU tensors."""
    import torch

    from .testing_score_mod import scored_attention
    seqs = sequences(cu_seqlens_q, cu_seqlens_k)
    out_err = low_err = lse_err = lse_low = 0.0
    masked_ok, nan_out, nan_lse = True, 0, 0
    for b, (q0, nq, k0, nk) in enumerate(seqs):
        if nq == 0:
            continue
        sl, kl = slice(q0, q0 + nq), slice(k0, k0 + nk)
        got_o, got_l = out[sl][None], lse[:, sl][None]
        nan_out, nan_lse = nan_out + int(torch.isnan(got_o).sum()), nan_lse + int(torch.isnan(got_l).sum())
        args = (q[sl][None], k[kl][None], v[kl][None], softmax_scale, causal, *fns(b))
        ref_o, ref_l = scored_attention(*args, torch.float64)
        low_o, low_l = scored_attention(*args, q.dtype)
        rows = torch.isfinite(ref_l)          # [1, H, sq]
        if rows.any():
            per_row = lambda x: (x.transpose(1, 2).double() - ref_o.transpose(1, 2)).abs().amax(-1)[rows].max().item()  # noqa: E731
            out_err, low_err = max(out_err, per_row(got_o)), max(low_err, per_row(low_o))
            lse_err = max(lse_err, (got_l.double() - ref_l).abs()[rows].max().item())
            lse_low = max(lse_low, (low_l.double() - ref_l).abs()[rows].max().item())
        masked_ok = masked_ok and bool((got_o.transpose(1, 2)[~rows] == 0).all()) and bool(
            torch.isposinf(got_l[~rows]).all())
    ok_out, bound = fa_rule(out_err, low_err, atol)
    ok_lse, lse_bound = fa_rule(lse_err, lse_low, atol)
    end = seqs[-1][0] + seqs[-1][1] if seqs else 0
    untouched = bool(torch.isnan(out[end:].float()).all()) and bool(torch.isnan(lse[:, end:]).all())
    return {"max_err": out_err, "torch_err": low_err, "bound": bound, "lse_err": lse_err, "lse_bound": lse_bound,
            "masked_ok": masked_ok, "nan_out": nan_out, "nan_lse": nan_lse, "untouched": untouched,
            "ok": ok_out and ok_lse and masked_ok and nan_out == 0 and nan_lse == 0 and untouched}


__all__ = ["sequences", "compare_varlen", "compare_varlen_scored", "varlen_mods", "varlen_aux", "varlen_torch_mods", "sequence_bias",
           "sequence_document", "packed_bias", "VARLEN_SCORE_MODS", "VARLEN_MASK_MODS"]
