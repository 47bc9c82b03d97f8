"""Deviceless checks of the debug watchdog (fa4mlir/passes/_watchdog.py) and its deadlock kernel."""
import re

import pytest

from fa4mlir import lowering
from fa4mlir.dialect.query import UNVERIFIED_ATTR, PassError, kernel_func
from fa4mlir.lowering import CompileOptions
from fa4mlir.kernels import deadlock_sm90, gemm_sm90
from fa4mlir.passes import verify_pipelines


def _ptx(kernel_ir, debug):
    with kernel_ir.module.context:
        ptx, _ = lowering.lower_module(kernel_ir.module, kernel_ir.arch, debug=debug)
    return ptx


def _strings(ptx: str) -> list[str]:
    """The text of every watchdog message global in the PTX (emitted as byte lists)."""
    out = []
    for m in re.finditer(r"fa4_watchdog_msg_\d+\[\d+\] = \{([\d, ]+)\}", ptx):
        out.append(bytes(int(b) for b in m.group(1).split(",")).rstrip(b"\0").decode())
    return out


def test_debug_gemm_ptx_has_bounded_waits():
    ptx = _ptx(gemm_sm90.build(), debug=True)
    for word in ("vprintf", "trap;", "%globaltimer", "mbarrier.try_wait.parity", "activemask.b32"):
        assert word in ptx, word
    texts = _strings(ptx)
    assert any("role 'load'" in t and "pipeline 'ab_pipe' empty[stage %d] phase %d" in t for t in texts), texts
    assert any("role 'mma'" in t and "pipeline 'ab_pipe' full[stage %d] phase %d" in t for t in texts), texts
    assert all(t.startswith("fa4mlir watchdog: kernel gemm_sm90_") for t in texts)


def test_release_build_has_no_watchdog():
    ptx = _ptx(gemm_sm90.build(), debug=False)
    assert "vprintf" not in ptx and "%globaltimer" not in ptx and "trap;" not in ptx


def test_debug_gemm_compiles_to_cubin():
    art = lowering.lower(gemm_sm90.build(), CompileOptions(debug=True), key="x")
    assert art.cubin and art.resources["spill_stores"] == 0


def test_deadlock_kernel_is_rejected_by_the_verifier_unless_marked():
    kir = deadlock_sm90.build()
    with kir.module.context:
        func = kir.module.operation
        del kernel_func(func).attributes[UNVERIFIED_ATTR]
        with pytest.raises(PassError, match="pipeline 'kv_pipe': role 'consumer' waits on full.*'load' never commits"):
            verify_pipelines.run(func)


def test_the_deadlock_kernel_compiles_as_built():
    """build() marks it unverified and asks for the watchdog: the ordinary compile path takes it."""
    art = lowering.lower(deadlock_sm90.build(), key="deadlock")
    assert art.name == "deadlock_sm90_debug" and art.cubin
    ptx = _ptx(deadlock_sm90.build(), debug=True)
    assert any("role 'consumer'" in t and "pipeline 'kv_pipe' full[stage %d]" in t for t in _strings(ptx))
