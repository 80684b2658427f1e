#!/usr/bin/env bash
# One device call for the GEMM variants (pingpong schedule, smem epilogue, fast maths):
# their GPU tests, then every variant timed against torch eager and torch.compile
# (benchmarks/gemm_variants_bench.py). Everything lands in $OUT; at most ~195 s in all.
#   OUT=/tmp/out bash benchmarks/gemm_variants_device.sh          (from the repository root)
# Each stage runs under `timeout`; the benchmark saves every row as it is measured and is
# restarted (skipping the rows done and the one that hung or crashed) while time is left.
set -u
OUT=${OUT:-/tmp/gemm-variants-out}
mkdir -p "$OUT"
T0=$(date +%s)
TOTAL=${TOTAL_BUDGET:-195}
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
export FUSEC_CACHE_DIR=${FUSEC_CACHE_DIR:-/tmp/fusec-cache} PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import xdsl, lark" 2>/dev/null; then  # the pure-Python wheels, if carried
  for wheels in .whl ../../.whl; do
    if ls "$wheels"/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --target /tmp/site "$wheels"/*.whl \
        > "$OUT/pip.log" 2>&1
      export PYTHONPATH="/tmp/site:$PYTHONPATH"
      break
    fi
  done
fi
git rev-parse --short HEAD > "$OUT/commit.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv \
  > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

echo "== GPU tests: ln=tile (the LayerNorm normalised in the resident A tiles)"
timeout "${LN_TEST_TIMEOUT:-60}" python3 -m pytest -m gpu -v --tb=short -p no:cacheprovider \
  tests/targets/cuda/test_gemm_ln_tile_gpu.py > "$OUT/gpu_tests_ln_tile.log" 2>&1
echo "[ln=tile gpu tests: rc $?, $(( $(date +%s) - T0 )) s]"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/gpu_tests_ln_tile.log" | tail -15

echo "== GPU tests: the variants, then the default kernels (test_gemm_gpu.py)"
timeout "${TEST_TIMEOUT:-100}" python3 -m pytest -m gpu -v --tb=short -p no:cacheprovider \
  tests/targets/cuda/test_gemm_variants_gpu.py tests/targets/cuda/test_gemm_gpu.py > "$OUT/gpu_tests.log" 2>&1
echo "[gpu tests: rc $?, $(( $(date +%s) - T0 )) s]"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -30

echo "== variants vs torch eager / torch.compile"
for attempt in 1 2 3 4; do
  budget=$(( $(left) - 5 ))
  if [ "$budget" -lt 20 ]; then echo "[no time left for attempt $attempt]"; break; fi
  timeout "$budget" python3 benchmarks/gemm_variants_bench.py --out "$OUT" \
    --budget $(( budget - 12 )) >> "$OUT/bench.log" 2>&1
  rc=$?
  echo "[bench attempt $attempt: rc $rc, $(( $(date +%s) - T0 )) s]"
  [ "$rc" -eq 0 ] && break
done
grep -E "Error|error" "$OUT/bench.log" | grep -v '^{' | tail -5
cat "$OUT/gemm-variants.md" 2>/dev/null
echo "[total: $(( $(date +%s) - T0 )) s]"
