"""flash_attn_with_kvcache and flash_attn_varlen_func(page_table=) with window_size, attention_chunk,
softcap and sinks on an sm_90 GPU, from the bundle (FA4MLIR_BUNDLE built with `--set decode` and
`--set attention-varlen`, or `--set bench` + `--set gpu-tests`): the decode kernel's compile-time
mask and score-modifier variants (kernel_sets.DECODE_MASK_CASES, VARLEN_PAGED_MASK_CASES), split
(forced num_splits 3: the combine adds the sinks; splits past the live range are empty) and unsplit
(num_splits 1: the epilogue adds them), by the FA rule per sequence against testing.compare_attention
(float64/float32 attention_math with the same mask, cap and sinks) over the keys gathered through
the page table. Lengths 0, 1, shorter than the window (a window wider than the sequence), around
tile edges and long (the window skips most KV tiles), seqlen_q 1 and 4, GQA and MQA; NaN in every
unused page and past every length, and NaN-poisoned out before the call.

tests/test_kvcache_mask_interpret.py checks the same kernels' numerics on the interpreter first.
"""
import zlib

import pytest

from fa4mlir.kernel_sets import DECODE_MASK_CASES, VARLEN_PAGED_MASK_CASES

pytestmark = pytest.mark.gpu
NAN = float("nan")
LENGTHS = [0, 1, 50, 127, 128, 129, 700, 3000]


@pytest.fixture(scope="module")
def torch(bundle, require_arch):
    require_arch(9)
    return pytest.importorskip("torch")


def _ids(x):
    return str(x).replace(" ", "")


def _cache(torch, gen, lengths, page, kv_heads, d, dtype, capacity):
    """(k_cache, v_cache, page_table or None): NaN wherever no sequence owns a key."""
    batch = len(lengths)
    if page is None:
        k, v = (torch.full((batch, capacity, kv_heads, d), NAN) for _ in range(2))
        for b, n in enumerate(lengths):
            k[b, :n], v[b, :n] = (torch.randn(n, kv_heads, d, generator=gen) for _ in range(2))
        return k.to(dtype).cuda(), v.to(dtype).cuda(), None
    max_pages = -(-capacity // page)
    num_pages = batch * max_pages + 3
    k, v = (torch.full((num_pages, page, kv_heads, d), NAN) for _ in range(2))
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.full((batch, max_pages), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(lengths):
        pages = -(-n // page)
        table[b, :pages] = perm[used:used + pages].to(torch.int32)
        used += pages
        t = torch.arange(n)
        rows = table[b, t // page].long() * page + t % page
        for x in (k, v):
            x.view(-1, kv_heads, d)[rows] = torch.randn(n, kv_heads, d, generator=gen)
    return k.to(dtype).cuda(), v.to(dtype).cuda(), table.cuda()


def _rows(k, v, table, b, n, page):
    if table is None:
        return k[b, :n], v[b, :n]
    t = table.new_tensor(range(n)).long()
    rows = table[b, t // page].long() * page + t % page
    return (x.reshape(-1, *x.shape[2:])[rows] for x in (k, v))


def _check_row_empty(torch, out, lse, sinks, what):
    assert (out == 0).all(), f"{what}: a sequence of no key must give out 0"
    if sinks is None:
        assert torch.isposinf(lse).all(), what
    else:
        assert torch.allclose(lse, sinks.view(-1, *([1] * (lse.dim() - 1))).expand_as(lse), atol=1e-5), what


def _kvcache_case(torch, case, num_splits, seqlen_q, heads, kv_heads, seed_extra=0):
    import fa4mlir
    from fa4mlir.testing import compare_attention
    dtype, d, page, causal, window, chunk, softcap, sinks_on = case
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    # the seed leaves num_splits out: test_kvcache_sinks_mqa_and_split_counts_agree compares two split
    # counts on the same inputs
    gen = torch.Generator().manual_seed(zlib.crc32(repr((case, seqlen_q, heads, seed_extra)).encode()))
    k, v, table = _cache(torch, gen, LENGTHS, page, kv_heads, d, tdt, max(LENGTHS) + 7)
    q = torch.randn(len(LENGTHS), seqlen_q, heads, d, generator=gen).to(tdt).cuda()
    sinks = (torch.randn(heads, generator=gen) * 2).cuda() if sinks_on else None
    lens = torch.tensor(LENGTHS, dtype=torch.int32).cuda()
    out = torch.full_like(q, NAN)
    kw = dict(causal=causal, window_size=window, attention_chunk=chunk, softcap=5.0 if softcap else 0.0, sinks=sinks)
    res, lse = fa4mlir.flash_attn_with_kvcache(q, k, v, lens, table, num_splits=num_splits, out=out, return_lse=True,
                                               **kw)
    torch.cuda.synchronize()
    assert res.data_ptr() == out.data_ptr()
    for b, n in enumerate(LENGTHS):
        if n == 0:
            _check_row_empty(torch, out[b], lse[b], sinks, f"sequence {b}")
            continue
        k_rows, v_rows = _rows(k, v, table, b, n, page)
        r = compare_attention(q[b:b + 1], k_rows[None], v_rows[None], out[b:b + 1], lse[b:b + 1], d ** -0.5, **kw)
        assert r["ok"], (b, n, r)
    return out, lse


@pytest.mark.parametrize("num_splits", [1, 3, None])
@pytest.mark.parametrize("seqlen_q", [1, 4])
@pytest.mark.parametrize("case", DECODE_MASK_CASES, ids=_ids)
def test_kvcache_masks_and_mods(torch, case, num_splits, seqlen_q):
    _kvcache_case(torch, case, num_splits, seqlen_q, 8, 2)


@pytest.mark.parametrize("case", [c for c in DECODE_MASK_CASES if c[7]], ids=_ids)
def test_kvcache_sinks_mqa_and_split_counts_agree(torch, case):
    """MQA (8 query heads over one KV head: one packed M tile of 8 x seqlen_q rows); the same inputs
    give the same out up to the combine's rounding at 1 and 5 splits (each adds the sinks once)."""
    one, lse_one = _kvcache_case(torch, case, 1, 2, 8, 1, seed_extra=7)
    five, lse_five = _kvcache_case(torch, case, 5, 2, 8, 1, seed_extra=7)
    assert (one - five).abs().max().item() < 2e-2 and (lse_one - lse_five).abs().max().item() < 1e-3


@pytest.mark.parametrize("long", [False, True])
@pytest.mark.parametrize("case", VARLEN_PAGED_MASK_CASES, ids=_ids)
def test_varlen_page_table_masks_and_mods(torch, bundle, case, long):
    """flash_attn_varlen_func(page_table=) with the case's window, softcap and sinks: a short
    capacity (unsplit) and a long one (split, the combine adds the sinks)."""
    from fa4mlir import flash_attn_varlen_func
    from fa4mlir.testing import compare_attention
    dtype, d, page, causal, window, chunk, softcap, sinks_on = case
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    gen = torch.Generator().manual_seed(zlib.crc32(repr((case, long)).encode()))
    seqlens_q = (3, 0, 1, 130, 40, 2)
    seqused_k = (8000, 5, 0, 300, page + 1, 1) if long else (page - 1, 5, 0, 300, page + 1, page)
    capacity = 8192 if long else 320
    heads, kv_heads = 4, 2
    k, v, table = _cache(torch, gen, seqused_k, page, kv_heads, d, tdt, capacity)
    total_q = sum(seqlens_q) + 3
    q = torch.randn(total_q, heads, d, generator=gen).to(tdt).cuda()
    cu_q = torch.tensor([0, *torch.tensor(seqlens_q).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    used = torch.tensor(seqused_k, dtype=torch.int32, device="cuda")
    sinks = (torch.randn(heads, generator=gen) * 2).cuda() if sinks_on else None
    out = torch.full_like(q, NAN)
    lse = torch.full((heads, total_q), NAN, device="cuda")
    kw = dict(causal=causal, window_size=window, attention_chunk=chunk, softcap=5.0 if softcap else 0.0, sinks=sinks)
    flash_attn_varlen_func(q, k, v, cu_q, None, max(seqlens_q), capacity, seqused_k=used, page_table=table, out=out,
                           lse=lse, bundle=bundle, **kw)
    torch.cuda.synchronize()
    for b, (nq, nk) in enumerate(zip(seqlens_q, seqused_k)):
        q0 = int(cu_q[b])
        if nq == 0:
            continue
        if nk == 0:
            _check_row_empty(torch, out[q0:q0 + nq], lse[:, q0:q0 + nq], sinks, f"sequence {b}")
            continue
        k_rows, v_rows = _rows(k, v, table, b, nk, page)
        r = compare_attention(q[q0:q0 + nq][None], k_rows[None], v_rows[None], out[q0:q0 + nq][None],
                              lse[:, q0:q0 + nq][None], d ** -0.5, **kw)
        assert r["ok"], (b, r)
