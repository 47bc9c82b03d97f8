"""Sliding windows and chunked attention on the GPU, from the bundle (the gpu-tests set holds the
attention-masks kernels: kernel_sets.MASK_CASES), through flash_attn_func. Fresh random inputs per
case, NaN-poisoned out and lse, the FA rule against a float32/float64 reference masked by
FlashAttention's own rule (fa4mlir.testing.attention_visible); rows that see no key give exactly
out = 0 and lse = +inf. Cases: a left-only window, left and right, causal with a window, chunks that
do not divide the sequence (alone, with causal, with causal and a window), seqlen_q != seqlen_k both
ways, and windows and chunks larger than the sequence (they run the causal or unmasked kernel)."""
import zlib

import pytest

from fa4mlir.kernel_sets import MASK_CASES
from fa4mlir.testing import attention_inputs, compare_attention

pytestmark = pytest.mark.gpu
GPU_CASES = MASK_CASES[:7]      # the rest are the interpreter's (tests/interpret_sm90.py MASK_CASES)
SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv_heads
    (2, 1000, 1000, 4, 2),
    (1, 300, 1100, 4, 4),      # seqlen_q < seqlen_k
    (1, 1100, 300, 4, 1),      # seqlen_q > seqlen_k: rows with a negative diagonal see no key (causal, chunks)
    (1, 3000, 3000, 2, 1),     # many KV blocks: whole ones between the masked edges, skipped ones on the left
    (1, 9000, 9000, 2, 2),     # past SHORT_SEQLEN_K: the long-sequence tiles
]


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _run(attn_bundle, dtype, head_dim, causal, window, chunk, shape):
    import torch
    from fa4mlir.attention import flash_attn_func
    b, sq, sk, h, hk = shape
    q, k, v = attention_inputs(b, sq, sk, h, hk, head_dim, dtype, zlib.crc32(repr((dtype, head_dim, window, chunk,
                                                                                 shape)).encode()))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device="cuda")
    flash_attn_func(q, k, v, causal=causal, window_size=window, attention_chunk=chunk, out=out, lse=lse,
                    bundle=attn_bundle)
    torch.cuda.synchronize()
    return compare_attention(q, k, v, out, lse, causal=causal, window_size=window, attention_chunk=chunk)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype, head_dim, causal, window, chunk", GPU_CASES,
                         ids=lambda x: str(x).replace(" ", ""))
def test_masked_attention_matches_reference(attn_bundle, dtype, head_dim, causal, window, chunk, shape):
    r = _run(attn_bundle, dtype, head_dim, causal, window, chunk, shape)
    assert r["nan_out"] == 0 and r["nan_lse"] == 0 and r["masked_ok"] and r["lse_finite"], r
    assert r["ok"], r


@pytest.mark.parametrize("dtype, head_dim, causal, window, chunk", [
    ("bf16", 128, False, (5000, -1), 0),        # left past every key: the unmasked kernel
    ("bf16", 64, False, (2000, 2000), 0),       # both sides past the sequence
    ("bf16", 128, True, (10**6, -1), 0),        # causal's kernel
    ("bf16", 64, True, (-1, -1), 4096),         # one chunk holds the whole sequence
])
def test_window_larger_than_the_sequence(attn_bundle, dtype, head_dim, causal, window, chunk):
    r = _run(attn_bundle, dtype, head_dim, causal, window, chunk, (2, 1000, 1000, 4, 2))
    assert r["ok"] and r["masked_ok"], r
