"""flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...) in the FP8 variant "crossover" (opt-in,
FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover: the converter over a cluster of a token's two 64-head CTAs, each
converting half of every tile into both, attention_mla_sparse_crossover_sm90 note "Crossover") on an sm_90 GPU
with the `mla` bundle set (also in gpu-tests and bench), on tests/gpu/test_mla_sparse_decode_gpu.py's FP8 cases
of 128 heads (-1 padding and out-of-range entries, padded pages, split and unsplit) plus one with topk_length (0
and short): by the FA rule against the float64 reference over the dequantized cache, and bit for bit the default
converter kernel's out and lse (the same dequantized bf16 tile values, GEMMs and softmax order). Each call's
kernel is asserted from the host's plan; 64 heads are refused before launch. tests/test_mla_sparse_decode_fp8_crossover.py
proves it deviceless.
"""
import pytest

from tests.gpu.test_mla_sparse_decode_fp8_conv_gpu import CASES, _runs, fp8_call
from tests.gpu.test_mla_sparse_decode_gpu import _case, _check, _to_cuda

# the 128-head FP8 cases, and one with topk_length and a split
XO_CASES = [c for c in CASES if c[2] == 128] + [(3, 2, 128, 1024, 70, 61, True, 3, True)]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits,padded", XO_CASES)
def test_crossover_matches_reference_and_the_default_converter(torch, monkeypatch, batch, seqlen_q, heads, topk,
                                                              pages, page, with_lengths, splits, padded):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention.mla_sparse_decode import VARIANT_ENV
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = fp8_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                     with_lengths, splits, padded)
    monkeypatch.setenv(VARIANT_ENV, "converter")     # the plain converter (the rule runs crossover at 128 heads)
    ran = _runs(torch, qc, cc, ic, meta, num_splits, kw)
    assert ran.fp8_converter and not ran.crossover
    ref_out, ref_lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    monkeypatch.setenv(VARIANT_ENV, "crossover")
    assert _runs(torch, qc, cc, ic, meta, num_splits, kw).crossover is True
    monkeypatch.delenv(VARIANT_ENV)                 # FP8_DECODE_CROSSOVER_RULE: the default is crossover_stasync here
    assert _runs(torch, qc, cc, ic, meta, num_splits, kw).crossover_stasync is True
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


@pytest.mark.parametrize("variant", ["crossover_lean", "crossover_stasync"])
@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits,padded", XO_CASES)
def test_lean_hand_offs_give_the_crossovers_bits(torch, monkeypatch, variant, batch, seqlen_q, heads, topk, pages,
                                                 page, with_lengths, splits, padded):
    """The FP8 variants of attention_mla_sparse_crossover_sm90's notes "Lean hand-off" and "st.async hand-off": the
    crossover's out and lse bits, and the FA rule."""
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention.mla_sparse_decode import VARIANT_ENV
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = fp8_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                     with_lengths, splits, padded)
    monkeypatch.setenv(VARIANT_ENV, "crossover")
    ref_out, ref_lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    monkeypatch.setenv(VARIANT_ENV, variant)
    ran = _runs(torch, qc, cc, ic, meta, num_splits, kw)
    assert ran.crossover_lean and ran.crossover_stasync == (variant == "crossover_stasync")
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_crossover_refuses_64_heads_before_launch(torch, monkeypatch):
    from fa4mlir import flash_mla_with_kvcache, get_mla_metadata
    from fa4mlir.attention import errors as E
    from fa4mlir.attention.mla_sparse_decode import VARIANT_ENV
    q, cache, idx = _case(torch, 2, 1, 64, 512, 20, 64, "fp8", padded=False)
    qc, cc, ic = q.cuda(), _to_cuda(torch, cache), torch.from_numpy(idx).cuda()
    seqlens = torch.full((2,), 20 * 64, dtype=torch.int32, device="cuda")
    meta, num_splits = get_mla_metadata(seqlens, 64, 1, 64, is_fp8_kvcache=True, topk=512)
    monkeypatch.setenv(VARIANT_ENV, "crossover")
    with pytest.raises(E.UnsupportedFeatureError, match="multiple of 128"):
        flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, is_fp8_kvcache=True, indices=ic)
