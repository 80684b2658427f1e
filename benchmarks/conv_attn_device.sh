#!/usr/bin/env bash
# One device call for the conv and attention kernels (issue 12): the GPU tests of each
# template (simplest first, each stage under its own time limit so a hung kernel costs
# only its stage), then the benchmark, which writes its tables after every case.
#
#   OUT=/some/dir WHL=path/to/.whl bash benchmarks/conv_attn_device.sh
#
# Run from the repository root on the GPU machine; WHL holds the pure-Python wheels
# the machine lacks (../shared/tools/device-wheels.sh). Logs and tables go to $OUT.
set -u
export FUSEC_COMMIT=${FUSEC_COMMIT:-}
OUT=${OUT:-/tmp/conv-attn}
WHL=${WHL:-.whl}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$WHL"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FUSEC_CACHE_DIR=/tmp/fusec-cache
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
stage conv_tests 100 $PYTEST tests/cuda/test_conv_gpu.py
# 2. attention: ragged, 4-D batch, bf16, causal; the caller's stream
stage attention_tests 60 $PYTEST tests/cuda/test_attention_gpu.py
# 3. the benchmark (conv, ResNet block, attention x2) against eager / compile / NHWC / SDPA
stage bench 150 python3 benchmarks/conv_attn_bench.py --out "$OUT"
cat "$OUT"/conv-attn-*.md 2>/dev/null
