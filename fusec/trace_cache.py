"""The disk cache of traces: a traced function's IR, stored under a key of its
fingerprint and argument signature, so that a new process skips tracing.

A trace is valid only for the fusec that made it: ``tracer_version`` hashes
the version and the sources that decide what a trace produces.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import io
import json
import pkgutil
from pathlib import Path

from fusec._version import __version__
from fusec.errors import FusecError
from fusec.frontend.tracer import TracedFunction

TRACE_FORMAT = 1

#: The modules (besides the dialect's) whose source decides what tracing produces.
TRACE_SOURCES = ("fusec.decorator", "fusec.ops", "fusec.frontend.tracer")


@functools.cache
def tracer_version() -> str:
    """The fusec version plus a hash of the sources that decide what a trace produces,
    so that a changed (e.g. editable, in-development) fusec never reuses old traces."""
    import fusec.dialect

    digest = hashlib.sha256(__version__.encode())
    dialect = [f"fusec.dialect.{m.name}" for m in pkgutil.iter_modules(fusec.dialect.__path__)]
    for name in sorted({*TRACE_SOURCES, *dialect}):
        # by module name: a moved or renamed module is an ImportError here, not a silent
        # change of what the hash covers
        source = inspect.getsourcefile(importlib.import_module(name))
        assert source is not None, name
        digest.update(name.encode())
        digest.update(Path(source).read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"


def _trace_entry(key: str) -> str:
    """Traces are sealed records of the kernel cache (same folder, same per-user key:
    ``fusec.runtime.cache``), so another user cannot plant one."""
    return f"traces/{key}.json"


def read_trace(key: str) -> TracedFunction | None:
    """The traced function stored under ``key``, or None (missing, stale, unreadable or
    not authentic: the kernel cache checks its seal before anything is parsed)."""
    from fusec.frontend.mlir import parse_module
    from fusec.runtime.cache import default_cache

    data = default_cache().read_entry(_trace_entry(key))
    if data is None:
        return None
    try:
        record = json.loads(data)
        if record.get("format") != TRACE_FORMAT or record.get("fusec") != tracer_version():
            return None
        module = parse_module(record["ir"], f"<trace cache {key[:12]}>")
        params = tuple(
            (int(leaf), tuple(shape) if shape is not None else None)
            for leaf, shape in record["params"]
        )
        return TracedFunction(module, params, record["outputs"], int(record["results"]))
    except (ValueError, KeyError, TypeError, AttributeError, FusecError):
        return None


def write_trace(key: str, traced: TracedFunction) -> None:
    """Store ``traced`` under ``key`` atomically; a cache that cannot be written is skipped."""
    from xdsl.printer import Printer

    from fusec.runtime.cache import default_cache

    buffer = io.StringIO()
    Printer(stream=buffer, print_debuginfo=True).print_op(traced.module)
    record = {
        "format": TRACE_FORMAT,
        "fusec": tracer_version(),
        "ir": buffer.getvalue(),
        "params": [[leaf, list(shape) if shape else None] for leaf, shape in traced.params],
        "outputs": traced.outputs,
        "results": traced.num_results,
    }
    default_cache().write_entry(_trace_entry(key), json.dumps(record).encode())
