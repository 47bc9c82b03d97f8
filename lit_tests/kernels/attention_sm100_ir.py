# The sm_100a FlashAttention-4 forward at the fa4 level (bf16, head dim 64, BN 128): the role table
# and its register budgets, the pipelines between the roles, and the MMA warp's issue order inside
# the KV loop: S0 <- Q0 Kn, O1 <- O1 + P1 V(n-1), S1 <- Q1 Kn, O0 <- O0 + P0 Vn, each GEMM committed
# to the pipeline its consumer waits on.
# RUN: %PYTHON %s | FileCheck %s
from fa4mlir.kernels import attention_fwd_sm100

print(attention_fwd_sm100.build(attention_fwd_sm100.FA4Config(head_dim=64, head_dim_v=64)).module)

# CHECK-LABEL: llvm.func @attention_fwd_sm100_bf16_qk64_ov64_g1_bn128_s4
# CHECK-SAME: nvvm.maxntid = array<i32: 512, 1, 1>
# Q0 + Q1, 4 stages of K and of V (128 x 64 bf16 each).
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 32768 : i64, sym_name = "q_smem"}
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 65536 : i64, sym_name = "k_smem"}
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 65536 : i64, sym_name = "v_smem"}
# One tcgen05.commit (1 arrival) or 128 softmax / correction threads per hand-off.
# CHECK: "fa4.pipeline"() {consumer_arrivals = 128 : i64, consumers = ["softmax0"], num_stages = 1 : i64, producer = "mma", producer_arrivals = 1 : i64, sym_name = "s0"}
# CHECK: "fa4.pipeline"() {consumer_arrivals = 1 : i64, consumers = ["mma"], num_stages = 1 : i64, producer = "softmax0", producer_arrivals = 128 : i64, sym_name = "p0"}
# CHECK: "fa4.pipeline"() {consumer_arrivals = 128 : i64, consumers = ["correction"], num_stages = 1 : i64, producer = "mma", producer_arrivals = 1 : i64, sym_name = "o0"}
# CHECK: "fa4.pipeline"() {consumer_arrivals = 128 : i64, consumers = ["correction"], num_stages = 1 : i64, producer = "softmax0", producer_arrivals = 128 : i64, sym_name = "c0"}
# CHECK: "fa4.tmem_alloc"(%{{.*}}) {cols = 512 : i64}
# CHECK: "fa4.tmem_relinquish"()

# CHECK: {first_warp = 13 : i64, name = "load", num_warps = 1 : i64, regs = 48 : i64}

# The KV loop of the MMA warp.
# CHECK: scf.for
# CHECK: "fa4.consumer_wait"(%{{.*}}) {pipe = "k"}
# S0 <- Q0 Kn: 64 / 16 = 4 MMAs 128 x 128 x 16 from SMEM, the first overwriting S0.
# CHECK: "fa4.producer_acquire"(%{{.*}}) {pipe = "s0"}
# CHECK: "fa4.mma"(%{{.*}}, %{{.*}}, %false{{.*}}) {a_source = "smem", ab_dtype = "bf16", acc_dtype = "f32", k = 16 : i64, m = 128 : i64, n = 128 : i64}
# CHECK-COUNT-3: {a_source = "smem", ab_dtype = "bf16", acc_dtype = "f32", k = 16 : i64, m = 128 : i64, n = 128 : i64}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "s0", side = "full"}
# O1 <- O1 + P1 V(n-1): P1 from TMEM, V MN-major, 128 / 16 = 8 MMAs 128 x 64 x 16.
# CHECK: "fa4.consumer_wait"(%{{.*}}) {pipe = "p1"}
# CHECK: "fa4.producer_acquire"(%{{.*}}) {pipe = "o1"}
# CHECK-COUNT-8: {a_source = "tmem", ab_dtype = "bf16", acc_dtype = "f32", b_major = "mn", k = 16 : i64, m = 128 : i64, n = 64 : i64}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "o1", side = "full"}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "p1", side = "empty"}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "v", side = "empty"}
# S1 <- Q1 Kn, then K's stage is free once both S MMAs complete.
# CHECK: "fa4.producer_acquire"(%{{.*}}) {pipe = "s1"}
# CHECK-COUNT-4: {a_source = "smem", ab_dtype = "bf16", acc_dtype = "f32", k = 16 : i64, m = 128 : i64, n = 128 : i64}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "s1", side = "full"}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "k", side = "empty"}
# O0 <- O0 + P0 Vn.
# CHECK: "fa4.consumer_wait"(%{{.*}}) {pipe = "v"}
# CHECK: "fa4.consumer_wait"(%{{.*}}) {pipe = "p0"}
# CHECK: "fa4.producer_acquire"(%{{.*}}) {pipe = "o0"}
# CHECK-COUNT-8: {a_source = "tmem", ab_dtype = "bf16", acc_dtype = "f32", b_major = "mn", k = 16 : i64, m = 128 : i64, n = 64 : i64}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "o0", side = "full"}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "p0", side = "empty"}
# CHECK: scf.yield
# After the loop: the last O1 <- O1 + P1 V(N-1).
# CHECK: "fa4.consumer_wait"(%{{.*}}) {pipe = "p1"}
# CHECK: "fa4.mma_commit"(%{{.*}}) {pipe = "q", side = "empty"}
# CHECK: {first_warp = 12 : i64, name = "mma", num_warps = 1 : i64, regs = 48 : i64}

# Softmax 0: S0 read from TMEM in 32-column loads, P0 written back (64 packed columns).
# CHECK: "fa4.consumer_wait"(%{{.*}}) {pipe = "s0"}
# CHECK: "fa4.tmem_load"(%{{.*}}) {num = 32 : i64} : (i32) -> vector<32xi32>
# CHECK: "fa4.producer_acquire"(%{{.*}}) {pipe = "p0"}
# CHECK: "fa4.tmem_store"(%{{.*}}, %{{.*}}) : (i32, vector<64xi32>) -> ()
# CHECK: "fa4.producer_commit"(%{{.*}}) {pipe = "p0", tx_bytes = 0 : i64}
# CHECK: {first_warp = 0 : i64, name = "softmax0", num_warps = 4 : i64, regs = 192 : i64}
# CHECK: {first_warp = 4 : i64, name = "softmax1", num_warps = 4 : i64, regs = 192 : i64}
# Correction: a warp-uniform test before touching O in TMEM.
# CHECK: "fa4.vote_any"
# CHECK: "fa4.tma_store"
# CHECK: {first_warp = 8 : i64, name = "correction", num_warps = 4 : i64, regs = 80 : i64}
# CHECK: "fa4.tmem_dealloc"(%{{.*}}) {cols = 512 : i64}
