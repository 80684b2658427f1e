"""Work sharing inside a cpu kernel: tasks take block numbers from a shared counter.

A parallel kernel's ``prange`` runs one task per thread; each task takes the next
block number from ``counter`` (an atomic fetch-and-add) until none are left,
instead of a fixed share of the blocks. A thread the OS or the hypervisor slows
down (another process, or a busy neighbour on the host's core: on the 2-vCPU
development VM one vCPU ran a softmax half 2x slower than the other in some
calls, benchmarks/results/cpu-notes.md) then holds up only the block it is in,
and the other threads take the rest.
"""

from __future__ import annotations

import numba
from numba import types
from numba.extending import intrinsic
from numba.np.ufunc import parallel as _parallel

from fusec.runtime.numba_cache import sealed_njit


@intrinsic
def _fetch_add(typingctx, counter, value):
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        raise numba.core.errors.TypingError("fetch_add: counter must be an int64 array")
    sig = types.int64(counter, types.int64)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        value = context.cast(builder, args[1], signature.args[1], types.int64)
        return builder.atomic_rmw("add", data, value, "monotonic")

    return sig, codegen


def num_threads() -> int:
    """``numba.get_num_threads()`` for the launch code, without its lock dance once
    Numba's threads run: the threading layer's own (per calling thread) count,
    ``parallel._get_num_threads``, set when the threads start. The public call takes
    a process-wide lock every time: ~45 us in a call after an idle pause (cold
    caches), the counter ~2 us (benchmarks/results/cpu-notes.md)."""
    if _parallel._is_initialized:
        return _parallel._get_num_threads()
    return numba.get_num_threads()


@sealed_njit
def next_block(counter):
    """The next block number for the calling task: an atomic fetch-and-add on counter[0]."""
    return _fetch_add(counter, 1)
