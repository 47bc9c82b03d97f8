"""bench/sanitize.py's sparse MLA decode cases (MLIR-free): attention_mla_sparse_decode_sm90 (the mla set's
twelve entries, MLASparseDecodeConfig(dtype, kv_dtype=, topk_length=, split=)) through flash_mla_with_kvcache
with indices, the split ones with the head-dim-512 combine; the four over FlashMLA's FP8 cache
(kv_dtype "fp8") with is_fp8_kvcache=True, their cache the same bf16 latent quantized to 656-byte rows
(testing_mla.quantize_fp8_cache: NaN rows give NaN bytes and scales), checked over its dequantized rows,
in every FP8 variant (dc.FP8_DECODE_VARIANTS: the converter, FP8_DECODE_DEFAULT_RULE's, the gather kernel, and
the crossover and its hand-offs on CROSSOVER_SHAPES, 128 heads; FA4MLIR_MLA_SPARSE_FP8_VARIANT set to the case's
around its calls).

Family: the kernel and split or unsplit (the split writes partials another kernel reads); features
(sparse_decode_features): the dtype and, when set, `sparse-decode-topk_length` and `sparse-decode-fp8`.

Every call: SHAPES (batch 2 and 3, seqlen_q 1 and 2, heads 16 and 80: masked rows, one and two head
blocks, topk 128 and 256, pages of 64 and 61), the split count the entry asks for (1, or 3: one split
with no tile at topk 128), fresh inputs (sanitize_mla_sparse.sparse_inputs over the cache's rows, one
query row with every entry invalid; the cache NaN in every row no entry names; with topk_length, one
sequence's 0 and one past topk). out, lse and the partials are allocated inside the call from NaN-filled
torch.empty (sanitize_mla.nan_empty), so anything not written shows. Each result:
testing_mla.check_mla_sparse_decode (the FA rule against float64 for out and lse; a row with no valid
entry out 0, lse +inf; no NaN). Before each call the child checks the call runs the case's kernel.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from bench.sanitize_mla import nan_empty
from bench.sanitize_mla_sparse import PAIR_FILL, SEESAW_PWG, TILE, TILE_PWG, sparse_inputs, sparse_knobs
from bench.sanitize_mla_sparse import RULE as OVERLAP

RULE = PAIR_FILL        # SPARSE_DECODE_DEFAULT_RULE's bf16 kernel: the pair fill (the prefill's overlap is an A/B here)
from fa4mlir.kernels import attention_mla_sparse_sm90_config as dc

# (case name, (dtype, topk_length, split, fields | "fp8", fp8 variant) of its kernels, quick): every sparse decode
# entry of the mla set. fields: SPARSE_DECODE_DEFAULT_RULE's bf16 kernel (RULE: seesaw in pair-fill order, producer
# warpgroup), the same with the next pair's S_a under P_b V (OVERLAP: the prefill's rule, an A/B here), the seesaw in tile order with the producer warpgroup (SEESAW_PWG: the rule before), the tile
# step with the gather warp (TILE: the f16 default, bf16's A/B) or the producer warpgroup (TILE_PWG)
CASES = (
    ("mla-sparse-decode", (("bf16", False, False, RULE), ("bf16", True, True, RULE)), True),
    ("mla-sparse-decode-more", (("bf16", True, False, RULE), ("bf16", False, True, RULE), ("f16", False, False, TILE),
                                ("f16", True, False, TILE), ("f16", False, True, TILE), ("f16", True, True, TILE)), False),
    ("mla-sparse-decode-overlap", tuple(("bf16", t, s, OVERLAP) for t in (False, True) for s in (False, True)),
     False),
    ("mla-sparse-decode-seesaw-pwg", tuple(("bf16", t, s, SEESAW_PWG) for t in (False, True) for s in (False, True)),
     False),
    ("mla-sparse-decode-tile", tuple(("bf16", t, s, TILE) for t in (False, True) for s in (False, True)), False),
    ("mla-sparse-decode-tile-pwg", tuple(("bf16", t, s, TILE_PWG) for t in (False, True) for s in (False, True)), False),
    *((f"mla-sparse-decode-fp8{'' if v == dc.FP8_DECODE_DEFAULT_RULE else '-' + v}",
       tuple((*e, "fp8", v) for e in (("bf16", False, False), ("bf16", True, True), ("bf16", True, False),
                                      ("bf16", False, True))), False)
      for v in dc.FP8_DECODE_VARIANTS),
)
SHAPES = ((2, 2, 16, 128, 10, 64), (3, 1, 80, 256, 20, 61))    # (batch, seqlen_q, heads, topk, pages, page)
# the FP8 variant "crossover" (and its lean hand-offs, crossover_lean and crossover_stasync) is built for heads a
# multiple of 128 only (a cluster per token's two head blocks)
CROSSOVER_SHAPES = ((2, 2, 128, 128, 10, 64), (3, 1, 128, 256, 20, 61))


def shapes_of(match: dict) -> tuple:
    """The SHAPES a case's kernel runs: CROSSOVER_SHAPES for the FP8 variant "crossover", else SHAPES."""
    return CROSSOVER_SHAPES if match.get("crossover") else SHAPES
SPLITS = 3


def matches(entries) -> tuple[dict, ...]:
    return tuple((dc.fp8_decode_variant(dc.MLASparseDecodeConfig(d, "fp8", t, s), rest[1]) if rest[0] == "fp8" else
                  dc.MLASparseDecodeConfig(d, topk_length=t, split=s, **rest[0])).key() for d, t, s, *rest in entries)


def fp8_variant_of(match: dict) -> str:
    """The FP8_DECODE_VARIANTS name of an FP8 case's kernel (its key's FP8_VARIANT_FIELDS)."""
    fields = {f: bool(match.get(f)) for f in dc.FP8_VARIANT_FIELDS}
    return dc.fp8_decode_variant_name(dc.MLASparseDecodeConfig("bf16", kv_dtype="fp8", **fields))


@contextlib.contextmanager
def variant_knob(name: str | None):
    """FA4MLIR_MLA_SPARSE_FP8_VARIANT set to ``name`` inside (None: left as it is), restored after."""
    from fa4mlir.attention.mla_sparse_decode import VARIANT_ENV
    if name is None:
        yield
        return
    before = os.environ.get(VARIANT_ENV)
    os.environ[VARIANT_ENV] = name
    try:
        yield
    finally:
        if before is None:
            del os.environ[VARIANT_ENV]
        else:
            os.environ[VARIANT_ENV] = before


def sparse_decode_family(config: dict) -> str:
    return f"{dc.DECODE_KERNEL}/{'split' if config['split'] else 'unsplit'}"


def sparse_decode_features(config: dict) -> set[str]:
    return {f"sparse-decode-{config['dtype']}", *(["sparse-decode-topk_length"] if config["topk_length"] else []),
            *(["sparse-decode-fp8"] if config.get("kv_dtype") == "fp8" else []),
            *(["sparse-decode-seesaw"] if config.get("seesaw") else []),
            *(["sparse-decode-pwg"] if config.get("producer_warps", 1) != 1 else [])}


def describe(case) -> list[str]:
    return [f"batch {b}, seqlen_q {sq}, heads {h}, topk {k}, {p} pages of {ps}, {m['dtype']}"
            f"{f', FP8 cache, {fp8_variant_of(m)}' if m.get('kv_dtype') == 'fp8' else ''}"
            f"{', topk_length' if m['topk_length'] else ''}, {SPLITS if m['split'] else 1} split(s) via "
            f"flash_mla_with_kvcache(indices=)" for m in case.match for b, sq, h, k, p, ps in shapes_of(m)]


def child_mla_sparse_decode(case, bundle, seed: int):
    """Each of the case's kernels on each of SHAPES through flash_mla_with_kvcache with indices (module
    docstring); one SANITIZE-RESULT per call."""
    import torch

    from bench import sanitize as san
    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.attention.checks import read_tensor
    from fa4mlir.testing_mla import check_mla_sparse_decode, dequantize_fp8_cache, quantize_fp8_cache

    device, i = san.DEVICE, 0
    for match in case.match:
        name = san.find(bundle, case, match).name           # LookupError unless the bundle holds it
        tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[match["dtype"]]
        fp8 = match.get("kv_dtype") == "fp8"
        splits = SPLITS if match["split"] else 1
        for batch, seqlen_q, heads, topk, pages, page in shapes_of(match):
            s, i = seed + i, i + 1
            rows = batch * seqlen_q
            idx, named, lens, _ = sparse_inputs(max(rows, 4), topk, pages * page, False, False, heads, s)
            idx = idx[:rows].reshape(batch, seqlen_q, topk)
            if match["topk_length"]:
                lens = np.random.default_rng(s).integers(1, topk + 1, batch).astype(np.int32)
                lens[0], lens[-1] = 0, topk + 40
            g = torch.Generator().manual_seed(s)
            q = torch.randn(batch, seqlen_q, heads, dc.D_QK, generator=g).to(tdtype)
            cache = torch.full((pages * page, 1, dc.D_QK), san.NAN)
            cache[torch.from_numpy(named).long()] = torch.randn(len(named), 1, dc.D_QK, generator=g)
            cache = cache.to(tdtype).reshape(pages, page, 1, dc.D_QK)
            if fp8:
                cache = quantize_fp8_cache(cache)
            meta = torch.zeros((splits, 8), dtype=torch.int32, device=device)
            num_splits = torch.arange(batch + 1, dtype=torch.int32, device=device) * splits
            args = [x.to(device) for x in (q, cache, torch.from_numpy(np.ascontiguousarray(idx)))]
            length_t = None if lens is None else torch.from_numpy(lens).to(device)
            with variant_knob(fp8_variant_of(match) if fp8 else None), sparse_knobs(match):   # read per call
                infos = {n: read_tensor(n, x, sd.ENTRY) for n, x in (("q", args[0]), ("k_cache", args[1]),
                                                                      ("indices", args[2]), ("meta", meta),
                                                                      ("num_splits", num_splits))}
                problem = sd.check_sparse_decode_inputs(infos["q"], infos["k_cache"], infos["indices"], dc.D_V,
                                                        infos["meta"], infos["num_splits"],
                                                        topk_length=None if length_t is None else
                                                        read_tensor("topk_length", length_t, sd.ENTRY),
                                                        is_fp8_kvcache=fp8)
                got = problem.config(splits > 1).key()
                if got != match:
                    raise RuntimeError(f"flash_mla_with_kvcache would run {got} for the case's {match}")
                with nan_empty(torch):
                    out, lse = sd.sparse_decode(*args, dc.D_V, meta, num_splits, topk_length=length_t,
                                                is_fp8_kvcache=fp8, bundle=bundle)
            torch.cuda.synchronize()
            out_c, lse_c = out.cpu().float(), lse.cpu()
            r = {"nan_out": int(torch.isnan(out_c).sum()), "nan_lse": int(torch.isnan(lse_c).sum())}
            try:
                rows = dequantize_fp8_cache(cache) if fp8 else cache
                errs = check_mla_sparse_decode(q, rows, idx, out_c, lse_c, dc.D_QK ** -0.5, topk_length=lens)
                r.update(ok=True, max_err=errs["out"], lse_err=errs["lse"])
            except AssertionError as exc:
                r.update(ok=False, error=str(exc)[:300])
            yield {"kernel": name, "shape": [batch, seqlen_q, heads, topk, pages, page], "splits": splits,
                   "topk_length": lens is not None, "fp8": fp8,
                   "fp8_variant": fp8_variant_of(match) if fp8 else None, "via": "flash_mla_with_kvcache(indices=)", "seed": s, **r}
