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
