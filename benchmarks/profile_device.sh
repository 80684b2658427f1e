#!/usr/bin/env bash
# Alias of `benchmarks/device.sh profile` (the GPU machine's one script; its header lists the
# stage's options). Kept so the commands in notes and results still run.
exec bash "$(dirname "$0")/device.sh" profile "$@"
