#!/usr/bin/env bash
# Alias of `benchmarks/device.sh gemm-variants` (the GPU machine's one script; its header lists the
# stage's options). Kept so the commands in notes and results still run.
export OUT=${OUT:-/tmp/gemm-variants-out}
exec bash "$(dirname "$0")/device.sh" gemm-variants "$@"
