// Verifier errors of the fa4 dialect (IRDL constraints from the op table).
// RUN: fa4mlir-opt %s --split-input-file --verify-diagnostics

llvm.func @wrong_operand_type(%stage: i64) {
  // expected-error @+1 {{expected 'i32' but got 'i64'}}
  "fa4.consumer_wait"(%stage, %stage) {pipe = "ab_pipe"} : (i64, i64) -> ()
  llvm.return
}

// -----

llvm.func @generic_smem_pointer(%p: !llvm.ptr) {
  // expected-error @+1 {{expected '!llvm.ptr<3>' but got '!llvm.ptr'}}
  %d = "fa4.smem_desc"(%p) {swizzle = 128 : i64, lbo = 16 : i64, sbo = 1024 : i64} : (!llvm.ptr) -> i64
  llvm.return
}

// -----

llvm.func @ld_global_nc_of_shared(%p: !llvm.ptr<3>) {
  // expected-error @+1 {{expected '!llvm.ptr<1>' but got '!llvm.ptr<3>'}}
  %v = "fa4.ld_global_nc"(%p) : (!llvm.ptr<3>) -> i32
  llvm.return
}

// -----

llvm.func @wrong_result_type() {
  // expected-error @+1 {{expected 'i32' but got 'i64'}}
  %t = "fa4.thread_idx"() {dim = 0 : i64} : () -> i64
  llvm.return
}

// -----

llvm.func @missing_attribute(%stage: i32) {
  // expected-error @+1 {{attribute "tx_bytes" is expected but not provided}}
  "fa4.producer_commit"(%stage) {pipe = "ab_pipe"} : (i32) -> ()
  llvm.return
}

// -----

llvm.func @string_attribute_given_an_integer(%stage: i32) {
  // expected-error @+1 {{expected base attribute 'builtin.string' but got 'builtin.integer'}}
  "fa4.consumer_release"(%stage) {pipe = 0 : i64} : (i32) -> ()
  llvm.return
}

// -----

llvm.func @integer_attribute_given_a_string() {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.string'}}
  "fa4.named_barrier"() {id = "one", num_threads = 256 : i64} : () -> ()
  llvm.return
}

// -----

llvm.func @box_is_a_dense_array(%desc: !llvm.ptr, %dst: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{expected base attribute 'builtin.dense_array' but got 'builtin.array'}}
  "fa4.tma_load"(%desc, %dst, %i, %i, %i) {pipe = "ab_pipe", box = [64, 128], elem_bytes = 2 : i64}
      : (!llvm.ptr, !llvm.ptr<3>, i32, i32, i32) -> ()
  llvm.return
}

// -----

llvm.func @wrong_operand_count(%stage: i32) {
  // expected-error @+1 {{expects exactly 2 operands, but got 1}}
  "fa4.producer_acquire"(%stage) {pipe = "ab_pipe"} : (i32) -> ()
  llvm.return
}

// -----

llvm.func @role_without_region() {
  // expected-error @+1 {{unexpected number of regions: expected 1 but got 0}}
  "fa4.role"() {name = "load", first_warp = 0 : i64, num_warps = 1 : i64, regs = 0 : i64} : () -> ()
  llvm.return
}
