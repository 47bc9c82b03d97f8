"""Finding things in a kernel module, for both sides of the dialect: the passes that rewrite it and
the kernels that build it.

    ops_named(root, *names)   every op under root with one of the names (or a prefix ending in '.')
    kernel_func(module)       the one llvm.func carrying nvvm.kernel
    gpu_module(module)        the one gpu.module
    mark_unverified(module)   put UNVERIFIED_ATTR on the kernel function: fa4-verify-pipelines skips
                              it (only kernels broken on purpose, e.g. kernels/deadlock_sm90.py)

`PassError` lives here because these queries raise it; passes import it through passes/_util.py.
"""
from __future__ import annotations

from .._mlir import ir

UNVERIFIED_ATTR = "fa4.unverified"  # on a kernel broken on purpose (watchdog tests): not verified


class PassError(Exception):
    """A pass failed at `loc` (the op's source location); the message says what and how to fix."""

    def __init__(self, message: str, loc: ir.Location | None = None):
        super().__init__(message)
        self.loc = loc


def ops_named(root: ir.Operation, *names: str) -> list[ir.Operation]:
    """Every op under `root` whose name is in `names` (or starts with a name ending in '.'), pre-order.
    The callback runs once per op of the module (Python), so it does one set lookup and at most one
    str.startswith: the passes' walks were 40% of a kernel's compile time with a generator per op."""
    exact = frozenset(n for n in names if not n.endswith("."))
    prefixes = tuple(n for n in names if n.endswith("."))
    found: list[ir.Operation] = []
    add, advance = found.append, ir.WalkResult.ADVANCE

    if prefixes:
        def visit(op):
            n = op.name
            if n in exact or n.startswith(prefixes):
                add(op)
            return advance
    else:
        def visit(op):
            if op.name in exact:
                add(op)
            return advance

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def llvm_funcs(root: ir.Operation) -> list[ir.Operation]:
    """Every llvm.func under `root`, pre-order, as ops_named(root, "llvm.func"), without walking
    their bodies (an llvm.func holds no llvm.func; the bodies are nearly all of a kernel's ops)."""
    found: list[ir.Operation] = []
    advance, skip = ir.WalkResult.ADVANCE, ir.WalkResult.SKIP

    def visit(op):
        if op.name == "llvm.func":
            found.append(op)
            return skip
        return advance

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _children(op: ir.Operation, name: str) -> list[ir.Operation]:
    """The ops named `name` directly in op's single-block body ([] if op has no such body)."""
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        return []
    return [child.operation for child in op.regions[0].blocks[0].operations if child.operation.name == name]


def _kernel_funcs_fast(module: ir.Operation) -> list[ir.Operation]:
    """The kernel llvm.funcs of the usual layout, builtin.module > gpu.module > llvm.func, without
    walking every op ([] otherwise): the passes ask for the kernel often."""
    mods = _children(module, "gpu.module")
    if len(mods) != 1:
        return []
    return [f for f in _children(mods[0], "llvm.func") if "nvvm.kernel" in f.attributes]


def kernel_func(module: ir.Operation) -> ir.Operation:
    """The (single) kernel llvm.func inside the module's gpu.module."""
    fast = _kernel_funcs_fast(module)
    if len(fast) == 1:
        return fast[0]
    funcs = [op for op in llvm_funcs(module) if "nvvm.kernel" in op.attributes]
    if len(funcs) != 1:
        raise PassError(f"expected exactly one kernel function (llvm.func with nvvm.kernel), found {len(funcs)}")
    return funcs[0]


def gpu_module(module: ir.Operation) -> ir.Operation:
    top = _children(module, "gpu.module")
    if len(top) == 1:
        return top[0]
    mods = ops_named(module, "gpu.module")
    if len(mods) != 1:
        raise PassError(f"expected one gpu.module, found {len(mods)}")
    return mods[0]


def mark_unverified(module: ir.Operation) -> None:
    """Mark the module's kernel function as broken on purpose: fa4-verify-pipelines skips it (and only it).
    Call with the module's context active."""
    kernel_func(module).attributes[UNVERIFIED_ATTR] = ir.UnitAttr.get()


__all__ = ["PassError", "UNVERIFIED_ATTR", "gpu_module", "kernel_func", "llvm_funcs", "mark_unverified", "ops_named"]
