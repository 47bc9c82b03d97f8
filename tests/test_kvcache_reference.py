"""Deviceless: the paged / FP8 KV-cache reference (fa4mlir/testing_kvcache.py) against an
independent dense computation on the same data (testing.attention_math, torch CPU, float64):
shuffled page tables; lengths 0, 1, page-1, page, page+1 and different per sequence; page sizes 1,
16, 64, 128, 256 and non powers of two; seqlen_q 1..16 causal; GQA and MQA; every FP8 scale
granularity; appended tokens; clamped lengths; NaN in unused pages never reaching the output; the
e4m3 codec; the split-KV combine."""
from __future__ import annotations

import numpy as np
import pytest

from fa4mlir import testing_kvcache as tk

torch = pytest.importorskip("torch")
from fa4mlir.testing import attention_math  # noqa: E402  (torch needed)


def dense_attention(q_b, k_rows, v_rows, scale, causal):
    """One sequence through testing.attention_math (float64): q [Sq, H, D], k/v [L, Hkv, D]."""
    q = torch.as_tensor(q_b, dtype=torch.float64)[None]
    k = torch.as_tensor(np.asarray(k_rows, dtype=np.float64))[None]
    v = torch.as_tensor(np.asarray(v_rows, dtype=np.float64))[None]
    if k.shape[1] == 0:
        return np.zeros(q_b.shape), np.full((q_b.shape[1], q_b.shape[0]), np.inf)
    out, lse = attention_math(q, k, v, scale, causal, torch.float64)
    return out[0].numpy(), lse[0].numpy()


def lengths_for(page_size, batch):
    base = [0, 1, max(page_size - 1, 0), page_size, page_size + 1, 3 * page_size + 2]
    rng = np.random.default_rng(page_size)
    return [base[i] if i < len(base) else int(rng.integers(0, 4 * page_size + 3)) for i in range(batch)]


def build_paged(dense_k, dense_v, lengths, page_size, rng, *, fill=np.nan, extra_pages=3):
    """Scatter per-sequence rows into a pool through a shuffled page table; every pool row and table
    entry no sequence uses holds garbage (``fill`` in the pool, -1 or out-of-range in the table)."""
    batch, cap, kv_heads, d = dense_k.shape
    max_pages = tk.ceil_div(cap, page_size)
    used = [tk.ceil_div(n, page_size) for n in lengths]
    num_pages = sum(used) + extra_pages
    perm = rng.permutation(num_pages)
    pool_k = np.full((num_pages, page_size, kv_heads, d), fill, dense_k.dtype)
    pool_v = np.full_like(pool_k, fill)
    table = np.full((batch, max_pages), -1, np.int32)
    table[:, -1] = 10**6                                     # out-of-range garbage past the used pages
    nxt = 0
    for b, n in enumerate(lengths):
        for slot in range(used[b]):
            page = perm[nxt]
            nxt += 1
            table[b, slot] = page
            rows = slice(slot * page_size, min((slot + 1) * page_size, n))
            pool_k[page, : rows.stop - rows.start] = dense_k[b, rows]
            pool_v[page, : rows.stop - rows.start] = dense_v[b, rows]
    return pool_k, pool_v, table


def check_against_dense(res, q, dense_k, dense_v, lengths, scale, causal):
    for b, n in enumerate(lengths):
        ref_o, ref_lse = dense_attention(q[b], dense_k[b, :n], dense_v[b, :n], scale, causal)
        np.testing.assert_allclose(res["out"][b], ref_o, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.isinf(res["lse"][b]), np.isinf(ref_lse))
        np.testing.assert_allclose(res["lse"][b], ref_lse, rtol=1e-12, atol=1e-12)
    assert not np.isnan(res["out"]).any() and not np.isnan(res["lse"]).any()


@pytest.mark.parametrize("page_size", [1, 3, 16, 48, 64, 100, 128, 256])
@pytest.mark.parametrize("seqlen_q,heads,kv_heads", [(1, 4, 4), (3, 8, 2), (16, 6, 1)])
def test_paged_matches_dense(page_size, seqlen_q, heads, kv_heads):
    rng = np.random.default_rng(page_size * 31 + seqlen_q)
    batch, d = 7, 64
    lengths = lengths_for(page_size, batch)
    cap = tk.ceil_div(max(lengths) + 1, page_size) * page_size
    dense_k = rng.standard_normal((batch, cap, kv_heads, d))
    dense_v = rng.standard_normal((batch, cap, kv_heads, d))
    q = rng.standard_normal((batch, seqlen_q, heads, d))
    pool_k, pool_v, table = build_paged(dense_k, dense_v, lengths, page_size, rng)
    seqlens = np.array(lengths, np.int32)
    for causal in (True, False):
        res = tk.kvcache_reference(q, pool_k, pool_v, seqlens, table, causal=causal, softmax_scale=0.1)
        check_against_dense(res, q, dense_k, dense_v, lengths, 0.1, causal)
        assert res["seqlens_k"] == lengths
    # the contiguous cache with NaN past each length gives the same bits as the paged one
    contig_k, contig_v = dense_k.copy(), dense_v.copy()
    for b, n in enumerate(lengths):
        contig_k[b, n:], contig_v[b, n:] = np.nan, np.nan
    res_c = tk.kvcache_reference(q, contig_k, contig_v, seqlens, causal=True, softmax_scale=0.1)
    res_p = tk.kvcache_reference(q, pool_k, pool_v, seqlens, table, causal=True, softmax_scale=0.1)
    np.testing.assert_array_equal(res_c["out"], res_p["out"])
    np.testing.assert_array_equal(res_c["lse"], res_p["lse"])


@pytest.mark.parametrize("head_dim", [128, 256])
def test_head_dims_and_torch_inputs(head_dim):
    """torch CPU bf16 tensors in, torch float64 out; the values are the bf16-rounded inputs'."""
    g = torch.Generator().manual_seed(head_dim)
    batch, page, heads, kv_heads, sq = 3, 16, 8, 2, 2
    q = torch.randn(batch, sq, heads, head_dim, generator=g).bfloat16()
    pool = torch.randn(9, page, kv_heads, head_dim, generator=g).bfloat16()
    pool_v = torch.randn(9, page, kv_heads, head_dim, generator=g).bfloat16()
    table = torch.tensor([[4, 2, 0], [1, 8, -1], [7, 3, 5]], dtype=torch.int32)
    seqlens = torch.tensor([33, 17, 40], dtype=torch.int32)
    res = tk.kvcache_reference(q, pool, pool_v, seqlens, table)
    assert isinstance(res["out"], torch.Tensor) and res["out"].dtype == torch.float64
    assert res["k_cache"].dtype == torch.bfloat16 and torch.equal(res["k_cache"], pool)
    for b in range(batch):
        rows = [(int(table[b, t // page]), t % page) for t in range(int(seqlens[b]))]
        k_rows = torch.stack([pool[p, r] for p, r in rows]).double().numpy()
        v_rows = torch.stack([pool_v[p, r] for p, r in rows]).double().numpy()
        ref_o, ref_lse = dense_attention(q[b].double().numpy(), k_rows, v_rows, head_dim ** -0.5, True)
        np.testing.assert_allclose(res["out"][b].numpy(), ref_o, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(res["lse"][b].numpy(), ref_lse, rtol=1e-12, atol=1e-12)


def test_e4m3_codec_matches_torch():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    want = codes.view(torch.float8_e4m3fn).float().numpy()
    got = tk.e4m3_decode(codes.numpy())
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite], want[finite])
    x = np.concatenate([np.linspace(-460, 460, 20001), [0.0, -0.0, 2.0 ** -9, 2.0 ** -10, 1.0625, 1.1875]])
    mine = tk.e4m3_encode(x)
    inside = np.abs(x) <= tk.E4M3_MAX
    theirs = torch.from_numpy(x[inside]).float().to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(mine[inside], theirs)
    assert (tk.e4m3_decode(mine[~inside]) == np.sign(x[~inside]) * tk.E4M3_MAX).all()   # saturates
    assert tk.e4m3_encode(np.array([np.nan]))[0] == 0x7F


@pytest.mark.parametrize("grain", ["tensor", "kv_head", "page", "contiguous_block"])
def test_fp8_dequantises_by_granularity(grain):
    """The reference on FP8 codes equals dense attention over codes x scale (float32 product),
    with NaN in unused pages and NaN scales for pages no sequence uses."""
    rng = np.random.default_rng(len(grain))
    batch, page, heads, kv_heads, d, sq = 4, 16, 4, 2, 64, 3
    lengths = [0, 15, 16, 50]
    cap = 64
    vals_k = rng.standard_normal((batch, cap, kv_heads, d)) * 3
    vals_v = rng.standard_normal((batch, cap, kv_heads, d)) * 3
    codes_k, codes_v = tk.e4m3_encode(vals_k), tk.e4m3_encode(vals_v)
    q = rng.standard_normal((batch, sq, heads, d))
    seqlens = np.array(lengths, np.int32)
    if grain == "contiguous_block":
        block = 8
        k_scale = rng.uniform(0.5, 2, (batch, cap // block, kv_heads)).astype(np.float32)
        v_scale = rng.uniform(0.5, 2, (batch, cap // block, kv_heads)).astype(np.float32)
        for b, n in enumerate(lengths):
            k_scale[b, tk.ceil_div(n, block):] = np.nan
            codes_k[b, n:] = 0x7F                                   # NaN codes past each length
        tok_k = np.repeat(k_scale, block, axis=1)
        tok_v = np.repeat(v_scale, block, axis=1)
        res = tk.kvcache_reference(q, codes_k, codes_v, seqlens, k_scale=k_scale, v_scale=v_scale)
    else:
        pool_k, pool_v, table = build_paged(codes_k, codes_v, lengths, page, rng, fill=0x7F)
        num_pages = pool_k.shape[0]
        shape = {"tensor": (1,), "kv_head": (kv_heads,), "page": (num_pages, kv_heads)}[grain]
        k_scale = rng.uniform(0.5, 2, shape).astype(np.float32)
        v_scale = rng.uniform(0.5, 2, shape).astype(np.float32)
        tok_k = np.zeros((batch, cap, kv_heads), np.float32)
        tok_v = np.zeros_like(tok_k)
        if grain == "page":
            used = {int(p) for p in table.reshape(-1) if 0 <= p < num_pages}
            for b in range(batch):
                for t in range(lengths[b]):
                    p = table[b, t // page]
                    tok_k[b, t], tok_v[b, t] = k_scale[p], v_scale[p]
            k_scale[[p for p in range(num_pages) if p not in used]] = np.nan
        else:
            tok_k[:], tok_v[:] = np.broadcast_to(k_scale, (kv_heads,)), np.broadcast_to(v_scale, (kv_heads,))
        res = tk.kvcache_reference(q, pool_k, pool_v, seqlens, table, k_scale=k_scale, v_scale=v_scale)
    deq_k = (tk.e4m3_decode(codes_k) * tok_k[..., None].astype(np.float32)).astype(np.float64)
    deq_v = (tk.e4m3_decode(codes_v) * tok_v[..., None].astype(np.float32)).astype(np.float64)
    check_against_dense(res, q, deq_k, deq_v, lengths, d ** -0.5, True)


def test_fp8_torch_tensors():
    g = torch.Generator().manual_seed(0)
    pool = (torch.randn(4, 16, 1, 64, generator=g) * 4).to(torch.float8_e4m3fn)
    q = torch.randn(2, 1, 2, 64, generator=g).bfloat16()
    table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    seqlens = torch.tensor([20, 5], dtype=torch.int32)
    scale = torch.tensor([0.25])
    res = tk.kvcache_reference(q, pool, pool, seqlens, table, k_scale=scale, v_scale=scale)
    assert res["k_cache"].dtype == torch.float8_e4m3fn
    rows = torch.cat([pool[2], pool[0, :4]]).float() * 0.25
    ref_o, _ = dense_attention(q[0].double().numpy(), rows.numpy(), rows.numpy(), 0.125, True)
    np.testing.assert_allclose(res["out"][0].numpy(), ref_o, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("paged", [False, True])
def test_append_writes_new_tokens_and_attends_to_them(paged):
    rng = np.random.default_rng(7)
    batch, heads, kv_heads, d, page, new = 3, 4, 2, 64, 16, 4
    lengths = [0, 13, 30]
    cap = 48
    dense_k = rng.standard_normal((batch, cap, kv_heads, d))
    dense_v = rng.standard_normal((batch, cap, kv_heads, d))
    k_new = rng.standard_normal((batch, new, kv_heads, d))
    v_new = rng.standard_normal((batch, new, kv_heads, d))
    q = rng.standard_normal((batch, new, heads, d))
    seqlens = np.array(lengths, np.int32)
    after = [n + new for n in lengths]
    if paged:
        pool_k, pool_v, table = build_paged(dense_k, dense_v, after, page, rng)   # pages for the new tokens too
        for b, n in enumerate(lengths):                                         # their rows hold NaN before the call
            for t in range(n, n + new):
                pool_k[table[b, t // page], t % page] = np.nan
        res = tk.kvcache_reference(q, pool_k, pool_v, seqlens, table, k=k_new, v=v_new)
        for b, n in enumerate(lengths):
            for i in range(new):
                t = n + i
                np.testing.assert_array_equal(res["k_cache"][table[b, t // page], t % page], k_new[b, i])
        assert np.isnan(pool_k).any()                                            # the input is not written
    else:
        res = tk.kvcache_reference(q, dense_k, dense_v, seqlens, k=k_new, v=v_new)
        for b, n in enumerate(lengths):
            np.testing.assert_array_equal(res["v_cache"][b, n:n + new], v_new[b])
            np.testing.assert_array_equal(res["v_cache"][b, :n], dense_v[b, :n])
    assert res["seqlens_k"] == after
    full_k, full_v = dense_k.copy(), dense_v.copy()
    for b, n in enumerate(lengths):
        full_k[b, n:n + new], full_v[b, n:n + new] = k_new[b], v_new[b]
    check_against_dense(res, q, full_k, full_v, after, d ** -0.5, True)


def test_out_of_capacity_lengths_are_clamped():
    rng = np.random.default_rng(3)
    cache = rng.standard_normal((3, 32, 1, 64))
    q = rng.standard_normal((3, 1, 1, 64))
    res = tk.kvcache_reference(q, cache, cache, np.array([-5, 32, 10**6], np.int32))
    assert res["seqlens_k"] == [0, 32, 32]
    assert (res["out"][0] == 0).all() and np.isposinf(res["lse"][0]).all()
    kn = rng.standard_normal((3, 2, 1, 64))
    res = tk.kvcache_reference(q, cache, cache, np.array([31, 40, 5], np.int32), k=kn, v=kn)
    assert res["seqlens_k"] == [32, 32, 7]
    np.testing.assert_array_equal(res["k_cache"][0, 30:], kn[0])     # appended at capacity - new


def test_seqlen_q_beyond_the_keys_gives_empty_rows():
    rng = np.random.default_rng(4)
    cache = rng.standard_normal((1, 8, 1, 64))
    q = rng.standard_normal((1, 5, 2, 64))
    res = tk.kvcache_reference(q, cache, cache, np.array([3], np.int32))
    assert (res["out"][0, :2] == 0).all() and np.isposinf(res["lse"][0, :, :2]).all()
    assert np.isfinite(res["lse"][0, :, 2:]).all()


# ----------------------------------------------------------------------------------------------
# Split KV: partials and combine
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 300, 1000])
@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("sq,causal", [(1, True), (4, True), (4, False), (20, True)])
def test_combine_of_split_partials_is_the_unsplit_attention(length, num_splits, sq, causal):
    rng = np.random.default_rng(length + 7 * num_splits + sq)
    heads, kv_heads, d, bn = 4, 2, 64, 64
    q = rng.standard_normal((sq, heads, d))
    k = rng.standard_normal((length, kv_heads, d))
    v = rng.standard_normal((length, kv_heads, d))
    o_p, lse_p = tk.split_partials(q, k, v, 0.125, causal, num_splits, bn)
    out, lse = tk.combine_splits(o_p, lse_p)
    ref_o, ref_lse = dense_attention(q, k, v, 0.125, causal)
    np.testing.assert_allclose(out, ref_o, rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(np.isposinf(lse), np.isposinf(ref_lse))
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-12, atol=1e-12)
    again = tk.combine_splits(*tk.split_partials(q, k, v, 0.125, causal, num_splits, bn))
    np.testing.assert_array_equal(again[0], out)                          # deterministic bits


def test_combine_ignores_empty_splits_and_their_garbage():
    o = np.array([[[[1.0, 2.0]]], [[[np.nan, np.nan]]], [[[3.0, 4.0]]]])   # [S, Sq, H, D]; split 1 saw no key
    lse = np.array([[[0.0]], [[-np.inf]], [[np.log(3.0)]]])                # [S, H, Sq]
    out, l = tk.combine_splits(o, lse)
    np.testing.assert_allclose(out, [[[0.25 * 1 + 0.75 * 3, 0.25 * 2 + 0.75 * 4]]])
    np.testing.assert_allclose(l, [[np.log(4.0)]])
    out, l = tk.combine_splits(np.zeros((2, 1, 1, 2)), np.full((2, 1, 1), -np.inf))
    assert (out == 0).all() and np.isposinf(l).all()
