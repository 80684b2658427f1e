"""BLAS for the cpu kernels: numpy's own single-precision GEMM, callable from Numba code.

The cpu templates run a matmul or conv group as one ``@njit(parallel=True)``
kernel whose tasks each compute blocks of the result: prologue, GEMM of the
block, epilogue, while the block is in cache (see ``fusec.targets.cpu.blocked``).
The GEMM of a block is the ``cblas_sgemm`` of the BLAS numpy links (found with
threadpoolctl), called from inside the kernel:

* its address is registered with LLVM under a fixed name when the kernels
  import their intrinsics (``fusec.targets.cpu.blas_calls``), which call that
  name, so kernels compiled against it stay valid in Numba's on-disk cache (the
  address itself is never baked in);
* each call runs single-threaded: the kernel's own threads are the
  parallelism, and a BLAS that started its pool from every task would
  oversubscribe the cores. OpenBLAS (0.3.27+) and MKL set a thread count for
  the calling thread only (``openblas_set_num_threads_local``,
  ``MKL_Set_Num_Threads_Local``); with neither, ``single_threaded()`` sets
  the global count around the launch instead (once for a whole Program call:
  ``CpuBackend.call_scope``).

``next_block`` (``fusec.targets.cpu.tasks``, imported with the GEMM) hands out block
numbers to the kernel's tasks, so that the blocks balance over threads that run at
different speeds.

The integer width of the interface (LP64 or ILP64: numpy's wheels ship a
64-bit-integer OpenBLAS) and the threading mode are part of the generated
source (``import_line``), so a kernel cached under one BLAS is never run
against another. This module finds them without Numba: generating a kernel
needs them, and generation is text (``blas_mode`` remembers the answer, so that a
process which only generates need not load numpy to ask). Without a usable BLAS
(or with ``FUSEC_CPU_GEMM=numba``) the kernels call ``sgemm_numba``, a plain Numba
loop nest: correct, several times slower.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fusec.targets.cpu.blas_abi import ENV_VAR, import_line_for


@dataclass(frozen=True)
class BlasLibrary:
    """The cblas entry points found in the BLAS numpy loaded."""

    path: str
    api: str  # threadpoolctl's internal_api: "openblas" or "mkl"
    sgemm: str
    ilp64: bool
    threads_local: str | None  # sets the calling thread's BLAS thread count
    set_threads: str | None  # sets the process-wide count (fallback)
    get_threads: str | None


def _symbols(lib: ctypes.CDLL, names: list[str]) -> str | None:
    for name in names:
        if hasattr(lib, name):
            return name
    return None


def _openblas(path: str, lib: ctypes.CDLL) -> BlasLibrary | None:
    for prefix in ("scipy_", ""):
        for suffix in ("64_", ""):
            sgemm = f"{prefix}cblas_sgemm{suffix}"
            if not hasattr(lib, sgemm):
                continue
            config = _symbols(lib, [f"{prefix}openblas_get_config{suffix}"])
            ilp64 = suffix == "64_"
            if config:
                fn = getattr(lib, config)
                fn.restype = ctypes.c_char_p
                ilp64 = ilp64 or b"USE64BITINT" in (fn() or b"")
            return BlasLibrary(
                path,
                "openblas",
                sgemm,
                ilp64,
                _symbols(
                    lib,
                    [
                        "openblas_set_num_threads_local",
                        f"{prefix}openblas_set_num_threads_local{suffix}",
                    ],
                ),
                _symbols(lib, [f"{prefix}openblas_set_num_threads{suffix}"]),
                _symbols(lib, [f"{prefix}openblas_get_num_threads{suffix}"]),
            )
    return None


def _mkl(path: str, lib: ctypes.CDLL) -> BlasLibrary | None:
    if not hasattr(lib, "cblas_sgemm"):
        return None
    return BlasLibrary(
        path,
        "mkl",
        "cblas_sgemm",
        False,  # mkl_rt's default interface layer is LP64
        _symbols(lib, ["MKL_Set_Num_Threads_Local"]),
        _symbols(lib, ["MKL_Set_Num_Threads"]),
        _symbols(lib, ["MKL_Get_Max_Threads"]),
    )


def find_blas() -> BlasLibrary | None:
    """The cblas of the BLAS numpy uses (OpenBLAS or MKL), or None."""
    import numpy  # noqa: F401  (loads its BLAS: threadpoolctl lists only loaded libraries)

    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    for info in threadpool_info():
        if info.get("user_api") != "blas":
            continue
        finder = {"openblas": _openblas, "mkl": _mkl}.get(info.get("internal_api", ""))
        if finder is None:
            continue
        try:
            lib = ctypes.CDLL(info["filepath"])
        except OSError:
            continue
        found = finder(info["filepath"], lib)
        if found is not None:
            return found
    return None


def per_thread(set_local: Callable[[int], int], get: Callable[[], int]) -> bool:
    """Whether ``set_local`` (a BLAS's per-thread thread-count setter, returning the
    previous count) leaves the other threads' counts alone, tried from a thread of its
    own while this one reads ``get()``. It may not: scipy-openblas 0.3.31 (numpy's
    wheels, a pthreads build) exports ``openblas_set_num_threads_local`` but it sets
    the process-wide count, so the kernels' tasks raced on it and a launch could leave
    the caller's numpy single-threaded (a 1024x2048x2048 matmul 39 -> 78 ms after an
    MLP call, benchmarks/results/cpu-notes.md)."""
    before = get()
    probe = 2 if before == 1 else 1
    was_set, read = threading.Event(), threading.Event()
    seen: list[int] = []

    def other() -> None:
        previous = set_local(probe)
        was_set.set()
        read.wait(5.0)
        set_local(previous)

    thread = threading.Thread(target=other, name="fusec-blas-probe", daemon=True)
    thread.start()
    was_set.wait(5.0)
    seen.append(get())
    read.set()
    thread.join(5.0)
    return seen == [before] and get() == before


def _find() -> tuple[BlasLibrary | None, ctypes.CDLL | None]:
    if os.environ.get(ENV_VAR, "blas") == "numba":
        return None, None
    found = find_blas()
    if found is None:
        return None, None
    lib = ctypes.CDLL(found.path)
    if found.threads_local and found.get_threads:
        if not per_thread(getattr(lib, found.threads_local), getattr(lib, found.get_threads)):
            found = dataclasses.replace(found, threads_local=None)
    return found, lib


#: The BLAS found, and its library: ``blas_calls`` registers these entry points.
FOUND = _find()
#: The BLAS the kernels are generated for and ``single_threaded`` sets (tests replace them).
BLAS, _LIB = FOUND


def mode() -> str:
    """How generated kernels multiply: ``blas-<lp64|ilp64>-<local|global>`` or ``numba``."""
    if BLAS is None:
        return "numba"
    width = "ilp64" if BLAS.ilp64 else "lp64"
    return f"blas-{width}-{'local' if BLAS.threads_local else 'global'}"


def import_line() -> str:
    """The line a generated kernel module imports its GEMM and thread controls with
    (``blas_abi.import_line_for``)."""
    return import_line_for(mode())


_single = threading.Lock()
#: Threads inside ``single_threaded`` now, and the count to restore when none is.
_single_users, _single_previous = 0, 0


class SingleThreaded(threading.local):
    """``single_threaded()``'s context manager: per thread, how deep its ``with`` blocks
    nest. Only a thread's outermost block touches the shared count: a Program call
    holds it around all its launches (``CpuBackend.call_scope``), and each launch's
    own block inside costs an attribute test, not a lock and three ctypes calls
    (2.4 us a launch, ~120 us of MobileNetV2's 54 at batch 1)."""

    depth = 0
    #: The (getter, setter) names the outermost block set the shared count with (None:
    #: a per-thread setter or no BLAS, nothing to share).
    counted: tuple[str, str] | None = None

    def __enter__(self) -> None:
        global _single_users, _single_previous
        self.depth += 1
        if self.depth > 1:
            return
        self.counted = _global_setter()
        if self.counted is None:
            return
        get_threads, set_threads = self.counted
        with _single:
            if _single_users == 0:
                _single_previous = getattr(_LIB, get_threads)()
                getattr(_LIB, set_threads)(1)
            _single_users += 1

    def __exit__(self, *exc: object) -> None:
        global _single_users
        self.depth -= 1
        if self.depth > 0 or self.counted is None:
            return
        with _single:
            _single_users -= 1
            if _single_users == 0:
                getattr(_LIB, self.counted[1])(_single_previous)


def _global_setter() -> tuple[str, str] | None:
    """The BLAS's (getter, setter) of the process-wide thread count, when it has no
    per-thread setter; else None."""
    if BLAS is None or BLAS.threads_local or not (BLAS.set_threads and BLAS.get_threads):
        return None
    return BLAS.get_threads, BLAS.set_threads


_SINGLE = SingleThreaded()


def single_threaded() -> SingleThreaded:
    """The process-wide BLAS thread count at 1 for the ``with`` block (no per-thread setter).

    Counted across threads: the first thread in sets 1, the last one out puts back the
    count it found (launches from several threads at once would otherwise restore each
    other's 1). Re-entrant: blocks nested in one thread count once."""
    return _SINGLE
