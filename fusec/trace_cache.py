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
from fusec.ir.files import write_atomically

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


def _trace_path(key: str) -> Path:
    """Traces live beside the kernel cache, under the same root (``FUSEC_CACHE_DIR``)."""
    from fusec.runtime.cache import cache_root

    return cache_root() / "traces" / f"{key}.json"


def read_trace(key: str) -> TracedFunction | None:
    """The traced function stored under ``key``, or None (missing, stale or unreadable)."""
    from fusec.frontend.mlir import parse_module

    path = _trace_path(key)
    try:
        record = json.loads(path.read_text())
        if record.get("format") != TRACE_FORMAT or record.get("fusec") != tracer_version():
            return None
        module = parse_module(record["ir"], str(path))
        params = tuple(
            (int(leaf), tuple(shape) if shape is not None else None)
            for leaf, shape in record["params"]
        )
        return TracedFunction(module, params, record["outputs"], int(record["results"]))
    except (OSError, ValueError, KeyError, TypeError, FusecError):
        return None


def write_trace(key: str, traced: TracedFunction) -> None:
    """Store ``traced`` under ``key`` atomically; a cache that cannot be written is skipped."""
    from xdsl.printer import Printer

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
    path = _trace_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(record), mode=0o600)
    except OSError:
        pass
