#!/usr/bin/env bash
# One device call for the conv and attention kernels (issue 12): the GPU tests of each
# template (simplest first, each stage under its own time limit so a hung kernel costs
# only its stage), then the benchmark, which writes its tables after every case.
#
#   bash benchmarks/conv_attn_device.sh              # from the repository root, or anywhere
#
# Optional: MAX_AUTOTUNE=1 adds torch.compile(mode="max-autotune") to the conv and ResNet
# rows (each compiled in a child process, skipped past MAX_AUTOTUNE_BUDGET seconds, default
# 240); CONV_TILES (default "64x128 s6 c2n;64x192 s4 c1n", empty for none) lists implicit-
# GEMM conv tiles to A/B against the default on the conv row, fusec alone
# ($OUT/tile-<tile>/), after the full benchmark; CONV_INPUTS (default "nhwc nchw nchw-ld") A/Bs
# $FUSEC_CONV_INPUT on the conv row and its 1x1 twin, fusec alone ($OUT/input-<layout>/);
# CONV_EPILOGUES (default "inline early handoff") A/Bs $FUSEC_CONV_EPILOGUE on the conv row and the
# ResNet block, fusec alone, with the block's per-kernel profile ($OUT/epilogue-<mode>/).
#
# The device tool's $OUT receives the logs and tables (default /tmp/conv-attn); WHL
# (default .whl of the repository root) holds the pure-Python wheels the machine lacks,
# installed into /tmp/site; FUSEC_COMMIT (default: git's short HEAD, "+dirty" when the
# tree differs, or "unknown" without git) goes into the tables.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
if [ -z "${FUSEC_COMMIT:-}" ]; then
  FUSEC_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ "$FUSEC_COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    FUSEC_COMMIT="$FUSEC_COMMIT+dirty"
  fi
fi
export FUSEC_COMMIT
OUT=${OUT:-/tmp/conv-attn}
WHL=${WHL:-$ROOT/.whl}
mkdir -p "$OUT"
echo "commit $FUSEC_COMMIT, results in $OUT" | tee "$OUT/commit.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$WHL"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$ROOT PYTHONUNBUFFERED=1 FUSEC_CACHE_DIR=/tmp/fusec-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv | tee "$OUT/device.txt"

stage() {  # stage NAME SECONDS COMMAND...: run (a program, not a shell function: `timeout`
  # execs it), keep the log, print its tail and status
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s"
  grep -E "PASSED|FAILED|ERROR|passed|failed|rror|Timeout|^\| " "$OUT/$name.log" | tail -30
}

PYTEST="python3 -m pytest -m gpu -v -p no:cacheprovider -rfE --tb=short"

# 1. conv: implicit GEMM (odd sizes, strides, padding, groups, bf16, epilogues), direct
#    (depthwise), fallback; results on the caller's stream
stage conv_tests 150 $PYTEST tests/targets/cuda/test_conv_gpu.py \
  -k "not nchw and not epilogue_loads and not early_loads and not handoff"
# 1a. the epilogue's inputs read at each element (the default) and loaded ahead of use
#     (FUSEC_CONV_EPILOGUE=early, opt-in): the ResNet block (bench size and ragged), bf16
#     residual, odd W, split-m row loads, a misaligned residual
stage conv_epilogue_tests 180 $PYTEST tests/targets/cuda/test_conv_gpu.py -k "epilogue_loads or early_loads"
# 1b'. the conv -> conv hand-off in channels-last (FUSEC_CONV_HANDOFF=nhwc, opt-in; the tests
#     force it on): ResNet blocks at bench size, ragged, odd W, bf16, both epilogue loads
stage conv_handoff_tests 180 $PYTEST tests/targets/cuda/test_conv_gpu.py -k handoff
# 1b. the opt-in FUSEC_CONV_INPUT=nchw / nchw-ld variants (NCHW input read in place by
#     TMA / loaded by the producer warpgroup, no channels-last copy; the tests force them
#     on): their own stage, so a hang costs only it
stage conv_nchw_tests 240 $PYTEST tests/targets/cuda/test_conv_gpu.py -k nchw
# 2. attention through compile (written, exported and traced chains -> ai.attention): the
#    flash kernel (ragged, 4-D batch, bf16, causal), the PyTorch fallback, the caller's stream
stage attention_tests 90 $PYTEST tests/targets/cuda/test_attention_gpu.py
# 3. the benchmark (conv, ResNet block, attention x2) against eager / compile / NHWC / SDPA
BENCH_ARGS=()
BENCH_LIMIT=150
if [ "${MAX_AUTOTUNE:-0}" = 1 ]; then
  BENCH_ARGS=(--max-autotune --max-autotune-budget "${MAX_AUTOTUNE_BUDGET:-240}")
  BENCH_LIMIT=$((150 + 2 * ${MAX_AUTOTUNE_BUDGET:-240}))
fi
stage bench "$BENCH_LIMIT" python3 benchmarks/conv_attn_bench.py --out "$OUT" "${BENCH_ARGS[@]}"
cat "$OUT"/conv-attn-*.md 2>/dev/null
# 4. conv tile A/B: the conv row, fusec alone, with each tile of CONV_TILES forced
IFS=';' read -r -a TILES <<<"${CONV_TILES-64x128 s6 c2n;64x192 s4 c1n}"
for tile in "${TILES[@]}"; do
  [ -n "$tile" ] || continue
  dir="$OUT/tile-${tile// /_}"
  FUSEC_CONV_TILE=$tile stage "tile-${tile// /_}" 60 \
    python3 benchmarks/conv_attn_bench.py --out "$dir" --only conv --fusec-only
  cat "$dir"/conv-attn-*.md 2>/dev/null | tail -1
done
# 5. input A/B (CONV_INPUTS, default "nhwc nchw nchw-ld", empty for none): the conv row,
#    the ResNet block and the conv's 1x1 twin, fusec alone, with FUSEC_CONV_INPUT forced
#    ($OUT/input-<layout>/). nchw (TMA) reads the input in place only where every tap shift along W is a multiple
#    of 8 pixels (TMA reads start 16-byte aligned): the 1x1 row; on the 3x3 conv row it is
#    refused (the kernel header says why) and re-measures the channels-last copy, a
#    control for the noise. nchw-ld (the producer warpgroup's loads) serves all three.
for layout in ${CONV_INPUTS-nhwc nchw nchw-ld}; do
  dir="$OUT/input-$layout"
  FUSEC_CONV_INPUT=$layout stage "input-$layout" 120 \
    python3 benchmarks/conv_attn_bench.py --out "$dir" --only conv,resnet,pointwise --fusec-only
  cat "$dir"/conv-attn-*.md 2>/dev/null | tail -3
done
# 6. epilogue-load A/B (CONV_EPILOGUES, default "inline early handoff", empty for none): the conv
#    row and the ResNet block, fusec alone, and the block's per-kernel GPU times
#    (torch.profiler), with FUSEC_CONV_EPILOGUE forced ($OUT/epilogue-<mode>/)
#    A mode "handoff" runs early loads with FUSEC_CONV_HANDOFF=nhwc (conv1 stores channels-
#    last, conv2 skips its copy).
for mode in ${CONV_EPILOGUES-inline early handoff}; do
  dir="$OUT/epilogue-$mode"
  loads=$mode
  if [ "$mode" = handoff ]; then export FUSEC_CONV_HANDOFF=nhwc; loads=early; else unset FUSEC_CONV_HANDOFF; fi
  FUSEC_CONV_EPILOGUE=$loads stage "epilogue-$mode" 90 \
    python3 benchmarks/conv_attn_bench.py --out "$dir" --only conv,resnet --fusec-only
  cat "$dir"/conv-attn-*.md 2>/dev/null | tail -2
  FUSEC_CONV_EPILOGUE=$loads timeout 60 python3 benchmarks/profile_cases.py --case resnet \
    --impl fusec >"$dir/profile-resnet.log" 2>&1
  echo "== profile resnet [$mode]: rc=$?"
  grep -E "^--|GPU kernel time|^ +[0-9.]+ us" "$dir/profile-resnet.log" | cut -c1-110 | head -12
done
unset FUSEC_CONV_HANDOFF
