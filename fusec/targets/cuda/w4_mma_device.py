"""Device helpers of the W4A16 route's Tensor Core kernel (``gemm/w4_mma.py``, issue 31),
given to generated kernels through ``fusec.targets.cuda.abi``:

* ``load_half_words4(arr, e, dst, d)``: the 16-bit elements ``arr[e:e + 8]`` (an int16
  array of f16/bf16 bits; ``e`` a multiple of 8) with one 16-byte ``ld.global``, as four
  int32 words of two elements each (the lower element in the low half) into
  ``dst[d:d + 4]``: the activations' B fragments of ``mma.sync``;
* ``w4_mma_<f16|bf16>x<1|2>(word, zg, zh, sg, sh, b..., acc, d)``: one packed word of
  eight 4-bit codes (``constant_layouts.pack_int4_mma``: a lane's A fragment of a
  16 x 16 tile) dequantized to f16/bf16 pairs in registers, then one (x1) or two (x2)
  ``mma.sync.m16n8k16`` with f32 accumulation into ``acc[d:d + 4]`` (``acc[d + 4:d + 8]``
  for the second B fragment); ``b...`` are 2 (x1) or 4 (x2) int32 words of the
  activations' pairs.

The dequantization is Marlin's (Frantar et al., 2024): a 4-bit field ORed into the
mantissa of a 16-bit float whose ulp is 1 gives ``2**e + q`` exactly, and one subtraction
of ``2**e + z`` gives ``q - z`` exactly, two codes a ``LOP3`` and a packed subtraction;
one packed multiply by the scale rounds ``(q - z) * s`` once to the 16-bit type, as the
reference rounds the dequantized weight. ``zg``/``sg`` hold the zero point and scale of
the tile's row ``g`` (a lane's rows ``g`` and ``g + 8``: two output columns) as the two
halves of a word (``zh``/``sh``: row ``g + 8``):

* f16: fields 0 and 4 (bits 0-3, 16-19) of the word and of the word shifted right by 8
  (fields 2, 6) are row ``g``: ``| 0x6400`` (1024) and minus ``zg`` = bits of
  ``1024 + z``; fields 1, 5 and 3, 7 (bits 4-7, 20-23) are row ``g + 8``: ``1024 + 16 q``,
  times 1/16 plus ``zh`` = bits of ``-(64 + z)`` in one ``fma``;
* bf16 (7 mantissa bits: a field at bits 4-7 would leave the ulp-1 range): each pair of
  fields shifted down to bits 0-3 / 16-19, ``| 0x4300`` (128), minus ``zg``/``zh`` = bits
  of ``128 + z``.

``z`` is the zero point as the stored nibble sees it (``z + 8`` for i4 codes).

Under Numba's CUDA simulator the same names are plain Python with the same meaning; the
warp-wide ``mma`` meets its 32 lanes through the simulated block's barrier, so every
thread of a block must call it the same number of times (the kernel's loops are uniform).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from fusec.targets.cuda.env import simulator_enabled
from fusec.targets.cuda.rawmove import load_global_words, pointer

FORMATS = ("f16", "bf16")
#: B fragments an ``mma`` helper multiplies (8 rows of activations each).
FRAGMENTS = (1, 2)
#: ``| MAGIC[fmt]``: the 16-bit float (both halves) whose ulp is 1 (f16 1024, bf16 128).
MAGIC = {"f16": 0x64006400, "bf16": 0x43004300}


def helper_names() -> list[str]:
    """The names this module gives generated kernels (through ``fusec.targets.cuda.abi``)."""
    return ["load_half_words4"] + [f"w4_mma_{f}x{n}" for f in FORMATS for n in FRAGMENTS]


def zero_bits(fmt: str, z: int, row_g: bool) -> int:
    """The word ``zg`` (``row_g``) or ``zh`` of the zero point ``z`` (0..15, the stored
    nibble's scale) for ``w4_mma_<fmt>``: the generated kernels compute the same."""
    if fmt == "bf16":
        half = 0x4300 + z
    else:
        half = 0x6400 + z if row_g else 0xD400 + 16 * z
    return half * 0x10001


# ----------------------------------------------------------------------- simulator


def _halves(fmt: str, word: int) -> tuple[float, float]:
    import ml_dtypes

    dtype = np.float16 if fmt == "f16" else ml_dtypes.bfloat16
    bits = np.array([word & 0xFFFF, (word >> 16) & 0xFFFF], dtype=np.uint16)
    return tuple(float(v) for v in bits.view(dtype))  # type: ignore[return-value]


def _round(fmt: str, value: float) -> float:
    import ml_dtypes

    dtype = np.float16 if fmt == "f16" else ml_dtypes.bfloat16
    return float(np.array([value], dtype=np.float32).astype(dtype)[0])


def sim_fragment(fmt: str, word: int, zg: int, zh: int, sg: int, sh: int) -> list[float]:
    """A lane's A fragment (a0..a7, values) from its packed word: the GPU helper's maths."""
    w = int(word) & 0xFFFFFFFF
    magic = MAGIC[fmt]
    if fmt == "f16":
        pairs = [w & 0x000F000F, w & 0x00F000F0, (w >> 8) & 0x000F000F, (w >> 8) & 0x00F000F0]
    else:
        pairs = [(w >> (4 * i)) & 0x000F000F for i in range(4)]
    values: list[float] = []
    for i, field in enumerate(pairs):
        row_g = i % 2 == 0
        p = _halves(fmt, field | magic)
        z = _halves(fmt, (zg if row_g else zh) & 0xFFFFFFFF)
        s = _halves(fmt, (sg if row_g else sh) & 0xFFFFFFFF)
        for half in range(2):
            if fmt == "f16" and not row_g:
                exact = p[half] / 16 + z[half]  # fma(p, 1/16, -(64 + z)): exact
            else:
                exact = p[half] - z[half]
            values.append(_round(fmt, exact * s[half]))
    return values


def _warp_slots(thread: Any) -> dict:
    manager = thread._manager
    slots = getattr(manager, "_fusec_mma_slots", None)
    if slots is None:
        slots = manager._fusec_mma_slots = {}
    return slots


def _sim_mma(fmt: str, count: int) -> Any:
    def mma(word: Any, zg: Any, zh: Any, sg: Any, sh: Any, *rest: Any) -> None:
        regs, acc, d = rest[: 2 * count], rest[2 * count], int(rest[2 * count + 1])
        thread = threading.current_thread()
        tid = thread.thread_id
        a = sim_fragment(fmt, int(word), int(zg), int(zh), int(sg), int(sh))
        b = [v for r in regs for v in _halves(fmt, int(r) & 0xFFFFFFFF)]
        slots = _warp_slots(thread)
        slots[tid] = (a, b)
        thread.syncthreads()  # every lane's fragments are in
        base = tid - tid % 32
        lanes = [slots[base + lane] for lane in range(32)]
        thread.syncthreads()  # (read before any lane's next call writes its slot)
        tile = np.zeros((16, 16))
        cols = np.zeros((count, 16, 8))
        for lane, (fa, fb) in enumerate(lanes):
            g, t = lane // 4, lane % 4
            for i, (r, k) in enumerate(
                [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
                 (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
            ):  # fmt: skip
                tile[r, k] = fa[i]
            for j in range(count):
                for i, k in enumerate((2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)):
                    cols[j, k, g] = fb[4 * j + i]
        g, t = (tid % 32) // 4, tid % 4
        for j in range(count):
            product = tile @ cols[j]
            for i, (r, c) in enumerate(
                ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1))
            ):
                acc[d + 4 * j + i] = np.float32(float(acc[d + 4 * j + i]) + product[r, c])

    return mma


def _make_sim() -> dict[str, Any]:
    def load_half_words4(arr: Any, e: int, dst: Any, d: int) -> None:
        if e % 8 or not 0 <= e <= len(arr) - 8:
            raise AssertionError(f"load_half_words4: element {e} of {len(arr)}")
        bits = np.asarray(arr[e : e + 8]).astype(np.int16).view(np.uint16).astype(np.uint32)
        for k in range(4):
            dst[d + k] = np.uint32(bits[2 * k] | (bits[2 * k + 1] << 16)).view(np.int32)

    helpers: dict[str, Any] = {"load_half_words4": load_half_words4}
    for fmt in FORMATS:
        for count in FRAGMENTS:
            helpers[f"w4_mma_{fmt}x{count}"] = _sim_mma(fmt, count)
    return helpers


# --------------------------------------------------------------------------- GPU


def mma_asm(fmt: str, count: int) -> str:
    """The inline PTX of ``w4_mma_<fmt>x<count>``: operands ``$0..`` the 4 * count f32
    results, then the 4 * count f32 accumulators, the word, zg, zh, sg, sh and the 2 *
    count B-fragment words."""
    n = 4 * count
    word, zg, zh, sg, sh = (f"${2 * n + i}" for i in range(5))
    b = [f"${2 * n + 5 + i}" for i in range(2 * count)]
    lines = ["{", ".reg .b32 p0, p1, p2, p3, w8, k;"]
    if fmt == "f16":
        lines += [
            f"lop3.b32 p0, {word}, 0x000F000F, 0x64006400, 0xEA;",
            f"lop3.b32 p1, {word}, 0x00F000F0, 0x64006400, 0xEA;",
            f"shr.u32 w8, {word}, 8;",
            "lop3.b32 p2, w8, 0x000F000F, 0x64006400, 0xEA;",
            "lop3.b32 p3, w8, 0x00F000F0, 0x64006400, 0xEA;",
            "mov.b32 k, 0x2C002C00;",  # 1/16 in both halves
            f"sub.f16x2 p0, p0, {zg};",
            f"fma.rn.f16x2 p1, p1, k, {zh};",
            f"sub.f16x2 p2, p2, {zg};",
            f"fma.rn.f16x2 p3, p3, k, {zh};",
            f"mul.f16x2 p0, p0, {sg};",
            f"mul.f16x2 p1, p1, {sh};",
            f"mul.f16x2 p2, p2, {sg};",
            f"mul.f16x2 p3, p3, {sh};",
        ]
    else:
        lines.append(f"lop3.b32 p0, {word}, 0x000F000F, 0x43004300, 0xEA;")
        for i in (1, 2, 3):
            lines += [
                f"shr.u32 w8, {word}, {4 * i};",
                f"lop3.b32 p{i}, w8, 0x000F000F, 0x43004300, 0xEA;",
            ]
        for i in range(4):
            z, s = (zg, sg) if i % 2 == 0 else (zh, sh)
            lines += [f"sub.rn.bf16x2 p{i}, p{i}, {z};", f"mul.rn.bf16x2 p{i}, p{i}, {s};"]
    shape = f"mma.sync.aligned.m16n8k16.row.col.f32.{fmt}.{fmt}.f32"
    for j in range(count):
        d = ", ".join(f"${4 * j + i}" for i in range(4))
        c = ", ".join(f"${n + 4 * j + i}" for i in range(4))
        lines.append(
            f"{shape} {{{d}}}, {{p0, p1, p2, p3}}, {{{b[2 * j]}, {b[2 * j + 1]}}}, {{{c}}};"
        )
    lines.append("}")
    return "\n".join(lines)


def _make_gpu() -> dict[str, Any]:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i32, f32 = ir.IntType(32), ir.FloatType()

    def as_i32(builder: Any, value: Any) -> Any:
        if value.type.width > 32:
            return builder.trunc(value, i32)
        return builder.sext(value, i32) if value.type.width < 32 else value

    @intrinsic
    def load_half_words4(typingctx: Any, arr: Any, e: Any, dst: Any, d: Any) -> Any:
        sig = types.void(arr, e, dst, d)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            arr_t, _, dst_t, _ = sig.args
            arr_v, e_v, dst_v, d_v = args
            address = pointer(context, builder, arr_t, arr_v, e_v)
            for k, value in enumerate(load_global_words(builder, address, 4)):
                index = builder.add(d_v, ir.Constant(d_v.type, k))
                builder.store(value, pointer(context, builder, dst_t, dst_v, index))
            return context.get_dummy_value()

        return sig, codegen

    def make_mma(fmt: str, count: int) -> Any:
        n = 4 * count
        asm = ir.InlineAsm(
            ir.FunctionType(ir.LiteralStructType([f32] * n), [f32] * n + [i32] * (5 + 2 * count)),
            mma_asm(fmt, count),
            ",".join(["=f"] * n + ["f"] * n + ["r"] * (5 + 2 * count)),
            side_effect=True,  # warp-collective: never moved into divergent code
        )

        def typer(typingctx: Any, *args: Any) -> Any:
            sig = types.void(*args)

            def codegen(context: Any, builder: Any, sig: Any, values: Any) -> Any:
                acc_t = sig.args[5 + 2 * count]
                acc_v, d_v = values[5 + 2 * count], values[6 + 2 * count]
                at = [builder.add(d_v, ir.Constant(d_v.type, i)) for i in range(n)]
                slots = [pointer(context, builder, acc_t, acc_v, index) for index in at]
                inputs = [builder.load(slot) for slot in slots]
                inputs += [as_i32(builder, v) for v in values[: 5 + 2 * count]]
                result = builder.call(asm, inputs)
                for i, slot in enumerate(slots):
                    builder.store(builder.extract_value(result, i), slot)
                return context.get_dummy_value()

            return sig, codegen

        # (numba's @intrinsic types the parameters its function names)
        if count == 1:

            def mma1(typingctx, word, zg, zh, sg, sh, b0, b1, acc, d):  # type: ignore[no-untyped-def]
                return typer(typingctx, word, zg, zh, sg, sh, b0, b1, acc, d)

            return intrinsic(mma1)

        def mma2(typingctx, word, zg, zh, sg, sh, b0, b1, b2, b3, acc, d):  # type: ignore[no-untyped-def]
            return typer(typingctx, word, zg, zh, sg, sh, b0, b1, b2, b3, acc, d)

        return intrinsic(mma2)

    helpers: dict[str, Any] = {"load_half_words4": load_half_words4}
    for fmt in FORMATS:
        for count in FRAGMENTS:
            helpers[f"w4_mma_{fmt}x{count}"] = make_mma(fmt, count)
    return helpers


globals().update(_make_sim() if simulator_enabled() else _make_gpu())
__all__ = helper_names()
