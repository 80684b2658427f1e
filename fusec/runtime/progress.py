"""Progress of the runtime's long work, reported to whoever shows it.

Generating and compiling a model's kernels can take most of a minute (BERT on
the cpu target: 46 s on a first run). The runtime reports each kernel as it is
done to the listeners its caller installed with ``listening`` (the command line
draws a bar, ``--timing`` adds the seconds up), and to nobody otherwise. The
runtime itself never prints and imports no progress library: without a
listener a report costs a context-variable lookup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """``done`` of ``total`` steps of ``task`` are finished; the last one, ``name``, took
    ``seconds``. The first report of a task has ``done == 0`` (nothing finished yet)."""

    task: str
    done: int
    total: int
    name: str = ""
    seconds: float = 0.0


#: Called with every Step of every task while installed.
Listener = Callable[[Step], None]

#: The work that the runtime reports (``Step.task``).
GENERATING = "generating kernels"
COMPILING = "compiling kernels"

_listeners: ContextVar[tuple[Listener, ...]] = ContextVar("fusec_progress", default=())


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the Steps reported in this context (this thread or task) to ``listener``
    too."""
    token = _listeners.set((*_listeners.get(), listener))
    try:
        yield
    finally:
        _listeners.reset(token)


def task(name: str, total: int) -> Callable[[str, float], None]:
    """Start reporting ``total`` steps of the task ``name``; returns ``step(name,
    seconds)`` to call as each is finished (a no-op when nobody listens)."""
    listeners = _listeners.get()
    if not listeners:
        return _ignore
    done = 0

    def step(step_name: str, seconds: float) -> None:
        nonlocal done
        done += 1
        _send(listeners, Step(name, done, total, step_name, seconds))

    _send(listeners, Step(name, 0, total))
    return step


def _send(listeners: tuple[Listener, ...], step: Step) -> None:
    for listener in listeners:
        listener(step)


def _ignore(_name: str, _seconds: float) -> None:
    pass
