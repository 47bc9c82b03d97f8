"""fa4-lower-tmem: tensor-memory ops -> nvvm.tcgen05.* (PTX ISA 9.1 §9.7.16, "TensorCore 5th Generation").

* `fa4.tmem_alloc(dst){cols}`  -> tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [dst], cols
  (§9.7.16.7.1; executed by a whole warp, writes the TMEM base address to `dst` in SMEM).
* `fa4.tmem_dealloc(addr){cols}` -> tcgen05.dealloc.cta_group::1 (§9.7.16.7.1).
* `fa4.tmem_relinquish`        -> tcgen05.relinquish_alloc_permit.cta_group::1 (§9.7.16.7.1).
* `fa4.tmem_load(addr){num}`   -> tcgen05.ld.sync.aligned.32x32b.x{num}.b32 (§9.7.16.8.3); result
  vector<num x i32> (i32 for num = 1, widened back to the op's type after the wait).
* `fa4.tmem_store(addr, v)`    -> tcgen05.st.sync.aligned.32x32b.x{num}.b32 (§9.7.16.8.4).
* `fa4.tmem_wait{kind}`        -> tcgen05.wait::ld / ::st (§9.7.16.8.5).
* `fa4.tmem_copy(addr, desc){shape, multicast, cta_group}` -> tcgen05.cp.cta_group::N.shape[.multicast]
  [taddr], sdesc (§9.7.16.8.x "tcgen05.cp"): the shapes and their multicast forms of COPY_SHAPES.

With `cta_group = 2` (a CTA pair, note "CTA pair" of fa4-lower-mma-sm100) alloc, dealloc and
relinquish take their .cta_group::2 forms: one warp of each CTA of the pair executes them, and the
columns are allocated in both CTAs' TMEM.

TMEM addresses are i32 in fa4 IR (bits 31-16 lane, 15-0 column; §9.7.16.1.1 "Tensor Memory
Addressing") and `!llvm.ptr<6>` for nvvm; the pass converts with inttoptr.

Note "registers of an asynchronous load": tcgen05.ld writes its destination registers
asynchronously; they may be read only after tcgen05.wait::ld. LLVM cannot see that, so at each
`tmem_wait{kind = "ld"}` every tcgen05.ld result issued earlier in the same block (since the
previous wait) is passed through an empty volatile asm (one per 32-bit element), and the uses
after the wait read the fenced values. Same device as the wgmma wait in fa4-lower-mma-sm90.
"""
from __future__ import annotations

from .._mlir import ir, llvm, nvvm
from ._util import (CTA_GROUPS, PassError, attr, check_none_left, cta_group, fence_registers, i32, i64, kernel_func,
                    ops_named, replace)

NAME = "fa4-lower-tmem"
OPS = ("fa4.tmem_alloc", "fa4.tmem_dealloc", "fa4.tmem_relinquish", "fa4.tmem_load", "fa4.tmem_store",
       "fa4.tmem_wait", "fa4.tmem_copy")
# tcgen05.cp shape -> (its enum, the multicast forms it takes; "" = none): PTX ISA 9.1 tcgen05.cp
COPY_SHAPES = {
    "128x256b": (nvvm.Tcgen05CpShape.SHAPE_128x256b, ("",)),
    "4x256b": (nvvm.Tcgen05CpShape.SHAPE_4x256b, ("",)),
    "128x128b": (nvvm.Tcgen05CpShape.SHAPE_128x128b, ("",)),
    "64x128b": (nvvm.Tcgen05CpShape.SHAPE_64x128b, ("warpx2::02_13", "warpx2::01_23")),
    "32x128b": (nvvm.Tcgen05CpShape.SHAPE_32x128b, ("warpx4",)),
}
_MULTICAST = {"": nvvm.Tcgen05CpMulticast.NONE, "warpx2::02_13": nvvm.Tcgen05CpMulticast.WARPX2_02_13,
              "warpx2::01_23": nvvm.Tcgen05CpMulticast.WARPX2_01_23, "warpx4": nvvm.Tcgen05CpMulticast.WARPX4}
LDST_NUM = (1, 2, 4, 8, 16, 32, 64, 128)  # .num of 32x32b: x1 .. x128 (§9.7.16.8.3)
_WAIT = {"ld": nvvm.Tcgen05WaitKind.LOAD, "st": nvvm.Tcgen05WaitKind.STORE}


def tmem_ptr(addr: ir.Value) -> ir.Value:
    """An i32 TMEM address as the `!llvm.ptr<6>` nvvm's tcgen05 ops take."""
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<6>"), addr)


def _num_of(t: ir.Type, op) -> int:
    if isinstance(t, ir.VectorType) and ir.VectorType(t).element_type == ir.IntegerType.get_signless(32):
        return ir.VectorType(t).shape[0]
    if t == ir.IntegerType.get_signless(32):
        return 1
    raise PassError(f"{NAME}: {op.name} moves 32-bit columns: its value must be i32 or vector<N x i32>, got {t}",
                    op.location)


def _load(op: ir.Operation) -> tuple[ir.Value, ir.Value]:
    """(the op's value, the tcgen05.ld register it comes from): the same value, except for num = 1
    into a vector<1xi32>, widened from the i32 register."""
    num, rtype = attr(op, "num"), op.results[0].type
    if num not in LDST_NUM or _num_of(rtype, op) != num:
        raise PassError(f"{NAME}: tmem_load num={num} with result {rtype}; tcgen05.ld.32x32b takes num in "
                        f"{LDST_NUM} and returns vector<num x i32>", op.location)
    i32t = ir.IntegerType.get_signless(32)
    ld_t = i32t if num == 1 else ir.VectorType.get([num], i32t)
    raw = nvvm.tcgen05_ld(ld_t, nvvm.Tcgen05LdStShape.SHAPE_32X32B, tmem_ptr(op.operands[0]))
    if num == 1 and rtype != i32t:
        return llvm.insertelement(llvm.mlir_undef(rtype), raw, i64(0)), raw
    return raw, raw


def _store(op: ir.Operation) -> None:
    addr, value = op.operands
    num = _num_of(value.type, op)
    if num not in LDST_NUM:
        raise PassError(f"{NAME}: tmem_store of {num} columns; tcgen05.st.32x32b takes {LDST_NUM}", op.location)
    if num == 1 and isinstance(value.type, ir.VectorType):
        value = llvm.extractelement(value, i64(0))
    nvvm.tcgen05_st(nvvm.Tcgen05LdStShape.SHAPE_32X32B, tmem_ptr(addr), value)


def _copy(op: ir.Operation) -> None:
    shape = attr(op, "shape")
    multicast = attr(op, "multicast") if "multicast" in op.attributes else ""
    if shape not in COPY_SHAPES or multicast not in COPY_SHAPES[shape][1]:
        forms = ", ".join(f"{s}{'.' + m if m else ''}" for s, (_, ms) in COPY_SHAPES.items() for m in ms)
        raise PassError(f"{NAME}: tmem_copy shape {shape!r} with multicast {multicast!r}; tcgen05.cp takes {forms}",
                        op.location)
    addr, desc = op.operands
    nvvm.tcgen05_cp(COPY_SHAPES[shape][0], tmem_ptr(addr), desc, group=CTA_GROUPS[cta_group(op)],
                    multicast=_MULTICAST[multicast])


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    pending: dict = {}   # block -> tcgen05.ld results not yet behind a wait::ld
    for op in ops_named(func, *OPS):
        with ir.InsertionPoint(op), op.location:
            name = op.name
            if name == "fa4.tmem_alloc":
                nvvm.tcgen05_alloc(op.operands[0], i32(attr(op, "cols")), group=CTA_GROUPS[cta_group(op)])
                op.erase()
            elif name == "fa4.tmem_dealloc":
                nvvm.tcgen05_dealloc(tmem_ptr(op.operands[0]), i32(attr(op, "cols")), group=CTA_GROUPS[cta_group(op)])
                op.erase()
            elif name == "fa4.tmem_relinquish":
                nvvm.tcgen05_relinquish_alloc_permit(group=CTA_GROUPS[cta_group(op)])
                op.erase()
            elif name == "fa4.tmem_load":
                block = op.block
                value, raw = _load(op)
                replace(op, [value])
                pending.setdefault(block, []).append((value, raw))
            elif name == "fa4.tmem_store":
                _store(op)
                op.erase()
            elif name == "fa4.tmem_copy":
                _copy(op)
                op.erase()
            elif name == "fa4.tmem_wait":
                kind = attr(op, "kind")
                if kind not in _WAIT:
                    raise PassError(f"{NAME}: tmem_wait kind must be 'ld' or 'st', got {kind!r}", op.location)
                nvvm.tcgen05_wait(_WAIT[kind])
                if kind == "ld":
                    _fence_pending(pending.pop(op.block, []), op)
                op.erase()
    check_none_left(func, OPS, NAME)


def _fence_pending(values: list, wait: ir.Operation) -> None:
    """Route every use of `values` that follows `wait` (in its block or nested below) to a fenced copy.
    Each is (value, raw register): a widened num = 1 value is rebuilt from its fenced register after
    the wait, so no instruction reads the register before tcgen05.wait::ld (the early widening is
    erased once nothing uses it)."""
    for value, raw in values:
        users = [u.owner.operation if hasattr(u.owner, "operation") else u.owner for u in value.uses]
        fenced = fence_registers(raw)
        if raw != value:
            fenced = llvm.insertelement(llvm.mlir_undef(value.type), fenced, i64(0))
        for user in users:
            anchor = _ancestor_in(user, wait.block)
            if anchor is None or not wait.is_before_in_block(anchor):
                continue
            for i, operand in enumerate(user.operands):
                if operand == value:
                    user.operands[i] = fenced
        if raw != value and not list(value.uses):
            value.owner.erase()


def _ancestor_in(op: ir.Operation, block: ir.Block):
    while op is not None and op.name != "builtin.module":
        if op.block == block:
            return op
        op = op.parent
    return None
