"""Deviceless: flash_attn_func's softcap and sinks. Bad values raise typed errors before anything
runs; good ones reach the problem, the kernel config (compile-time flags, in the key and the name)
and the launch contract (the cap a launch argument: scale_log2 = softcap * log2 e, softcap_scale =
softmax_scale / softcap; sinks a pointer after every default parameter)."""
from __future__ import annotations

import math

import pytest

from fa4mlir.attention import (ArgumentTypeError, AttnProblem, DTypeError, LayoutError, ShapeError, SoftcapError,
                               check_sinks, check_softcap, flash_attn_func)
from fa4mlir.attention.plan import dense_launch, select_entry
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common.constants import LOG2E
from fa4mlir.runtime import TensorInfo


@pytest.mark.parametrize("softcap, error, words", [
    (-1.0, SoftcapError, "finite number >= 0"),
    (float("nan"), SoftcapError, "finite number >= 0"),
    (float("inf"), SoftcapError, "finite number >= 0"),
    (1e-40, SoftcapError, "normal range"),                 # softmax_scale / softcap overflows float32
    (1e39, SoftcapError, "normal range"),                  # softcap * log2(e) overflows float32
    ("30", ArgumentTypeError, "softcap must be a number"),
    (None, ArgumentTypeError, "softcap must be a number"),
    (True, ArgumentTypeError, "softcap must be a number"),
    ([30.0], ArgumentTypeError, "softcap must be a number"),
])
def test_bad_softcaps_are_typed(softcap, error, words):
    with pytest.raises(error, match=words):
        check_softcap(softcap, 0.125)


def test_good_softcaps():
    assert check_softcap(0.0, 0.1) == 0.0 and check_softcap(0, 0.1) == 0.0
    assert check_softcap(30, 0.1) == 30.0 and type(check_softcap(30, 0.1)) is float
    np = pytest.importorskip("numpy")
    assert check_softcap(np.float32(50.0), 0.1) == 50.0


def _info(shape, dtype="f32", strides=None, ptr=256, device="cuda:0"):
    return TensorInfo(ptr, tuple(shape), tuple(strides or (1,) * len(shape)), dtype, device, False)


def test_sinks_checks():
    problem = AttnProblem.of((2, 64, 4, 128), (2, 64, 2, 128), "bf16")
    check_sinks(problem, _info((4,)))
    with pytest.raises(ShapeError, match=r"shape \[heads\] = \(4,\)"):
        check_sinks(problem, _info((2,)))
    with pytest.raises(ShapeError, match="one logit per query head"):
        check_sinks(problem, _info((1, 4), strides=(4, 1)))
    with pytest.raises(DTypeError, match="float32"):
        check_sinks(problem, _info((4,), dtype="bf16"))
    with pytest.raises(LayoutError, match="contiguous"):
        check_sinks(problem, _info((4,), strides=(2,)))
    with pytest.raises(LayoutError, match="NULL"):
        check_sinks(problem, _info((4,), ptr=0))


def test_flash_attn_func_checks_softcap_and_sinks_before_any_device_call():
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 64, 4, 128, dtype=torch.bfloat16)
    k = torch.zeros(1, 64, 2, 128, dtype=torch.bfloat16)
    with pytest.raises(SoftcapError):
        flash_attn_func(q, k, k, softcap=-2.0)
    with pytest.raises(ArgumentTypeError):
        flash_attn_func(q, k, k, softcap="big")
    with pytest.raises(ShapeError, match="sinks"):
        flash_attn_func(q, k, k, sinks=torch.zeros(3))
    with pytest.raises(DTypeError, match="sinks"):
        flash_attn_func(q, k, k, sinks=torch.zeros(4, dtype=torch.bfloat16))
    from fa4mlir.attention import AutogradError
    with pytest.raises(AutogradError, match="sinks requires grad"):     # learned sinks: no backward kernel yet
        flash_attn_func(q, k, k, sinks=torch.zeros(4, requires_grad=True))


def test_configs_names_and_keys():
    plain = acfg.default_config("bf16", 128, True)
    cap = acfg.default_config("bf16", 128, True, softcap=True)
    both = acfg.default_config("bf16", 128, True, softcap=True, sinks=True)
    assert (cap.softcap, cap.sinks) == (True, False) and (both.softcap, both.sinks) == (True, True)
    mine = ("softcap", "exp2_poly_stride")   # softcap's own knob [D-sfu-poly]: 1 in 4 exp2 by the polynomial
    assert {k: v for k, v in cap.key().items() if k not in mine} == {k: v for k, v in plain.key().items()
                                                                      if k not in mine}  # same tiles, other knobs
    assert (plain.exp2_poly_stride, cap.exp2_poly_stride) == (0, acfg.SFU_MOD_POLY_STRIDE)
    for cfg in (plain, cap, both):
        assert acfg.AttnConfig.from_key(cfg.key()) == cfg
    old = {k: v for k, v in plain.key().items() if k not in ("softcap", "sinks")}    # an older bundle's key
    assert acfg.AttnConfig.from_key(old) == plain
    assert (plain.score_tag(), cap.score_tag(), both.score_tag()) == ("", "_softcap", "_softcap_sink")
    assert acfg.default_configs("bf16", 64, False, sinks=True)[1].persistent   # a short-sequence sink kernel too


def test_launch_contract():
    cfg = acfg.default_config("bf16", 128, True, softcap=True, sinks=True)
    params = acfg.launch_params(cfg)
    assert params[:len(acfg.LAUNCH_PARAMS)] == acfg.LAUNCH_PARAMS
    assert params[len(acfg.LAUNCH_PARAMS):] == (("softcap_scale", "f32"), ("sinks", "ptr"))
    assert acfg.launch_params(acfg.default_config("bf16", 128, True)) == acfg.LAUNCH_PARAMS
    problem = AttnProblem.of((2, 300, 4, 128), (2, 300, 2, 128), "bf16", causal=True).with_options(
        causal=True, softmax_scale=0.1, softcap=30.0, sinks=True)
    args = acfg.launch_args(cfg, problem, {n: n for n in ("q", "k", "v", "o", "lse", "sinks")})
    assert list(args) == [n for n, _ in params]
    assert math.isclose(args["scale_log2"], 30.0 * LOG2E) and math.isclose(args["softcap_scale"], 0.1 / 30.0)
    assert args["sinks"] == "sinks"
    with pytest.raises(ValueError, match="softcap > 0"):
        acfg.launch_args(cfg, problem.with_options(causal=True, softmax_scale=0.1, sinks=True), args)


def test_plan_names_sinks_as_a_tensor():
    from types import SimpleNamespace

    from fa4mlir.attention.plan import TensorRef
    cfg = acfg.default_config("bf16", 64, False, sinks=True)
    problem = AttnProblem.of((1, 500, 2, 64), (1, 500, 2, 64), "bf16").with_options(causal=False, softmax_scale=0.1,
                                                                                    sinks=True)
    launch = dense_launch(cfg, None, problem, SimpleNamespace(num_sms=132, l2_bytes=50 << 20))
    assert launch.args["sinks"] == TensorRef("sinks") and "softcap_scale" not in launch.args


def test_bundle_selection_tells_softcap_and_sinks_apart():
    plain = acfg.default_config("bf16", 128, True)
    cap = acfg.default_config("bf16", 128, True, softcap=True)
    sink = acfg.default_config("bf16", 128, True, sinks=True)
    old = {k: v for k, v in plain.key().items() if k not in ("softcap", "sinks")}
    entries = [{"arch": "sm_90a", "name": n, "config": {**c, "cubin_backend": "ptxas"}}
               for n, c in (("plain", old), ("cap", cap.key()))]
    assert select_entry(entries, "bf16", 128, True, default=plain)["name"] == "plain"
    assert select_entry(entries, "bf16", 128, True, default=cap)["name"] == "cap"
    with pytest.raises(LookupError, match="sinks=True"):
        select_entry(entries, "bf16", 128, True, default=sink)
