"""Memory limits: refuse an allocation the machine cannot hold, before making it.

A small input can ask for a huge tensor (``dense<1.0> : tensor<100000x100000xf32>``
is 40 GB from one line). On Linux such an allocation often succeeds (memory is
overcommitted) and the process is killed later while filling it, with no
message. So every allocation whose size comes from the input (constants,
random inputs, the buffers of a call, the reference executor's values) is
checked first against ``memory_limit()``: the machine's physical memory, or
``$FUSEC_MEMORY_LIMIT`` (bytes, or with a K/M/G/T suffix).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

from fusec.environ import getenv
from fusec.errors import FusecError

ENV_VAR = "FUSEC_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_limit() -> int:
    """Bytes fusec may allocate for one purpose (see the module docstring)."""
    setting = getenv(ENV_VAR).strip().upper().removesuffix("B")
    if setting:
        unit = setting[-1] if setting[-1] in _UNITS else ""
        try:
            return int(float(setting.removesuffix(unit)) * _UNITS[unit])
        except ValueError:
            raise FusecError(
                f"{ENV_VAR}={os.environ[ENV_VAR]!r}: expected a number of bytes, e.g. 8G"
            ) from None
    return _physical_memory()


@functools.cache
def _physical_memory() -> int:
    """The machine's physical memory in bytes, read once (two system calls: a call of a
    compiled module checks its buffers against the limit every time)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no known limit
        return 2**62


def fmt_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def check_bytes(nbytes: int, what: str) -> None:
    """FusecError when ``nbytes`` for ``what`` exceed ``memory_limit()``."""
    limit = memory_limit()
    if nbytes > limit:
        raise FusecError(
            f"{what}: {fmt_bytes(nbytes)} needed, more than the {fmt_bytes(limit)} of memory "
            f"available (set {ENV_VAR} to change the limit)"
        )


def tensor_bytes(shapes: Iterable[tuple[int, ...]], itemsize: int) -> int:
    """Bytes of tensors of ``shapes`` with ``itemsize``-byte elements."""
    total = 0
    for shape in shapes:
        count = 1
        for d in shape:
            count *= d
        total += count * itemsize
    return total
