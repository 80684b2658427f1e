"""Numba's worker threads on CPUs of their own while a cpu kernel runs.

Why. A cpu kernel splits its work over Numba's OpenMP threads: the calling
thread (thread 0) and the pool's workers. fusec's workers sleep between calls
(``OMP_WAIT_POLICY=PASSIVE``, ``fusec.targets.cpu.threads``), and the Linux
scheduler places a thread woken after a pause of a few ms on the CPU of the
thread that woke it (wake-affine placement), although another CPU is idle. The
worker then waits for the caller to finish its half, and the two halves run one
after the other. Measured on the 2-core VM (KVM, 2026-12-01): a C test (a
pthread woken by a futex while the waker spins) lands on the waker's CPU 60/60
times after a 5 ms pause (0/60 with none); a ``prange(2)`` Numba kernel of
2 x 2.5 ms took ~5 ms in 19-30 of 40 calls with 20 ms pauses between calls;
fusec's attention graph (B1 H12 S512 D64, 2 threads) ran at a median of
9.1-10.1 ms with 20-100 ms pauses against 4.8-5.0 ms back to back, and at
5.3-6.1 ms, no call slow, with this module (``benchmarks/cpu_pin_ab.py``, deleted,
git history 831df23; ``benchmarks/results/cpu-notes.md`` has the tables). onnxruntime dodges the
wake-up because its pool spins ~20 ms after each call. ``OMP_PROC_BIND=true``
fixes the kernel too, but libgomp then pins the *calling* thread to CPU 0 for
good: every thread the program creates later inherits that one CPU.

What. Once per calling thread and thread count, each worker of the calling
thread's pool (libgomp gives every calling thread a pool of its own) is pinned
to one CPU of the caller's allowed set, distinct ones; during a launch the
caller itself is confined to the other CPUs of its set, and its mask is put
back right after (two ``sched_setaffinity`` calls, ~3 us each here). The
user's thread is never left pinned, a mask the user set is respected (CPUs are
chosen inside it, and a changed mask is noticed, see below), and
concurrent callers get CPU blocks of their own while the set has room for
them. A kernel whose previous call took under ``LONG_S`` runs with the caller
unconfined: waking a worker on another, idle vCPU costs tens of us here (a
pointwise kernel of 2**16 elements called back to back: 34 us unpinned, 79-110
us confined), more than such a kernel gains from the second core. Nor is a caller
confined that already runs on one of its own CPUs (``sched_getcpu``, no system
call): the workers' CPUs are free, and the two ``sched_setaffinity`` calls (~20 us
together after an idle pause here) would be all the confinement did. The mask
is read (``sched_getaffinity``, as costly) at a thread's first launch, at its
first launch ``MASK_CHECK_S`` or more after the last read, and at once when the
caller runs on a CPU outside the mask its placement was made for.

Pinning is skipped, logged at debug level on this module's logger, when the
platform is not Linux, the set has fewer CPUs than Numba's thread count, Numba's
threading layer is not ``omp`` (TBB moves workers between arenas;
``workqueue`` runs no task on the caller), or ``FUSEC_CPU_PIN=0``. The workers
stay pinned between launches: Numba code of the user's own that runs on the
same pool finds them so.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from fusec.environ import getenv
from fusec.targets.cpu.tasks import num_threads

#: ``FUSEC_CPU_PIN=0`` turns pinning off (any other value, or unset: on where it can work).
ENV_VAR = "FUSEC_CPU_PIN"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """Where one calling thread's Numba threads run (``caller_cpus`` None: not pinned)."""

    enabled: bool
    threads: int
    #: The caller's own mask when this placement was made.
    allowed: frozenset[int]
    #: OS thread ids of the workers (Numba thread ids 1, 2, ...) and the CPU of each.
    workers: tuple[int, ...] = ()
    worker_cpus: tuple[int, ...] = ()
    #: The caller's mask during a launch; None: the launch runs unpinned.
    caller_cpus: frozenset[int] | None = None
    #: Why it is not pinned (None when it is).
    reason: str | None = None


#: Seconds: a kernel whose last call took less runs with the caller unconfined
#: (see the module docstring).
LONG_S = 2e-4
#: Seconds: the caller's CPU mask is read again at its first launch this long after the
#: last read (see the module docstring).
MASK_CHECK_S = 0.5
#: id(kernel) -> its last call took under ``LONG_S``. A plain dict, not a weak one: a
#: ``WeakKeyDictionary`` lookup and store cost ~20 us together in a call after an idle
#: pause (cold caches); an id reused by a later kernel only starts from a stale guess.
_short: dict[int, bool] = {}
_local = threading.local()
_ordinals_lock = threading.Lock()
_ordinals_in_use: set[int] = set()
#: Set to a reason once pinning is found impossible for the whole process.
_unsupported: str | None = None if sys.platform.startswith("linux") else "not Linux"


def _getcpu_function() -> Callable[[], int] | None:
    """glibc's ``sched_getcpu`` (vDSO or rseq: no system call), None without one."""
    if _unsupported is not None:
        return None
    function = getattr(ctypes.CDLL(None), "sched_getcpu", None)
    if function is None:
        return None
    function.restype, function.argtypes = ctypes.c_int, []
    return function


_sched_getcpu = _getcpu_function()


def run(fn: Callable[..., Any], args: list[Any]) -> Any:
    """``fn(*args)`` with the calling thread's Numba threads on CPUs of their own."""
    cpu = _current_cpu()
    placement = _local.__dict__.get("scoped") or _placement(cpu)
    if placement.caller_cpus is None:
        return fn(*args)
    key = id(fn)
    if _short.get(key, False):
        start = time.perf_counter()
        result = fn(*args)
        if time.perf_counter() - start >= LONG_S:
            _short[key] = False
        return result
    confine = cpu not in placement.caller_cpus
    if confine:
        os.sched_setaffinity(0, placement.caller_cpus)
    start = time.perf_counter()
    try:
        return fn(*args)
    finally:
        _short[key] = time.perf_counter() - start < LONG_S
        if confine:
            os.sched_setaffinity(0, placement.allowed)


class Scope:
    """The calling thread's placement, checked once for all the launches of a call
    (``CpuBackend.call_scope``) rather than at each (~0.6 us a launch)."""

    def __enter__(self) -> None:
        # Only a placement still current: making one runs a parallel probe kernel, which
        # the first launch does (under the backend's lock where Numba's layer needs one).
        placement = _local.__dict__.get("placement")
        current = placement is not None and _still_current(placement, _current_cpu())
        _local.scoped = placement if current else None

    def __exit__(self, *exc: object) -> None:
        _local.scoped = None


def _placement(cpu: int) -> Placement:
    """The calling thread's placement, made afresh when its thread count, opt-out or
    mask changed (the mask read as the module docstring says)."""
    placement: Placement | None = getattr(_local, "placement", None)
    if placement is not None and _still_current(placement, cpu):
        return placement
    allowed = frozenset(os.sched_getaffinity(0)) if _unsupported is None else frozenset()
    _local.mask_read = time.monotonic()
    if (
        placement is None
        or placement.allowed != allowed
        or placement.threads != num_threads()
        or placement.enabled != _enabled()
    ):
        placement = _place(allowed)
    return placement


def _still_current(placement: Placement, cpu: int) -> bool:
    """``placement`` holds for the calling thread on ``cpu`` without a system call."""
    return (
        placement.threads == num_threads()
        and placement.enabled == _enabled()
        and (cpu in placement.allowed or _unsupported is not None)
        and time.monotonic() - _local.mask_read < MASK_CHECK_S
    )


def _current_cpu() -> int:
    """The CPU the calling thread runs on now (-1 where that cannot be asked)."""
    return _sched_getcpu() if _sched_getcpu is not None else -1


def current() -> Placement | None:
    """The calling thread's placement (None before its first launch)."""
    return getattr(_local, "placement", None)


def _enabled() -> bool:
    return getenv(ENV_VAR, "1").strip() != "0"


def _place(allowed: frozenset[int]) -> Placement:
    """Undo the calling thread's previous placement and make the one for now."""
    previous: Placement | None = getattr(_local, "placement", None)
    if previous is not None:
        _unpin(previous.workers, allowed)
    threads = numba.get_num_threads()
    placement = _plan(allowed, threads)
    if placement.reason is not None:
        log.debug("fusec: cpu threads not pinned: %s", placement.reason)
    _local.placement = placement
    return placement


def _plan(allowed: frozenset[int], threads: int) -> Placement:
    global _unsupported
    unpinned = Placement(_enabled(), threads, allowed)
    if not unpinned.enabled:
        return _skip(unpinned, f"{ENV_VAR}=0")
    if _unsupported is not None:
        return _skip(unpinned, _unsupported)
    if threads < 2:
        return _skip(unpinned, "one thread")
    if len(allowed) < threads:
        return _skip(unpinned, f"{len(allowed)} allowed CPUs < {threads} threads")
    tids = _numba_thread_ids(threads)
    layer = numba.threading_layer()
    if layer != "omp":
        _unsupported = f"Numba's threading layer is {layer}, not omp"
        return _skip(unpinned, _unsupported)
    if tids is None:
        return _skip(unpinned, "not every Numba thread ran a task of the probe")
    cpus = _block(sorted(allowed), threads)
    workers, worker_cpus = tuple(tids[1:]), tuple(cpus[1:])
    try:
        for tid, cpu in zip(workers, worker_cpus, strict=True):
            os.sched_setaffinity(tid, {cpu})
    except OSError as err:
        _unpin(workers, allowed)
        return _skip(unpinned, f"sched_setaffinity failed: {err}")
    caller = allowed - set(worker_cpus)
    return Placement(True, threads, allowed, workers, worker_cpus, frozenset(caller))


def _skip(placement: Placement, reason: str) -> Placement:
    return Placement(placement.enabled, placement.threads, placement.allowed, reason=reason)


def _unpin(workers: tuple[int, ...], allowed: frozenset[int]) -> None:
    for tid in workers:
        try:
            os.sched_setaffinity(tid, allowed)
        except OSError:  # the thread is gone
            pass


def _block(cpus: list[int], threads: int) -> list[int]:
    """``threads`` CPUs for the calling thread: a block of its own while ``cpus`` has
    room for one per calling thread, shared round-robin beyond that."""
    ordinal = getattr(_local, "ordinal", None)
    if ordinal is None:
        ordinal = _local.ordinal = _Ordinal()
    start = (ordinal.value % (len(cpus) // threads)) * threads
    return cpus[start : start + threads]


class _Ordinal:
    """The smallest number no other live calling thread holds; given back when the
    thread ends (its ``threading.local`` storage is dropped then)."""

    def __init__(self) -> None:
        with _ordinals_lock:
            self.value = next(k for k in itertools.count() if k not in _ordinals_in_use)
            _ordinals_in_use.add(self.value)
        weakref.finalize(self, _ordinals_in_use.discard, self.value)


def _numba_thread_ids(threads: int) -> list[int] | None:
    """The OS thread id of each of the calling thread's Numba threads (index = Numba's
    thread id; 0 is the caller), or None if a probe left one out."""
    if not hasattr(ctypes.CDLL(None), "gettid"):  # glibc < 2.30
        global _unsupported
        _unsupported = "the C library has no gettid"
        return None
    from fusec.runtime.cache import default_cache

    probe = default_cache().load_module(PROBE_SOURCE, target="cpu").probe
    tids = np.zeros(threads, np.int64)
    for _ in range(3):
        tids[:] = 0
        probe(tids)
        if tids[0] == threading.get_native_id() and np.all(tids > 0):
            if len(set(tids.tolist())) == threads:
                return tids.tolist()
    return None


@intrinsic
def gettid(typingctx):
    """The calling thread's OS thread id (glibc's ``gettid``), in Numba code."""
    sig = types.int32()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, "gettid"), [])

    return sig, codegen


#: Each Numba thread writes its OS thread id at its Numba thread id. A module loaded
#: through the default kernel cache like the kernels (sealed), not an
#: ``njit(cache=True)`` here: Numba's own cache files are unauthenticated pickles that
#: another user could plant (``fusec.runtime.numba_cache``).
PROBE_SOURCE = """\
# fusec: the OS thread id of every Numba thread (fusec.targets.cpu.affinity)
import numba

from fusec.runtime.numba_cache import cached_njit
from fusec.targets.cpu.affinity import gettid


@cached_njit(numba.void(numba.int64[::1]), parallel=True)
def probe(tids):
    for _ in numba.prange(tids.size):
        tids[numba.get_thread_id()] = gettid()
"""


def _forget_after_fork() -> None:
    """A forked child has new threads: its next launch places them afresh."""
    _local.__dict__.pop("placement", None)
    _local.__dict__.pop("scoped", None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
