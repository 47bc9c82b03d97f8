// fa4-lower-math: f32 math.exp2 / math.log2 -> the SFU's ex2.approx.ftz.f32 / lg2.approx.ftz.f32
// (PTX ISA 9.7.4.5, 9.7.4.4) as nvvm.inline_ptx; other element types are rejected.
// RUN: fa4mlir-opt %s --split-input-file --fa4-lower-math --verify-diagnostics | FileCheck %s

// The online-softmax shape: P = exp2(S - m) inside the KV loop, LSE = m + log2(l) after it.
// CHECK-LABEL: llvm.func @softmax
// CHECK-SAME: (%[[S:[^:]+]]: f32, %[[M:[^:]+]]: f32, %[[L:[^:]+]]: f32, %[[N:[^:]+]]: i32)
// CHECK: scf.for
// CHECK: %[[D:.*]] = arith.subf %[[S]], %[[M]] : f32
// CHECK: %[[P:.*]] = nvvm.inline_ptx "ex2.approx.ftz.f32 $0, $1;" ro(%[[D]] : f32) -> f32
// CHECK: arith.addf %{{.*}}, %[[P]] : f32
// CHECK: %[[LG:.*]] = nvvm.inline_ptx "lg2.approx.ftz.f32 $0, $1;" ro(%[[L]] : f32) -> f32
// CHECK: arith.addf %[[M]], %[[LG]] : f32
// CHECK-NOT: math.
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @softmax(%s: f32, %m: f32, %l: f32, %n: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %zero = arith.constant 0.0 : f32
      %row_sum = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) : i32 {
        %d = arith.subf %s, %m : f32
        %p = math.exp2 %d : f32
        %next = arith.addf %acc, %p : f32
        scf.yield %next : f32
      }
      %lg = math.log2 %l : f32
      %lse = arith.addf %m, %lg : f32
      llvm.return
    }
  }
}

// -----

// ex2.approx has an f16 form, but the pass picks f32 only: convert (arith.extf) first.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @exp2_f16(%x: f16) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4-lower-math: math.exp2 is lowered for f32 only, got f16}}
      %y = math.exp2 %x : f16
      llvm.return
    }
  }
}

// -----

// Vectors are not unrolled here: apply the op per element.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @log2_vector(%x: vector<2xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4-lower-math: math.log2 is lowered for f32 only, got vector<2xf32>}}
      %y = math.log2 %x : vector<2xf32>
      llvm.return
    }
  }
}

// -----

// fa4.cvt_e4m3x2 (two FP8 e4m3 in an i16) -> cvt.rn.f16x2.e4m3x2 (PTX ISA 9.7.9.21), f16x2 in an i32.
// CHECK-LABEL: llvm.func @fp8
// CHECK-SAME: (%[[X:[^:]+]]: i16)
// CHECK: nvvm.inline_ptx "cvt.rn.f16x2.e4m3x2 $0, $1;" ro(%[[X]] : i16) -> i32
// CHECK-NOT: fa4.cvt_e4m3x2
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @fp8(%x: i16) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %h = "fa4.cvt_e4m3x2"(%x) : (i16) -> i32
      llvm.return
    }
  }
}

// -----

// fa4.prmt -> prmt.b32 (PTX ISA 9.7.9.7) with the selector as an immediate: the FP8 decode's bit
// conversion (e4m3_tile note "Bit conversion"), bytes 0, 1 sign-extended into 16-bit lanes.
// CHECK-LABEL: llvm.func @bits
// CHECK-SAME: (%[[W:[^:]+]]: i32)
// CHECK: nvvm.inline_ptx "prmt.b32 $0, $1, $2, 0x9180;" ro(%[[W]], %[[W]] : i32, i32) -> i32
// CHECK-NOT: fa4.prmt
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @bits(%w: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %lanes = "fa4.prmt"(%w, %w) {selector = 37248 : i64} : (i32, i32) -> i32
      llvm.return
    }
  }
}

// -----

// A selector holds four 4-bit byte selectors.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @prmt_wide(%w: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4-lower-math: fa4.prmt selector must be in [0, 0xffff] (four byte selectors), got 0x10000}}
      %lanes = "fa4.prmt"(%w, %w) {selector = 65536 : i64} : (i32, i32) -> i32
      llvm.return
    }
  }
}

// -----

// The softcap's tanh: math.tanh -> tanh.approx.f32 (PTX ISA 9.7.4.9), one SFU op per score.
// CHECK-LABEL: llvm.func @softcap
// CHECK-SAME: (%[[S:[^:]+]]: f32, %[[C:[^:]+]]: f32)
// CHECK: %[[X:.*]] = arith.mulf %[[S]], %[[C]] : f32
// CHECK: nvvm.inline_ptx "tanh.approx.f32 $0, $1;" ro(%[[X]] : f32) -> f32
// CHECK-NOT: math.tanh
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @softcap(%s: f32, %c: f32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %x = arith.mulf %s, %c : f32
      %t = math.tanh %x : f32
      llvm.return
    }
  }
}

// -----

// fa4.tanh_f16x2 (two f16 in an i32) -> tanh.approx.f16x2 (PTX ISA 9.7.4.9): the packed softcap tanh of
// AttnConfig.softcap_tanh; sm_90a's ptxas runs it as two MUFU.TANH.F16.
// CHECK-LABEL: llvm.func @tanh_pair
// CHECK-SAME: (%[[X:[^:]+]]: i32)
// CHECK: nvvm.inline_ptx "tanh.approx.f16x2 $0, $1;" ro(%[[X]] : i32) -> i32
// CHECK-NOT: fa4.tanh_f16x2
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @tanh_pair(%x: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %t = "fa4.tanh_f16x2"(%x) : (i32) -> i32
      llvm.return
    }
  }
}
