#!/usr/bin/env bash
# One device call: every GPU test from the bundle, then the GEMM benchmark. Logs under $OUT.
set -uo pipefail
export FA4MLIR_BUNDLE=$PWD/bundle PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-results}; mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/device.txt"
timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/gpu 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
timeout 300 python3 -m fa4mlir bench --bundle bundle --out "$OUT/gemm.json" 2>&1 | tee "$OUT/bench.log" | tail -16
