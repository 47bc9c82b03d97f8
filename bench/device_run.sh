#!/usr/bin/env bash
# One device call: the GPU tests from the bundle (and the torch-on-CPU front-end tests), then the attention benchmark, then the GEMM
# benchmark. Logs and results under $OUT: device.txt, gpu_tests.log, attention.json (+ .png when
# matplotlib imports there; else `python3 -m fa4mlir.bench.plot_attention attention.json attention.png`
# draws it here), attention_bench.log, gemm.json, gemm_bench.log.
# A device call may run 600 s: the default step limits add up to 570 s. Override with
# TESTS_TIMEOUT, ATTN_TIMEOUT, GEMM_TIMEOUT; ATTN_ARGS adds attention flags (e.g. "--quick",
# "--variants all", "--head-dims 128"). EXTRA_PYTHONPATH is appended to PYTHONPATH: where FA4 CuTe
# was installed on the device (../shared/anchors/README.md), so the benchmark times it too.
# The full attention grid took 9 minutes with FA4 CuTe on an H200 (each timing first runs its
# backend for 1 s, fa4mlir/bench/timers.py), more than one call holds next to the tests: run the tests in
# one call (ATTN_TIMEOUT=1 GEMM_TIMEOUT=1), then the bench in two (ATTN_ARGS="--head-dims 64,128",
# then ATTN_ARGS=--resume with the first call's attention.json copied to $OUT/attention.json).
# SANITIZE_TIMEOUT (default 0: off) adds bench/sanitize.py, compute-sanitizer over every kernel family
# (SANITIZE_ARGS adds flags, e.g. "--quick"; $OUT/sanitize.json, sanitize.log, sanitize-logs/); it needs
# a call of its own: rather run it directly, `PYTHONPATH=$PWD python3 bench/sanitize.py --out $OUT/sanitize.json`.
# Each step runs even when the one before failed.
set -uo pipefail
export FA4MLIR_BUNDLE=$PWD/bundle PYTHONPATH=$PWD${EXTRA_PYTHONPATH:+:$EXTRA_PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-results}; mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/device.txt"
echo "== GPU tests (timeout ${TESTS_TIMEOUT:-240} s)"
# then the front end's tests on CPU torch tensors (CI runs them too, on the CPU build of torch)
{ timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/gpu 2>&1
  timeout 60 python3 -m pytest -q -p no:cacheprovider -rs tests/test_attention_torch_cpu.py tests/test_torch_ops.py 2>&1
} | tee "$OUT/gpu_tests.log" | tail -30
echo "== attention bench (timeout ${ATTN_TIMEOUT:-240} s)"
# shellcheck disable=SC2086  # ATTN_ARGS is a list of flags
timeout "${ATTN_TIMEOUT:-240}" python3 -m fa4mlir bench attention --bundle bundle \
    --out "$OUT/attention.json" --png "$OUT/attention.png" ${ATTN_ARGS:-} 2>&1 \
    | tee "$OUT/attention_bench.log" | tail -75
if [ "${DECODE_TIMEOUT:-0}" -gt 0 ]; then   # off unless asked for: DECODE_TIMEOUT=300 DECODE_ARGS="--splits 2,4"
    echo "== decode bench (timeout ${DECODE_TIMEOUT} s)"
    # shellcheck disable=SC2086  # DECODE_ARGS is a list of flags
    timeout "${DECODE_TIMEOUT}" python3 -m fa4mlir bench decode --bundle bundle --out "$OUT/decode.json" \
        ${DECODE_ARGS:-} 2>&1 | tee "$OUT/decode_bench.log" | tail -40
fi
echo "== GEMM bench (timeout ${GEMM_TIMEOUT:-90} s)"
timeout "${GEMM_TIMEOUT:-90}" python3 -m fa4mlir bench gemm --bundle bundle --out "$OUT/gemm.json" 2>&1 \
    | tee "$OUT/gemm_bench.log" | tail -16
if [ "${SANITIZE_TIMEOUT:-0}" -gt 0 ]; then
    echo "== compute-sanitizer (timeout $SANITIZE_TIMEOUT s)"
    # shellcheck disable=SC2086  # SANITIZE_ARGS is a list of flags
    timeout "$SANITIZE_TIMEOUT" python3 bench/sanitize.py --bundle bundle --out "$OUT/sanitize.json" \
        --budget-s $((SANITIZE_TIMEOUT > 60 ? SANITIZE_TIMEOUT - 30 : 30)) ${SANITIZE_ARGS:-} 2>&1 \
        | tee "$OUT/sanitize.log" | tail -40
fi
