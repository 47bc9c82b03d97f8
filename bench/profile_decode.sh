#!/bin/bash
# ncu counters of the decode kernel (FP8 / bf16, ragged / uniform lengths, pages of 16): run on the GPU
# machine from the repo root with the bundle at ./bundle (notes/RESULTS.md [M-decode-fp8-ncu]).
set -u
export FA4MLIR_BUNDLE=$PWD/bundle PYTHONPATH=$PWD:$PWD/bench
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,sm__cycles_elapsed.max,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread
for c in "1 1 16" "1 0 16" "0 1 16" "0 0 16"; do
  echo "== fp8 ragged page: $c"
  timeout 120 ncu --metrics $M -k regex:"attention|combine" --launch-skip 2 --launch-count 2 \
    python3 bench/profile_decode.py $c 2>&1 | grep -v "^==PROF==" | grep -E "attention|combine|  [a-z_]+__|launch__|ok"
done
