"""The sparse MLA kernels' pair-max variants (opt-in, FA4MLIR_MLA_SPARSE_VARIANT=seesaw_pairmax and
seesaw_overlap_pairmax: the pair fill, and the overlap, with FlashMLA's pair-max handshakes,
attention_mla_sparse_seesaw_sm90 note "Pair max") on an sm_90 GPU: the prefill and the decode over a bf16 cache on
test_mla_sparse_pairfill_gpu.py's cases, each by the FA rule against the float64 reference (fa4mlir.testing_mla), the
same bits twice, and the two variants bit for bit alike (the overlap changes only when S_a is issued). Not compared
bit for bit with the rule's kernel: P_a is rounded to bf16 relative to the pair's max, not m_a. A hang (a handshake
that deadlocks) is a timeout. Needs a bundle of the `mla-sparse-variants` set (or `gpu-tests`).
"""
import pytest

from tests.gpu._mla_sparse_common import PRODUCER_ENV, decode_call, prefill_call, run_variant
from tests.gpu.test_mla_sparse_gpu import torch  # noqa: F401  (the fixture)
from tests.gpu.test_mla_sparse_pairfill_gpu import DECODE
from tests.gpu.test_mla_sparse_seesaw_gpu import PREFILL

pytestmark = pytest.mark.gpu

VARIANTS = ("seesaw_pairmax", "seesaw_overlap_pairmax")


@pytest.mark.parametrize("s_q,heads,topk,s_kv,options", PREFILL)
def test_sparse_prefill_pairmax(torch, monkeypatch, s_q, heads, topk, s_kv, options):  # noqa: F811
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.testing_mla import check_mla_sparse
    q, kv, idx, lens, sinks, scale, args, kw = prefill_call(torch, s_q, heads, topk, s_kv, options)
    monkeypatch.delenv(PRODUCER_ENV, raising=False)
    got = {v: run_variant(torch, monkeypatch, lambda: ms.flash_mla_sparse_fwd(*args, **kw), v) for v in VARIANTS}
    for variant in VARIANTS:
        out, max_logits, lse = got[variant]
        check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks,
                         topk_length=None if lens is None else lens.numpy())
    assert all(torch.equal(a, b) for a, b in zip(*got.values()))


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits", DECODE)
def test_sparse_decode_pairmax(torch, monkeypatch, batch, seqlen_q, heads, topk, pages, page,  # noqa: F811
                               with_lengths, splits):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.testing_mla import check_mla_sparse_decode
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = decode_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                        "bf16", with_lengths, splits)
    monkeypatch.delenv(PRODUCER_ENV, raising=False)
    got = {v: run_variant(torch, monkeypatch, lambda: flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits,
                                                                             **kw), v) for v in VARIANTS}
    for variant in VARIANTS:
        out, lse = got[variant]
        check_mla_sparse_decode(q, cache, idx, out.cpu().float(), lse.cpu(), 576 ** -0.5,
                                topk_length=None if lens is None else lens.numpy())
    assert all(torch.equal(a, b) for a, b in zip(*got.values()))
