"""Ragged batches on the GPU, from the bundle (the gpu-tests set holds the attention-varlen kernels:
kernel_sets.VARLEN_CASES), through flash_attn_varlen_func. Fresh random packed inputs per case,
NaN-poisoned out and lse with spare packed rows past the last sequence (they must stay NaN), the FA
rule per sequence against a float32/float64 reference (fa4mlir.testing_varlen.compare_varlen).
Batches with empty and length-1 sequences, a tile plus one row, q longer and shorter than k (causal
rows that see no key: out 0, lse +inf or the sink), GQA, long sequences next to short ones (the
longest-first order), seqused_k, a window, softcap with sinks, attention_chunk; typed errors on device
tensors."""
import zlib

import pytest

from fa4mlir.kernel_sets import VARLEN_CASES, VARLEN_CHUNK_CASES
from fa4mlir.testing_varlen import compare_varlen

pytestmark = pytest.mark.gpu
BATCHES = [  # (seqlens_q, seqlens_k), heads, kv_heads
    (((0, 1, 129, 64, 300), (5, 1, 129, 200, 300)), 4, 2),
    (((1000, 1, 0, 17, 2049), (1000, 3000, 0, 16, 2000)), 4, 1),    # q > k: causal rows with no key
    (((4096, 256, 300, 1),) * 2, 4, 4),                               # one long sequence, short ones
]
SPARE = 5


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _cu(torch, lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


def _run(attn_bundle, case, lens, heads, kv_heads, seqused=None, softcap=0.0, sinks=False):
    import torch
    from fa4mlir import flash_attn_varlen_func
    dtype, d, causal, window, _, _ = case
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((case, lens, seqused)).encode()))
    lq, lk = lens
    total_q, total_k = sum(lq) + SPARE, sum(lk)
    q = torch.randn(total_q, heads, d, device="cuda", dtype=tdt, generator=gen)
    k = torch.randn(total_k, kv_heads, d, device="cuda", dtype=tdt, generator=gen)
    v = torch.randn(total_k, kv_heads, d, device="cuda", dtype=tdt, generator=gen)
    cu_q, cu_k = _cu(torch, lq), _cu(torch, lk)
    used = None if seqused is None else torch.tensor(seqused, dtype=torch.int32, device="cuda")
    sink = 3 * torch.randn(heads, device="cuda", generator=gen) if sinks else None
    out = torch.full_like(q, float("nan"))
    lse = torch.full((heads, total_q), float("nan"), device="cuda")
    flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), seqused_k=used, causal=causal, window_size=window,
                           softcap=softcap, sinks=sink, out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    return compare_varlen(q, k, v, out, lse, cu_q, cu_k, d ** -0.5, causal, seqused_k=used, window_size=window,
                          softcap=softcap, sinks=sink)


def _ids(x):
    return str(x).replace(" ", "")


PLAIN = [c for c in VARLEN_CASES if not c[4] and not c[5]]
SCORED = [c for c in VARLEN_CASES if c[4] or c[5]]


@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: f"b{len(b[0][0])}-h{b[1]}-hk{b[2]}")
@pytest.mark.parametrize("case", PLAIN, ids=_ids)
def test_ragged_batch_matches_reference(attn_bundle, case, batch):
    lens, h, hk = batch
    r = _run(attn_bundle, case, lens, h, hk)
    assert r["ok"], r


@pytest.mark.parametrize("case", SCORED, ids=_ids)
def test_softcap_sinks_and_seqused_k(attn_bundle, case):
    lens = ((70, 1, 0, 130, 1), (90, 60, 2, 140, 0))
    r = _run(attn_bundle, case, lens, 4, 2, seqused=(80, 0, 2, 129, 0), softcap=30.0 if case[4] else 0.0,
             sinks=case[5])
    assert r["ok"], r


def test_all_sequences_empty_writes_nothing(attn_bundle):
    import torch
    from fa4mlir import flash_attn_varlen_func
    q = torch.randn(4, 2, 128, device="cuda", dtype=torch.bfloat16)
    cu = torch.zeros(3, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    flash_attn_varlen_func(q, q, q, cu, cu, 0, 0, causal=True, out=out, bundle=attn_bundle)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()


def test_cu_seqlens_on_the_host_is_a_device_error(attn_bundle):
    import torch
    from fa4mlir import DeviceError, flash_attn_varlen_func
    q = torch.randn(4, 2, 128, device="cuda", dtype=torch.bfloat16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(DeviceError, match="cu_seqlens_q"):
        flash_attn_varlen_func(q, q, q, cu, cu.cuda(), 4, 4, bundle=attn_bundle)


@pytest.mark.parametrize("case", VARLEN_CHUNK_CASES, ids=_ids)
def test_attention_chunk(attn_bundle, case):
    """attention_chunk= (kernel_sets.VARLEN_CHUNK_CASES): chunks that divide no sequence, q shorter
    and longer than k, empty and length-1 sequences, GQA."""
    import torch
    from fa4mlir import flash_attn_varlen_func
    dtype, d, window, chunk = case
    lq, lk = (0, 1, 300, 129, 40), (3, 1, 500, 100, 40)
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode()))
    total_q, total_k = sum(lq) + SPARE, sum(lk)
    q = torch.randn(total_q, 4, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(total_k, 2, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    cu_q, cu_k = _cu(torch, lq), _cu(torch, lk)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((4, total_q), float("nan"), device="cuda")
    flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, window_size=window,
                           attention_chunk=chunk, out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    r = compare_varlen(q, k, v, out, lse, cu_q, cu_k, d ** -0.5, True, window_size=window, attention_chunk=chunk)
    assert r["ok"], r
