"""fa4-lower-mma-sm90: fa4 MMA ops -> wgmma (PTX ISA 9.7.15 "Asynchronous Warpgroup Level Matrix").

* `fa4.smem_desc` -> the 64-bit wgmma matrix descriptor (PTX ISA 9.7.15.5.1, "Matrix Descriptor
  Format"): bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte
  offset >> 4, 49-51 base offset (0: tiles are 1024-byte aligned), 62-63 swizzle
  (0 none, 1 128B, 2 64B, 3 32B).
* `fa4.mma` -> wgmma.mma_async m64nNk16 (bf16/f16 -> f32); the accumulator is a vector<Nxf32> in
  fa4 IR and the LLVM struct wgmma wants here. `b_major = "mn"` sets imm-trans-b (B stored with its
  n index contiguous; 9.7.15.5.1 allows it for 16-bit types); `a_major = "mn"` sets imm-trans-a
  (A from SMEM stored with its m index contiguous, as V^T in the swap-AB MLA decode's O^T = V^T P^T;
  the same rule: 16-bit types only). A from registers (`a_source` =
  "regs", the P operand of attention's P.V) has no nvvm op in LLVM 22: it is emitted as the PTX
  `wgmma.mma_async ... d, {a0, a1, a2, a3}, b-desc, scale-d, 1, 1, imm-trans-b` with the
  accumulator tied in and out.
* `fa4.mma_fence` / `mma_commit_group` / `mma_wait_group` -> wgmma.fence / commit_group /
  wait_group. The wait passes each accumulator register through an empty volatile asm so that no
  read of the accumulator is scheduled above the wait (the compiler cannot see that the
  registers are written asynchronously).
"""
from __future__ import annotations

from .._mlir import arith, ir, llvm, nvvm
from ._util import (PassError, attr, check_none_left, f32_struct_to_vec, f32_struct_type, fence_registers, i64,
                    kernel_func, ops_named, replace, smem_descriptor, vec_to_f32_struct)

NAME = "fa4-lower-mma-sm90"
OPS = ("fa4.smem_desc", "fa4.mma", "fa4.mma_fence", "fa4.mma_commit_group", "fa4.mma_wait_group")
SWIZZLE_CODE = {128: 1, 64: 2, 32: 3, 0: 0}
WGMMA_N = range(8, 257, 8)


def encode_desc_fields(swizzle: int, lbo: int, sbo: int) -> int:
    """The address-independent bits of a wgmma descriptor (unit-tested against the PTX ISA table)."""
    if swizzle not in SWIZZLE_CODE:
        raise ValueError(f"swizzle must be one of {sorted(SWIZZLE_CODE)} bytes, got {swizzle}")
    return (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (SWIZZLE_CODE[swizzle] << 62)


def _desc(op: ir.Operation) -> ir.Value:
    """Constant offsets fold into the descriptor (passes._util.smem_descriptor)."""
    return smem_descriptor(op.operands[0], encode_desc_fields(attr(op, "swizzle"), attr(op, "lbo"), attr(op, "sbo")))


def _mma(op: ir.Operation) -> None:
    m, n, k = attr(op, "m"), attr(op, "n"), attr(op, "k")
    ab, acc_t, a_src = attr(op, "ab_dtype"), attr(op, "acc_dtype"), attr(op, "a_source")
    if m != 64 or n not in WGMMA_N or k != 16 or ab not in ("bf16", "f16") or acc_t != "f32":
        raise PassError(f"{NAME}: wgmma supports m64 n8..256 (step 8) k16 with bf16/f16 -> f32; got "
                        f"m{m} n{n} k{k} {ab}->{acc_t}", op.location)
    b_major = attr(op, "b_major") if "b_major" in op.attributes else "k"
    a_major = attr(op, "a_major") if "a_major" in op.attributes else "k"
    if a_src not in ("smem", "regs") or b_major not in ("k", "mn") or a_major not in ("k", "mn") \
            or (a_src == "regs" and a_major != "k"):
        raise PassError(f"{NAME}: sm_90a wgmma takes A from 'smem' ('k'- or 'mn'-major) or 'regs' ('k'-major) and a "
                        f"'k'- or 'mn'-major B; got a_source={a_src!r}, a_major={a_major!r}, b_major={b_major!r}",
                        op.location)
    if a_src == "regs":
        return _mma_regs(op, n, ab, b_major)
    a, b, accumulate, acc = op.operands
    nacc = n // 2
    vt = ir.VectorType(acc.type)
    if vt.shape != [nacc]:
        raise PassError(f"{NAME}: accumulator of m64n{n} must be vector<{nacc}xf32>, got {acc.type}", op.location)
    scale_d = _const_bool(accumulate, op)
    P = ir.Attribute.parse
    res = nvvm.wgmma_mma_async(
        f32_struct_type(nacc), vec_to_f32_struct(acc, nacc), a, b, P(f"#nvvm.shape<m = 64, n = {n}, k = 16>"),
        P(f"#nvvm.wgmma_type<{ab}>"), P(f"#nvvm.wgmma_type<{ab}>"), P("#nvvm.wgmma_type<f32>"),
        P(f"#nvvm.wgmma_scale_out<{'one' if scale_d else 'zero'}>"), P("#nvvm.wgmma_scale_in<one>"),
        P("#nvvm.wgmma_scale_in<one>"), P(f"#nvvm.mma_layout<{'row' if a_major == 'k' else 'col'}>"),
        P(f"#nvvm.mma_layout<{'col' if b_major == 'k' else 'row'}>"))
    replace(op, [f32_struct_to_vec(res, nacc)])


def _mma_regs(op: ir.Operation, n: int, ab: str, b_major: str) -> None:
    a, b, accumulate, acc = op.operands
    nacc = n // 2
    i32t = ir.IntegerType.get_signless(32)
    if ir.VectorType(a.type).shape != [4] or ir.VectorType(a.type).element_type != i32t:
        raise PassError(f"{NAME}: A from registers must be vector<4xi32> (packed {ab} pairs), got {a.type}",
                        op.location)
    if ir.VectorType(acc.type).shape != [nacc]:
        raise PassError(f"{NAME}: accumulator of m64n{n} must be vector<{nacc}xf32>, got {acc.type}", op.location)
    scale_d = arith.constant(i32t, 1 if _const_bool(accumulate, op) else 0)
    a_regs = [llvm.extractelement(a, i64(i)) for i in range(4)]
    d_in = [llvm.extractelement(acc, i64(i)) for i in range(nacc)]
    d = ", ".join(f"${i}" for i in range(nacc))
    text = ("{\n.reg .pred p;\n"
            f"setp.ne.b32 p, ${nacc + 5}, 0;\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {{{d}}}, "
            f"{{${nacc}, ${nacc + 1}, ${nacc + 2}, ${nacc + 3}}}, ${nacc + 4}, p, 1, 1, "
            f"{int(b_major == 'mn')};\n}}")
    constraints = ",".join(["=f"] * nacc + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(nacc)])
    res = llvm.inline_asm(f32_struct_type(nacc), [*a_regs, b, scale_d, *d_in], text, constraints,
                          has_side_effects=True)
    replace(op, [f32_struct_to_vec(res, nacc)])


def _const_bool(v: ir.Value, op) -> bool:
    owner = v.owner
    if not isinstance(owner, ir.Block) and owner.name == "arith.constant":  # a block argument is not constant
        return bool(ir.IntegerAttr(owner.attributes["value"]).value)
    raise PassError(f"{NAME}: wgmma's accumulate flag must be a constant on sm_90a", op.location)


def run(module: ir.Operation) -> None:
    func = kernel_func(module)
    for op in ops_named(func, *OPS):
        with ir.InsertionPoint(op), op.location:
            if op.name == "fa4.smem_desc":
                replace(op, [_desc(op)])
            elif op.name == "fa4.mma":
                _mma(op)
            elif op.name == "fa4.mma_fence":
                nvvm.wgmma_fence_aligned()
                op.erase()
            elif op.name == "fa4.mma_commit_group":
                nvvm.wgmma_commit_group_sync_aligned()
                op.erase()
            elif op.name == "fa4.mma_wait_group":
                nvvm.wgmma_wait_group_sync_aligned(attr(op, "pending"))
                outs = [fence_registers(v) for v in op.operands]
                replace(op, outs)
    check_none_left(func, OPS, NAME)
