"""The cpu back end's output buffers: large ones come from a pool of reused blocks.

A fresh ``np.empty`` of a few MiB is memory the kernel has just mapped: the
kernel's first write to each page faults and the kernel zeroes it. For a
memory-bound kernel that is most of the call: layernorm 4096x1024 (16 MiB out)
ran in 1.6 ms with an output whose pages were already mapped and 8-12 ms
(CPU 4-6 ms, ~490 page faults) when numpy had freed and unmapped its own
temporaries in between (``benchmarks/results/cpu-notes.md``). onnxruntime's
arena reuses its blocks, so it never pays this.

``BufferPool.empty`` hands out views of pooled arrays: the pool keeps each array
it made, and one is free again when nothing but the pool refers to it (its
reference count; every view of it refers to it as its ``base``), so a block is
never handed out while the caller holds the result or any view of it. A fresh view
each time, not the pooled array itself: a caller may set a result's ``shape`` or
make it read-only, which must not reach the next call's output. The pool
holds at most ``max_free_bytes`` (beyond that, arrays are plain ``np.empty``);
arrays under ``MIN_BYTES`` come from ``np.empty`` directly (malloc's heap reuses
those). An earlier version lent each block through a small object whose
``__del__`` gave it back: building that object and the array over it cost 4 us
a call back to back and ~110 us in a call after a 20 ms pause (cold caches: the
pause between calls of ``benchmarks/cpu_vs_ort.py``), against ~8 us for this
check (benchmarks/results/cpu-notes.md).
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict

import numpy as np

from fusec.ir.memory import memory_limit

#: Arrays smaller than this are not pooled: malloc serves them from its heap, mapped.
MIN_BYTES = 1 << 20
#: Bytes the pool may hold, at most (and at most 1/8 of ``memory_limit()``).
MAX_FREE_BYTES = 1 << 30
#: ``sys.getrefcount`` of a pooled array nothing else refers to: the pool's list and
#: the call's own argument.
_FREE_REFS = 2


class BufferPool:
    """Arrays reused for outputs of the same shape and dtype."""

    def __init__(self, max_free_bytes: int | None = None) -> None:
        self.max_free_bytes = (
            max_free_bytes
            if max_free_bytes is not None
            else min(MAX_FREE_BYTES, memory_limit() // 8)
        )
        self._arrays: defaultdict[tuple[tuple[int, ...], str], list[np.ndarray]] = defaultdict(list)
        self._pooled_bytes = 0
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array, like ``np.empty(shape, dtype)``."""
        dtype = np.dtype(dtype)
        count = 1
        for d in shape:
            count *= d
        nbytes = count * dtype.itemsize
        if nbytes < MIN_BYTES:
            return np.empty(shape, dtype)
        with self._lock:
            arrays = self._arrays[(tuple(shape), dtype.str)]
            for k in range(len(arrays)):
                if sys.getrefcount(arrays[k]) == _FREE_REFS:
                    return arrays[k].view()
            array = np.empty(shape, dtype)
            if self._pooled_bytes + nbytes > self.max_free_bytes:
                return array
            arrays.append(array)
            self._pooled_bytes += nbytes
            return array.view()

    @property
    def free_bytes(self) -> int:
        """Bytes of the pooled arrays nothing outside the pool refers to now."""
        with self._lock:
            return sum(
                a.nbytes
                for arrays in self._arrays.values()
                for a in arrays
                if sys.getrefcount(a) == _FREE_REFS + 1  # + the generator's own name
            )


_shared: BufferPool | None = None
_workspaces = threading.local()


def workspace(floats: int) -> np.ndarray:
    """``floats`` float32s of scratch for one launch of a blocked kernel on this thread
    (its tasks' workspaces): a view of an array kept per calling thread, grown when a
    launch needs more. A fresh ``np.empty`` of a few hundred KiB is mapped anew by
    malloc on each launch: MobileNetV2 at batch 32 took ~2800 page faults a call.
    Launches on one thread run one after the other, so they never share it."""
    arena = getattr(_workspaces, "arena", None)
    if arena is None or arena.size < floats:
        arena = np.empty(max(1, floats), dtype=np.float32)
        _workspaces.arena = arena
    return arena[:floats]


def release_workspace() -> None:
    """Drop this thread's workspace array (the next launch allocates a new one)."""
    _workspaces.arena = None


def shared_pool() -> BufferPool:
    """The process's pool (created on first use: ``memory_limit()`` is read then)."""
    global _shared
    if _shared is None:
        _shared = BufferPool()
    return _shared
