// fa4-verify-pipelines: roles exist, protocol ops sit in the right role, acquire/commit and
// wait/release balance on every path, expect-tx bytes match the TMA boxes and the boxes their
// descriptors, arrival counts match the arriving threads, stages are in range and wrap at num_stages
// with a phase flip, each use of a ring is at the next position (initial phases), and consumers
// wait as often as the producer commits. Errors name pipeline, role and op.
// RUN: fa4mlir-opt %s --pass-pipeline=fa4-verify-pipelines --split-input-file --verify-diagnostics | FileCheck %s

// A correct producer/consumer pair: one elected producer thread, one leader per consumer warpgroup.
// CHECK-LABEL: llvm.func @correct
// CHECK: "fa4.producer_commit"{{.*}}tx_bytes = 16384
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @correct(%desc: !llvm.ptr, %n: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      %buf = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 32768 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %c2 = arith.constant 2 : i32
          %e = "fa4.elect_one"() : () -> i1
          scf.if %e {
            %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%s = %c0, %p = %c0) -> (i32, i32) : i32 {
              "fa4.producer_acquire"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
              "fa4.producer_commit"(%s) {pipe = "ab_pipe", tx_bytes = 16384 : i64} : (i32) -> ()
              "fa4.tma_load"(%desc, %buf, %s, %i, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
              %s1 = arith.addi %s, %c1 : i32
              %w = arith.cmpi eq, %s1, %c2 : i32
              %sn = arith.select %w, %c0, %s1 : i32
              %pf = arith.xori %p, %c1 : i32
              %pn = arith.select %w, %pf, %p : i32
              scf.yield %sn, %pn : i32, i32
            }
          }
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %c2 = arith.constant 2 : i32
          %c128 = arith.constant 128 : i32
          %tid = "fa4.thread_idx"() {dim = 0 : i64} : () -> i32
          %lane = arith.remui %tid, %c128 : i32
          %leader = arith.cmpi eq, %lane, %c0 : i32
          %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%s = %c0, %p = %c0) -> (i32, i32) : i32 {
            "fa4.consumer_wait"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            scf.if %leader {
              "fa4.consumer_release"(%s) {pipe = "ab_pipe"} : (i32) -> ()
            }
            %s1 = arith.addi %s, %c1 : i32
            %w = arith.cmpi eq, %s1, %c2 : i32
            %sn = arith.select %w, %c0, %s1 : i32
            %pf = arith.xori %p, %c1 : i32
            %pn = arith.select %w, %pf, %p : i32
            scf.yield %sn, %pn : i32, i32
          }
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
    llvm.func @no_consumer() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{pipeline 'ab_pipe' has no consumer role}}
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = [],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @missing_producer_role() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{pipeline 'ab_pipe': producer role 'tma' is not a declared fa4.role}}
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "tma", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          gpu.yield
        }) {name = "mma", first_warp = 0 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @wait_in_wrong_role() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 1 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          // expected-error @+1 {{a wait (fa4.consumer_wait) on pipeline 'ab_pipe' is in the wrong role: role 'load'}}
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
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
    llvm.func @missing_release() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 1 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          // expected-error @+1 {{pipeline 'ab_pipe', role 'mma': in the role body outside loops there are 2 wait(s) but 1 release(s)}}
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A tma_gather4 delivers four rows of its one-row box: a commit announcing one row is short.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @gather4_tx_bytes(%desc: !llvm.ptr, %buf: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "kv_pipe", num_stages = 1 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "kv_pipe"} : (i32, i32) -> ()
          // expected-error @+1 {{expects tx_bytes = 128, but the 1 tma_load(s) of its fill deliver 512 bytes (4 x 64x1x2B)}}
          "fa4.producer_commit"(%c0) {pipe = "kv_pipe", tx_bytes = 128 : i64} : (i32) -> ()
          "fa4.tma_gather4"(%desc, %buf, %c0, %c0, %c0, %c0, %c0, %c0) {pipe = "kv_pipe", box = array<i64: 64, 1>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "kv_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "kv_pipe"} : (i32) -> ()
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
    llvm.func @wrong_tx_bytes(%desc: !llvm.ptr, %buf: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 1 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          // expected-error @+1 {{expects tx_bytes = 8192, but the 1 tma_load(s) of its fill deliver 16384 bytes}}
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 8192 : i64} : (i32) -> ()
          "fa4.tma_load"(%desc, %buf, %c0, %c0, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
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
    llvm.func @consumer_count() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 1 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 1 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          // expected-error @+1 {{pipeline 'ab_pipe': consumer_arrivals = 1, but 128 thread(s) arrive on empty[stage] per stage}}
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
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
    llvm.func @phase_not_flipped(%n: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %c2 = arith.constant 2 : i32
          %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%s = %c0, %p = %c0) -> (i32, i32) : i32 {
            "fa4.producer_acquire"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            "fa4.producer_commit"(%s) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
            %s1 = arith.addi %s, %c1 : i32
            %w = arith.cmpi eq, %s1, %c2 : i32
            %sn = arith.select %w, %c0, %s1 : i32
            // expected-error @+1 {{pipeline 'ab_pipe', role 'load': a phase not flipped at wrap-around}}
            %pn = arith.select %w, %p, %p : i32
            scf.yield %sn, %pn : i32, i32
          }
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
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
    llvm.func @stage_count(%n: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 3 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %c2 = arith.constant 2 : i32
          %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%s = %c0, %p = %c0) -> (i32, i32) : i32 {
            "fa4.producer_acquire"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            "fa4.producer_commit"(%s) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
            %s1 = arith.addi %s, %c1 : i32
            // expected-error @+1 {{wraps at 2 (arith.cmpi eq, stage + 1, 2) but the pipeline has num_stages = 3}}
            %w = arith.cmpi eq, %s1, %c2 : i32
            %sn = arith.select %w, %c0, %s1 : i32
            %pf = arith.xori %p, %c1 : i32
            %pn = arith.select %w, %pf, %p : i32
            scf.yield %sn, %pn : i32, i32
          }
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A commit before a loop that commits on the same pipe: the loop's loads belong to the loop's own
// commits (the attention producer loads K_0, then K_{j+1} and V_j in a loop).
// CHECK-LABEL: llvm.func @commit_then_loop
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @commit_then_loop(%desc: !llvm.ptr, %n: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      %buf = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 32768 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 16384 : i64} : (i32) -> ()
          "fa4.tma_load"(%desc, %buf, %c0, %c0, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          scf.for %i = %c1 to %n step %c1 : i32 {
            %s = arith.andi %i, %c1 : i32
            %p = arith.shrui %i, %c1 : i32
            "fa4.producer_acquire"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            "fa4.producer_commit"(%s) {pipe = "ab_pipe", tx_bytes = 16384 : i64} : (i32) -> ()
            "fa4.tma_load"(%desc, %buf, %s, %i, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          }
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// ... but a load after that loop is no longer covered by the commit before it.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @load_after_committing_loop(%desc: !llvm.ptr, %n: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      %buf = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 32768 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 16384 : i64} : (i32) -> ()
          "fa4.tma_load"(%desc, %buf, %c0, %c0, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          scf.for %i = %c1 to %n step %c1 : i32 {
            %s = arith.andi %i, %c1 : i32
            %p = arith.shrui %i, %c1 : i32
            "fa4.producer_acquire"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            "fa4.producer_commit"(%s) {pipe = "ab_pipe", tx_bytes = 16384 : i64} : (i32) -> ()
            "fa4.tma_load"(%desc, %buf, %s, %i, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          }
          // expected-error @+1 {{tma_load on stage 0 has no producer_commit in its fill}}
          "fa4.tma_load"(%desc, %buf, %c0, %n, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// Correct programs: the copies issued before arrive.expect_tx on their barrier (legal: the
// transaction count may go negative until the expect), one release in each branch of a
// data-dependent if/else, and a release leader elected as tid % 128 < 1.
// CHECK-LABEL: llvm.func @accepted
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @accepted(%desc: !llvm.ptr {fa4.tma = {name = "a_desc", box = array<i64: 64, 128>, elem_bytes = 2 : i64}},
                        %n: i32, %x: f32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      %buf = "fa4.smem_buffer"() {sym_name = "a_smem", bytes = 32768 : i64, align = 1024 : i64} : () -> !llvm.ptr<3>
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %c2 = arith.constant 2 : i32
          %e = "fa4.elect_one"() : () -> i1
          scf.if %e {
            %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%s = %c0, %p = %c0) -> (i32, i32) : i32 {
              "fa4.producer_acquire"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
              "fa4.tma_load"(%desc, %buf, %s, %i, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
              "fa4.producer_commit"(%s) {pipe = "ab_pipe", tx_bytes = 16384 : i64} : (i32) -> ()
              %s1 = arith.addi %s, %c1 : i32
              %w = arith.cmpi eq, %s1, %c2 : i32
              %sn = arith.select %w, %c0, %s1 : i32
              %pf = arith.xori %p, %c1 : i32
              %pn = arith.select %w, %pf, %p : i32
              scf.yield %sn, %pn : i32, i32
            }
          }
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %c2 = arith.constant 2 : i32
          %c128 = arith.constant 128 : i32
          %z = arith.constant 0.0 : f32
          %tid = "fa4.thread_idx"() {dim = 0 : i64} : () -> i32
          %lane = arith.remui %tid, %c128 : i32
          %leader = arith.cmpi ult, %lane, %c1 : i32
          %big = arith.cmpf ogt, %x, %z : f32
          %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%s = %c0, %p = %c0) -> (i32, i32) : i32 {
            "fa4.consumer_wait"(%s, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            scf.if %leader {
              scf.if %big {
                "fa4.consumer_release"(%s) {pipe = "ab_pipe"} : (i32) -> ()
              } else {
                "fa4.consumer_release"(%s) {pipe = "ab_pipe"} : (i32) -> ()
              }
            }
            %s1 = arith.addi %s, %c1 : i32
            %w = arith.cmpi eq, %s1, %c2 : i32
            %sn = arith.select %w, %c0, %s1 : i32
            %pf = arith.xori %p, %c1 : i32
            %pn = arith.select %w, %pf, %p : i32
            scf.yield %sn, %pn : i32, i32
          }
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A tma_load whose box disagrees with the box its descriptor was declared with.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @descriptor_box(%desc: !llvm.ptr {fa4.tma = {name = "a_desc", box = array<i64: 64, 64>, elem_bytes = 2 : i64}},
                              %buf: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 1 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 16384 : i64} : (i32) -> ()
          // expected-error @+1 {{tma_load copies a 64x128 box of 2-byte elements (16384 bytes), but its descriptor 'a_desc' was declared with a 64x64 box}}
          "fa4.tma_load"(%desc, %buf, %c0, %c0, %c0) {pipe = "ab_pipe", box = array<i64: 64, 128>, elem_bytes = 2 : i64} : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A constant stage N in an N-stage ring: full[2] is the mbarrier of empty[0].
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @stage_out_of_range() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          // expected-error @+1 {{pipeline 'ab_pipe', role 'mma': stage 2 is out of range: the pipeline has num_stages = 2}}
          %c2 = arith.constant 2 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c2) {pipe = "ab_pipe"} : (i32) -> ()
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A consumer that starts at phase 1: its first wait passes on the fresh barrier.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @consumer_initial_phase() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 2 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          // expected-error @+1 {{wrong initial phase: a consumer starts at phase 0}}
          "fa4.consumer_wait"(%c0, %c1) {pipe = "ab_pipe"} : (i32, i32) -> ()
          "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A consumer loop one trip longer than the producer's: its last wait never completes.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @extra_consumer_iteration(%n: i32) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 1 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 32 : i64, consumer_arrivals = 128 : i64} : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %r = scf.for %i = %c0 to %n step %c1 iter_args(%p = %c0) -> (i32) : i32 {
            "fa4.producer_acquire"(%c0, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            "fa4.producer_commit"(%c0) {pipe = "ab_pipe", tx_bytes = 0 : i64} : (i32) -> ()
            %pn = arith.xori %p, %c1 : i32
            scf.yield %pn : i32
          }
          gpu.yield
        }) {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          %m = arith.addi %n, %c1 : i32
          %r = scf.for %i = %c0 to %m step %c1 iter_args(%p = %c0) -> (i32) : i32 {
            // expected-error @+1 {{role 'mma' uses the ring 1 more time(s) than role 'load', so its last wait(s) never complete (deadlock)}}
            "fa4.consumer_wait"(%c0, %p) {pipe = "ab_pipe"} : (i32, i32) -> ()
            "fa4.consumer_release"(%c0) {pipe = "ab_pipe"} : (i32) -> ()
            %pn = arith.xori %p, %c1 : i32
            scf.yield %pn : i32
          }
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A CTA pair (note "CTA pair"): the leader (rank 0) acquires `d` and commits it to both CTAs
// (multicast 0b11); each CTA's epilogue waits on its own `d` and releases on the leader's (the peer
// through peer_arrive), so the leader's empty barrier counts 256 arrivals.
// CHECK-LABEL: llvm.func @pair
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @pair() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 160, 1, 1>} {
      "fa4.pipeline"() {sym_name = "d", num_stages = 1 : i64, producer = "mma", consumers = ["epi"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 256 : i64} : () -> ()
      %rank = "fa4.cluster_rank"() : () -> i32
      "fa4.pipeline_init"() : () -> ()
      "fa4.cluster_sync"() : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %lead = arith.cmpi eq, %rank, %c0 : i32
          %e = "fa4.elect_one"() : () -> i1
          %go = arith.andi %lead, %e : i1
          scf.if %go {
            "fa4.producer_acquire"(%c0, %c0) {pipe = "d"} : (i32, i32) -> ()
            "fa4.mma_commit"(%c0) {pipe = "d", side = "full", cta_group = 2 : i64, multicast = 3 : i64} : (i32) -> ()
          }
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          "fa4.consumer_wait"(%c0, %c0) {pipe = "d"} : (i32, i32) -> ()
          %r0 = arith.cmpi eq, %rank, %c0 : i32
          scf.if %r0 {
            "fa4.consumer_release"(%c0) {pipe = "d"} : (i32) -> ()
          }
          %r1 = arith.cmpi eq, %rank, %c1 : i32
          scf.if %r1 {
            "fa4.peer_arrive"(%c0, %c0) {pipe = "d", side = "empty"} : (i32, i32) -> ()
          }
          gpu.yield
        }) {name = "epi", first_warp = 0 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// The same pair with the commit reaching the leader only (multicast 0b01): the peer's wait never completes.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @pair_unicast() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 160, 1, 1>} {
      "fa4.pipeline"() {sym_name = "d", num_stages = 1 : i64, producer = "mma", consumers = ["epi"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 256 : i64} : () -> ()
      %rank = "fa4.cluster_rank"() : () -> i32
      "fa4.pipeline_init"() : () -> ()
      "fa4.cluster_sync"() : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %lead = arith.cmpi eq, %rank, %c0 : i32
          %e = "fa4.elect_one"() : () -> i1
          %go = arith.andi %lead, %e : i1
          scf.if %go {
            "fa4.producer_acquire"(%c0, %c0) {pipe = "d"} : (i32, i32) -> ()
            "fa4.mma_commit"(%c0) {pipe = "d", side = "full", cta_group = 2 : i64, multicast = 1 : i64} : (i32) -> ()
          }
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          // expected-error @+1 {{(CTA rank 1's target view of the pair) pipeline 'd': role 'epi' waits on full[stage 0] but the producer role 'mma' never commits}}
          "fa4.consumer_wait"(%c0, %c0) {pipe = "d"} : (i32, i32) -> ()
          %r0 = arith.cmpi eq, %rank, %c0 : i32
          scf.if %r0 {
            "fa4.consumer_release"(%c0) {pipe = "d"} : (i32) -> ()
          }
          %r1 = arith.cmpi eq, %rank, %c1 : i32
          scf.if %r1 {
            "fa4.peer_arrive"(%c0, %c0) {pipe = "d", side = "empty"} : (i32, i32) -> ()
          }
          gpu.yield
        }) {name = "epi", first_warp = 0 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}

// -----

// A gathered pipeline (passes/_cluster_view.py note "Gathered pipelines", FlashMLA's p_free): both CTAs'
// softmax threads arrive on the leader's `p` full (the peer through peer_arrive), the leader waits and
// releases `p` in both CTAs by a multicast commit: its wait stays in rank 1's executor view.
// CHECK-LABEL: llvm.func @gathered
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @gathered() attributes {nvvm.kernel, nvvm.maxntid = array<i32: 160, 1, 1>} {
      "fa4.pipeline"() {sym_name = "p", num_stages = 1 : i64, producer = "sm", consumers = ["mma"],
                        producer_arrivals = 256 : i64, consumer_arrivals = 1 : i64} : () -> ()
      %rank = "fa4.cluster_rank"() : () -> i32
      "fa4.pipeline_init"() : () -> ()
      "fa4.cluster_sync"() : () -> ()
      "fa4.warp_roles"() ({
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %lead = arith.cmpi eq, %rank, %c0 : i32
          %e = "fa4.elect_one"() : () -> i1
          %go = arith.andi %lead, %e : i1
          scf.if %go {
            "fa4.consumer_wait"(%c0, %c0) {pipe = "p"} : (i32, i32) -> ()
            "fa4.mma_commit"(%c0) {pipe = "p", side = "empty", cta_group = 2 : i64, multicast = 3 : i64} : (i32) -> ()
          }
          gpu.yield
        }) {name = "mma", first_warp = 4 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
        "fa4.role"() ({
          %c0 = arith.constant 0 : i32
          %c1 = arith.constant 1 : i32
          "fa4.producer_acquire"(%c0, %c0) {pipe = "p"} : (i32, i32) -> ()
          %r0 = arith.cmpi eq, %rank, %c0 : i32
          scf.if %r0 {
            "fa4.producer_commit"(%c0) {pipe = "p", tx_bytes = 0 : i64} : (i32) -> ()
          }
          %r1 = arith.cmpi eq, %rank, %c1 : i32
          scf.if %r1 {
            "fa4.peer_arrive"(%c0, %c0) {pipe = "p", side = "full"} : (i32, i32) -> ()
          }
          gpu.yield
        }) {name = "sm", first_warp = 0 : i64, num_warps = 4 : i64, regs = 0 : i64} : () -> ()
        gpu.yield
      }) : () -> ()
      llvm.return
    }
  }
}
