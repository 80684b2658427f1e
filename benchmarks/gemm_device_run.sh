#!/usr/bin/env bash
# One device call for the cuda GEMM work: GPU tests of every GEMM variant (simplest first),
# a short `fusec tune`, then benchmarks/gemm_bench.py. Logs and tables go to $OUT.
#   OUT=/tmp/out bash benchmarks/gemm_device_run.sh          (from the repository root)
set -u
OUT=${OUT:-/tmp/gemm-out}
mkdir -p "$OUT"
export FUSEC_CACHE_DIR=${FUSEC_CACHE_DIR:-/tmp/fusec-cache} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv \
  | tee "$OUT/gpu.txt"
t0=$(date +%s)
timeout "${TEST_TIMEOUT:-100}" python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
  tests/targets/cuda/test_gemm_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
echo "[gpu tests: $(( $(date +%s) - t0 )) s]"
t1=$(date +%s)
timeout "${TUNE_TIMEOUT:-25}" python3 -m fusec.cli tune tests/targets/cuda/filecheck/tile_gemm_1024.mlir \
  --reps 10 2>&1 | tee "$OUT/tune.log" | tail -9
echo "[tune: $(( $(date +%s) - t1 )) s]"
t2=$(date +%s)
timeout "${BENCH_TIMEOUT:-150}" python3 benchmarks/gemm_bench.py --out "$OUT" 2>&1 \
  | tee "$OUT/bench.log" | grep -v '^{'
echo "[bench: $(( $(date +%s) - t2 )) s]"
cat "$OUT"/gemm-*.md 2>/dev/null | tail -15
