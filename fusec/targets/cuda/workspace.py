"""``scratch_f32`` / ``scratch_f64``: the float32 / float64 workspace of a generated
kernel module, one per stream.

A two-pass reduction (``fusec.targets.cuda.reduce``) writes its partial results to a
workspace that the second kernel reads. As the GEMM's scratch buffers
(``gemm.launcher``), it is allocated once per stream (``cuMemAlloc``, never freed:
stream order keeps two calls on one stream from overlapping, and calls on two streams
get two buffers) and kept in a dict the module owns. The allocation goes straight to
the driver, never through Numba's memory manager, whose pending frees would run
``cuMemFree`` (which synchronises) inside a CUDA graph capture.
"""

from __future__ import annotations

from typing import Any

from fusec.targets.cuda.env import numba_cuda, simulator_enabled


def scratch_f32(cache: dict, count: int, stream: Any) -> Any:
    """A float32 device array of ``count`` elements for work queued on ``stream``, from
    ``cache`` (the calling module's) or allocated there once."""
    return _scratch(cache, count, stream, 4)


def scratch_f64(cache: dict, count: int, stream: Any) -> Any:
    """As ``scratch_f32``, of float64 elements (the partial sums of a two-pass reduction
    of float32 or bfloat16 values, which a float32 sum may overflow)."""
    return _scratch(cache, count, stream, 8)


def _scratch(cache: dict, count: int, stream: Any, itemsize: int) -> Any:
    from fusec.targets.cuda.streams import stream_ptr

    key = 0 if simulator_enabled() else stream_ptr(stream)
    array = cache.get(key)
    if array is None:
        array = cache[key] = _allocate(count, itemsize)
    return array


def _allocate(count: int, itemsize: int = 4) -> Any:
    import numpy as np

    cuda = numba_cuda()
    dtype = np.float32 if itemsize == 4 else np.float64
    if simulator_enabled():
        return cuda.device_array(count, dtype)
    from cuda.bindings import driver as drv

    from fusec.targets.cuda.adapters import _check

    ptr = int(_check(drv.cuMemAlloc(max(itemsize * count, 16))))
    typestr = np.dtype(dtype).str
    interface = {"shape": (count,), "typestr": typestr, "data": (ptr, False), "version": 3}
    return cuda.from_cuda_array_interface(interface, owner=None, sync=False)
