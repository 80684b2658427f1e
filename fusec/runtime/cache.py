"""The kernel cache: in memory, and on disk so that a second process compiles nothing.

Location: ``$FUSEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/fusec`` (when absolute, as the
XDG Base Directory specification has it), else ``~/.cache/fusec`` (``cache_root``).
Every entry is named by a key hashing what determines the compiled code: the kernel
source, the target, the device (CPU model or GPU compute capability), the fusec
version and the Numba version; a kernel module's key also holds the digest of the fusec
sources it runs besides its text (``module_key``).

**Only a private folder is used, and every entry is authenticated.** What the
cache loads is executed: generated modules are imported, Numba's cache files
and the trace cache's records are unpickled or compiled, cubins are loaded on
the GPU. So before first use the folder is checked (``untrusted_reason``): it
must be a directory owned by the current user and writable by nobody else, in
a path whose every ancestor is owned by that user or root and writable by
nobody else unless sticky (like ``/tmp``); a missing folder is created
``0700``. Each entry is sealed with an HMAC-SHA256 under a per-user secret key
kept in ``<root>/key`` (32 random bytes, ``0600``, created on first use), and
an entry that does not verify is ignored, deleted and rebuilt. A folder that
fails the check, cannot be created or is read-only is not used: one
``FusecWarning`` says why, and the process caches in a private temporary
folder of its own (removed at exit), i.e. compiles everything again.

Three kinds of entries:

* **kernel modules** (``load_module``): the generated source is written to
  ``<target>/k_<key>.py`` (atomically, once, never rewritten: a rewrite would
  change its mtime and invalidate Numba's index) and imported from the bytes
  the cache generated, not re-read: a file that differs is deleted and
  rewritten. Numba's compiled code goes beside it in ``__pycache__``, sealed
  (``fusec.runtime.numba_cache``).
* **blobs** (``get_or_build``): bytes we compile ourselves (PTX, cubins:
  Numba refuses ``cache=True`` for kernels with linked code), sealed. Writes go
  through a temporary file and ``os.replace``; a per-key lock file
  (``fcntl.flock``) makes a second process wait for the first build instead of
  repeating it.
* **records** (``read_entry``/``write_entry``): other sealed files, e.g. the
  ``@fusec.fuse`` trace cache.

A process killed mid-write leaves at most a temporary file, never an entry:
every entry is published by a rename or a hard link of a complete file.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

from fusec.errors import FusecWarning
from fusec.ir.files import write_atomically
from fusec.runtime.seal import Signer, loading

ENV_VAR = "FUSEC_CACHE_DIR"
KEY_FILE = "key"
_KEY_BYTES = 32
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_SAFE_ENTRY = re.compile(r"^[A-Za-z0-9_-]{1,32}/[A-Za-z0-9_.-]{1,160}$")


def cache_root() -> Path:
    """The cache folder (not created): ``$FUSEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/fusec``,
    else ``~/.cache/fusec``. As the XDG Base Directory specification says, an empty or
    relative ``$XDG_CACHE_HOME`` is ignored (a relative one would put the cache wherever
    the process happens to run)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    xdg = Path(os.environ.get("XDG_CACHE_HOME", "")).expanduser()
    base = xdg if xdg.is_absolute() else Path.home() / ".cache"
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


def module_key(source: str, target: str, device: str | None = None) -> str:
    """The key of a generated kernel module: its text, target and device (the host CPU
    when None), and the digest of the fusec sources it runs besides its text
    (``source_digest.kernel_layer_digest``: Numba compiles them into the module's
    cached code, so an edit of one must not load the old code)."""
    from fusec.runtime.source_digest import kernel_layer_digest

    device = cpu_device() if device is None else device
    return cache_key(source, target, device, kernel_layer_digest(target))


# --------------------------------------------------------------- trusting a folder


def untrusted_reason(folder: Path) -> str | None:
    """Why another user could change what is in ``folder`` (None when nobody can).

    ``folder`` must be a directory owned by us and writable by nobody else; each
    ancestor owned by us or root and writable by nobody else, or sticky (a user
    cannot rename another's entry out of a sticky folder such as ``/tmp``).
    """
    me = os.geteuid()
    try:
        real = folder.resolve(strict=True)
        info = os.stat(real)
    except OSError as err:
        return f"cannot be inspected ({err.strerror or err})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != me:
        return f"is owned by uid {info.st_uid}, not by you (uid {me})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.filemode(info.st_mode)})"
    for parent in real.parents:
        info = os.stat(parent)
        if info.st_uid not in (me, 0):
            return f"lies in {parent}, owned by uid {info.st_uid} (who could replace it)"
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not info.st_mode & stat.S_ISVTX:
            return f"lies in {parent}, writable by other users (who could replace it)"
    return None


def _make_private_folder(folder: Path) -> None:
    """Create ``folder`` (parents with default permissions, itself ``0700``)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass


def _read_or_create_key(root: Path) -> bytes:
    """The secret key in ``root/key``; created (``0600``) when missing. OSError when the
    file is not ours alone, not a regular file, or cannot be read or created."""
    path = root / KEY_FILE
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            _publish_key(path)
            continue
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                raise PermissionError(f"{path} is not a file of yours")
            if info.st_mode & 0o077:
                raise PermissionError(f"{path} is readable or writable by others")
            key = handle.read()
        if len(key) == _KEY_BYTES:
            return key
        raise PermissionError(f"{path} does not hold a key ({len(key)} bytes)")
    raise PermissionError(f"cannot create {path}")


def _publish_key(path: Path) -> None:
    """Write a new random key next to ``path`` and link it there unless one exists."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(_KEY_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process was first: use its key
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(root: Path, reason: str) -> None:
    with _warned_lock:
        if str(root) in _warned:
            return
        _warned.add(str(root))
    warnings.warn(
        f"not using the kernel cache folder {root}: it {reason}; compiled kernels are kept "
        f"for this process only (set {ENV_VAR} to a folder only you can write)",
        FusecWarning,
        stacklevel=4,
    )


def _private_temp_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="fusec-cache-"))  # 0700, a fresh name
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# ------------------------------------------------------------------------ writing


def _atomic_write(path: Path, data: bytes, *, exclusive: bool) -> bool:
    """``data`` to ``path`` whole (``fusec.ir.files.write_atomically``, synced, 0600, in a
    0700 folder); False if ``exclusive`` and another process published it first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return write_atomically(path, data, exclusive=exclusive, sync=True, mode=0o600)


# -------------------------------------------------------------------------- cache


class KernelCache:
    """Compiled kernels in memory and under ``root`` on disk (see the module docstring).

    The folder is checked, and the key read, on first use; ``root`` is then the
    folder actually used (a private temporary one if ``requested_root`` was not
    trusted or not writable).
    """

    def __init__(self, root: Path | str | None = None) -> None:
        self.requested_root = Path(root) if root is not None else cache_root()
        self._root: Path | None = None
        self._signer: Signer | None = None
        self._modules: dict[str, ModuleType] = {}
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.RLock()
        #: Counters tests and ``--timing`` read: modules imported from an existing
        #: file versus written fresh, blobs read versus built, entries rejected.
        self.stats = {
            "module_files_reused": 0,
            "module_files_written": 0,
            "blob_hits": 0,
            "blob_builds": 0,
            "corrupt_entries": 0,
        }
        #: Why ``requested_root`` is not used (None when it is).
        self.fallback_reason: str | None = None

    # ------------------------------------------------------------- the folder
    @property
    def root(self) -> Path:
        """The folder in use (checked, or the private fallback)."""
        self._ready()
        assert self._root is not None
        return self._root

    @property
    def signer(self) -> Signer:
        """The ``Signer`` holding this cache's key."""
        self._ready()
        assert self._signer is not None
        return self._signer

    def _ready(self) -> None:
        with self._lock:
            if self._root is not None:
                return
            root: Path = self.requested_root
            key: bytes | None = None
            reason: str | None = None
            try:
                _make_private_folder(root)
                reason = untrusted_reason(root)
                if reason is None:
                    root = root.resolve()  # what was checked, whatever links change later
                    key = _read_or_create_key(root)
                    _probe_writable(root)
            except OSError as err:
                reason = reason or _describe(err)
            if reason is not None or key is None:
                self.fallback_reason = reason or "has no key"
                _warn_once(self.requested_root, self.fallback_reason)
                root, key = _private_temp_folder(), os.urandom(_KEY_BYTES)
            self._signer = Signer(key, self._rejected)
            self._root = root

    def _rejected(self, path: Path) -> None:
        """A Numba cache file that does not verify: count it (it is recompiled)."""
        self.stats["corrupt_entries"] += 1

    # ----------------------------------------------------------- kernel modules
    def load_module(self, source: str, *, target: str = "cpu", device: str | None = None):
        """Import the generated module ``source`` (once per process, once per disk entry)."""
        key = module_key(source, target, device)
        with self._lock:
            module = self._modules.get(key)
            if module is None:
                module = self._import(key, source, target)
                self._modules[key] = module
            return module

    def has_module(self, source: str, *, target: str = "cpu", device: str | None = None) -> bool:
        """Whether the module of ``source`` is imported in this process or stored in the
        folder (then its compiled code loads from Numba's cache files beside it, unless
        the process that wrote it died before them)."""
        key = module_key(source, target, device)
        return key in self._modules or self._module_path(key, target).exists()

    def _module_path(self, key: str, target: str) -> Path:
        return self.root / target / f"k_{key[:40]}.py"

    def _import(self, key: str, source: str, target: str) -> ModuleType:
        path = self._module_path(key, target)
        data = source.encode()
        try:
            if _read_if_exists(path) not in (None, data):
                self.stats["corrupt_entries"] += 1
                self._purge_module(path)
            if path.exists() or not _atomic_write(path, data, exclusive=True):
                self.stats["module_files_reused"] += 1
            else:
                self.stats["module_files_written"] += 1
        except OSError:  # the folder went away or read-only since the check: no file cache
            path = _private_temp_folder() / target / path.name
            _atomic_write(path, data, exclusive=True)
        with loading(self.signer):
            try:
                return _exec_source(path, source)
            except Exception:
                # a Numba cache entry that does not load (another Numba build): drop it, retry
                self.stats["corrupt_entries"] += 1
                _purge_numba_cache(path)
                return _exec_source(path, source)

    def _purge_module(self, path: Path) -> None:
        _purge_numba_cache(path)
        path.unlink(missing_ok=True)

    # --------------------------------------------------------------- records
    def read_entry(self, name: str) -> bytes | None:
        """The body of the sealed entry ``name`` (``"folder/file"``), or None when it is
        missing or does not verify (then it is deleted)."""
        path = self._entry_path(name)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        body = self.signer.open(name, data)
        if body is None:
            self.stats["corrupt_entries"] += 1
            with contextlib.suppress(OSError):
                path.unlink()
        return body

    def write_entry(self, name: str, body: bytes) -> bool:
        """Store ``body`` as the sealed entry ``name``, atomically; False if it cannot."""
        try:
            _atomic_write(self._entry_path(name), self.signer.seal(name, body), exclusive=False)
        except OSError:
            return False
        return True

    def _entry_path(self, name: str) -> Path:
        if not _SAFE_ENTRY.match(name) or ".." in name:
            raise ValueError(f"bad cache entry name {name!r}")
        return self.root / name

    # ------------------------------------------------------------------ blobs
    def get_or_build(self, key: str, build_fn: Callable[[], bytes]) -> bytes:
        """The bytes stored under ``key``, building and storing them on a miss."""
        if not _SAFE_KEY.match(key):
            key = hashlib.sha256(key.encode()).hexdigest()
        name = f"blobs/{key}.bin"
        with self._lock:
            if key in self._blobs:
                return self._blobs[key]
            payload = self.read_entry(name)
            if payload is None:
                with _file_lock(self._entry_path(name).with_suffix(".lock")):
                    payload = self.read_entry(name)  # built by another process meanwhile?
                    if payload is None:
                        payload = bytes(build_fn())
                        self.stats["blob_builds"] += 1
                        self.write_entry(name, payload)
                    else:
                        self.stats["blob_hits"] += 1
            else:
                self.stats["blob_hits"] += 1
            self._blobs[key] = payload
            return payload

    def clear(self) -> None:
        """Forget everything, in memory and on disk."""
        with self._lock:
            self._modules.clear()
            self._blobs.clear()
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def _describe(err: OSError) -> str:
    if isinstance(err, PermissionError) and not err.strerror:
        return f"cannot be used ({err})"
    return f"cannot be used ({err.strerror or err})"


def _probe_writable(root: Path) -> None:
    """OSError unless a file can be created in ``root`` (read-only folders and mounts)."""
    fd, probe = tempfile.mkstemp(dir=root, prefix=".probe.")
    os.close(fd)
    os.unlink(probe)


def _read_if_exists(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (best effort: no lock where none can be created)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = open(path, "a+b")  # closed by the with below
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _exec_source(path: Path, source: str) -> ModuleType:
    """Run ``source`` as the module at ``path`` (registered in ``sys.modules``, as
    Numba's cache needs): the verified text itself, never the file read back."""
    name = f"_fusec_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
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
        if _default is None or _default.requested_root != cache_root():
            _default = KernelCache()
        return _default
