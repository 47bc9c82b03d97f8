"""flash_attn_varlen_func with score_mod= / mask_mod= / aux_tensors= and at the head dims beyond
64/128/256 (MLA prefill's qk 192 / v 128, D96, D192) on the GPU, from the bundle (the gpu-tests set
holds the attention-varlen kernels: kernel_sets.VARLEN_MOD_CASES and VARLEN_HEAD_DIM_CASES).
Ragged batches with empty and length-1 sequences, a tile plus one row, q shorter and longer than
k, GQA, a long sequence next to short ones; NaN-poisoned out and lse with spare packed rows past the
last sequence (they must stay NaN). Functions: batch is the sequence, q_idx / kv_idx positions in it
(attention_fwd_sm90_varlen's note [varlen-mod-indices]); the FA rule per sequence against float64
with the functions' torch twins (testing_varlen.compare_varlen_scored). Head dims: compare_varlen
(out [total_q, heads, D_v]). Typed errors for what is not built."""
import zlib

import pytest

from fa4mlir.kernel_sets import VARLEN_HEAD_DIM_CASES, VARLEN_MOD_CASES
from fa4mlir.testing_varlen import compare_varlen, compare_varlen_scored, varlen_aux, varlen_mods, varlen_torch_mods

pytestmark = pytest.mark.gpu
SPARE = 5
# (seqlens_q, seqlens_k), heads, kv_heads
BATCHES = [
    (((0, 1, 129, 64, 300), (5, 1, 129, 200, 300)), 4, 2),
    (((1000, 1, 17, 257), (1000, 700, 16, 300)), 4, 1),          # q > k in one: causal rows with no key
]
SAME_LENGTHS = [(((0, 1, 129, 300, 1000), (0, 1, 129, 300, 1000)), 4, 2)]   # document_mask: ids by position


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _cu(torch, lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


def _inputs(torch, seed, dtype, lens, heads, kv_heads, d, dv):
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(seed)
    lq, lk = lens
    total_q, total_k = sum(lq) + SPARE, sum(lk)
    q = torch.randn(total_q, heads, d, device="cuda", dtype=tdt, generator=gen)
    k = torch.randn(total_k, kv_heads, d, device="cuda", dtype=tdt, generator=gen)
    v = torch.randn(total_k, kv_heads, dv, device="cuda", dtype=tdt, generator=gen)
    out = torch.full((total_q, heads, dv), float("nan"), device="cuda", dtype=tdt)
    lse = torch.full((heads, total_q), float("nan"), device="cuda")
    return q, k, v, _cu(torch, lq), _cu(torch, lk), out, lse


def _mod_id(c):
    return f"{c[0]}-d{c[1]}{'-causal' if c[2] else ''}{'-' + c[3] if c[3] else ''}{'-' + c[4] if c[4] else ''}"


def _mod_batches(case):
    return SAME_LENGTHS if case[4] == "document_mask" else BATCHES


@pytest.mark.parametrize("case,batch", [(c, b) for c in VARLEN_MOD_CASES for b in _mod_batches(c)],
                         ids=lambda x: _mod_id(x) if len(x) == 5 else f"b{len(x[0][0])}-h{x[1]}-hk{x[2]}")
def test_score_mod_and_mask_mod_on_ragged_batches(attn_bundle, case, batch):
    import torch
    from fa4mlir import flash_attn_varlen_func
    dtype, d, causal, score, mask = case
    (lq, lk), heads, kv_heads = batch
    q, k, v, cu_q, cu_k, out, lse = _inputs(torch, zlib.crc32(repr((case, batch)).encode()), dtype, (lq, lk),
                                            heads, kv_heads, d, d)
    aux_np = varlen_aux(score, mask, lq, lk, heads, seed=3)
    aux = [torch.from_numpy(a).cuda() for a in aux_np]
    score_mod, mask_mod = varlen_mods(score, mask, cap=3.0)
    flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal, score_mod=score_mod,
                           mask_mod=mask_mod, aux_tensors=aux, out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    fns = varlen_torch_mods(score, mask, aux_np, cu_q.cpu(), cap=3.0)
    r = compare_varlen_scored(q.cpu(), k.cpu(), v.cpu(), out.cpu(), lse.cpu(), cu_q.cpu(), cu_k.cpu(), d ** -0.5,
                              causal, fns)
    assert r["ok"], r


@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: f"b{len(b[0][0])}-h{b[1]}-hk{b[2]}")
@pytest.mark.parametrize("case", VARLEN_HEAD_DIM_CASES, ids=lambda c: f"{c[0]}-d{c[1]}v{c[2] or c[1]}"
                                                                      f"{'-causal' if c[3] else ''}")
def test_head_dims_on_ragged_batches(attn_bundle, case, batch):
    """MLA prefill (qk 192 / v 128: out [total_q, heads, 128]), D96, D192; MHA and GQA batches."""
    import torch
    from fa4mlir import flash_attn_varlen_func
    dtype, d, dv, causal = case
    (lq, lk), heads, kv_heads = batch
    q, k, v, cu_q, cu_k, out, lse = _inputs(torch, zlib.crc32(repr((case, batch)).encode()), dtype, (lq, lk),
                                            heads, kv_heads, d, dv or d)
    flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal, out=out, lse=lse,
                           bundle=attn_bundle)
    got = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal, bundle=attn_bundle)
    torch.cuda.synchronize()
    assert got.shape == (q.shape[0], heads, dv or d)
    end = int(cu_q[-1])
    assert torch.equal(got[:end], out[:end])
    r = compare_varlen(q, k, v, out, lse, cu_q, cu_k, d ** -0.5, causal)
    assert r["ok"], r


def test_unsupported_pairs_and_paged_mods_are_typed_errors(attn_bundle):
    import torch
    from fa4mlir import HeadDimError, UnsupportedFeatureError, flash_attn_varlen_func
    from fa4mlir.kernels.common.score_mod import alibi
    cu = torch.tensor([0, 4], dtype=torch.int32, device="cuda")
    q = torch.randn(4, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(4, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(HeadDimError, match="flash_attn_varlen_func"):
        flash_attn_varlen_func(q, q, v, cu, cu, 4, 4, bundle=attn_bundle)
    pool = torch.randn(2, 64, 2, 128, device="cuda", dtype=torch.bfloat16)
    table = torch.zeros(1, 2, dtype=torch.int32, device="cuda")
    slopes = torch.ones(2, device="cuda")
    with pytest.raises(UnsupportedFeatureError, match="page_table"):
        flash_attn_varlen_func(q, pool, pool, cu, None, 4, 4, page_table=table, score_mod=alibi,
                               aux_tensors=[slopes], bundle=attn_bundle)
