#!/usr/bin/env bash
# One H200 call (~560 s) for the whole GPU side: every `gpu` test (pytest-xdist), then the
# GEMM, conv/attention and gpu benchmarks and the per-kernel profile of the rows that were
# missed (benchmarks/profile_cases.py). Run from the repository root with the pure-Python
# wheels in .whl:
#   run(command="OUT=$OUT bash benchmarks/device_all.sh", carry=[".whl"], timeout_s=600)
# Options (environment): DIFF=1 runs the cuda differential run beside the tests (the
# 2026-12-01 reliability run); LMS_TILES / CONV_ENVS list extra variants for the profile
# tables (";"-separated tile-gemm options, and "VAR=value" settings of the conv template);
# T_TESTS limits the test stage (s). Everything lands in one archive, $OUT/all.tgz (the
# device tool brings back at most 8 files), with the tables copied beside it.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FUSEC_CACHE_DIR=/tmp/fusec-cache
export FUSEC_COMMIT=${FUSEC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
W=/tmp/work; mkdir -p "$W/diff" "$W/profile"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv | tee "$W/device.txt"
stage() {  # stage NAME SECONDS COMMAND...: log to $W/NAME.log, print its verdict lines
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" >"$W/$name.log" 2>&1; local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s"
  grep -E "^FAILED|^ERROR|passed|failed|Timeout" "$W/$name.log" | tail -20
}
if [ "${DIFF:-0}" = 1 ]; then
  ( timeout 285 python3 tools/differential_gpu_run.py --out "$W/diff" --workers 12 \
      --wall 255 > "$W/diff.log" 2>&1 ) &
fi
stage gpu_tests "${T_TESTS:-230}" python3 -m pytest -m gpu -q -n 4 -p no:cacheprovider -rfE \
  --tb=short --timeout 150 tests
wait
stage gemm_bench 75 python3 benchmarks/gemm_bench.py --out "$W"
stage conv_attn 110 python3 benchmarks/conv_attn_bench.py --out "$W"
stage gpu_bench 70 python3 benchmarks/gpu_bench.py --out "$W"
profile() {  # profile NAME ARGS...: the per-kernel table of one profile_cases.py run
  timeout 60 python3 benchmarks/profile_cases.py "${@:2}" > "$W/profile/$1.log" 2>&1
  echo "== profile $1: rc=$?"
  grep -E "^--|GPU kernel time|^ +[0-9.]+ us" "$W/profile/$1.log" | cut -c1-110 | head -14
}
profile lms-small --case lms-small --impl fusec --impl compile
IFS=';' read -ra TILES <<< "${LMS_TILES:-}"
for t in "${TILES[@]}"; do profile "lms-small [$t]" --case lms-small --impl fusec --tile "$t"; done
profile resnet --case resnet --impl fusec --impl compile
IFS=';' read -ra ENVS <<< "${CONV_ENVS:-}"
for e in "${ENVS[@]}"; do  # $e unquoted below: one entry may set several variables
  env $e timeout 60 python3 benchmarks/profile_cases.py --case resnet --case conv \
    --impl fusec > "$W/profile/conv-$e.log" 2>&1
  echo "== profile conv, resnet [$e]: rc=$?"
  grep -E "^--|GPU kernel time|^ +[0-9.]+ us" "$W/profile/conv-$e.log" | cut -c1-110 | head -16
done
cat "$W"/*.md 2>/dev/null | grep "^|"
(cd "$W" && tar czf "$OUT/all.tgz" .)
cp "$W"/*.md "$OUT/" 2>/dev/null
ls "$OUT"
