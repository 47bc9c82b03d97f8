// fa4-plan-smem: buffers placed by decreasing alignment (1024 B first), then 8-byte mbarriers
// (2 per pipeline stage); each buffer becomes `fa4_smem + offset`; the kernel records its total.
// RUN: fa4mlir-opt %s --split-input-file --fa4-plan-smem --verify-diagnostics | FileCheck %s

// Placement: b_smem (align 1024, 1000 B) at 0, c_smem (align 1024) at the next 1024 boundary,
// a_smem (align 16) after it at 1024 + 2048 = 3072, the barriers of ab_pipe (2 stages, 32 B) at
// align8(3072 + 100) = 3176; total 3176 + 32 = 3208.
// CHECK: gpu.module @fa4_kernels
// CHECK: llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
// CHECK-LABEL: llvm.func @placement
// CHECK-SAME: fa4.smem_bytes = 3208 : i64
// CHECK: %[[BASE_A:.*]] = llvm.mlir.addressof @fa4_smem : !llvm.ptr<3>
// CHECK-NEXT: %[[OFF_A:.*]] = arith.constant 3072 : i32
// CHECK-NEXT: %[[A:.*]] = llvm.getelementptr %[[BASE_A]][%[[OFF_A]]] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK: %[[BASE_B:.*]] = llvm.mlir.addressof @fa4_smem : !llvm.ptr<3>
// CHECK-NEXT: %[[OFF_B:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[B:.*]] = llvm.getelementptr %[[BASE_B]][%[[OFF_B]]]
// CHECK: %[[BASE_C:.*]] = llvm.mlir.addressof @fa4_smem : !llvm.ptr<3>
// CHECK-NEXT: %[[OFF_C:.*]] = arith.constant 1024 : i32
// CHECK-NEXT: %[[C:.*]] = llvm.getelementptr %[[BASE_C]][%[[OFF_C]]]
// CHECK: "fa4.pipeline"() {{.*}}offset = 3176 : i64{{.*}}sym_name = "ab_pipe"
// CHECK-NOT: fa4.smem_buffer
// CHECK: llvm.store %{{.*}}, %[[A]]
// CHECK: llvm.store %{{.*}}, %[[B]]
// CHECK: llvm.store %{{.*}}, %[[C]]
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @placement() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %a = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 100 : i64, align = 16 : i64} : () -> !llvm.ptr<3>
      %b = "fa4.smem_buffer"() {sym_name = "b_smem", bytes = 1000 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      %c = "fa4.smem_buffer"() {sym_name = "c_smem", bytes = 2048 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      %x = arith.constant 7 : i32
      llvm.store %x, %a : i32, !llvm.ptr<3>
      llvm.store %x, %b : i32, !llvm.ptr<3>
      llvm.store %x, %c : i32, !llvm.ptr<3>
      llvm.return
    }
  }
}

// -----

// Exactly at the sm_90a limit (227 KB = 232448 B): accepted.
// CHECK-LABEL: llvm.func @at_the_limit
// CHECK-SAME: fa4.smem_bytes = 232448 : i64
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @at_the_limit() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %a = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 232384 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 4 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      llvm.return
    }
  }
}

// -----

// 3 x 77824 B = 233472 B: over the sm_90a budget; the error names the total, the limit and each buffer.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    // expected-error @+1 {{kernel needs 233472 bytes of shared memory, over the sm_90a limit of 232448 bytes (a_smem=77824, b_smem=77824, c_smem=77824)}}
    llvm.func @over_budget() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %a = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 77824 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      %b = "fa4.smem_buffer"() {sym_name = "b_smem", bytes = 77824 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      %c = "fa4.smem_buffer"() {sym_name = "c_smem", bytes = 77824 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      llvm.return
    }
  }
}

// -----

// sm_100a keeps 1 KB back: the sm_90a-sized plan above the 231424 B budget fails there.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // expected-error @+1 {{kernel needs 232448 bytes of shared memory, over the sm_100a limit of 231424 bytes}}
    llvm.func @over_budget_sm100() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %a = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 232448 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      llvm.return
    }
  }
}

// -----

// Buffers and pipelines share one namespace.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @duplicate_name() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %a = "fa4.smem_buffer"() {sym_name = "ab", bytes = 1024 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      // expected-error @+1 {{'ab' is declared twice}}
      "fa4.pipeline"() {sym_name = "ab", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @bad_alignment() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{buffer 'a_smem' alignment 48 is not a power of two}}
      %a = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 1024 : i64, align = 48 : i64} : () -> !llvm.ptr<3>
      llvm.return
    }
  }
}
