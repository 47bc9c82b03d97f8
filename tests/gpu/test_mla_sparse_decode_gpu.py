"""flash_mla_with_kvcache with indices (sparse MLA decode) on an sm_90 GPU with the bundle's sparse decode
kernels (FA4MLIR_BUNDLE built with `--set mla`, `--set gpu-tests` or `--set bench`), by the FA rule
against the float64 reference of FlashMLA's definition (fa4mlir.testing_mla.check_mla_sparse_decode):
indices naming cache rows page x page_size + offset, 16 / 64 / 80 / 128 heads, seqlen_q 1 and 2,
topk 512 to 2048, -1 padding, other negatives and entries past the cache, duplicates, shuffled
entries, NaN in every cache row no valid entry names, query rows with no valid entry, topk_length per
batch (0, shorter than topk, past topk), block_table and cache_seqlens None or passed (unread), splits
from get_mla_metadata and forced (1: unsplit; 3, 7: the split kernel and the head-dim-512 combine),
the same bits for the same inputs, bf16 and f16, pages of 64 and 61, a CUDA graph replayed after the
indices change. The same over FlashMLA's FP8 latent cache (is_fp8_kvcache=True): 656-byte rows made by
its quantize_k_cache's recipe (testing_mla.quantize_fp8_cache), NaN bytes and scales in every row no valid
entry names, FlashMLA's padded pages (a page stride of page_size + 1 rows), the uint8 view, against the
float64 reference over the cache dequantized exactly as the kernel does (testing_mla.dequantize_fp8_cache:
FlashMLA's dequantize_k_cache). The kernels are kernel_sets.mla()'s (tests/test_mla_sparse_decode.py and
tests/test_mla_sparse_decode_fp8.py compile them deviceless and run them in the interpreter).
"""
import numpy as np
import pytest

from tests.gpu._mla_sparse_common import decode_lengths

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


def _case(torch, batch, seqlen_q, heads, topk, pages, page, dtype, seed=0, padded=False):
    """q, k_cache (rows named by no valid entry are NaN) and indices [batch, seqlen_q, topk]: each query
    row a shuffled mix of valid rows (with duplicates), -1 and rows past the cache; every 5th query
    row all -1. dtype "fp8": q bf16 and FlashMLA's FP8 cache (CPU, quantized from rows of randn x 4, NaN
    bytes and scales where no valid entry names a row; padded: each page one row longer, a strided view)."""
    fp8 = dtype == "fp8"
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16, "fp8": torch.bfloat16}[dtype]
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
    cache[live] = torch.randn(len(live), 1, 576, generator=g) * (4 if fp8 else 1)
    cache = cache.to(tdtype).reshape(pages, page, 1, 576)
    if fp8:
        from fa4mlir.testing_mla import quantize_fp8_cache
        cache = quantize_fp8_cache(cache)
    if padded:
        room = torch.full((pages, page + 1, 1, 656), 0xFF, dtype=torch.uint8).view(torch.float8_e4m3fn)
        room[:, :page].view(torch.uint8).copy_(cache.view(torch.uint8))
        cache = room[:, :page]
    return q, cache, idx.reshape(batch, seqlen_q, topk)


def _to_cuda(torch, cache):
    """The cache on the GPU with its strides (.cuda() of a strided view keeps them only this way)."""
    out = torch.empty_strided(cache.shape, cache.stride(), dtype=cache.dtype, device="cuda")
    out.view(torch.uint8).copy_(cache.view(torch.uint8))
    return out


def _check(torch, q, cache, idx, out, lse, lens=None):
    """check_mla_sparse_decode against the cache's rows (an FP8 cache dequantized as the kernel does)."""
    from fa4mlir.testing_mla import check_mla_sparse_decode, dequantize_fp8_cache
    rows = dequantize_fp8_cache(cache.cpu().contiguous()) if cache.dtype == torch.float8_e4m3fn else cache
    check_mla_sparse_decode(q, rows, idx, out.cpu().float(), lse.cpu(), 576 ** -0.5, topk_length=lens)


def _metadata(torch, splits, batch):
    meta = torch.zeros((splits, 8), dtype=torch.int32, device="cuda")
    return meta, torch.arange(batch + 1, dtype=torch.int32, device="cuda") * splits


SHAPES = [  # batch, seqlen_q, heads, topk, pages, page, 16-bit dtype, lengths, splits (None: get_mla_metadata's),
    #          the FP8 run's pages padded (FlashMLA's page stride of page_size + 1 rows)
    (4, 1, 128, 2048, 600, 64, "bf16", False, None, False),
    (2, 2, 16, 512, 40, 64, "bf16", False, None, True),
    (3, 2, 64, 1024, 70, 61, "f16", True, None, False),
    (5, 1, 80, 512, 20, 64, "bf16", True, 3, True),
    (2, 2, 128, 2048, 300, 64, "bf16", False, 7, False),
    (24, 2, 128, 2048, 900, 64, "bf16", False, 1, True),
    (1, 1, 64, 2048, 100, 64, "f16", False, None, False),
]
# each shape over its 16-bit cache (pages unpadded), then over FlashMLA's FP8 cache (bf16 q)
CASES = [(*c[:9], False) for c in SHAPES] + [(*c[:6], "fp8", *c[7:]) for c in SHAPES]


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,dtype,with_lengths,splits,padded", CASES)
def test_sparse_decode_matches_reference(torch, batch, seqlen_q, heads, topk, pages, page, dtype, with_lengths,
                                         splits, padded):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    fp8 = dict(is_fp8_kvcache=True) if dtype == "fp8" else {}
    q, cache, idx = _case(torch, batch, seqlen_q, heads, topk, pages, page, dtype, padded=padded)
    qc, cc, ic = q.cuda(), _to_cuda(torch, cache) if fp8 else cache.cuda(), torch.from_numpy(idx).cuda()
    if fp8:
        assert cc.stride(0) == (page + padded) * 656
    seqlens = torch.full((batch,), pages * page, dtype=torch.int32, device="cuda")
    if splits is None:
        meta, num_splits = get_mla_metadata(seqlens, seqlen_q * heads, 1, heads, **fp8, topk=topk)
    else:
        meta, num_splits = _metadata(torch, splits, batch)
    lens = None
    if with_lengths:
        lens = decode_lengths(torch, batch, topk)
    kw = dict(**fp8, indices=ic, topk_length=None if lens is None else lens.cuda())
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    table = torch.zeros((batch, 1), dtype=torch.int32, device="cuda")
    again, lse2 = flash_mla_with_kvcache(qc, cc, table, seqlens, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    assert out.shape == (batch, seqlen_q, heads, 512) and out.dtype == q.dtype
    assert lse.shape == (batch, heads, seqlen_q) and lse.dtype == torch.float32
    assert torch.equal(out, again) and torch.equal(lse, lse2)          # deterministic; table, seqlens unread
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())


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


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("splits", [1, 4])
def test_sparse_decode_in_a_cuda_graph(torch, splits, dtype):
    """A captured call replayed after q, the cache (its bytes) and the indices change (same shapes and
    addresses): nothing is read on the host."""
    from fa4mlir import flash_mla_with_kvcache
    q, cache, idx = _case(torch, 3, 2, 64, 1024, 80, 64, dtype, seed=2)
    q2, cache2, idx2 = _case(torch, 3, 2, 64, 1024, 80, 64, dtype, seed=3)
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    meta, num_splits = _metadata(torch, splits, 3)
    kw = dict(is_fp8_kvcache=True, indices=ic) if dtype == "fp8" else dict(indices=ic)
    flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)        # prepare outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    graph.replay()
    torch.cuda.synchronize()
    _check(torch, q, cache, idx, out, lse)
    qc.copy_(q2)
    cc.view(torch.uint8).copy_(cache2.view(torch.uint8))
    ic.copy_(torch.from_numpy(idx2))
    graph.replay()
    torch.cuda.synchronize()
    _check(torch, q2, cache2, idx2, out, lse)


def test_fp8_sparse_decode_uint8_view_gives_the_same_bits(torch):
    from fa4mlir import flash_mla_with_kvcache
    q, cache, idx = _case(torch, 2, 2, 64, 512, 20, 64, "fp8", seed=4)
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    meta, num_splits = _metadata(torch, 2, 2)
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, is_fp8_kvcache=True, indices=ic)
    out8, lse8 = flash_mla_with_kvcache(qc, cc.view(torch.uint8), None, None, 512, meta, num_splits,
                                        is_fp8_kvcache=True, indices=ic)
    torch.cuda.synchronize()
    assert torch.equal(out, out8) and torch.equal(lse, lse8)
    _check(torch, q, cache, idx, out, lse)


def test_fp8_sparse_decode_typed_errors_on_device(torch):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention import errors as E
    q, cache, idx = _case(torch, 2, 1, 64, 512, 20, 64, "fp8")
    qc, cc, ic = q.cuda(), cache.cuda(), torch.from_numpy(idx).cuda()
    meta, num_splits = _metadata(torch, 1, 2)
    args = (None, None, 512, meta, num_splits)
    with pytest.raises(E.DTypeError):        # an FP8 cache without the flag
        flash_mla_with_kvcache(qc, cc, *args, indices=ic)
    with pytest.raises(E.DTypeError):        # f16 q
        flash_mla_with_kvcache(qc.half(), cc, *args, is_fp8_kvcache=True, indices=ic)
    with pytest.raises(E.ShapeError):        # the rows cut to 576 bytes
        flash_mla_with_kvcache(qc, cc[..., :576].contiguous(), *args, is_fp8_kvcache=True, indices=ic)
    with pytest.raises(E.LayoutError):       # a 660-byte row pitch: not a multiple of 16
        wide = torch.zeros((cache.shape[0], 64, 1, 660), dtype=torch.uint8, device="cuda")
        flash_mla_with_kvcache(qc, wide[..., :656], *args, is_fp8_kvcache=True, indices=ic)
    with pytest.raises(E.DTypeError):
        flash_mla_with_kvcache(qc, cc, *args, is_fp8_kvcache=True, indices=ic.long())
    with pytest.raises(E.UnsupportedFeatureError):
        flash_mla_with_kvcache(qc, cc, *args, is_fp8_kvcache=True, indices=ic, attn_sink=torch.zeros(64, device="cuda"))
