"""flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...) in the FP8 variant "crossover_stasync_hint" (opt-in,
FA4MLIR_MLA_SPARSE_FP8_VARIANT=crossover_stasync_hint: crossover_stasync with FlashMLA's cache hints on the
converter's row loads, attention_mla_sparse_crossover_sm90 note "Load hints") on an sm_90 GPU with the `mla` bundle
set (also in gpu-tests and bench), on two of tests/gpu/test_mla_sparse_decode_fp8_crossover_gpu.py's cases, one for
each of its two kernels: unsplit without topk_length (bench mla's call's kernel), and with topk_length (0 and short)
and a split. By the FA rule against the float64 reference over the dequantized cache, and bit for bit the rule's
kernel's out and lse (knob unset: crossover_stasync at 128 heads; the hints change no value). Each call's kernel is
asserted from the host's plan. tests/test_mla_sparse_decode_fp8_hint.py proves it deviceless.
"""
import pytest

from tests.gpu.test_mla_sparse_decode_fp8_conv_gpu import _runs, fp8_call
from tests.gpu.test_mla_sparse_decode_gpu import _check

# (batch, seqlen_q, heads, topk, pages, page, with_lengths, splits, padded): XO_CASES' unsplit 128-head case without
# lengths, and its topk_length + split one
HINT_CASES = [(24, 2, 128, 2048, 900, 64, False, 1, True), (3, 2, 128, 1024, 70, 61, True, 3, True)]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


@pytest.mark.parametrize("batch,seqlen_q,heads,topk,pages,page,with_lengths,splits,padded", HINT_CASES)
def test_load_hints_give_the_rules_bits(torch, monkeypatch, batch, seqlen_q, heads, topk, pages, page, with_lengths,
                                        splits, padded):
    from fa4mlir import flash_mla_with_kvcache
    from fa4mlir.attention.mla_sparse_decode import VARIANT_ENV
    q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw = fp8_call(torch, batch, seqlen_q, heads, topk, pages, page,
                                                                     with_lengths, splits, padded)
    monkeypatch.delenv(VARIANT_ENV, raising=False)  # FP8_DECODE_CROSSOVER_RULE: crossover_stasync at 128 heads
    ran = _runs(torch, qc, cc, ic, meta, num_splits, kw)
    assert ran.crossover_stasync and not ran.load_hints
    ref_out, ref_lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    monkeypatch.setenv(VARIANT_ENV, "crossover_stasync_hint")
    ran = _runs(torch, qc, cc, ic, meta, num_splits, kw)
    assert ran.crossover_stasync and ran.load_hints and ran.split == (splits > 1)
    assert ran.topk_length == with_lengths
    out, lse = flash_mla_with_kvcache(qc, cc, None, None, 512, meta, num_splits, **kw)
    torch.cuda.synchronize()
    _check(torch, q, cache, idx, out, lse, None if lens is None else lens.numpy())
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
