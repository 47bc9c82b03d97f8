"""flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...) in both FP8 sparse decode variants on an sm_90 GPU
with the `mla` bundle set (also in gpu-tests), on tests/gpu/test_mla_sparse_decode_gpu.py's FP8 cases: the
converter-warpgroup kernel FP8_DECODE_DEFAULT_RULE picks (knob unset; MLASparseDecodeConfig.fp8_converter,
attention_mla_sparse_sm90 note "FP8 converter") by the FA rule against the float64 reference over the
dequantized cache, and bit for bit the gather kernel's out and lse (FA4MLIR_MLA_SPARSE_FP8_VARIANT=gather:
the same bf16 tile values, the same GEMMs and softmax in the same order). Each call's kernel is asserted
from the host's plan. tests/test_mla_sparse_decode_fp8_conv.py proves it deviceless.
"""
import pytest

from tests.gpu._mla_sparse_common import decode_lengths
from tests.gpu.test_mla_sparse_decode_gpu import SHAPES, _case, _check, _metadata, _to_cuda

# the FP8 cases of test_mla_sparse_decode_gpu (its SHAPES over FlashMLA's FP8 cache)
CASES = [(*c[:6], *c[7:]) for c in SHAPES]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits,padded", CASES)
def test_default_converter_matches_reference_and_the_gather_kernel(torch, monkeypatch, batch, seqlen_q, heads, topk,
                                                                  pages, page, with_lengths, splits, padded):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention.mla_sparse_decode import VARIANT_ENV, requested_variant
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = fp8_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                     with_lengths, splits, padded)
    monkeypatch.setenv(VARIANT_ENV, "gather")
    assert _runs(torch, qc, cc, ic, meta, num_splits, kw).fp8_converter is False
    ref_out, ref_lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    monkeypatch.delenv(VARIANT_ENV)
    assert requested_variant() == "default" and _runs(torch, qc, cc, ic, meta, num_splits, kw).fp8_converter is True
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def fp8_call(torch, batch, seqlen_q, heads, topk, pages, page, with_lengths, splits, padded):
    """One FP8 sparse decode call of a CASES row (shared by the FP8 variants' GPU tests): the CPU inputs (q, cache,
    idx), their CUDA copies (qc, cc, ic), the metadata and splits (get_mla_metadata's, or `splits` forced), the
    topk_length tensor (None, or seeded lengths with a 0 and a short one) and flash_mla_with_kvcache's keywords."""
    from fa4mlir import get_mla_metadata
    q, cache, idx = _case(torch, batch, seqlen_q, heads, topk, pages, page, "fp8", padded=padded)
    qc, cc, ic = q.cuda(), _to_cuda(torch, cache), torch.from_numpy(idx).cuda()
    seqlens = torch.full((batch,), pages * page, dtype=torch.int32, device="cuda")
    if splits is None:
        meta, num_splits = get_mla_metadata(seqlens, seqlen_q * heads, 1, heads, is_fp8_kvcache=True, topk=topk)
    else:
        meta, num_splits = _metadata(torch, splits, batch)
    lens = None
    if with_lengths:
        lens = decode_lengths(torch, batch, topk)
    kw = dict(is_fp8_kvcache=True, indices=ic, topk_length=None if lens is None else lens.cuda())
    return q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw


def _runs(torch, q, k_cache, indices, meta, num_splits, kw):
    """The sparse decode kernel config the host picks for this call now (its checks, as flash_mla_with_kvcache
    makes them)."""
    from fa4mlir.attention import mla_sparse_decode as sd
    from fa4mlir.attention.checks import read_tensor
    lens = kw["topk_length"]
    problem = sd.check_sparse_decode_inputs(*(read_tensor(n, x, sd.ENTRY) for n, x in (
        ("q", q), ("k_cache", k_cache), ("indices", indices))), 512, read_tensor("meta", meta, sd.ENTRY),
        read_tensor("num_splits", num_splits, sd.ENTRY),
        topk_length=None if lens is None else read_tensor("topk_length", lens, sd.ENTRY), is_fp8_kvcache=True)
    return problem.config(problem.splits > 1)
