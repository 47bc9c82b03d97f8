"""The kernel DSL: plain Python that builds fa4 + arith/scf/math/vector IR by explicit calls.

    core.py    typed values (`Value`) and their arithmetic, constants, math, pipeline states,
               the control-flow helpers and `KernelIR`
    kernel.py  `KernelBuilder`: parameters, SMEM and pipeline declarations, roles, control flow
    tree.py    pytrees of values (tuples, NamedTuples, dataclasses): what loops carry and branches
               yield, flattened in one place

Import direction: tree <- core <- kernel <- this package; neither module imports the package.
"""
from __future__ import annotations

from .core import (ELEM_BYTES, KernelIR, ParamSpec, PipeState, Pipeline, TmaSpec, Value, const, exp2, fast_div,
                   floor, fma, fmax, log2, mlir_type, select, source_loc, tanh, tree_reduce, umulhi, undef, vec)
from . import tree
from .kernel import KernelBuilder, Param

__all__ = ["KernelBuilder", "KernelIR", "Param", "Value", "Pipeline", "PipeState", "const", "select", "exp2",
           "log2", "tanh", "floor", "fmax", "fma", "undef", "tree_reduce", "vec", "umulhi", "fast_div",
           "tree", "mlir_type", "source_loc", "ParamSpec", "TmaSpec", "ELEM_BYTES"]
