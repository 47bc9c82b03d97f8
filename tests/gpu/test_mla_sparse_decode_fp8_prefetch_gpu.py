"""flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...) in the FP8 variant "prefetch" (opt-in,
FA4MLIR_MLA_SPARSE_FP8_VARIANT=prefetch: the converter with its rolling prefetch, attention_mla_sparse_prefetch_sm90
note "FP8 converter prefetch") on an sm_90 GPU with the `mla` bundle set (also in gpu-tests and bench), on
tests/gpu/test_mla_sparse_decode_gpu.py's FP8 cases (-1 padding and out-of-range entries, topk_length 0 and short,
16 / 64 / 80 / 128 heads, padded pages, split and unsplit): by the FA rule against the float64 reference over the
dequantized cache, and bit for bit the default converter kernel's out and lse (the same bf16 tile values, GEMMs and
softmax order). Each call's kernel is asserted from the host's plan. tests/test_mla_sparse_decode_fp8_prefetch.py
proves it deviceless.
"""
import pytest

from tests.gpu.test_mla_sparse_decode_fp8_conv_gpu import CASES, _runs, fp8_call
from tests.gpu.test_mla_sparse_decode_gpu import _check

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits,padded", CASES)
def test_prefetch_matches_reference_and_the_default_converter(torch, monkeypatch, batch, seqlen_q, heads, topk,
                                                             pages, page, with_lengths, splits, padded):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention.mla_sparse_decode import VARIANT_ENV
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = fp8_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                     with_lengths, splits, padded)
    monkeypatch.delenv(VARIANT_ENV, raising=False)
    ran = _runs(torch, qc, cc, ic, meta, num_splits, kw)
    assert ran.fp8_converter and not ran.converter_prefetch
    ref_out, ref_lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    monkeypatch.setenv(VARIANT_ENV, "prefetch")
    assert _runs(torch, qc, cc, ic, meta, num_splits, kw).converter_prefetch is True
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
