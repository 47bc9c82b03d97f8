"""The swap-AB MLA decode over a ring of chunk stages (attention_mla_decode_sm90_swapab_chunks:
FA4MLIR_MLA_DECODE_VARIANT=swapab_ring, DEFAULT_RULE's over bf16 pages of 64) on an sm_90 GPU, by tests/gpu/test_mla_decode_swapab_gpu.py's
checks (FA rule against the float64 reference, NaN in every cache row no sequence owns, shuffled block
tables, the same bits for the same inputs): 16 heads, seqlen_q 1 and 2 (causal bottom-right), lengths 0,
1, 63, 64, 65, 150 and 4096 side by side, get_mla_metadata's splits and forced ones (1: unsplit; 3: the
split kernel and the combine), bf16 in pages of 64, and a CUDA graph replay. Needs a bundle of the `mla`
set (`python -m fa4mlir bundle --set mla`; gpu-tests holds it): a bundle without the variant is a BundleError
naming it, never another kernel in its place.
"""
import pytest

from tests._mla_helpers import forced_metadata as _metadata
from tests.gpu.test_mla_decode_gpu import _case
from tests.gpu.test_mla_decode_gpu import torch  # noqa: F401  (the fixture)

pytestmark = pytest.mark.gpu

LENS = (65, 0, 1, 150, 63, 64, 4096)
VARIANT = "swapab_ring"


@pytest.mark.parametrize("seqlen_q", [1, 2])
@pytest.mark.parametrize("splits", [None, 1, 3])
def test_swapab_ring_matches_reference(torch, monkeypatch, seqlen_q, splits):  # noqa: F811
    from fa4mlir.attention import mla
    from fa4mlir.testing_mla import check_mla
    monkeypatch.setenv(mla.VARIANT_ENV, VARIANT)
    q, kv, table, seqlens = _case(torch, LENS, seqlen_q, 16, 64, "bf16", seed=5)
    qc, kvc, tc, sc = q.cuda(), kv.cuda(), table.cuda(), seqlens.cuda()
    if splits is None:
        meta, num_splits = mla.get_mla_metadata(sc, seqlen_q * 16, 1)
    else:
        meta, num_splits = _metadata(torch, splits, len(LENS))
    problem = mla.check_mla_inputs(*(mla.read_tensor(n, x, mla.ENTRY) for n, x in (
        ("q", qc), ("k_cache", kvc), ("block_table", tc), ("cache_seqlens", sc))), 512,
        mla.read_tensor("tile_scheduler_metadata", meta, mla.ENTRY), mla.read_tensor("num_splits", num_splits, mla.ENTRY),
        causal=True)
    cfg = mla.configs_for(problem)[0]
    assert cfg.swap_ab == 16 * seqlen_q and cfg.swap_ab_ring     # the variant runs
    out, lse = mla.flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    again, lse2 = mla.flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    torch.cuda.synchronize()
    assert torch.equal(out, again) and torch.equal(lse, lse2)
    check_mla(q, kv, table, seqlens, out.cpu().float(), lse.cpu(), causal=True)


def test_swapab_ring_in_a_cuda_graph(torch, monkeypatch):  # noqa: F811
    """A captured call replayed after the lengths, block table and cache change: nothing read on the host."""
    from fa4mlir.attention import mla
    from fa4mlir.testing_mla import check_mla
    monkeypatch.setenv(mla.VARIANT_ENV, VARIANT)
    q, kv, table, seqlens = _case(torch, (300, 65, 1), 2, 16, 64, "bf16", seed=6)
    q2, kv2, table2, seqlens2 = _case(torch, (100, 190, 0), 2, 16, 64, "bf16", seed=7)
    qc, kvc, tc, sc = q.cuda(), kv.cuda(), table.cuda(), seqlens.cuda()
    meta, num_splits = _metadata(torch, 2, 3)
    mla.flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = mla.flash_mla_with_kvcache(qc, kvc, tc, sc, 512, meta, num_splits, causal=True)
    graph.replay()
    torch.cuda.synchronize()
    check_mla(q, kv, table, seqlens, out.cpu().float(), lse.cpu(), causal=True)
    qc.copy_(q2)
    kvc[:kv2.shape[0]].copy_(kv2)
    tc.fill_(0)
    tc[:, :table2.shape[1]].copy_(table2)
    sc.copy_(seqlens2)
    graph.replay()
    torch.cuda.synchronize()
    check_mla(q2, kvc.cpu(), tc.cpu(), seqlens2, out.cpu().float(), lse.cpu(), causal=True)
