"""Compiling a program's kernel modules at once, in worker processes.

A model's kernels are independent Numba compilations of ~0.3 to 5 s each, and a cold
compile spent nearly all its time in them, one after another (ResNet-18: 23 kernels,
~95 % of 16 s). ``compile_ahead`` compiles the modules a program misses in the kernel
cache at once: in this process (one thread) and in ``workers(...) - 1`` worker
processes (``python -m fusec.runtime.compile_worker``), as many in all as this process
may use CPUs (``$FUSEC_COMPILE_JOBS`` sets another count; 1 compiles in this process
only). A worker imports a job's module through a ``KernelCache`` on the same folder,
which compiles it and stores the module and Numba's sealed cache files there, and
compiles the functions the job names for their argument types (a kernel's njit
entry, a program's segments): the program then loads everything from the cache as
for any warm run, without compiling.

Workers are processes of their own (``subprocess``), not ``multiprocessing``'s: those
would re-run the caller's ``__main__`` script (spawn) or copy a process whose other
threads may hold locks (fork). They get the caller's environment and ``sys.path``,
and talk over their stdin and stdout (pickles, length-prefixed); what they print goes
to a log that a failure quotes, and the warnings their compiles raise are raised
again here.

Nothing here decides whether a program is right: a job that fails in a worker (or
that did not run once one had failed) is left to the caller, which compiles it in
its own process as without workers, so an error is the very error of a serial
compile. Jobs run only when they can pay: with at least ``MIN_JOBS`` modules to
compile (a worker's start, ~1 s of Python, numpy and Numba, is more than a small
module's compile), and only on a cache folder of the user's (a private temporary
folder, ``KernelCache.fallback_reason``, is this process's alone). Where no worker
process starts, one ``FusecWarning`` says why and the modules compile here.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fusec.errors import FusecError, FusecWarning

#: Processes (this one included) compiling at once; 0 or 1: this process only.
ENV_VAR = "FUSEC_COMPILE_JOBS"
#: Fewer modules to compile than this are compiled in this process.
MIN_JOBS = 4
#: At most this many processes unless ``$FUSEC_COMPILE_JOBS`` says more: a model's
#: largest module bounds the time (ResNet-50's is 13 % of its 28 modules' 39 CPU
#: seconds), and each worker holds Numba (~0.2 GB).
MAX_DEFAULT = 8
#: The worker module run as ``python -m``.
WORKER = "fusec.runtime.compile_worker"
#: A worker's first message: it has imported what compiling needs.
READY = "ready"


@dataclass(frozen=True)
class Job:
    """A kernel module to compile: its generated ``source``, the cache's ``target``
    folder, and the functions of the module to compile for argument types beyond
    those its import compiles: (name, Numba argument types)."""

    source: str
    target: str = "cpu"
    signatures: tuple[tuple[str, tuple[Any, ...]], ...] = ()


def run_job(cache: Any, job: Job) -> None:
    """Compile ``job`` in this process: import its module through ``cache`` (which
    compiles it, or loads it from the cache) and compile each of its signatures."""
    module = cache.load_module(job.source, target=job.target)
    for name, signature in job.signatures:
        getattr(module, name).compile(signature)


def workers(jobs: int) -> int:
    """How many processes compile ``jobs`` modules: ``$FUSEC_COMPILE_JOBS``, else the
    CPUs this process may run on (at most ``MAX_DEFAULT``); at most one per job."""
    setting = os.environ.get(ENV_VAR, "").strip()
    if setting:
        try:
            count = int(setting)
        except ValueError:
            raise FusecError(
                f"{ENV_VAR}={setting!r}: expected a number of processes (1: compile in "
                "this process only)"
            ) from None
    elif hasattr(os, "sched_getaffinity"):
        count = min(len(os.sched_getaffinity(0)), MAX_DEFAULT)
    else:
        count = min(os.cpu_count() or 1, MAX_DEFAULT)
    return max(1, min(count, jobs))


def compile_ahead(
    cache: Any, jobs: Sequence[Job], done: Callable[[int, float], None], *, local: bool = True
) -> set[int]:
    """Compile ``jobs`` into ``cache`` at once (see the module docstring); ``done(index,
    seconds)`` is called in this thread as each is compiled, ``seconds`` the wall time
    since the previous call (so that they add up to the time taken). Returns the
    indices of the jobs compiled; the caller compiles the others itself. With
    ``local=False`` this process compiles none: worker processes do all (tests)."""
    count = workers(len(jobs)) + (0 if local else 1)
    if count < 2 or len(jobs) < MIN_JOBS:
        return set()
    root = cache.root  # checked now: a private fallback folder is this process's alone
    if cache.fallback_reason is not None:
        return set()
    if _unavailable is not None:  # a worker did not start before: none will
        _warn_once(_unavailable)
        return set()
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in sorted(range(len(jobs)), key=lambda k: -len(jobs[k].source)):
        pending.put(index)  # the longest sources (slowest compiles) first
    results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
    stop = threading.Event()
    runners: list[_Local | _Process] = [_Local(cache)] if local else []
    runners += [_Process(root) for _ in range(count - 1)]
    for runner in runners:
        args = (runner, jobs, pending, results, stop)
        threading.Thread(target=_serve, args=args, daemon=True).start()
    try:
        compiled = _collect(results, len(runners), len(jobs), done, stop)
    except BaseException:  # interrupted: no worker outlives the call
        stop.set()
        for runner in runners:
            runner.close(kill=True)
        raise
    stop.set()
    for runner in runners:
        runner.close()
    return compiled


@dataclass
class _Result:
    """A runner's answer: a job done (``error`` None) or failed, or the runner's end
    (``index`` None)."""

    index: int | None
    error: str | None = None
    caught: tuple[tuple[str, str, str, int], ...] = ()


def _collect(
    results: queue.SimpleQueue[_Result],
    runners: int,
    jobs: int,
    done: Callable[[int, float], None],
    stop: threading.Event,
) -> set[int]:
    """The jobs compiled, once each is answered or every runner has ended: a worker
    still starting when the others have done every job is not waited for."""
    compiled: set[int] = set()
    answered = 0
    last = time.perf_counter()
    while runners and answered < jobs:
        result = results.get()
        _rewarn(result.caught)
        if result.index is None:
            runners -= 1
            continue
        answered += 1
        if result.error is not None:
            stop.set()  # the caller compiles the rest, and meets the error itself
        else:
            compiled.add(result.index)
            now = time.perf_counter()
            done(result.index, now - last)
            last = now
    if _unavailable is not None:
        _warn_once(_unavailable)
    return compiled


def _serve(
    runner: _Local | _Process,
    jobs: Sequence[Job],
    pending: queue.SimpleQueue[int],
    results: queue.SimpleQueue[_Result],
    stop: threading.Event,
) -> None:
    """Start ``runner``, then run jobs from ``pending`` on it until none is left or
    ``stop`` is set: a job taken is always answered."""
    global _unavailable
    try:
        runner.start()
        while not stop.is_set():
            try:
                index = pending.get_nowait()
            except queue.Empty:
                break
            error, caught = runner.run(jobs[index])
            results.put(_Result(index, error, caught=caught))
    except _Unavailable as why:
        if not stop.is_set():  # not ended by the pool itself
            _unavailable = str(why)
    finally:
        runner.release()
        results.put(_Result(None))


#: Why a worker process did not start, once one did not (then none is started again).
_unavailable: str | None = None


class _Unavailable(Exception):
    """A worker process that could not be started or ended before it was ready."""


class _Local:
    """Jobs compiled in this process (the caller's thread waits meanwhile)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def start(self) -> None:
        pass

    def run(self, job: Job) -> tuple[str | None, tuple]:
        try:
            run_job(self.cache, job)
        except Exception as err:  # the caller compiles it again, raising it
            return f"{type(err).__name__}: {err}", ()
        return None, ()

    def close(self, kill: bool = False) -> None:
        pass

    def release(self) -> None:
        pass


class _Process:
    """A worker process: ``start`` returns once it has imported what compiling needs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.ready = False

    def start(self) -> None:
        if not sys.executable:
            raise _Unavailable("this Python has no executable to start (sys.executable)")
        self.log = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                # -P: no current folder first on sys.path, the parent's path only
                [sys.executable, "-P", "-m", WORKER, str(self.root)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                env=worker_environment(),
            )
        except OSError as err:
            raise _Unavailable(f"{sys.executable} does not start ({err})") from None
        assert self.proc.stdout is not None
        try:
            if receive(self.proc.stdout) != READY:
                raise EOFError
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            raise _Unavailable(f"{sys.executable} -m {WORKER}: {self._ended()}") from None
        self.ready = True

    def run(self, job: Job) -> tuple[str | None, tuple]:
        assert self.proc is not None and self.proc.stdin is not None
        assert self.proc.stdout is not None
        try:
            send(self.proc.stdin, job)
            error, caught = receive(self.proc.stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            return f"a worker process ended: {self._ended()}", ()
        return error, caught

    def _ended(self) -> str:
        """What a worker that stopped answering left: its status and the end of its log."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        text = ""
        if self.log is not None:
            self.log.seek(0)
            text = self.log.read().decode(errors="replace").strip()
        status = self.proc.returncode if self.proc is not None else None
        return f"exit status {status}" + (f", {text[-1500:]}" if text else "")

    def close(self, kill: bool = False) -> None:
        """End the worker: at the end of its input once ready (it has answered every job
        it took), else now, as with ``kill``. A thread still reading its output sees the
        end of it."""
        proc = self.proc
        if proc is None:
            return
        if kill or not self.ready:
            proc.kill()
        elif proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def release(self) -> None:
        """Close what its serving thread read (called by that thread at its end)."""
        for stream in (self.proc.stdout if self.proc else None, self.log):
            if stream is not None:
                stream.close()


def worker_environment() -> dict[str, str]:
    """This process's environment, with its ``sys.path`` as the worker's ``PYTHONPATH``
    (so that it imports the same fusec, however this process found it: the worker runs
    with ``-P``, so no folder of its own comes before them)."""
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path if isinstance(p, str)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


# -------------------------------------------------------------- the pipe protocol


def send(stream: IO[bytes], message: Any) -> None:
    """Write ``message`` to ``stream`` as a pickle preceded by its length."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """The next message ``send`` wrote to ``stream``; EOFError at its end."""
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    size = int.from_bytes(head, "little")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)  # from our own worker, over its private pipe


# ------------------------------------------------------------------ warnings


def warning_record(caught: warnings.WarningMessage) -> tuple[str, str, str, int]:
    """A warning a worker caught, as it travels: category, message, file, line."""
    category = caught.category
    return (
        f"{category.__module__}:{category.__qualname__}",
        str(caught.message),
        caught.filename,
        caught.lineno,
    )


def _rewarn(caught: Sequence[tuple[str, str, str, int]]) -> None:
    """Raise again here the warnings of a worker's compile (filtered as this process's)."""
    for name, message, filename, lineno in caught:
        warnings.warn_explicit(message, _category(name), filename, lineno)


def _category(name: str) -> type[Warning]:
    import importlib

    module, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return RuntimeWarning
    return found if isinstance(found, type) and issubclass(found, Warning) else RuntimeWarning


_warned = False


def _warn_once(reason: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"kernels compile in this process only: no worker process is available ({reason})",
            FusecWarning,
            stacklevel=2,
        )
