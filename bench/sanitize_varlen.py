"""bench/sanitize.py's varlen cases (MLIR-free): the sm_90a attention kernel's ragged-batch variants
(AttnConfig.varlen, the attention-varlen set) through flash_attn_varlen_func.

Family: a varlen kernel is its own protocol (a 1-D grid in varlen_schedule's order, one tile per
CTA, CTAs past their sequence's end exiting before any barrier, the last warpgroup of a sequence
storing O and LSE row by row behind a predicate: kernels/attention_fwd_sm90_varlen.py), so
sanitize.family names it `attention_fwd_sm90/varlen/...` in place of persistent or tiled; its
dtypes, head dims, window, softcap and sinks are the dense kernel's features.

Every call packs BATCHES' sequences (lengths 0, 1, a query tile + 1, 64 and more; q longer and
shorter than k, so causal rows see no key; GQA and MQA) with SPARE rows of q, out and lse past
cu_seqlens_q[-1], draws fresh inputs (seeded, on the CPU), fills out and lse with NaN and checks
the result with testing_varlen.compare_varlen: the FA rule per sequence against the float64
reference, rows that see no key 0 and +inf (or the sink), no NaN, and the spare rows still NaN (a
store past a sequence's end into the next one is a wrong result, past total_q also memcheck's).
The score-modifier kernels run with softcap SOFTCAP, random sinks and seqused_k below some
sequences' key counts. A kernel with head_dim_v (MLA prefill's qk 192 / v 128) gets v and out
D_v wide. A kernel with compiled-in functions (kernel_sets.VARLEN_MOD_CASES, found by their
fingerprints) runs them with testing_varlen's aux tensors and is checked by compare_varlen_scored
(per sequence, on the CPU). Before each call the child checks that flash_attn_varlen_func picks the
case's kernel (varlen_config of the call's options). A compact-grid kernel (AttnConfig.varlen_compact:
`attention_fwd_sm90/varlen-compact/...`, its own family: its blocks find their sequence by a warp scan)
runs with FA4MLIR_VARLEN_GRID=compact, a persistent one (varlen_compact with persistent:
`attention_fwd_sm90/varlen-persistent/...`) with FA4MLIR_VARLEN_GRID=persistent.
"""
from __future__ import annotations

from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels import attention_sm90_config_varlen as acfg_varlen

SPARE = 5          # packed q / out / lse rows past the last sequence: they must stay NaN
SOFTCAP = 2.0


def batches(cfg: acfg.AttnConfig) -> tuple:
    """((seqlens_q, seqlens_k), heads, kv_heads) of each call: a tile + 1 rows (cfg.bm + 1) and
    keys (2 x bn + 1); empty and one-row sequences; q longer than k; GQA 2, then MQA 2."""
    t, kb = cfg.bm + 1, 2 * cfg.bn + 1
    return ((((0, 1, t, 64, 200), (5, 1, t, kb, 130)), 4, 2),
            (((t, 0, 17, 1), (70, 0, 16, kb)), 2, 1))


def seqused(cfg: acfg.AttnConfig, seqlens_k) -> tuple | None:
    """seqused_k of a score-modifier kernel's calls (the first keys of each slot, one sequence none)."""
    if not (cfg.softcap or cfg.sinks):
        return None
    return tuple(0 if i == 1 else max(n - 3 * (i % 2), 0) for i, n in enumerate(seqlens_k))


def describe(case) -> list[str]:
    out = []
    for match in case.match:
        cfg = acfg.AttnConfig.from_key(match)
        for (lq, lk), h, hk in batches(cfg):
            out.append(f"{cfg.dtype} D{cfg.head_dim}{' causal' if cfg.causal else ''} seqlens_q {list(lq)}, seqlens_k "
                       f"{list(lk)}, seqused_k {seqused(cfg, lk)}, heads {h}/{hk}, {SPARE} spare rows")
    return out


def options(cfg: acfg.AttnConfig, torch, heads: int, seed: int) -> dict:
    """flash_attn_varlen_func's (and compare_varlen's) window_size, attention_chunk, softcap and sinks of cfg."""
    window = (cfg.window_left, cfg.window_right)
    sinks = torch.randn(heads, generator=torch.Generator().manual_seed(seed)) if cfg.sinks else None
    return {**({"window_size": window} if window != (-1, -1) else {}),
            **({"attention_chunk": cfg.chunk} if cfg.chunk else {}),
            **({"softcap": SOFTCAP} if cfg.softcap else {}), **({"sinks": sinks} if cfg.sinks else {})}


def mod_case(cfg: acfg.AttnConfig):
    """The kernel_sets.VARLEN_MOD_CASES row of a kernel with compiled-in functions (None without)."""
    if not (cfg.score_mod or cfg.mask_mod):
        return None
    from fa4mlir.kernel_sets import VARLEN_MOD_CASES, varlen_mod_config
    rows = [c for c in VARLEN_MOD_CASES if varlen_mod_config(c) == cfg]
    if not rows:
        raise LookupError(f"no kernel_sets.VARLEN_MOD_CASES row builds {cfg.key()}")
    return rows[0]


def picked(cfg: acfg.AttnConfig, opts: dict) -> acfg.AttnConfig:
    """The kernel flash_attn_varlen_func runs for cfg's dtype, head dims, causal flag, functions and opts."""
    from fa4mlir.kernels.common.mask_family import attention_mask
    mask = attention_mask(cfg.causal, opts.get("window_size", (-1, -1)), opts.get("attention_chunk", 0))
    return acfg_varlen.varlen_config(cfg.dtype, cfg.head_dim, cfg.causal, None if mask.is_legacy else mask,
                              softcap=bool(opts.get("softcap")), sinks="sinks" in opts, head_dim_v=cfg.head_dim_v,
                              score_mod=cfg.score_mod, mask_mod=cfg.mask_mod, aux=cfg.aux, compact=cfg.varlen_compact,
                              persistent=cfg.persistent)


def grid_of(cfg: acfg.AttnConfig) -> str:
    """The FA4MLIR_VARLEN_GRID value that runs cfg's kernel."""
    return "persistent" if cfg.persistent else "compact" if cfg.varlen_compact else "sections"


def child_varlen(case, bundle, seed: int):
    """Each of the case's varlen kernels on each of its batches (module docstring); one
    SANITIZE-RESULT per call."""
    import torch

    from bench import sanitize as san
    from fa4mlir.attention import flash_attn_varlen_func
    from fa4mlir.bench.prefill_workloads import with_varlen_grid
    from fa4mlir.testing import torch_dtype
    from fa4mlir.testing_varlen import compare_varlen, compare_varlen_scored, varlen_aux, varlen_mods, varlen_torch_mods

    device, i = san.DEVICE, 0
    for match in case.match:
        cfg = acfg.AttnConfig.from_key(match)
        name = san.find(bundle, case, match).name      # LookupError unless the bundle holds it
        for (lq, lk), heads, kv_heads in batches(cfg):
            s = seed + i
            i += 1
            gen = torch.Generator().manual_seed(s)
            tq, tk, d, dt = sum(lq) + SPARE, sum(lk), cfg.head_dim, torch_dtype(cfg.dtype)
            q = torch.randn(tq, heads, d, generator=gen).to(dt).to(device)
            k = torch.randn(tk, kv_heads, d, generator=gen).to(dt).to(device)
            v = torch.randn(tk, kv_heads, cfg.dim_v, generator=gen).to(dt).to(device)
            cu_q, cu_k = (torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32).to(device)
                          for n in (lq, lk))
            used = seqused(cfg, lk)
            used_t = None if used is None else torch.tensor(used, dtype=torch.int32).to(device)
            opts = options(cfg, torch, heads, s + 1)
            if "sinks" in opts:
                opts["sinks"] = opts["sinks"].to(device)
            if picked(cfg, opts) != cfg:
                raise RuntimeError(f"flash_attn_varlen_func would run {picked(cfg, opts).key()}, not the case's "
                                   f"{name}")
            out = torch.full((tq, heads, cfg.dim_v), float("nan"), dtype=dt).to(device)
            lse = torch.full((heads, tq), float("nan"), dtype=torch.float32).to(device)
            row = mod_case(cfg)
            if row is not None:   # compiled-in functions: their aux tensors, the scored reference
                score, mask = row[3], row[4]
                aux = varlen_aux(score, mask, lq, lk, heads, s)
                score_mod, mask_mod = varlen_mods(score, mask)
                opts.update(score_mod=score_mod, mask_mod=mask_mod,
                            aux_tensors=[torch.from_numpy(a).to(device) for a in aux])
            call = with_varlen_grid(lambda: flash_attn_varlen_func(   # noqa: B023 (called at once)
                q, k, v, cu_q, cu_k, max(lq), max(lk), seqused_k=used_t, causal=cfg.causal, out=out, lse=lse,
                return_lse=True, bundle=bundle, **opts), grid_of(cfg))
            call()
            torch.cuda.synchronize()
            if row is not None:
                r = compare_varlen_scored(*(x.cpu() for x in (q, k, v, out, lse, cu_q, cu_k)), d ** -0.5, cfg.causal,
                                          varlen_torch_mods(score, mask, aux, cu_q.cpu()))
                yield {"kernel": name, "shape": [list(lq), list(lk), heads, kv_heads], "via": "flash_attn_varlen_func",
                       "seed": s, **r}
                continue
            r = compare_varlen(q, k, v, out, lse, cu_q, cu_k, d ** -0.5, cfg.causal, seqused_k=used_t, **opts)
            reps = [x for x in r["per_sequence"] if x is not None]
            yield {"kernel": name, "shape": [list(lq), list(lk), heads, kv_heads], "seqused_k": used,
                   "via": "flash_attn_varlen_func", "seed": s, "ok": r["ok"], "untouched": r["untouched"],
                   **{key: max(x[key] for x in reps) for key in ("max_err", "bound", "lse_err", "lse_bound",
                                                                  "nan_out", "nan_lse")},
                   "masked_ok": all(x["masked_ok"] for x in reps)}
