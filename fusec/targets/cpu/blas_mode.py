"""Which GEMM the cpu kernels are generated for, known without importing numpy.

A cpu matmul or conv kernel's source names the GEMM its blocks call
(``import_line``): the BLAS numpy loads, at its integer width (LP64 or ILP64) and
threading mode, or the Numba fallback. ``fusec.targets.cpu.blas`` finds out by
loading numpy (~0.3 s) and probing its BLAS, which a ``fusec compile`` that writes
kernel *text* would otherwise pay on every run for one import line (issue #26).

So ``mode()`` asks ``blas`` only in a process that has numpy loaded anyway (it runs
kernels, or will: the answer then is always this process's own), and otherwise reads
the answer an earlier probe left in the kernel cache: a sealed record
(``KernelCache.read_entry``) named by a digest of what decides the answer (the numpy
and threadpoolctl installed, ``FUSEC_CPU_GEMM`` and the dynamic loader's variables),
checked against the known modes before it is used. On a miss it probes and stores.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from fusec.targets.cpu.blas_abi import ABI_VERSION, ENV_VAR, MODES, import_line_for

if TYPE_CHECKING:
    from fusec.runtime.cache import KernelCache

#: Packages whose installation decides the answer (numpy's BLAS; threadpoolctl finds it).
_PACKAGES = ("numpy", "threadpoolctl")
#: Environment variables that decide it too (which BLAS the loader loads, or none).
_ENVIRONMENT = (ENV_VAR, "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH")


def mode() -> str:
    """How generated kernels multiply: ``blas-<lp64|ilp64>-<local|global>`` or ``numba``
    (``blas.mode()``, from the cache where numpy is not loaded)."""
    if "numpy" in sys.modules or f"{__package__}.blas" in sys.modules:
        return _probe()
    cache = usable_cache()
    return _probe() if cache is None else remembered_mode(cache, _probe)


def usable_cache() -> KernelCache | None:
    """The kernel cache, or None when its folder exists and is not trusted: the mode is
    then probed, without the cache's warning (a compile has no other use for the cache;
    the commands that run kernels say why it is not used)."""
    from fusec.runtime.cache import cache_root, default_cache, untrusted_reason

    root = cache_root()
    if root.exists() and untrusted_reason(root) is not None:
        return None
    return default_cache()


def import_line() -> str:
    """The line a generated kernel module imports its GEMM and thread controls with."""
    return import_line_for(mode())


def remembered_mode(cache: KernelCache, probe: Callable[[], str]) -> str:
    """The mode recorded in ``cache`` for this installation, else ``probe()``'s, recorded."""
    name = f"probes/cpu-blas-{installation_key()}.json"
    body = cache.read_entry(name)
    if body is not None:
        try:
            found = json.loads(body).get("mode")
        except (ValueError, AttributeError):  # not JSON, or not an object
            found = None
        if isinstance(found, str) and MODES.fullmatch(found):
            return found
    found = probe()
    cache.write_entry(name, json.dumps({"mode": found}).encode())
    return found


def installation_key() -> str:
    """A digest of what decides the mode: each of ``_PACKAGES``' location and the size
    and modification time of its entry file (a reinstall changes them), found without
    importing it, and the ``_ENVIRONMENT`` variables."""
    parts = [f"abi {ABI_VERSION}", sys.prefix]
    for package in _PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except ValueError:  # in sys.modules without a spec
            spec = None
        origin = spec.origin if spec is not None else None
        try:
            info = os.stat(origin) if origin else None
        except OSError:
            info = None
        stamp = f"{info.st_size} {info.st_mtime_ns}" if info else "-"
        parts.append(f"{package} {origin} {stamp}")
    parts += [f"{var}={os.environ.get(var, '')}" for var in _ENVIRONMENT]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _probe() -> str:
    from fusec.targets.cpu import blas

    return blas.mode()
