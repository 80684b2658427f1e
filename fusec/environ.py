"""``getenv``: ``os.environ.get`` for the per-call paths, in one dict lookup.

A compiled module reads a few environment variables on every call
(``FUSEC_MEMORY_LIMIT``, ``FUSEC_CPU_PIN``), so that a changed setting takes effect at
the next call. ``os.environ.get`` goes through ``Mapping.get``, ``__getitem__`` and
the key's encoding in Python: ~1 us back to back, but ~32 us in a call after an idle
pause of 20 ms (cold caches; benchmarks/results/cpu-notes.md), twice a call. On POSIX
CPython ``os.environ`` keeps its variables in ``os.environ._data``, a dict of bytes;
``getenv`` looks there directly (the key encoded once) and falls back to
``os.environ.get`` anywhere else.
"""

from __future__ import annotations

import functools
import os

from fusec.errors import FusecError

_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
if _DATA is not None and not isinstance(_DATA, dict):  # not the layout this relies on
    _DATA = None


@functools.cache
def _key(name: str) -> bytes:
    return os.fsencode(name)


def getenv(name: str, default: str = "") -> str:
    """``os.environ.get(name, default)``."""
    if _DATA is None:
        return os.environ.get(name, default)
    value = _DATA.get(_key(name))
    return default if value is None else os.fsdecode(value)


class SwitchError(FusecError, ValueError):
    """A switch set to none of its choices: the user's error (the command line reports it
    as one, not as a bug), still a ValueError for callers that catch that."""


def switch(name: str, choices: tuple[str, ...]) -> str:
    """The value of the A/B switch ``$name``: one of ``choices`` (case and surrounding
    blanks ignored), the first when unset or empty; a ``SwitchError`` that names the
    variable, the value and the choices otherwise."""
    asked = getenv(name).strip().lower() or choices[0]
    if asked not in choices:
        allowed = " or ".join(repr(c) for c in choices)
        raise SwitchError(f"${name}: {asked!r}, expected {allowed}")
    return asked
