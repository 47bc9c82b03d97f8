"""fa4-lower-math: f32 transcendentals the kernels use -> the SFU's approximate PTX instructions;
FP8 conversions -> cvt.

`fa4.cvt_e4m3x2` -> `cvt.rn.f16x2.e4m3x2` (PTX ISA 9.7.9.21 "cvt", sm_89+): two e4m3 bytes to an
f16x2 pair, exact (nvvm in LLVM 22 has no op for it).

`fa4.tanh_f16x2` -> `tanh.approx.f16x2` (PTX ISA 9.7.4.9, sm_75+): two f16 in an i32; on sm_90a ptxas
emits one MUFU.TANH.F16 per half (not one op for the pair), so it saves no SFU op [D-softcap-fold].

`fa4.prmt` -> `prmt.b32 d, a, b, selector` (PTX ISA 9.7.9.7 "prmt", default mode; the selector an
immediate): the byte permute of the FP8 decode's bit-level e4m3 conversion (common/e4m3_tile.py,
note "Bit conversion").

`math.exp2` -> `ex2.approx.ftz.f32` and `math.log2` -> `lg2.approx.ftz.f32` (PTX ISA 9.7.4.5,
9.7.4.4: max relative error 2^-22 over the normal range; subnormal inputs and results flush to 0);
`math.tanh` -> `tanh.approx.f32` (PTX ISA 9.7.4.9, sm_75+: one SFU op, max relative error 2^-11,
the softcap's tanh as FlashAttention-3/4 compute it; subnormal results are not flushed).
LLVM's NVPTX back end has no lowering of `llvm.log2.f32` without libdevice, and picking the
instruction here keeps the softmax's exp2 the single SFU op FlashAttention budgets for. Other
element types are rejected rather than silently routed elsewhere.
"""
from __future__ import annotations

from .._mlir import ir, nvvm
from ._util import PassError, check_none_left, kernel_func, ops_named, replace

NAME = "fa4-lower-math"
OPS = ("math.exp2", "math.log2", "math.tanh", "fa4.cvt_e4m3x2", "fa4.prmt", "fa4.tanh_f16x2")
PTX = {"math.exp2": "ex2.approx.ftz.f32 $0, $1;", "math.log2": "lg2.approx.ftz.f32 $0, $1;",
       "math.tanh": "tanh.approx.f32 $0, $1;",
       "fa4.cvt_e4m3x2": "cvt.rn.f16x2.e4m3x2 $0, $1;", "fa4.tanh_f16x2": "tanh.approx.f16x2 $0, $1;"}
PRMT_MAX_SELECTOR = 0xFFFF    # four 4-bit byte selectors


def prmt_ptx(selector: int) -> str:
    """The inline PTX of fa4.prmt with `selector` (the interpreter parses the same text back)."""
    return f"prmt.b32 $0, $1, $2, {selector:#06x};"


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    for op in ops_named(func, *OPS):              # one walk; each op is rewritten in place
        name = op.name
        if name in ("fa4.cvt_e4m3x2", "fa4.tanh_f16x2"):
            with ir.InsertionPoint(op), op.location:
                replace(op, [nvvm.InlinePtxOp([i32], [op.operands[0]], [], PTX[name]).results[0]])
        elif name == "fa4.prmt":
            selector = ir.IntegerAttr(op.attributes["selector"]).value
            if not 0 <= selector <= PRMT_MAX_SELECTOR:
                raise PassError(f"{NAME}: fa4.prmt selector must be in [0, {PRMT_MAX_SELECTOR:#x}] (four byte "
                                f"selectors), got {selector:#x}", op.location)
            with ir.InsertionPoint(op), op.location:
                replace(op, [nvvm.InlinePtxOp([i32], list(op.operands), [], prmt_ptx(selector)).results[0]])
        else:
            x = op.operands[0]
            if x.type != f32:
                raise PassError(f"{NAME}: {name} is lowered for f32 only, got {x.type}", op.location)
            with ir.InsertionPoint(op), op.location:
                replace(op, [nvvm.InlinePtxOp([f32], [x], [], PTX[name]).results[0]])
    check_none_left(func, OPS, NAME)
