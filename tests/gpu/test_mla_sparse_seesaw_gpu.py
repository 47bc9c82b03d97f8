"""The sparse MLA kernels' opt-in seesaw variant (MLASparseConfig.seesaw / MLASparseDecodeConfig.seesaw,
attention_mla_sparse_seesaw_sm90) on an sm_90 GPU, chosen through FA4MLIR_MLA_SPARSE_VARIANT=seesaw: the
prefill (flash_mla_sparse_fwd; h_q 64 and 128, topk 128 to 2048 with odd and even tile counts, -1 padding,
indices >= s_kv, duplicates, NaN in every kv row no valid entry names, topk_length with sinks) and the
decode over a bf16 cache (flash_mla_with_kvcache(indices=...); one split, and three with topk_length) and over
FlashMLA's FP8 cache (the converter kernel, one split; checked over the dequantized rows), each
by the FA rule against the float64 reference (fa4mlir.testing_mla), its max error within 1.5x the default
kernel's on the same inputs (+ a small atol), the same bits for the same inputs. The 16-bit cases also with
the producer warpgroup (FA4MLIR_MLA_SPARSE_PRODUCER=warpgroup: FlashMLA's whole recipe), the
same bits as the seesaw with the gather warp (the same wgmmas in the same order). Needs a bundle of the
`mla-sparse-variants` set (or `gpu-tests`); a bundle without the variant is a BundleError naming it.
"""
import pytest

from tests.gpu._mla_sparse_common import decode_call, prefill_call, run_variant
from tests.gpu.test_mla_sparse_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu

PRODUCERS = ("warp", "warpgroup")

PREFILL = [  # s_q, heads, topk, s_kv, topk_length and sinks (the set's two prefill kernels)
    (9, 64, 128, 300, False),
    (9, 128, 192, 5000, False),       # 3 tiles: a pair and the odd tile
    (17, 128, 2048, 32768, False),
    (10, 64, 2048, 1000, True),
    (30, 128, 1024, 4000, True),
]


def _same_class(got: dict, base: dict, keys) -> None:
    for k in keys:
        assert got[k] <= 1.5 * base[k] + 1e-4, (k, got, base)


@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("s_q,heads,topk,s_kv,options", PREFILL)
def test_sparse_prefill_seesaw(torch, monkeypatch, s_q, heads, topk, s_kv, options, producer):  # noqa: F811
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.testing_mla import check_mla_sparse
    q, kv, idx, lens, sinks, scale, args, kw = prefill_call(torch, s_q, heads, topk, s_kv, options)
    errs, outs = {}, {}
    for variant, prod in (("tile", "warp"), ("seesaw", "warp"), ("seesaw", producer)):
        out, max_logits, lse = run_variant(torch, monkeypatch, lambda: ms.flash_mla_sparse_fwd(*args, **kw), variant,
                                           prod)
        errs[variant, prod] = check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale,
                                               sinks=sinks, topk_length=None if lens is None else lens.numpy())
        outs[variant, prod] = (out, max_logits, lse)
    _same_class(errs["seesaw", producer], errs["tile", "warp"], ("out", "lse", "max_logits"))
    for x, y in zip(outs["seesaw", producer], outs["seesaw", "warp"]):
        assert torch.equal(x, y)


DECODE = [  # batch, seqlen_q, heads, topk, pages, page, cache, lengths, splits (the set's three decode kernels)
    (24, 2, 128, 2048, 900, 64, "bf16", False, 1),
    (4, 1, 64, 192, 600, 64, "bf16", False, 1),
    (5, 1, 80, 512, 20, 64, "bf16", True, 3),
    (3, 2, 128, 2048, 300, 64, "bf16", True, 3),
    (24, 2, 128, 2048, 900, 64, "fp8", False, 1),     # the FP8 converter kernel (one split)
    (4, 1, 64, 192, 600, 64, "fp8", False, 1),
]


@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,cache_dtype,with_lengths,splits", DECODE)
def test_sparse_decode_seesaw(torch, monkeypatch, batch, seqlen_q, heads, topk, pages, page, cache_dtype,  # noqa: F811
                              with_lengths, splits, producer):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.testing_mla import check_mla_sparse_decode, dequantize_fp8_cache
    fp8 = cache_dtype == "fp8"
    if fp8 and producer != "warp":
        pytest.skip("the producer warpgroup is built for a 16-bit cache")
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = decode_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                        cache_dtype, with_lengths, splits)
    kw["is_fp8_kvcache"] = fp8
    rows = dequantize_fp8_cache(cache.contiguous()) if fp8 else cache
    errs, outs = {}, {}
    for variant, prod in (("tile", "warp"), ("seesaw", "warp"), ("seesaw", producer)):
        out, lse = run_variant(torch, monkeypatch,
                               lambda: flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw), variant,
                               prod)
        errs[variant, prod] = check_mla_sparse_decode(q, rows, idx, out.cpu().float(), lse.cpu(), 576 ** -0.5,
                                                      topk_length=None if lens is None else lens.numpy())
        outs[variant, prod] = (out, lse)
    _same_class(errs["seesaw", producer], errs["tile", "warp"], ("out", "lse"))
    assert torch.equal(outs["seesaw", producer][0], outs["seesaw", "warp"][0])
    assert torch.equal(outs["seesaw", producer][1], outs["seesaw", "warp"][1])
