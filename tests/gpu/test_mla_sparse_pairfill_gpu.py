"""The sparse MLA kernels' pair-fill variant (SPARSE_DEFAULT_RULE's over bf16 since [D-mla-sparse-pairfill-default];
FA4MLIR_MLA_SPARSE_VARIANT=seesaw_pairfill names it: the seesaw with
the producer warpgroup filling a pair's halves in FlashMLA's order, attention_mla_sparse_seesaw_sm90 note "Pair
fill") on an sm_90 GPU: the prefill (flash_mla_sparse_fwd; h_q 64 and 128, topk 128 to 2048 with odd and even
tile counts, -1 padding, indices >= s_kv, duplicates, NaN in every kv row no valid entry names, topk_length with
sinks) and the decode over a bf16 cache (one split, and three with topk_length), each by the FA rule against the
float64 reference (fa4mlir.testing_mla), its max error within 1.5x that of the rule before it (the seesaw in tile
order with the producer warpgroup, FA4MLIR_MLA_SPARSE_VARIANT=seesaw) on the same inputs (+ a small atol), the same bits for the same inputs.
Not the rule's bits: warpgroup 1 sums S_b's columns 256..575 first. A hang (a pair-fill ring order that
deadlocks) is a timeout. Needs a bundle of the `mla-sparse-variants` set (or `gpu-tests`).
"""
import pytest

from tests.gpu._mla_sparse_common import decode_call, prefill_call, run_variant
from tests.gpu.test_mla_sparse_gpu import torch  # noqa: F401  (the fixture)
from tests.gpu.test_mla_sparse_seesaw_gpu import PREFILL, _same_class

pytestmark = pytest.mark.gpu

# the rule's kernel (pair fill since [D-mla-sparse-pairfill-default]), then the rule before it (tile-order seesaw)
VARIANTS = (("default", "default"), ("seesaw", "warpgroup"))


@pytest.mark.parametrize("s_q,heads,topk,s_kv,options", PREFILL)
def test_sparse_prefill_pairfill(torch, monkeypatch, s_q, heads, topk, s_kv, options):  # noqa: F811
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.testing_mla import check_mla_sparse
    q, kv, idx, lens, sinks, scale, args, kw = prefill_call(torch, s_q, heads, topk, s_kv, options)
    errs = {}
    for variant, prod in VARIANTS:
        out, max_logits, lse = run_variant(torch, monkeypatch, lambda: ms.flash_mla_sparse_fwd(*args, **kw), variant,
                                           prod)
        errs[variant] = check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale,
                                         sinks=sinks, topk_length=None if lens is None else lens.numpy())
    _same_class(errs["default"], errs["seesaw"], ("out", "lse", "max_logits"))


DECODE = [  # batch, seqlen_q, heads, topk, pages, page, lengths, splits (the set's two decode kernels)
    (24, 2, 128, 2048, 900, 64, False, 1),
    (4, 1, 64, 192, 600, 64, False, 1),
    (5, 1, 80, 512, 20, 64, True, 3),
    (3, 2, 128, 2048, 300, 64, True, 3),
]


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits", DECODE)
def test_sparse_decode_pairfill(torch, monkeypatch, batch, seqlen_q, heads, topk, pages, page,  # noqa: F811
                                with_lengths, splits):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.testing_mla import check_mla_sparse_decode
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = decode_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                        "bf16", with_lengths, splits)
    errs = {}
    for variant, prod in VARIANTS:
        out, lse = run_variant(torch, monkeypatch,
                               lambda: flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw), variant,
                               prod)
        errs[variant] = check_mla_sparse_decode(q, cache, idx, out.cpu().float(), lse.cpu(), 576 ** -0.5,
                                                topk_length=None if lens is None else lens.numpy())
    _same_class(errs["default"], errs["seesaw"], ("out", "lse"))
