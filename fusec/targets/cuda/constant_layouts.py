"""Constants laid out for a kernel, once, at load (``KernelSource.prepared_inputs``): the
layouts the cuda kernels name and ``prepare``, which the backend calls (the kernel layer:
templates name a layout, the runtime lays constants out without importing a template).

* ``w4:<kn|nk>:<i4|ui4>``: 4-bit codes (a weight stored K x N or N x K) as int32 words
  [N][K / 8], code ``k`` of row ``n`` in bits ``4 * (k % 8)`` of word ``k // 8``, stored
  as ``q + 8`` for i4 codes (a nibble 0..15 either way): the W4A16 route's weight
  (``gemm/w4.py``).
* ``w4gemm:<kn|nk>:<i4|ui4>``: the same words [N][K / 8], code ``2i`` of a word's eight
  in nibble ``i`` and code ``2i + 1`` in nibble ``i + 4`` (``GEMM_NIBBLE``): a word masked
  by ``0x000F000F`` after a shift by ``4i`` holds codes ``2i`` and ``2i + 1`` as the low
  bits of its two 16-bit halves, in K order: the Tensor Core GEMM's int4 B, which its
  producer warpgroup dequantizes (``include/fusec/gemm_w4.cuh``).
* ``w4mma:<kn|nk>:<i4|ui4>:<CW>``: the same nibbles as ``mma.sync`` A fragments of 16
  output columns x 16 K (``pack_int4_mma``): the W4A16 route's Tensor Core kernel
  (``gemm/w4_mma.py``).
* ``w4rs:<kn|nk>:<i4|ui4>``: the same nibbles as wgmma's m64k16 A fragments in registers,
  one 4 KB chunk a (128 output columns, 64 K) tile step (``pack_int4_rs``): the Tensor Core
  GEMM whose consumers dequantize the weight (``include/fusec/gemm_w4_rs.cuh``).
"""

from __future__ import annotations

from collections.abc import Sequence

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


def stored_nibbles(order: str, dtype: str, codes: np.ndarray) -> np.ndarray:
    """4-bit ``codes`` (stored K x N, or N x K for ``order`` "nk") as the nibbles the packed
    words hold, N x K: ``q + 8`` for i4 codes, ``q`` for ui4 (0..15 either way)."""
    values = np.asarray(codes).astype(np.int32)
    rows = values if order == "nk" else values.T
    return (rows + (8 if dtype == "i4" else 0)) & 15


def pack_int4(layout: str, codes: np.ndarray) -> np.ndarray:
    """4-bit ``codes`` (one a byte, or ml_dtypes int4/uint4) in ``layout`` (``int4_layout``)."""
    return _packed_words(layout, codes, range(WORD))


def _packed_words(layout: str, codes: np.ndarray, nibble_of: Sequence[int]) -> np.ndarray:
    """int32 words [N][K / 8] of ``codes`` (``layout``'s order and type), code ``j`` of a
    word's eight K in its nibble ``nibble_of[j]``."""
    _, order, dtype = layout.split(":")
    nibbles = stored_nibbles(order, dtype, codes)
    n, k = nibbles.shape
    words = np.zeros((n, k // WORD), np.uint32)
    for j, nibble in enumerate(nibble_of):
        words |= nibbles[:, j::WORD].astype(np.uint32) << np.uint32(4 * nibble)
    return np.ascontiguousarray(words.view(np.int32))


def int4_gemm_layout(k_major: bool, signed: bool) -> str:
    """The ``pack_int4_gemm`` layout of 4-bit codes stored N x K (``k_major``) or K x N."""
    return f"w4gemm:{'nk' if k_major else 'kn'}:{'i4' if signed else 'ui4'}"


#: The nibble of a ``w4gemm`` word holding code j of its eight K.
GEMM_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)


def pack_int4_gemm(layout: str, codes: np.ndarray) -> np.ndarray:
    """4-bit ``codes`` in ``layout`` (``int4_gemm_layout``): int32 words [N][K / 8]."""
    return _packed_words(layout, codes, GEMM_NIBBLE)


def int4_mma_layout(k_major: bool, signed: bool, words: int) -> str:
    """The ``pack_int4_mma`` layout of 4-bit codes, ``words`` words a lane and chunk."""
    return f"w4mma:{'nk' if k_major else 'kn'}:{'i4' if signed else 'ui4'}:{words}"


#: The nibble of a packed word holding (row g + 8 * h, code j of a lane's four K) of an
#: ``mma.sync.m16n8k16`` A fragment: pairs (0, 4), (1, 5), (2, 6), (3, 7) of nibbles are
#: the fragment's registers a0a1 (row g, K 0-1), a2a3 (row g + 8), a4a5 (row g, K 2-3), a6a7.
MMA_NIBBLE = {
    (0, 0): 0, (0, 1): 4, (1, 0): 1, (1, 1): 5, (0, 2): 2, (0, 3): 6, (1, 2): 3, (1, 3): 7,
}  # fmt: skip


def pack_int4_mma(layout: str, codes: np.ndarray) -> np.ndarray:
    """4-bit ``codes`` in ``layout`` (``int4_mma_layout``): int32 words [N/16 tiles][K/(16
    CW) chunks][32 lanes][CW steps] (N padded to 16 with code 0's nibble). Lane ``4 g +
    t``'s word of step ``s`` of chunk ``c`` holds the codes of output columns ``16 T + g``
    and ``+ 8`` at K = ``16 CW c + 4 CW t + 4 s + (0..3)`` (``MMA_NIBBLE``), so that a lane's
    activations over a chunk are 4 CW contiguous elements: the fragment's K labels 2t,
    2t + 1, 2t + 8, 2t + 9 stand for those four K, in A and in B alike (a sum over K does
    not depend on their order)."""
    _, order, dtype, words = layout.split(":")
    cw = int(words)
    nibbles = stored_nibbles(order, dtype, codes).astype(np.uint32)
    n, k = nibbles.shape
    tiles = -(-n // 16)
    padded = np.zeros((tiles * 16, k), np.uint32)
    padded[:n] = nibbles
    # [tile][h][g][chunk][t][s][j]: row 16 T + 8 h + g, K 16 CW c + 4 CW t + 4 s + j
    grid = padded.reshape(tiles, 2, 8, k // (16 * cw), 4, cw, 4)
    packed = np.zeros((tiles, 8, k // (16 * cw), 4, cw), np.uint32)
    for (h, j), nibble in MMA_NIBBLE.items():
        packed |= grid[:, h, :, :, :, :, j] << np.uint32(4 * nibble)
    # -> [tile][chunk][g][t][s]: a lane (4 g + t) reads its CW words of a chunk at once
    return np.ascontiguousarray(packed.transpose(0, 2, 1, 3, 4)).view(np.int32).reshape(-1)


def int4_rs_layout(k_major: bool, signed: bool) -> str:
    """The ``pack_int4_rs`` layout of 4-bit codes stored N x K (``k_major``) or K x N."""
    return f"w4rs:{'nk' if k_major else 'kn'}:{'i4' if signed else 'ui4'}"


#: Output columns a ``w4rs`` chunk (the GEMM's BN: two consumer warpgroups of 64) and K.
RS_COLUMNS = 128
RS_STEP = 64


def pack_int4_rs(layout: str, codes: np.ndarray) -> np.ndarray:
    """4-bit ``codes`` in ``layout`` (``int4_rs_layout``): int32 words [N/128 tiles][K/64
    steps][2 consumers][4 warps][32 lanes][4 k16] (N padded to 128 with code 0's nibble):
    lane ``4 g + t`` of warp ``w`` of consumer ``c`` holds in word ``kk`` its m16k16 A
    fragment of output columns ``128 T + 64 c + 16 w + g`` (``+ 8``) at K = ``64 step +
    16 kk`` + (2t, 2t + 1, 2t + 8, 2t + 9) (``MMA_NIBBLE``: nibbles (i, i + 4) are fragment
    register i), so that a (tile, step) is one contiguous 4 KB chunk and a lane's four
    words one 16-byte shared-memory read."""
    _, order, dtype = layout.split(":")
    nibbles = stored_nibbles(order, dtype, codes).astype(np.uint32)
    n, k = nibbles.shape
    tiles = -(-n // RS_COLUMNS)
    padded = np.zeros((tiles * RS_COLUMNS, k), np.uint32)
    padded[:n] = nibbles
    # [T][c][w][h][g][step][kk][hi][t][e]: column 128 T + 64 c + 16 w + 8 h + g,
    # K 64 step + 16 kk + 8 hi + 2 t + e (fragment K position j = 2 hi + e)
    grid = padded.reshape(tiles, 2, 4, 2, 8, k // RS_STEP, 4, 2, 4, 2)
    packed = np.zeros((tiles, 2, 4, 8, k // RS_STEP, 4, 4), np.uint32)
    for (h, j), nibble in MMA_NIBBLE.items():
        packed |= grid[:, :, :, h, :, :, :, j // 2, :, j % 2] << np.uint32(4 * nibble)
    # [T][c][w][g][step][kk][t] -> [T][step][c][w][g][t][kk]
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 2, 3, 6, 5)).view(np.int32).reshape(-1)


def prepare(layout: str, array: np.ndarray) -> np.ndarray:
    """``array`` (a constant) in ``layout``, on the host."""
    if layout.startswith("w4rs:"):
        return pack_int4_rs(layout, array)
    if layout.startswith("w4mma:"):
        return pack_int4_mma(layout, array)
    if layout.startswith("w4gemm:"):
        return pack_int4_gemm(layout, array)
    if layout.startswith("w4:"):
        return pack_int4(layout, array)
    raise FusecError(f"the cuda target has no constant layout {layout!r}")
