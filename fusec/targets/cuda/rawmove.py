"""Raw moves for copy kernels: bytes from one flat array to another, unconverted.

``move<W>(dst, de, src, se)`` (``W`` = 4, 8 or 16) copies the ``W`` bytes at element
``se`` of ``src`` to element ``de`` of ``dst`` with one ``ld.global`` and one
``st.global`` of ``W`` bytes (``.u32``, ``.v2.u32`` or ``.v4.u32``: inline PTX, so the
optimiser cannot split the access). Nothing is converted, so every bit pattern (NaN
payloads, signalling NaNs) arrives as stored; the device helpers of
``fusec.targets.cuda.device`` convert to float32 and back, which a copy must not. The
caller guarantees that ``se`` and ``de`` times the element size are multiples of ``W``
(the arrays' base addresses are 16-byte aligned: the runtime's contract).

``load_bits(arr, i)`` and ``store_bits(arr, i, value)`` read and write one element as
stored, like ``arr[i]``, but without Numba's wrap-around of negative indices (a compare
and an add per access, and an address the optimiser cannot fold): the caller's index
is never negative, so consecutive accesses become one base address and immediate
offsets.

``load_bytes<W>(arr, e, dst, d)`` (``W`` = 4, 8 or 16) reads the ``W`` one-byte elements
at element ``e`` of ``arr`` (int8, uint8 or bool) with one ``ld.global`` of ``W`` bytes
into ``dst[d:d + W]``, each converted to ``dst``'s type as an indexed copy would (``e`` a
multiple of ``W``): the pointwise template's vectors of integer codes, masks and zero
points, one load instead of ``W``.

``udiv32(x, d)`` and ``urem32(x, d)`` are ``x // d`` and ``x % d`` in 32-bit unsigned
arithmetic, for a non-negative ``x`` below 2**32 and a constant ``d > 0``: Numba types
``//`` and ``%`` of integers as signed 64-bit, which the GPU emulates (a 64-bit high
multiply and sign fix-ups per division, several instructions each); in 32 bits a
division by a constant is one ``mul.hi.u32`` and a shift. The index arithmetic of the
copy kernels splits element or vector numbers below 2**31 this way.

``ufield32(word, pos, length)`` and ``sfield32(word, pos, length)`` are the ``length``-bit
field at bit ``pos`` of a 32-bit ``word``, zero- or sign-extended, as an int32 (a
shift and a mask, or two shifts, in 32 bits: Numba's ``>>`` and ``&`` of an int32 are
64-bit, and a conversion of their int64 result to float32 an ``I2F.S64``).

Under Numba's CUDA simulator the same names are Python that also checks alignment,
index range and the 32-bit range, so a simulator test catches an access a GPU would
fault on.
"""

from __future__ import annotations

from typing import Any

from fusec.targets.cuda.env import numba_cuda, simulator_enabled

WIDTHS = (4, 8, 16)


def helper_names() -> list[str]:
    """The names this module gives generated kernels (through ``fusec.targets.cuda.abi``)."""
    names = ["load_bits", "store_bits", "udiv32", "urem32", "ufield32", "sfield32"]
    return [f"move{w}" for w in WIDTHS] + names + [f"load_bytes{w}" for w in WIDTHS]


def _make_sim_moves() -> dict[str, Any]:
    def make(width: int) -> Any:
        def move(dst: Any, de: int, src: Any, se: int) -> None:
            size = dst.dtype.itemsize
            if (de * size) % width or (se * size) % width:
                raise AssertionError(f"move{width}: element {se} -> {de} is not {width}-aligned")
            for k in range(width // size):
                dst[de + k] = src[se + k]

        return move

    def load_bits(arr: Any, i: int) -> Any:
        if not 0 <= i < len(arr):
            raise AssertionError(f"load_bits: element {i} of {len(arr)}")
        return arr[i]

    def store_bits(arr: Any, i: int, value: Any) -> None:
        if not 0 <= i < len(arr):
            raise AssertionError(f"store_bits: element {i} of {len(arr)}")
        arr[i] = value

    def udiv32(x: int, d: int) -> int:
        if not 0 <= x < 2**32 or d <= 0:
            raise AssertionError(f"udiv32({x}, {d}): out of the 32-bit range")
        return x // d

    def urem32(x: int, d: int) -> int:
        if not 0 <= x < 2**32 or d <= 0:
            raise AssertionError(f"urem32({x}, {d}): out of the 32-bit range")
        return x % d

    def ufield32(word: int, pos: int, length: int) -> int:
        if not (0 <= pos and 0 < length and pos + length <= 32):
            raise AssertionError(f"ufield32: bits {pos}..{pos + length} of a 32-bit word")
        return (int(word) >> int(pos)) & ((1 << int(length)) - 1)

    def sfield32(word: int, pos: int, length: int) -> int:
        value = ufield32(word, pos, length)
        return value - (1 << int(length)) if value >> (int(length) - 1) else value

    def make_bytes(width: int) -> Any:
        def load_bytes(arr: Any, e: int, dst: Any, d: int) -> None:
            if arr.dtype.itemsize != 1 or e % width or not 0 <= e <= len(arr) - width:
                raise AssertionError(f"load_bytes{width}: element {e} of {len(arr)}")
            for k in range(width):
                dst[d + k] = arr[e + k]

        return load_bytes

    moves = {f"move{w}": make(w) for w in WIDTHS}
    moves.update({f"load_bytes{w}": make_bytes(w) for w in WIDTHS})
    return {
        **moves,
        "load_bits": load_bits,
        "store_bits": store_bits,
        "udiv32": udiv32,
        "urem32": urem32,
        "ufield32": ufield32,
        "sfield32": sfield32,
    }


def pointer(context: Any, builder: Any, arrty: Any, arr: Any, index: Any) -> Any:
    """(Intrinsic code generation) the address of ``arr[index]``."""
    data = context.make_array(arrty)(context, builder, value=arr).data
    return builder.gep(data, [index])


def as_i32(builder: Any, value: Any) -> Any:
    """(Intrinsic code generation) an integer value as 32 bits (truncated, or sign-extended)."""
    from llvmlite import ir

    width = value.type.width
    if width == 32:
        return value
    i32 = ir.IntType(32)
    return builder.trunc(value, i32) if width > 32 else builder.sext(value, i32)


def statement(name: str, text: str) -> Any:
    """(GPU only) an intrinsic ``name()`` that emits the PTX ``text`` in place: no operands,
    a memory clobber (no load or store moves across it)."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    emitted = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)

    def typer(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            builder.call(emitted, [])
            return context.get_dummy_value()

        return types.void(), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


def load_global_words(builder: Any, address: Any, words: int, space: str = "global") -> list[Any]:
    """(Intrinsic code generation) ``words`` (1, 2 or 4) 32-bit words at ``address`` (a
    generic pointer into ``space``: ``global`` or ``shared``) with one ``ld.<space>``
    (``.v2``/``.v4``; inline PTX, so that LLVM cannot split it)."""
    from llvmlite import ir

    i32 = ir.IntType(32)
    suffix = "u32" if words == 1 else f"v{words}.u32"
    outs = ", ".join(f"${k}" for k in range(words))
    loaded = "{" + outs + "}" if words > 1 else outs
    text = f"{{ .reg .u64 g; cvta.to.{space}.u64 g, ${words}; ld.{space}.{suffix} {loaded}, [g]; }}"
    ret_t = ir.LiteralStructType([i32] * words) if words > 1 else i32
    shared = space == "shared"  # read after a wait for its bytes: never hoisted above it
    constraints = ",".join(["=r"] * words + ["l"]) + (",~{memory}" if shared else "")
    load = ir.InlineAsm(
        ir.FunctionType(ret_t, [address.type]), text, constraints, side_effect=shared
    )
    result = builder.call(load, [address])
    if words == 1:
        return [result]
    return [builder.extract_value(result, k) for k in range(words)]


def element_pair_intrinsic(name: str, emit: Any) -> Any:
    """(GPU only) an intrinsic ``name(a, i, b, j)`` of two arrays and an element index of each,
    returning nothing: ``emit(context, builder, first, second)`` writes its code, ``first``
    and ``second`` the (array type, array, index) of ``a, i`` and of ``b, j`` (``pointer``'s
    arguments)."""
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def typer(typingctx: Any, a: Any, i: Any, b: Any, j: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            (a_t, _, b_t, _), (a_v, i_v, b_v, j_v) = sig.args, args
            emit(context, builder, (a_t, a_v, i_v), (b_t, b_v, j_v))
            return context.get_dummy_value()

        return types.void(a, i, b, j), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


def word_loader(n: int, space: str = "global", split: Any = None) -> Any:
    """(GPU) the intrinsic ``load(arr, e, dst, d)``: the ``n`` 32-bit words at element ``e``
    of ``arr`` (in ``space``) with one vector load, stored from ``dst[d]`` on: each word
    as itself, or as the values ``split(context, builder, word, arr_t, dst_t)`` gives."""
    from llvmlite import ir

    def emit(context: Any, builder: Any, source: Any, target: Any) -> None:
        (arr_t, _, _), (dst_t, dst_v, d_v) = source, target
        address = pointer(context, builder, *source)
        values = [
            value
            for word in load_global_words(builder, address, n, space)
            for value in (split(context, builder, word, arr_t, dst_t) if split else [word])
        ]
        for k, value in enumerate(values):
            index = builder.add(d_v, ir.Constant(d_v.type, k))
            builder.store(value, pointer(context, builder, dst_t, dst_v, index))

    return element_pair_intrinsic("load", emit)


def _make_gpu_moves() -> dict[str, Any]:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i32 = ir.IntType(32)

    def make(width: int) -> Any:
        words = width // 4
        suffix = "u32" if words == 1 else f"v{words}.u32"
        ins = ", ".join(f"${k + 1}" for k in range(words))
        stored = "{" + ins + "}" if words > 1 else ins
        store_text = (
            "{ .reg .u64 g; cvta.to.global.u64 g, $0; "
            f"st.global.{suffix.replace('u32', 'b32')} [g], {stored}; }}"
        )

        def emit(context: Any, builder: Any, target: Any, source: Any) -> None:
            values = load_global_words(builder, pointer(context, builder, *source), words)
            dst_p = pointer(context, builder, *target)
            store = ir.InlineAsm(
                ir.FunctionType(ir.VoidType(), [dst_p.type] + [i32] * words),
                store_text,
                ",".join(["l"] + ["r"] * words + ["~{memory}"]),
                side_effect=True,
            )
            builder.call(store, [dst_p, *values])

        return element_pair_intrinsic("move", emit)

    @intrinsic
    def load_bits(typingctx: Any, arr: Any, i: Any) -> Any:
        sig = arr.dtype(arr, i)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.load(pointer(context, builder, sig.args[0], args[0], args[1]))

        return sig, codegen

    @intrinsic
    def store_bits(typingctx: Any, arr: Any, i: Any, value: Any) -> Any:
        sig = types.void(arr, i, value)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            arr_t, _, value_t = sig.args
            stored = context.cast(builder, args[2], value_t, arr_t.dtype)
            builder.store(stored, pointer(context, builder, arr_t, args[0], args[1]))
            return context.get_dummy_value()

        return sig, codegen

    def make_divide(remainder: bool) -> Any:
        @intrinsic
        def divide(typingctx: Any, x: Any, d: Any) -> Any:
            sig = types.int64(x, d)

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                pairs = zip(args, sig.args, strict=True)  # any integer type: via int64
                x32, d32 = (
                    builder.trunc(context.cast(builder, v, t, types.int64), i32) for v, t in pairs
                )
                result = builder.urem(x32, d32) if remainder else builder.udiv(x32, d32)
                return builder.zext(result, ir.IntType(64))

            return sig, codegen

        return divide

    def make_field(signed: bool) -> Any:
        @intrinsic
        def field(typingctx: Any, word: Any, pos: Any, length: Any) -> Any:
            sig = types.int32(word, pos, length)

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                w, p, n = (as_i32(builder, v) for v in args)
                width = ir.Constant(i32, 32)
                high = builder.shl(w, builder.sub(builder.sub(width, p), n))  # field on top
                down = builder.sub(width, n)
                return builder.ashr(high, down) if signed else builder.lshr(high, down)

            return sig, codegen

        return field

    def bytes_of(context: Any, builder: Any, word: Any, arr_t: Any, dst_t: Any) -> list:
        """A word's 4 one-byte elements (little-endian), each converted to ``dst``'s type."""
        signed = getattr(arr_t.dtype, "signed", False)  # (bool: unsigned)
        byte_t = types.int8 if signed else types.uint8
        out = []
        for b in range(4):
            byte = builder.trunc(builder.lshr(word, ir.Constant(i32, 8 * b)), ir.IntType(8))
            out.append(context.cast(builder, byte, byte_t, dst_t.dtype))
        return out

    def make_bytes(width: int) -> Any:
        return word_loader(width // 4, "global", bytes_of)

    moves = {f"move{w}": make(w) for w in WIDTHS}
    moves.update({f"load_bytes{w}": make_bytes(w) for w in WIDTHS})
    return {
        **moves,
        "load_bits": load_bits,
        "store_bits": store_bits,
        "ufield32": make_field(False),
        "sfield32": make_field(True),
        "udiv32": make_divide(False),
        "urem32": make_divide(True),
    }


numba_cuda()  # prepared before numba.cuda's extending API is touched
_MOVES = _make_sim_moves() if simulator_enabled() else _make_gpu_moves()
globals().update(_MOVES)
