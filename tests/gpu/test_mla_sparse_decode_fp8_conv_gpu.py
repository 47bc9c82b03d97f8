"""flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...) with FA4MLIR_MLA_SPARSE_FP8_CONVERTER=1: the
opt-in converter-warpgroup kernel (MLASparseDecodeConfig.fp8_converter; attention_mla_sparse_sm90, note
"FP8 converter") on an sm_90 GPU with the `mla` bundle set, on the default kernel's GPU cases
(tests/gpu/test_mla_sparse_decode_gpu.py's FP8 cases): by the FA rule against the float64 reference over the
dequantized cache, and bit for bit the default FP8 kernel's out and lse (the same bf16 tile values, the
same GEMMs and softmax in the same order). tests/test_mla_sparse_decode_fp8_conv.py proves it deviceless.
"""
import numpy as np
import pytest

from tests.gpu.test_mla_sparse_decode_gpu import SHAPES, _case, _check, _metadata, _to_cuda

# the FP8 cases of test_mla_sparse_decode_gpu (its SHAPES over FlashMLA's FP8 cache)
CASES = [(*c[:6], *c[7:]) for c in SHAPES]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits,padded", CASES)
def test_converter_matches_reference_and_the_default_kernel(torch, monkeypatch, batch, seqlen_q, heads, topk, pages,
                                                            page, with_lengths, splits, padded):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    from fa4mlir.attention.mla_sparse_decode import CONVERTER_ENV
    q, cache, idx = _case(torch, batch, seqlen_q, heads, topk, pages, page, "fp8", padded=padded)
    qc, cc, ic = q.cuda(), _to_cuda(torch, cache), torch.from_numpy(idx).cuda()
    seqlens = torch.full((batch,), pages * page, dtype=torch.int32, device="cuda")
    if splits is None:
        meta, num_splits = get_mla_metadata(seqlens, seqlen_q * heads, 1, heads, is_fp8_kvcache=True, topk=topk)
    else:
        meta, num_splits = _metadata(torch, splits, batch)
    lens = None
    if with_lengths:
        lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, batch).astype(np.int32))
        lens[0] = 0
        lens[1 % batch] = topk // 3
    kw = dict(is_fp8_kvcache=True, indices=ic, topk_length=None if lens is None else lens.cuda())
    monkeypatch.setenv(CONVERTER_ENV, "0")
    ref_out, ref_lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    monkeypatch.setenv(CONVERTER_ENV, "1")
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
