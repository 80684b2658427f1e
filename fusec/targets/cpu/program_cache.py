"""The program cache: a compiled cpu program of an ONNX model, ready to run, on disk.

A warm compile of a real model spent its seconds outside the kernels (issue 30,
benchmarks/results/compile-time-cpu.md): importing onnx, the ONNX import, the passes,
code generation, the Winograd and GEMM layouts of constant weights and packing the
constants. ``compile_onnx`` keys the model's *compiled program* instead, and on a hit
builds it from what was stored (``CachedCpuProgram``), with no ONNX import (``onnx``
is not even imported), no pass and no code generation; the kernels then load from the
kernel cache as on any warm call.

**Key** (``program_key``): the model file's SHA-256, the input shapes, the target,
pipeline and entry, fusec's version and a hash of its source tree (``tree_digest``:
any change to fusec's code misses), the Python, numpy and Numba versions, the host CPU
(``cache.cpu_device``), Numba's thread count (the scratch plan depends on it) and every
``FUSEC_*`` and ``NUMBA_*`` environment variable but the cache's own. The key's first
half names the model, options and settings, its second what built it: storing a
program removes the entries of the same first half (an edited fusec leaves no second
copy of a model's constants behind).

**Entry**: ``programs/<key>.plan``, a sealed record (``KernelCache.write_entry``:
HMAC under the cache's key, since it is unpickled) holding the buffer plan, each
launch's ``KernelSource``, the argument specs and the SHA-256 and size of
``programs/<key>.npy``, the packed constants (laid-out weights included) that a hit
maps copy-on-write (``np.load(mmap_mode="c")``: shared with the page cache, no copy)
once their SHA-256 matches (that reads them once: ~0.25 s for BERT-base's 328 MB).
Both are written whole to a temporary name and renamed, the constants first, so a
reader finds a plan only with its constants. A plan that does not verify, a
constants file of another digest or size, or a record of another format is ignored:
the model is compiled again and the entry rewritten (never a wrong program).

``FUSEC_PROGRAM_CACHE=0`` turns it off; ``$FUSEC_CACHE_DIR`` says where it lives (the
kernel cache's folder). Only programs that run compiled (``CpuProgram.plan``) are
stored.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fusec.environ import getenv
from fusec.errors import FusecError
from fusec.runtime.launch import Launch
from fusec.target import get_target
from fusec.targets.cpu.program import CpuProgram

#: ``FUSEC_PROGRAM_CACHE=0`` turns the program cache off.
ENV_VAR = "FUSEC_PROGRAM_CACHE"
#: The entries' folder inside the kernel cache's.
FOLDER = "programs"
#: A record of another format is a miss (bump it when ``Record`` changes).
FORMAT = 1
#: Environment variables that do not change the compiled program.
_IGNORED_ENV = {"FUSEC_CACHE_DIR", ENV_VAR, "FUSEC_COMPILE_JOBS", "FUSEC_DEBUG"}


def enabled() -> bool:
    """False when ``FUSEC_PROGRAM_CACHE=0``."""
    return getenv(ENV_VAR, "1").strip() != "0"


@functools.cache
def tree_digest() -> str:
    """SHA-256 of fusec's Python sources (names and bytes): any change misses."""
    root = Path(__file__).resolve().parents[2]  # the fusec package
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def program_key(model_digest: str, options: Mapping[str, Any]) -> str:
    """The key of a model's compiled program (see the module docstring):
    ``<model, options, threads and settings>-<fusec, libraries and host>``, so that
    storing a program removes the stale entries of the same model and options
    (``store``)."""
    import numba

    from fusec._version import __version__
    from fusec.runtime.cache import cpu_device
    from fusec.targets.cpu.host import numba_threads

    env = sorted(
        (k, v)
        for k, v in os.environ.items()
        if k.startswith(("FUSEC_", "NUMBA_")) and k not in _IGNORED_ENV
    )
    what = [model_digest, sorted(options.items()), numba_threads(), env]
    built_by = [FORMAT, __version__, tree_digest(), sys.version, np.__version__]
    built_by += [numba.__version__, cpu_device()]
    model = hashlib.sha256(repr(what).encode()).hexdigest()[:24]
    build = hashlib.sha256(repr(built_by).encode()).hexdigest()[:24]
    return f"{model}-{build}"


@dataclass
class Record:
    """What a hit needs besides the constants: the stored form of a ``CpuProgram``."""

    format: int
    entry_name: str
    plan: Any  # BufferPlan, its constants emptied
    kernels: list[Any]  # each launch's KernelSource, views included
    arg_specs: list[tuple[tuple[int, ...], np.dtype]]
    call_bytes: int
    constants_digest: str
    constants_bytes: int


# ----------------------------------------------------------------------- reading


def load(cache: Any, key: str) -> CachedCpuProgram | None:
    """The program stored under ``key`` in ``cache`` (a ``KernelCache``), or None on a
    miss or an entry that is stale, corrupt or of another format (then removed)."""
    body = cache.read_entry(f"{FOLDER}/{key}.plan")
    if body is None:
        return None
    try:
        record = pickle.loads(body)
        if not isinstance(record, Record) or record.format != FORMAT:
            raise ValueError("another format")
        constants = _load_constants(cache.root / FOLDER / f"{key}.npy", record)
    except (OSError, ValueError, pickle.UnpicklingError, AttributeError, EOFError):
        _remove(cache, key)
        return None
    return CachedCpuProgram(record, constants, cache)


def _load_constants(path: Path, record: Record) -> np.ndarray:
    """The packed constants, mapped copy-on-write after their digest is checked."""
    if path.stat().st_size < record.constants_bytes:
        raise ValueError("constants truncated")
    array = np.load(path, mmap_mode="c")
    if array.dtype != np.uint8 or array.ndim != 1 or array.nbytes != record.constants_bytes:
        raise ValueError("constants of another layout")
    if hashlib.sha256(array.data).hexdigest() != record.constants_digest:
        raise ValueError("constants of another digest")
    return np.asarray(array)  # a plain ndarray over the map, writable (copy-on-write)


def _remove(cache: Any, key: str) -> None:
    for suffix in (".plan", ".npy"):
        try:
            (cache.root / FOLDER / f"{key}{suffix}").unlink()
        except OSError:
            pass


# ----------------------------------------------------------------------- writing


def store(cache: Any, key: str, program: Any) -> bool:
    """Store a ``CpuProgram`` that runs compiled under ``key``; False when it cannot
    (no plan, or the folder is not writable)."""
    plan = program.plan
    if plan is None or any(spec is None for spec in program._arg_specs):
        return False
    constants = np.ascontiguousarray(plan.constants, dtype=np.uint8).reshape(-1)
    record = Record(
        FORMAT,
        program.entry_name,
        replace(plan, constants=np.empty(0, np.uint8)),
        [launch.kernel for launch in program.launches],
        list(program._arg_specs),
        program.call_bytes,
        hashlib.sha256(constants.data).hexdigest(),
        constants.nbytes,
    )
    try:
        body = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        _remove_stale(cache.root / FOLDER, key)
        _write_npy(cache.root / FOLDER / f"{key}.npy", constants)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return False
    return bool(cache.write_entry(f"{FOLDER}/{key}.plan", body))


def _remove_stale(folder: Path, key: str) -> None:
    """Remove the entries of the same model and options built by another fusec, library
    or host (``program_key``'s second half): an entry holds all of a model's
    constants, so an edit of fusec must not leave one more copy each time."""
    model = key.split("-")[0]
    for path in folder.glob(f"{model}-*"):
        if not path.name.startswith(f"{key}."):
            path.unlink(missing_ok=True)


def _write_npy(path: Path, array: np.ndarray) -> None:
    """``array`` as ``path`` (.npy), written to a temporary name and renamed."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temp, "wb") as file:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, np.lib.format.header_data_from_array_1_0(array)
            )
            file.write(header.getvalue())
            file.write(array.data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


# ----------------------------------------------------------------------- the program


class CachedCpuProgram(CpuProgram):
    """A ``CpuProgram`` built from a ``Record`` and its constants, with no IR: the
    launches keep their kernels (no operands or results), the buffer plan is the
    stored one. Calls run compiled as the original's did; what needs the IR (the
    Python launch loop a ``recorder`` takes) is refused with a FusecError."""

    def __init__(self, record: Record, constants: np.ndarray, cache: Any) -> None:
        # Program.__init__ plans from the IR; here every result of that is stored.
        self.target = get_target("cpu")
        self.backend = self.target.backend(cache)
        self.function = None  # type: ignore[assignment]
        self.entry_name = record.entry_name
        self.constants, self.prepared_constants = {}, {}
        self.launches = [Launch(kernel, [], []) for kernel in record.kernels]
        self.returns = []
        self.call_bytes = record.call_bytes
        self._fns = None
        self._lock = threading.Lock()
        self._arg_specs = record.arg_specs  # type: ignore[assignment]
        self._buffers_name = f"the buffers of @{record.entry_name}"
        self.compiled_reason = None
        self.plan = replace(record.plan, constants=constants)
        self._segments = self._split = None
        self._local = threading.local()

    def __call__(self, args: Sequence[Any], *, alloc: Any = None, recorder: Any = None) -> tuple:
        if recorder is not None:
            raise FusecError(
                "a program loaded from the program cache runs compiled only: set "
                f"{ENV_VAR}=0 to compile it with per-launch timing"
            )
        return super().__call__(args, alloc=alloc)

    def _arguments(self, args: Sequence[Any]) -> list[np.ndarray]:
        """The arguments as arrays of the signature's shapes and dtypes exactly."""
        specs = self._arg_specs
        if len(args) != len(specs):
            raise FusecError(f"@{self.entry_name} takes {len(specs)} argument(s), got {len(args)}")
        arrays = []
        for k, (arg, spec) in enumerate(zip(args, specs, strict=True)):
            array = np.asarray(arg)
            assert spec is not None  # store() keeps only programs whose specs are all known
            if array.shape != spec[0] or array.dtype != spec[1]:
                raise FusecError(
                    f"@{self.entry_name} argument {k}: expected a {spec[1]} array of shape "
                    f"{spec[0]}, got {array.dtype} {array.shape}"
                )
            arrays.append(array)
        return arrays
