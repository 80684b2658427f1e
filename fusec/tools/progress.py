"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines otherwise.

``fusec run`` on a real model spends most of a minute generating and compiling
kernels, ``fusec conformance`` runs hundreds of cases: both say how far they
are, as ``compiling kernels: 12/40``. Work finished within ``DELAY_S`` shows
nothing (most runs hit the kernel cache), so does everything under ``--quiet``.
On a terminal the count is a tqdm bar that redraws itself; into a file or a
pipe (CI logs) it is a plain line at most every ``LINE_EVERY_S`` seconds and
one at the end, never a carriage return.

``showing_runtime_progress`` shows what the runtime reports
(``fusec.runtime.progress``); ``Meter`` counts steps the caller makes itself.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from fusec.runtime import progress

#: Work shorter than this shows no progress at all.
DELAY_S = 1.0
#: Without a terminal, at most one line every this many seconds (and one at the end).
LINE_EVERY_S = 5.0


class Meter:
    """``done`` of ``total`` steps of ``task`` on ``stream`` (stderr): a tqdm bar on a
    terminal, plain lines otherwise, nothing at all when ``enabled`` is False or the
    work ends within ``DELAY_S``."""

    def __init__(
        self, task: str, total: int, *, stream: IO[str] | None = None, enabled: bool = True
    ) -> None:
        self.task = task
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = enabled and total > 0
        self._start = time.monotonic()
        self._last_line: float | None = None  # when a plain line was last written
        self._shown = -1  # the count it showed
        self._note = ""  # the last step's
        self._bar: Any = None
        if self._enabled and _is_terminal(self._stream):
            from tqdm import tqdm  # imported only when a bar may be drawn

            self._bar = tqdm(
                total=total,
                desc=task,
                unit="",
                file=self._stream,
                delay=DELAY_S,
                leave=False,  # the command's own output follows, not a finished bar
                dynamic_ncols=True,
            )

    def advance(self, note: str = "") -> None:
        """One more step done; ``note`` names it (shown on the bar and the lines)."""
        self.done += 1
        self._note = note
        if not self._enabled:
            return
        if self._bar is not None:
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(1)
            return
        now = time.monotonic()
        if now - self._start < DELAY_S:
            return
        if self._last_line is None or now - self._last_line >= LINE_EVERY_S:
            self._line()
            self._last_line = now

    def close(self) -> None:
        """The work is over: the bar goes; a plain-line report ends with its final count."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._enabled and self._last_line is not None and self.done != self._shown:
            self._line()
        self._enabled = False

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _line(self) -> None:
        elapsed = time.monotonic() - self._start
        suffix = f" ({self._note})" if self._note else ""
        self._stream.write(
            f"fusec: {self.task}: {self.done}/{self.total}, {elapsed:.0f} s{suffix}\n"
        )
        self._stream.flush()
        self._shown = self.done


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


@contextlib.contextmanager
def showing_runtime_progress(enabled: bool = True) -> Iterator[None]:
    """Show the runtime's reports (kernels generated, kernels compiled) made in this
    context as Meters on stderr."""
    meters: dict[str, Meter] = {}

    def show(step: progress.Step) -> None:
        if step.done == 0:  # a task starts (again: a second program, say)
            if step.task in meters:
                meters.pop(step.task).close()
            meters[step.task] = Meter(step.task, step.total, enabled=enabled)
            return
        meter = meters.get(step.task)
        if meter is not None:
            meter.advance(step.name)
            if step.done >= step.total:
                meters.pop(step.task).close()

    try:
        with progress.listening(show):
            yield
    finally:
        for meter in meters.values():
            meter.close()
