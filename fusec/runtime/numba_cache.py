"""Numba's on-disk cache for fusec's kernels, with every file authenticated.

Numba stores compiled machine code as pickles (an index ``.nbi`` and data
files ``.nbc`` beside the module), and unpickling runs code: a cache file
another user could write is a way to run code as whoever loads it. fusec's
kernels therefore use Numba's cache through ``SignedIndexDataCacheFile``: the
same files and the same atomic writes, but each file is
``SEAL + HMAC-SHA256(key, file name + body) + body`` with the kernel cache's
per-user secret key (``fusec.runtime.cache``), checked before anything is
unpickled. A file that does not verify (forged, torn, from another key, or in
Numba's own format) is ignored: the kernel is compiled and the file rewritten.

* ``cached_njit`` replaces ``numba.njit(..., cache=True)`` in generated cpu
  modules (same arguments);
* ``enable_signed_caching(dispatcher)`` replaces ``dispatcher.enable_caching()``
  (used for the CUDA kernels);
* ``sealed_njit`` replaces ``numba.njit(cache=True)`` for fusec's own helpers that
  generated kernels call (sealed with the default kernel cache's key).

Both take the key of the ``KernelCache`` that is importing the module
(``fusec.runtime.seal.loading``); outside one, kernels are compiled without a
disk cache.

This builds on Numba internals (``Dispatcher._cache``, ``Cache._cache_file``,
``IndexDataCacheFile``'s load/save methods), stable for years and pinned by
``numba<0.70``; ``tests/runtime/test_cache_security.py`` fails if they change.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numba.core.caching import IndexDataCacheFile

from fusec.runtime.seal import Signer, current_signer


class SignedIndexDataCacheFile(IndexDataCacheFile):
    """Numba's index/data cache files, sealed with an HMAC (see the module docstring)."""

    def __init__(
        self, original: IndexDataCacheFile, signer: Signer, folder: str | None = None
    ) -> None:
        base = original._index_name.removesuffix(".nbi")
        super().__init__(folder or original._cache_path, base, original._source_stamp)
        self._signer = signer

    def _read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        body = self._signer.open(os.path.basename(path), data)
        if body is None and self._signer.on_rejected is not None:
            self._signer.on_rejected(Path(path))
        return body

    def _write(self, path: str, body: bytes) -> None:
        with self._open_for_write(path) as handle:
            handle.write(self._signer.seal(os.path.basename(path), body))

    def _load_index(self) -> dict:
        body = self._read(self._index_path)
        if body is None:
            return {}
        version, stamp, overloads = pickle.loads(body)  # authenticated: written by us
        if version != self._version or stamp != self._source_stamp:
            return {}
        return overloads

    def _save_index(self, overloads: dict) -> None:
        self._write(self._index_path, self._dump((self._version, self._source_stamp, overloads)))

    def _load_data(self, name: str) -> Any:
        body = self._read(self._data_path(name))
        if body is None:
            raise OSError(f"{name}: missing or not authentic")  # Cache.load: a miss
        return pickle.loads(body)

    def _save_data(self, name: str, data: Any) -> None:
        self._write(self._data_path(name), self._dump(data))


def enable_signed_caching(
    dispatcher: Any, signer: Signer | None = None, folder: Path | None = None
) -> bool:
    """Give ``dispatcher`` Numba's disk cache with sealed files, in ``folder`` (default:
    the folder Numba picks); False if it cannot cache (no kernel cache is loading, or
    Numba refuses to cache this function)."""
    signer = signer if signer is not None else current_signer()
    if signer is None:
        return False
    try:
        dispatcher.enable_caching()
    except Exception:  # e.g. a function Numba cannot locate a cache folder for
        return False
    cache = dispatcher._cache
    if folder is not None:
        cache._cache_path = str(folder)
    cache._cache_file = SignedIndexDataCacheFile(
        cache._cache_file, signer, None if folder is None else str(folder)
    )
    return True


def compile_once_per_types(dispatcher: Any) -> None:
    """Make jitted callers of ``dispatcher`` compile it for their arguments' types, not
    their constants' values.

    Numba types an integer constant an njit function passes on as ``Literal[int](256)``
    and compiles the callee once per distinct set of such values: every generated kernel
    calling ``gemm_nn(m, 64, 1024, a, ...)`` with its own sizes got a specialization of its
    own (~2 s of compiling each, a cache entry each, none shared: 2 of a ResNet-50 conv
    kernel's ~4 s). Unliteral, the kernels of a model share one compiled helper per tuple
    of array types, compiled once and then loaded from the disk cache. (This overrides
    ``Dispatcher.get_call_template``, the one entry the typing of a call goes through;
    ``tests/runtime/test_numba_cache.py`` fails if that changes.)"""
    from numba.core.types.misc import unliteral

    get_call_template = dispatcher.get_call_template

    def unliteral_call_template(args: Any, kws: Any) -> Any:
        args = tuple(unliteral(a) for a in args)
        kws = {name: unliteral(t) for name, t in kws.items()}
        return get_call_template(args, kws)

    dispatcher.get_call_template = unliteral_call_template


def sealed_njit(py_func: Callable[..., Any]) -> Any:
    """``numba.njit`` for fusec's own compiled helpers (``fusec.targets.cpu.blas``,
    ``.winograd``: called by the generated kernels), with Numba's disk cache sealed by the
    default kernel cache's key instead of ``cache=True``.

    With ``cache=True`` Numba kept those files beside the module or in the user's cache
    folder (``$XDG_CACHE_HOME/numba``), where another user may be able to write: a
    pickle planted there ran as whoever loaded it (``tests/runtime/test_cache_security.py``).
    Now they live in the kernel cache's own folder (``numba-helpers``: checked, owned,
    its key's), sealed like the kernels'; without a disk cache at all the helpers cost
    every process ~0.6 s of compiling."""
    import numba

    from fusec.runtime.cache import default_cache

    dispatcher = numba.njit(py_func)
    compile_once_per_types(dispatcher)
    cache = default_cache()
    folder = cache.root / "numba-helpers"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:  # the folder went read-only since it was checked: compile per process
        return dispatcher
    enable_signed_caching(dispatcher, cache.signer, folder)
    return dispatcher


def cached_njit(*signatures: Any, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(*signatures, cache=True, **options)`` with sealed cache files."""
    import numba

    def decorate(py_func: Callable[..., Any]) -> Any:
        dispatcher = numba.njit(**options)(py_func)
        enable_signed_caching(dispatcher)
        for signature in signatures:  # eager, as numba.njit with signatures
            dispatcher.compile(signature)
        if signatures:
            dispatcher.disable_compile()
        return dispatcher

    return decorate
