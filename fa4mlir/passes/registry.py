"""Every fa4 pass by name, and the pass list of each compiler stage per arch."""
from __future__ import annotations

import importlib

from .._mlir import ir
from ._util import one_walk_of_checks

# pass name -> module under fa4mlir.passes (one file per pass, lit test of the same stem)
PASSES = {
    "fa4-verify-pipelines": "verify_pipelines",
    "fa4-plan-smem": "plan_smem",
    "fa4-plan-tmem": "plan_tmem",
    "fa4-lower-tma": "lower_tma",
    "fa4-lower-mma-sm90": "lower_mma_sm90",
    "fa4-lower-mma-sm100": "lower_mma_sm100",
    "fa4-lower-tmem": "lower_tmem",
    "fa4-lower-pipelines": "lower_pipelines",
    "fa4-lower-sync": "lower_sync",
    "fa4-specialize-warps": "specialize_warps",
    "fa4-lower-math": "lower_math",
}
DEBUG_AWARE = {"fa4-lower-pipelines"}


def fa4_stage(arch: str) -> list[str]:
    names = ["fa4-verify-pipelines", "fa4-plan-smem"]
    if arch == "sm_100a":
        names.append("fa4-plan-tmem")
    return names  # no filtering: a pass that is missing fails loudly in run_passes


def nvvm_stage(arch: str) -> list[str]:
    mma = "fa4-lower-mma-sm90" if arch == "sm_90a" else "fa4-lower-mma-sm100"
    names = ["fa4-lower-tma", mma]
    if arch == "sm_100a":
        names.append("fa4-lower-tmem")
    names += ["fa4-lower-pipelines", "fa4-specialize-warps", "fa4-lower-sync", "fa4-lower-math"]
    return names


def available(name: str) -> bool:
    try:
        get(name)
        return True
    except ModuleNotFoundError:
        return False


def get(name: str):
    if name not in PASSES:
        raise KeyError(f"unknown pass {name!r}; known: {', '.join(sorted(PASSES))}")
    return importlib.import_module(f"{__package__}.{PASSES[name]}")


def run_passes(module: ir.Module, names: list[str], *, debug: bool = False) -> None:
    """Run fa4 passes in order on `module`; a PassError names the pass and the op's location. The passes'
    post-conditions (check_none_left) are checked after the last one, in one walk (one_walk_of_checks)."""
    root = module.operation
    with module.context, one_walk_of_checks(root):
        for name in names:
            mod = get(name)
            if name in DEBUG_AWARE:
                mod.run(root, debug=debug)
            else:
                mod.run(root)
