"""Under CI (the CI variable set, as CI services do) every deviceless test must run: torch,
transformers, FA4 CuTe (flash_attn, cutlass, triton) and nvdisasm are test dependencies (pyproject's
`test` extra), so a missing one stops the run instead of quietly skipping the tests that need it
(the interpreter, the custom ops, the front end's torch paths, the FA4 CuTe cross-check, the SASS
checks)."""
import importlib.util
import os

import pytest


def pytest_configure(config):
    if not os.environ.get("CI"):
        return
    from fa4mlir.sass import find_nvdisasm
    missing = [m for m in ("torch", "transformers", "flash_attn", "cutlass", "triton")
               if importlib.util.find_spec(m) is None]
    if find_nvdisasm() is None:
        missing.append("nvdisasm (nvidia-cuda-nvdisasm)")
    if missing:
        raise pytest.UsageError(f"CI is set but {', '.join(missing)} cannot be imported: their tests would be "
                                f"skipped, not run; install the test extra (pip install -e '.[test]')")
