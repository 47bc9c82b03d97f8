"""Chunked prefill of ragged batches over a paged pool on the GPU, from the bundle (the gpu-tests
set's attention-varlen kernels: kernel_sets.VARLEN_PAGED_CASES, the decode kernel's varlen_q
variants, split and unsplit, and their combines), through flash_attn_varlen_func(..., page_table=).

Per case: a shuffled pool with NaN in every unused page and every row at or past a sequence's
length, lengths 0, 1, page - 1, page, page + 1, query chunks longer than their keys (causal rows
that see no key: out 0, lse +inf), GQA; NaN-poisoned out and lse with packed rows past the last
sequence. A short capacity runs the unsplit variant (those rows stay NaN), a long one splits (the
combine writes them: out 0, lse +inf). The FA rule per sequence against the keys gathered through
the page table (fa4mlir.testing.compare_attention)."""
import zlib

import pytest

from fa4mlir.kernel_sets import VARLEN_PAGED_CASES

pytestmark = pytest.mark.gpu
SPARE = 5


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _pool(torch, gen, lens, page, max_pages, kv_heads, d, dtype):
    """Pools [num_pages, page, kv_heads, d] (NaN where no sequence has a key) and a shuffled table."""
    batch = len(lens)
    num_pages = batch * max_pages + 3
    k, v = (torch.full((num_pages, page, kv_heads, d), float("nan"), device="cuda", dtype=dtype) for _ in range(2))
    perm = torch.randperm(num_pages, device="cuda", generator=gen).tolist()
    table = torch.full((batch, max_pages), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(lens):
        pages = -(-n // page)
        table[b, :pages] = torch.tensor(perm[used:used + pages], dtype=torch.int32)
        used += pages
        t = torch.arange(n)
        rows = (table[b, t // page].long() * page + t % page).cuda()
        for x in (k, v):
            x.view(-1, kv_heads, d)[rows] = torch.randn(n, kv_heads, d, device="cuda", generator=gen).to(dtype)
    return k, v, table.cuda()


def _run(attn_bundle, case, seqlens_q, seqused_k, max_pages, heads, kv_heads, causal, window_size=(-1, -1),
         attention_chunk=0, softcap=0.0, sinks=False):
    """One call on the case's shapes (``sinks``: a float32 [heads] logit tensor drawn from the seed), the
    FA rule per sequence (a sequence of no key: out 0, lse +inf or its head's sink); the packed rows past
    the last sequence returned."""
    import torch
    from fa4mlir import flash_attn_varlen_func
    from fa4mlir.testing import compare_attention
    dtype, d, page = case
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((case, seqlens_q, seqused_k)).encode()))
    k, v, table = _pool(torch, gen, seqused_k, page, max_pages, kv_heads, d, tdt)
    total_q = sum(seqlens_q) + SPARE
    q = torch.randn(total_q, heads, d, device="cuda", dtype=tdt, generator=gen)
    cu_q = torch.tensor([0, *torch.tensor(seqlens_q).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    used = torch.tensor(seqused_k, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    lse = torch.full((heads, total_q), float("nan"), device="cuda")
    sink = torch.randn(heads, device="cuda", generator=gen) * 2 if sinks else None
    mods = dict(window_size=window_size, attention_chunk=attention_chunk, softcap=softcap)
    flash_attn_varlen_func(q, k, v, cu_q, None, max(seqlens_q), max_pages * page, seqused_k=used, page_table=table,
                           causal=causal, out=out, lse=lse, bundle=attn_bundle, sinks=sink, **mods)
    torch.cuda.synchronize()
    for b, (nq, nk) in enumerate(zip(seqlens_q, seqused_k)):
        if nq == 0:
            continue
        q0 = int(cu_q[b])
        if nk == 0 and sink is not None:    # no key: out 0, lse = the head's sink
            assert (out[q0:q0 + nq] == 0).all()
            assert torch.allclose(lse[:, q0:q0 + nq], sink[:, None].expand(-1, nq), atol=1e-5)
            continue
        t = torch.arange(nk, device="cuda")
        rows = table[b, t // page].long() * page + t % page
        k_rows, v_rows = (x.reshape(-1, kv_heads, d)[rows] for x in (k, v))
        r = compare_attention(q[q0:q0 + nq][None], k_rows[None], v_rows[None], out[q0:q0 + nq][None],
                              lse[:, q0:q0 + nq][None], d ** -0.5, causal, sinks=sink, **mods)
        assert r["ok"], (b, r)
    return out[int(cu_q[-1]):], lse[:, int(cu_q[-1]):]


def _ids(x):
    return str(x).replace(" ", "")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("case", VARLEN_PAGED_CASES, ids=_ids)
def test_short_cache_unsplit(attn_bundle, case, causal):
    page = case[2]
    seqlens_q = (3, 0, 1, 130, 40, 2)
    seqused_k = (max(page - 1, 1), 5, 0, 300, page + 1, page)
    tail_out, tail_lse = _run(attn_bundle, case, seqlens_q, seqused_k, -(-300 // page) + 1, 4, 2, causal)
    assert tail_out.isnan().all() and tail_lse.isnan().all()     # one split: rows no sequence owns untouched


@pytest.mark.parametrize("case", VARLEN_PAGED_CASES, ids=_ids)
def test_long_cache_splits(attn_bundle, case):
    """A capacity of 8192 keys: more KV tiles than one split takes (kvcache.plan_problem's
    balance_splits), so the split kernel and the combine run."""
    page = case[2]
    seqlens_q = (200, 1, 0, 64)
    seqused_k = (8000, 1, 70, page + 1)
    tail_out, tail_lse = _run(attn_bundle, case, seqlens_q, seqused_k, -(-8192 // page), 8, 1, True)
    assert (tail_out == 0).all() and tail_lse.isposinf().all()


def test_packed_keys_with_a_page_table_are_a_typed_error(attn_bundle):
    """(window_size, softcap, sinks with a page_table: tests/gpu/test_kvcache_mask_gpu.py)"""
    import torch
    from fa4mlir import SeqlensError, flash_attn_varlen_func
    q = torch.randn(4, 2, 128, device="cuda", dtype=torch.bfloat16)
    pool = torch.zeros(4, 64, 2, 128, device="cuda", dtype=torch.bfloat16)
    table = torch.zeros(1, 2, dtype=torch.int32, device="cuda")
    cu = torch.tensor([0, 4], dtype=torch.int32, device="cuda")
    with pytest.raises(SeqlensError, match="cu_seqlens_k"):
        flash_attn_varlen_func(q, pool, pool, cu, cu, 4, 128, page_table=table, bundle=attn_bundle)
