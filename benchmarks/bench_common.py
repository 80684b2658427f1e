"""Small helpers the benchmark runners share: the commit of a table, the CPU's name, the writer,
the timer (``best_ms``) and same-run baselines (``alternate``).

Each runner used to carry its own copy of these; the tables they write are unchanged.
Import it as ``from bench_common import ...``: a runner runs as a script, so this folder is
first on ``sys.path`` (the tests that import a runner put it there too).
"""

from __future__ import annotations

import json
import os
import platform
import random
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: The repository root (the runners' git commands run there, wherever they are started).
ROOT = Path(__file__).resolve().parent.parent
#: Where the committed tables live (``benchmarks/README.md`` indexes them).
RESULTS = Path(__file__).resolve().parent / "results"


def _git(*args: str) -> str:
    """A git command's output at ``ROOT``, stripped; "" when git fails or is missing."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def commit(*, dirty: str = "", paths: Sequence[str] = (), missing: str = "?") -> str:
    """The commit a table was measured at, for its header.

    ``FUSEC_COMMIT`` when set (a copy of the tree without git, as on the device machines),
    else git's short HEAD with ``dirty`` appended when tracked files (those under ``paths``,
    every one when empty) differ from it; ``missing`` when neither is known.
    """
    if os.environ.get("FUSEC_COMMIT"):
        return os.environ["FUSEC_COMMIT"]
    head = _git("rev-parse", "--short", "HEAD")
    if not head:
        return missing
    if dirty and _git("status", "--porcelain", "--untracked-files=no", "--", *paths):
        return head + dirty
    return head


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo``; the platform's word for it elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_results(stem: Path | str, payload: Any, markdown: str, *, indent: int = 2) -> None:
    """Write ``<stem>.json`` (``payload``) and ``<stem>.md`` (``markdown``), making the folder.

    ``stem`` is the path without a suffix (``results/gemm``); a dot in it stays (the
    suffix is appended, not replaced).
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps(payload, indent=indent, default=str) + "\n")
    Path(f"{stem}.md").write_text(markdown)


def run_logged(command: Sequence[str], log: Path, limit: float, env: dict | None = None) -> str:
    """Run ``command`` in a new process group (its own workers go with it), its output
    appended to ``log``, within ``limit`` seconds: "" when it exits 0, else why not (the
    time-out, or the exit status and the log's last line)."""
    with log.open("a") as out:
        proc = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=None if env is None else os.environ | env,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"timeout after {limit:.0f} s"
    if rc == 0:
        return ""
    tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return f"worker exited with {rc}: {tail[-1][:300] if tail else ''}"


def best_ms(fn: Callable[[], object], rounds: int = 5, calls: int = 1) -> float:
    """The shared timer: the fastest of ``rounds`` rounds, each ``calls`` back-to-back calls
    of ``fn`` timed together, in ms per call (min-of-N: the least disturbed round on a shared
    machine)."""
    best = float("inf")
    for _ in range(max(rounds, 1)):
        start = time.perf_counter()
        for _ in range(max(calls, 1)):
            fn()
        best = min(best, (time.perf_counter() - start) * 1e3 / max(calls, 1))
    return best


def alternate(
    fns: dict[str, Callable[[], object]],
    rounds: int = 5,
    calls: int = 1,
    *,
    warmup: int = 0,
    shuffle: bool = False,
) -> dict[str, list[float]]:
    """Same-run baselines: each round times every contender in turn (``calls`` calls, ms per
    call), so a change of load touches all of them alike; the ms of each round per name.
    ``warmup`` untimed calls of each first; ``shuffle``: a new random order each round (no
    contender always runs after the same one)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for _ in range(max(rounds, 1)):
        if shuffle:
            random.shuffle(names)
        for name in names:
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(max(calls, 1)):
                fn()
            times[name].append((time.perf_counter() - start) * 1e3 / max(calls, 1))
    return times
