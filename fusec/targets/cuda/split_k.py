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

#: Which heuristics split under-filled problems (read when the tiles are chosen):
#: ``FUSEC_SPLIT_K=auto``, the default, the conv's ``choose_tile`` for ungrouped convs
#: (measured on the H200, 2026-12-03, CNN zoo with and without: ResNet-50 b1 0.761 ->
#: 0.458 ms, MobileNetV3 b1 0.425 -> 0.361, EfficientNet-B0 b1 0.646 -> 0.596, batch 32
#: unchanged or faster) and the GEMM's ``choose_config``, whose splits are at least
#: ``config.SPLIT_MIN_STEPS`` K steps deep (batch-1 deep-K GEMMs on the 64x64 tile,
#: benchmarks/results/gemm-epilogue-ab-b1.md: BERT-base's MLP down 13.7 -> 11.2 us at 3
#: splits, ConvNeXt-T's stage-4 MLP down 13.6 -> 11.1; shallower splits lost 10-35%,
#: gemm-split-k-ab.md, and the heuristic makes none); ``conv`` the conv's alone; ``on``
#: grouped convs too; ``off`` none. A forced tile (``sk=N``, ``$FUSEC_CONV_TILE``) splits
#: either way.
SPLIT_K_ENV = "FUSEC_SPLIT_K"
SPLIT_K_DEFAULT = "auto"


def heuristic_split_k(template: str, grouped: bool = False) -> bool:
    """Whether the heuristic of ``template`` ("gemm" or "conv") splits under-filled problems:
    ``$FUSEC_SPLIT_K`` "on" (both, grouped convs too), "auto" (the default: the GEMM,
    measured on batch-1 GEMMs alone, and ungrouped convs, measured in the CNN zoo), "conv"
    (ungrouped convs alone), else neither."""
    value = getenv(SPLIT_K_ENV, SPLIT_K_DEFAULT).strip().lower()
    if value in ("1", "on", "true", "yes"):
        return True
    if value == "auto":
        return template == "gemm" or not grouped
    return value == "conv" and template == "conv" and not grouped


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
