"""score_mod / mask_mod test support (MLIR-free: the GPU tests import it): the built-in examples'
torch twins, their aux tensors, the cases the interpreter and the GPU run, and the FA rule against a
float reference that applies the same functions (kernels/common/score_mod.py).

A case's kernel is default_config's with the case's fingerprints (a kernel of the `score-mods`
bundle set, kernel_sets.py); `case_mods(case)` gives (score_mod, mask_mod, aux_tensors) for
flash_attn_func and `torch_mods(case)` the twins for the reference.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .kernels.common import score_mod as sm
from .testing import DEFAULT_ATOL, fa_rule


@dataclass(frozen=True)
class ModCase:
    name: str
    score: str = ""            # a BUILTIN_SCORE_MODS key, or "softcap"
    mask: str = ""             # a BUILTIN_MASK_MODS key
    dtype: str = "bf16"
    head_dim: int = 64
    causal: bool = False
    seqlen_q: int = 150
    seqlen_k: int = 300
    heads: int = 2
    kv_heads: int = 1
    cap: float = 2.0           # the softcap case's cap


# small shapes: ragged tails, two or more KV blocks, GQA; document mask with seqlen_q == seqlen_k
CASES = [
    ModCase("alibi-d64", score="alibi"),
    ModCase("alibi-d128-causal", score="alibi", head_dim=128, causal=True, seqlen_q=200, seqlen_k=260),
    ModCase("relbias-d64", score="relative_bias", seqlen_q=130, seqlen_k=200),
    ModCase("docmask-d128", mask="document_mask", head_dim=128, seqlen_q=260, seqlen_k=260),
    ModCase("docmask-alibi-d64-causal", score="alibi", mask="document_mask", causal=True, seqlen_q=200,
            seqlen_k=200),
    ModCase("softcap-d64", score="softcap", cap=2.0),
    ModCase("softcap-d128-causal", score="softcap", head_dim=128, causal=True, cap=3.0,
            seqlen_q=140, seqlen_k=200),
]
BY_NAME = {c.name: c for c in CASES}
REL_BIAS_SIZE = 63   # offsets -31 .. 31


def aux_arrays(case: ModCase, seed: int = 0) -> list:
    """The case's aux tensors as numpy arrays: ALiBi slopes [heads] (the geometric ones of the paper),
    a relative-bias table [heads, 63] (normal, 0.5 std), document ids [seqlen] (runs of 37..90)."""
    rng = np.random.default_rng(seed + 7)
    out = []
    if case.score == "alibi":
        out.append(np.array([2.0 ** (-8.0 * (h + 1) / case.heads) for h in range(case.heads)], np.float32))
    if case.score == "relative_bias":
        out.append((0.5 * rng.standard_normal((case.heads, REL_BIAS_SIZE))).astype(np.float32))
    if case.mask == "document_mask":
        ids, doc, n = [], 0, max(case.seqlen_q, case.seqlen_k)
        while len(ids) < n:
            ids += [doc] * int(rng.integers(37, 91))
            doc += 1
        out.append(np.array(ids[:n], np.int32))
    return out


def case_mods(case: ModCase):
    """(score_mod, mask_mod) for flash_attn_func / the kernel config: ScoreMods or None."""
    score = None
    if case.score == "softcap":
        score = sm.softcap_score_mod(case.cap)
    elif case.score:
        score = sm.ScoreMod(sm.BUILTIN_SCORE_MODS[case.score])
    mask = sm.ScoreMod(sm.BUILTIN_MASK_MODS[case.mask], kind="mask") if case.mask else None
    return score, mask


def case_config(case: ModCase):
    """The case's kernel config: default_config of its shape with its fingerprints and aux spec."""
    from .kernels.attention_sm90_config import default_config
    score, mask = case_mods(case)
    return default_config(case.dtype, case.head_dim, case.causal, None,
                          score_mod=score.fingerprint() if score else "",
                          mask_mod=mask.fingerprint() if mask else "", aux=case_aux_spec(case))


def case_aux_spec(case: ModCase) -> str:
    return sm.aux_spec([("f32" if a.dtype == np.float32 else "i32", a.ndim) for a in aux_arrays(case)])


def case_problem(case: ModCase):
    """The AttnProblem a direct launch of the case's kernel takes (launch_args)."""
    from dataclasses import replace

    from .attention.problem import AttnProblem
    d = case.head_dim
    score, mask = case_mods(case)
    problem = AttnProblem.of((1, case.seqlen_q, case.heads, d), (1, case.seqlen_k, case.kv_heads, d), case.dtype,
                             causal=case.causal)
    return replace(problem, score_mod=score.fingerprint() if score else "",
                   mask_mod=mask.fingerprint() if mask else "", aux=case_aux_spec(case),
                   aux_shapes=tuple(a.shape for a in aux_arrays(case)),
                   mod_scales=(score.pre_scale, score.post_scale) if score else (1.0, 1.0))


def torch_mods(case: ModCase, aux: list):
    """The torch twins of the case's functions on [B, H, Sq, Sk] scores: (score_fn or None, mask_fn
    or None), each of (s or None, h, qi, kv) index grids."""
    import torch
    score = mask = None
    if case.score == "alibi":
        slopes = torch.as_tensor(aux[0])
        score = lambda s, h, qi, kv: s + slopes.to(s.dtype)[h] * (kv - qi).to(s.dtype)   # noqa: E731
    elif case.score == "relative_bias":
        table = torch.as_tensor(aux[0])
        half = (table.shape[1] - 1) // 2
        score = lambda s, h, qi, kv: s + table.to(s.dtype)[h, (kv - qi + half).clamp(0, table.shape[1] - 1)]  # noqa: E731
    elif case.score == "softcap":
        score = lambda s, h, qi, kv: case.cap * torch.tanh(s / case.cap)   # noqa: E731
    if case.mask == "document_mask":
        doc = torch.as_tensor(aux[-1]).long()
        mask = lambda h, qi, kv: doc[qi] == doc[kv]   # noqa: E731
    return score, mask


def scored_attention(q, k, v, scale: float, causal: bool, score_fn, mask_fn, compute_dtype):
    """Plain attention in compute_dtype with the functions applied to the scaled scores, then the
    masks (FlexAttention's order). Returns out [B, Sq, H, D], lse [B, H, Sq]; rows that see no key:
    out 0, lse +inf."""
    import torch
    heads, kv_heads, sq, sk = q.shape[2], k.shape[2], q.shape[1], k.shape[1]
    qc = q.to(compute_dtype).transpose(1, 2)
    kc = k.to(compute_dtype).repeat_interleave(heads // kv_heads, dim=2).transpose(1, 2)
    vc = v.to(compute_dtype).repeat_interleave(heads // kv_heads, dim=2).transpose(1, 2)
    s = (qc @ kc.transpose(-1, -2)) * scale
    h = torch.arange(heads)[None, :, None, None]
    qi = torch.arange(sq)[None, None, :, None]
    kv = torch.arange(sk)[None, None, None, :]
    if score_fn is not None:
        s = score_fn(s, h, qi, kv).to(compute_dtype)
    seen = torch.ones(s.shape, dtype=torch.bool)
    if mask_fn is not None:
        seen = seen & mask_fn(h, qi, kv)
    if causal:
        seen = seen & (kv <= qi + sk - sq)
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isneginf(lse)
    p = torch.softmax(s, dim=-1).masked_fill(empty[..., None], 0)
    return (p @ vc).transpose(1, 2), lse.masked_fill(empty, float("inf"))


def compare_scored(case: ModCase, q, k, v, out, lse, aux: list, atol: float = DEFAULT_ATOL) -> dict:
    """The FA rule on out and lse (rows that see a key) against float64, with PyTorch's own error at
    q.dtype as the yardstick; rows that see no key must give out 0, lse +inf; no NaN anywhere. CPU
    tensors."""
    import torch
    q, k, v, out, lse = (x.cpu() for x in (q, k, v, out, lse))
    scale = case.head_dim ** -0.5
    score_fn, mask_fn = torch_mods(case, aux)
    ref_out, ref_lse = scored_attention(q, k, v, scale, case.causal, score_fn, mask_fn, torch.float64)
    low_out, low_lse = scored_attention(q, k, v, scale, case.causal, score_fn, mask_fn, q.dtype)
    rows = torch.isfinite(ref_lse)          # [B, H, Sq]: rows that see a key

    def err(x, ref):
        d = (x.double() - ref.double()).abs()
        return d[rows].max().item() if rows.any() else 0.0

    out_rows = lambda x: x.transpose(1, 2)   # noqa: E731  [B, H, Sq, D]
    out_err = (out_rows(out).double() - out_rows(ref_out)).abs().amax(-1)[rows].max().item() if rows.any() else 0.0
    low_err = (out_rows(low_out).double() - out_rows(ref_out)).abs().amax(-1)[rows].max().item() if rows.any() else 0.0
    lse_err, lse_low = err(lse, ref_lse), err(low_lse, ref_lse)
    ok_out, bound = fa_rule(out_err, low_err, atol)
    ok_lse, lse_bound = fa_rule(lse_err, lse_low, atol)
    masked_ok = bool((out_rows(out)[~rows] == 0).all()) and bool(torch.isposinf(lse[~rows]).all())
    nans = int(torch.isnan(out).sum()) + int(torch.isnan(lse).sum())
    return {"case": case.name, "max_err": out_err, "torch_err": low_err, "bound": bound, "lse_err": lse_err,
            "lse_bound": lse_bound, "masked_rows": int((~rows).sum()), "masked_ok": masked_ok, "nan": nans,
            "ok": ok_out and ok_lse and masked_ok and nans == 0 and not math.isnan(out_err)}


__all__ = ["ModCase", "CASES", "case_config", "case_problem", "case_aux_spec", "BY_NAME", "aux_arrays", "case_mods", "torch_mods", "scored_attention",
           "compare_scored", "REL_BIAS_SIZE"]
