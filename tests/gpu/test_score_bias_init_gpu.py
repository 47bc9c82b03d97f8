"""score_bias_init [D-bias-init] on an sm_90 GPU: bench prefill's alibi kernel (bf16 D128 causal, the
built-in ALiBi) with the bias in the S accumulator, chosen through FA4MLIR_PREFILL_TILES, by the FA rule
against the float64 reference (testing_score_mod.compare_scored, out and LSE), NaN-poisoned out and lse;
slopes of either sign and size per head (the wgmma accumulates onto |b| / mod_scale up to slope * seqlen
/ scale: the GPU's accumulation rounding is what the interpreter cannot show). Also the knob-off kernel
of the same bundle on the same inputs. Needs a bundle of a `prefill-poly0` set (`python -m fa4mlir bundle
--set prefill-poly0`); a bundle without the variant is a BundleError, never the default in its place."""
from dataclasses import replace

import numpy as np
import pytest

from fa4mlir.testing_score_mod import BY_NAME, case_mods, compare_scored

pytestmark = pytest.mark.gpu
SHAPES = [dict(seqlen_q=1000, seqlen_k=1000, heads=4, kv_heads=2), dict(seqlen_q=1100, seqlen_k=4100, heads=4,
                                                                         kv_heads=1)]
SLOPES = [0.5, -0.03, 2.0 ** -8, 0.0]


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


@pytest.mark.parametrize("spec", ["score_bias_init=True", ""])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['seqlen_q']}x{s['seqlen_k']}")
def test_alibi_bias_init_matches_reference(attn_bundle, monkeypatch, spec, shape):
    import torch
    from fa4mlir.attention import flash_attn_func
    from fa4mlir.testing import attention_inputs
    monkeypatch.setenv("FA4MLIR_PREFILL_TILES", spec)
    case = replace(BY_NAME["alibi-d128-causal"], **shape)
    q, k, v = attention_inputs(1, case.seqlen_q, case.seqlen_k, case.heads, case.kv_heads, 128, "bf16", 5)
    aux_np = [np.array(SLOPES[:case.heads], np.float32)]
    score_mod, _ = case_mods(case)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((1, case.heads, case.seqlen_q), float("nan"), device="cuda")
    flash_attn_func(q, k, v, causal=True, score_mod=score_mod, aux_tensors=[torch.from_numpy(aux_np[0]).cuda()],
                    out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    report = compare_scored(case, q, k, v, out, lse, aux_np)
    assert report["ok"], report
