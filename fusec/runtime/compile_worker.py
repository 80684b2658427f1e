"""A worker process of ``fusec.runtime.compile_pool``: compiles the jobs it is sent.

Run as ``python -m fusec.runtime.compile_worker CACHE_FOLDER``. Once it has imported
Numba it says ``compile_pool.READY``; then it reads jobs
(``compile_pool.Job``) from stdin and answers each with ``(error, warnings)``:
``error`` None when the module and its signatures are compiled into the kernel cache
at ``CACHE_FOLDER``, else a line saying what failed; ``warnings`` the warnings the
compile raised (``compile_pool.warning_record``). It ends at the end of its input.
Anything else it would print goes to stderr, which the pool keeps in a log. Its
environment is its parent's, with the settings the cpu backend made before Numba
started its threads (``fusec.targets.cpu.threads.configure``).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    from fusec.runtime.cache import KernelCache
    from fusec.runtime.compile_pool import READY, receive, send, warning_record

    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints: to the log
    jobs = sys.stdin.buffer
    import fusec.runtime.numba_cache  # noqa: F401 - Numba and its cache, before READY

    cache = KernelCache(Path(argv[0]))
    cache.root  # noqa: B018 - checks the folder now, setting fallback_reason
    unusable = cache.fallback_reason
    send(answers, READY)
    while True:
        try:
            job = receive(jobs)
        except EOFError:
            return 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # the parent's filters decide
            error: str | None
            if unusable is not None:  # it would compile into a folder of its own
                error = f"the worker cannot use the cache folder: it {unusable}"
            else:
                error = _compile(cache, job)
        send(answers, (error, tuple(warning_record(w) for w in caught)))


def _compile(cache: Any, job: Any) -> str | None:
    from fusec.runtime.compile_pool import run_job

    try:
        run_job(cache, job)
    except Exception as err:  # reported; the parent compiles the job again itself
        return f"{type(err).__name__}: {err}"
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
