"""The kernel cache: in memory, and on disk so that a second process compiles nothing.

Location: ``$FUSEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/fusec``, else
``~/.cache/fusec``. Every entry is named by a key hashing what determines the
compiled code: the kernel source, the target, the device (CPU model or GPU
compute capability), the fusec version and the Numba version.

Two kinds of entries:

* **cpu modules** (``load_module``): the generated source is written to
  ``cpu/k_<key>.py`` and imported from there, so Numba's own ``cache=True``
  (which keys on the file path) stores the machine code beside it in
  ``cpu/__pycache__``. The file is created once, atomically, and never
  rewritten (a rewrite would change its mtime and invalidate Numba's index).
  A file whose content does not match its key, or a Numba cache entry that
  fails to load, is deleted and rebuilt.
* **blobs** (``get_or_build``): bytes we compile ourselves (PTX, cubins:
  Numba refuses ``cache=True`` for kernels with linked code). Each file holds a
  header with the payload's SHA-256, so a torn or corrupt file is detected,
  deleted and rebuilt. Writes go through a temporary file and ``os.replace``;
  a per-key lock file (``fcntl.flock``) makes a second process wait for the
  first build instead of repeating it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

from fusec.errors import FusecError
from fusec.ir.files import write_atomically

ENV_VAR = "FUSEC_CACHE_DIR"
_BLOB_MAGIC = b"FUSEC-BLOB-1\n"
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def cache_root() -> Path:
    """The cache folder (not created)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fusec"


def cpu_device() -> str:
    """The host CPU as Numba's code generator sees it (part of cpu cache keys)."""
    import platform

    from llvmlite import binding

    return f"{platform.machine()}-{binding.get_host_cpu_name()}"


def cache_key(*parts: str | bytes) -> str:
    """A hex key over ``parts`` plus the fusec and Numba versions."""
    import numba

    from fusec._version import __version__

    digest = hashlib.sha256()
    for part in (f"fusec {__version__}", f"numba {numba.__version__}", *parts):
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _atomic_write(path: Path, data: bytes, *, exclusive: bool) -> bool:
    """Write ``data`` to ``path`` whole; False if ``exclusive`` and another process
    published it first (``fusec.ir.files.write_atomically``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(path, data, exclusive=exclusive, sync=True, mode=0o600)


class KernelCache:
    """Compiled kernels in memory and under ``root`` on disk (see the module docstring)."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root()
        self._modules: dict[str, ModuleType] = {}
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.RLock()
        #: Counters tests and ``--timing`` read: modules imported from an existing
        #: file versus written fresh, blobs read versus built.
        self.stats = {
            "module_files_reused": 0,
            "module_files_written": 0,
            "blob_hits": 0,
            "blob_builds": 0,
            "corrupt_entries": 0,
        }

    # ----------------------------------------------------------- cpu modules
    def load_module(self, source: str, *, target: str = "cpu", device: str | None = None):
        """Import the generated module ``source`` (once per process, once per disk entry)."""
        device = cpu_device() if device is None else device
        key = cache_key(source, target, device)
        with self._lock:
            module = self._modules.get(key)
            if module is None:
                module = self._import(key, source, target)
                self._modules[key] = module
            return module

    def _import(self, key: str, source: str, target: str) -> ModuleType:
        folder = self.root / target
        path = folder / f"k_{key[:40]}.py"
        data = source.encode()
        try:
            if path.exists() and path.read_bytes() != data:
                self.stats["corrupt_entries"] += 1
                self._purge_module(path)
            if path.exists() or not _atomic_write(path, data, exclusive=True):
                self.stats["module_files_reused"] += 1
            else:
                self.stats["module_files_written"] += 1
        except OSError as err:  # a cache folder setting that is a file, read-only, ...
            raise _unusable(self.root, err) from None
        try:
            return _exec_file(path)
        except Exception:
            # a Numba cache entry that does not load (truncated, foreign): drop it, retry once
            self.stats["corrupt_entries"] += 1
            _purge_numba_cache(path)
            return _exec_file(path)

    def _purge_module(self, path: Path) -> None:
        _purge_numba_cache(path)
        path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ blobs
    def get_or_build(self, key: str, build_fn: Callable[[], bytes]) -> bytes:
        """The bytes stored under ``key``, building and storing them on a miss."""
        if not _SAFE_KEY.match(key):
            key = hashlib.sha256(key.encode()).hexdigest()
        with self._lock:
            if key in self._blobs:
                return self._blobs[key]
            path = self.root / "blobs" / f"{key}.bin"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                payload = self._read_blob(path)
            except OSError as err:
                raise _unusable(self.root, err) from None
            if payload is None:
                with _file_lock(path.with_suffix(".lock")):
                    payload = self._read_blob(path)  # built by another process meanwhile?
                    if payload is None:
                        payload = bytes(build_fn())
                        self.stats["blob_builds"] += 1
                        _atomic_write(path, _encode_blob(payload), exclusive=False)
                    else:
                        self.stats["blob_hits"] += 1
            else:
                self.stats["blob_hits"] += 1
            self._blobs[key] = payload
            return payload

    def _read_blob(self, path: Path) -> bytes | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        payload = _decode_blob(data)
        if payload is None:
            self.stats["corrupt_entries"] += 1
            path.unlink(missing_ok=True)
        return payload

    def clear(self) -> None:
        """Forget everything, in memory and on disk."""
        with self._lock:
            self._modules.clear()
            self._blobs.clear()
            shutil.rmtree(self.root, ignore_errors=True)


def _unusable(root: Path, err: OSError) -> FusecError:
    """The kernel cache folder cannot be used: say which one and how to choose another."""
    return FusecError(
        f"cannot use the kernel cache folder {root}: {err.strerror or err} "
        f"(set {ENV_VAR} to a writable folder)"
    )


def _encode_blob(payload: bytes) -> bytes:
    digest = hashlib.sha256(payload).hexdigest().encode()
    return _BLOB_MAGIC + digest + b" " + str(len(payload)).encode() + b"\n" + payload


def _decode_blob(data: bytes) -> bytes | None:
    """The payload of a stored blob, or None when the file is not intact."""
    if not data.startswith(_BLOB_MAGIC):
        return None
    head, sep, payload = data[len(_BLOB_MAGIC) :].partition(b"\n")
    if not sep:
        return None
    try:
        digest, length = head.split(b" ")
        if int(length) != len(payload):
            return None
    except ValueError:
        return None
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    return payload


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _exec_file(path: Path) -> ModuleType:
    """Import ``path`` as a module registered in ``sys.modules`` (Numba's cache needs that)."""
    name = f"_fusec_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _purge_numba_cache(path: Path) -> None:
    """Delete Numba's cache files (index and data) of the module at ``path``."""
    folders = [path.parent / "__pycache__"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        folders.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    for folder in folders:
        for entry in folder.rglob(f"{path.stem}.*"):
            if entry.suffix in (".nbi", ".nbc"):
                entry.unlink(missing_ok=True)


_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache under ``cache_root()`` (re-created if the folder setting changed)."""
    global _default
    with _default_lock:
        if _default is None or _default.root != cache_root():
            _default = KernelCache()
        return _default
