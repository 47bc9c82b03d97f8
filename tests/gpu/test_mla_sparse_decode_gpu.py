"""flash_mla_with_kvcache with indices (sparse MLA decode) on an sm_90 GPU with the bundle's sparse decode
kernels (FA4MLIR_BUNDLE built with `--set mla`, `--set gpu-tests` or `--set bench`), by the FA rule
against the float64 reference of FlashMLA's definition (fa4mlir.testing_mla.check_mla_sparse_decode):
indices naming cache rows page x page_size + offset, 16 / 64 / 80 / 128 heads, seqlen_q 1 and 2,
topk 512 to 2048, -1 padding, other negatives and entries past the cache, duplicates, shuffled
entries, NaN in every cache row no valid entry names, query rows with no valid entry, topk_length per
batch (0, shorter than topk, past topk), block_table and cache_seqlens None or passed (unread), splits
from get_mla_metadata and forced (1: unsplit; 3, 7: the split kernel and the head-dim-512 combine),
the same bits for the same inputs, bf16 and f16, pages of 64 and 61, a CUDA graph replayed after the
indices change. The kernels are kernel_sets.mla()'s (tests/test_mla_sparse_decode.py compiles them
deviceless and runs them in the interpreter).
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


def _case(torch, batch, seqlen_q, heads, topk, pages, page, dtype, seed=0):
    """q, k_cache (rows named by no valid entry are NaN) and indices [batch, seqlen_q, topk]: each query
    row a shuffled mix of valid rows (with duplicates), -1 and rows past the cache; every 5th query
    row all -1."""
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    s_kv = pages * page
    q = torch.randn(batch, seqlen_q, heads, 576, generator=g).to(tdtype)
    idx = np.empty((batch * seqlen_q, topk), np.int32)
    for r in range(batch * seqlen_q):
        valid = rng.integers(0, s_kv, topk)
        kind = rng.integers(0, 10, topk)
        invalid = rng.choice([-2**31, -7, s_kv, 2**31 - 1], topk)
        row = np.where(kind < 7, valid, np.where(kind < 9, -1, invalid))
        idx[r] = -1 if r % 5 == 2 else row
    cache = torch.full((s_kv, 1, 576), float("nan"))
    live = np.unique(idx[(idx >= 0) & (idx < s_kv)])
    cache[live] = torch.randn(len(live), 1, 576, generator=g)
    return q, cache.to(tdtype).reshape(pages, page, 1, 576), idx.reshape(batch, seqlen_q, topk)


def _metadata(torch, splits, batch):
    meta = torch.zeros((splits, 8), dtype=torch.int32, device="cuda")
    return meta, torch.arange(batch + 1, dtype=torch.int32, device="cuda") * splits


CASES = [  # batch, seqlen_q, heads, topk, pages, page, dtype, lengths, splits (None: get_mla_metadata's)
    (4, 1, 128, 2048, 600, 64, "bf16", False, None),
    (2, 2, 16, 512, 40, 64, "bf16", False, None),
    (3, 2, 64, 1024, 70, 61, "f16", True, None),
    (5, 1, 80, 512, 20, 64, "bf16", True, 3),
    (2, 2, 128, 2048, 300, 64, "bf16", False, 7),
    (24, 2, 128, 2048, 900, 64, "bf16", False, 1),
    (1, 1, 64, 2048, 100, 64, "f16", False, None),
]


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,dtype,with_lengths,splits", CASES)
def test_sparse_decode_matches_reference(torch, batch, seqlen_q, heads, topk, pages, page, dtype, with_lengths,
                                         splits):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    from fa4mlir.testing_mla import check_mla_sparse_decode
    q, cache, idx = _case(torch, batch, seqlen_q, heads, topk, pages, page, dtype)
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    seqlens = torch.full((batch,), pages * page, dtype=torch.int32, device="cuda")
    if splits is None:
        meta, num_splits = get_mla_metadata(seqlens, seqlen_q * heads, 1, heads, topk=topk)
    else:
        meta, num_splits = _metadata(torch, splits, batch)
    lens = None
    if with_lengths:
        lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, batch).astype(np.int32))
        lens[0] = 0
        lens[1 % batch] = topk // 3
    kw = dict(indices=ic, topk_length=None if lens is None else lens.cuda())
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    table = torch.zeros((batch, 1), dtype=torch.int32, device="cuda")
    again, lse2 = flash_mla_with_kvcache(qc, cc, table, seqlens, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    assert out.shape == (batch, seqlen_q, heads, 512) and out.dtype == q.dtype
    assert lse.shape == (batch, heads, seqlen_q) and lse.dtype == torch.float32
    assert torch.equal(out, again) and torch.equal(lse, lse2)          # deterministic; table, seqlens unread
    check_mla_sparse_decode(q, cache, idx, out.cpu().float(), lse.cpu(), 576 ** -0.5,
                            topk_length=None if lens is None else lens.numpy())


def test_sparse_decode_typed_errors_on_device(torch):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention import errors as E
    q, cache, idx = _case(torch, 2, 1, 64, 512, 20, 64, "bf16")
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    meta, num_splits = _metadata(torch, 1, 2)
    with pytest.raises(E.DTypeError):
        flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, indices=ic.long())
    with pytest.raises(E.ShapeError):
        flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, indices=ic[..., :500].contiguous())
    with pytest.raises(E.UnsupportedFeatureError):
        flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, causal=True, indices=ic)
    with pytest.raises(E.DTypeError):        # a bf16 cache with the FP8 flag
        flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, indices=ic, is_fp8_kvcache=True)
    with pytest.raises(E.DeviceError):
        flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, indices=torch.from_numpy(idx))


@pytest.mark.parametrize("splits", [1, 4])
def test_sparse_decode_in_a_cuda_graph(torch, splits):
    """A captured call replayed after q, the cache and the indices change (same shapes and
    addresses): nothing is read on the host."""
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.testing_mla import check_mla_sparse_decode
    q, cache, idx = _case(torch, 3, 2, 64, 1024, 80, 64, "bf16", seed=2)
    q2, cache2, idx2 = _case(torch, 3, 2, 64, 1024, 80, 64, "bf16", seed=3)
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    meta, num_splits = _metadata(torch, splits, 3)
    flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, indices=ic)        # prepare outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, indices=ic)
    graph.replay()
    torch.cuda.synchronize()
    check_mla_sparse_decode(q, cache, idx, out.cpu().float(), lse.cpu(), 576 ** -0.5)
    qc.copy_(q2)
    cc.copy_(cache2)
    ic.copy_(torch.from_numpy(idx2))
    graph.replay()
    torch.cuda.synchronize()
    check_mla_sparse_decode(q2, cache2, idx2, out.cpu().float(), lse.cpu(), 576 ** -0.5)
