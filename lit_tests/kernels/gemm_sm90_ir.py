# The sm_90a GEMM at the fa4 level: roles and register budgets, the A/B pipeline, TMA boxes and the
# wgmma shape, for the default config (bf16, 128 x 256 x 64 tile, 4 stages, 2 consumer warpgroups).
# RUN: %PYTHON %s | FileCheck %s
from fa4mlir.kernels import gemm_sm90

kernel = gemm_sm90.build(gemm_sm90.GemmConfig())
print(kernel.module)

# 3 warpgroups: load + 2 mma.
# CHECK-LABEL: llvm.func @gemm_sm90_bf16_128x256x64_s4
# CHECK-SAME: nvvm.maxntid = array<i32: 384, 1, 1>

# SMEM: 4 stages x 128 x 64 bf16 of A, 4 stages x 256 x 64 bf16 of B, 128B-swizzle aligned.
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 65536 : i64, sym_name = "a_smem"}
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 131072 : i64, sym_name = "b_smem"}
# One producer arrival per stage fill (plus the TMA bytes), one per consumer warpgroup on empty.
# CHECK: "fa4.pipeline"() {consumer_arrivals = 2 : i64, consumers = ["mma"], num_stages = 4 : i64, producer = "load", producer_arrivals = 1 : i64, sym_name = "ab_pipe"}
# CHECK: "fa4.pipeline_init"()
# CHECK: "fa4.warp_roles"() ({

# Load role: one elected thread runs the ring with (stage, phase) carried through the loop.
# CHECK: "fa4.role"() ({
# CHECK: %[[ELECT:.*]] = "fa4.elect_one"()
# CHECK: scf.if %[[ELECT]]
# CHECK: "fa4.tma_prefetch"
# CHECK: "fa4.tma_prefetch"
# CHECK: scf.for {{.*}} iter_args(%[[STAGE:.*]] = %{{.*}}, %[[PHASE:.*]] = %{{.*}}) -> (i32, i32)
# CHECK: "fa4.producer_acquire"(%[[STAGE]], %[[PHASE]]) {pipe = "ab_pipe"}
# expect-tx = A box (64 x 128 x 2 B) + B box (64 x 256 x 2 B) = 16384 + 32768.
# CHECK: "fa4.producer_commit"(%[[STAGE]]) {pipe = "ab_pipe", tx_bytes = 49152 : i64}
# CHECK: "fa4.tma_load"(%{{.*}}, %{{.*}}, %[[STAGE]], %{{.*}}, %{{.*}}) {box = array<i64: 64, 128>, elem_bytes = 2 : i64, pipe = "ab_pipe"}
# CHECK: "fa4.tma_load"(%{{.*}}, %{{.*}}, %[[STAGE]], %{{.*}}, %{{.*}}) {box = array<i64: 64, 256>, elem_bytes = 2 : i64, pipe = "ab_pipe"}
# CHECK: scf.yield
# CHECK: gpu.yield
# CHECK: }) {first_warp = 0 : i64, name = "load", num_warps = 1 : i64, regs = 40 : i64}

# MMA role: the first K tile is issued before the loop (BK / 16 = 4 wgmma m64n256k16).
# CHECK: "fa4.role"() ({
# CHECK: "fa4.consumer_wait"
# CHECK: "fa4.mma_fence"()
# CHECK-COUNT-4: "fa4.mma"({{.*}}) {a_source = "smem", ab_dtype = "bf16", acc_dtype = "f32", k = 16 : i64, m = 64 : i64, n = 256 : i64} : (i64, i64, i1, vector<128xf32>) -> vector<128xf32>
# CHECK-NOT: "fa4.mma"(
# CHECK: "fa4.mma_commit_group"()
# Steady state: wait for tile j, issue it, retire tile j-1's group, release its stage.
# CHECK: scf.for {{.*}} iter_args(%[[CSTAGE:.*]] = %{{.*}}, %[[CPHASE:.*]] = %{{.*}}, %[[PREV:.*]] = %{{.*}}, %[[ACC:.*]] = %{{.*}}) -> (i32, i32, i32, vector<128xf32>)
# CHECK: "fa4.consumer_wait"(%[[CSTAGE]], %[[CPHASE]]) {pipe = "ab_pipe"}
# CHECK: "fa4.mma"(%{{.*}}, %{{.*}}, %{{.*}}, %[[ACC]])
# CHECK: "fa4.mma_commit_group"()
# CHECK: "fa4.mma_wait_group"(%{{.*}}) {pending = 1 : i64}
# CHECK: "fa4.consumer_release"(%[[PREV]]) {pipe = "ab_pipe"}
# CHECK: scf.yield
# After the loop: drain every group, release the last stage.
# CHECK: "fa4.mma_wait_group"(%{{.*}}) {pending = 0 : i64}
# CHECK: "fa4.consumer_release"
# CHECK: gpu.yield
# CHECK: }) {first_warp = 4 : i64, name = "mma", num_warps = 8 : i64, regs = 232 : i64}
