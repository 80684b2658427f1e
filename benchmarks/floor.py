"""The memory-bandwidth floor of the cpu benchmarks: a parallel copy in Numba."""

from __future__ import annotations

import numba


@numba.njit(parallel=True)
def parallel_copy(src, dst):
    """dst[:] = src[:], split into a few chunks per Numba thread."""
    tasks = numba.get_num_threads() * 4
    per = (src.size + tasks - 1) // tasks
    for t in numba.prange(tasks):
        end = min(t * per + per, src.size)
        dst[t * per : end] = src[t * per : end]
