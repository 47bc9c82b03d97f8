// fa4-lower-mma-sm90: smem descriptors -> wgmma descriptor bits (PTX ISA 9.7.15.5.1), fa4.mma ->
// nvvm.wgmma.mma_async m64nNk16 (A from SMEM) or a wgmma inline asm (A from registers),
// fences / groups -> wgmma.fence / commit_group / wait_group.
// RUN: fa4mlir-opt %s --split-input-file --fa4-lower-mma-sm90 --verify-diagnostics | FileCheck %s

// Descriptor = (addr >> 4) & 0x3FFF | (lbo >> 4) << 16 | (sbo >> 4) << 32 | swizzle code << 62.
//   A: 128B swizzle (code 1), lbo 16, sbo 1024: 1 << 62 | 64 << 32 | 1 << 16 = 4611686293305360384
//   B:  64B swizzle (code 2), lbo 32, sbo 128:  2 << 62 | 8 << 32 | 2 << 16 = 2^63 + 34359869440,
//      printed as the signed i64 -9223372002494906368.
// CHECK-LABEL: llvm.func @wgmma
// CHECK-SAME: (%[[A_SMEM:[^:]+]]: !llvm.ptr<3>, %[[B_SMEM:[^:]+]]: !llvm.ptr<3>)
// CHECK: llvm.ptrtoint %[[A_SMEM]] : !llvm.ptr<3> to i64
// CHECK: %[[A_SHR:.*]] = arith.shrui %{{.*}}, %{{.*}} : i64
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

// B stored MN-major (its n index contiguous, as V is in P.V) sets imm-trans-b: layout row for B.
// CHECK-LABEL: llvm.func @b_mn_major
// CHECK: nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %{{.*}}, <m = 64, n = 16, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// An explicit b_major = "k" is the default: B in column layout.
// CHECK: nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %{{.*}}, <m = 64, n = 16, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @b_mn_major(%d: i64, %acc0: vector<8xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      %acc1 = "fa4.mma"(%d, %d, %true, %acc0) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "smem",
                                               b_major = "mn", ab_dtype = "bf16", acc_dtype = "f32"}
          : (i64, i64, i1, vector<8xf32>) -> vector<8xf32>
      %acc2 = "fa4.mma"(%d, %d, %true, %acc1) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "smem",
                                               b_major = "k", ab_dtype = "bf16", acc_dtype = "f32"}
          : (i64, i64, i1, vector<8xf32>) -> vector<8xf32>
      llvm.return
    }
  }
}

// -----

// A from registers (attention's P in P.V): LLVM has no nvvm op for it, so it is the PTX
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T {d..}, {a0, a1, a2, a3}, b-desc, p, 1, 1, imm-trans-b;
// with scale-d as a predicate set from an i32 operand and the accumulator tied in and out:
// outputs $0..$7 (=f), inputs $8..$11 the A registers (r), $12 the B descriptor (l), $13 scale-d
// (r), then the 8 accumulator inputs tied to outputs 0..7.
// CHECK-LABEL: llvm.func @a_from_registers
// CHECK-SAME: (%[[A:[^:]+]]: vector<4xi32>, %[[V_SMEM:[^:]+]]: !llvm.ptr<3>, %[[ACC:[^:]+]]: vector<8xf32>)
// CHECK: llvm.ptrtoint %[[V_SMEM]] : !llvm.ptr<3> to i64
// CHECK: %[[V_DESC:.*]] = arith.ori %{{.*}}, %{{.*}} : i64
// CHECK: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK: %[[A0:.*]] = llvm.extractelement %[[A]][%{{.*}} : i64] : vector<4xi32>
// CHECK: %[[A1:.*]] = llvm.extractelement %[[A]][%{{.*}} : i64] : vector<4xi32>
// CHECK: %[[A2:.*]] = llvm.extractelement %[[A]][%{{.*}} : i64] : vector<4xi32>
// CHECK: %[[A3:.*]] = llvm.extractelement %[[A]][%{{.*}} : i64] : vector<4xi32>
// CHECK: %[[D0:.*]] = llvm.extractelement %[[ACC]][%{{.*}} : i64] : vector<8xf32>
// b_major = "mn": the trailing imm-trans-b is 1.
// CHECK: %[[D:.*]] = llvm.inline_asm has_side_effects "{{.*}}setp.ne.b32 p, $13, 0;{{.*}}wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {$0, $1, $2, $3, $4, $5, $6, $7}, {$8, $9, $10, $11}, $12, p, 1, 1, 1;{{.*}}", "=f,=f,=f,=f,=f,=f,=f,=f,r,r,r,r,l,r,0,1,2,3,4,5,6,7" %[[A0]], %[[A1]], %[[A2]], %[[A3]], %[[V_DESC]], %[[ONE]], %[[D0]], %{{.*}} : (i32, i32, i32, i32, i64, i32, f32, f32, f32, f32, f32, f32, f32, f32) -> !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)>
// The struct comes back as the vector<8xf32> accumulator.
// CHECK: llvm.extractvalue %[[D]][7]
// A zero accumulate flag passes scale-d = 0; the default K-major B gives imm-trans-b 0.
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK: llvm.inline_asm has_side_effects "{{.*}}wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {$0, $1, $2, $3, $4, $5, $6, $7}, {$8, $9, $10, $11}, $12, p, 1, 1, 0;{{.*}}", "{{.*}}" %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[V_DESC]], %[[ZERO]],
// CHECK-NOT: fa4.
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @a_from_registers(%a: vector<4xi32>, %v_smem: !llvm.ptr<3>, %acc0: vector<8xf32>)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      %false = arith.constant false
      %v_desc = "fa4.smem_desc"(%v_smem) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      %acc1 = "fa4.mma"(%a, %v_desc, %true, %acc0) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "regs",
                                                    b_major = "mn", ab_dtype = "bf16", acc_dtype = "f32"}
          : (vector<4xi32>, i64, i1, vector<8xf32>) -> vector<8xf32>
      %acc2 = "fa4.mma"(%a, %v_desc, %false, %acc1) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "regs",
                                                     ab_dtype = "f16", acc_dtype = "f32"}
          : (vector<4xi32>, i64, i1, vector<8xf32>) -> vector<8xf32>
      llvm.return
    }
  }
}

// -----

// Register A must be the m64k16 fragment: four packed pairs.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @a_registers_wrong_type(%a: vector<8xf32>, %d: i64, %acc: vector<8xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      // expected-error @+1 {{fa4-lower-mma-sm90: A from registers must be vector<4xi32> (packed bf16 pairs), got vector<8xf32>}}
      %r = "fa4.mma"(%a, %d, %true, %acc) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "regs",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (vector<8xf32>, i64, i1, vector<8xf32>) -> vector<8xf32>
      llvm.return
    }
  }
}

// -----

// TMEM operands are sm_100a's (fa4-lower-mma-sm100).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @a_from_tmem(%a: i32, %d: i64, %acc: vector<8xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      // expected-error @+1 {{fa4-lower-mma-sm90: sm_90a wgmma takes A from 'smem' ('k'- or 'mn'-major) or 'regs' ('k'-major) and a 'k'- or 'mn'-major B; got a_source='tmem', a_major='k', b_major='k'}}
      %r = "fa4.mma"(%a, %d, %true, %acc) {m = 64 : i64, n = 16 : i64, k = 16 : i64, a_source = "tmem",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (i32, i64, i1, vector<8xf32>) -> vector<8xf32>
      llvm.return
    }
  }
}

// -----

// Descriptor folding: smem_desc(root + c) with c a constant multiple of 16 (through any chain of
// i8 geps with constant indices, as kb.gep builds them) is desc(root) + c / 16; the 14-bit start
// field cannot carry (SMEM addresses < 2^18). An offset that is not a multiple of 16 is not folded.
// CHECK-LABEL: llvm.func @desc_folding
// CHECK-SAME: (%[[BASE:[^:]+]]: !llvm.ptr<3>)
// CHECK: %[[P32:.*]] = llvm.getelementptr %[[BASE]][%{{.*}}] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK: %[[P16:.*]] = llvm.getelementptr %[[BASE]][%{{.*}}] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK: %[[P48:.*]] = llvm.getelementptr %[[P16]][%{{.*}}] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK: %[[P8:.*]] = llvm.getelementptr %[[BASE]][%{{.*}}] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK-NOT: llvm.ptrtoint %[[P32]]
// CHECK: llvm.ptrtoint %[[BASE]] : !llvm.ptr<3> to i64
// CHECK: %[[ROOT:.*]] = arith.ori %{{.*}}, %{{.*}} : i64
// CHECK: %[[TWO:.*]] = arith.constant 2 : i64
// CHECK-NEXT: arith.addi %[[ROOT]], %[[TWO]] : i64
// 16 + 32 bytes through two geps: + 3.
// CHECK-NOT: llvm.ptrtoint %[[P16]]
// CHECK-NOT: llvm.ptrtoint %[[P48]]
// CHECK: %[[THREE:.*]] = arith.constant 3 : i64
// CHECK-NEXT: arith.addi %{{.*}}, %[[THREE]] : i64
// CHECK: llvm.ptrtoint %[[P8]] : !llvm.ptr<3> to i64
// CHECK-NOT: arith.addi
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @desc_folding(%base: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %c32 = arith.constant 32 : i32
      %c16 = arith.constant 16 : i32
      %c8 = arith.constant 8 : i32
      %p32 = llvm.getelementptr %base[%c32] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %p16 = llvm.getelementptr %base[%c16] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %p48 = llvm.getelementptr %p16[%c32] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %p8 = llvm.getelementptr %base[%c8] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %d32 = "fa4.smem_desc"(%p32) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      %d48 = "fa4.smem_desc"(%p48) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      %d8 = "fa4.smem_desc"(%p8) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      llvm.return
    }
  }
}

// -----

// a_major = "mn" (A from SMEM stored m-contiguous, as V^T in the swap-AB MLA decode): imm-trans-a,
// layoutA col; from registers it is refused.
// CHECK-LABEL: llvm.func @a_mn_major
// CHECK: nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %{{.*}}, <m = 64, n = 32, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <col>]
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @a_mn_major(%a: i64, %b: i64, %acc: vector<16xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      %r = "fa4.mma"(%a, %b, %true, %acc) {m = 64 : i64, n = 32 : i64, k = 16 : i64, a_source = "smem", a_major = "mn",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (i64, i64, i1, vector<16xf32>) -> vector<16xf32>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @a_regs_mn(%a: vector<4xi32>, %b: i64, %acc: vector<16xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %true = arith.constant true
      // expected-error @+1 {{fa4-lower-mma-sm90: sm_90a wgmma takes A from 'smem' ('k'- or 'mn'-major) or 'regs' ('k'-major) and a 'k'- or 'mn'-major B; got a_source='regs', a_major='mn', b_major='k'}}
      %r = "fa4.mma"(%a, %b, %true, %acc) {m = 64 : i64, n = 32 : i64, k = 16 : i64, a_source = "regs", a_major = "mn",
                                          ab_dtype = "bf16", acc_dtype = "f32"} : (vector<4xi32>, i64, i1, vector<16xf32>) -> vector<16xf32>
      llvm.return
    }
  }
}
