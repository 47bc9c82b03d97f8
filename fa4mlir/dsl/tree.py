"""Pytrees of DSL values: what loops carry and branches yield, flattened once, here.

A tree is a tuple, list, NamedTuple, dict or dataclass (e.g. `PipeState`) nesting leaves. The
leaves of a value tree are `Value`s (and raw `ir.Value`s); anything else (an int stage count, a
string, None) is static: part of the structure, not carried, handed back as it was. Flattening
is depth first in field order, so a NamedTuple `(k: PipeState, o, m: (m0, m1))` carries
`k.stage, k.phase, o, m0, m1` in that order (as Mosaic GPU's `fori` flattens its carry).

    leaves, shape = flatten(state)          # the IR values, in order
    state2 = shape.unflatten(new_leaves)    # the same structure around other values
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .._mlir import ir


def is_value(x) -> bool:
    """A leaf of a value tree: a DSL `Value` (a kernel parameter too) or an ir.Value."""
    from .core import Value  # core builds its loops on this module
    return isinstance(x, (Value, ir.Value))


def is_type_spec(x) -> bool:
    """A leaf of a type tree: "f32", an ir.Type, ("f32", 8) (a vector), or a value (its type)."""
    return (isinstance(x, (str, ir.Type)) or is_value(x)
            or (isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], int)))


@dataclasses.dataclass(frozen=True)
class Shape:
    """The structure of a tree: `kind` is "leaf", "static" (`data` kept as is), "seq" (`data` the
    tuple/list/NamedTuple type), "dict" (`data` the keys) or "dataclass" (`data` the class)."""
    kind: str
    data: Any = None
    children: tuple = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves) -> Any:
        """This structure around `leaves` (exactly `num_leaves` of them, in flatten's order)."""
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"expected {self.num_leaves} values for {self.describe()}, got {len(leaves)}")
        it = iter(leaves)
        return self._build(it)

    def _build(self, it):
        if self.kind == "leaf":
            return next(it)
        if self.kind == "static":
            return self.data
        parts = [c._build(it) for c in self.children]
        if self.kind == "dict":
            return dict(zip(self.data, parts))
        if self.kind == "dataclass":
            names = [f.name for f in dataclasses.fields(self.data) if f.init]
            return self.data(**dict(zip(names, parts)))
        if self.data is list:
            return parts
        if self.data is tuple:
            return tuple(parts)
        return self.data(*parts)    # a NamedTuple

    def describe(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "static":
            return repr(self.data)
        name = getattr(self.data, "__name__", "dict")
        return f"{name}({', '.join(c.describe() for c in self.children)})"


def flatten(tree, is_leaf: Callable[[Any], bool] = is_value) -> tuple[list, Shape]:
    """The leaves of `tree` (depth first, in field order) and its Shape."""
    leaves: list = []
    return leaves, _flatten(tree, is_leaf, leaves)


def _flatten(x, is_leaf, leaves) -> Shape:
    if is_leaf(x):
        leaves.append(x)
        return Shape("leaf")
    if isinstance(x, (tuple, list)):
        return Shape("seq", type(x), tuple(_flatten(c, is_leaf, leaves) for c in x))
    if isinstance(x, dict):
        keys = tuple(x)
        return Shape("dict", keys, tuple(_flatten(x[k], is_leaf, leaves) for k in keys))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        fields = [f for f in dataclasses.fields(x) if f.init]
        return Shape("dataclass", type(x), tuple(_flatten(getattr(x, f.name), is_leaf, leaves) for f in fields))
    return Shape("static", x)


def leaves(tree, is_leaf: Callable[[Any], bool] = is_value) -> list:
    """flatten(tree)'s leaves only."""
    return flatten(tree, is_leaf)[0]


__all__ = ["Shape", "flatten", "leaves", "is_value", "is_type_spec"]
