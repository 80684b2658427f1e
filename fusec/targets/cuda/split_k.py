"""Split-K's workspace on the host side, shared by the templates that split a tile's
reduction among several blocks (the GEMM, the implicit-GEMM conv; the device side is the
kernel layer's ``include/fusec/split_k.cuh``).

A launch needs, per stream, every split's partial tile (f32) and one counter per tile.
The counters are zeroed once, when allocated (a ``cuMemsetD32Async`` queued on the stream
before the first launch that uses them): the last split of a tile sets its counter back to
0, so no call pays a memset. Each stream has its own workspace (calls on one stream are
ordered; calls on two would share counters).
"""

from __future__ import annotations

from typing import Any

from fusec.environ import getenv
from fusec.targets.cuda.tensormaps import _check

#: The heuristics' split-K is opt-in until the whole GPU lane has run with it:
#: ``FUSEC_SPLIT_K=on`` (read when the tiles are chosen) makes ``choose_config`` and the
#: conv's ``choose_tile`` split under-filled problems, ``FUSEC_SPLIT_K=conv`` the conv's
#: only; a forced tile (``sk=N``, ``$FUSEC_CONV_TILE``) splits either way. Its GPU tests
#: turn it on (tests/targets/cuda/test_*_split_k_gpu.py).
SPLIT_K_ENV = "FUSEC_SPLIT_K"


def heuristic_split_k(template: str) -> bool:
    """Whether the heuristic of ``template`` ("gemm" or "conv") splits under-filled problems:
    ``$FUSEC_SPLIT_K`` "on" (both), "conv" (the implicit-GEMM conv only: measured on the
    H200, ResNet-50 at batch 1 0.761 -> 0.460 ms, where the GEMM's splits of 3-6 K steps
    lost 10-35%: benchmarks/results/gemm-split-k-ab.md, models-gpu-split-k.md), else off."""
    value = getenv(SPLIT_K_ENV, "off").strip().lower()
    return value in ("1", "on", "true", "yes") or (value == "conv" and template == "conv")


def workspace(
    drv: Any, scratch: dict[tuple, int], stream: int, tiles: int, splits: int, tile_elements: int
) -> tuple[int, int]:
    """(partials, counters) device addresses for ``tiles`` tiles of ``tile_elements``
    accumulators split ``splits`` ways on ``stream``, kept in ``scratch`` (the kernel's
    per-stream buffers)."""
    partials = 4 * tiles * splits * tile_elements
    key = (stream, "split-k partials", partials, tiles)
    count_key = (stream, "split-k counters", partials, tiles)
    if key not in scratch:
        scratch[key] = int(_check(drv.cuMemAlloc(partials)))
        counters = int(_check(drv.cuMemAlloc(4 * tiles)))
        _check(drv.cuMemsetD32Async(drv.CUdeviceptr(counters), 0, tiles, drv.CUstream(stream)))
        scratch[count_key] = counters
    return scratch[key], scratch[count_key]
