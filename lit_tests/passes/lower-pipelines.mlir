// fa4-lower-pipelines: the staged mbarrier protocol -> nvvm.mbarrier.*. A pipeline of N stages at
// `offset` owns full[s] at offset + 8 s and empty[s] at offset + 8 (N + s).
// RUN: fa4mlir-opt %s --split-input-file --fa4-lower-pipelines --verify-diagnostics | FileCheck %s

// ab_pipe: 2 stages at 1024 -> full = 1024, 1032; empty = 1040, 1048.
// CHECK-LABEL: llvm.func @protocol
// CHECK-SAME: (%[[STAGE:[^:]+]]: i32, %[[PHASE:[^:]+]]: i32)
// 1. pipeline_init: thread 0 initialises full[s] with producer_arrivals (1), empty[s] with
//    consumer_arrivals (2), fences the init, then the CTA synchronises.
// CHECK: %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x
// CHECK: %[[IS_T0:.*]] = arith.cmpi eq, %[[TID]], %{{.*}}
// CHECK: scf.if %[[IS_T0]] {
// CHECK: arith.constant 1024 : i32
// CHECK: %[[ONE_ARRIVAL:.*]] = arith.constant 1 : i32
// CHECK-NEXT: nvvm.mbarrier.init %{{.*}}, %[[ONE_ARRIVAL]]
// CHECK: arith.constant 1040 : i32
// CHECK: %[[TWO_ARRIVALS:.*]] = arith.constant 2 : i32
// CHECK-NEXT: nvvm.mbarrier.init %{{.*}}, %[[TWO_ARRIVALS]]
// CHECK: arith.constant 1032 : i32
// CHECK: nvvm.mbarrier.init
// CHECK: arith.constant 1048 : i32
// CHECK: nvvm.mbarrier.init
// CHECK-NOT: nvvm.mbarrier.init
// CHECK: nvvm.fence.mbarrier.init
// CHECK-NEXT: }
// CHECK-NEXT: nvvm.barrier0
// 2. producer_acquire waits on empty[stage] with parity (phase ^ 1) & 1.
// CHECK: %[[FLIP:.*]] = arith.xori %[[PHASE]], %{{.*}}
// CHECK: %[[PROD_PARITY:.*]] = arith.andi %[[FLIP]], %{{.*}}
// CHECK: %[[E8:.*]] = arith.muli %[[STAGE]], %{{.*}}
// CHECK: %[[EMPTY_FIRST:.*]] = arith.constant 1040 : i32
// CHECK: %[[E_OFF:.*]] = arith.addi %[[E8]], %[[EMPTY_FIRST]]
// CHECK: %[[EMPTY:.*]] = llvm.getelementptr %{{.*}}[%[[E_OFF]]]
// CHECK: nvvm.mbarrier.try_wait.parity %[[EMPTY]], %[[PROD_PARITY]], %{{.*}} : !llvm.ptr<3>, i32, i32
// 3. producer_commit with tx_bytes: arrive.expect_tx on full[stage].
// CHECK: %[[F8:.*]] = arith.muli %[[STAGE]], %{{.*}}
// CHECK: %[[FULL_FIRST:.*]] = arith.constant 1024 : i32
// CHECK: %[[F_OFF:.*]] = arith.addi %[[F8]], %[[FULL_FIRST]]
// CHECK: %[[FULL:.*]] = llvm.getelementptr %{{.*}}[%[[F_OFF]]]
// CHECK: %[[TX:.*]] = arith.constant 49152 : i32
// CHECK: nvvm.mbarrier.arrive.expect_tx %[[FULL]], %[[TX]]
// 4. consumer_wait waits on full[stage] with parity phase & 1.
// CHECK: %[[CONS_PARITY:.*]] = arith.andi %[[PHASE]], %{{.*}}
// CHECK: %[[FULL_FIRST2:.*]] = arith.constant 1024 : i32
// CHECK: %[[FULL2:.*]] = llvm.getelementptr
// CHECK: nvvm.mbarrier.try_wait.parity %[[FULL2]], %[[CONS_PARITY]]
// 5. consumer_release: a plain arrive on empty[stage].
// CHECK: arith.constant 1040 : i32
// CHECK: %[[EMPTY2:.*]] = llvm.getelementptr
// CHECK: nvvm.mbarrier.arrive %[[EMPTY2]] : !llvm.ptr<3> -> i64
// 6. producer_commit with tx_bytes = 0 is a plain arrive on full[stage].
// CHECK: arith.constant 1024 : i32
// CHECK: %[[FULL3:.*]] = llvm.getelementptr
// CHECK: nvvm.mbarrier.arrive %[[FULL3]] : !llvm.ptr<3> -> i64
// The pipeline declaration is gone with the protocol ops.
// CHECK-NOT: fa4.
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @protocol(%stage: i32, %phase: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 2 : i64, offset = 1024 : i64} : () -> ()
      "fa4.pipeline_init"() : () -> ()
      "fa4.producer_acquire"(%stage, %phase) {pipe = "ab_pipe"} : (i32, i32) -> ()
      "fa4.producer_commit"(%stage) {pipe = "ab_pipe", tx_bytes = 49152 : i64} : (i32) -> ()
      "fa4.consumer_wait"(%stage, %phase) {pipe = "ab_pipe"} : (i32, i32) -> ()
      "fa4.consumer_release"(%stage) {pipe = "ab_pipe"} : (i32) -> ()
      "fa4.producer_commit"(%stage) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @undeclared_pipeline(%stage: i32, %phase: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4.consumer_wait names pipeline 'kv_pipe', which is not declared (fa4.pipeline)}}
      "fa4.consumer_wait"(%stage, %phase) {pipe = "kv_pipe"} : (i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @unplanned_pipeline(%stage: i32, %phase: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{pipeline 'ab_pipe' has no SMEM offset: run fa4-plan-smem first}}
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      "fa4.producer_acquire"(%stage, %phase) {pipe = "ab_pipe"} : (i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// peer_arrive: full[stage] of ab_pipe mapped into the cluster's CTA `rank` (mapa.shared::cluster), then
// one release.cluster arrive on that remote barrier.
// CHECK-LABEL: llvm.func @peer
// CHECK-SAME: (%[[STAGE:[^:]+]]: i32, %[[RANK:[^:]+]]: i32)
// CHECK: arith.constant 1024 : i32
// CHECK: %[[LOCAL:.*]] = llvm.getelementptr
// CHECK: %[[REMOTE:.*]] = nvvm.mapa %[[LOCAL]], %[[RANK]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: nvvm.mbarrier.arrive %[[REMOTE]] {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
// CHECK-NOT: fa4.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @peer(%stage: i32, %rank: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 2 : i64, consumer_arrivals = 1 : i64, offset = 1024 : i64} : () -> ()
      "fa4.peer_arrive"(%stage, %rank) {pipe = "ab_pipe", side = "full"} : (i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// peer_store_async: full[stage] of ab_pipe mapped into CTA `rank` (mapa.shared::cluster), then one st.async of
// the four words at the remote address, its 16 bytes completing on that remote barrier; an f32 goes as a b32.
// CHECK-LABEL: llvm.func @peer_store
// CHECK-SAME: (%[[STAGE:[^:]+]]: i32, %[[RANK:[^:]+]]: i32, %[[DST:[^:]+]]: !llvm.ptr<7>, %[[V:[^:]+]]: vector<4xi32>, %[[F:[^:]+]]: f32, %[[OFF:[^:]+]]: i32)
// CHECK: %[[BAR:.*]] = nvvm.mapa %{{.*}}, %[[RANK]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: nvvm.inline_ptx "{ .reg .b32 sta, stb; cvt.u32.u64 sta, $0; cvt.u32.u64 stb, $5; st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [sta], {$1, $2, $3, $4}, [stb]; }" ro(%[[DST]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[BAR]]
// CHECK: %[[W:.*]] = arith.bitcast %[[F]] : f32 to i32
// A store through an i8 getelementptr of an i32 offset: the offset is added inside the asm ($1).
// CHECK: %[[BAR2:.*]] = nvvm.mapa
// CHECK: nvvm.inline_ptx "{ .reg .b32 sta, stb; cvt.u32.u64 sta, $0; cvt.u32.u64 stb, $3; add.s32 sta, sta, $1; st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [sta], $2, [stb]; }" ro(%[[DST]], %[[OFF]], %[[W]], %[[BAR2]]
// CHECK-NOT: fa4.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @peer_store(%stage: i32, %rank: i32, %dst: !llvm.ptr<7>, %v: vector<4xi32>, %f: f32, %off: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 1024 : i64} : () -> ()
      "fa4.peer_store_async"(%v, %dst, %stage, %rank) {pipe = "ab_pipe"} : (vector<4xi32>, !llvm.ptr<7>, i32, i32) -> ()
      %at = llvm.getelementptr %dst[%off] : (!llvm.ptr<7>, i32) -> !llvm.ptr<7>, i8
      "fa4.peer_store_async"(%f, %at, %stage, %rank) {pipe = "ab_pipe"} : (f32, !llvm.ptr<7>, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @peer_bad_side(%stage: i32, %rank: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 2 : i64, consumer_arrivals = 1 : i64, offset = 1024 : i64} : () -> ()
      // expected-error @+1 {{peer_arrive side must be 'full' or 'empty', got 'both'}}
      "fa4.peer_arrive"(%stage, %rank) {pipe = "ab_pipe", side = "both"} : (i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// producer_commit with cta_group = 2 (a pair ring's commit): both CTAs execute it, the leader alone
// (%cluster_ctarank even) arrives with the pair's bytes on its own full[stage].
// CHECK-LABEL: llvm.func @pair_commit
// CHECK: %[[RANK:.*]] = nvvm.read.ptx.sreg.cluster.ctarank : i32
// CHECK: %[[ODD:.*]] = arith.andi %[[RANK]], %{{.*}} : i32
// CHECK: %[[LEADER:.*]] = arith.cmpi eq, %[[ODD]], %{{.*}} : i32
// CHECK: scf.if %[[LEADER]] {
// CHECK: %[[FULL:.*]] = llvm.getelementptr
// CHECK: %[[TX:.*]] = arith.constant 40960 : i32
// CHECK: nvvm.mbarrier.arrive.expect_tx %[[FULL]], %[[TX]]
// CHECK: }
// CHECK-NOT: fa4.
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @pair_commit(%stage: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 1024 : i64} : () -> ()
      "fa4.producer_commit"(%stage) {pipe = "kv", tx_bytes = 40960 : i64, cta_group = 2 : i64} : (i32) -> ()
      llvm.return
    }
  }
}
