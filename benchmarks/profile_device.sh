#!/usr/bin/env bash
# One H200 call that profiles the rows that miss their targets (benchmarks/profile_cases.py):
# torch.profiler kernel tables for fusec / eager / torch.compile, then Nsight Compute
# (hardware counters, --clock-control none) on fusec's kernels and torch.compile's conv.
#   run(command="OUT=$OUT bash benchmarks/profile_device.sh", carry=[".whl"], timeout_s=600)
# Extra tile-gemm variants for a case: PROFILE_TILES='lms-small|tile="128x256x64 s4 c2 g8"'
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FUSEC_CACHE_DIR=/tmp/fusec-cache
W=/tmp/prof; mkdir -p "$W"
P="python3 benchmarks/profile_cases.py"
CASES=${PROFILE_CASES-lms-small mlp-down mlp-up mlp conv}
NCU_CASES=${NCU_CASES-lms-small mlp-down conv}
# only the implementation's own kernels (not the randn that makes the inputs)
NCU_SET=${NCU_SET:---set full}
for c in $CASES; do
  timeout 150 $P --case "$c" > "$W/table-$c.log" 2>&1; echo "== table $c rc=$?"
  grep -E "^==|^--|GPU kernel time|^ +[0-9.]+ us" "$W/table-$c.log" | head -40
done
IFS=';' read -ra EXTRA <<< "${PROFILE_TILES:-}"
for item in "${EXTRA[@]}"; do
  c=${item%%|*}; t=${item#*|}
  timeout 90 $P --case "$c" --impl fusec --tile "$t" > "$W/tile.log" 2>&1
  echo "== tile $c [$t] rc=$?"; grep -E "^--|GPU kernel time|^ +[0-9.]+ us" "$W/tile.log" | head -8
  cat "$W/tile.log" >> "$W/tiles.log"
done
for c in $NCU_CASES; do
  timeout 150 ncu --clock-control none $NCU_SET --kernel-name-base mangled -k regex:fusec -c 4 -o "$W/ncu-$c" \
    $P --case "$c" --impl fusec --reps 1 --no-profiler > "$W/ncu-$c.log" 2>&1
  echo "== ncu $c rc=$?"
  ncu --import "$W/ncu-$c.ncu-rep" --print-summary per-kernel > "$W/ncu-$c.txt" 2>&1
  ncu --import "$W/ncu-$c.ncu-rep" > "$W/ncu-$c-full.txt" 2>&1
  ncu --import "$W/ncu-$c.ncu-rep" --page source --print-source sass --csv \
    > "$W/ncu-$c-sass.csv" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Throughput|Achieved Occupancy|Dynamic Shared|Local Memory|No Eligible" \
    "$W/ncu-$c-full.txt" | head -60
done
[ -n "${NCU_COMPILE-1}" ] && timeout 150 ncu --clock-control none $NCU_SET -k "regex:sm90|triton" -c 4 -o "$W/ncu-conv-compile" \
  $P --case conv --impl compile --reps 1 --no-profiler > "$W/ncu-conv-compile.log" 2>&1
echo "== ncu conv compile rc=$?"
ncu --import "$W/ncu-conv-compile.ncu-rep" > "$W/ncu-conv-compile-full.txt" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Throughput" "$W/ncu-conv-compile-full.txt" | head -40
(cd "$W" && tar czf "$OUT/all.tgz" .)
ls -la "$OUT"
