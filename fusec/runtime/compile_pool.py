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
#: The worker module run as ``python -m``.
WORKER = "fusec.runtime.compile_worker"


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
    CPUs this process may run on, at most one per job."""
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
        count = len(os.sched_getaffinity(0))
    else:
        count = os.cpu_count() or 1
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
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in sorted(range(len(jobs)), key=lambda k: -len(jobs[k].source)):
        pending.put(index)  # the longest sources (slowest compiles) first
    results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
    stop = threading.Event()
    runners: list[_Local | _Process] = [_Local(cache)] if local else []
    runners += [_Process(root) for _ in range(count - 1)]
    threads = [
        threading.Thread(target=_serve, args=(r, jobs, pending, results, stop), daemon=True)
        for r in runners
    ]
    for thread in threads:
        thread.start()
    try:
        return _collect(results, len(threads), done, stop)
    finally:  # every runner has ended, unless interrupted: then the workers are ended
        stop.set()
        for runner in runners:
            runner.close()


@dataclass
class _Result:
    """A runner's answer: a job done or failed, a runner that could not start, or a
    runner's end (``index`` None)."""

    index: int | None
    error: str | None = None
    unavailable: str | None = None
    caught: tuple[tuple[str, str, str, int], ...] = ()


def _collect(
    results: queue.SimpleQueue[_Result],
    runners: int,
    done: Callable[[int, float], None],
    stop: threading.Event,
) -> set[int]:
    compiled: set[int] = set()
    unavailable: list[str] = []
    last = time.perf_counter()
    while runners:
        result = results.get()
        _rewarn(result.caught)
        if result.unavailable is not None:
            unavailable.append(result.unavailable)
        elif result.index is None:
            runners -= 1
        elif result.error is not None:
            stop.set()  # the caller compiles the rest, and meets the error itself
        else:
            compiled.add(result.index)
            now = time.perf_counter()
            done(result.index, now - last)
            last = now
    if unavailable:
        _warn_once(unavailable[0])
    return compiled


def _serve(
    runner: _Local | _Process,
    jobs: Sequence[Job],
    pending: queue.SimpleQueue[int],
    results: queue.SimpleQueue[_Result],
    stop: threading.Event,
) -> None:
    """Run jobs from ``pending`` on ``runner`` until none is left or ``stop`` is set."""
    try:
        while not stop.is_set():
            try:
                index = pending.get_nowait()
            except queue.Empty:
                break
            try:
                error, caught = runner.run(jobs[index])
            except _Unavailable as why:  # the job goes back to the others
                pending.put(index)
                results.put(_Result(None, unavailable=str(why)))
                break
            results.put(_Result(index, error, caught=caught))
    finally:
        results.put(_Result(None))


class _Unavailable(Exception):
    """A worker process that could not be started or died before its first answer."""


class _Local:
    """Jobs compiled in this process (the caller's thread waits meanwhile)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def run(self, job: Job) -> tuple[str | None, tuple]:
        try:
            run_job(self.cache, job)
        except Exception as err:  # the caller compiles it again, raising it
            return f"{type(err).__name__}: {err}", ()
        return None, ()

    def close(self) -> None:
        pass


class _Process:
    """A worker process, started on its first job."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.answered = False

    def _start(self) -> subprocess.Popen[bytes]:
        if not sys.executable:
            raise _Unavailable("this Python has no executable to start (sys.executable)")
        self.log = tempfile.TemporaryFile()
        try:
            return subprocess.Popen(
                # -P: no current folder first on sys.path, the parent's path only
                [sys.executable, "-P", "-m", WORKER, str(self.root)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                env=worker_environment(),
            )
        except OSError as err:
            raise _Unavailable(f"{sys.executable} does not start ({err})") from None

    def run(self, job: Job) -> tuple[str | None, tuple]:
        if self.proc is None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            send(self.proc.stdin, job)
            error, caught = receive(self.proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            why = f"a worker process ({sys.executable} -m {WORKER}) ended: {self._log_tail()}"
            if not self.answered:
                raise _Unavailable(why) from None
            return why, ()
        self.answered = True
        return error, caught

    def _log_tail(self) -> str:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        if self.log is None:
            return ""
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").strip()
        status = self.proc.returncode if self.proc is not None else None
        return f"exit status {status}" + (f", {text[-1500:]}" if text else "")

    def close(self) -> None:
        """End the worker (it exits at the end of its input) and drop its log."""
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.close()


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
