"""``--timing``: where the wall-clock time of a ``fusec compile`` or ``fusec run`` went.

The report covers the whole command, not only the passes: Python's start-up,
the modules imported, parsing, each pass, code generation, the kernels' JIT
compilation (or their loading from the kernel cache) and the first call, then
the rest (argument parsing, inputs, output), so that the lines add up to the
total. Modules are imported lazily, as a phase first needs them: the time spent
importing is counted once, on the ``imports`` line, and taken out of the phase
that triggered it, so that each phase times its own work.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from fusec.runtime import progress


class ImportClock:
    """While installed (``with clock:``), the intervals of the imports that loaded a new
    module (nested ones within the outermost): import statements (``__import__``) and
    ``importlib.import_module`` (how the targets load their code generators)."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []
        self._depth = 0
        self._import: Any = None
        self._import_module: Any = None

    def __enter__(self) -> ImportClock:
        self._import, self._import_module = builtins.__import__, importlib.import_module
        builtins.__import__ = self._timed_statement
        importlib.import_module = self._timed_module
        return self

    def __exit__(self, *exc: object) -> None:
        builtins.__import__, importlib.import_module = self._import, self._import_module

    def _timed_statement(self, name: str, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name in sys.modules:  # already loaded: most import statements
            return self._import(name, globals, locals, fromlist, level)
        return self._timed(self._import, name, globals, locals, fromlist, level)

    def _timed_module(self, name: str, package: str | None = None) -> Any:
        if name in sys.modules:
            return self._import_module(name, package)
        return self._timed(self._import_module, name, package)

    def _timed(self, load: Any, *args: Any) -> Any:
        self._depth += 1
        start = time.perf_counter()
        try:
            return load(*args)
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.intervals.append((start, time.perf_counter()))

    @property
    def seconds(self) -> float:
        return sum(end - start for start, end in self.intervals)

    def within(self, start: float, end: float) -> float:
        """Seconds of importing between the ``perf_counter`` times ``start`` and ``end``."""
        return sum(max(0.0, min(e, end) - max(s, start)) for s, e in self.intervals)


class Timing:
    """The measurements of one command; enter it around the command's work, feed it the
    compile's phases (``add_compile``) and time the rest with ``phase``."""

    def __init__(self) -> None:
        self.imports = ImportClock()
        self.startup = process_age()  # Python's start-up and fusec.cli's import
        self.start = time.perf_counter()
        self.phases: list[tuple[str, float]] = []
        self.passes: list[tuple[str, float]] = []
        self.kernels: dict[str, list[float]] = {}  # runtime task -> own seconds per kernel
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Timing:
        self._stack.enter_context(self.imports)
        self._stack.enter_context(progress.listening(self._record))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _own(self, start: float, seconds: float) -> float:
        """``seconds`` from ``start`` less the importing done meanwhile."""
        return max(seconds - self.imports.within(start, start + seconds), 0.0)

    def _record(self, step: progress.Step) -> None:
        if step.done:  # reported as it ends
            start = time.perf_counter() - step.seconds
            self.kernels.setdefault(step.task, []).append(self._own(start, step.seconds))

    def add_compile(self, phases: Sequence[Any], passes: Sequence[Any]) -> None:
        """A ``fusec.compile``'s phases (``CompiledModule.phases``: parse, passes, code
        generation) and passes (``.timings``), each less its imports."""
        self.phases += [(p.name, self._own(p.start, p.seconds)) for p in phases]
        self.passes = [(p.name, self._own(p.start, p.seconds)) for p in passes]

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as the phase ``name``, less its imports and the kernels'
        compilation reported meanwhile (they have lines of their own)."""
        start = time.perf_counter()
        compiled = sum(self.kernels.get(progress.COMPILING, ()))
        try:
            yield
        finally:
            seconds = self._own(start, time.perf_counter() - start)
            seconds -= sum(self.kernels.get(progress.COMPILING, ())) - compiled
            self.phases.append((name, max(seconds, 0.0)))

    def report(self) -> str:
        """The report's lines (milliseconds), ending with the total."""
        elapsed = time.perf_counter() - self.start
        lines = ["timing (wall clock):"]

        def line(seconds: float, what: str, indent: int = 2) -> None:
            lines.append(f"{' ' * indent}{seconds * 1e3:9.1f} ms  {what}")

        if self.startup is not None:
            line(self.startup, "start-up (Python, fusec.cli)")
        line(self.imports.seconds, "imports (modules loaded on first use)")
        counted = self.imports.seconds
        for name, seconds in self.phases:
            if name == "passes":
                line(seconds, f"passes ({len(self.passes)})")
                for pass_name, pass_seconds in self.passes:
                    line(pass_seconds, pass_name, indent=6)
            elif name == "code generation":
                line(seconds, name + _kernel_note(self.kernels.get(progress.GENERATING)))
            else:
                line(seconds, name)
            counted += seconds
            if name == "code generation" and progress.COMPILING in self.kernels:
                compiled = self.kernels[progress.COMPILING]
                line(sum(compiled), "JIT compile or kernel-cache load" + _kernel_note(compiled))
                counted += sum(compiled)
        line(max(elapsed - counted, 0.0), "other (arguments, inputs, output)")
        total = elapsed + (self.startup or 0.0)
        line(total, "total" + (" (the process so far)" if self.startup is not None else ""))
        return "\n".join(lines) + "\n"


def _kernel_note(seconds: list[float] | None) -> str:
    if not seconds:
        return ""
    kernels = "1 kernel" if len(seconds) == 1 else f"{len(seconds)} kernels"
    return f" ({kernels}, slowest {max(seconds) * 1e3:.1f} ms)"


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), None where unknown."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: the start time
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None
