"""bench/sanitize.py's score_mod / mask_mod cases (MLIR-free): the sm_90a attention kernel with compiled-in
functions (the `score-mods` set: fa4mlir/testing_score_mod.py CASES, ALiBi, a relative-position bias
table, the document mask alone and with ALiBi, softcap as a score_mod) through flash_attn_func(...,
score_mod=, mask_mod=, aux_tensors=).

Family: the dense kernel's (the functions change the code inside one protocol); features
(mod_features): each function by its fingerprint's name and each aux tensor by its position, dtype and
rank (`aux0-f32x2`: the relative bias table; an aux tensor is a kernel parameter of its own, read by
indexed loads whose indices the kernel clamps into it: memcheck must see them).

Every call: SHAPES (ragged lengths, not multiples of any tile; GQA 2 square; MQA with seqlen_q <
seqlen_k; seqlen_q > seqlen_k, where causal rows and rows whose document starts past the last key see
no key), fresh inputs, the case's aux tensors for that shape (testing_score_mod.aux_arrays: ALiBi slopes
[heads], a bias table [heads, 63] whose offsets the shapes run past at both ends, document ids
[max(seqlen_q, seqlen_k)]), each its own allocation of exactly that size (the parent turns torch's
caching allocator off), out and lse filled with NaN; the result against testing_score_mod.compare_scored
(the FA rule against float64 with the same functions, rows that see no key 0 and +inf, no NaN).
Before each call the child checks that flash_attn_func runs the case's kernel (default_config of the
call's fingerprints and aux spec, as attention.plan.select asks, and the entry find_artifact takes).
"""
from __future__ import annotations

from dataclasses import replace

from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.testing_score_mod import BY_NAME, case_config

# (case name, testing_score_mod.CASES of its kernels, quick): every score-mods kernel is one case's
CASES = (
    ("scoremod-docmask-alibi-d64-causal", ("docmask-alibi-d64-causal",), True),   # both functions, two aux
    ("scoremod-alibi-relbias-d64", ("alibi-d64", "relbias-d64"), False),
    ("scoremod-alibi-d128-causal", ("alibi-d128-causal",), False),                # persistent
    ("scoremod-docmask-d128", ("docmask-d128",), False),                          # a mask_mod alone, i32 aux
    ("scoremod-softcap", ("softcap-d64", "softcap-d128-causal"), False),          # no aux
)
# (batch, seqlen_q, seqlen_k, heads, kv_heads): as sanitize.ATTN_SHAPES
SHAPES = ((2, 300, 300, 4, 2), (1, 200, 520, 2, 1), (1, 520, 130, 2, 2))


def matches(names) -> tuple[dict, ...]:
    """The config keys of testing_score_mod.CASES `names`' kernels (kernel_sets.score_mods' entries)."""
    return tuple(case_config(BY_NAME[n]).key() for n in names)


def mod_case(match: dict):
    """The testing_score_mod case whose kernel `match` is."""
    hits = [c for c in BY_NAME.values() if case_config(c).key() == match]
    if not hits:
        raise LookupError(f"no testing_score_mod case has the kernel {match}")
    return hits[0]


def mod_features(config: dict) -> set[str]:
    """score_mod-NAME and mask_mod-NAME (the fingerprint's name: each function compiles to its own
    code), aux{i}-{dtype}x{rank} of each aux tensor."""
    out = {f"{k}-{config[k].rpartition('_')[0]}" for k in ("score_mod", "mask_mod") if config.get(k)}
    return out | {f"aux{i}-{spec}" for i, spec in enumerate(filter(None, config.get("aux", "").split(",")))}


def describe(case) -> list[str]:
    return [f"{mod_case(m).name} {s} via flash_attn_func" for m in case.match for s in SHAPES]


def picked(cfg: acfg.AttnConfig, seqlen_k: int, score_mod, mask_mod, aux) -> acfg.AttnConfig:
    """The kernel flash_attn_func runs for cfg's dtype, head dim and causal flag with these functions
    and aux tensors (checks.check_mods' fingerprints and aux spec) at seqlen_k."""
    from fa4mlir.attention.checks import check_mods
    fields, _ = check_mods(score_mod, mask_mod, aux or None, 0.0)
    return acfg.default_config(cfg.dtype, cfg.head_dim, cfg.causal, seqlen_k, score_mod=fields["score_mod"],
                               mask_mod=fields["mask_mod"], aux=fields["aux"])


def child_scoremod(case, bundle, seed: int):
    """Each of the case's kernels on each of SHAPES (module docstring); one SANITIZE-RESULT per call."""
    import torch

    from bench import sanitize as san
    from fa4mlir.attention import find_artifact, flash_attn_func
    from fa4mlir.testing import attention_inputs
    from fa4mlir.testing_score_mod import aux_arrays, case_mods, compare_scored

    i = 0
    for match in case.match:
        cfg, base = acfg.AttnConfig.from_key(match), mod_case(match)
        name = san.find(bundle, case, match).name      # LookupError unless the bundle holds it
        for b, sq, sk, h, hk in SHAPES:
            s, i = seed + i, i + 1
            mc = replace(base, seqlen_q=sq, seqlen_k=sk, heads=h, kv_heads=hk)
            q, k, v = attention_inputs(b, sq, sk, h, hk, cfg.head_dim, cfg.dtype, s)
            aux_np = aux_arrays(mc, s)
            aux = [torch.from_numpy(a).to(q.device) for a in aux_np]
            score_mod, mask_mod = case_mods(mc)
            want = picked(cfg, sk, score_mod, mask_mod, aux)
            art = find_artifact(bundle, cfg.dtype, cfg.head_dim, cfg.causal, sk, default=want)
            if want != cfg or art.name != name:
                raise RuntimeError(f"flash_attn_func would run {art.name} ({want.key()}) at {(b, sq, sk, h, hk)}, "
                                   f"not the case's {name}")
            out = torch.full_like(q, san.NAN)
            lse = torch.full((b, h, sq), san.NAN, device=q.device, dtype=torch.float32)
            flash_attn_func(q, k, v, causal=cfg.causal, score_mod=score_mod, mask_mod=mask_mod, aux_tensors=aux or None,
                            out=out, lse=lse, bundle=bundle)
            torch.cuda.synchronize()
            r = compare_scored(mc, q, k, v, out, lse, aux_np)
            yield {"kernel": name, "mod_case": base.name, "shape": (b, sq, sk, h, hk),
                   "aux": [list(a.shape) for a in aux_np], "via": "flash_attn_func", "seed": s,
                   "nan_out": int(torch.isnan(out).sum()),
                   **{key: r[key] for key in ("ok", "max_err", "bound", "lse_err", "lse_bound", "masked_rows",
                                              "masked_ok", "nan")}}
