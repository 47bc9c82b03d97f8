"""Scaffolding the sm_90 sparse MLA GPU tests share (test_mla_sparse_gpu.py, _decode_gpu.py, _pwg_gpu.py,
_seesaw_gpu.py, _pairfill_gpu.py, _overlap_gpu.py, _decode_fp8_conv_gpu.py): the seeded
topk_length and attn_sink inputs, one prefill call's inputs (test_mla_sparse_gpu.py's _case) and one decode
call's (test_mla_sparse_decode_gpu.py's _case, splits forced), and one variant's run (its knobs set, called
twice, the same bits both times)."""
import numpy as np

PRODUCER_ENV = "FA4MLIR_MLA_SPARSE_PRODUCER"


def prefill_lengths(torch, s_q, topk):
    """topk_length of a prefill: seeded lengths in [0, topk + 100), the first 0 and the second topk // 3."""
    lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, s_q).astype(np.int32))
    lens[0], lens[1] = 0, topk // 3
    return lens


def prefill_sinks(torch, heads):
    """attn_sink: seeded randn, the first three -inf, +inf and 4."""
    sinks = torch.randn(heads, generator=torch.Generator().manual_seed(2))
    sinks[:3] = torch.tensor([float("-inf"), float("inf"), 4.0])
    return sinks


def decode_lengths(torch, batch, topk):
    """topk_length of a decode: seeded lengths in [0, topk + 100), batch 0's 0 and batch 1's (mod batch) topk // 3."""
    lens = torch.from_numpy(np.random.default_rng(1).integers(0, topk + 100, batch).astype(np.int32))
    lens[0] = 0
    lens[1 % batch] = topk // 3
    return lens


def prefill_call(torch, s_q, heads, topk, s_kv, options):
    """One flash_mla_sparse_fwd call of a PREFILL row (test_mla_sparse_seesaw_gpu.py): the CPU inputs (q, kv, idx),
    topk_length and attn_sink (both None unless `options`), the scale, and the call's positional arguments (on the
    GPU) and keywords."""
    from tests.gpu.test_mla_sparse_gpu import _case
    q, kv, idx = _case(torch, s_q, heads, topk, s_kv)
    lens = sinks = None
    if options:
        lens = prefill_lengths(torch, s_q, topk)
        sinks = prefill_sinks(torch, heads)
    scale = 576 ** -0.5
    args = (q.cuda(), kv.cuda(), torch.from_numpy(idx).cuda(), scale)
    kw = dict(attn_sink=None if sinks is None else sinks.cuda(), topk_length=None if lens is None else lens.cuda())
    return q, kv, idx, lens, sinks, scale, args, kw


def decode_call(torch, batch, seqlen_q, heads, topk, pages, page, cache_dtype, with_lengths, splits):
    """One flash_mla_with_kvcache(indices=...) call with `splits` splits forced: the CPU inputs (q, cache, idx), their
    CUDA copies (qc, cc, ic; an FP8 cache with its strides), the metadata and splits, the topk_length tensor (None
    unless `with_lengths`) and the call's keywords (indices, topk_length)."""
    from tests.gpu.test_mla_sparse_decode_gpu import _case, _metadata, _to_cuda
    q, cache, idx = _case(torch, batch, seqlen_q, heads, topk, pages, page, cache_dtype)
    qc, cc, ic = q.cuda(), _to_cuda(torch, cache) if cache_dtype == "fp8" else cache.cuda(), torch.from_numpy(idx).cuda()
    meta, num_splits = _metadata(torch, splits, batch)
    lens = decode_lengths(torch, batch, topk) if with_lengths else None
    kw = dict(indices=ic, topk_length=None if lens is None else lens.cuda())
    return q, cache, idx, qc, cc, ic, meta, num_splits, lens, kw


def run_variant(torch, monkeypatch, call, variant, producer=None):
    """FA4MLIR_MLA_SPARSE_VARIANT=`variant` (and FA4MLIR_MLA_SPARSE_PRODUCER=`producer` unless None), `call()` twice:
    the same bits both times. Returns the first call's outputs."""
    from fa4mlir.attention import mla_sparse as ms
    monkeypatch.setenv(ms.VARIANT_ENV, variant)
    if producer is not None:
        monkeypatch.setenv(PRODUCER_ENV, producer)
    got = call()
    again = call()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(got, again))
    return got
