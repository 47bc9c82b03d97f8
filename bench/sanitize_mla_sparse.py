"""bench/sanitize.py's sparse MLA prefill cases (MLIR-free): attention_mla_sparse_sm90 (the mla set's eight
entries, MLASparseConfig(topk_length=, sinks=) each off and on, over a bf16 kv and (kv_dtype "fp8") over
FlashMLA's FP8 rows: the same bf16 kv quantized by testing_mla.quantize_fp8_cache, NaN rows giving NaN bytes
and scales, checked over its dequantized rows) through flash_mla_sparse_fwd.

Family: the kernel (topk_length and sinks add a tensor the kernel reads, inside one protocol); features
(sparse_features): the dtype and, when set, `sparse-topk_length`, `sparse-sinks`, `sparse-fp8`, `sparse-seesaw`
and `sparse-pwg` (the bf16 default is SPARSE_DEFAULT_RULE's seesaw with the producer warpgroup; the child sets
FA4MLIR_MLA_SPARSE_VARIANT and _PRODUCER to each case kernel's: sparse_knobs).

Every call: SHAPES (s_q 4 and 5, h_q 64 and 128: one and two CTAs per token, topk 128 and 256: two and
four gathered tiles, s_kv not a multiple of 64 and below topk once), fresh inputs (`sparse_inputs`):
each token's entries a shuffled mix of valid rows with duplicates, out-of-range entries (s_kv, 2^31 - 1,
negative) and a tail of -1 padding, one token with every entry invalid; kv NaN in every row no entry
names (so a row read without an entry naming it shows); with topk_length, one token's 0, one shorter
than topk, one past topk (clamped); with sinks, finite ones of either sign, -inf and +inf. out,
max_logits and lse are allocated inside flash_mla_sparse_fwd: the child makes torch.empty return
NaN-filled tensors for the call (sanitize_mla.nan_empty), so anything not written shows. Each result:
testing_mla.check_mla_sparse (the FA rule against float64 for out, lse and max_logits; a token with no
valid entry out 0, lse +inf, max_logits -inf; no NaN). Before each call the child checks that the call
runs the case's kernel (the config of mla_sparse.check_sparse_inputs' problem, as the call builds it).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import replace

import numpy as np

from bench.sanitize_mla import nan_empty
from fa4mlir.kernels import attention_mla_sparse_sm90_config as sc

# the kernel fields beyond topk_length and sinks: SPARSE_DEFAULT_RULE's bf16 kernel (the seesaw step in FlashMLA's
# pair-fill order with the next pair's S_a under P_b V, the producer warpgroup), the mla set's A/B kernels (the pair
# fill without the overlap, the rule before [D-mla-sparse-overlap-default]; the seesaw in tile order with the producer
# warpgroup, the rule before [D-mla-sparse-pairfill-default]; the tile step with the gather warp or the producer
# warpgroup), FP8 rows
PAIR_FILL = {"producer_warps": 4, "seesaw": True, "pair_fill": True}
RULE, TILE, TILE_PWG, FP8 = {**PAIR_FILL, "overlap_s": True}, {}, {"producer_warps": 4}, {"kv_dtype": "fp8"}
SEESAW_PWG = {"producer_warps": 4, "seesaw": True}
BOTH = ((False, False), (True, True))
ONE = ((True, False), (False, True))
# (case name, (topk_length, sinks, fields) of its kernels, quick): every sparse entry of the mla set is one case's
CASES = (
    ("mla-sparse", tuple((t, s, RULE) for t, s in BOTH), True),
    ("mla-sparse-topklen-or-sinks", tuple((t, s, RULE) for t, s in ONE), False),
    ("mla-sparse-pairfill", tuple((t, s, PAIR_FILL) for t, s in BOTH + ONE), False),
    ("mla-sparse-seesaw-pwg", tuple((t, s, SEESAW_PWG) for t, s in BOTH + ONE), False),
    ("mla-sparse-tile", tuple((t, s, TILE) for t, s in BOTH + ONE), False),
    ("mla-sparse-tile-pwg", tuple((t, s, TILE_PWG) for t, s in BOTH + ONE), False),
    ("mla-sparse-fp8", tuple((t, s, FP8) for t, s in BOTH + ONE), False),
)
SHAPES = ((4, 64, 128, 90), (5, 128, 256, 1000))    # (s_q, h_q, topk, s_kv)
ALL_INVALID = 1            # the token whose entries are all invalid
INVALID = (-1, -123456, -2**31, 2**31 - 1)           # and s_kv itself


def matches(flags) -> tuple[dict, ...]:
    return tuple(sc.MLASparseConfig("bf16", topk_length=t, sinks=s, **fields).key() for t, s, fields in flags)


@contextlib.contextmanager
def sparse_knobs(match: dict):
    """FA4MLIR_MLA_SPARSE_VARIANT and FA4MLIR_MLA_SPARSE_PRODUCER naming the kernel of ``match`` (a config key:
    its seesaw and producer_warps) inside, restored after: the host reads them per call."""
    from fa4mlir.attention.mla_sparse import VARIANT_ENV
    warps = match.get("producer_warps", 1)
    knobs = {VARIANT_ENV: pair_fill_variant(match) if match.get("pair_fill") else sc.SEESAW_VARIANT if match.get("seesaw")
             else sc.TILE_VARIANT,
             sc.PRODUCER_ENV: "warp" if warps == 1 else "warpgroup"}
    before = {k: os.environ.get(k) for k in knobs}
    os.environ.update(knobs)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def pair_fill_variant(match: dict) -> str:
    """The SPARSE_VARIANTS name of a pair-fill kernel's config key (its overlap_s)."""
    return sc.OVERLAP_VARIANT if match.get("overlap_s") else sc.PAIR_FILL_VARIANT


def sparse_family(config: dict) -> str:
    return sc.KERNEL


def sparse_features(config: dict) -> set[str]:
    return {f"sparse-{config['dtype']}", *(f"sparse-{k}" for k in ("topk_length", "sinks") if config[k]),
            *(["sparse-fp8"] if config.get("kv_dtype") == "fp8" else []),
            *(["sparse-seesaw"] if config.get("seesaw") else []),
            *(["sparse-pwg"] if config.get("producer_warps", 1) != 1 else [])}


def describe(case) -> list[str]:
    return [f"s_q {sq}, h_q {h}, topk {k}, s_kv {skv}{', FP8 kv' if m.get('kv_dtype') == 'fp8' else ''}"
            f"{', topk_length' if m['topk_length'] else ''}"
            f"{', sinks' if m['sinks'] else ''} via flash_mla_sparse_fwd" for m in case.match for sq, h, k, skv in SHAPES]


def sparse_inputs(s_q: int, topk: int, s_kv: int, topk_length: bool, sinks_on: bool, heads: int, seed: int):
    """numpy (indices [s_q, 1, topk] int32, the kv rows any entry names, topk_length [s_q] int32 or None,
    sinks [heads] float32 or None): module docstring."""
    rng = np.random.default_rng(seed)
    idx = np.empty((s_q, 1, topk), np.int32)
    for t in range(s_q):
        pad = rng.integers(1, topk // 4)                          # the -1 tail
        row = rng.integers(0, s_kv, topk)
        bad = rng.random(topk) < 0.15
        row[bad] = rng.choice([*INVALID, s_kv], int(bad.sum()))
        row[rng.choice(np.flatnonzero(~bad[:topk - pad]), 4)] = row[~bad][0]      # duplicates
        row[topk - pad:] = -1
        idx[t, 0] = -1 if t == ALL_INVALID else rng.permutation(row[:topk - pad]).tolist() + [-1] * pad
    named = np.unique(idx[(idx >= 0) & (idx < s_kv)])
    lens = None
    if topk_length:
        lens = rng.integers(1, topk + 1, s_q).astype(np.int32)
        lens[0], lens[2], lens[3] = 0, topk // 3, topk + 40
    sinks = None
    if sinks_on:
        sinks = (rng.standard_normal(heads) * 3).astype(np.float32)
        sinks[:4] = (3.0, -3.0, -np.inf, np.inf)
    return idx, named, lens, sinks


def child_mla_sparse(case, bundle, seed: int):
    """Each of the case's kernels on each of SHAPES through flash_mla_sparse_fwd (module docstring); one
    SANITIZE-RESULT per call."""
    import torch

    from bench import sanitize as san
    from fa4mlir.attention import mla_sparse
    from fa4mlir.attention.checks import read_tensor
    from fa4mlir.testing_mla import check_mla_sparse, dequantize_fp8_cache, quantize_fp8_cache

    device, i = san.DEVICE, 0
    for match in case.match:
        name = san.find(bundle, case, match).name           # LookupError unless the bundle holds it
        for s_q, heads, topk, s_kv in SHAPES:
            s, i = seed + i, i + 1
            idx, named, lens, sinks = sparse_inputs(s_q, topk, s_kv, match["topk_length"], match["sinks"], heads, s)
            g = torch.Generator().manual_seed(s)
            q = torch.randn(s_q, heads, sc.D_QK, generator=g).to(torch.bfloat16)
            kv = torch.full((s_kv, 1, sc.D_QK), san.NAN)
            kv[torch.from_numpy(named).long()] = torch.randn(len(named), 1, sc.D_QK, generator=g)
            kv = kv.to(torch.bfloat16)
            fp8 = match.get("kv_dtype") == "fp8"
            if fp8:
                kv = quantize_fp8_cache(kv.view(s_kv, 1, 1, sc.D_QK)).view(s_kv, 1, sc.FP8_ROW_BYTES)
            scale = sc.D_QK ** -0.5
            args = [x.to(device) for x in (q, kv, torch.from_numpy(idx))]
            kw = {"attn_sink": None if sinks is None else torch.from_numpy(sinks).to(device),
                  "topk_length": None if lens is None else torch.from_numpy(lens).to(device)}
            infos = [read_tensor(n, x, mla_sparse.ENTRY) if x is not None else None
                     for n, x in zip(("q", "kv", "indices", "attn_sink", "topk_length"), [*args, *kw.values()])]
            with sparse_knobs(match):
                problem = mla_sparse.check_sparse_inputs(*infos[:3], scale, sc.D_V, *infos[3:])
                got = replace(problem, variant=mla_sparse.requested_variant()).config.key()
                if got != match:
                    raise RuntimeError(f"flash_mla_sparse_fwd would run {got} for the case's {match} at "
                                       f"{(s_q, heads, topk, s_kv)}")
                with nan_empty(torch):
                    out, max_logits, lse = mla_sparse.flash_mla_sparse_fwd(*args, scale, sc.D_V, bundle=bundle, **kw)
            torch.cuda.synchronize()
            out_c, m_c, lse_c = out.cpu().float(), max_logits.cpu(), lse.cpu()
            r = {"nan_out": int(torch.isnan(out_c).sum()), "nan_lse": int(torch.isnan(lse_c).sum())}
            try:
                rows = dequantize_fp8_cache(kv.view(s_kv, 1, 1, -1)).view(s_kv, 1, sc.D_QK) if fp8 else kv
                errs = check_mla_sparse(q, rows, idx, out_c, m_c, lse_c, scale,
                                        sinks=None if sinks is None else torch.from_numpy(sinks), topk_length=lens)
                r.update(ok=True, max_err=errs["out"], lse_err=errs["lse"], max_logits_err=errs["max_logits"])
            except AssertionError as exc:
                r.update(ok=False, error=str(exc)[:300])
            yield {"kernel": name, "shape": [s_q, heads, topk, s_kv], "topk_length": lens is not None,
                   "sinks": sinks is not None, "fp8": fp8, "via": "flash_mla_sparse_fwd", "seed": s, **r}
