"""Fingerprints of Python functions that stay the same across processes.

A function's fingerprint covers its bytecode, line table, defaults, closure
cells and the globals it names, followed into user code (library code counts
by its module and name), numpy arrays by content. A function that reaches a
value that cannot be described the same way in another process (an object, a
user class) has no fingerprint: ``@fusec.fuse`` then caches it in memory only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import sysconfig
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


class _Unstable(Exception):
    """A value whose identity cannot be described the same way in another process."""


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs.add(str(Path(__file__).resolve().parent))
    dirs.add(str(Path(__file__).parent))
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


_LIBRARY_DIRS = _library_dirs()


def _is_library(filename: str | None) -> bool:
    return filename is not None and filename.startswith(_LIBRARY_DIRS)


def function_fingerprint(fn: Callable[..., Any]) -> str | None:
    """A hash of everything ``fn``'s trace can depend on, or None if that is not knowable."""
    digest = hashlib.sha256()
    try:
        _feed(digest, fn, set(), 0)
    except (_Unstable, RecursionError):
        return None
    return digest.hexdigest()


def _put(digest, *parts: Any) -> None:
    for part in parts:
        digest.update(part if isinstance(part, bytes) else repr(part).encode())
        digest.update(b"\x00")


def _feed(digest, obj: Any, seen: set[int], depth: int) -> None:
    if depth > 64:
        raise _Unstable
    if obj is None or obj is Ellipsis or isinstance(obj, (bool, int, float, complex, str, bytes)):
        _put(digest, type(obj).__name__, obj)
        return
    if id(obj) in seen:
        _put(digest, "<seen>")
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        data = np.ascontiguousarray(obj)
        _put(digest, "ndarray", data.dtype.str, data.shape, data.view(np.uint8).tobytes())
    elif isinstance(obj, np.generic):
        _put(digest, "npscalar", obj.dtype.str, obj.tobytes())
    elif isinstance(obj, (tuple, list)):
        _put(digest, type(obj).__name__, len(obj))
        for item in obj:
            _feed(digest, item, seen, depth + 1)
    elif isinstance(obj, (set, frozenset, dict)):
        _feed_unordered(digest, obj, seen, depth)
    elif hasattr(type(obj), "fingerprint_parts"):  # a @fusec.fuse function
        target, pipeline, fn = obj.fingerprint_parts()
        _put(digest, "fused", target, pipeline)
        _feed(digest, fn, seen, depth + 1)
    elif isinstance(obj, types.FunctionType):
        _feed_function(digest, obj, seen, depth)
    elif isinstance(obj, types.CodeType):
        _feed_code(digest, obj, seen, depth)
    elif isinstance(obj, types.ModuleType):
        _put(digest, "module", obj.__name__)
    elif isinstance(obj, functools.partial):
        _put(digest, "partial")
        for part in (obj.func, obj.args, obj.keywords):
            _feed(digest, part, seen, depth + 1)
    elif isinstance(obj, (types.BuiltinFunctionType, np.ufunc, type)) or callable(obj):
        _feed_named(digest, obj)
    else:
        raise _Unstable


def _feed_unordered(digest, obj: Any, seen: set[int], depth: int) -> None:
    """Sets and dicts: hash each item alone and sort, so iteration order does not matter."""
    items = obj.items() if isinstance(obj, dict) else ((v, None) for v in obj)
    parts = []
    for k, v in items:
        sub = hashlib.sha256()
        _feed(sub, k, set(seen), depth + 1)
        _feed(sub, v, set(seen), depth + 1)
        parts.append(sub.digest())
    _put(digest, type(obj).__name__, *sorted(parts))


def _feed_named(digest, obj: Any) -> None:
    """Library callables and classes by name: their behaviour comes with their version."""
    module = getattr(obj, "__module__", None) or ""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    source = getattr(sys.modules.get(module.partition(".")[0]), "__file__", None)
    if qualname is None or not (module == "builtins" or _is_library(source)):
        raise _Unstable  # a user class or callable object: its code is not ours to hash
    _put(digest, "named", module, qualname)


def _feed_function(digest, fn: types.FunctionType, seen: set[int], depth: int) -> None:
    code = fn.__code__
    if _is_library(code.co_filename):
        _put(digest, "libfunction", fn.__module__, fn.__qualname__)
        return
    _put(digest, "function", fn.__qualname__)
    _feed_code(digest, code, seen, depth)
    _feed(digest, fn.__defaults__, seen, depth + 1)
    _feed(digest, fn.__kwdefaults__, seen, depth + 1)
    for cell in fn.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            _put(digest, "<empty cell>")
            continue
        _feed(digest, contents, seen, depth + 1)
    names = sorted(_code_names(code))
    for name in names:
        if name in fn.__globals__:
            value = fn.__globals__[name]
            _put(digest, "global", name)
            _feed(digest, value, seen, depth + 1)
            if isinstance(value, types.ModuleType) and not _is_library(
                getattr(value, "__file__", None)
            ):
                _feed_module_attrs(digest, value, names, seen, depth)


def _feed_module_attrs(digest, module, names: list[str], seen: set[int], depth: int) -> None:
    """For a user module used as ``module.helper``, hash the helpers the code may name."""
    for name in names:
        if name in module.__dict__:
            _put(digest, "attr", module.__name__, name)
            _feed(digest, module.__dict__[name], seen, depth + 1)


def _feed_code(digest, code: types.CodeType, seen: set[int], depth: int) -> None:
    _put(
        digest,
        "code",
        code.co_code,
        code.co_linetable,
        code.co_filename,
        code.co_firstlineno,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        code.co_argcount,
        code.co_kwonlyargcount,
        code.co_flags,
    )
    for const in code.co_consts:
        _feed(digest, const, seen, depth + 1)


def _code_names(code: types.CodeType) -> set[str]:
    """Global and attribute names used by ``code`` and the functions nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names
