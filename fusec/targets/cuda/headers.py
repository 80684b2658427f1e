"""The cuda kernel layer's C++ headers (``include/fusec/*.cuh``, package data) and how a
generated source reaches NVRTC with them.

A template's C++ is an ``#include "fusec/<header>.cuh"`` line per header it stands on, the
instantiation's constants and functors, and an ``extern "C" __device__`` wrapper (see
docs/architecture.md, "Kernel layer"). ``expand`` replaces each such line by the header's
text (its own includes first, each header once, ``#pragma once`` dropped), so the source
that is cached, linked, shown by ``--emit`` and handed to Numba's ``declare_device(link=)``
is one self-contained file: no include path to pass to NVRTC, and a header edit changes
the cache key of every kernel that uses it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

#: the folder NVRTC would take as ``-I``: headers are named ``fusec/<name>.cuh`` under it
INCLUDE_DIR = Path(__file__).resolve().parent / "include"
_INCLUDE = re.compile(r'^#include "(fusec/[a-z0-9_]+\.cuh)"[ \t]*$', re.MULTILINE)
#: the kernel layer's element types (``common.cuh``) that templates take as parameters
ELEMENT_TYPES = {
    "f16": "fusec::F16",
    "bf16": "fusec::BF16",
    "f32": "fusec::F32",
    "f8E4M3FN": "fusec::E4M3",
    "f8E5M2": "fusec::E5M2",
}


def header_names() -> list[str]:
    """Every header of the layer, as included (``fusec/common.cuh``, ...)."""
    return sorted(f"fusec/{p.name}" for p in (INCLUDE_DIR / "fusec").glob("*.cuh"))


def include(*names: str) -> str:
    """The include lines of ``names`` (``"barrier"`` -> ``#include "fusec/barrier.cuh"``)."""
    return "".join(f'#include "fusec/{name}.cuh"\n' for name in names)


@cache
def _text(name: str) -> str:
    path = INCLUDE_DIR / name
    if name not in header_names():
        raise ValueError(f"no kernel-layer header {name!r} under {INCLUDE_DIR}")
    return path.read_text()


def expand(source: str) -> str:
    """``source`` with every ``#include "fusec/..."`` line replaced by the header's text,
    recursively, each header once (where it is first included)."""
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return ""
        seen.add(name)
        body = _text(name).replace("#pragma once\n", "", 1)
        return _INCLUDE.sub(replace, body).rstrip("\n")

    return _INCLUDE.sub(replace, source)


def indent_lines(body: str, spaces: int) -> str:
    """Generated C++ statements indented into an instantiation's functor."""
    return "\n".join(" " * spaces + line for line in body.splitlines())


def enumerators(items: list[str]) -> str:
    """``items`` as enumerator lines of at most 100 columns."""
    lines, line = [], "   "
    for item in items:
        if len(line) + len(item) + 2 > 100:
            lines.append(line.rstrip())
            line = "   "
        line += f" {item},"
    return "\n".join([*lines, line])
