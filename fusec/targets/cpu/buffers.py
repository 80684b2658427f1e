"""The cpu back end's output buffers: large ones come from a pool of reused blocks.

A fresh ``np.empty`` of a few MiB is memory the kernel has just mapped: the
kernel's first write to each page faults and the kernel zeroes it. For a
memory-bound kernel that is most of the call: layernorm 4096x1024 (16 MiB out)
ran in 1.6 ms with an output whose pages were already mapped and 8-12 ms
(CPU 4-6 ms, ~490 page faults) when numpy had freed and unmapped its own
temporaries in between (``benchmarks/results/cpu-notes.md``). onnxruntime's
arena reuses its blocks, so it never pays this.

``BufferPool.empty`` hands out a view of a pooled block (``Lease``: the numpy
array's base, so every view derived from the result keeps it alive). When the
last such view is gone, CPython's reference counting drops the lease and its
block goes back to the pool's free list, to be handed out again already
mapped. The free list holds at most ``max_free_bytes`` (blocks beyond it are
dropped, returning their memory to the allocator); arrays under ``MIN_BYTES``
come from ``np.empty`` directly (malloc's heap reuses those).
"""

from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np

from fusec.ir.memory import memory_limit

#: Arrays smaller than this are not pooled: malloc serves them from its heap, mapped.
MIN_BYTES = 1 << 20
#: Bytes the free lists may hold, at most (and at most 1/8 of ``memory_limit()``).
MAX_FREE_BYTES = 1 << 30


class Lease:
    """One pooled block lent to a numpy array (the array's ``base``); returns the block
    to its pool when the last array viewing it is gone."""

    __slots__ = ("__array_interface__", "_block", "_pool")

    def __init__(self, pool: BufferPool, block: np.ndarray, shape: tuple[int, ...]) -> None:
        self._pool, self._block = pool, block
        self.__array_interface__ = {
            "data": (block.ctypes.data, False),
            "shape": shape,
            "typestr": block.dtype.str,
            "version": 3,
        }

    def __del__(self) -> None:
        self._pool.give_back(self._block)


class BufferPool:
    """Blocks of memory reused for output arrays of the same byte size."""

    def __init__(self, max_free_bytes: int | None = None) -> None:
        self.max_free_bytes = (
            max_free_bytes
            if max_free_bytes is not None
            else min(MAX_FREE_BYTES, memory_limit() // 8)
        )
        self._free: defaultdict[tuple[int, str], list[np.ndarray]] = defaultdict(list)
        self._free_bytes = 0
        # reentrant: a garbage collection inside ``empty`` may drop a lease (``give_back``)
        self._lock = threading.RLock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array, like ``np.empty(shape, dtype)``."""
        dtype = np.dtype(dtype)
        count = 1
        for d in shape:
            count *= d
        if count * dtype.itemsize < MIN_BYTES:
            return np.empty(shape, dtype)
        key = (count, dtype.str)
        with self._lock:
            free = self._free.get(key)
            if free:
                block = free.pop()
                self._free_bytes -= block.nbytes
            else:
                block = np.empty(count, dtype)
        return np.asarray(Lease(self, block, tuple(shape)))

    def give_back(self, block: np.ndarray) -> None:
        """Put ``block`` on its free list, or drop it when the lists are full."""
        with self._lock:
            if self._free_bytes + block.nbytes <= self.max_free_bytes:
                self._free[(block.size, block.dtype.str)].append(block)
                self._free_bytes += block.nbytes

    @property
    def free_bytes(self) -> int:
        return self._free_bytes


_shared: BufferPool | None = None


def shared_pool() -> BufferPool:
    """The process's pool (created on first use: ``memory_limit()`` is read then)."""
    global _shared
    if _shared is None:
        _shared = BufferPool()
    return _shared
