"""Constants laid out for a kernel, once, at load (``KernelSource.prepared_inputs``): the
layouts the cuda kernels name and ``prepare``, which the backend calls (the kernel layer:
templates name a layout, the runtime lays constants out without importing a template).

* ``w4:<kn|nk>:<i4|ui4>``: 4-bit codes (a weight stored K x N or N x K) as int32 words
  [N][K / 8], code ``k`` of row ``n`` in bits ``4 * (k % 8)`` of word ``k // 8``, stored
  as ``q + 8`` for i4 codes (a nibble 0..15 either way): the W4A16 route's weight
  (``gemm/w4.py``).
"""

from __future__ import annotations

import numpy as np

from fusec.errors import FusecError

#: 4-bit codes a 32-bit word.
WORD = 8
#: The power of 16 each 4-bit field of a packed word comes out scaled by when the W4A16
#: kernels unpack it in place into the mantissa of 2**23 (``w4_device.unpack_i4x8``:
#: fields 0-4 where they are, 5-7 from the word shifted right by 20).
FIELD_EXPONENTS = (0, 1, 2, 3, 4, 0, 1, 2)
#: The bits of 2.0**23, whose mantissa those fields are ORed into.
MAGIC = 0x4B000000


def int4_layout(k_major: bool, signed: bool) -> str:
    """The layout name of 4-bit codes stored N x K (``k_major``) or K x N."""
    return f"w4:{'nk' if k_major else 'kn'}:{'i4' if signed else 'ui4'}"


def pack_int4(layout: str, codes: np.ndarray) -> np.ndarray:
    """4-bit ``codes`` (one a byte, or ml_dtypes int4/uint4) in ``layout`` (``int4_layout``)."""
    _, order, dtype = layout.split(":")
    values = np.asarray(codes).astype(np.int32)
    rows = values if order == "nk" else values.T
    nibbles = (rows + (8 if dtype == "i4" else 0)) & 15
    n, k = nibbles.shape
    words = np.zeros((n, k // WORD), np.uint32)
    for j in range(WORD):
        words |= nibbles[:, j::WORD].astype(np.uint32) << np.uint32(4 * j)
    return np.ascontiguousarray(words.view(np.int32))


def prepare(layout: str, array: np.ndarray) -> np.ndarray:
    """``array`` (a constant) in ``layout``, on the host."""
    if layout.startswith("w4:"):
        return pack_int4(layout, array)
    raise FusecError(f"the cuda target has no constant layout {layout!r}")
