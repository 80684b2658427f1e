"""Writing files whole: a reader never sees half a file, a failure leaves none behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    exclusive: bool = False,
    sync: bool = False,
    mode: int | None = None,
) -> bool:
    """Write ``data`` to ``path`` through a temporary file in the same folder.

    The file appears complete or not at all. ``exclusive`` publishes with a
    hard link, so a file another process published first is kept (returns
    False); ``sync`` flushes the data to disk first; ``mode`` sets the
    permission bits (default: what a new file of the user gets, not
    ``mkstemp``'s 0600). OSError propagates, with nothing left behind.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent or Path("."), prefix=f".{target.name}.")
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        if not exclusive:
            os.replace(tmp, target)
            return True
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links
            if target.exists():
                return False
            os.replace(tmp, target)
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)
