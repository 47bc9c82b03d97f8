"""Head dims 96 and 192 and qk 192 / v 128 (MLA prefill) on the GPU, from the bundle (the gpu-tests
set holds the head-dims kernels: kernel_sets.HEAD_DIM_CASES), through flash_attn_func. Fresh random
inputs per case, NaN-poisoned out and lse, the FA rule against a float32/float64 reference; GQA,
seqlen_q != seqlen_k both ways (causal rows that see no key: out = 0, lse = +inf), ragged tails, and
a long row past every tile's first blocks; out is [.., v's head dim]. The MLA anchor's shape is
`bench mla`'s (fa4mlir/bench/mla_bench.py)."""
import zlib

import pytest

from fa4mlir.kernel_sets import HEAD_DIM_CASES
from fa4mlir.testing import compare_attention

pytestmark = pytest.mark.gpu
SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv_heads
    (2, 1000, 1000, 4, 2),
    (1, 300, 1100, 4, 4),      # seqlen_q < seqlen_k
    (1, 1100, 300, 4, 1),      # seqlen_q > seqlen_k: causal rows i < 800 see no key
    (1, 77, 77, 2, 2),         # one partial tile, one partial KV block
    (1, 4500, 4500, 2, 1),     # long rows
]


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _inputs(case, shape, seed):
    import torch
    dtype, d, dv, _ = case
    b, sq, sk, h, hk = shape
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=tdt, generator=gen)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=tdt, generator=gen)
    v = torch.randn(b, sk, hk, dv or d, device="cuda", dtype=tdt, generator=gen)
    return q, k, v


def _ids(x):
    return str(x).replace(" ", "")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", HEAD_DIM_CASES, ids=_ids)
def test_head_dims_match_reference(attn_bundle, case, shape):
    import torch
    from fa4mlir.attention import flash_attn_func
    dtype, d, dv, causal = case
    q, k, v = _inputs(case, shape, zlib.crc32(repr((case, shape)).encode()))
    b, sq, _, h, _ = shape
    out = torch.full((b, sq, h, dv or d), float("nan"), device="cuda", dtype=q.dtype)
    lse = torch.full((b, h, sq), float("nan"), device="cuda")
    flash_attn_func(q, k, v, causal=causal, out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    r = compare_attention(q, k, v, out, lse, causal=causal)
    assert r["nan_out"] == 0 and r["nan_lse"] == 0 and r["masked_ok"] and r["lse_finite"], r
    assert r["ok"], r


@pytest.mark.parametrize("causal", [False, True])
def test_mla_prefill_allocates_out_at_v_width(attn_bundle, causal):
    """flash_attn_func allocates out [.., 128] for q, k 192 and v 128, and returns the LSE."""
    import torch
    from fa4mlir.attention import flash_attn_func
    q, k, v = _inputs(("bf16", 192, 128, causal), (1, 500, 700, 4, 2), 7)
    out, lse = flash_attn_func(q, k, v, causal=causal, return_lse=True, bundle=attn_bundle)
    torch.cuda.synchronize()
    assert out.shape == (1, 500, 4, 128) and lse.shape == (1, 4, 500)
    r = compare_attention(q, k, v, out, lse, causal=causal)
    assert r["ok"], r
