"""Chunked prefill over a paged pool on the GPU through the sm_90a PREFILL kernel (the varlen kernel over
the pools, AttnConfig.page_size: kernel_sets.VARLEN_PAGED_PREFILL_CASES, in the attention-varlen and
gpu-tests sets), from the bundle, through flash_attn_varlen_func(..., page_table=) with max_seqlen_q >=
varlen_paged.PREFILL_MIN_SEQLEN_Q (note "Which kernel": these calls run that kernel, asserted per case).

Per case (tests/gpu/test_varlen_paged_gpu.py's _run): a shuffled pool with NaN in every unused page and
every row at or past a sequence's length, lengths 0, 1, page - 1, page, page + 1, query chunks longer
than their keys (causal rows that see no key: out 0, lse +inf), GQA; NaN-poisoned out and lse with packed
rows past the last sequence, which the one launch leaves untouched. The FA rule per sequence against the
keys gathered through the page table (fa4mlir.testing.compare_attention)."""
import pytest

from fa4mlir.kernel_sets import VARLEN_PAGED_PREFILL_CASES
from tests.gpu.test_varlen_paged_gpu import _run

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _check_prefill_runs(case, seqlens_q):
    from fa4mlir.attention.varlen_paged import PREFILL_HEAD_DIMS, PREFILL_MIN_SEQLEN_Q
    from fa4mlir.kernels.attention_sm90_config_varlen import paged_varlen_config
    dtype, d, causal, page = case
    assert max(seqlens_q) >= PREFILL_MIN_SEQLEN_Q and d in PREFILL_HEAD_DIMS
    assert paged_varlen_config(dtype, d, causal, page) is not None


def _ids(c):
    return f"{c[0]}-d{c[1]}-{'causal' if c[2] else 'full'}-page{c[3]}"


@pytest.mark.parametrize("case", VARLEN_PAGED_PREFILL_CASES, ids=_ids)
def test_paged_prefill_edges(attn_bundle, case):
    dtype, d, causal, page = case
    seqlens_q = (300, 1, 3, 0, 257, 40, 2)
    seqused_k = (page + 1, page, max(page - 1, 1), 7, 1000, 1, 0)
    _check_prefill_runs(case, seqlens_q)
    max_pages = -(-1000 // page) + 1
    tail_out, tail_lse = _run(attn_bundle, (dtype, d, page), seqlens_q, seqused_k, max_pages, 8, 2, causal)
    assert tail_out.isnan().all() and tail_lse.isnan().all()      # one launch: rows no sequence owns untouched


@pytest.mark.parametrize("case", VARLEN_PAGED_PREFILL_CASES[:2], ids=_ids)
def test_paged_prefill_chunks(attn_bundle, case):
    """Chunks of 512 and 384 new queries after 1536 and 616 cached keys (prefill_chunked's shape, smaller),
    GQA 4."""
    dtype, d, causal, page = case
    seqlens_q, seqused_k = (512, 384), (2048, 1000)
    _check_prefill_runs(case, seqlens_q)
    tail_out, _ = _run(attn_bundle, (dtype, d, page), seqlens_q, seqused_k, -(-2048 // page) + 2, 16, 4, causal)
    assert tail_out.isnan().all()
