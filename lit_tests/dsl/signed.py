# Integers are signless in the IR: the DSL's operators and lt/le/gt/ge read them as unsigned, the
# s-prefixed methods and `to(..., signed=True)` as signed. CHECK lines sit under the call they check.
# RUN: %PYTHON %s | FileCheck %s
from fa4mlir.dsl import KernelBuilder

kb = KernelBuilder("signed_test", arch="sm_90a", block=(32, 1, 1))
out_gmem = kb.param_ptr("out")
lo = kb.param_i32("lo")
hi = kb.param_i32("hi")
with kb.body():
    # CHECK-LABEL: llvm.func @signed_test
    # CHECK-SAME: %[[LO:[^:]+]]: i32{{.*}}, %[[HI:[^:]+]]: i32
    row = kb.thread_idx(0)
    # CHECK: %[[ROW:.*]] = "fa4.thread_idx"()

    # A sliding window's left edge row - lo may go below zero: compare it signed.
    left = row - lo
    # CHECK: %[[LEFT:.*]] = arith.subi %[[ROW]], %[[LO]] : i32
    past = left.slt(hi)
    # CHECK-NEXT: arith.cmpi slt, %[[LEFT]], %[[HI]] : i32 loc("{{.*}}signed.py":[[@LINE-1]]:0)
    same_unsigned = left.lt(hi)
    # CHECK-NEXT: arith.cmpi ult, %[[LEFT]], %[[HI]] : i32 loc("{{.*}}signed.py":[[@LINE-1]]:0)
    left.sle(hi), left.sgt(hi), left.sge(hi)
    # CHECK-NEXT: arith.cmpi sle, %[[LEFT]], %[[HI]]
    # CHECK-NEXT: arith.cmpi sgt, %[[LEFT]], %[[HI]]
    # CHECK-NEXT: arith.cmpi sge, %[[LEFT]], %[[HI]]

    # Division, remainder and shift: operators unsigned, methods signed.
    left // hi, left.sdiv(hi), left % hi, left.srem(hi), left >> 1, left.ashr(1)
    # CHECK-NEXT: arith.divui %[[LEFT]], %[[HI]] : i32
    # CHECK-NEXT: arith.divsi %[[LEFT]], %[[HI]] : i32
    # CHECK-NEXT: arith.remui %[[LEFT]], %[[HI]] : i32
    # CHECK-NEXT: arith.remsi %[[LEFT]], %[[HI]] : i32
    # CHECK: arith.shrui %[[LEFT]], %{{.*}} : i32
    # CHECK: arith.shrsi %[[LEFT]], %{{.*}} : i32

    # Floor division (Python's //) from the truncating quotient and the remainder's sign.
    block = left.sfloordiv(hi)
    # CHECK: %[[Q:.*]] = arith.divsi %[[LEFT]], %[[HI]] : i32 loc("{{.*}}signed.py":[[@LINE-1]]:0)
    # CHECK-NEXT: %[[R:.*]] = arith.remsi %[[LEFT]], %[[HI]] : i32
    # CHECK: %[[RNEG:.*]] = arith.cmpi slt, %[[R]], %{{.*}} : i32
    # CHECK: %[[BNEG:.*]] = arith.cmpi slt, %[[HI]], %{{.*}} : i32
    # CHECK-NEXT: %[[DIFFER:.*]] = arith.xori %[[RNEG]], %[[BNEG]] : i1
    # CHECK: %[[FIX:.*]] = arith.andi %{{.*}}, %[[DIFFER]] : i1
    # CHECK: %[[QM1:.*]] = arith.subi %[[Q]], %{{.*}} : i32
    # CHECK-NEXT: %[[BLOCK:.*]] = arith.select %[[FIX]], %[[QM1]], %[[Q]] : i32

    # Widening and int -> float: zero-extend / uitofp unless signed=True.
    left.to("i64"), left.to("i64", signed=True)
    # CHECK: arith.extui %[[LEFT]] : i32 to i64
    # CHECK-NEXT: arith.extsi %[[LEFT]] : i32 to i64
    as_float = block.to("f32", signed=True) + left.to("f32")
    # CHECK-NEXT: %[[BF:.*]] = arith.sitofp %[[BLOCK]] : i32 to f32
    # CHECK-NEXT: %[[LF:.*]] = arith.uitofp %[[LEFT]] : i32 to f32
    kb.store(as_float, kb.gep(out_gmem, row, "f32"))

kernel = kb.finish()
kernel.module.operation.print(enable_debug_info=True, use_local_scope=True)
