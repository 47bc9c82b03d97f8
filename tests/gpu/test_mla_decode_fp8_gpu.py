"""flash_mla_with_kvcache(..., is_fp8_kvcache=True) on an sm_90 GPU with the bundle's FP8-latent MLA
kernels (FA4MLIR_BUNDLE built with `--set mla`, `--set gpu-tests` or `--set bench`), by the FA rule
against the float64 reference over the cache dequantized exactly as the kernel does
(fa4mlir.testing_mla.dequantize_fp8_cache: FlashMLA's dequantize_k_cache): FlashMLA's 656-byte
rows made by its quantize_k_cache's recipe (testing_mla.quantize_fp8_cache), NaN bytes and scales
in every row no sequence owns, 16 / 64 / 128 heads, seqlen_q 1 and 2 (causal bottom-right), lengths
0, 1, page + 1 and several pages, shuffled block tables, splits from get_mla_metadata and forced
(1: unsplit; 3, 7: split kernel + combine), pages of 64 and 16, FlashMLA's padded pages (a page
stride of page_size + 1 rows), the same bits for the same inputs, a CUDA graph replay. The
kernels are kernel_sets.mla()'s (tests/test_mla_decode_fp8.py compiles them deviceless).
"""
import pytest

from tests._mla_helpers import forced_metadata as _metadata
from tests._mla_helpers import paged_latent

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


def _case(torch, lens, seqlen_q, heads, page, seed=0, padded=False):
    """q (bf16), the FP8 cache (float8_e4m3fn [num_pages, page, 1, 656]; padded: each page one row
    longer, as FlashMLA's quantize_k_cache allocates it), the block table and the lengths (CPU)."""
    from fa4mlir.testing_mla import quantize_fp8_cache
    q, kv, table, _ = paged_latent(torch, lens, seqlen_q, heads, page, seed, spare_pages=3, junk=-1, scale=4)
    cache = quantize_fp8_cache(kv.bfloat16())
    if padded:
        num_pages = kv.shape[0]
        room = torch.zeros((num_pages, page + 1, 1, 656), dtype=torch.uint8).view(torch.float8_e4m3fn)
        room[:, :page].view(torch.uint8).copy_(cache.view(torch.uint8))
        cache = room[:, :page]
    return q.bfloat16(), cache, torch.from_numpy(table), torch.tensor(lens, dtype=torch.int32)


def _check(q, cache, table, seqlens, out, lse, causal=True):
    from fa4mlir.testing_mla import check_mla, dequantize_fp8_cache
    check_mla(q, dequantize_fp8_cache(cache.cpu()), table, seqlens, out.cpu().float(), lse.cpu(), causal=causal)


CASES = [  # lens, seqlen_q, heads, page, splits (None: get_mla_metadata's), padded pages
    ((65, 0, 1, 300), 1, 16, 64, None, False),
    ((65, 0, 1, 300), 2, 16, 64, None, True),
    ((4096, 129, 64), 1, 64, 64, 3, False),
    ((4096, 129, 64), 2, 128, 64, 7, True),
    ((1000, 1), 2, 128, 64, 1, False),
    ((300, 17, 1), 2, 16, 16, 2, False),
    ((300, 17, 1), 1, 64, 16, 1, True),
]


@pytest.mark.parametrize("lens,seqlen_q,heads,page,splits,padded", CASES)
def test_fp8_mla_decode_matches_reference(torch, lens, seqlen_q, heads, page, splits, padded):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    q, cache, table, seqlens = _case(torch, lens, seqlen_q, heads, page, padded=padded)
    qc, cc, tc, sc = q.cuda(), cache.cuda(), table.cuda(), seqlens.cuda()
    if padded:      # .cuda() of a strided view keeps its strides only through as_strided
        cc = torch.empty_strided(cache.shape, cache.stride(), dtype=cache.dtype, device="cuda")
        cc.view(torch.uint8).copy_(cache.view(torch.uint8))
        assert cc.stride(0) == (page + 1) * 656
    if splits is None:
        meta, num_splits = get_mla_metadata(sc, seqlen_q * heads, 1, is_fp8_kvcache=True)
    else:
        meta, num_splits = _metadata(torch, splits, len(lens))
    out, lse = flash_mla_with_kvcache(qc, cc, tc, sc, 512, meta, num_splits, causal=True, is_fp8_kvcache=True)
    again, lse2 = flash_mla_with_kvcache(qc, cc, tc, sc, 512, meta, num_splits, causal=True, is_fp8_kvcache=True)
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16 and out.shape == (len(lens), seqlen_q, heads, 512)
    assert torch.equal(out, again) and torch.equal(lse, lse2)          # deterministic
    _check(q, cache, table, seqlens, out, lse)


def test_fp8_mla_decode_typed_errors_on_device(torch):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention import errors as E
    q, cache, table, seqlens = _case(torch, (65,), 1, 16, 64)
    meta, num_splits = _metadata(torch, 1, 1)
    args = (table.cuda(), seqlens.cuda(), 512, meta, num_splits)
    with pytest.raises(E.DTypeError):        # an FP8 cache without the flag
        flash_mla_with_kvcache(q.cuda(), cache.cuda(), *args)
    with pytest.raises(E.DTypeError):        # f16 q
        flash_mla_with_kvcache(q.half().cuda(), cache.cuda(), *args, is_fp8_kvcache=True)
    with pytest.raises(E.ShapeError):        # the rows cut to 576 bytes
        flash_mla_with_kvcache(q.cuda(), cache[..., :576].contiguous().cuda(), *args, is_fp8_kvcache=True)
    with pytest.raises(E.LayoutError):       # a 660-byte row pitch: not a multiple of 16
        wide = torch.zeros((cache.shape[0], 64, 1, 660), dtype=torch.uint8, device="cuda")
        flash_mla_with_kvcache(q.cuda(), wide[..., :656], *args, is_fp8_kvcache=True)


def test_fp8_mla_decode_in_a_cuda_graph(torch):
    """A captured call replayed after the lengths, block table and cache bytes change."""
    from fa4mlir import flash_mla_with_kvcache
    q, cache, table, seqlens = _case(torch, (300, 65, 1), 2, 64, 64, seed=2)
    q2, cache2, table2, seqlens2 = _case(torch, (100, 190, 0), 2, 64, 64, seed=3)
    assert cache2.shape[0] <= cache.shape[0] and table2.shape[1] <= table.shape[1]
    qc, cc, tc, sc = q.cuda(), cache.cuda(), table.cuda(), seqlens.cuda()
    meta, num_splits = _metadata(torch, 2, 3)
    flash_mla_with_kvcache(qc, cc, tc, sc, 512, meta, num_splits, causal=True, is_fp8_kvcache=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flash_mla_with_kvcache(qc, cc, tc, sc, 512, meta, num_splits, causal=True, is_fp8_kvcache=True)
    graph.replay()
    torch.cuda.synchronize()
    _check(q, cache, table, seqlens, out, lse)
    qc.copy_(q2)
    cc[:cache2.shape[0]].view(torch.uint8).copy_(cache2.view(torch.uint8))
    tc.fill_(0)
    tc[:, :table2.shape[1]].copy_(table2)
    sc.copy_(seqlens2)
    graph.replay()
    torch.cuda.synchronize()
    _check(q2, cc, tc.cpu(), seqlens2, out, lse)
