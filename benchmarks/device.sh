#!/usr/bin/env bash
# The GPU machine's one script: stages of tests and benchmarks, each under its own time limit
# (a hung kernel costs only its stage), logs and tables in $OUT.
#
#   run(command="OUT=$OUT bash benchmarks/device.sh all", carry=[".whl"], timeout_s=600)
#   OUT=/tmp/out bash benchmarks/device.sh gemm conv-attn          # several stages in turn
#   DRY_RUN=1 bash benchmarks/device.sh all                        # print the commands only
#
# Stages (the former one-question scripts, whose names stay as aliases of a stage):
#   all            every `gpu` test (4 workers), then the gemm, conv-attn and ops suites and the
#                  per-kernel profile of the rows that miss; everything in $OUT/all.tgz
#                  (was device_all.sh). DIFF=1 runs the cuda differential run beside the
#                  tests; LMS_TILES / CONV_ENVS (";"-separated tile-gemm options / "VAR=value"
#                  settings of the conv template) add profile variants; T_TESTS limits the tests.
#   gemm           the GEMM gpu tests, a short `fusec tune`, the gemm suite (gemm_device_run.sh);
#                  TEST_TIMEOUT, TUNE_TIMEOUT, BENCH_TIMEOUT.
#   gemm-variants  the variants' gpu tests, then every variant vs eager and torch.compile,
#                  restarted past a hang while TOTAL_BUDGET (195 s) lasts (gemm_variants_device.sh).
#   conv-attn      the conv and attention gpu tests in five stages, the conv-attn suite, then
#                  the conv A/Bs: CONV_TILES, CONV_INPUTS, CONV_EPILOGUES, MAX_AUTOTUNE=1
#                  (conv_attn_device.sh; the defaults and meaning are at the stage below).
#   profile        torch.profiler tables and Nsight Compute of the rows that miss
#                  (profile_device.sh): PROFILE_CASES, NCU_CASES, NCU_SET, PROFILE_TILES.
#   zoo            the GPU model zoo: benchmarks/models_gpu_device.sh, unchanged (RESUME,
#                  SUFFIX, BUDGET, CASE, JOBS, ZOO_ARGS, TESTS).
#   w4             the W4A16 Tensor Core kernel's knobs (issue 31): `gemm_bench.py
#                  --w4-ring-sweep` (W4_FIRST: its first variants only; default all), the W4A16
#                  gpu tests, then Nsight Compute (`--set full`, W4_NCU=0: none) of the
#                  fastest of the sweep's first W4_PICK (default 8) variants, as text:
#                  $OUT/w4-ncu.txt (~5 minutes on a fresh machine).
# Every benchmark a stage runs is a suite of benchmarks/gpu.py (`python benchmarks/gpu.py list`).
#
# Each stage's logs are $OUT/<stage's test or bench>.log (the all and profile stages work in
# /tmp/work and /tmp/prof and archive them as $OUT/all.tgz and $OUT/profile.tgz), so stages
# share one $OUT.
#
# The pure-Python wheels the machine lacks are installed from WHL (default .whl of the
# repository root) into /tmp/site when it holds any; FUSEC_COMMIT (default: git's short HEAD,
# "+dirty" when tracked files differ, or "unknown" without git) goes into the tables.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-/tmp/device-out}
WHL=${WHL:-$ROOT/.whl}
DRY=${DRY_RUN:-0}
mkdir -p "$OUT"

if [ "$#" -eq 0 ]; then
  sed -n '2,/^set -u/p' "$0" | sed '$d'
  exit 2
fi
for name in "$@"; do
  case $name in
    all | gemm | gemm-variants | conv-attn | profile | zoo | w4) ;;
    *) echo "unknown stage '$name' (all, gemm, gemm-variants, conv-attn, profile, zoo, w4)" >&2; exit 2 ;;
  esac
done

if [ -z "${FUSEC_COMMIT:-}" ]; then
  FUSEC_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ "$FUSEC_COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    FUSEC_COMMIT="$FUSEC_COMMIT+dirty"
  fi
fi
export FUSEC_COMMIT PYTHONUNBUFFERED=1
export FUSEC_CACHE_DIR=${FUSEC_CACHE_DIR:-/tmp/fusec-cache}
if [ "$DRY" != 1 ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHL"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
echo "commit $FUSEC_COMMIT, results in $OUT" | tee "$OUT/commit.txt"
if [ "$DRY" != 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv | tee "$OUT/device.txt"
fi

VERDICT="PASSED|FAILED|ERROR|passed|failed|rror|Timeout|^\| "

stage() {  # stage DIR NAME SECONDS COMMAND...: run a program (`timeout` execs it; env
  # VAR=value ... first sets variables), keep DIR/NAME.log, print its status and verdict lines
  local dir=$1 name=$2 limit=$3
  shift 3
  if [ "$DRY" = 1 ]; then
    echo "[$name, ${limit} s] $*"
    return 0
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" >"$dir/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s"
  grep -E "$VERDICT" "$dir/$name.log" | tail -30
  return $rc
}

profile_table() {  # profile_table DIR NAME ARGS...: one profile_cases.py table, its kernels
  local dir=$1 name=$2
  shift 2
  stage "$dir" "profile-$name" 60 python3 benchmarks/profile_cases.py "$@"
  [ "$DRY" = 1 ] || grep -E "^--|GPU kernel time|^ +[0-9.]+ us" "$dir/profile-$name.log" \
    | cut -c1-110 | head -16
}

PYTEST="python3 -m pytest -m gpu -v -p no:cacheprovider -rfE --tb=short"

stage_all() {
  local w=/tmp/work
  mkdir -p "$w/diff" "$w/profile"
  if [ "${DIFF:-0}" = 1 ] && [ "$DRY" != 1 ]; then
    ( timeout 285 python3 tools/differential_gpu_run.py --out "$w/diff" --workers 12 \
        --wall 255 >"$w/diff.log" 2>&1 ) &
  fi
  stage "$w" gpu_tests "${T_TESTS:-230}" python3 -m pytest -m gpu -q -n 4 -p no:cacheprovider \
    -rfE --tb=short --timeout 150 tests
  wait
  stage "$w" gemm_bench 75 python3 benchmarks/gemm_bench.py --out "$w"
  stage "$w" conv_attn 110 python3 benchmarks/conv_attn_bench.py --out "$w"
  stage "$w" gpu_bench 70 python3 benchmarks/gpu_bench.py --out "$w"
  profile_table "$w/profile" lms-small --case lms-small --impl fusec --impl compile
  local t e tiles envs
  IFS=';' read -ra tiles <<<"${LMS_TILES:-}"
  for t in "${tiles[@]}"; do
    profile_table "$w/profile" "lms-small-${t// /_}" --case lms-small --impl fusec --tile "$t"
  done
  profile_table "$w/profile" resnet --case resnet --impl fusec --impl compile
  IFS=';' read -ra envs <<<"${CONV_ENVS:-}"
  for e in "${envs[@]}"; do  # $e unquoted: one entry may set several variables
    # shellcheck disable=SC2086
    stage "$w/profile" "conv-${e// /_}" 60 env $e python3 benchmarks/profile_cases.py \
      --case resnet --case conv --impl fusec
  done
  [ "$DRY" = 1 ] && return 0
  cat "$w"/*.md 2>/dev/null | grep "^|"
  cp "$OUT/device.txt" "$w/" 2>/dev/null
  (cd "$w" && tar czf "$OUT/all.tgz" .)
  cp "$w"/*.md "$OUT/" 2>/dev/null
}

stage_gemm() {
  stage "$OUT" gemm_tests "${TEST_TIMEOUT:-100}" $PYTEST tests/targets/cuda/test_gemm_gpu.py
  stage "$OUT" gemm_tune "${TUNE_TIMEOUT:-25}" python3 -m fusec.cli tune \
    tests/targets/cuda/filecheck/tile_gemm_1024.mlir --reps 10
  stage "$OUT" gemm_bench "${BENCH_TIMEOUT:-150}" python3 benchmarks/gemm_bench.py --out "$OUT"
  [ "$DRY" = 1 ] || tail -15 "$OUT/gemm.md" 2>/dev/null
}

stage_gemm_variants() {
  local t0=$SECONDS total=${TOTAL_BUDGET:-195} attempt budget
  stage "$OUT" variants_tests_ln_tile "${LN_TEST_TIMEOUT:-60}" $PYTEST \
    tests/targets/cuda/test_gemm_ln_tile_gpu.py
  stage "$OUT" variants_tests "${TEST_TIMEOUT:-100}" $PYTEST \
    tests/targets/cuda/test_gemm_variants_gpu.py tests/targets/cuda/test_gemm_gpu.py
  # the benchmark saves each row as it is measured and, restarted, skips the rows done and
  # the one that hung or crashed
  for attempt in 1 2 3 4; do
    budget=$((total - (SECONDS - t0) - 5))
    if [ "$budget" -lt 20 ]; then echo "[no time left for attempt $attempt]"; break; fi
    stage "$OUT" "variants_bench_$attempt" "$budget" python3 benchmarks/gemm_variants_bench.py \
      --out "$OUT" --budget $((budget - 12)) && break
    [ "$DRY" = 1 ] && break
  done
  [ "$DRY" = 1 ] || cat "$OUT/gemm-variants.md" 2>/dev/null
}

stage_conv_attn() {
  # 1. conv: implicit GEMM (odd sizes, strides, padding, groups, bf16, epilogues), direct
  #    (depthwise), fallback; results on the caller's stream
  stage "$OUT" conv_tests 150 $PYTEST tests/targets/cuda/test_conv_gpu.py \
    -k "not nchw and not epilogue_loads and not early_loads and not handoff"
  # 1a. the epilogue's inputs read at each element (the default) and loaded ahead of use
  stage "$OUT" conv_epilogue_tests 180 $PYTEST tests/targets/cuda/test_conv_gpu.py \
    -k "epilogue_loads or early_loads"
  # 1b. the conv -> conv hand-off in channels-last (FUSEC_CONV_HANDOFF=nhwc, opt-in)
  stage "$OUT" conv_handoff_tests 180 $PYTEST tests/targets/cuda/test_conv_gpu.py -k handoff
  # 1c. the opt-in FUSEC_CONV_INPUT=nchw / nchw-ld variants (NCHW input read in place)
  stage "$OUT" conv_nchw_tests 240 $PYTEST tests/targets/cuda/test_conv_gpu.py -k nchw
  # 2. attention through compile: the flash kernel, the PyTorch fallback, the caller's stream
  stage "$OUT" attention_tests 90 $PYTEST tests/targets/cuda/test_attention_gpu.py
  # 3. the suite (conv, ResNet block, attention x2) against eager / compile / NHWC / SDPA;
  #    MAX_AUTOTUNE=1 adds torch.compile(mode="max-autotune") to the conv and ResNet rows
  local args=() limit=150 tile dir layout mode loads tiles
  if [ "${MAX_AUTOTUNE:-0}" = 1 ]; then
    args=(--max-autotune --max-autotune-budget "${MAX_AUTOTUNE_BUDGET:-240}")
    limit=$((150 + 2 * ${MAX_AUTOTUNE_BUDGET:-240}))
  fi
  stage "$OUT" conv_attn_bench "$limit" python3 benchmarks/conv_attn_bench.py --out "$OUT" "${args[@]}"
  [ "$DRY" = 1 ] || cat "$OUT/conv-attn.md" 2>/dev/null
  # 4. conv tile A/B (CONV_TILES, ";"-separated, empty for none): the conv row, fusec alone
  IFS=';' read -r -a tiles <<<"${CONV_TILES-64x128 s6 c2n;64x192 s4 c1n}"
  for tile in "${tiles[@]}"; do
    [ -n "$tile" ] || continue
    dir="$OUT/tile-${tile// /_}"
    mkdir -p "$dir"
    stage "$dir" "tile-${tile// /_}" 60 env "FUSEC_CONV_TILE=$tile" \
      python3 benchmarks/conv_attn_bench.py --out "$dir" --only conv --fusec-only
    [ "$DRY" = 1 ] || tail -1 "$dir/conv-attn.md" 2>/dev/null
  done
  # 5. input A/B (CONV_INPUTS, default "nhwc nchw nchw-ld"): the conv row, the ResNet block and
  #    the conv's 1x1 twin, fusec alone, FUSEC_CONV_INPUT forced. nchw (TMA) reads the input in
  #    place only where every tap shift along W is a multiple of 8 pixels (the 1x1 row); on
  #    the 3x3 row it is refused and re-measures the channels-last copy, a control for noise.
  for layout in ${CONV_INPUTS-nhwc nchw nchw-ld}; do
    dir="$OUT/input-$layout"
    mkdir -p "$dir"
    stage "$dir" "input-$layout" 120 env "FUSEC_CONV_INPUT=$layout" \
      python3 benchmarks/conv_attn_bench.py --out "$dir" --only conv,resnet,pointwise --fusec-only
    [ "$DRY" = 1 ] || tail -3 "$dir/conv-attn.md" 2>/dev/null
  done
  # 6. epilogue-load A/B (CONV_EPILOGUES, default "inline early handoff"): the conv row and the
  #    ResNet block, fusec alone, and the block's per-kernel GPU times; "handoff" is early
  #    loads with FUSEC_CONV_HANDOFF=nhwc (conv1 stores channels-last, conv2 skips its copy)
  for mode in ${CONV_EPILOGUES-inline early handoff}; do
    dir="$OUT/epilogue-$mode"
    mkdir -p "$dir"
    loads=$mode
    if [ "$mode" = handoff ]; then export FUSEC_CONV_HANDOFF=nhwc; loads=early; else unset FUSEC_CONV_HANDOFF; fi
    export FUSEC_CONV_EPILOGUE=$loads
    stage "$dir" "epilogue-$mode" 90 \
      python3 benchmarks/conv_attn_bench.py --out "$dir" --only conv,resnet --fusec-only
    [ "$DRY" = 1 ] || tail -2 "$dir/conv-attn.md" 2>/dev/null
    profile_table "$dir" resnet --case resnet --impl fusec
  done
  unset FUSEC_CONV_HANDOFF FUSEC_CONV_EPILOGUE
}

stage_profile() {
  local w=/tmp/prof c t item extra
  mkdir -p "$w"
  for c in ${PROFILE_CASES-lms-small mlp-down mlp-up mlp conv}; do
    stage "$w" "table-$c" 150 python3 benchmarks/profile_cases.py --case "$c"
  done
  IFS=';' read -ra extra <<<"${PROFILE_TILES:-}"  # e.g. 'lms-small|tile="128x256x64 s4 c2 g8"'
  for item in "${extra[@]}"; do
    c=${item%%|*}
    t=${item#*|}
    stage "$w" "tile-$c" 90 python3 benchmarks/profile_cases.py --case "$c" --impl fusec --tile "$t"
  done
  local set=${NCU_SET:---set full}
  for c in ${NCU_CASES-lms-small mlp-down conv}; do
    # shellcheck disable=SC2086  # NCU_SET is a list of options
    stage "$w" "ncu-$c" 150 ncu --clock-control none $set --kernel-name-base mangled \
      -k regex:fusec -c 4 -o "$w/ncu-$c" python3 benchmarks/profile_cases.py --case "$c" \
      --impl fusec --reps 1 --no-profiler
    [ "$DRY" = 1 ] && continue
    ncu --import "$w/ncu-$c.ncu-rep" --print-summary per-kernel >"$w/ncu-$c.txt" 2>&1
    ncu --import "$w/ncu-$c.ncu-rep" >"$w/ncu-$c-full.txt" 2>&1
    ncu --import "$w/ncu-$c.ncu-rep" --page source --print-source sass --csv \
      >"$w/ncu-$c-sass.csv" 2>&1
    grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Throughput|Achieved Occupancy|Dynamic Shared|Local Memory|No Eligible" \
      "$w/ncu-$c-full.txt" | head -60
  done
  if [ -n "${NCU_COMPILE-1}" ]; then
    # shellcheck disable=SC2086
    stage "$w" ncu-conv-compile 150 ncu --clock-control none $set -k "regex:sm90|triton" -c 4 \
      -o "$w/ncu-conv-compile" python3 benchmarks/profile_cases.py --case conv --impl compile \
      --reps 1 --no-profiler
    if [ "$DRY" != 1 ]; then
      ncu --import "$w/ncu-conv-compile.ncu-rep" >"$w/ncu-conv-compile-full.txt" 2>&1
      grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Throughput" "$w/ncu-conv-compile-full.txt" \
        | head -40
    fi
  fi
  [ "$DRY" = 1 ] && return 0
  (cd "$w" && tar czf "$OUT/profile.tgz" .)
}

stage_w4() {
  # shellcheck disable=SC2086  # W4_FIRST: empty, or one number
  stage "$OUT" w4_sweep "${SWEEP_TIMEOUT:-240}" python3 benchmarks/gemm_bench.py \
    --w4-ring-sweep ${W4_FIRST:-}
  stage "$OUT" w4_tests "${TEST_TIMEOUT:-150}" $PYTEST -n 8 tests/targets/cuda/test_w4a16_gpu.py
  [ "${W4_NCU:-1}" = 1 ] || return 0
  local best=0
  if [ "$DRY" != 1 ]; then  # the sweep's lines: "[I] ... warm <us> us ..."
    best=$(grep '^\[' "$OUT/w4_sweep.log" | head -"${W4_PICK:-8}" \
      | awk '{for (i = 1; i <= NF; i++) if ($i == "warm") {gsub(/[][]/, "", $1); print $1, $(i + 1)}}' \
      | sort -k2 -n | head -1 | cut -d' ' -f1)
    echo "fastest of the first ${W4_PICK:-8}: variant ${best:-none}"
    [ -n "$best" ] || return 0
  fi
  stage "$OUT" w4_ncu 150 ncu --clock-control none --profile-from-start off --set full \
    -o "$OUT/w4-ncu" python3 benchmarks/gemm_bench.py --w4-profile "$best"
  [ "$DRY" = 1 ] && return 0
  ncu --import "$OUT/w4-ncu.ncu-rep" --page details >"$OUT/w4-ncu.txt" 2>&1 \
    && rm "$OUT/w4-ncu.ncu-rep"  # (the text: a report file may be too large to come back)
  grep -E "Duration|DRAM Throughput|Issue Slots|Registers Per|No Eligible|Eligible Warps" \
    "$OUT/w4-ncu.txt" | head -12
}

stage_zoo() {
  if [ "$DRY" = 1 ]; then
    echo "[zoo] bash benchmarks/models_gpu_device.sh"
    return 0
  fi
  bash benchmarks/models_gpu_device.sh
}

for name in "$@"; do
  echo "=== stage $name"
  "stage_${name//-/_}"
done
ls "$OUT"
