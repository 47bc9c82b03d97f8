// Every op of the fa4 op table (fa4mlir/dialect/ops.py) parses, verifies and prints back, and the
// printed form parses again (generic syntax; region ops end with gpu.yield).
// RUN: fa4mlir-opt %s | fa4mlir-opt | FileCheck %s
// Coverage: every op name of the table appears below.
// RUN: %PYTHON -c 'import sys; from fa4mlir.dialect import OPS; t = open(sys.argv[1]).read(); miss = [o.name for o in OPS if "\"fa4." + o.name + "\"(" not in t]; sys.exit("ops of the table missing from this test: " + str(miss) if miss else 0)' %s

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    // CHECK-LABEL: llvm.func @all_ops
    // CHECK-SAME: (%[[DESC:[^:]+]]: !llvm.ptr {{.*}}, %[[TMEM:[^:]+]]: i32)
    llvm.func @all_ops(%desc: !llvm.ptr {llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant, llvm.align = 64 : i64},
                       %tmem_addr: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>} {
      // CHECK: %[[SMEM:.*]] = "fa4.smem_buffer"() {align = 1024 : i64, bytes = 32768 : i64, sym_name = "a_smem"
      %a_smem = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 32768 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      // CHECK: "fa4.pipeline"() {consumer_arrivals = 2 : i64, consumers = ["mma", "epi"], num_stages = 4 : i64, producer = "load", producer_arrivals = 1 : i64, sym_name = "ab_pipe"
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 4 : i64, producer = "load", consumers = ["mma", "epi"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 2 : i64} : () -> ()
      // CHECK: "fa4.pipeline_init"() : () -> ()
      "fa4.pipeline_init"() : () -> ()
      // CHECK: %[[TID:.*]] = "fa4.thread_idx"() {dim = 0 : i64} : () -> i32
      %tid = "fa4.thread_idx"() {dim = 0 : i64} : () -> i32
      // CHECK: "fa4.block_idx"() {dim = 2 : i64} : () -> i32
      %bid = "fa4.block_idx"() {dim = 2 : i64} : () -> i32
      // CHECK: "fa4.grid_dim"() {dim = 0 : i64} : () -> i32
      %nctas = "fa4.grid_dim"() {dim = 0 : i64} : () -> i32
      // CHECK: %[[PRED:.*]] = "fa4.elect_one"() : () -> i1
      %pred = "fa4.elect_one"() : () -> i1
      // CHECK: %[[RANK:.*]] = "fa4.cluster_rank"() : () -> i32
      %rank = "fa4.cluster_rank"() : () -> i32
      // CHECK: "fa4.cluster_sync"() : () -> ()
      "fa4.cluster_sync"() : () -> ()
      // CHECK: %[[REMOTE:.*]] = "fa4.peer_address"(%[[SMEM]], %[[RANK]]) : (!llvm.ptr<3>, i32) -> !llvm.ptr<7>
      %remote = "fa4.peer_address"(%a_smem, %rank) : (!llvm.ptr<3>, i32) -> !llvm.ptr<7>
      // CHECK: "fa4.warp_roles"() ({
      "fa4.warp_roles"() ({
        // CHECK: "fa4.role"() ({
        "fa4.role"() ({
          // CHECK: "fa4.producer_acquire"(%[[TID]], %[[TID]]) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_acquire"(%tid, %tid) {pipe = "ab_pipe"} : (i32, i32) -> ()
          // CHECK: "fa4.producer_commit"(%[[TID]]) {pipe = "ab_pipe", tx_bytes = 49152 : i64} : (i32) -> ()
          "fa4.producer_commit"(%tid) {pipe = "ab_pipe", tx_bytes = 49152 : i64} : (i32) -> ()
          // CHECK: "fa4.tma_load"(%[[DESC]], %[[SMEM]], %[[TID]], %[[TID]], %[[TID]]) {box = array<i64: 64, 128>, elem_bytes = 2 : i64, pipe = "ab_pipe"} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          "fa4.tma_load"(%desc, %a_smem, %tid, %tid, %tid) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64}
              : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          // CHECK: "fa4.tma_gather4"(%[[DESC]], %[[SMEM]], %[[TID]], %[[TID]], %[[TID]], %[[TID]], %[[TID]], %[[TID]]) {box = array<i64: 64, 1>, elem_bytes = 2 : i64, pipe = "ab_pipe"} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32, i32, i32, i32) -> ()
          "fa4.tma_gather4"(%desc, %a_smem, %tid, %tid, %tid, %tid, %tid, %tid) {pipe = "ab_pipe", box = array<i64: 64, 1>, elem_bytes = 2 : i64}
              : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32, i32, i32, i32) -> ()
          // CHECK: "fa4.tma_prefetch"(%[[DESC]]) : (!llvm.ptr) -> ()
          "fa4.tma_prefetch"(%desc) : (!llvm.ptr) -> ()
          // CHECK: "fa4.tma_prefetch_box"(%[[DESC]], %[[TID]], %[[TID]]) : (!llvm.ptr, i32, i32) -> ()
          "fa4.tma_prefetch_box"(%desc, %tid, %tid) : (!llvm.ptr, i32, i32) -> ()
          // CHECK: "fa4.cp_async"(%[[DESC]], %[[SMEM]], %{{.*}}) : (!llvm.ptr, !llvm.ptr<3>, i1) -> ()
          %copy_ok = arith.constant true
          "fa4.cp_async"(%desc, %a_smem, %copy_ok) : (!llvm.ptr, !llvm.ptr<3>, i1) -> ()
          // CHECK: "fa4.cp_async_arrive"(%[[TID]]) {pipe = "ab_pipe"} : (i32) -> ()
          "fa4.cp_async_arrive"(%tid) {pipe = "ab_pipe"} : (i32) -> ()
          // CHECK: "fa4.cp_async_commit"() : () -> ()
          "fa4.cp_async_commit"() : () -> ()
          // CHECK: "fa4.cp_async_wait"() {pending = 1 : i64} : () -> ()
          "fa4.cp_async_wait"() {pending = 1 : i64} : () -> ()
          // CHECK: "fa4.ld_global_nc"(%{{.*}}) {l1_evict = "evict_last", l2_prefetch = 256 : i64} : (!llvm.ptr<1>) -> vector<4xi32>
          %gptr = llvm.mlir.zero : !llvm.ptr<1>
          %piece = "fa4.ld_global_nc"(%gptr) {l1_evict = "evict_last", l2_prefetch = 256 : i64} : (!llvm.ptr<1>) -> vector<4xi32>
          // CHECK: gpu.yield
          gpu.yield
        // CHECK: }) {first_warp = 0 : i64, name = "load", num_warps = 1 : i64, regs = 40 : i64} : () -> ()
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 40 : i64} : () -> ()
        // CHECK: "fa4.role"() ({
        "fa4.role"() ({
          // CHECK: "fa4.consumer_wait"(%[[TID]], %[[TID]]) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_wait"(%tid, %tid) {pipe = "ab_pipe"} : (i32, i32) -> ()
          // CHECK: %[[D:.*]] = "fa4.smem_desc"(%[[SMEM]]) {lbo = 16 : i64, sbo = 1024 : i64, swizzle = 128 : i64} : (!llvm.ptr<3>) -> i64
          %d = "fa4.smem_desc"(%a_smem) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
          %acc0 = arith.constant dense<0.0> : vector<4xf32>
          %true = arith.constant true
          // CHECK: "fa4.mma_fence"() : () -> ()
          "fa4.mma_fence"() : () -> ()
          // CHECK: %[[ACC:.*]] = "fa4.mma"(%[[D]], %[[D]], %{{.*}}, %{{.*}}) {a_source = "smem", ab_dtype = "bf16", acc_dtype = "f32", k = 16 : i64, m = 64 : i64, n = 8 : i64} : (i64, i64, i1, vector<4xf32>) -> vector<4xf32>
          %acc1 = "fa4.mma"(%d, %d, %true, %acc0) {m = 64 : i64, n = 8 : i64, k = 16 : i64, a_source = "smem",
                                                   ab_dtype = "bf16", acc_dtype = "f32"}
              : (i64, i64, i1, vector<4xf32>) -> vector<4xf32>
          // A from registers (packed 16-bit pairs) times an MN-major B: the optional b_major prints back.
          %p = arith.constant dense<0> : vector<4xi32>
          // CHECK: "fa4.mma"(%{{.*}}, %[[D]], %{{.*}}, %[[ACC]]) {a_source = "regs", ab_dtype = "bf16", acc_dtype = "f32", b_major = "mn", k = 16 : i64, m = 64 : i64, n = 8 : i64} : (vector<4xi32>, i64, i1, vector<4xf32>) -> vector<4xf32>
          %acc1b = "fa4.mma"(%p, %d, %true, %acc1) {m = 64 : i64, n = 8 : i64, k = 16 : i64, a_source = "regs",
                                                    ab_dtype = "bf16", acc_dtype = "f32", b_major = "mn"}
              : (vector<4xi32>, i64, i1, vector<4xf32>) -> vector<4xf32>
          // CHECK: "fa4.mma_commit_group"() : () -> ()
          "fa4.mma_commit_group"() : () -> ()
          // CHECK: "fa4.mma_wait_group"(%[[ACC]]) {pending = 0 : i64} : (vector<4xf32>) -> vector<4xf32>
          %acc2 = "fa4.mma_wait_group"(%acc1) {pending = 0 : i64} : (vector<4xf32>) -> vector<4xf32>
          // CHECK: "fa4.mma_commit"(%[[TID]]) {pipe = "ab_pipe", side = "empty"} : (i32) -> ()
          "fa4.mma_commit"(%tid) {pipe = "ab_pipe", side = "empty"} : (i32) -> ()
          // CHECK: "fa4.consumer_release"(%[[TID]]) {pipe = "ab_pipe"} : (i32) -> ()
          "fa4.consumer_release"(%tid) {pipe = "ab_pipe"} : (i32) -> ()
          // CHECK: "fa4.peer_arrive"(%[[TID]], %[[RANK]]) {pipe = "ab_pipe", side = "full"} : (i32, i32) -> ()
          "fa4.peer_arrive"(%tid, %rank) {pipe = "ab_pipe", side = "full"} : (i32, i32) -> ()
          // CHECK: "fa4.peer_store_async"(%[[TID]], %[[REMOTE]], %[[TID]], %[[RANK]]) {pipe = "ab_pipe"} : (i32, !llvm.ptr<7>, i32, i32) -> ()
          "fa4.peer_store_async"(%tid, %remote, %tid, %rank) {pipe = "ab_pipe"} : (i32, !llvm.ptr<7>, i32, i32) -> ()
          // CHECK: "fa4.mma_commit"(%[[TID]]) {cta_group = 2 : i64, multicast = 3 : i64, pipe = "ab_pipe", side = "full"} : (i32) -> ()
          "fa4.mma_commit"(%tid) {pipe = "ab_pipe", side = "full", cta_group = 2 : i64, multicast = 3 : i64} : (i32) -> ()
          // CHECK: "fa4.tma_store"(%[[DESC]], %[[SMEM]], %[[TID]], %[[TID]]) {box = array<i64: 64, 128>} : (!llvm.ptr, !llvm.ptr<3>, i32, i32) -> ()
          "fa4.tma_store"(%desc, %a_smem, %tid, %tid) {box = array<i64: 64, 128>} : (!llvm.ptr, !llvm.ptr<3>, i32, i32) -> ()
          // CHECK: "fa4.tma_store_wait"() {pending = 0 : i64} : () -> ()
          "fa4.tma_store_wait"() {pending = 0 : i64} : () -> ()
          // CHECK: gpu.yield
          gpu.yield
        // CHECK: }) {first_warp = 4 : i64, name = "mma", num_warps = 8 : i64, regs = 232 : i64} : () -> ()
        }) {name = "mma", first_warp = 4 : i64, num_warps = 8 : i64, regs = 232 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      // CHECK: "fa4.tmem_alloc"(%[[SMEM]]) {cols = 256 : i64} : (!llvm.ptr<3>) -> ()
      "fa4.tmem_alloc"(%a_smem) {cols = 256 : i64} : (!llvm.ptr<3>) -> ()
      // CHECK: "fa4.tmem_relinquish"() : () -> ()
      "fa4.tmem_relinquish"() : () -> ()
      // CHECK: %[[V:.*]] = "fa4.tmem_load"(%[[TMEM]]) {num = 8 : i64} : (i32) -> vector<8xi32>
      %v = "fa4.tmem_load"(%tmem_addr) {num = 8 : i64} : (i32) -> vector<8xi32>
      // CHECK: "fa4.tmem_wait"() {kind = "ld"} : () -> ()
      "fa4.tmem_wait"() {kind = "ld"} : () -> ()
      // CHECK: "fa4.tmem_store"(%[[TMEM]], %[[V]]) : (i32, vector<8xi32>) -> ()
      "fa4.tmem_store"(%tmem_addr, %v) : (i32, vector<8xi32>) -> ()
      // CHECK: %[[CD:.*]] = "fa4.smem_desc"(%[[SMEM]])
      %cd = "fa4.smem_desc"(%a_smem) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      // CHECK: "fa4.tmem_copy"(%[[TMEM]], %[[CD]]) {multicast = "warpx2::02_13", shape = "64x128b"} : (i32, i64) -> ()
      "fa4.tmem_copy"(%tmem_addr, %cd) {shape = "64x128b", multicast = "warpx2::02_13"} : (i32, i64) -> ()
      // CHECK: "fa4.tmem_dealloc"(%[[TMEM]]) {cols = 256 : i64} : (i32) -> ()
      "fa4.tmem_dealloc"(%tmem_addr) {cols = 256 : i64} : (i32) -> ()
      // CHECK: "fa4.named_barrier"() {id = 1 : i64, num_threads = 256 : i64} : () -> ()
      "fa4.named_barrier"() {id = 1 : i64, num_threads = 256 : i64} : () -> ()
      // CHECK: "fa4.named_barrier_arrive"() {id = 2 : i64, num_threads = 256 : i64} : () -> ()
      "fa4.named_barrier_arrive"() {id = 2 : i64, num_threads = 256 : i64} : () -> ()
      // CHECK: "fa4.named_barrier"(%[[TID]]) {id = 4 : i64, num_threads = 128 : i64, span = 3 : i64} : (i32) -> ()
      "fa4.named_barrier"(%tid) {id = 4 : i64, num_threads = 128 : i64, span = 3 : i64} : (i32) -> ()
      // CHECK: "fa4.named_barrier_arrive"(%[[TID]]) {id = 1 : i64, num_threads = 256 : i64, span = 2 : i64} : (i32) -> ()
      "fa4.named_barrier_arrive"(%tid) {id = 1 : i64, num_threads = 256 : i64, span = 2 : i64} : (i32) -> ()
      // CHECK: "fa4.shuffle_xor"(%[[TID]]) {offset = 16 : i64} : (i32) -> i32
      %partner_tid = "fa4.shuffle_xor"(%tid) {offset = 16 : i64} : (i32) -> i32
      // CHECK: "fa4.shuffle_idx"(%[[TID]]) {lane = 0 : i64} : (i32) -> i32
      %lane0_tid = "fa4.shuffle_idx"(%tid) {lane = 0 : i64} : (i32) -> i32
      // CHECK: %{{.*}} = "fa4.vote_any"(%[[PRED]]) : (i1) -> i1
      %anyone = "fa4.vote_any"(%pred) : (i1) -> i1
      // CHECK: "fa4.scale_if_uniform"(%{{.*}}, %[[V2:.*]], %[[V2]]) : (i1, vector<2xf32>, vector<2xf32>) -> vector<2xf32>
      %v2 = arith.constant dense<[1.5, 2.0]> : vector<2xf32>
      %scaled = "fa4.scale_if_uniform"(%anyone, %v2, %v2) : (i1, vector<2xf32>, vector<2xf32>) -> vector<2xf32>
      // CHECK: "fa4.fence"() {kind = "async_smem"} : () -> ()
      "fa4.fence"() {kind = "async_smem"} : () -> ()
      // CHECK: "fa4.sync_threads"() : () -> ()
      "fa4.sync_threads"() : () -> ()
      // CHECK: "fa4.cvt_e4m3x2"(%{{.*}}) : (i16) -> i32
      %codes = arith.constant 14392 : i16
      %f16x2 = "fa4.cvt_e4m3x2"(%codes) : (i16) -> i32
      // CHECK: "fa4.tanh_f16x2"(%{{.*}}) : (i32) -> i32
      %tanh2 = "fa4.tanh_f16x2"(%f16x2) : (i32) -> i32
      // CHECK: "fa4.prmt"(%[[TID]], %[[TID]]) {selector = 37248 : i64} : (i32, i32) -> i32
      %lanes = "fa4.prmt"(%tid, %tid) {selector = 37248 : i64} : (i32, i32) -> i32
      // CHECK: "fa4.trap_if"(%[[PRED]]) : (i1) -> ()
      "fa4.trap_if"(%pred) : (i1) -> ()
      llvm.return
    }
  }
}
