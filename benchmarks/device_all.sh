#!/usr/bin/env bash
# One H200 call (~560 s) for the whole GPU side, as the lead ran it on 2026-12-01:
# every `gpu` test (pytest-xdist) beside the cuda differential run, then the GEMM, conv/attention
# and gpu benchmarks. Run from the repository root with the pure-Python wheels in .whl:
#   run(command="OUT=$OUT bash benchmarks/device_all.sh", carry=[".whl"], timeout_s=600)
# Everything lands in one archive, $OUT/all.tgz (the device tool brings back at most 8 files),
# with the tables copied beside it.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FUSEC_CACHE_DIR=/tmp/fusec-cache
export FUSEC_COMMIT=${FUSEC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
W=/tmp/work; mkdir -p "$W/diff" "$W/variants"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv | tee "$W/device.txt"
stage() {  # stage NAME SECONDS COMMAND...: log to $W/NAME.log, print its verdict lines
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" >"$W/$name.log" 2>&1; local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s"
  grep -E "^FAILED|^ERROR|passed|failed|Timeout" "$W/$name.log" | tail -20
}
( timeout "${T_DIFF:-285}" python3 tools/differential_gpu_run.py --out "$W/diff" --workers 12 \
    --wall "${DIFF_WALL:-255}" > "$W/diff.log" 2>&1 ) &
diff_pid=$!
stage gpu_tests 250 python3 -m pytest -m gpu -q -n 4 -p no:cacheprovider -rfE --tb=short \
  --timeout 200 tests
wait "$diff_pid"; echo "== differential: rc=$?"; head -12 "$W/diff/summary.md"
OUT=$W/variants TOTAL_BUDGET=120 bash benchmarks/gemm_variants_device.sh > "$W/variants.log" 2>&1
stage gemm_bench 50 python3 benchmarks/gemm_bench.py --out "$W"
stage conv_attn 60 python3 benchmarks/conv_attn_bench.py --out "$W"
stage gpu_bench 60 python3 benchmarks/gpu_bench.py --out "$W"
cat "$W"/*.md "$W/variants/gemm-variants.md" 2>/dev/null | grep "^|"
(cd "$W" && tar czf "$OUT/all.tgz" .)
cp "$W"/*.md "$OUT/" 2>/dev/null; cp "$W/diff/summary.md" "$OUT/differential.md" 2>/dev/null
ls "$OUT"
