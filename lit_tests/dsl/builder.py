# The kernel builder emits typed arith / scf / llvm IR by explicit calls, each op located at the
# line of this file that asked for it. CHECK lines sit under the builder call they check.
# RUN: %PYTHON %s | FileCheck %s
from fa4mlir.dsl import KernelBuilder, const

kb = KernelBuilder("builder_test", arch="sm_90a", block=(128, 1, 1))
out_gmem = kb.param_ptr("out")
n = kb.param_i32("n")
with kb.body():
    # CHECK-LABEL: llvm.func @builder_test
    # CHECK-SAME: (%[[OUT:[^:]+]]: !llvm.ptr<1> {llvm.noalias}{{.*}}, %[[N:[^:]+]]: i32
    # CHECK-SAME: nvvm.maxntid = array<i32: 128, 1, 1>
    tid = kb.thread_idx(0)
    # CHECK: %[[TID:.*]] = "fa4.thread_idx"() {dim = 0 : i64} : () -> i32 loc("{{.*}}builder.py":[[@LINE-1]]:0)

    # Python ints mixed with an i32 value become i32 constants; int ops are arith.*i.
    x = tid * 4 + 7
    # CHECK: %[[FOUR:.*]] = arith.constant 4 : i32 loc("{{.*}}builder.py":[[@LINE-1]]:0)
    # CHECK: %[[MUL:.*]] = arith.muli %[[TID]], %[[FOUR]] : i32 loc("{{.*}}builder.py":[[@LINE-2]]:0)
    # CHECK: %[[SEVEN:.*]] = arith.constant 7 : i32
    # CHECK: %[[X:.*]] = arith.addi %[[MUL]], %[[SEVEN]] : i32 loc("{{.*}}builder.py":[[@LINE-4]]:0)

    # Conversions and float arithmetic: Python floats become f32 constants, ops are arith.*f.
    xf = x.to("f32")
    # CHECK: %[[XF:.*]] = arith.uitofp %[[X]] : i32 to f32 loc("{{.*}}builder.py":[[@LINE-1]]:0)
    y = xf * 0.5
    # CHECK: %[[HALF:.*]] = arith.constant 5.000000e-01 : f32
    # CHECK: %[[Y:.*]] = arith.mulf %[[XF]], %[[HALF]] : f32 loc("{{.*}}builder.py":[[@LINE-2]]:0)

    # for_ with carried values: iter_args start at the carry, the body yields the next ones.
    loop = kb.for_(0, n, 1, carry=(x, y))
    with loop as (i, (acc_i, acc_f)):
        loop.yield_(acc_i + i, acc_f + 1.0)
        # CHECK: %[[LOOP:.*]]:2 = scf.for %[[I:[^ ]+]] = %{{.*}} to %[[N]] step %{{.*}} iter_args(%[[ACC_I:[^ ]+]] = %[[X]], %[[ACC_F:[^ ]+]] = %[[Y]]) -> (i32, f32)
        # CHECK: %[[NEXT_I:.*]] = arith.addi %[[ACC_I]], %[[I]] : i32 loc("{{.*}}builder.py":[[@LINE-2]]:0)
        # CHECK: %[[NEXT_F:.*]] = arith.addf %[[ACC_F]], %{{.*}} : f32
        # CHECK: scf.yield %[[NEXT_I]], %[[NEXT_F]] : i32, f32 loc("{{.*}}builder.py":[[@LINE-4]]:0)
        # CHECK: } loc("{{.*}}builder.py":[[@LINE-7]]:0)
    sum_i, sum_f = loop.results
    try:
        if sum_i:  # Python control flow on an IR value: refused (printed at the end)
            pass
    except TypeError as exc:
        truth_error = exc

    # if_ with a result: comparisons are unsigned for integers; both branches yield an f32.
    branch = kb.if_(sum_i.lt(n), results=("f32",))
    # CHECK: %[[COND:.*]] = arith.cmpi ult, %[[LOOP]]#0, %[[N]] : i32 loc("{{.*}}builder.py":[[@LINE-1]]:0)
    # CHECK: %[[SEL:.*]] = scf.if %[[COND]] -> (f32) {
    with branch.then_():
        branch.yield_(sum_f)
        # CHECK-NEXT: scf.yield %[[LOOP]]#1 : f32 loc("{{.*}}builder.py":[[@LINE-1]]:0)
    with branch.else_():
        branch.yield_(const(0.0, "f32"))
        # CHECK: } else {
        # CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
        # CHECK-NEXT: scf.yield %[[ZERO]] : f32 loc("{{.*}}builder.py":[[@LINE-3]]:0)
        # CHECK-NEXT: } loc("{{.*}}builder.py":[[@LINE-11]]:0)

    # Memory: gep in elements of the named type, then a typed store.
    kb.store(branch.results[0], kb.gep(out_gmem, tid, "f32"))
    # CHECK: %[[PTR:.*]] = llvm.getelementptr %[[OUT]][%[[TID]]] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32 loc("{{.*}}builder.py":[[@LINE-1]]:0)
    # CHECK: llvm.store %[[SEL]], %[[PTR]] : f32, !llvm.ptr<1> loc("{{.*}}builder.py":[[@LINE-2]]:0)

    # while_: before() tests the carried values and hands them to body(), which yields the next ones.
    wloop = kb.while_((tid, const(0)))
    # CHECK: %[[ZERO_I:.*]] = arith.constant 0 : i32
    # CHECK: %[[W:.*]]:2 = scf.while (%[[W0:[^ ]+]] = %[[TID]], %[[S0:[^ ]+]] = %[[ZERO_I]]) : (i32, i32) -> (i32, i32) {
    with wloop.before() as (w, steps):
        wloop.condition(w.lt(n), w, steps)
        # CHECK-NEXT: %[[WC:.*]] = arith.cmpi ult, %[[W0]], %[[N]] : i32
        # CHECK-NEXT: scf.condition(%[[WC]]) %[[W0]], %[[S0]] : i32, i32 loc("{{.*}}builder.py":[[@LINE-2]]:0)
        # CHECK-NEXT: } do {
    with wloop.body() as (w, steps):
        wloop.yield_(w * 2 + 1, steps + 1)
        # CHECK-NEXT: ^bb0(%[[W1:[^:]+]]: i32 loc({{.*}}), %[[S1:[^:]+]]: i32 loc({{.*}})):
        # CHECK: %[[W2:.*]] = arith.addi
        # CHECK: %[[S2:.*]] = arith.addi %[[S1]]
        # CHECK-NEXT: scf.yield %[[W2]], %[[S2]] : i32, i32 loc("{{.*}}builder.py":[[@LINE-4]]:0)
    kb.store(wloop.results[1], kb.gep(out_gmem, n, "i32"))
    # CHECK: llvm.store %[[W]]#1

kernel = kb.finish()
# Locations are printed inline (local scope) so that each line carries its own.
kernel.module.operation.print(enable_debug_info=True, use_local_scope=True)
print()


# An IR value has no Python truth value: IR control flow must be explicit.
print(f"TypeError: {truth_error}")
# CHECK: TypeError: an IR value has no Python truth value: use kb.if_(cond) for IR control flow
