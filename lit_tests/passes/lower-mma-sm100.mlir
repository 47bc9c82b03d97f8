// fa4-lower-mma-sm100: smem_desc -> tcgen05 shared memory descriptor (PTX ISA 9.1 §9.7.16.4.1),
// mma -> tcgen05.mma cta_group::1 kind::f16 with the instruction descriptor of §9.7.16.4.2,
// mma_commit -> tcgen05.commit on the pipeline's mbarrier (§9.7.16.11.1).
// RUN: fa4mlir-opt %s --split-input-file --verify-diagnostics --pass-pipeline=fa4-lower-mma-sm100 | FileCheck %s

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    // CHECK-LABEL: llvm.func @mma_ops
    // CHECK-SAME: (%[[A:[^:]+]]: !llvm.ptr<3>, %[[B:[^:]+]]: !llvm.ptr<3>, %[[ACC:[^:]+]]: i32, %[[ATM:[^:]+]]: i32, %[[FLAG:[^:]+]]: i1, %[[STAGE:[^:]+]]: i32)
    llvm.func @mma_ops(%a: !llvm.ptr<3>, %b: !llvm.ptr<3>, %acc: i32, %a_tmem: i32, %accumulate: i1, %stage: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} {
      "fa4.pipeline"() {sym_name = "ab_pipe", num_stages = 4 : i64, producer = "load", consumers = ["mma"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 1 : i64, offset = 1024 : i64} : () -> ()
      // Descriptor: start >> 4 (bits 0-13) | LBO 16 >> 4 = 1 at bit 16 | SBO 1024 >> 4 = 64 at bit 32
      // | version 0b001 at bit 46 | swizzle 128B = 2 at bits 61-63  ==  0x4000404000010000.
      // CHECK: %[[AI:.*]] = llvm.ptrtoint %[[A]] : !llvm.ptr<3> to i64
      // CHECK: %[[AS:.*]] = arith.shrui %[[AI]]
      // CHECK: %[[AM:.*]] = arith.andi %[[AS]], %{{.*}}
      // CHECK: %[[F:.*]] = arith.constant 4611756662049538048 : i64
      // CHECK: %[[AO:.*]] = arith.ori %[[AM]], %[[F]] : i64
      // Rematerialised where used (note "issuer registers"): an empty volatile asm LLVM cannot hoist.
      // CHECK: %[[AD:.*]] = llvm.inline_asm has_side_effects "", "=l,0" %[[AO]] : (i64) -> i64
      %ad = "fa4.smem_desc"(%a) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      // CHECK: %[[BD:.*]] = llvm.inline_asm has_side_effects "", "=l,0" %{{.*}} : (i64) -> i64
      %bd = "fa4.smem_desc"(%b) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      // bf16 x bf16 -> f32, K-major A and B, N = 256, M = 128: 0x08400490 = 138413200.
      // CHECK: %[[D:.*]] = llvm.inttoptr %[[ACC]] : i32 to !llvm.ptr<6>
      // CHECK: %[[ID:.*]] = arith.constant 138413200 : i32
      // CHECK: nvvm.tcgen05.mma %[[D]], %[[AD]], %[[BD]], %[[ID]], %[[FLAG]] {ctaGroup = #nvvm.cta_group<cta_1>, kind = #nvvm.tcgen05_mma_kind<f16>}
      "fa4.mma"(%ad, %bd, %accumulate, %acc) {m = 128 : i64, n = 256 : i64, k = 16 : i64, a_source = "smem",
                                              ab_dtype = "bf16", acc_dtype = "f32"} : (i64, i64, i1, i32) -> ()
      // A from TMEM: f16 x f16 -> f32, M = 64, N = 64: 0x04100010 = 68157456.
      // CHECK: %[[AT:.*]] = llvm.inttoptr %[[ATM]] : i32 to !llvm.ptr<6>
      // CHECK: %[[ID2:.*]] = arith.constant 68157456 : i32
      // CHECK: nvvm.tcgen05.mma %{{.*}}, %[[AT]], %[[BD]], %[[ID2]], %[[FLAG]]
      "fa4.mma"(%a_tmem, %bd, %accumulate, %acc) {m = 64 : i64, n = 64 : i64, k = 16 : i64, a_source = "tmem",
                                                  ab_dtype = "f16", acc_dtype = "f32"} : (i32, i64, i1, i32) -> ()
      // empty[stage] of ab_pipe = fa4_smem + 1024 + 4 * 8 + 8 * stage.
      // CHECK: %[[MUL:.*]] = arith.muli %[[STAGE]], %{{.*}} : i32
      // CHECK: %[[OFF:.*]] = arith.constant 1056 : i32
      // CHECK: %[[SUM:.*]] = arith.addi %[[MUL]], %[[OFF]] : i32
      // CHECK: %[[BASE:.*]] = llvm.mlir.addressof @fa4_smem
      // CHECK: %[[BAR:.*]] = llvm.getelementptr %[[BASE]][%[[SUM]]]
      // CHECK: nvvm.tcgen05.commit %[[BAR]] : !llvm.ptr<3>
      "fa4.mma_commit"(%stage) {pipe = "ab_pipe", side = "empty"} : (i32) -> ()
      // CHECK-NOT: fa4.mma
      // CHECK-NOT: fa4.smem_desc
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @bad_n(%ad: i64, %bd: i64, %acc: i32, %accumulate: i1) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{M=128 takes N a multiple of 16 in [16, 256], got 72}}
      "fa4.mma"(%ad, %bd, %accumulate, %acc) {m = 128 : i64, n = 72 : i64, k = 16 : i64, a_source = "smem",
                                              ab_dtype = "bf16", acc_dtype = "f32"} : (i64, i64, i1, i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @register_a(%ad: i64, %bd: i64, %acc: i32, %accumulate: i1) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{a_source must be 'smem' or 'tmem' on sm_100a, got 'regs'}}
      "fa4.mma"(%ad, %bd, %accumulate, %acc) {m = 128 : i64, n = 128 : i64, k = 16 : i64, a_source = "regs",
                                              ab_dtype = "bf16", acc_dtype = "f32"} : (i64, i64, i1, i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @bad_swizzle(%a: !llvm.ptr<3>) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{swizzle must be one of [0, 32, 64, 128] bytes, got 256}}
      %ad = "fa4.smem_desc"(%a) {swizzle = 256 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      llvm.return
    }
  }
}

// -----

// P.V: B (= V) stored N-contiguous sets "Transpose B" (bit 16): bf16 -> f32, M = 128, N = 64,
// 0x08100490 | 1 << 16 = 0x08110490 = 135333008. A descriptor of a tile + 32 B (one K step) is the
// tile's descriptor + 2 (start address >> 4), after the asm.
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    // CHECK-LABEL: llvm.func @mn_major_b_and_folded_offset
    llvm.func @mn_major_b_and_folded_offset(%v: !llvm.ptr<3>, %p_tmem: i32, %acc: i32, %flag: i1)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // CHECK: %[[VI:.*]] = llvm.ptrtoint %{{.*}} : !llvm.ptr<3> to i64
      // CHECK: %[[VD:.*]] = llvm.inline_asm has_side_effects "", "=l,0" %{{.*}} : (i64) -> i64
      // CHECK: %[[TWO:.*]] = arith.constant 2 : i64
      // CHECK: %[[VK:.*]] = arith.addi %[[VD]], %[[TWO]] : i64
      %c32 = arith.constant 32 : i32
      %vk = llvm.getelementptr %v[%c32] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      %bd = "fa4.smem_desc"(%vk) {swizzle = 128 : i64, lbo = 16384 : i64, sbo = 1024 : i64} : (!llvm.ptr<3>) -> i64
      // CHECK: %[[ID:.*]] = arith.constant 135333008 : i32
      // CHECK: nvvm.tcgen05.mma %{{.*}}, %{{.*}}, %[[VK]], %[[ID]], %{{.*}}
      "fa4.mma"(%p_tmem, %bd, %flag, %acc) {m = 128 : i64, n = 64 : i64, k = 16 : i64, a_source = "tmem",
                                            b_major = "mn", ab_dtype = "bf16", acc_dtype = "f32"} : (i32, i64, i1, i32) -> ()
      llvm.return
    }
  }
}

// -----

// A CTA pair (note "CTA pair"): cta_group = 2 selects tcgen05.mma.cta_group::2 with the pair's M and N
// in the instruction descriptor (bf16 -> f32, M = 256, N = 128: 0x10200490 = 270533776), and
// tcgen05.commit.cta_group::2 multicast to the barrier at the same offset in CTAs 0 and 1 (mask 3).
module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.mlir.global external @fa4_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    // CHECK-LABEL: llvm.func @pair
    llvm.func @pair(%ad: i64, %bd: i64, %acc: i32, %a_tmem: i32, %flag: i1, %stage: i32)
        attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      "fa4.pipeline"() {sym_name = "s_pipe", num_stages = 1 : i64, producer = "mma", consumers = ["softmax"],
                        producer_arrivals = 1 : i64, consumer_arrivals = 128 : i64, offset = 64 : i64} : () -> ()
      // CHECK: %[[ID:.*]] = arith.constant 270533776 : i32
      // CHECK: nvvm.tcgen05.mma %{{.*}}, %{{.*}}, %{{.*}}, %[[ID]], %{{.*}} {ctaGroup = #nvvm.cta_group<cta_2>, kind = #nvvm.tcgen05_mma_kind<f16>}
      "fa4.mma"(%ad, %bd, %flag, %acc) {m = 256 : i64, n = 128 : i64, k = 16 : i64, a_source = "smem",
                                        ab_dtype = "bf16", acc_dtype = "f32", cta_group = 2 : i64} : (i64, i64, i1, i32) -> ()
      // A from TMEM over the pair: M = 256, N = 256 (0x10400490 = 272630928).
      // CHECK: %[[AT:.*]] = llvm.inttoptr %{{.*}} : i32 to !llvm.ptr<6>
      // CHECK: %[[ID2:.*]] = arith.constant 272630928 : i32
      // CHECK: nvvm.tcgen05.mma %{{.*}}, %[[AT]], %{{.*}}, %[[ID2]], %{{.*}} {ctaGroup = #nvvm.cta_group<cta_2>
      "fa4.mma"(%a_tmem, %bd, %flag, %acc) {m = 256 : i64, n = 256 : i64, k = 16 : i64, a_source = "tmem",
                                            ab_dtype = "bf16", acc_dtype = "f32", cta_group = 2 : i64} : (i32, i64, i1, i32) -> ()
      // CHECK: %[[MASK:.*]] = arith.constant 3 : i16
      // CHECK: nvvm.tcgen05.commit %{{.*}}, multicast_mask = %[[MASK]] {group = #nvvm.cta_group<cta_2>} : !llvm.ptr<3>, i16
      "fa4.mma_commit"(%stage) {pipe = "s_pipe", side = "full", cta_group = 2 : i64, multicast = 3 : i64} : (i32) -> ()
      // Without multicast: this CTA's barrier only.
      // CHECK: nvvm.tcgen05.commit %{{.*}} {group = #nvvm.cta_group<cta_2>} : !llvm.ptr<3>
      "fa4.mma_commit"(%stage) {pipe = "s_pipe", side = "full", cta_group = 2 : i64} : (i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @pair_bad_m(%ad: i64, %bd: i64, %acc: i32, %accumulate: i1) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{cta_group::2 kind::f16 takes M = 128 or 256 (the pair's rows), got 64}}
      "fa4.mma"(%ad, %bd, %accumulate, %acc) {m = 64 : i64, n = 64 : i64, k = 16 : i64, a_source = "smem",
                                              ab_dtype = "bf16", acc_dtype = "f32", cta_group = 2 : i64} : (i64, i64, i1, i32) -> ()
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @fa4_kernels [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
    llvm.func @pair_bad_group(%ad: i64, %bd: i64, %acc: i32, %accumulate: i1) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
      // expected-error @+1 {{fa4.mma: cta_group must be 1 or 2 (a CTA pair), got 4}}
      "fa4.mma"(%ad, %bd, %accumulate, %acc) {m = 128 : i64, n = 64 : i64, k = 16 : i64, a_source = "smem",
                                              ab_dtype = "bf16", acc_dtype = "f32", cta_group = 4 : i64} : (i64, i64, i1, i32) -> ()
      llvm.return
    }
  }
}
