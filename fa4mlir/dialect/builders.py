"""Python builders for the fa4 ops: `create()` plus one generated function per op of the table.

    from fa4mlir.dialect import builders as fa4
    fa4.consumer_wait(stage, phase, pipe="kv_pipe")
    d = fa4.smem_desc(addr, swizzle=128, lbo=16, sbo=1024)      # -> the i64 result value

Operands come positionally (a variadic group as one list, in table order), attributes as keywords
(checked against the table), fixed result types are derived from the table and variadic/`any`
results are given with `result_types=`. Each op is created at the current insertion point with the
source location of the first caller frame outside fa4mlir's builder modules. Each function's
docstring is the op's semantics from ops.py. Functions return the op's single result, or the
Operation when it has none or several.
"""
from __future__ import annotations

import inspect
import os
import sys

from .._mlir import ir
from .ops import OPS, OPS_BY_NAME

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BUILDER_FILES = tuple(os.path.join(_PKG, f) for f in ("dsl", "dialect", "_mlir.py"))
_FIXED_RESULT = {"i1": "i1", "i16": "i16", "i32": "i32", "i64": "i64", "smem_ptr": "!llvm.ptr<3>", "cluster_ptr": "!llvm.ptr<7>"}


def source_loc() -> ir.Location:
    """The location of the innermost caller outside fa4mlir's builder modules.

    Walks frame links up to that caller only: inspect.stack() would build (and stat the file of)
    every frame of the whole stack for each op, which made a kernel build 2-3x slower under pytest."""
    frame = sys._getframe(1)
    while frame is not None:
        path, builder = _file_kind(frame.f_code.co_filename)
        if not builder:
            return ir.Location.file(path, frame.f_lineno, 0)
        frame = frame.f_back
    return ir.Location.unknown()


_FILE_KINDS: dict = {}


def _file_kind(filename: str) -> tuple:
    """(absolute path, whether it is a builder module or contextlib) of a code object's file, once
    per file (os.path.abspath per frame per op was 5% of a kernel's compile)."""
    kind = _FILE_KINDS.get(filename)
    if kind is None:
        path = os.path.abspath(filename)
        kind = _FILE_KINDS[filename] = (path, path.startswith(_BUILDER_FILES) or "contextlib" in path)
    return kind


def attribute(value, kind: str) -> ir.Attribute:
    if kind == "str":
        return ir.StringAttr.get(value)
    if kind == "bool":
        return ir.BoolAttr.get(bool(value))
    if kind == "int":
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
    if kind == "ints":
        return ir.DenseI64ArrayAttr.get([int(x) for x in value])
    if kind == "strs":
        return ir.ArrayAttr.get([ir.StringAttr.get(s) for s in value])
    raise ValueError(f"unknown attribute kind {kind!r}")


def _type(t) -> ir.Type:
    return t if isinstance(t, ir.Type) else ir.Type.parse(t)


def create(op_name: str, operands=(), result_types=(), /, **attrs) -> ir.Operation:
    """Create `fa4.<op_name>`; attribute names and kinds are checked against the op table."""
    opdef = OPS_BY_NAME.get(op_name)
    if opdef is None:
        raise ValueError(f"fa4.{op_name} is not an op of the fa4 dialect; ops: {', '.join(sorted(OPS_BY_NAME))}")
    kinds = dict(opdef.attrs) | dict(opdef.optional_attrs)
    missing = [a for a, _ in opdef.attrs if a not in attrs]
    unknown = [a for a in attrs if a not in kinds]
    if missing or unknown:
        raise TypeError(f"fa4.{op_name}: missing attributes {missing}, unknown attributes {unknown}; "
                        f"it takes {sorted(kinds)}")
    values = [getattr(o, "v", o) for o in operands]
    return ir.Operation.create(f"fa4.{op_name}", results=[_type(t) for t in result_types], operands=values,
                               attributes={k: attribute(v, kinds[k]) for k, v in attrs.items()},
                               regions=len(opdef.regions), loc=source_loc())


def _make(opdef):
    names = [n for n, _ in opdef.operands]

    def build(*operands, result_types=None, **attrs):
        flat = []
        for (name, cons), value in zip(opdef.operands, operands):
            flat.extend(value if cons.startswith("*") else [value])
        if len(operands) != len(opdef.operands):
            raise TypeError(f"fa4.{opdef.name} takes operands ({', '.join(names)}), got {len(operands)}")
        if result_types is None:
            if any(c.startswith("*") or c not in _FIXED_RESULT for _, c in opdef.results):
                raise TypeError(f"fa4.{opdef.name}: pass result_types= (its results are not of a fixed type)")
            result_types = [_FIXED_RESULT[c] for _, c in opdef.results]
        op = create(opdef.name, flat, result_types, **attrs)
        return op.result if len(op.results) == 1 else op

    build.__name__ = build.__qualname__ = opdef.name
    attrs = ", ".join(f"{n}: {k}" for n, k in opdef.attrs)
    build.__doc__ = (f"fa4.{opdef.name}({', '.join(names)}){'  [' + attrs + ']' if attrs else ''}\n\n"
                     + inspect.cleandoc(opdef.doc))
    return build


for _opdef in OPS:
    globals()[_opdef.name] = _make(_opdef)

__all__ = ["create", "source_loc", "attribute"] + [op.name for op in OPS]
