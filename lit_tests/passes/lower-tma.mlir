// fa4-lower-tma: TMA ops -> nvvm.cp.async.bulk.tensor.*; a load completes on full[stage] of its
// pipeline, at fa4_smem + offset + 8 * stage (the input is as fa4-plan-smem leaves it).
// RUN: fa4mlir-opt %s --split-input-file --fa4-lower-tma --verify-diagnostics | FileCheck %s

// CHECK-LABEL: llvm.func @tma
// CHECK-SAME: (%[[DESC:[^:]+]]: !llvm.ptr {{.*}}, %[[DST:[^:]+]]: !llvm.ptr<3>, %[[STAGE:[^:]+]]: i32, %[[K0:[^:]+]]: i32, %[[M0:[^:]+]]: i32)
// CHECK: nvvm.prefetch tensormap, %[[DESC]]
// CHECK: %[[EIGHT:.*]] = arith.constant 8 : i32
// CHECK: %[[SCALED:.*]] = arith.muli %[[STAGE]], %[[EIGHT]]
// CHECK: %[[FIRST:.*]] = arith.constant 2048 : i32
// CHECK: %[[OFF:.*]] = arith.addi %[[SCALED]], %[[FIRST]]
// CHECK: %[[BASE:.*]] = llvm.mlir.addressof @fa4_smem
// CHECK: %[[FULL:.*]] = llvm.getelementptr %[[BASE]][%[[OFF]]]
// CHECK: %[[DST7:.*]] = llvm.addrspacecast %[[DST]] : !llvm.ptr<3> to !llvm.ptr<7>
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[DST7]], %[[DESC]], %[[FULL]], box[%[[K0]], %[[M0]]]
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta %[[DESC]], %[[DST]], box[%[[K0]], %[[M0]]]
// CHECK: nvvm.cp.async.bulk.tensor.prefetch %[[DESC]], box[%[[K0]], %[[M0]]] : !llvm.ptr
// CHECK: nvvm.cp.async.bulk.commit.group
// CHECK-NEXT: nvvm.cp.async.bulk.wait_group 1 {read}
// CHECK-NOT: fa4.tma
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @tma(%desc: !llvm.ptr {llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant, llvm.align = 64 : i64},
                   %dst: !llvm.ptr<3>, %stage: i32, %k0: i32, %m0: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 4 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 2048 : i64} : () -> ()
      "fa4.tma_prefetch"(%desc) : (!llvm.ptr) -> ()
      "fa4.tma_load"(%desc, %dst, %stage, %k0, %m0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64}
          : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
      "fa4.tma_store"(%desc, %dst, %k0, %m0) {box = array<i64: 64, 128>} : (!llvm.ptr, !llvm.ptr<3>, i32, i32) -> ()
      "fa4.tma_prefetch_box"(%desc, %k0, %m0) : (!llvm.ptr, i32, i32) -> ()
      "fa4.tma_store_wait"() {pending = 1 : i64} : () -> ()
      llvm.return
    }
  }
}

// -----

// A rank-2 box needs two coordinates.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @coords_do_not_match_box(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %k0: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 4 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 0 : i64} : () -> ()
      // expected-error @+1 {{tma_load has 1 coordinates for a rank-2 box}}
      "fa4.tma_load"(%desc, %dst, %stage, %k0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64}
          : (!llvm.ptr, !llvm.ptr<3>, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @undeclared_pipeline(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %k0: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4.tma_load names pipeline 'kv_pipe', which is not declared (fa4.pipeline)}}
      "fa4.tma_load"(%desc, %dst, %stage, %k0) {pipe = "kv_pipe", box = array<i64: 64>, elem_bytes = 2 : i64}
          : (!llvm.ptr, !llvm.ptr<3>, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// The barriers are placed by fa4-plan-smem: without its `offset` the load cannot be lowered.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @unplanned_pipeline(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %k0: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{pipeline 'ab_pipe' has no SMEM offset: run fa4-plan-smem first}}
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 4 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      "fa4.tma_load"(%desc, %dst, %stage, %k0) {pipe = "ab_pipe", box = array<i64: 64>, elem_bytes = 2 : i64}
          : (!llvm.ptr, !llvm.ptr<3>, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// Per-thread 16-byte copies: cp.async.cg with src-size 16, or 0 (zero fill) where `valid` is false;
// their completion arrives on full[stage] without .noinc (a net-zero arrival).
// CHECK-LABEL: llvm.func @gather
// CHECK-SAME: (%[[SRC:[^:]+]]: !llvm.ptr<1>, %[[DST:[^:]+]]: !llvm.ptr<3>, %[[STAGE:[^:]+]]: i32, %[[OK:[^:]+]]: i1)
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : i32
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : i32
// CHECK: %[[SIZE:.*]] = arith.select %[[OK]], %[[C16]], %[[C0]]
// CHECK: nvvm.cp.async.shared.global %[[DST]], %[[SRC]], 16, cache = cg, %[[SIZE]]
// CHECK: %[[FULL:.*]] = llvm.getelementptr
// CHECK: nvvm.cp.async.mbarrier.arrive %[[FULL]]
// CHECK-NOT: noinc
// CHECK-NOT: fa4.cp_async
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @gather(%src: !llvm.ptr<1>, %dst: !llvm.ptr<3>, %stage: i32, %ok: i1)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv_pipe", num_stages = 4 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 1 : i64, offset = 2048 : i64} : () -> ()
      "fa4.cp_async"(%src, %dst, %ok) : (!llvm.ptr<1>, !llvm.ptr<3>, i1) -> ()
      "fa4.cp_async_arrive"(%stage) {pipe = "kv_pipe"} : (i32) -> ()
      llvm.return
    }
  }
}

// -----
// The producer-side form (fa4.cp_async_commit / fa4.cp_async_wait): cp.async.commit_group, and for the wait
// cp.async.wait_group N after it.
// CHECK-LABEL: llvm.func @gather_groups
// CHECK: nvvm.cp.async.shared.global
// CHECK-NEXT: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.shared.global
// CHECK-NEXT: nvvm.cp.async.commit.group
// CHECK-NEXT: nvvm.cp.async.wait.group 1
// CHECK-NOT: fa4.cp_async
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @gather_groups(%src: !llvm.ptr<1>, %dst: !llvm.ptr<3>, %ok: i1)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.cp_async"(%src, %dst, %ok) : (!llvm.ptr<1>, !llvm.ptr<3>, i1) -> ()
      "fa4.cp_async_commit"() : () -> ()
      "fa4.cp_async"(%src, %dst, %ok) : (!llvm.ptr<1>, !llvm.ptr<3>, i1) -> ()
      "fa4.cp_async_wait"() {pending = 1 : i64} : () -> ()
      llvm.return
    }
  }
}

// -----

// The hints (fa4.cp_async's l2_prefetch, evict_last): inline PTX, the policy from a side-effect-free createpolicy.
// CHECK-LABEL: llvm.func @gather_hinted
// CHECK-SAME: (%[[SRC:[^:]+]]: !llvm.ptr<1>, %[[DST:[^:]+]]: !llvm.ptr<3>, %[[OK:[^:]+]]: i1)
// CHECK: %[[SIZE:.*]] = arith.select %[[OK]]
// CHECK: %[[D32:.*]] = llvm.ptrtoint %[[DST]] : !llvm.ptr<3> to i32
// CHECK: %[[S64:.*]] = llvm.ptrtoint %[[SRC]] : !llvm.ptr<1> to i64
// CHECK: %[[POL:.*]] = llvm.inline_asm "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;", "=l"  : () -> i64
// CHECK: llvm.inline_asm has_side_effects "cp.async.cg.shared.global.L2::cache_hint.L2::256B [$0], [$1], 16, $2, $3;", "r,l,r,l,~{memory}" %[[D32]], %[[S64]], %[[SIZE]], %[[POL]]
// CHECK: llvm.inline_asm has_side_effects "cp.async.cg.shared.global.L2::128B [$0], [$1], 16, $2;", "r,l,r,~{memory}"
// CHECK-NOT: fa4.cp_async
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @gather_hinted(%src: !llvm.ptr<1>, %dst: !llvm.ptr<3>, %ok: i1)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.cp_async"(%src, %dst, %ok) {l2_prefetch = 256 : i64, evict_last = 1 : i64} : (!llvm.ptr<1>, !llvm.ptr<3>, i1) -> ()
      "fa4.cp_async"(%src, %dst, %ok) {l2_prefetch = 128 : i64} : (!llvm.ptr<1>, !llvm.ptr<3>, i1) -> ()
      llvm.return
    }
  }
}

// -----

// An L2 prefetch size cp.async has no form for.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @gather_bad_prefetch(%src: !llvm.ptr<1>, %dst: !llvm.ptr<3>, %ok: i1)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{cp_async l2_prefetch must be one of (64, 128, 256), got 512}}
      "fa4.cp_async"(%src, %dst, %ok) {l2_prefetch = 512 : i64} : (!llvm.ptr<1>, !llvm.ptr<3>, i1) -> ()
      llvm.return
    }
  }
}

// -----

// fa4.ld_global_nc: ld.global.nc with its hints (.L1 eviction priority, then the .L2 prefetch size) as inline PTX,
// one register per element, the vector rebuilt; a constant i8 offset of the address folded in as [addr+offset].
// CHECK-LABEL: llvm.func @load_hinted
// CHECK-SAME: (%[[SRC:[^:]+]]: !llvm.ptr<1>)
// CHECK: %[[W:.*]]:4 = nvvm.inline_ptx "ld.global.nc.L1::evict_last.L2::256B.v4.b32 {$0, $1, $2, $3}, [$4];" ro(%[[SRC]] : !llvm.ptr<1>) -> i32, i32, i32, i32
// CHECK: llvm.insertelement %[[W]]#0
// CHECK: llvm.insertelement %[[W]]#3
// CHECK: nvvm.inline_ptx "ld.global.nc.L1::evict_last.L2::128B.f32 $0, [$1+512];" ro(%[[SRC]] : !llvm.ptr<1>) -> f32
// CHECK: nvvm.inline_ptx "ld.global.nc.v2.b32 {$0, $1}, [$2];" ro(%{{.*}} : !llvm.ptr<1>) -> i32, i32
// CHECK-NOT: fa4.ld_global_nc
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @load_hinted(%src: !llvm.ptr<1>)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      %piece = "fa4.ld_global_nc"(%src) {l1_evict = "evict_last", l2_prefetch = 256 : i64} : (!llvm.ptr<1>) -> vector<4xi32>
      %c512 = arith.constant 512 : i32
      %at = llvm.getelementptr %src[%c512] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i8
      %scale = "fa4.ld_global_nc"(%at) {l1_evict = "evict_last", l2_prefetch = 128 : i64} : (!llvm.ptr<1>) -> f32
      %cm4 = arith.constant -4 : i32
      %back = llvm.getelementptr %src[%cm4] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i8
      %pair = "fa4.ld_global_nc"(%back) : (!llvm.ptr<1>) -> vector<2xi32>
      llvm.return
    }
  }
}

// -----

// An L2 prefetch size ld.global.nc has no form for.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @load_bad_prefetch(%src: !llvm.ptr<1>)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{ld_global_nc l2_prefetch must be one of (64, 128, 256), got 512}}
      %v = "fa4.ld_global_nc"(%src) {l2_prefetch = 512 : i64} : (!llvm.ptr<1>) -> i32
      llvm.return
    }
  }
}

// -----

// sm_100a TMA gather4: the column (dimension 0) first, then the four rows (dimension 1), in the
// .tile::gather4 mode of cp.async.bulk.tensor; completes on full[stage] like a tma_load.
// CHECK-LABEL: llvm.func @gather4
// CHECK-SAME: (%[[DESC:[^:]+]]: !llvm.ptr, %[[DST:[^:]+]]: !llvm.ptr<3>, %[[STAGE:[^:]+]]: i32, %[[COL:[^:]+]]: i32, %[[R0:[^:]+]]: i32, %[[R1:[^:]+]]: i32, %[[R2:[^:]+]]: i32, %[[R3:[^:]+]]: i32)
// CHECK: %[[FULL:.*]] = llvm.getelementptr
// CHECK: %[[DST7:.*]] = llvm.addrspacecast %[[DST]] : !llvm.ptr<3> to !llvm.ptr<7>
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[DST7]], %[[DESC]], %[[FULL]], box[%[[COL]], %[[R0]], %[[R1]], %[[R2]], %[[R3]]] {mode = #nvvm.tma_load_mode<tile_gather4>}
// CHECK-NOT: fa4.tma_gather4
// CHECK: llvm.return
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @gather4(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %col: i32, %r0: i32, %r1: i32, %r2: i32, %r3: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 0 : i64} : () -> ()
      "fa4.tma_gather4"(%desc, %dst, %stage, %col, %r0, %r1, %r2, %r3) {pipe = "kv_pipe", box = array<i64: 64, 1>, elem_bytes = 2 : i64}
          : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32, i32, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// The gather4 descriptor's box is one row high (PTX ISA 5.5.3.4).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @gather4_box_of_four_rows(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %col: i32, %r: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 0 : i64} : () -> ()
      // expected-error @+1 {{tma_gather4 with box [64, 4]; .tile::gather4 copies rows of a 2-D tensor whose descriptor box is [columns, 1]}}
      "fa4.tma_gather4"(%desc, %dst, %stage, %col, %r, %r, %r, %r) {pipe = "kv_pipe", box = array<i64: 64, 4>, elem_bytes = 2 : i64}
          : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32, i32, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// .tile::gather4 does not exist before sm_100 (PTX ISA 9.7.9.25).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @gather4_on_hopper(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %col: i32, %r: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 0 : i64} : () -> ()
      // expected-error @+1 {{tma_gather4 in a kernel for sm_90a; .tile::gather4 needs sm_100 or later}}
      "fa4.tma_gather4"(%desc, %dst, %stage, %col, %r, %r, %r, %r) {pipe = "kv_pipe", box = array<i64: 64, 1>, elem_bytes = 2 : i64}
          : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32, i32, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// cta_group = 2 (lower_tma note "pair loads"): the load completes on the pair leader's full[stage],
// mapa of the local barrier to rank %cluster_ctarank & ~1, passed as the !llvm.ptr<3> NVVM takes.
// CHECK-LABEL: llvm.func @pair_load
// CHECK: %[[FULL:.*]] = llvm.getelementptr
// CHECK: %[[RANK:.*]] = nvvm.read.ptx.sreg.cluster.ctarank : i32
// CHECK: %[[MASK:.*]] = arith.constant -2 : i32
// CHECK: %[[LEADER:.*]] = arith.andi %[[RANK]], %[[MASK]]
// CHECK: %[[REMOTE:.*]] = nvvm.mapa %[[FULL]], %[[LEADER]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: %[[BITS:.*]] = llvm.ptrtoint %[[REMOTE]] : !llvm.ptr<7> to i64
// CHECK: %[[BAR:.*]] = llvm.inttoptr %[[BITS]] : i64 to !llvm.ptr<3>
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %[[BAR]], box[%{{.*}}, %{{.*}}] {group = #nvvm.cta_group<cta_2>}
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global {{.*}}, %[[BAR2:.*]], box[{{.*}}] {group = #nvvm.cta_group<cta_2>, mode = #nvvm.tma_load_mode<tile_gather4>}
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @pair_load(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %col: i32, %r: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 0 : i64} : () -> ()
      "fa4.tma_load"(%desc, %dst, %stage, %col, %r) {pipe = "kv_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64,
                     cta_group = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
      "fa4.tma_gather4"(%desc, %dst, %stage, %col, %r, %r, %r, %r) {pipe = "kv_pipe", box = array<i64: 64, 1>,
                        elem_bytes = 2 : i64, cta_group = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32, i32, i32, i32) -> ()
      llvm.return
    }
  }
}

// -----

// .cta_group::2 exists on sm_100a only (PTX ISA 9.7.9.25).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @pair_load_on_hopper(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %stage: i32, %col: i32, %r: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 0 : i64} : () -> ()
      // expected-error @+1 {{fa4.tma_load with cta_group = 2 in a kernel for sm_90a; .cta_group::2 needs sm_100a}}
      "fa4.tma_load"(%desc, %dst, %stage, %col, %r) {pipe = "kv_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64,
                     cta_group = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
      llvm.return
    }
  }
}
