#!/usr/bin/env bash
# One H200 call (<= 570 s) for the GPU model zoo (benchmarks/models_gpu.py, issue 28). Run
# from the repository root with the pure-Python wheels in .whl:
#   run(command="OUT=$OUT bash benchmarks/models_gpu_device.sh", carry=[".whl"], timeout_s=600)
# The default is the --quick matrix (f16, dynamo exporter, batch 1 and the throughput batch,
# fusec and eager for every model first, then torch.compile and reduce-overhead).
# Options (environment):
#   ZOO_ARGS   the matrix instead of --quick, e.g. "--dtypes bf16 --exporters torchscript"
#              or "--models resnet50,llama --no-torch-compile"
#              or "--quick --torch-backend" (torch.compile(backend="fusec") as a column)
#   BUDGET     seconds after which models_gpu.py starts no new case (default 500; each case
#              is cut at that point too, so the call ends within BUDGET + ~40 s)
#   CASE       one worker's limit in seconds (default 240: a CNN's cold kernel builds)
#   JOBS       workers at a time (default 3: the others export and compile while one
#              times; a worker that times holds a lock and stops the others meanwhile, so
#              timings see a quiet machine; all 16 --quick cases in 382 s on 2026-12-03)
#   RESUME=1   continue the last run on a warm machine (same SUFFIX): its JSON lines are kept
#              under .cache/zoo, so a second call adds the cases (or the torch.compile pass)
#              the first one had no time for
#   SUFFIX     the files' suffix (default <date>-h200; RESUME=1: the resumed run's)
#   TESTS=1    first run tests/targets/cuda/test_zoo_gpu.py (-m gpu, 4 workers; at most 240 s, cold
#              kernel builds dominate; out of BUDGET)
# Kernels (FUSEC_CACHE_DIR) and torch.compile's caches live under the repository's ignored
# .cache/, so a second call on a warm machine compiles less. Everything lands in $OUT: the
# table (.md, .json), the raw JSON lines, the bar chart (.png) and the workers' logs (.tgz).
set -u
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export FUSEC_CACHE_DIR=$PWD/.cache/fusec TORCHINDUCTOR_CACHE_DIR=$PWD/.cache/inductor
# three workers' compiles at most 3 x (1 + 4) of the 16 cores
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-4}
# from a tree that is not a checkout (git archive) set FUSEC_COMMIT: git would name the
# enclosing checkout's HEAD
export FUSEC_COMMIT=${FUSEC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
W=$PWD/.cache/zoo
mkdir -p "$W" "$TORCHINDUCTOR_CACHE_DIR"  # fusec makes its own cache folder, private
if [ "${RESUME:-0}" = 1 ] && [ -z "${SUFFIX:-}" ] && [ -f "$W/suffix" ]; then
  SUFFIX=$(cat "$W/suffix")  # the run being resumed, also across midnight
fi
SUFFIX=${SUFFIX:-$(date -u +%F)-h200}
echo "$SUFFIX" > "$W/suffix"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv | tee "$W/device.txt"
if [ "${TESTS:-0}" = 1 ]; then
  t=$SECONDS
  timeout 240 python3 -m pytest -m gpu -q -n 4 -p no:cacheprovider -rfE --tb=short \
    tests/targets/cuda/test_zoo_gpu.py > "$W/tests.log" 2>&1
  echo "== zoo gpu tests: rc=$? in $((SECONDS - t)) s"
  grep -E "^FAILED|^ERROR|passed|failed|skipped" "$W/tests.log" | tail -20
fi
RESUME_ARG=""
[ "${RESUME:-0}" = 1 ] && RESUME_ARG="--resume"
BUDGET=$((${BUDGET:-500} - (SECONDS - T0)))  # what the install and the tests left
# shellcheck disable=SC2086  # ZOO_ARGS is a list of options
timeout $((BUDGET + 40)) python3 benchmarks/models_gpu.py ${ZOO_ARGS:---quick} \
  --budget "$BUDGET" --case-budget "${CASE:-240}" --jobs "${JOBS:-3}" --out "$W" \
  --suffix "$SUFFIX" $RESUME_ARG \
  > "$W/run.log" 2>&1
echo "== models_gpu.py: rc=$? in $((SECONDS - T0)) s"
grep -E "^== " "$W/run.log"
grep -E "^\|" "$W/models-gpu-$SUFFIX.md"
(cd "$W" && tar czf "$OUT/zoo-logs.tgz" logs run.log device.txt tests.log 2>/dev/null)
cp "$W/models-gpu-$SUFFIX".{md,json,jsonl,png} "$OUT/" 2>/dev/null
# --profile (in ZOO_ARGS): one archive, as the machine returns few files from $OUT (16
# profile files crowded the logs out on 2026-12-03)
(cd "$W" && ls profile-*.json > /dev/null 2>&1 && tar czf "$OUT/profiles.tgz" profile-*.json)
ls "$OUT"
