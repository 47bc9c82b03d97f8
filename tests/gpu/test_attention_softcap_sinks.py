"""Softcap and attention sinks on the GPU, from the bundle (the gpu-tests set holds the
attention-softcap-sinks kernels: kernel_sets.SCORE_CASES), through flash_attn_func. Fresh random
inputs per case (q scaled by 8 so that the scores, about N(0, 64), reach every cap), NaN-poisoned
out and lse, the FA rule against a float32/float64 reference with FlashAttention's softcap (softcap *
tanh(s / softcap) of the scaled score) and gpt-oss / FA4 sinks (one more logit per row in the
denominator and the LSE, no value). Caps 5, 30 and 50 through one kernel each (the cap is a launch
argument); sinks of ordinary size, very large (1e4: every row's weight is on the sink, O = 0,
LSE = sink), very negative (-1e4: no sink) and mixed per head; rows that see no key (causal,
seqlen_q > seqlen_k) give out = 0 and lse = +inf, or the head's sink with sinks; long rows (9000
keys); a window with each."""
import zlib

import pytest

from fa4mlir.kernel_sets import SCORE_CASES
from fa4mlir.testing import attention_inputs, compare_attention

pytestmark = pytest.mark.gpu
SOFTCAP_CASES = [c for c in SCORE_CASES if c[4] and not c[5]]
SINK_CASES = [c for c in SCORE_CASES if c[5] and not c[4]]
BOTH_CASES = [c for c in SCORE_CASES if c[4] and c[5]]
CAPS = (5.0, 30.0, 50.0, 100.0)   # bf16: the fixed-max kernel up to 54.41, the running-max one at 100
SINKS = ("normal", "huge", "tiny", "mixed")
SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv_heads
    (2, 1000, 1000, 4, 2),
    (1, 300, 1100, 4, 4),      # seqlen_q < seqlen_k
    (1, 1100, 300, 4, 1),      # seqlen_q > seqlen_k: causal rows i < 800 see no key
]
LONG = (1, 9000, 9000, 4, 2)   # long rows, past SHORT_SEQLEN_K: the long-sequence tiles (cap 30, mixed sinks)
Q_GAIN = 8.0


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _sinks(kind: str, heads: int, seed: int):
    import torch
    if kind == "normal":
        gen = torch.Generator(device="cuda").manual_seed(seed)
        return 3 * torch.randn(heads, device="cuda", generator=gen)
    values = {"huge": [1e4], "tiny": [-1e4], "mixed": [1e4, 20.0, -20.0, -1e4]}[kind]
    return torch.tensor([values[h % len(values)] for h in range(heads)], device="cuda", dtype=torch.float32)


def _run(attn_bundle, case, shape, softcap=0.0, sink_kind=None):
    import torch
    from fa4mlir.attention import flash_attn_func
    dtype, head_dim, causal, window, _, _ = case
    b, sq, sk, h, hk = shape
    seed = zlib.crc32(repr((case, shape, softcap, sink_kind)).encode())
    q, k, v = attention_inputs(b, sq, sk, h, hk, head_dim, dtype, seed)
    q = q * Q_GAIN
    sinks = _sinks(sink_kind, h, seed) if sink_kind else None
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device="cuda")
    flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap, sinks=sinks, out=out, lse=lse,
                    bundle=attn_bundle)
    torch.cuda.synchronize()
    r = compare_attention(q, k, v, out, lse, causal=causal, window_size=window, softcap=softcap, sinks=sinks)
    return r, out, lse, sinks


def _ids(x):
    return str(x).replace(" ", "")


@pytest.mark.parametrize("shape, softcap", [(s, c) for s in SHAPES for c in CAPS] + [(LONG, 30.0)],
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else f"cap{x:g}")
@pytest.mark.parametrize("case", SOFTCAP_CASES, ids=_ids)
def test_softcap_matches_reference(attn_bundle, case, softcap, shape):
    r, *_ = _run(attn_bundle, case, shape, softcap=softcap)
    assert r["nan_out"] == 0 and r["nan_lse"] == 0 and r["masked_ok"] and r["lse_finite"], r
    assert r["ok"], r


@pytest.mark.parametrize("shape, sink_kind", [(s, k) for s in SHAPES for k in SINKS] + [(LONG, "mixed")],
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else x)
@pytest.mark.parametrize("case", SINK_CASES, ids=_ids)
def test_sinks_match_reference(attn_bundle, case, sink_kind, shape):
    import torch
    r, out, lse, sinks = _run(attn_bundle, case, shape, sink_kind=sink_kind)
    assert r["nan_out"] == 0 and r["nan_lse"] == 0 and r["masked_ok"] and r["lse_finite"], r
    assert r["ok"], r
    huge = sinks >= 1e4          # every weight on the sink: O = 0 exactly, LSE = the sink
    if huge.any():
        assert (out[:, :, huge] == 0).all()
        want = sinks[huge].view(1, -1, 1).expand(lse.shape[0], -1, lse.shape[2])
        assert torch.allclose(lse[:, huge], want, rtol=1e-6, atol=0), lse[:, huge]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", BOTH_CASES, ids=_ids)
def test_softcap_with_sinks(attn_bundle, case, shape):
    r, *_ = _run(attn_bundle, case, shape, softcap=30.0, sink_kind="mixed")
    assert r["nan_out"] == 0 and r["nan_lse"] == 0 and r["masked_ok"] and r["lse_finite"], r
    assert r["ok"], r


def test_no_key_with_sinks_runs_no_kernel(attn_bundle):
    """seqlen_k = 0: every row sees no key; out = 0 and lse = the head's sink, as the kernel writes."""
    import torch
    from fa4mlir.attention import flash_attn_func
    q = torch.randn(2, 5, 4, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 0, 2, 128, device="cuda", dtype=torch.bfloat16)
    sinks = _sinks("mixed", 4, 0)
    out, lse = flash_attn_func(q, k, k, causal=True, sinks=sinks, return_lse=True, bundle=attn_bundle)
    assert (out == 0).all() and torch.equal(lse, sinks.view(1, 4, 1).expand(2, 4, 5))
