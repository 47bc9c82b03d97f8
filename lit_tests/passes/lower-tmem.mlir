// fa4-lower-tmem: tensor-memory ops -> nvvm.tcgen05.* (PTX ISA 9.1 §9.7.16.7.1 alloc/dealloc/
// relinquish, §9.7.16.8.3 ld, §9.7.16.8.4 st, §9.7.16.8.5 wait); loaded registers are read only
// through the fence placed after tcgen05.wait::ld.
// RUN: fa4mlir-opt %s --split-input-file --verify-diagnostics --pass-pipeline=fa4-lower-tmem | FileCheck %s

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // CHECK-LABEL: llvm.func @tmem_ops
    // CHECK-SAME: (%[[SLOT:[^:]+]]: !llvm.ptr<3>, %[[ADDR:[^:]+]]: i32, %[[OUT:[^:]+]]: !llvm.ptr<1>)
    llvm.func @tmem_ops(%slot: !llvm.ptr<3>, %addr: i32, %out: !llvm.ptr<1>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // CHECK: %[[COLS:.*]] = arith.constant 256 : i32
      // CHECK: nvvm.tcgen05.alloc %[[SLOT]], %[[COLS]] : !llvm.ptr<3>
      "fa4.tmem_alloc"(%slot) {cols = 256 : i64} : (!llvm.ptr<3>) -> ()
      // CHECK: nvvm.tcgen05.relinquish_alloc_permit
      "fa4.tmem_relinquish"() : () -> ()
      // CHECK: %[[P:.*]] = llvm.inttoptr %[[ADDR]] : i32 to !llvm.ptr<6>
      // CHECK: %[[V:.*]] = nvvm.tcgen05.ld %[[P]] {shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>} : vector<4xi32>
      %v = "fa4.tmem_load"(%addr) {num = 4 : i64} : (i32) -> vector<4xi32>
      // CHECK: nvvm.tcgen05.wait <load>
      // CHECK-COUNT-4: llvm.inline_asm has_side_effects
      "fa4.tmem_wait"() {kind = "ld"} : () -> ()
      // CHECK: %[[E:.*]] = llvm.insertelement %{{.*}}[%{{.*}} : i64] : vector<4xi32>
      // CHECK-NEXT: llvm.store %[[E]], %[[OUT]]
      llvm.store %v, %out : vector<4xi32>, !llvm.ptr<1>
      // CHECK: %[[P2:.*]] = llvm.inttoptr %[[ADDR]] : i32 to !llvm.ptr<6>
      // CHECK: nvvm.tcgen05.st %[[P2]], %[[E]] {shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>} : vector<4xi32>
      "fa4.tmem_store"(%addr, %v) : (i32, vector<4xi32>) -> ()
      // CHECK: nvvm.tcgen05.wait <store>
      "fa4.tmem_wait"() {kind = "st"} : () -> ()
      // CHECK: %[[P3:.*]] = llvm.inttoptr %[[ADDR]] : i32 to !llvm.ptr<6>
      // CHECK: nvvm.tcgen05.dealloc %[[P3]], %{{.*}} : !llvm.ptr<6>
      "fa4.tmem_dealloc"(%addr) {cols = 256 : i64} : (i32) -> ()
      // CHECK-NOT: fa4.tmem
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @bad_num(%addr: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{tmem_load num=3 with result vector<3xi32>; tcgen05.ld.32x32b takes num in}}
      %v = "fa4.tmem_load"(%addr) {num = 3 : i64} : (i32) -> vector<3xi32>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @bad_wait() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{tmem_wait kind must be 'ld' or 'st', got 'load'}}
      "fa4.tmem_wait"() {kind = "load"} : () -> ()
      llvm.return
    }
  }
}

// -----

// One column into a vector<1xi32>: the i32 register is read (fenced, then widened) only after the
// wait; nothing touches it between tcgen05.ld and tcgen05.wait::ld.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // CHECK-LABEL: llvm.func @one_column
    llvm.func @one_column(%addr: i32, %out: !llvm.ptr<1>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // CHECK: %[[R:.*]] = nvvm.tcgen05.ld %{{.*}} {shape = #nvvm.tcgen05_ldst_shape<shape_32x32b>} : i32
      // CHECK-NOT: %[[R]]
      // CHECK: nvvm.tcgen05.wait <load>
      // CHECK-NEXT: %[[F:.*]] = llvm.inline_asm has_side_effects "", "=r,0" %[[R]] : (i32) -> i32
      // CHECK: %[[V:.*]] = llvm.insertelement %[[F]], %{{.*}}[%{{.*}} : i64] : vector<1xi32>
      // CHECK-NEXT: llvm.store %[[V]], %{{.*}}
      %v = "fa4.tmem_load"(%addr) {num = 1 : i64} : (i32) -> vector<1xi32>
      "fa4.tmem_wait"() {kind = "ld"} : () -> ()
      llvm.store %v, %out : vector<1xi32>, !llvm.ptr<1>
      llvm.return
    }
  }
}

// -----

// A CTA pair allocates, relinquishes and frees its TMEM with the .cta_group::2 forms.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // CHECK-LABEL: llvm.func @pair_alloc
    llvm.func @pair_alloc(%slot: !llvm.ptr<3>, %addr: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // CHECK: nvvm.tcgen05.alloc %{{.*}}, %{{.*}} {group = #nvvm.cta_group<cta_2>} : !llvm.ptr<3>
      "fa4.tmem_alloc"(%slot) {cols = 512 : i64, cta_group = 2 : i64} : (!llvm.ptr<3>) -> ()
      // CHECK: nvvm.tcgen05.relinquish_alloc_permit {group = #nvvm.cta_group<cta_2>}
      "fa4.tmem_relinquish"() {cta_group = 2 : i64} : () -> ()
      // CHECK: nvvm.tcgen05.dealloc %{{.*}}, %{{.*}} {group = #nvvm.cta_group<cta_2>} : !llvm.ptr<6>
      "fa4.tmem_dealloc"(%addr) {cols = 512 : i64, cta_group = 2 : i64} : (i32) -> ()
      llvm.return
    }
  }
}

// -----

// SMEM -> TMEM copies: fa4.tmem_copy to tcgen05.cp with its shape, multicast and cta_group.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // CHECK-LABEL: llvm.func @copy
    llvm.func @copy(%addr: i32, %desc: i64) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // CHECK: %[[T:.*]] = llvm.inttoptr %{{.*}} : i32 to !llvm.ptr<6>
      // CHECK: nvvm.tcgen05.cp %[[T]], %{{.*}} {shape = #nvvm.tcgen05_cp_shape<shape_128x256b>}
      "fa4.tmem_copy"(%addr, %desc) {shape = "128x256b"} : (i32, i64) -> ()
      // CHECK: nvvm.tcgen05.cp %{{.*}}, %{{.*}} {group = #nvvm.cta_group<cta_2>, multicast = #nvvm.tcgen05_cp_multicast<warpx2_02_13>, shape = #nvvm.tcgen05_cp_shape<shape_64x128b>}
      "fa4.tmem_copy"(%addr, %desc) {shape = "64x128b", multicast = "warpx2::02_13", cta_group = 2 : i64} : (i32, i64) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @copy_bad(%addr: i32, %desc: i64) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{tmem_copy shape '32x128b' with multicast ''; tcgen05.cp takes}}
      "fa4.tmem_copy"(%addr, %desc) {shape = "32x128b"} : (i32, i64) -> ()
      llvm.return
    }
  }
}
