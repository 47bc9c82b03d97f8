"""flash_mla_sparse_fwd's routing by compute capability (attention/mla_sparse_sm100.py), deviceless:

* 9.x -> the sm_90a kernel, 10.0 -> the sm_100a kernel (attention_mla_sparse_sm100), anything else a
  DeviceError;
* on 10.0, each call the sm_100a kernel cannot run is a typed error before any launch (FP8 kv, h_q
  outside {64, 128}, indices not contiguous along tokens), while the sm_90a route takes them;
* the sm_100a plan: the kernel of the call's config asked for as an sm_100a kernel of the
  `mla-sparse-sm100` bundle set, its grid (two CTAs per token) and launch arguments by TensorRef.
No GPU numerics here (tests/gpu/test_mla_sparse_sm100_gpu.py).
"""
import pytest

from fa4mlir.attention import mla_sparse as ms
from fa4mlir.attention import mla_sparse_sm100 as route
from fa4mlir.attention.errors import DeviceError, LayoutError, ShapeError, UnsupportedFeatureError
from fa4mlir.attention.plan import TensorRef
from fa4mlir.kernels import attention_mla_sparse_sm100_config as sc100
from tests._mla_helpers import info


def _problem(s_q=4, heads=128, topk=128, s_kv=300, fp8=False, sinks=False, lens=False):
    kv = info((s_kv, 1, 656), "e4m3") if fp8 else info((s_kv, 1, 576))
    return ms.check_sparse_inputs(info((s_q, heads, 576)), kv, info((s_q, 1, topk), "i32"), None,
                                  attn_sink=info((heads,), "f32") if sinks else None,
                                  topk_length=info((s_q,), "i32") if lens else None)


def test_capability_picks_the_kernel():
    p = _problem()
    assert route.select_arch(p, (9, 0), p.topk) == "sm_90a"
    assert route.select_arch(p, (10, 0), p.topk) == "sm_100a"
    for cap in ((10, 3), (12, 0), (8, 0)):        # an sm_100a cubin runs on 10.0 only
        with pytest.raises(DeviceError, match=rf"the device is sm_{cap[0]}{cap[1]}; the sparse MLA prefill runs on"):
            route.select_arch(p, cap, p.topk)


@pytest.mark.parametrize("kwargs,stride,error,match", [
    (dict(fp8=True), 128, UnsupportedFeatureError, "FP8 kv rows are not supported by the sm_100a kernel"),
    (dict(heads=192), 128, ShapeError, r"h_q must be one of \(64, 128\) on sm_100"),
    (dict(), 256, LayoutError, "token stride topk=128"),
])
def test_sm100_refusals_are_typed(kwargs, stride, error, match):
    p = _problem(**kwargs)
    assert route.select_arch(p, (9, 0), stride) == "sm_90a"          # the sm_90a kernel takes the call
    with pytest.raises(error, match=match):
        route.select_arch(p, (10, 0), stride)


def test_one_token_ignores_the_token_stride():
    p = _problem(s_q=1)
    assert route.select_arch(p, (10, 0), 7) == "sm_100a"


@pytest.mark.parametrize("sinks,lens", [(False, False), (True, True), (True, False)])
def test_sm100_plan(monkeypatch, sinks, lens):
    asked = []

    def fake_config_kernel(source, cfg, api, bundle_sets, arch):
        asked.append((cfg, api, bundle_sets, arch))
        return "kernel"

    monkeypatch.setattr(route, "config_kernel", fake_config_kernel)
    p = _problem(s_q=5, heads=64, sinks=sinks, lens=lens)
    plan = route.build_plan_sm100(p, source=object())
    (launch,) = plan.launches
    cfg = sc100.MLASparseSm100Config(topk_length=lens, sinks=sinks)
    assert asked == [(cfg, "flash_mla_sparse_fwd", ("mla-sparse-sm100",), "sm_100a")]
    assert launch.kernel == "kernel" and launch.grid == sc100.grid(5) == (10, 1, 1)
    assert list(launch.args) == [n for n, _ in cfg.params]
    assert all(launch.args[n] == TensorRef(n) for n, kind in cfg.params if kind in ("ptr", "tma"))
    assert (launch.args["heads"], launch.args["topk"], launch.args["s_kv"]) == (64, 128, 300)


def test_pair_knob_routes_to_the_pair_kernel(monkeypatch):
    """FA4MLIR_MLA_SPARSE_SM100=pair: the CTA-pair kernel of the mla-sparse-sm100-pair set, one cluster of two
    CTAs per token; unset or "split": the split kernel."""
    from fa4mlir.kernels import attention_mla_sparse_sm100_pair_config as pc
    asked = []
    monkeypatch.setattr(route, "config_kernel", lambda source, cfg, api, sets, arch: asked.append((cfg, sets)) or "k")
    p = _problem(s_q=3, heads=128, topk=256, sinks=True, lens=True)
    monkeypatch.setenv(route.KERNEL_ENV, "pair")
    assert route.select_arch(p, (10, 0), p.topk) == "sm_100a"
    (launch,) = route.build_plan_sm100(p, source=object()).launches
    cfg = pc.MLASparsePairConfig(topk_length=True, sinks=True)
    assert asked == [(cfg, ("mla-sparse-sm100-pair",))] and launch.grid == pc.grid(3) == (6, 1, 1)
    assert list(launch.args) == [n for n, _ in cfg.params] and launch.args["topk"] == 256
    for value in (None, "split"):
        asked.clear()
        if value is None:
            monkeypatch.delenv(route.KERNEL_ENV)
        else:
            monkeypatch.setenv(route.KERNEL_ENV, value)
        route.build_plan_sm100(p, source=object())
        assert asked == [(sc100.MLASparseSm100Config(topk_length=True, sinks=True), ("mla-sparse-sm100",))]


@pytest.mark.parametrize("kwargs,match", [
    (dict(heads=64), r"h_q must be 128 for the pair kernel"),
    (dict(topk=192), r"topk must be a multiple of 128 for the pair kernel"),
])
def test_pair_knob_refusals_are_typed(monkeypatch, kwargs, match):
    p = _problem(**kwargs)
    assert route.select_arch(p, (10, 0), p.topk) == "sm_100a"        # the split kernel takes it
    monkeypatch.setenv(route.KERNEL_ENV, "pair")
    with pytest.raises(ShapeError, match=match):
        route.select_arch(p, (10, 0), p.topk)
    assert route.select_arch(p, (9, 0), p.topk) == "sm_90a"          # the knob is about sm_100 only


def test_unknown_pair_knob_is_a_knob_error(monkeypatch):
    from fa4mlir.attention.errors import KnobError
    monkeypatch.setenv(route.KERNEL_ENV, "cluster")
    with pytest.raises(KnobError, match=r"FA4MLIR_MLA_SPARSE_SM100='cluster' is not an sm_100a sparse prefill kernel"):
        route.select_arch(_problem(), (10, 0), 128)
    assert route.KERNEL_ENV in ms._CALLS.ENV                        # the knob is part of the call cache's key
