// fa4-specialize-warps: fa4.warp_roles -> one scf.if per warpgroup span (with setmaxnreg), then one
// scf.if per role on the warp index. 384 threads: entry cap min(248, 65536 / 384 rounded to 8) = 168,
// so load (40) decreases and mma (232) increases; 40 * 128 + 232 * 256 = 64512 <= 65536.
// RUN: fa4mlir-opt %s --split-input-file --fa4-specialize-warps --verify-diagnostics | FileCheck %s

// CHECK-LABEL: llvm.func @roles
// CHECK-SAME: (%[[P:[^:]+]]: !llvm.ptr<1>)
// CHECK: %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x
// CHECK: %[[WARP:.*]] = arith.divui %[[TID]], %{{.*}}
// CHECK: %[[GROUP:.*]] = arith.divui %[[WARP]], %{{.*}}
// Warpgroup 0 (the load role's):
// CHECK: %[[G0_LO:.*]] = arith.constant 0 : i32
// CHECK: arith.cmpi uge, %[[GROUP]], %[[G0_LO]]
// CHECK: arith.cmpi ule, %[[GROUP]]
// CHECK: scf.if
// CHECK-NEXT: nvvm.setmaxregister decrease 40
// CHECK: %[[W_LO:.*]] = arith.constant 0 : i32
// CHECK: arith.cmpi uge, %[[WARP]], %[[W_LO]]
// CHECK: %[[W_HI:.*]] = arith.constant 1 : i32
// CHECK: arith.cmpi ult, %[[WARP]], %[[W_HI]]
// CHECK: scf.if
// CHECK: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT: llvm.store %[[ONE]], %[[P]]
// CHECK-NEXT: } {fa4.role = "load"}
// CHECK-NEXT: }
// Warpgroups 1-2 (the mma role's, warps 4..11):
// CHECK: %[[G1_LO:.*]] = arith.constant 1 : i32
// CHECK: arith.cmpi uge, %[[GROUP]], %[[G1_LO]]
// CHECK: %[[G1_HI:.*]] = arith.constant 2 : i32
// CHECK: arith.cmpi ule, %[[GROUP]], %[[G1_HI]]
// CHECK: scf.if
// CHECK-NEXT: nvvm.setmaxregister increase 232
// CHECK: %[[M_LO:.*]] = arith.constant 4 : i32
// CHECK: arith.cmpi uge, %[[WARP]], %[[M_LO]]
// CHECK: %[[M_HI:.*]] = arith.constant 12 : i32
// CHECK: arith.cmpi ult, %[[WARP]], %[[M_HI]]
// CHECK: scf.if
// CHECK: %[[TWO:.*]] = arith.constant 2 : i32
// CHECK-NEXT: llvm.store %[[TWO]], %[[P]]
// CHECK-NEXT: } {fa4.role = "mma"}
// CHECK-NOT: fa4.warp_roles
// CHECK-NOT: fa4.role"
// CHECK-NOT: gpu.yield
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @roles(%p: !llvm.ptr<1>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c1 = arith.constant 1 : i32
          llvm.store %c1, %p : i32, !llvm.ptr<1>
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 40 : i64} : () -> ()
        "fa4.role"() ({
          %c2 = arith.constant 2 : i32
          llvm.store %c2, %p : i32, !llvm.ptr<1>
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 8 : i64, regs = 232 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// regs = 0 leaves the budget alone: no setmaxregister.
// CHECK-LABEL: llvm.func @no_budget
// CHECK-NOT: nvvm.setmaxregister
// CHECK: } {fa4.role = "all"}
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @no_budget() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "all", first_warp = 0 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @overlapping_roles() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      // expected-error @+1 {{warp 2 is in roles 'load' and 'mma'}}
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          gpu.yield
        }) {name = "mma", first_warp = 2 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// 40 * 128 + 240 * 256 = 66560 registers: over the launch's pool (384 threads x 168 = 64512).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @register_file_overflow() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      // expected-error @+1 {{register budgets {0: 40, 1: 240, 2: 240} (x128 threads) need 66560 registers, over the launch's pool of 64512 (384 threads x 168)}}
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 40 : i64} : () -> ()
        "fa4.role"() ({
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 8 : i64, regs = 240 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// 32 * 128 + 240 * 256 = 65536 registers: the whole 64K file, but over the launch's pool (64512): the consumers'
// setmaxnreg.inc would wait forever (it hung on an H200).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @register_pool_overflow() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      // expected-error @+1 {{register budgets {0: 32, 1: 240, 2: 240} (x128 threads) need 65536 registers, over the launch's pool of 64512 (384 threads x 168)}}
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 32 : i64} : () -> ()
        "fa4.role"() ({
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 8 : i64, regs = 240 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @role_outside_block() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{role 'mma' covers warps [4, 8) outside the block's 4 warps}}
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @regs_not_multiple_of_8() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{role 'load': regs=42; setmaxnreg takes a multiple of 8 in [24, 256]}}
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 42 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// setmaxnreg is per warpgroup: two roles in warpgroup 0 must ask for the same budget.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @warpgroup_disagrees() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{warpgroup 0 holds roles asking for 40 and 56 registers}}
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 40 : i64} : () -> ()
        "fa4.role"() ({
          gpu.yield
        }) {name = "store", first_warp = 1 : i64, num_warps = 1 : i64, regs = 56 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}
