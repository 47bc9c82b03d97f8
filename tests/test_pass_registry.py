"""One pass, one file, one lit test, same stem: `fa4-lower-tma` is fa4mlir/passes/lower_tma.py
(NAME = "fa4-lower-tma") and lit_tests/passes/lower-tma.mlir, whose RUN line runs that pass; and
every registered pass runs in some compiler stage."""
import re
from pathlib import Path

import pytest

from fa4mlir.passes import registry

REPO_ROOT = Path(__file__).resolve().parents[1]
LIT_PASSES = REPO_ROOT / "lit_tests" / "passes"


@pytest.mark.parametrize("name", sorted(registry.PASSES))
def test_pass_file_name_and_lit_test_share_the_stem(name):
    module = registry.PASSES[name]
    assert name == "fa4-" + module.replace("_", "-"), f"{name} lives in {module}.py: rename one of them"
    assert registry.get(name).NAME == name
    lit = LIT_PASSES / f"{name.removeprefix('fa4-')}.mlir"
    assert lit.is_file(), f"{name} has no lit test: add {lit.relative_to(REPO_ROOT)}"
    runs = [line for line in lit.read_text().splitlines() if "RUN:" in line]
    runs_pass = re.compile(rf"(--{re.escape(name)}|--pass-pipeline=\S*\b{re.escape(name)})(?![\w-])")
    assert any(runs_pass.search(line) for line in runs), f"no RUN line of {lit.name} runs --{name}"


def test_every_lit_pass_test_names_a_registered_pass():
    names = {"fa4-" + p.stem for p in LIT_PASSES.glob("*.mlir")}
    assert names <= set(registry.PASSES), f"lit tests of unregistered passes: {sorted(names - set(registry.PASSES))}"


def test_every_registered_pass_runs_in_a_stage():
    staged = {n for arch in ("sm_90a", "sm_100a") for n in registry.fa4_stage(arch) + registry.nvvm_stage(arch)}
    assert set(registry.PASSES) <= staged, f"registered but in no stage: {sorted(set(registry.PASSES) - staged)}"


def _gemm_module():
    from fa4mlir.kernels import gemm_sm90
    return gemm_sm90.build().module


@pytest.mark.parametrize("broken", [True, False])
def test_a_stage_checks_every_pass_post_condition_in_one_walk(monkeypatch, broken):
    """Inside run_passes each pass's check_none_left is deferred to one walk after the stage's last pass
    (one_walk_of_checks): a pass that finds none of its ops (so lowers none) still fails the stage after the
    later passes ran, by its own name and its first leftover op; the real passes leave nothing."""
    from fa4mlir.passes import lower_tma
    from fa4mlir.passes._util import PassError
    module = _gemm_module()
    registry.run_passes(module, registry.fa4_stage("sm_90a"))
    if not broken:
        registry.run_passes(module, registry.nvvm_stage("sm_90a"))
        return
    real = lower_tma.ops_and_pipelines
    monkeypatch.setattr(lower_tma, "ops_and_pipelines", lambda func, *names: ([], real(func, *names)[1]))
    with pytest.raises(PassError, match=r"^fa4-lower-tma: 'fa4\.tma_\w+' was not lowered \(\d+ left\)"):
        registry.run_passes(module, registry.nvvm_stage("sm_90a"))


def test_a_pass_run_alone_checks_its_post_condition_at_once():
    """Outside run_passes (a pass module's run called directly, as tests and fa4mlir-opt's tools may), the
    check walks then and there."""
    from fa4mlir.passes import _util
    module = _gemm_module()
    with module.context, pytest.raises(_util.PassError, match=r"^fa4-x: 'fa4.tma_load' was not lowered"):
        _util.check_none_left(module.operation, ("fa4.tma_load",), "fa4-x")
    with module.context:
        _util.check_none_left(module.operation, ("fa4.no_such_op",), "fa4-x")
