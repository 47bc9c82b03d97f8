"""flash_mla_with_kvcache on an sm_100 GPU (compute capability 10.0): the sm_100a MLA decode that
attention/mla_sm100.py routes to, from the bundle set `mla-decode-sm100` (`python -m fa4mlir bundle --set
mla-decode-sm100`), by the FA rule against the float64 reference (fa4mlir.testing_mla.check_mla; over the
FP8 cache, against the cache dequantized exactly as the kernel does). Skips on any other GPU.

No sm_100 GPU exists in this project's reach, so these cases have never run; the kernels' numerics were
interpreted on the CPU (tests/test_attention_sm100_mla_decode.py, tests/test_attention_sm100_mla_decode_fp8.py)
and the route checked deviceless (tests/test_mla_decode_sm100_route.py). Cases: heads 16/32/64/128, seqlen_q
1 and 2 (causal bottom-right), lengths 0, 1, page + 1 and several pages, shuffled block tables, NaN in every
cache row no sequence owns, get_mla_metadata's splits and forced ones (1, 3: the split kernel and the
sm_100a combine), pages of 64 and of 8 (the row gather), the same bits twice.
"""
import pytest

from tests._mla_helpers import forced_metadata as _metadata
from tests._mla_helpers import paged_latent

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    if tuple(require_arch(10)) != (10, 0):
        pytest.skip("the sm_100a MLA decode runs on compute capability 10.0 only")
    return pytest.importorskip("torch")


CASES = [  # lens, seqlen_q, heads, splits (None: get_mla_metadata's), FP8 cache, page size
    ((65, 0, 1, 300), 1, 16, None, False, 64),
    ((65, 0, 1, 300), 2, 16, None, True, 64),
    ((4096, 129, 64), 1, 64, 3, False, 64),
    ((4096, 129, 64), 2, 128, 3, True, 64),
    ((1000, 1), 2, 32, 1, False, 64),
    ((777, 65, 0), 1, 128, None, True, 64),
    ((300, 7, 8, 0), 2, 16, None, False, 8),       # the row gather (pages without 16-row boxes)
    ((300, 7, 8, 0), 1, 16, 1, False, 8),
]


@pytest.mark.parametrize("lens,seqlen_q,heads,splits,fp8,page", CASES)
def test_mla_decode_sm100_matches_reference(torch, lens, seqlen_q, heads, splits, fp8, page):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    from fa4mlir.testing_mla import check_mla, dequantize_fp8_cache, quantize_fp8_cache
    q, kv, table, _ = paged_latent(torch, lens, seqlen_q, heads, page, 0, spare_pages=3, junk=-1,
                                   scale=4 if fp8 else 1)
    q, kv = q.bfloat16(), kv.bfloat16()
    cache = quantize_fp8_cache(kv) if fp8 else kv
    table, seqlens = torch.from_numpy(table), torch.tensor(lens, dtype=torch.int32)
    qc, cc, tc, sc = q.cuda(), cache.cuda(), table.cuda(), seqlens.cuda()
    if splits is None:
        meta, num_splits = get_mla_metadata(sc, seqlen_q * heads, 1, is_fp8_kvcache=fp8)
    else:
        meta, num_splits = _metadata(torch, splits, len(lens))
    runs = [flash_mla_with_kvcache(qc, cc, tc, sc, 512, meta, num_splits, causal=True, is_fp8_kvcache=fp8)
            for _ in range(2)]
    torch.cuda.synchronize()
    (out, lse), (again, lse2) = runs
    assert out.shape == (len(lens), seqlen_q, heads, 512) and lse.shape == (len(lens), heads, seqlen_q)
    assert torch.equal(out, again) and torch.equal(lse, lse2)          # deterministic
    ref_kv = dequantize_fp8_cache(cache) if fp8 else kv
    check_mla(q, ref_kv, table, seqlens, out.cpu().float(), lse.cpu(), causal=True)


def test_mla_decode_sm100_typed_errors_on_device(torch):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention import errors as E
    q, kv, table, _ = paged_latent(torch, (65,), 1, 96, 64, 0, spare_pages=3, junk=-1)
    meta, num_splits = _metadata(torch, 1, 1)
    with pytest.raises(E.ShapeError, match="on sm_100"):          # 96 heads: the sm_90a kernels' only
        flash_mla_with_kvcache(q.bfloat16().cuda(), kv.bfloat16().cuda(), torch.from_numpy(table).cuda(),
                               torch.tensor([65], dtype=torch.int32).cuda(), 512, meta, num_splits)
