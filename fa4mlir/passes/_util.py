"""Helpers shared by the fa4 passes: finding ops, reporting errors with locations, rewriting.

ops_named, kernel_func, gpu_module and PassError live in fa4mlir/dialect/query.py (the kernels use
them too) and are imported here for the passes.
"""
from __future__ import annotations

import contextlib
import threading

from .._mlir import arith, ir, llvm, nvvm
from ..dialect.query import PassError, gpu_module, kernel_func, ops_named  # noqa: F401  (the passes' imports)


def attr(op: ir.Operation, name: str):
    """A Python value of an attribute (int, str, bool, list)."""
    a = op.attributes[name]
    if isinstance(a, ir.StringAttr) or isinstance(a, ir.StringAttr):
        return ir.StringAttr(a).value
    if isinstance(a, ir.BoolAttr):
        return ir.BoolAttr(a).value
    if isinstance(a, ir.IntegerAttr):
        return ir.IntegerAttr(a).value
    if isinstance(a, ir.DenseI64ArrayAttr):
        return list(ir.DenseI64ArrayAttr(a))
    if isinstance(a, ir.ArrayAttr):
        return [ir.StringAttr(x).value for x in ir.ArrayAttr(a)]
    raise TypeError(f"unsupported attribute {a}")


CTA_GROUPS = {1: nvvm.CTAGroupKind.CTA_1, 2: nvvm.CTAGroupKind.CTA_2}   # tcgen05 .cta_group::1 / ::2


def cta_group(op: ir.Operation) -> int:
    """A tcgen05 op's `cta_group` attribute (1 when absent); PassError unless 1 or 2 (a CTA pair)."""
    group = attr(op, "cta_group") if "cta_group" in op.attributes else 1
    if group not in CTA_GROUPS:
        raise PassError(f"{op.name}: cta_group must be 1 or 2 (a CTA pair), got {group}", op.location)
    return group


def set_int_attr(op: ir.Operation, name: str, value: int) -> None:
    op.attributes[name] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


_post = threading.local()     # .checks: the (names, pass) post-conditions deferred to one walk (per thread)


def check_none_left(root: ir.Operation, names: tuple, pass_name: str) -> None:
    """Post-condition of a lowering pass: no op named in `names` is left. Inside `one_walk_of_checks`
    (registry.run_passes: a stage's passes) it is checked after the last pass, in one walk for all."""
    checks = getattr(_post, "checks", None)
    if checks is not None:
        checks.append((tuple(names), pass_name))
        return
    _raise_left(ops_named(root, *names), [(names, pass_name)])


def _raise_left(left: list, claims: list) -> None:
    """PassError for the first op of `left` (pre-order), naming the pass of `claims` ((names, pass)) that
    claimed its name, with how many of that pass's ops are left."""
    if not left:
        return
    op = left[0]
    names, pass_name = next((names, p) for names, p in claims if op.name in names)
    count = sum(1 for o in left if o.name in names)
    raise PassError(f"{pass_name}: '{op.name}' was not lowered ({count} left); "
                    f"it must be rewritten by this pass", op.location)


@contextlib.contextmanager
def one_walk_of_checks(module: ir.Operation):
    """Defer the check_none_left of the passes run inside to one walk of all of `module` at the end (each
    pass's own check is a walk of the whole kernel: about half of the walks of a compile). The first
    leftover op, in pre-order, names the pass that claimed its name; a leftover that a later pass of the
    same run lowered is not reported (the run's output holds none of the claimed ops either way)."""
    outer = getattr(_post, "checks", None)
    _post.checks = checks = []
    try:
        yield
    finally:
        _post.checks = outer
    if checks:
        union = tuple(dict.fromkeys(n for names, _ in checks for n in names))
        _raise_left(ops_named(module, *union), checks)


def replace(op: ir.Operation, values) -> None:
    """Replace every result of `op` by `values` and erase it."""
    for res, new in zip(op.results, values):
        res.replace_all_uses_with(new)
    op.erase()


def i32(value: int) -> ir.Value:
    return arith.constant(ir.IntegerType.get_signless(32), int(value))


def i64(value: int) -> ir.Value:
    return arith.constant(ir.IntegerType.get_signless(64), int(value))


SMEM_SYMBOL = "fa4_smem"


def smem_base() -> ir.Value:
    """Address of the kernel's dynamic shared memory (created by fa4-plan-smem)."""
    return llvm.mlir_addressof(ir.Type.parse("!llvm.ptr<3>"), SMEM_SYMBOL)


def byte_offset(base: ir.Value, offset: ir.Value | int) -> ir.Value:
    """`base + offset` bytes; offset an i32 value or a Python int."""
    if isinstance(offset, int):
        offset = i32(offset)
    return llvm.getelementptr(base.type, base, [offset], [-2147483648], ir.IntegerType.get_signless(8),
                              llvm.GEPNoWrapFlags.none)


def tid_x() -> ir.Value:
    return nvvm.read_ptx_sreg_tid_x(ir.IntegerType.get_signless(32))


def ops_and_pipelines(func: ir.Operation, *names: str) -> tuple[list, dict]:
    """ops_named(func, *names) and name -> fa4.pipeline op (after fa4-plan-smem gave each an `offset`),
    from one walk of `func`."""
    found = ops_named(func, *names, "fa4.pipeline")
    pipes = {attr(op, "sym_name"): op for op in found if op.name == "fa4.pipeline"}
    return [op for op in found if op.name != "fa4.pipeline"], pipes


def barrier_addr(pipes: dict, user: ir.Operation, side: str, stage: ir.Value) -> ir.Value:
    """Address of `full[stage]` / `empty[stage]` of the pipeline `user` names (insert at current point)."""
    name = attr(user, "pipe")
    pipe = pipes.get(name)
    if pipe is None:
        raise PassError(f"{user.name} names pipeline '{name}', which is not declared (fa4.pipeline)", user.location)
    if "offset" not in pipe.attributes:
        raise PassError(f"pipeline '{name}' has no SMEM offset: run fa4-plan-smem first", pipe.location)
    first = attr(pipe, "offset") + (attr(pipe, "num_stages") * 8 if side == "empty" else 0)
    off = arith.addi(arith.muli(stage, i32(8)), i32(first))
    return byte_offset(smem_base(), off)


def f32_struct_type(n: int) -> ir.Type:
    """!llvm.struct of n f32: what inline asm with n "=f" outputs (and NVVM's wgmma) returns."""
    return ir.Type.parse("!llvm.struct<(" + ", ".join(["f32"] * n) + ")>")


def vec_to_f32_struct(vec: ir.Value, n: int) -> ir.Value:
    s = llvm.mlir_undef(f32_struct_type(n))
    for i in range(n):
        s = llvm.insertvalue(s, llvm.extractelement(vec, i64(i)), [i])
    return s


def f32_struct_to_vec(s: ir.Value, n: int) -> ir.Value:
    f32 = ir.F32Type.get()
    v = llvm.mlir_undef(ir.VectorType.get([n], f32))
    for i in range(n):
        v = llvm.insertelement(v, llvm.extractvalue(f32, s, [i]), i64(i))
    return v


def fence_registers(value: ir.Value) -> ir.Value:
    """Pass each 32-bit element of `value` (f32/i32 scalar or 1-D vector) through an empty volatile asm.

    Registers written asynchronously (wgmma accumulators, tcgen05.ld results) look like ordinary
    SSA values to LLVM; routing them through side-effecting asm right after the wait keeps every
    read of them below that wait."""
    t = value.type
    elem = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    constraint = "=f,0" if isinstance(elem, ir.F32Type) else "=r,0"
    if not isinstance(t, ir.VectorType):
        return llvm.inline_asm(elem, [value], "", constraint, has_side_effects=True)
    out = llvm.mlir_undef(t)
    for i in range(ir.VectorType(t).shape[0]):
        e = llvm.extractelement(value, i64(i))
        e = llvm.inline_asm(elem, [e], "", constraint, has_side_effects=True)
        out = llvm.insertelement(out, e, i64(i))
    return out


def const_byte_offset(ptr: ir.Value) -> tuple[ir.Value, int]:
    """Peel `llvm.getelementptr i8` ops with constant indices off `ptr`: (root, summed offset)."""
    total = 0
    while True:
        gep = ptr.owner
        if isinstance(gep, ir.Block) or gep.name != "llvm.getelementptr" or len(gep.operands) != 2:
            return ptr, total
        if str(gep.attributes["elem_type"]) != "i8":
            return ptr, total
        idx = gep.operands[1].owner
        if isinstance(idx, ir.Block) or idx.name != "arith.constant":
            return ptr, total
        total += ir.IntegerAttr(idx.attributes["value"]).value
        ptr = gep.operands[0]


def smem_descriptor(ptr: ir.Value, fields: int, *, rematerialise: bool = False) -> ir.Value:
    """An MMA shared-memory descriptor: (address >> 4) & 0x3FFF in bits 0-13, OR the constant
    `fields` (both arches put the start address there). A pointer `root + c` (c a constant multiple
    of 16) gives desc(root) + c / 16: SMEM addresses stay below 2^18, so the 14-bit start field never
    carries, and the K steps of one tile share one descriptor (CSE) plus an add each. With
    `rematerialise`, desc(root) passes through an empty volatile asm so LLVM cannot hoist it."""
    i64t = ir.IntegerType.get_signless(64)
    root, offset = const_byte_offset(ptr)
    if offset % 16 or offset < 0:
        root, offset = ptr, 0
    if fields >= 1 << 63:  # a field set in bit 63: the i64 constant takes the two's-complement value
        fields -= 1 << 64
    start = arith.andi(arith.shrui(llvm.ptrtoint(i64t, root), i64(4)), i64(0x3FFF))
    desc = arith.ori(start, i64(fields))
    if rematerialise:
        desc = llvm.inline_asm(i64t, [desc], "", "=l,0", has_side_effects=True)
    return arith.addi(desc, i64(offset >> 4)) if offset else desc
