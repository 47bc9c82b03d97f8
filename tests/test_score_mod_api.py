"""Deviceless: flash_attn_func's score_mod, mask_mod and aux_tensors (FA4 CuTe's names). Bad ones
raise ScoreModError before any device call or compile; good ones pass every check (the call then
stops at DeviceError on CPU tensors), reach the problem, the kernel config (fingerprints in the key)
and the launch contract (mod_scale, scale_log2 = post_scale * log2 e, each aux tensor and its
sizes); a bundle without the function's kernel raises BundleError naming its fingerprint."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from fa4mlir.attention import AttnProblem, DeviceError, flash_attn_func
from fa4mlir.attention.errors import BundleError, ScoreModError
from fa4mlir.attention.plan import TensorRef, dense_launch, select_entry
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common import score_mod as sm
from fa4mlir.kernels.common.constants import LOG2E

torch = pytest.importorskip("torch")


def _qkv(s=64, h=4, d=64):
    return (torch.zeros(1, s, h, d, dtype=torch.bfloat16) for _ in range(3))


SLOPES = torch.ones(4)


@pytest.mark.parametrize("kw, words", [
    (dict(score_mod=lambda s, b, h: s), "must take 5"),
    (dict(mask_mod=lambda b, h, q: q), "must take 4"),
    (dict(score_mod=sm.alibi), "takes aux_tensors, but none"),
    (dict(score_mod=lambda s, b, h, q, kv: s + SLOPES[h]), "aux_tensors"),   # a captured tensor
    (dict(score_mod=sm.alibi, aux_tensors=[SLOPES.double()]), "float32 or int32"),
    (dict(score_mod=sm.alibi, aux_tensors=[torch.ones(2, 2, 2)]), "1 or 2 dims"),
    (dict(score_mod=sm.alibi, aux_tensors=[torch.ones(0)]), "1 to 2"),
    (dict(score_mod=sm.alibi, aux_tensors=[torch.ones(4, 8)[:, 0]]), "contiguous"),
    (dict(score_mod=sm.alibi, aux_tensors=SLOPES), "list of tensors"),
    (dict(aux_tensors=[SLOPES]), "without a score_mod"),
    (dict(score_mod=sm.softcap_score_mod(30.0), softcap=30.0), "both given"),
    (dict(score_mod=sm.softcap_score_mod(30.0), mask_mod=sm.softcap_score_mod(2.0)), "mask_mod"),
])
def test_bad_mods_are_typed_before_the_device(kw, words):
    q, k, v = _qkv()
    with pytest.raises(ScoreModError, match=words):
        flash_attn_func(q, k, v, **kw)


def test_good_mods_pass_the_checks():
    q, k, v = _qkv()
    doc = torch.zeros(64, dtype=torch.int32)
    for kw in (dict(score_mod=sm.alibi, aux_tensors=[SLOPES]), dict(mask_mod=sm.document_mask, aux_tensors=[doc]),
               dict(score_mod=sm.softcap_score_mod(20.0)),
               dict(score_mod=sm.relative_bias, aux_tensors=[torch.zeros(4, 63)])):
        with pytest.raises(DeviceError):     # every argument checked; a CPU tensor is the only problem left
            flash_attn_func(q, k, v, causal=True, **kw)


def test_problem_config_and_launch_contract():
    fp = sm.fingerprint(sm.alibi)
    problem = replace(AttnProblem.of((2, 500, 4, 128), (2, 500, 2, 128), "bf16", causal=True, softmax_scale=0.1),
                      score_mod=fp, aux="f32x1", aux_shapes=((4,),), mod_scales=(0.5, 3.0))
    cfg = acfg.default_config("bf16", 128, True, 500, score_mod=fp, aux="f32x1")
    launch = dense_launch(cfg, None, problem, SimpleNamespace(num_sms=132, l2_bytes=50 << 20))
    assert launch.args["aux0"] == TensorRef("aux0") and launch.args["aux0_n0"] == 4
    assert launch.args["mod_scale"] == pytest.approx(0.05) and launch.args["scale_log2"] == pytest.approx(3 * LOG2E)
    assert list(launch.args) == [n for n, _ in acfg.launch_params(cfg)]


def test_bundle_lookup_by_fingerprint():
    plain = acfg.default_config("bf16", 128, True)
    fp = sm.fingerprint(sm.alibi)
    alibi = acfg.default_config("bf16", 128, True, score_mod=fp, aux="f32x1")
    other = acfg.default_config("bf16", 128, True, score_mod=sm.fingerprint(lambda s, b, h, q, kv: s * 2.0))
    entries = [{"arch": "sm_90a", "name": n, "config": {**c.key(), "cubin_backend": "ptxas"}}
               for n, c in (("plain", plain), ("alibi", alibi))]
    assert select_entry(entries, "bf16", 128, True, default=plain)["name"] == "plain"
    assert select_entry(entries, "bf16", 128, True, default=alibi)["name"] == "alibi"
    with pytest.raises(BundleError, match=other.score_mod):
        select_entry(entries, "bf16", 128, True, default=other)


def test_python_control_flow_is_a_score_mod_error_from_the_compiler_source():
    from fa4mlir.attention.plan import KernelSource

    def branchy(score, batch, head, q_idx, kv_idx):
        return score if score else -score
    cfg = acfg.default_config("bf16", 64, False, score_mod=sm.fingerprint(branchy))
    with pytest.raises(ScoreModError, match="branchy.*no `if`"):
        KernelSource(None).artifact(cfg)
