// fa4-lower-mma-sm90: smem descriptors -> wgmma descriptor bits (PTX ISA 9.7.15.5.1), fa4.mma ->
// nvvm.wgmma.mma_async m64nNk16, fences / groups -> wgmma.fence / commit_group / wait_group.
// RUN: fa4mlir-opt %s --split-input-file --fa4-lower-mma-sm90 --verify-diagnostics | FileCheck %s

// Descriptor = (addr >> 4) & 0x3FFF | (lbo >> 4) << 16 | (sbo >> 4) << 32 | swizzle code << 62.
//   A: 128B swizzle (code 1), lbo 16, sbo 1024: 1 << 62 | 64 << 32 | 1 << 16 = 4611686293305360384
//   B:  64B swizzle (code 2), lbo 32, sbo 128:  2 << 62 | 8 << 32 | 2 << 16 = 2^63 + 34359869440,
//      printed as the signed i64 -9223372002494906368.
// CHECK-LABEL: llvm.func @wgmma
// CHECK-SAME: (%[[A_SMEM:[^:]+]]: !llvm.ptr<3>, %[[B_SMEM:[^:]+]]: !llvm.ptr<3>)
// CHECK: %[[A_ADDR:.*]] = llvm.ptrtoint %[[A_SMEM]] : !llvm.ptr<3> to i64
// CHECK: %[[A_SHR:.*]] = arith.shrui %[[A_ADDR]], %{{.*}} : i64
// CHECK: %[[MASK:.*]] = arith.constant 16383 : i64
// CHECK: %[[A_START:.*]] = arith.andi %[[A_SHR]], %[[MASK]]
// CHECK: %[[A_BITS:.*]] = arith.constant 4611686293305360384 : i64
// CHECK: %[[A_DESC:.*]] = arith.ori %[[A_START]], %[[A_BITS]]
// CHECK: llvm.ptrtoint %[[B_SMEM]]
// CHECK: %[[B_BITS:.*]] = arith.constant -9223372002494906368 : i64
// CHECK: %[[B_DESC:.*]] = arith.ori %{{.*}}, %[[B_BITS]]
// CHECK: nvvm.wgmma.fence.aligned
// The vector<8xf32> accumulator travels as the 8-float struct wgmma wants.
// CHECK: %[[ACC_IN:.*]] = llvm.insertvalue %{{.*}}[7] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)>
// CHECK-NEXT: nvvm.wgmma.mma_async %[[A_DESC]], %[[B_DESC]], %[[ACC_IN]], <m = 64, n = 16, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// A zero accumulate flag becomes scale-d = zero (D = A*B).
// CHECK: nvvm.wgmma.mma_async %[[A_DESC]], %[[B_DESC]], %{{.*}}, <m = 64, n = 16, k = 16>, D[<f32>, <zero>], A[<f16>, <one>, <row>], B[<f16>, <one>, <col>]
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// After the wait every accumulator register passes through an empty volatile asm.
// CHECK-COUNT-8: llvm.inline_asm has_side_effects "", "=f,0"
// CHECK-NOT: fa4.
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @wgmma(%a_smem: !llvm.ptr<3>, %b_smem: !llvm.ptr<3>)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %a_desc = "fa4.smem_desc"(%a_smem) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      %b_desc = "fa4.smem_desc"(%b_smem) {swizzle = 64 : i64, lbo = 32 : i64, sbo = 128 : i64} : (!llvm.ptr<3>) -> i64
      %acc0 = arith.constant dense<0.0> : vector<8xf32>
      %true = arith.constant true
      %false = arith.constant false
      "fa4.mma_fence"() : () -> ()
      %acc1 = "fa4.mma"(%a_desc, %b_desc, %true, %acc0) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "smem",
                                                         ab_dtype = "bf16", acc_dtype = "f32"}
          : (i64, i64, i1, vector<8xf32>) -> vector<8xf32>
      %acc2 = "fa4.mma"(%a_desc, %b_desc, %false, %acc1) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "smem",
                                                          ab_dtype = "f16", acc_dtype = "f32"}
          : (i64, i64, i1, vector<8xf32>) -> vector<8xf32>
      "fa4.mma_commit_group"() : () -> ()
      %acc3 = "fa4.mma_wait_group"(%acc2) {pending = 1 : i64} : (vector<8xf32>) -> vector<8xf32>
      %x = vector.extract %acc3[0] : f32 from vector<8xf32>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @bad_shape(%d: i64, %acc: vector<8xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      // expected-error @+1 {{wgmma supports m64 n8..256 (step 8) k16 with bf16/f16 -> f32; got m128 n16 k16 bf16->f32}}
      %r = "fa4.mma"(%d, %d, %true, %acc) {m = 128 : i64, n = 16 : i64, k = 16 : i64, a_source = "smem",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (i64, i64, i1, vector<8xf32>) -> vector<8xf32>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @accumulator_size(%d: i64, %acc: vector<16xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      // expected-error @+1 {{accumulator of m64n16 must be vector<8xf32>, got vector<16xf32>}}
      %r = "fa4.mma"(%d, %d, %true, %acc) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "smem",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (i64, i64, i1, vector<16xf32>) -> vector<16xf32>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @dynamic_accumulate(%d: i64, %acc: vector<8xf32>, %flag: i1) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{wgmma's accumulate flag must be a constant on sm_90a}}
      %r = "fa4.mma"(%d, %d, %flag, %acc) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "smem",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (i64, i64, i1, vector<8xf32>) -> vector<8xf32>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @a_from_registers(%a: vector<8xf32>, %d: i64, %acc: vector<8xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      // expected-error @+1 {{a_source='regs' is not lowered yet on sm_90a (only 'smem')}}
      %r = "fa4.mma"(%a, %d, %true, %acc) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "regs",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (vector<8xf32>, i64, i1, vector<8xf32>) -> vector<8xf32>
      llvm.return
    }
  }
}
