"""The one escape hatch to raw PTX: instructions no nvvm op offers, each citing its PTX ISA section.

Use only from passes (kernels speak fa4). Every function emits one `nvvm.inline_ptx` at the current
insertion point.
"""
from __future__ import annotations

from .._mlir import ir, nvvm


def activemask() -> ir.Value:
    """The mask of the warp's currently active lanes (PTX ISA 9.7.13.13 "activemask"): lets one
    active lane of a divergent warp act for it (nvvm has no activemask op in LLVM 22)."""
    i32 = ir.IntegerType.get_signless(32)
    return nvvm.InlinePtxOp([i32], [], [], "activemask.b32 $0;").results[0]
