"""fa4-lower-math: f32 transcendentals the kernels use -> the SFU's approximate PTX instructions.

`math.exp2` -> `ex2.approx.ftz.f32` and `math.log2` -> `lg2.approx.ftz.f32` (PTX ISA 9.7.4.5,
9.7.4.4: max relative error 2^-22 over the normal range; subnormal inputs and results flush to 0).
LLVM's NVPTX back end has no lowering of `llvm.log2.f32` without libdevice, and picking the
instruction here keeps the softmax's exp2 the single SFU op FlashAttention budgets for. Other
element types are rejected rather than silently routed elsewhere.
"""
from __future__ import annotations

from .._mlir import ir, nvvm
from ._util import PassError, check_none_left, kernel_func, ops_named, replace

NAME = "fa4-lower-math"
OPS = ("math.exp2", "math.log2")
PTX = {"math.exp2": "ex2.approx.ftz.f32 $0, $1;", "math.log2": "lg2.approx.ftz.f32 $0, $1;"}


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    f32 = ir.F32Type.get()
    for op in ops_named(func, *OPS):
        x = op.operands[0]
        if x.type != f32:
            raise PassError(f"{NAME}: {op.name} is lowered for f32 only, got {x.type}", op.location)
        with ir.InsertionPoint(op), op.location:
            replace(op, [nvvm.InlinePtxOp([f32], [x], [], PTX[op.name]).results[0]])
    check_none_left(func, OPS, NAME)
