"""Chunked prefill over a paged pool on the GPU through the sm_90a PREFILL kernel (the varlen kernel over
the pools, AttnConfig.page_size: kernel_sets.VARLEN_PAGED_PREFILL_CASES, in the attention-varlen and
gpu-tests sets), from the bundle, through flash_attn_varlen_func(..., page_table=) with max_seqlen_q >=
varlen_paged.PREFILL_MIN_SEQLEN_Q (note "Which kernel": these calls run that kernel, asserted per case).

Per case (tests/gpu/test_varlen_paged_gpu.py's _run): a shuffled pool with NaN in every unused page and
every row at or past a sequence's length, lengths 0, 1, page - 1, page, page + 1, query chunks longer
than their keys (causal rows that see no key: out 0, lse +inf), GQA; NaN-poisoned out and lse with packed
rows past the last sequence, which the one launch leaves untouched. The FA rule per sequence against the
keys gathered through the page table (fa4mlir.testing.compare_attention).

The mask / score-modifier variants (kernel_sets.VARLEN_PAGED_PREFILL_MOD_CASES: a sliding window, window +
softcap + sinks, attention_chunk over pages of 16, a two-sided window with sinks, softcap alone) on
MOD_SHAPES: a 600-query chunk after 1400 cached keys (its query tiles skip the KV tiles left of the window
or chunk), lengths 0, 1, page + 1, a chunk of 257 (a 1-row last query tile), queries without keys (lse = the
head's sink with sinks), GQA 4; each call asserted to run the set's kernel (`mod_route`, also checked
deviceless: tests/test_varlen_paged_prefill.py)."""
import pytest

from fa4mlir.kernel_sets import VARLEN_PAGED_PREFILL_CASES, VARLEN_PAGED_PREFILL_MOD_CASES
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


# (seqlens_q, seqused_k as a function of the page size, heads, kv_heads) of the mod variants' calls
MOD_SEQLENS_Q = (600, 1, 0, 300, 257, 2, 40)
MOD_HEADS, MOD_KV_HEADS, MOD_MAX_KEYS = 8, 2, 2000
MOD_SOFTCAP = 30.0


def mod_shapes(page: int) -> tuple:
    """(seqlens_q, seqused_k, max_pages) of a mod case's call."""
    return MOD_SEQLENS_Q, (MOD_MAX_KEYS, 5, 0, 1500, page + 1, 0, 41), -(-MOD_MAX_KEYS // page) + 1


def mod_route(case):
    """The kernel flash_attn_varlen_func picks for the case's call (varlen_paged.prefill_config of the problem
    the host checks would build), to compare with the set's (kernel_sets.paged_prefill_mod_config)."""
    from fa4mlir.attention.kvcache import KVCacheOperand
    from fa4mlir.attention.varlen_paged import VarlenPagedProblem, prefill_config
    dtype, d, causal, page, window, chunk, softcap, sinks = case
    seqlens_q, _, max_pages = mod_shapes(page)
    cache = KVCacheOperand(True, dtype, len(seqlens_q) * max_pages + 3, page, max_pages, MOD_KV_HEADS, d)
    problem = VarlenPagedProblem(len(seqlens_q), max(seqlens_q), max_pages * page, sum(seqlens_q), MOD_HEADS, d,
                                 dtype, cache, causal, d ** -0.5, True, window, chunk,
                                 MOD_SOFTCAP if softcap else 0.0, sinks)
    return prefill_config(problem)


def _mod_ids(c):
    return (f"{c[0]}-page{c[3]}-{'causal' if c[2] else 'full'}-w{c[4][0]}_{c[4][1]}-chunk{c[5]}"
            f"{'-softcap' * c[6]}{'-sinks' * c[7]}")


@pytest.mark.parametrize("case", VARLEN_PAGED_PREFILL_MOD_CASES, ids=_mod_ids)
def test_paged_prefill_masks_and_mods(attn_bundle, case):
    from fa4mlir.kernel_sets import paged_prefill_mod_config
    dtype, d, causal, page, window, chunk, softcap, sinks = case
    assert mod_route(case) == paged_prefill_mod_config(case)
    seqlens_q, seqused_k, max_pages = mod_shapes(page)
    tail_out, tail_lse = _run(attn_bundle, (dtype, d, page), seqlens_q, seqused_k, max_pages, MOD_HEADS,
                              MOD_KV_HEADS, causal, window_size=window, attention_chunk=chunk,
                              softcap=MOD_SOFTCAP if softcap else 0.0, sinks=sinks)
    assert tail_out.isnan().all() and tail_lse.isnan().all()      # one launch: rows no sequence owns untouched
