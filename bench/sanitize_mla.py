"""bench/sanitize.py's MLA cases (MLIR-free): the absorbed MLA decode kernel (attention_mla_decode_sm90,
the mla set) and its head-dim-512 combine, through get_mla_metadata and flash_mla_with_kvcache.

Family of the MLA kernel: split (float32 partials for the combine) or unsplit (out and lse
itself), and the FP8 cache, swap AB (its ring of chunk stages) or the seesaw; its features: the dtype
and the TMA box rows (64: one box per page of 64, 16: pages of 16); the FP8-latent-cache kernels
(is_fp8_kvcache) a family of their own (`/fp8`) and the feature mla-fp8: their cache is the same
bf16 latent quantized to FlashMLA's 656-byte rows (testing_mla.quantize_fp8_cache; NaN rows give
NaN bytes and scales), checked over its dequantized rows. The combine's feature is its
head dim (sanitize_decode.decode_features), so the 512 one needs this module's combine case.

Every call: a latent cache [num_pages, page, 1, 576] with spare pages, a shuffled block table
(unused slots -1 or garbage, which the kernel clamps), NaN in every row no sequence owns; lengths
sanitize_decode.lengths_for(page) (0, 1, page - 1, page + 1, 3 pages + 5, 201); MLA_SHAPES (seqlen_q
1 with 16 heads, one M tile; seqlen_q 2 with 48 heads: 96 packed rows, a ragged second M tile),
causal (bottom-right: seqlen_q 2 over length 1 leaves a row without keys); these run the M64 kernel
(FA4MLIR_MLA_DECODE_VARIANT=m64). DEFAULT_RULE's swap-AB kernels (family `/swapab`) run by the rule on
SWAP_AB_SHAPES instead: per N a full tile (16 heads) and a padded one. The split kernel runs
with get_mla_metadata's split count on the first shape and SPLITS forced on the second (both > 1,
most splits of a short sequence empty: the combine must weigh them 0); the unsplit one with one
split. out, lse and the split partials are allocated inside flash_mla_with_kvcache: the child
makes torch.empty return NaN-filled tensors for the call (`nan_empty`), so anything not written
shows. Each result: testing_mla.check_mla (the FA rule per sequence against float64, rows
without keys 0 and +inf, no NaN). Before each call the child checks that the call runs the case's kernel (mla.configs_for of its problem).
"""
from __future__ import annotations

import contextlib
import os

from bench.sanitize_decode import decode_inputs, lengths_for
from fa4mlir.kernels import attention_decode_sm90_config as dec
from fa4mlir.kernels import attention_mla_decode_sm90_config as mc

MLA_SHAPES = ((1, 16), (2, 48))     # (seqlen_q, heads)
# DEFAULT_RULE's swap-AB kernels (family `/swapab`) by N: a full tile and a padded one (seqlen_q, heads)
SWAP_AB_SHAPES = {8: ((1, 8), (1, 5)), 16: ((1, 16), (1, 9)), 24: ((1, 24), (3, 7)), 32: ((2, 16), (1, 25))}
SPLITS = 3


def mla_family(config: dict) -> str:
    return "/".join((mc.KERNEL, "unsplit" if config["unsplit"] else "split", *(["fp8"] if config.get("fp8") else []),
                     *(["swapab"] if config.get("swap_ab") else []), *(["ring"] if config.get("swap_ab_ring") else []),
                     *(["seesaw"] if config.get("seesaw") else [])))


def shapes_for(match: dict) -> tuple:
    """(seqlen_q, heads) of a case kernel's calls: MLA_SHAPES, or for a swap-AB kernel its SWAP_AB_SHAPES."""
    return SWAP_AB_SHAPES[match["swap_ab"]] if match.get("swap_ab") else MLA_SHAPES


def decode_variant(match: dict) -> str:
    """FA4MLIR_MLA_DECODE_VARIANT for a case kernel's calls: the rule for the ring of chunk stages (what the
    default path runs over bf16 pages of 64), swapab for the one-ring swap-AB kernel (the rule's elsewhere), m64
    for the others (the rule would pick swap AB at 16 heads, seqlen_q 1)."""
    if match.get("seesaw"):
        return mc.SEESAW_VARIANT
    if match.get("swap_ab_ring"):
        return mc.RULE_VARIANT
    return mc.SWAP_AB_VARIANT if match.get("swap_ab") else mc.M64_VARIANT


def mla_features(config: dict) -> set[str]:
    return {f"mla-{config['dtype']}", f"mla-box{config['box_rows']}", *(["mla-fp8"] if config.get("fp8") else [])}


def _calls(case):
    """(config dict of the case's kernel, num_splits (None: get_mla_metadata's), seqlen_q, heads) per call."""
    for match in case.match:
        for j, (sq, h) in enumerate(shapes_for(match)):
            splits = 1 if match.get("unsplit") else None if j == 0 else SPLITS
            yield match, splits, sq, h


def describe(case) -> list[str]:
    return [f"{m['dtype']} seqlen_q {sq}, heads {h}, lengths {lengths_for(case.page_size)}, page size "
            f"{case.page_size}, num_splits {splits or 'get_mla_metadata'}{_variant_text(m)}"
            for m, splits, sq, h in _calls(case)]


def _variant_text(match: dict) -> str:
    return f", {decode_variant(match)}" if decode_variant(match) != mc.M64_VARIANT else ""


@contextlib.contextmanager
def nan_empty(torch):
    """torch.empty of a floating dtype returns a NaN-filled tensor inside the block."""
    empty = torch.empty

    def poisoned(*args, **kw):
        x = empty(*args, **kw)
        return x.fill_(float("nan")) if x.is_floating_point() else x
    torch.empty = poisoned
    try:
        yield
    finally:
        torch.empty = empty


@contextlib.contextmanager
def variant(mla, decode: str = mc.RULE_VARIANT):
    """flash_mla_with_kvcache runs the `decode` variant (FA4MLIR_MLA_DECODE_VARIANT) inside the block (the
    call cache: a fresh mla.CallCache for the block, the module's own one and the environment back after)."""
    calls, before = mla._CALLS, os.environ.get(mla.VARIANT_ENV)
    mla._CALLS = mla.CallCache()
    os.environ[mla.VARIANT_ENV] = decode
    try:
        yield
    finally:
        mla._CALLS = calls
        if before is None:
            os.environ.pop(mla.VARIANT_ENV, None)
        else:
            os.environ[mla.VARIANT_ENV] = before


def child_mla(case, bundle, seed: int):
    """The case's MLA decode or combine kernels through flash_mla_with_kvcache (module docstring); one
    SANITIZE-RESULT per call."""
    import torch

    from bench import sanitize as san
    from fa4mlir.attention import mla
    from fa4mlir.testing_mla import check_mla, dequantize_fp8_cache, quantize_fp8_cache

    device, page = san.DEVICE, case.page_size
    for i, (match, splits, sq, heads) in enumerate(_calls(case)):
        s = seed + i
        lengths = lengths_for(page)
        t = decode_inputs(torch, device, lengths, sq, heads, 1, mc.D_QK, match["dtype"], page, s)
        q, table, seqlens = t["q"], t["page_table"], t["cache_seqlens"]
        fp8 = bool(match.get("fp8"))
        kv = t["k_cache"].to(q.dtype).to(device)
        if fp8:
            kv = quantize_fp8_cache(kv)
        if splits is None:
            meta, num_splits = mla.get_mla_metadata(seqlens, sq * heads, 1)
        else:
            meta = torch.zeros((splits, mla.TILE_SCHEDULER_METADATA_SIZE), dtype=torch.int32).to(device)
            num_splits = (torch.arange(len(lengths) + 1, dtype=torch.int32) * splits).to(device)
        n = meta.shape[0]
        problem = mla.MLAProblem(len(lengths), sq, heads, kv.shape[0], page, table.shape[1], match["dtype"], n,
                                 mc.D_QK ** -0.5, True, fp8, decode_variant(match))
        with variant(mla, decode_variant(match)):
            cfg, combine = mla.configs_for(problem)
            got = (cfg if case.kernel == mc.KERNEL else combine)
            if got is None or got.key() != match:
                raise RuntimeError(f"flash_mla_with_kvcache would run {got and got.key()} for the case's {match} "
                                   f"(page size {page}, {n} splits)")
            name = san.find(bundle, case, match).name
            with nan_empty(torch):
                out, lse = mla.flash_mla_with_kvcache(q, kv, table, seqlens, mc.D_V, meta, num_splits, causal=True,
                                                      bundle=bundle, **({"is_fp8_kvcache": True} if fp8 else {}))
            torch.cuda.synchronize()
        out_c, lse_c = out.cpu().float(), lse.cpu()
        r = {"nan_out": int(torch.isnan(out_c).sum()), "nan_lse": int(torch.isnan(lse_c).sum())}
        try:
            rows = dequantize_fp8_cache(kv.cpu()) if fp8 else kv.cpu()
            errs = check_mla(q.cpu(), rows, table.cpu(), seqlens.cpu(), out_c, lse_c, causal=True)
            r.update(ok=True, max_err=errs["out"], lse_err=errs["lse"])
        except AssertionError as exc:
            r.update(ok=False, error=str(exc)[:300])
        yield {"kernel": name, "shape": [len(lengths), sq, heads], "lengths": lengths, "page_size": page,
               "num_splits": n, "variant": decode_variant(match),
               "fp8": fp8, "via": "flash_mla_with_kvcache", "seed": s, **r}


def combine_match(dtype: str) -> dict:
    return dec.CombineConfig(dtype, mc.D_V).key()
