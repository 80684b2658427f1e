"""Sealed files of the kernel cache: ``SEAL + HMAC-SHA256(key, name + body) + body``.

The key is the cache's per-user secret (``fusec.runtime.cache``); the name is
the file's name within the cache, so a valid file of one entry is no valid
file of another. ``loading`` tells the code that Numba runs while a kernel
module is imported which key to seal its cache files with
(``fusec.runtime.numba_cache``).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
from collections.abc import Callable, Iterator
from pathlib import Path

#: The first bytes of every sealed file (Numba's, blobs, records) of the kernel cache.
SEAL = b"FUSEC-SEALED-1\n"
_MAC_BYTES = 32


class Signer:
    """Seals and opens files with a kernel cache's key (``on_rejected``: told of each
    Numba cache file that does not verify)."""

    def __init__(self, key: bytes, on_rejected: Callable[[Path], None] | None = None) -> None:
        self.key = key
        self.on_rejected = on_rejected

    def seal(self, name: str, body: bytes) -> bytes:
        return SEAL + self.mac(name, body) + body

    def open(self, name: str, data: bytes) -> bytes | None:
        """The body of a sealed file named ``name``, or None when it does not verify."""
        if not data.startswith(SEAL) or len(data) < len(SEAL) + _MAC_BYTES:
            return None
        mac = data[len(SEAL) : len(SEAL) + _MAC_BYTES]
        body = data[len(SEAL) + _MAC_BYTES :]
        return body if hmac.compare_digest(mac, self.mac(name, body)) else None

    def mac(self, name: str, body: bytes) -> bytes:
        digest = hmac.new(self.key, digestmod=hashlib.sha256)
        digest.update(name.encode() + b"\0")
        digest.update(body)
        return digest.digest()


_loading: contextvars.ContextVar[Signer | None] = contextvars.ContextVar(
    "fusec_kernel_cache_signer", default=None
)


@contextlib.contextmanager
def loading(signer: Signer) -> Iterator[None]:
    """Within this block, kernels cache through ``signer`` (the kernel cache's key)."""
    token = _loading.set(signer)
    try:
        yield
    finally:
        _loading.reset(token)


def current_signer() -> Signer | None:
    """The signer of the kernel cache importing a module now (None outside one)."""
    return _loading.get()
