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

from fusec.targets.cuda.tensormaps import _check


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
