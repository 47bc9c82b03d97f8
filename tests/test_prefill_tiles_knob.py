"""FA4MLIR_PREFILL_TILES (attention.plan.tile_override): the measurement knob that runs
flash_attn_func's case on other tiles, for `bench prefill --prefill-tiles`. It parses tile and code
knob fields only, and a kernel source that cannot give those tiles is an error, never a fallback."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from fa4mlir.attention import plan
from fa4mlir.attention.errors import BundleError, KnobError
from fa4mlir.attention.problem import AttnProblem
from fa4mlir.driver import DeviceInfo
from fa4mlir.kernels import attention_sm90_config as acfg

DEVICE = DeviceInfo(0, (9, 0), 132, 50 * 2**20)
PROBLEM = AttnProblem(2, 4096, 4096, 16, 16, 128, "bf16", True, 128 ** -0.5)


def test_tile_override_parses_tile_and_knob_fields():
    assert plan.tile_override("") == {}
    assert plan.tile_override("bn=144, persistent=False,rescale_threshold=8.0") == dict(
        bn=144, persistent=False, rescale_threshold=8.0)


@pytest.mark.parametrize("spec", ["head_dim=64", "causal=False", "bn", "bn=14 4"])
def test_tile_override_refuses_other_fields_and_bad_values(spec):
    with pytest.raises(KnobError, match="FA4MLIR_PREFILL_TILES"):
        plan.tile_override(spec)


class _Source:
    """A kernel source that records the config asked for and offers `offer`'s kernel."""

    def __init__(self, offer=None):
        self.asked, self.offer = [], offer

    def kernel(self, cfg):
        self.asked.append(cfg)
        built = self.offer or cfg
        return SimpleNamespace(artifact=SimpleNamespace(config=built.key()))


def test_select_runs_the_override_tiles(monkeypatch):
    default = acfg.default_config("bf16", 128, True, 4096)
    monkeypatch.setenv(plan.PREFILL_TILES_ENV, "persistent=False,pingpong=True")
    source = _Source()
    chosen = plan.select(PROBLEM, DEVICE, source)
    assert source.asked[0] != default and not source.asked[0].persistent
    assert default.persistent, "the case this test is about: D128 causal is persistent by default"
    assert chosen.launches[0].grid != plan.dense_launch(default, None, PROBLEM, DEVICE).grid
    monkeypatch.delenv(plan.PREFILL_TILES_ENV)
    source = _Source()
    plan.select(PROBLEM, DEVICE, source)
    assert source.asked == [default]


def test_select_refuses_a_source_that_falls_back(monkeypatch):
    """A bundle without the variant offers the default tiles (select_entry's fallback): the knob
    turns that into a BundleError instead of timing the default under the variant's name."""
    monkeypatch.setenv(plan.PREFILL_TILES_ENV, "bn=112")
    with pytest.raises(BundleError, match="bn"):
        plan.select(PROBLEM, DEVICE, _Source(offer=acfg.default_config("bf16", 128, True, 4096)))


def test_bench_with_tiles_sets_the_knob_per_call_only(monkeypatch):
    import os

    from fa4mlir.bench.prefill_workloads import with_tiles
    monkeypatch.delenv(plan.PREFILL_TILES_ENV, raising=False)
    call = with_tiles(lambda: lambda: os.environ.get(plan.PREFILL_TILES_ENV), "bn=112")()
    assert call() == "bn=112" and plan.PREFILL_TILES_ENV not in os.environ
    monkeypatch.setenv(plan.PREFILL_TILES_ENV, "bn=96")
    assert call() == "bn=112" and os.environ[plan.PREFILL_TILES_ENV] == "bn=96"


def test_bench_names_the_planner_knob():
    from fa4mlir import env
    from fa4mlir.bench import prefill_workloads
    assert prefill_workloads.PREFILL_TILES_ENV == plan.PREFILL_TILES_ENV in env.KNOBS
