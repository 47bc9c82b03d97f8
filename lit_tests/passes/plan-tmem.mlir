// fa4-plan-tmem: legal tcgen05.alloc column counts (PTX ISA 9.1 §9.7.16.7.1: a power of two in
// [32, 512]), at most 512 columns per CTA in all, and the total recorded on the kernel function.
// RUN: fa4mlir-opt %s --split-input-file --verify-diagnostics --pass-pipeline=fa4-plan-tmem | FileCheck %s

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // CHECK-LABEL: llvm.func @two_accumulators
    // CHECK-SAME: fa4.tmem_cols = 384 : i64
    llvm.func @two_accumulators(%slot: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      // CHECK: "fa4.tmem_alloc"(%{{.*}}) {cols = 256 : i64}
      "fa4.tmem_alloc"(%slot) {cols = 256 : i64} : (!llvm.ptr<3>) -> ()
      // CHECK: "fa4.tmem_alloc"(%{{.*}}) {cols = 128 : i64}
      "fa4.tmem_alloc"(%slot) {cols = 128 : i64} : (!llvm.ptr<3>) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // CHECK-LABEL: llvm.func @no_tmem
    // CHECK-SAME: fa4.tmem_cols = 0 : i64
    llvm.func @no_tmem() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      llvm.return
    }
  }
}

// -----
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @not_power_of_two(%slot: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{tmem_alloc of 96 columns: tcgen05.alloc takes a power of two in [32, 512]}}
      "fa4.tmem_alloc"(%slot) {cols = 96 : i64} : (!llvm.ptr<3>) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @too_small(%slot: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{tmem_alloc of 16 columns}}
      "fa4.tmem_alloc"(%slot) {cols = 16 : i64} : (!llvm.ptr<3>) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @over_512(%slot: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.tmem_alloc"(%slot) {cols = 512 : i64} : (!llvm.ptr<3>) -> ()
      // expected-error @+1 {{allocates 544 TMEM columns (512 + 32), over the 512 columns of one CTA}}
      "fa4.tmem_alloc"(%slot) {cols = 32 : i64} : (!llvm.ptr<3>) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @dealloc_mismatch(%slot: !llvm.ptr<3>, %addr: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.tmem_alloc"(%slot) {cols = 128 : i64} : (!llvm.ptr<3>) -> ()
      // expected-error @+1 {{tmem_dealloc frees 64 columns but no tmem_alloc of that size exists}}
      "fa4.tmem_dealloc"(%addr) {cols = 64 : i64} : (i32) -> ()
      llvm.return
    }
  }
}
