"""Device helpers of the W4A16 kernels (``gemm/w4.py``, issue 31), given to generated
kernels through ``fusec.targets.cuda.abi``:

* ``load_words1``, ``load_words2``, ``load_words4`` ``(arr, e, dst, d)``: the int32 words
  ``arr[e:e + n]`` with one ``ld.global`` (``.v2``/``.v4``: ``e`` a multiple of ``n``) into
  ``dst[d:d + n]`` (an int32 local array); of an int16 array (16-bit floats' bits) the
  ``2 n`` elements ``arr[e:e + 2 n]`` as ``n`` words, the lower element in the low half
  (``e`` a multiple of ``2 n``): the W4A16 Tensor Core kernel's B fragments;
* ``f16_bits(raw)``, ``bf16_bits(raw)``: the float32 value of a 16-bit float's bits (an
  int16 read from an array, kept raw until used; of a wider integer, its low 16 bits);
* ``unpack_i4x8(word, magic, dst, d)``: the word's eight 4-bit fields as the float32
  ``2**23 + q_j * 16**E[j]`` (``E`` = 0, 1, 2, 3, 4, 0, 1, 2) into ``dst[d:d + 8]``;
  ``magic`` is ``w4_magic()``: the bits of ``2**23``, read once a kernel.

Why the last one: converting a code with ``I2F`` costs a conversion-unit instruction a
code, and shifting it down first an integer one more; the W4A16 kernel was
issue-bound on these, not on memory. ORing a field, left where it is in the word, into the
mantissa of ``2**23`` gives ``2**23 + q * 16**j`` exactly (one ``LOP3``) as long as the
field stays below bit 23: fields 0-4 of the word directly, fields 5-7 from the word shifted
right by 20 (one ``SHF`` for the three). One ``FFMA`` of that by ``16**-E[j]`` minus
``z + 2**(23 - 4 E[j])`` is ``q - z`` exactly (the exact result is a small integer, so its
one rounding changes nothing): a code costs a ``LOP3`` and an ``FFMA``, no conversion.

Under Numba's CUDA simulator the same names are plain Python with the same meaning.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusec.targets.cuda.constant_layouts import FIELD_EXPONENTS, MAGIC
from fusec.targets.cuda.env import simulator_enabled
from fusec.targets.cuda.rawmove import pointer, word_loader

#: The power of 16 each field of a word comes out scaled by (``unpack_i4x8``).
EXPONENTS = FIELD_EXPONENTS
WORD_COUNTS = (1, 2, 4)


def helper_names() -> list[str]:
    """The names this module gives generated kernels (through ``fusec.targets.cuda.abi``)."""
    names = ["f16_bits", "bf16_bits", "unpack_i4x8", "w4_magic"]
    return [f"load_words{n}" for n in WORD_COUNTS] + names


def _field_bits(word: int, j: int) -> int:
    source = word if j < 5 else word >> 20
    return MAGIC | (source & (0xF << (4 * EXPONENTS[j])))


def _make_sim() -> dict[str, Any]:
    helpers: dict[str, Any] = {}
    for n in WORD_COUNTS:

        def load(arr: Any, e: int, dst: Any, d: int, n: int = n) -> None:
            per = 4 // arr.dtype.itemsize  # elements a word: 1 (int32) or 2 (int16)
            if e % (n * per) or not 0 <= e <= len(arr) - n * per:
                raise AssertionError(f"load_words{n}: element {e} of {len(arr)}")
            words = np.ascontiguousarray(arr[e : e + n * per]).view(np.int32)
            for k in range(n):
                dst[d + k] = words[k]

        helpers[f"load_words{n}"] = load

    def unpack_i4x8(word: Any, magic: Any, dst: Any, d: int) -> None:
        if int(magic) != MAGIC:
            raise AssertionError(f"unpack_i4x8: magic {magic:#x}, not w4_magic()'s")
        w = int(np.uint32(np.int64(word) & 0xFFFFFFFF))
        for j in range(8):
            dst[d + j] = np.array([_field_bits(w, j)], dtype=np.uint32).view(np.float32)[0]

    helpers["unpack_i4x8"], helpers["w4_magic"] = unpack_i4x8, lambda: np.int32(MAGIC)

    # the low 16 bits of ``raw``, as the GPU helpers truncate it
    def f16_bits(raw: Any) -> np.float32:
        return np.float32(np.array([int(raw) & 0xFFFF], dtype=np.uint16).view(np.float16)[0])

    def bf16_bits(raw: Any) -> np.float32:
        bits = np.array([int(raw) & 0xFFFF], dtype=np.uint32) << 16
        return bits.view(np.float32)[0]

    helpers["f16_bits"], helpers["bf16_bits"] = f16_bits, bf16_bits
    return helpers


def _make_gpu() -> dict[str, Any]:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i32, f32 = ir.IntType(32), ir.FloatType()

    # 2**23's bits as a value ptxas cannot see as a constant (lane 0's lane id, shuffled,
    # plus MAGIC): with MAGIC a known constant, ptxas builds each field as one LOP3 with two
    # constants and rematerialises one of them (a MOV) a field; held in a register, a field
    # is one LOP3 with one immediate, the mask
    opaque_zero = ir.InlineAsm(
        ir.FunctionType(i32, []),
        "{ .reg .u32 t; mov.u32 t, %laneid; shfl.sync.idx.b32 $0, t, 0, 0x1f, 0xffffffff; }",
        "=r",
        side_effect=True,
    )

    @intrinsic
    def w4_magic(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.add(builder.call(opaque_zero, []), ir.Constant(i32, MAGIC))

        return types.int32(), codegen

    @intrinsic
    def unpack_i4x8(typingctx: Any, word: Any, magic: Any, dst: Any, d: Any) -> Any:
        sig = types.void(word, magic, dst, d)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            word_v, magic_v, dst_v, d_v = args
            w = builder.trunc(word_v, i32) if word_v.type.width > 32 else word_v
            m = builder.trunc(magic_v, i32) if magic_v.type.width > 32 else magic_v
            high = builder.lshr(w, ir.Constant(i32, 20))
            for j in range(8):
                source = w if j < 5 else high
                field = builder.and_(source, ir.Constant(i32, 0xF << (4 * EXPONENTS[j])))
                bits = builder.or_(field, m)
                index = builder.add(d_v, ir.Constant(d_v.type, j))
                ptr = pointer(context, builder, sig.args[2], dst_v, index)
                builder.store(builder.bitcast(bits, f32), ptr)
            return context.get_dummy_value()

        return sig, codegen

    helpers: dict[str, Any] = {f"load_words{n}": word_loader(n) for n in WORD_COUNTS}
    helpers["unpack_i4x8"], helpers["w4_magic"] = unpack_i4x8, w4_magic

    @intrinsic
    def f16_bits(typingctx: Any, raw: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            half = builder.bitcast(builder.trunc(args[0], ir.IntType(16)), ir.HalfType())
            return builder.fpext(half, f32)

        return types.float32(raw), codegen

    @intrinsic
    def bf16_bits(typingctx: Any, raw: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            bits = builder.zext(builder.trunc(args[0], ir.IntType(16)), i32)
            return builder.bitcast(builder.shl(bits, ir.Constant(i32, 16)), f32)

        return types.float32(raw), codegen

    helpers["f16_bits"], helpers["bf16_bits"] = f16_bits, bf16_bits
    return helpers


globals().update(_make_sim() if simulator_enabled() else _make_gpu())
__all__ = helper_names()
