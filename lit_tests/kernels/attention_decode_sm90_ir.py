# The sm_90a decode kernel at the fa4 level, paged cache of page size 16 (bf16, D128, bn 64, 3
# stages): SMEM plan, the two rings, the consumer's two KV loops (unmasked, then masked with the V
# tail zeroed), and the producer's TMA boxes of 16 rows (one page each) per 64-column chunk.
# RUN: %PYTHON %s | FileCheck %s
from fa4mlir.kernels import attention_decode_sm90 as decode
from fa4mlir.kernels.attention_decode_sm90_config import default_config

print(decode.build(default_config("bf16", 128, 16)).module)

# One consumer warpgroup + one producer warp; boxes of 64 columns x 1 KV head x 16 rows x 1 page.
# CHECK-LABEL: llvm.func @attention_decode_sm90_bf16_d128_n64_s3_paged_b16
# CHECK-SAME: fa4.tma = {box = array<i64: 64, 1, 16, 1>, elem_bytes = 2 : i64, name = "k_cache"}
# CHECK-SAME: nvvm.maxntid = array<i32: 160, 1, 1>, nvvm.minctasm = 2 : i32
# SMEM: Q (64 x 128 bf16), then 3 stages of 64 x 128 bf16 for K and for V.
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 16384 : i64, sym_name = "q_smem"}
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 49152 : i64, sym_name = "k_smem"}
# CHECK: "fa4.smem_buffer"() {align = 1024 : i64, bytes = 49152 : i64, sym_name = "v_smem"}
# CHECK: "fa4.pipeline"() {{{.*}}num_stages = 3 : i64{{.*}}sym_name = "k_pipe"}
# CHECK: "fa4.pipeline"() {{{.*}}num_stages = 3 : i64{{.*}}sym_name = "v_pipe"}

# Consumer: Q written by the threads, fenced to the async proxy, then the unmasked loop.
# CHECK: "fa4.role"() ({
# CHECK: "fa4.fence"() {kind = "async_smem"}
# CHECK-NEXT: "fa4.named_barrier"() {id = 1 : i64, num_threads = 128 : i64}
# CHECK: scf.for
# CHECK: "fa4.consumer_wait"(%{{.*}}, %{{.*}}) {pipe = "k_pipe"}
# CHECK: "fa4.mma"({{.*}}) {a_source = "smem", ab_dtype = "bf16", acc_dtype = "f32", k = 16 : i64, m = 64 : i64, n = 64 : i64}
# CHECK: "fa4.consumer_release"(%{{.*}}) {pipe = "k_pipe"}
# CHECK: "fa4.consumer_wait"(%{{.*}}, %{{.*}}) {pipe = "v_pipe"}
# CHECK-NOT: "fa4.named_barrier"
# CHECK: "fa4.mma"({{.*}}) {a_source = "regs", ab_dtype = "bf16", acc_dtype = "f32", b_major = "mn", k = 16 : i64, m = 64 : i64, n = 128 : i64}
# CHECK: "fa4.consumer_release"(%{{.*}}) {pipe = "v_pipe"}
# The masked loop: V rows at or past the length zeroed before P V, in the tile that holds it.
# CHECK: scf.for
# CHECK: "fa4.consumer_wait"(%{{.*}}, %{{.*}}) {pipe = "v_pipe"}
# CHECK: scf.if
# CHECK: "fa4.fence"() {kind = "async_smem"}
# CHECK-NEXT: "fa4.named_barrier"() {id = 1 : i64, num_threads = 128 : i64}
# CHECK: a_source = "regs"
# CHECK: "fa4.consumer_release"(%{{.*}}) {pipe = "v_pipe"}
# CHECK: }) {first_warp = 0 : i64, name = "mma", num_warps = 4 : i64, regs = 0 : i64}

# Producer: per tile, K then V, each 64 x 128 bf16 = 16384 bytes expected, as 4 boxes x 2 chunks.
# CHECK: "fa4.role"() ({
# CHECK: "fa4.producer_acquire"(%{{.*}}, %{{.*}}) {pipe = "k_pipe"}
# CHECK-NEXT: "fa4.producer_commit"(%{{.*}}) {pipe = "k_pipe", tx_bytes = 16384 : i64}
# CHECK-COUNT-8: "fa4.tma_load"({{.*}}) {box = array<i64: 64, 1, 16, 1>, elem_bytes = 2 : i64, pipe = "k_pipe"}
# CHECK: "fa4.producer_acquire"(%{{.*}}, %{{.*}}) {pipe = "v_pipe"}
# CHECK-NEXT: "fa4.producer_commit"(%{{.*}}) {pipe = "v_pipe", tx_bytes = 16384 : i64}
# CHECK-COUNT-8: "fa4.tma_load"({{.*}}) {box = array<i64: 64, 1, 16, 1>, elem_bytes = 2 : i64, pipe = "v_pipe"}
# CHECK: }) {first_warp = 4 : i64, name = "load", num_warps = 1 : i64, regs = 0 : i64}
