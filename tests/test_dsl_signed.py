"""Deviceless checks of the DSL's integer readings: the operators and lt/le/gt/ge stay unsigned,
the s-prefixed methods (and `to(..., signed=True)`) emit the signed arith ops, and the signed
ops lower to signed PTX."""
import re

import pytest

from fa4mlir import lowering
from fa4mlir.dsl import KernelBuilder


def _kernel(body):
    """A one-thread kernel that stores body(a, b) (a, b: i32 parameters) to out; returns its KernelIR."""
    kb = KernelBuilder("signed_test", arch="sm_90a", block=(32, 1, 1))
    out = kb.param_ptr("out")
    a, b = kb.param_i32("a"), kb.param_i32("b")
    with kb.body():
        kb.store(body(a, b), out)
    return kb.finish()


def _ops(kir) -> list[str]:
    """The arith ops of the kernel, with the predicate for cmpi ('arith.cmpi slt')."""
    found = []
    for m in re.finditer(r"= (arith\.\w+)( \w+,)?", str(kir.module)):
        found.append(m.group(1) + (" " + m.group(2).strip(" ,") if m.group(1) == "arith.cmpi" else ""))
    return found


@pytest.mark.parametrize("method, pred", [("lt", "ult"), ("le", "ule"), ("gt", "ugt"), ("ge", "uge"),
                                          ("slt", "slt"), ("sle", "sle"), ("sgt", "sgt"), ("sge", "sge")])
def test_comparison_predicates(method, pred):
    ops = _ops(_kernel(lambda a, b: getattr(a, method)(b).to("i32")))
    assert f"arith.cmpi {pred}" in ops, ops


@pytest.mark.parametrize("expr, op", [
    (lambda a, b: a // b, "arith.divui"), (lambda a, b: a % b, "arith.remui"),
    (lambda a, b: a >> b, "arith.shrui"), (lambda a, b: a.sdiv(b), "arith.divsi"),
    (lambda a, b: a.srem(b), "arith.remsi"), (lambda a, b: a.ashr(b), "arith.shrsi"),
    (lambda a, b: a.smin(b), "arith.minsi"), (lambda a, b: a.smax(b), "arith.maxsi"),
    (lambda a, b: a.to("i64").to("i32"), "arith.extui"), (lambda a, b: a.to("i64", signed=True).to("i32"), "arith.extsi"),
    (lambda a, b: a.to("f32").to("i32"), "arith.uitofp"), (lambda a, b: a.to("f32", signed=True).to("i32"), "arith.sitofp"),
])
def test_unsigned_operators_and_signed_methods(expr, op):
    ops = _ops(_kernel(expr))
    assert op in ops, ops
    signed, unsigned = op.replace("ui", "si").replace("shru", "shrs"), op.replace("si", "ui").replace("shrs", "shru")
    assert (unsigned if op == signed else signed) not in ops, ops   # never both readings


@pytest.mark.parametrize("method, adjust", [("sfloordiv", "arith.subi"), ("sceildiv", "arith.addi")])
def test_rounded_signed_division_uses_divsi_remsi_and_a_select(method, adjust):
    ops = _ops(_kernel(lambda a, b: getattr(a, method)(b)))
    assert ops.count("arith.divsi") == 1 and ops.count("arith.remsi") == 1, ops
    assert "arith.cmpi slt" in ops and "arith.cmpi ne" in ops and adjust in ops and "arith.select" in ops, ops
    assert not any(o in ops for o in ("arith.divui", "arith.remui", "arith.floordivsi", "arith.ceildivsi")), ops


def test_integer_only_methods_refuse_floats():
    def body(a, b):
        with pytest.raises(TypeError, match="sdiv is an integer operation"):
            a.to("f32").sdiv(2.0)
        return a
    _kernel(body)


def test_signed_ops_lower_to_signed_ptx():
    def body(a, b):
        x = a.sdiv(b) + a.srem(b) + a.ashr(1) + a.sfloordiv(b) + a.sceildiv(b) + a.smin(b)
        f = x.to("f32", signed=True) + a.to("f32")
        return f.to("i32") + a.slt(b).to("i32")
    kir = _kernel(body)
    with kir.module.context:
        ptx, _ = lowering.lower_module(kir.module, kir.arch)
    # (LLVM forms a remainder from the quotient: a - q * b, so no rem.s32 need appear)
    for word in ("div.s32", "shr.s32", "min.s32", "cvt.rn.f32.s32", "cvt.rn.f32.u32", "setp.lt.s32"):
        assert word in ptx, word
    assert "div.u32" not in ptx and "rem.u32" not in ptx


def test_python_floor_semantics_of_the_rounding_rule():
    """The select rule of sfloordiv/sceildiv, evaluated with Python ints, agrees with // and ceil."""
    def trunc_div(a, b):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q
    for a in range(-9, 10):
        for b in (-4, -3, -1, 1, 2, 5):
            q, r = trunc_div(a, b), a - trunc_div(a, b) * b
            differ = (r < 0) != (b < 0)
            assert (q - 1 if r != 0 and differ else q) == a // b
            assert (q + 1 if r != 0 and not differ else q) == -((-a) // b)
