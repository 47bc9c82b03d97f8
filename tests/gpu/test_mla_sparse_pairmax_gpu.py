"""The sparse MLA kernels' pair-max variants (opt-in, FA4MLIR_MLA_SPARSE_VARIANT=seesaw_pairmax and
seesaw_overlap_pairmax: the pair fill, and the overlap, with FlashMLA's pair-max handshakes,
attention_mla_sparse_seesaw_sm90 note "Pair max") on an sm_90 GPU: the prefill and the decode over a bf16 cache on
test_mla_sparse_pairfill_gpu.py's cases, each by the FA rule against the float64 reference (fa4mlir.testing_mla), the
same bits twice, and the two variants bit for bit alike (the overlap changes only when S_a is issued). Not compared
bit for bit with the rule's kernel: P_a is rounded to bf16 relative to the pair's max, not m_a. A hang (a handshake
that deadlocks) is a timeout. Needs a bundle of the `mla-sparse-variants` set (or `gpu-tests`).
"""
import numpy as np
import pytest

from tests.gpu.test_mla_sparse_decode_gpu import _case as _decode_case
from tests.gpu.test_mla_sparse_decode_gpu import _metadata
from tests.gpu.test_mla_sparse_gpu import _case
from tests.gpu.test_mla_sparse_gpu import torch  # noqa: F401  (the fixture)
from tests.gpu.test_mla_sparse_pairfill_gpu import DECODE
from tests.gpu.test_mla_sparse_seesaw_gpu import PREFILL

pytestmark = pytest.mark.gpu

PRODUCER_ENV = "FA4MLIR_MLA_SPARSE_PRODUCER"
VARIANTS = ("seesaw_pairmax", "seesaw_overlap_pairmax")


@pytest.mark.parametrize("s_q,heads,topk,s_kv,options", PREFILL)
def test_sparse_prefill_pairmax(torch, monkeypatch, s_q, heads, topk, s_kv, options):  # noqa: F811
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.testing_mla import check_mla_sparse
    q, kv, idx = _case(torch, s_q, heads, topk, s_kv)
    lens = sinks = None
    if options:
        lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, s_q).astype(np.int32))
        lens[0], lens[1] = 0, topk // 3
        sinks = torch.randn(heads, generator=torch.Generator().manual_seed(2))
        sinks[:3] = torch.tensor([float("-inf"), float("inf"), 4.0])
    scale = 576 ** -0.5
    args = (q.cuda(), kv.cuda(), torch.from_numpy(idx).cuda(), scale)
    kw = dict(attn_sink=None if sinks is None else sinks.cuda(), topk_length=None if lens is None else lens.cuda())
    got = {}
    monkeypatch.delenv(PRODUCER_ENV, raising=False)
    for variant in VARIANTS:
        monkeypatch.setenv(ms.VARIANT_ENV, variant)
        got[variant] = ms.flash_mla_sparse_fwd(*args, **kw)
        again = ms.flash_mla_sparse_fwd(*args, **kw)
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(got[variant], again))
    for variant in VARIANTS:
        out, max_logits, lse = got[variant]
        check_mla_sparse(q, kv, idx, out.cpu().float(), max_logits.cpu(), lse.cpu(), scale, sinks=sinks,
                         topk_length=None if lens is None else lens.numpy())
    assert all(torch.equal(a, b) for a, b in zip(*got.values()))


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits", DECODE)
def test_sparse_decode_pairmax(torch, monkeypatch, batch, seqlen_q, heads, topk, pages, page,  # noqa: F811
                               with_lengths, splits):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention import mla_sparse as ms
    from fa4mlir.testing_mla import check_mla_sparse_decode
    q, cache, idx = _decode_case(torch, batch, seqlen_q, heads, topk, pages, page, "bf16")
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    meta, num_splits = _metadata(torch, splits, batch)
    lens = None
    if with_lengths:
        lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, batch).astype(np.int32))
        lens[0] = 0
        lens[1 % batch] = topk // 3
    kw = dict(indices=ic, topk_length=None if lens is None else lens.cuda())
    got = {}
    monkeypatch.delenv(PRODUCER_ENV, raising=False)
    for variant in VARIANTS:
        monkeypatch.setenv(ms.VARIANT_ENV, variant)
        got[variant] = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
        again = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(got[variant], again))
    for variant in VARIANTS:
        out, lse = got[variant]
        check_mla_sparse_decode(q, cache, idx, out.cpu().float(), lse.cpu(), 576 ** -0.5,
                                topk_length=None if lens is None else lens.numpy())
    assert all(torch.equal(a, b) for a, b in zip(*got.values()))
