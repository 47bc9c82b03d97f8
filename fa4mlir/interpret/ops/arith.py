"""arith, math and vector ops: lane-wise numpy over [lanes] or [lanes, N] arrays.

Integers wrap (numpy fixed width); unsigned ops view the bits as unsigned. f32 arithmetic is numpy
float32 (IEEE round to nearest); math.fma rounds once (computed in float64). bf16 values are raw
bits (numeric.py), so truncf to bf16 rounds to nearest even and bitcasts reinterpret bits.
"""
from __future__ import annotations

import numpy as np

from ..._mlir import ir
from ..faults import Unsupported
from ..numeric import UNSIGNED, f32_to_bf16, bf16_to_f32, is_bf16, lane_shape, np_dtype, vector_len
from ..program import PLAIN
from . import semantics


def _lanewise(a, r, f):
    if len(a) == 1:
        x, z = a[0], r[0]

        def run1(env, mask, w):
            env[z] = f(env[x])
        return PLAIN, run1
    x, y, z = a[0], a[1], r[0]

    def run(env, mask, w):
        env[z] = f(env[x], env[y])
    return PLAIN, run


def _unsigned(f):
    def g(x, y):
        u = UNSIGNED[x.dtype]
        res = f(x.view(u), y.view(u))
        return res if res.dtype == np.bool_ else res.astype(u).view(x.dtype)
    return g


def _safe(y):
    return np.where(y == 0, np.ones_like(y), y)


_BINARY = {
    "arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
    "arith.shli": lambda x, y: np.left_shift(x, y.astype(x.dtype)),
    "arith.shrui": _unsigned(lambda x, y: np.right_shift(x, y)),
    "arith.shrsi": lambda x, y: np.right_shift(x, y.astype(x.dtype)),
    "arith.divui": _unsigned(lambda x, y: x // _safe(y)), "arith.remui": _unsigned(lambda x, y: x % _safe(y)),
    "arith.divsi": lambda x, y: (np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(_safe(y)))).astype(x.dtype),
    "arith.remsi": lambda x, y: np.fmod(x, _safe(y)).astype(x.dtype),   # C's %: the dividend's sign
    "arith.minsi": np.minimum, "arith.maxsi": np.maximum,
    "arith.minui": _unsigned(np.minimum), "arith.maxui": _unsigned(np.maximum),
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply, "arith.divf": np.divide,
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum, "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin,
}


@semantics(*_BINARY)
def binary(p, op, a, r):
    return _lanewise(a, r, _BINARY[op.name])


@semantics("arith.negf")
def negf(p, op, a, r):
    return _lanewise(a, r, np.negative)


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal}
_CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
_CMPF = {1: "oeq", 2: "ogt", 3: "oge", 4: "olt", 5: "ole", 6: "one", 7: "ord", 8: "ueq", 9: "ugt", 10: "uge",
         11: "ult", 12: "ule", 13: "une", 14: "uno"}


@semantics("arith.cmpi")
def cmpi(p, op, a, r):
    pred = _CMPI[ir.IntegerAttr(op.attributes["predicate"]).value]
    f = _CMP[pred[-2:]]
    return _lanewise(a, r, _unsigned(f) if pred[0] == "u" else f)


@semantics("arith.cmpf")
def cmpf(p, op, a, r):
    pred = _CMPF.get(ir.IntegerAttr(op.attributes["predicate"]).value)
    if pred is None or pred in ("ord", "uno"):
        raise Unsupported(f"arith.cmpf predicate {op.attributes['predicate']}")
    f = _CMP[pred[1:]]
    if pred[0] == "o":       # ordered: false when either is NaN
        return _lanewise(a, r, lambda x, y: f(x, y) & ~np.isnan(x) & ~np.isnan(y))
    return _lanewise(a, r, lambda x, y: f(x, y) | np.isnan(x) | np.isnan(y))


@semantics("arith.select")
def select(p, op, a, r):
    c, x, y, z = a[0], a[1], a[2], r[0]

    def run(env, mask, w):
        cond, xv = env[c], env[x]
        if cond.ndim < xv.ndim:
            cond = cond[:, None]
        env[z] = np.where(cond, xv, env[y])
    return PLAIN, run


@semantics("arith.extui", "arith.trunci", "arith.extsi")
def int_cast(p, op, a, r):
    dt = np_dtype(op.results[0].type)
    src = np_dtype(op.operands[0].type)
    if op.name == "arith.extui" and src != np.bool_:
        u = UNSIGNED[np.dtype(src)]
        return _lanewise(a, r, lambda x: x.view(u).astype(dt))
    return _lanewise(a, r, lambda x: x.astype(dt))


@semantics("arith.index_cast", "arith.index_castui")
def index_cast(p, op, a, r):
    dt = np_dtype(op.results[0].type)
    return _lanewise(a, r, lambda x: x.astype(dt))


@semantics("arith.sitofp", "arith.uitofp")
def int_to_float(p, op, a, r):
    if is_bf16(op.results[0].type):
        raise Unsupported("int -> bf16 conversion")
    dt = np_dtype(op.results[0].type)
    if op.name == "arith.uitofp":
        return _lanewise(a, r, lambda x: x.view(UNSIGNED[x.dtype]).astype(dt))
    return _lanewise(a, r, lambda x: x.astype(dt))


@semantics("arith.fptosi", "arith.fptoui")
def float_to_int(p, op, a, r):
    dt = np_dtype(op.results[0].type)
    return _lanewise(a, r, lambda x: np.trunc(x).astype(dt))


@semantics("arith.truncf")
def truncf(p, op, a, r):
    if is_bf16(op.results[0].type):
        return _lanewise(a, r, f32_to_bf16)
    dt = np_dtype(op.results[0].type)
    return _lanewise(a, r, lambda x: x.astype(dt))


@semantics("arith.extf")
def extf(p, op, a, r):
    if is_bf16(op.operands[0].type):
        return _lanewise(a, r, bf16_to_f32)
    dt = np_dtype(op.results[0].type)
    return _lanewise(a, r, lambda x: x.astype(dt))


@semantics("arith.bitcast", "vector.bitcast")
def bitcast(p, op, a, r):
    dt = np_dtype(op.results[0].type)
    shape = lane_shape(op.results[0].type)
    return _lanewise(a, r, lambda x: np.ascontiguousarray(x).view(dt).reshape(shape))


@semantics("math.fma")
def fma(p, op, a, r):
    x, y, c, z = a[0], a[1], a[2], r[0]

    def run(env, mask, w):
        xv = env[x]
        env[z] = (xv.astype(np.float64) * env[y] + env[c]).astype(xv.dtype)
    return PLAIN, run


_MATH = {"math.exp2": np.exp2, "math.log2": np.log2, "math.exp": np.exp, "math.log": np.log, "math.sqrt": np.sqrt,
         "math.absf": np.abs, "math.floor": np.floor, "math.rsqrt": lambda x: 1 / np.sqrt(x), "math.tanh": np.tanh}


@semantics(*_MATH)
def math_unary(p, op, a, r):
    f = _MATH[op.name]
    return _lanewise(a, r, lambda x: f(x).astype(x.dtype))


@semantics("arith.constant")
def constant(p, op, a, r):
    t, attr = op.results[0].type, op.attributes["value"]
    key = (t, attr)                      # uniqued in the context: equal type and value, one array
    array = p.constant_arrays.get(key)
    if array is None:
        array = p.constant_arrays[key] = _constant_array(t, attr)
    p.constant(op.results[0], array)
    return None


def _constant_array(t, attr) -> np.ndarray:
    if vector_len(t) is not None:
        dense = ir.DenseElementsAttr(attr)
        if not dense.is_splat:
            raise Unsupported("non-splat vector constant")
        value = _scalar(dense.get_splat_value(), ir.VectorType(t).element_type)
    else:
        value = _scalar(attr, t)
    array = np.full(lane_shape(t), value, dtype=np_dtype(t))
    if is_bf16(t):
        array = np.full(lane_shape(t), f32_to_bf16(np.float32(value)), np.uint16)
    return array


def _scalar(attr, t):
    if isinstance(attr, ir.BoolAttr):
        return ir.BoolAttr(attr).value
    if isinstance(attr, ir.FloatAttr) or isinstance(t, (ir.F32Type, ir.F16Type, ir.BF16Type)):
        return ir.FloatAttr(attr).value
    value = ir.IntegerAttr(attr).value
    return bool(value) if str(t) == "i1" else value


@semantics("vector.extract")
def vector_extract(p, op, a, r):
    pos = list(ir.DenseI64ArrayAttr(op.attributes["static_position"]))
    if len(pos) != 1 or len(a) != 1 or pos[0] < 0:
        raise Unsupported("vector.extract: one static position of a 1-D vector only")
    i, x, z = pos[0], a[0], r[0]

    def run(env, mask, w):
        env[z] = env[x][:, i]
    return PLAIN, run


@semantics("vector.from_elements")
def vector_from_elements(p, op, a, r):
    z = r[0]

    def run(env, mask, w):
        env[z] = np.stack([env[s] for s in a], axis=1)
    return PLAIN, run


@semantics("vector.splat", "vector.broadcast")
def vector_splat(p, op, a, r):
    n = vector_len(op.results[0].type)
    x, z = a[0], r[0]

    def run(env, mask, w):
        env[z] = np.repeat(env[x][:, None], n, axis=1)
    return PLAIN, run


