// fa4-lower-sync: thread geometry, elect, fences, named barriers, CTA sync, traps, warp shuffles and
// votes -> nvvm; scale_if_uniform -> multiplies behind a bra.uni (inline PTX).
// RUN: fa4mlir-opt %s --split-input-file --fa4-lower-sync --verify-diagnostics | FileCheck %s

// CHECK-LABEL: llvm.func @sync
// CHECK-SAME: (%[[COND:[^:]+]]: i1)
// CHECK: %[[TX:.*]] = nvvm.read.ptx.sreg.tid.x : i32
// CHECK: %[[TY:.*]] = nvvm.read.ptx.sreg.tid.y : i32
// CHECK: %[[BZ:.*]] = nvvm.read.ptx.sreg.ctaid.z : i32
// CHECK: %[[ELECTED:.*]] = nvvm.elect.sync -> i1
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: %[[ID:.*]] = arith.constant 1 : i32
// CHECK: %[[N:.*]] = arith.constant 256 : i32
// CHECK: nvvm.barrier id = %[[ID]] number_of_threads = %[[N]]
// CHECK: nvvm.barrier0
// CHECK: scf.if %[[COND]] {
// CHECK-NEXT: llvm.intr.trap
// CHECK-NEXT: }
// Uses of the fa4 results now read the nvvm values.
// CHECK: %[[SUM:.*]] = arith.addi %[[TX]], %[[TY]]
// CHECK: %[[SUM2:.*]] = arith.addi %[[SUM]], %[[BZ]]
// CHECK: arith.select %[[ELECTED]], %[[SUM2]], %[[TX]]
// CHECK-NOT: fa4.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @sync(%cond: i1) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %tx = "fa4.thread_idx"() {dim = 0 : i64} : () -> i32
      %ty = "fa4.thread_idx"() {dim = 1 : i64} : () -> i32
      %bz = "fa4.block_idx"() {dim = 2 : i64} : () -> i32
      %e = "fa4.elect_one"() : () -> i1
      "fa4.fence"() {kind = "async_smem"} : () -> ()
      "fa4.named_barrier"() {id = 1 : i64, num_threads = 256 : i64} : () -> ()
      "fa4.sync_threads"() : () -> ()
      "fa4.trap_if"(%cond) : (i1) -> ()
      %s = arith.addi %tx, %ty : i32
      %s2 = arith.addi %s, %bz : i32
      %r = arith.select %e, %s2, %tx : i32
      llvm.return
    }
  }
}

// -----

// Grid size, a named-barrier arrive (the producer side of a hand-off: no wait) and butterfly
// shuffles over the full warp (mask -1, clamp 31) of an f32 and an i32.
// CHECK-LABEL: llvm.func @grid_barrier_arrive_shuffle
// CHECK-SAME: (%[[X:[^:]+]]: f32, %[[I:[^:]+]]: i32)
// CHECK: %[[NX:.*]] = nvvm.read.ptx.sreg.nctaid.x : i32
// CHECK: nvvm.read.ptx.sreg.nctaid.z : i32
// CHECK: %[[ID:.*]] = arith.constant 3 : i32
// CHECK: %[[N:.*]] = arith.constant 256 : i32
// CHECK: nvvm.barrier.arrive id = %[[ID]] number_of_threads = %[[N]]
// CHECK-NOT: nvvm.barrier id
// CHECK: %[[ALL:.*]] = arith.constant -1 : i32
// CHECK: %[[TWO:.*]] = arith.constant 2 : i32
// CHECK: %[[CLAMP:.*]] = arith.constant 31 : i32
// CHECK: %[[Y:.*]] = nvvm.shfl.sync bfly %[[ALL]], %[[X]], %[[TWO]], %[[CLAMP]] : f32 -> f32
// CHECK: %[[SIXTEEN:.*]] = arith.constant 16 : i32
// CHECK: %[[J:.*]] = nvvm.shfl.sync bfly %{{.*}}, %[[I]], %[[SIXTEEN]], %{{.*}} : i32 -> i32
// CHECK: arith.maxnumf %[[X]], %[[Y]] : f32
// CHECK: arith.addi %[[NX]], %[[J]] : i32
// CHECK-NOT: fa4.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @grid_barrier_arrive_shuffle(%x: f32, %i: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %nx = "fa4.grid_dim"() {dim = 0 : i64} : () -> i32
      %nz = "fa4.grid_dim"() {dim = 2 : i64} : () -> i32
      "fa4.named_barrier_arrive"() {id = 3 : i64, num_threads = 256 : i64} : () -> ()
      %y = "fa4.shuffle_xor"(%x) {offset = 2 : i64} : (f32) -> f32
      %j = "fa4.shuffle_xor"(%i) {offset = 16 : i64} : (i32) -> i32
      %m = arith.maxnumf %x, %y : f32
      %s = arith.addi %nx, %j : i32
      llvm.return
    }
  }
}

// -----

// tcgen05 fences (sm_100a) order tcgen05 ops around a thread synchronisation.
// CHECK-LABEL: llvm.func @tcgen05_fences
// CHECK: nvvm.tcgen05.fence <before>
// CHECK: nvvm.barrier0
// CHECK: nvvm.tcgen05.fence <after>
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @tcgen05_fences() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.fence"() {kind = "tcgen05_before"} : () -> ()
      "fa4.sync_threads"() : () -> ()
      "fa4.fence"() {kind = "tcgen05_after"} : () -> ()
      llvm.return
    }
  }
}

// -----

// The nvvm verifier rejects tcgen05 on sm_90a (reported at the fa4 op's location).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @tcgen05_on_sm90() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{'nvvm.tcgen05.fence' op is not supported on sm_90a}}
      "fa4.fence"() {kind = "tcgen05_before"} : () -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @bad_dim() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4.thread_idx dim must be 0, 1 or 2, got 3}}
      %t = "fa4.thread_idx"() {dim = 3 : i64} : () -> i32
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @unknown_fence() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{unknown fence kind 'global'; expected async_smem, async_smem_cluster, tcgen05_before or tcgen05_after}}
      "fa4.fence"() {kind = "global"} : () -> ()
      llvm.return
    }
  }
}

// -----

// Named barrier 0 is the CTA barrier; thread counts are whole warps.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @bad_named_barrier() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{named barrier id must be 1..15 (0 is the CTA barrier) and its thread count a multiple of 32; got id=0, num_threads=100}}
      "fa4.named_barrier"() {id = 0 : i64, num_threads = 100 : i64} : () -> ()
      llvm.return
    }
  }
}

// -----

// named_barrier_arrive checks its id and thread count as named_barrier does.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @bad_barrier_arrive() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{named barrier id must be 1..15 (0 is the CTA barrier) and its thread count a multiple of 32; got id=16, num_threads=128}}
      "fa4.named_barrier_arrive"() {id = 16 : i64, num_threads = 128 : i64} : () -> ()
      llvm.return
    }
  }
}

// -----

// A lane offset of 32 would leave the warp (bfly with clamp 31 takes 1..31).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @shuffle_offset_out_of_warp(%x: f32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4-lower-sync: shuffle_xor takes an f32 or i32 and an offset in 1..31; got f32, offset 32}}
      %y = "fa4.shuffle_xor"(%x) {offset = 32 : i64} : (f32) -> f32
      llvm.return
    }
  }
}

// -----

// shfl.sync moves 32 bits: a 64-bit value must be split by the caller.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @shuffle_i64(%x: i64) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4-lower-sync: shuffle_xor takes an f32 or i32 and an offset in 1..31; got i64, offset 1}}
      %y = "fa4.shuffle_xor"(%x) {offset = 1 : i64} : (i64) -> i64
      llvm.return
    }
  }
}

// -----

// vote_any: vote.sync.any over the full warp (mask -1); the result replaces the fa4 value.
// CHECK-LABEL: llvm.func @vote
// CHECK-SAME: (%[[P:[^:]+]]: i1, %[[A:[^:]+]]: i32, %[[B:[^:]+]]: i32)
// CHECK: %[[MASK:.*]] = arith.constant -1 : i32
// CHECK: %[[ANY:.*]] = nvvm.vote.sync any %[[MASK]], %[[P]] -> i1
// CHECK: arith.select %[[ANY]], %[[A]], %[[B]]
// CHECK-NOT: fa4.vote_any
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @vote(%p: i1, %a: i32, %b: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %any = "fa4.vote_any"(%p) : (i1) -> i1
      %r = arith.select %any, %a, %b : i32
      llvm.return
    }
  }
}

// -----

// scale_if_uniform: one inline PTX block; the element-wise multiplies sit behind `@skip bra.uni` on
// the (warp-uniform) condition, each result tied to its value operand; braces scope the label.
// CHECK-LABEL: llvm.func @scale_if
// CHECK: %[[FLAG:.*]] = arith.extui %{{.*}} : i1 to i32
// CHECK: llvm.inline_asm has_side_effects "{\0A.reg .pred skip;\0Asetp.eq.u32 skip, $6, 0;\0A@skip bra.uni SCALE_DONE;\0Amul.f32 $0, $0, $4;\0Amul.f32 $1, $1, $5;\0ASCALE_DONE:\0A}", "=f,=f,0,1,f,f,r" %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FLAG]] : (f32, f32, f32, f32, i32) -> !llvm.struct<(f32, f32)>
// CHECK-NOT: fa4.scale_if_uniform
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx86">] {
    llvm.func @scale_if(%p: i1, %v: vector<2xf32>, %s: vector<2xf32>) -> vector<2xf32> attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %any = "fa4.vote_any"(%p) : (i1) -> i1
      %r = "fa4.scale_if_uniform"(%any, %v, %s) : (i1, vector<2xf32>, vector<2xf32>) -> vector<2xf32>
      llvm.return %r : vector<2xf32>
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx86">] {
    llvm.func @scale_if_mismatch(%p: i1, %v: vector<2xf32>, %s: vector<4xf32>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{scale_if_uniform takes two f32 vectors of one length, got vector<2xf32> and vector<4xf32>}}
      %r = "fa4.scale_if_uniform"(%p, %v, %s) : (i1, vector<2xf32>, vector<4xf32>) -> vector<2xf32>
      llvm.return
    }
  }
}

// -----

// shuffle_idx: a broadcast from one lane over the full warp (mask -1, clamp 31); the kernels use
// lane 0 to make a warp-uniform value visible to ptxas as such.
// CHECK-LABEL: llvm.func @broadcast
// CHECK-SAME: (%[[X:[^:]+]]: i32, %[[F:[^:]+]]: f32)
// CHECK: %[[MASK:.*]] = arith.constant -1 : i32
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK: %[[CLAMP:.*]] = arith.constant 31 : i32
// CHECK: %[[U:.*]] = nvvm.shfl.sync idx %[[MASK]], %[[X]], %[[ZERO]], %[[CLAMP]] : i32 -> i32
// CHECK: %[[SEVEN:.*]] = arith.constant 7 : i32
// CHECK: nvvm.shfl.sync idx %{{.*}}, %[[F]], %[[SEVEN]], %{{.*}} : f32 -> f32
// CHECK: arith.addi %[[U]], %[[X]] : i32
// CHECK-NOT: fa4.shuffle_idx
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @broadcast(%x: i32, %f: f32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %u = "fa4.shuffle_idx"(%x) {lane = 0 : i64} : (i32) -> i32
      %g = "fa4.shuffle_idx"(%f) {lane = 7 : i64} : (f32) -> f32
      %s = arith.addi %u, %x : i32
      llvm.return
    }
  }
}

// -----

// A lane past 31 is outside the warp.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @broadcast_lane_out_of_warp(%x: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4-lower-sync: shuffle_idx takes an f32 or i32 and a lane in 0..31; got i32, lane 32}}
      %y = "fa4.shuffle_idx"(%x) {lane = 32 : i64} : (i32) -> i32
      llvm.return
    }
  }
}

// -----

// A selected named barrier (one per warpgroup, no branch): id + select, for sync and arrive.
// CHECK-LABEL: llvm.func @selected_barriers
// CHECK-SAME: (%[[WG:[^:]+]]: i32)
// CHECK: %[[BASE:.*]] = arith.constant 4 : i32
// CHECK: %[[ID:.*]] = arith.addi %[[BASE]], %[[WG]] : i32
// CHECK: %[[N:.*]] = arith.constant 128 : i32
// CHECK: nvvm.barrier id = %[[ID]] number_of_threads = %[[N]]
// CHECK: %[[BASE1:.*]] = arith.constant 1 : i32
// CHECK: %[[ID1:.*]] = arith.addi %[[BASE1]], %[[WG]] : i32
// CHECK: nvvm.barrier.arrive id = %[[ID1]] number_of_threads = %{{.*}}
// CHECK-NOT: fa4.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @selected_barriers(%wg: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      "fa4.named_barrier"(%wg) {id = 4 : i64, num_threads = 128 : i64, span = 3 : i64} : (i32) -> ()
      "fa4.named_barrier_arrive"(%wg) {id = 1 : i64, num_threads = 256 : i64, span = 2 : i64} : (i32) -> ()
      llvm.return
    }
  }
}

// -----

// Every id a select may pick must be a named barrier.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @selected_past_15(%wg: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      // expected-error @+1 {{named barrier id must be 1..15 (0 is the CTA barrier) and its thread count a multiple of 32; got id=14..16 (span 3), num_threads=128}}
      "fa4.named_barrier"(%wg) {id = 14 : i64, num_threads = 128 : i64, span = 3 : i64} : (i32) -> ()
      llvm.return
    }
  }
}

// -----

// A select operand needs the span that bounds it, and a span needs the operand.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @select_without_span(%wg: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      // expected-error @+1 {{named_barrier_arrive takes a `select` operand exactly when it has a `span` >= 1 (got 1 operands, span=None)}}
      "fa4.named_barrier_arrive"(%wg) {id = 1 : i64, num_threads = 256 : i64} : (i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @span_without_select() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      // expected-error @+1 {{named_barrier takes a `select` operand exactly when it has a `span` >= 1 (got 0 operands, span=2)}}
      "fa4.named_barrier"() {id = 1 : i64, num_threads = 256 : i64, span = 2 : i64} : () -> ()
      llvm.return
    }
  }
}

// -----

// The cluster's geometry and barrier: cluster_rank -> %cluster_ctarank, cluster_sync -> barrier.cluster
// arrive then wait (aligned: every thread of the CTA executes it).
// CHECK-LABEL: llvm.func @cluster
// CHECK: %[[R:.*]] = nvvm.read.ptx.sreg.cluster.ctarank : i32
// CHECK: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// CHECK: llvm.store %[[R]]
// CHECK-NOT: fa4.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @cluster(%out: !llvm.ptr<1>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %r = "fa4.cluster_rank"() : () -> i32
      "fa4.cluster_sync"() : () -> ()
      llvm.store %r, %out : i32, !llvm.ptr<1>
      llvm.return
    }
  }
}

// -----

// A remote shared store: peer_address -> mapa.shared::cluster (a !llvm.ptr<7>), the store through it stays
// (st.shared::cluster); fence kind async_smem_cluster -> fence.proxy.async.shared::cluster.
// CHECK-LABEL: llvm.func @peer_store
// CHECK: %[[R:.*]] = nvvm.read.ptx.sreg.cluster.ctarank : i32
// CHECK: %[[P:.*]] = nvvm.mapa %{{.*}}, %[[R]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: llvm.store %{{.*}}, %[[P]] : i32, !llvm.ptr<7>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cluster>}
// CHECK-NOT: fa4.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @peer_store(%local: !llvm.ptr<3>, %v: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %r = "fa4.cluster_rank"() : () -> i32
      %p = "fa4.peer_address"(%local, %r) : (!llvm.ptr<3>, i32) -> !llvm.ptr<7>
      llvm.store %v, %p : i32, !llvm.ptr<7>
      "fa4.fence"() {kind = "async_smem_cluster"} : () -> ()
      llvm.return
    }
  }
}
