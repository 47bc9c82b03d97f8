#!/bin/bash
# ncu counters of the MLA decode (128 and 16 heads) and sparse prefill kernels: run on the GPU machine
# from the repo root with the bundle at ./bundle and OUT set (notes/RESULTS.md [M-mla-ncu]).
set -u
export FA4MLIR_BUNDLE=$PWD/bundle PYTHONPATH=$PWD
which ncu || ls /usr/local/cuda*/bin/ncu
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
M=sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second,gpu__time_duration.sum,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_membar_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
for c in "decode 128 1" "decode 16 1" "sparse"; do
  tag=$(echo $c | tr ' ' _)
  timeout 200 $NCU --metrics $M -k regex:mla --launch-skip 2 --launch-count 1 python3 bench/profile_mla.py $c > $OUT/ncu_$tag.txt 2>&1; echo "$tag rc=$?"
  grep -v "^==PROF==" $OUT/ncu_$tag.txt | tail -32
done
