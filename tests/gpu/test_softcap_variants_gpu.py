"""The softcap kernel's opt-in variants (kernel_sets.SOFTCAP_VARIANTS: softcap_fold_q, softcap_tanh,
softcap_fixed_max, exp2_poly_stride; notes [D-softcap-fold]) on an sm_90 GPU, chosen through
FA4MLIR_PREFILL_TILES, by the checks of tests/gpu/test_attention_softcap_sinks.py (q scaled by 8 so the
scores reach every cap, NaN-poisoned out and lse, the FA rule against FlashAttention's softcap; causal
rows that see no key give out = 0 and lse = +inf). bf16 D128 causal (bench prefill's softcap row), caps
5, 30, 50 and 54.4 (the runtime fixed max's largest, FIXED_MAX_CAP 54.41) or 100 (the others). And the
softcap rule (common/softcap_rule.py) without FA4MLIR_PREFILL_TILES: caps up to 54.41 run the fixed-max
kernel, 60 the running-max one, as the plan says. Needs a bundle of the `prefill-softcap-variants` set
(`python -m fa4mlir bundle --set prefill-softcap-variants`); a bundle without a variant is a BundleError
naming it, never the default in its place."""
import pytest

from fa4mlir import kernel_sets
from fa4mlir.testing import attention_inputs, compare_attention

pytestmark = pytest.mark.gpu
SPECS = kernel_sets.softcap_variant_specs().split(";")
SHAPES = [(2, 1000, 1000, 4, 2), (1, 1100, 300, 4, 1)]   # batch, seqlen_q, seqlen_k, heads, kv_heads
Q_GAIN = 8.0


@pytest.fixture(scope="module")
def attn_bundle(bundle, require_arch):
    require_arch(9)
    pytest.importorskip("torch")
    return bundle


def _run(attn_bundle, shape, softcap, seed):
    import torch
    from fa4mlir.attention import flash_attn_func
    b, sq, sk, h, hk = shape
    q, k, v = attention_inputs(b, sq, sk, h, hk, 128, "bf16", seed)
    q = q * Q_GAIN
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, sq), float("nan"), device="cuda")
    flash_attn_func(q, k, v, causal=True, softcap=softcap, out=out, lse=lse, bundle=attn_bundle)
    torch.cuda.synchronize()
    return compare_attention(q, k, v, out, lse, causal=True, softcap=softcap), out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("spec", SPECS)
def test_softcap_variant_matches_reference(attn_bundle, monkeypatch, spec, shape):
    monkeypatch.setenv("FA4MLIR_PREFILL_TILES", spec)
    caps = (5.0, 30.0, 50.0, 54.4) if "softcap_fixed_max=True" in spec else (5.0, 30.0, 50.0, 100.0)
    for i, cap in enumerate(caps):
        r, _ = _run(attn_bundle, shape, cap, seed=1000 * i + SPECS.index(spec))
        assert r["nan_out"] == 0 and r["nan_lse"] == 0 and r["masked_ok"] and r["lse_finite"], (cap, r)
        assert r["ok"], (cap, r)


def test_fixed_max_refuses_a_larger_cap_before_launch(attn_bundle, monkeypatch):
    import torch

    from fa4mlir.kernels.common.fields import ConfigError
    monkeypatch.setenv("FA4MLIR_PREFILL_TILES", "softcap_fixed_max=True")
    with pytest.raises(ConfigError, match="caps up to"):
        _run(attn_bundle, SHAPES[0], 60.0, seed=7)
    torch.cuda.synchronize()


@pytest.mark.parametrize("cap, fixed", [(30.0, True), (50.0, True), (54.4, True), (60.0, False)])
def test_softcap_rule_runs_the_fixed_max_kernel_up_to_its_cap(attn_bundle, monkeypatch, cap, fixed):
    """No FA4MLIR_PREFILL_TILES: flash_attn_func's plan (attention.plan.select) runs the rule's kernel and
    says so; the result passes the FA rule either way."""
    from dataclasses import replace

    from fa4mlir import driver
    from fa4mlir.attention.plan import select, source_for
    from fa4mlir.attention.problem import AttnProblem
    monkeypatch.delenv("FA4MLIR_PREFILL_TILES", raising=False)
    problem = replace(AttnProblem.of((2, 1000, 4, 128), (2, 1000, 2, 128), "bf16", causal=True), softcap=cap)
    text = select(problem, driver.device_info(), source_for(attn_bundle)).describe()
    assert ("_softcap_qfold_fixmax" in text) == fixed and f"{'fixed' if fixed else 'running'}-max kernel" in text, text
    r, _ = _run(attn_bundle, SHAPES[0], cap, seed=11)
    assert r["ok"] and r["nan_out"] == 0 and r["masked_ok"], (cap, r)
