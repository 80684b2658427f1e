"""An int8 GEMM for the cpu target (issue 31): ``gemm_q8_packed``, uint8 x int8 -> int32.

Why. A GEMM of a quantized model (ONNX QDQ: activations quantized to uint8 or int8,
weights int8 per channel) multiplies small integers: each product fits 16 bits and the
sums 32, exactly. The float32 GEMM did the same work 16 lanes an instruction; AVX-512
VNNI's ``vpdpbusd`` does 64 (16 lanes of four uint8 x int8 products summed into an
int32), and the weight is a quarter of the bytes.

What. ``C = A @ B`` where A's elements are integers ``v`` with ``v + zero`` in
0..255 (an activation's codes less their zero point: ``zero`` is that zero point, plus
128 for int8 codes) and B's elements are integers in -128..127 (a weight's codes less
its zero point), given as a float32 block of A (the matmul group's prologue writes the
dequantized codes there) and a B packed once per program (``pack_q8``). Per block:

1. A's rows as uint8 ``v + zero`` into a byte buffer, rows of ``k4`` bytes (K rounded
   up to 4, zeros past K);
2. register tiles of ``MR`` rows by ``NV`` vectors of 16 columns (the float32 tiles'
   shape), each holding int32 sums for the whole K loop: per 4 steps of K, NV loads of
   B's packed quad row, a broadcast of 4 bytes of each A row, ``MR * NV`` ``vpdpbusd``;
3. ``C = float32(sum - zero * colsum(B))``: the zero point's share, ``zero`` times the
   column sums of B computed at packing, taken off the exact sum.

The sums are exact, so C is exactly the float32 rounding of the integer product (the
float GEMM rounded every partial sum; the same where those stayed below 2**24). The
scales, bias, activation and requantization follow in the group's epilogue as before.

The tile is written as LLVM IR (as ``microkernel``'s float tiles are): with AVX-512
VNNI (``target_features``) the ``llvm.x86.avx512.vpdpbusd.512`` intrinsic; without it
the same sums spelled in portable IR (widened products added in fours), which LLVM
compiles to ``vpmovzxbd``/``vpmovsxbd`` and ``vpmaddwd`` on AVX-512 (checked with
``inspect_asm``). The matmul template takes this GEMM only where the target has
AVX-512 VNNI (``available``).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from fusec.runtime.numba_cache import sealed_njit
from fusec.targets.cpu.host import MR, NV, STRIP, W, target_features

_I8, _I32, _I64, _F32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
#: Lanes of the int32 accumulators (and columns of B a vector of the tile covers).
LANES = 16


def available(features: str | None = None) -> bool:
    """Whether the target has AVX-512 with VNNI (``vpdpbusd`` on 512-bit vectors)."""
    flags = set((target_features() if features is None else features).split(","))
    return W == LANES and "+avx512bw" in flags and bool({"+avx512vnni", "+avx512_vnni"} & flags)


def _tile(rows: int, vectors: int, vnni: bool):
    """The intrinsic ``tile(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off,
    zero)``: C's ``rows x vectors * 16`` tile at ``c_off`` (float32 elements, row stride
    ``ldc``) = ``float32(A @ B - zero * s)`` over ``kq`` quads of K, where A is uint8 at
    byte ``a_off`` of ``a`` (rows ``lda`` bytes apart), B one packed strip at byte
    ``b_off`` of ``b`` (quad rows ``ldb`` bytes apart: 4 bytes a column) and ``s`` the
    int32 column sums at element ``s_off`` (the arrays are float32: their bytes are read)."""
    v32 = ir.VectorType(_I32, LANES)
    v8 = ir.VectorType(_I8, 4 * LANES)

    def typed(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero):
        for name, arr in (("a", a), ("b", b), ("c", c), ("s", s)):
            if not (isinstance(arr, types.Array) and arr.dtype == types.float32):
                raise TypingError(f"int8 gemm tile: {name} must be a float32 array")
        sig = types.void(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero)

        def codegen(context, builder, signature, args):
            argtys = signature.args

            def integer(i: int, ty=types.int64) -> ir.Value:
                return context.cast(builder, args[i], argtys[i], ty)

            def data(i: int) -> ir.Value:
                return context.make_array(argtys[i])(context, builder, args[i]).data

            def bytes_at(i: int, off: int) -> ir.Value:
                return builder.gep(builder.bitcast(data(i), _I8.as_pointer()), [integer(off)])

            pa, pb = bytes_at(0, 1), bytes_at(3, 4)
            pc = builder.gep(data(6), [integer(7)])
            ps = builder.gep(builder.bitcast(data(10), _I32.as_pointer()), [integer(11)])
            lda_, ldb_, ldc_, kk = integer(2), integer(5), integer(8), integer(9)
            zero = integer(12, types.int32)
            if vnni:
                dot = builder.module.declare_intrinsic(
                    "llvm.x86.avx512.vpdpbusd.512", (), ir.FunctionType(v32, [v32, v32, v32])
                )
            splat_mask = ir.Constant(ir.VectorType(_I32, LANES), None)

            def splat(value: ir.Value) -> ir.Value:
                one = builder.insert_element(ir.Constant(v32, ir.Undefined), value, _I32(0))
                return builder.shuffle_vector(one, ir.Constant(v32, ir.Undefined), splat_mask)

            def madd(acc: ir.Value, a4: ir.Value, bv: ir.Value) -> ir.Value:
                if vnni:
                    return builder.call(dot, [acc, a4, bv])
                wide = ir.VectorType(_I32, 4 * LANES)
                products = builder.mul(
                    builder.zext(builder.bitcast(a4, v8), wide),
                    builder.sext(builder.bitcast(bv, v8), wide),
                )
                undef = ir.Constant(wide, ir.Undefined)
                parts = [
                    builder.shuffle_vector(
                        products,
                        undef,
                        ir.Constant(ir.VectorType(_I32, LANES), list(range(q, 64, 4))),
                    )
                    for q in range(4)
                ]
                total = builder.add(
                    builder.add(parts[0], parts[1]), builder.add(parts[2], parts[3])
                )
                return builder.add(acc, total)

            def vector_at(base: ir.Value, byte: ir.Value) -> ir.Value:
                return builder.bitcast(builder.gep(base, [byte]), v32.as_pointer())

            zero_v = ir.Constant(v32, None)
            entry = builder.block
            loop = builder.append_basic_block("q8tile.loop")
            done = builder.append_basic_block("q8tile.done")
            builder.cbranch(builder.icmp_signed(">", kk, ir.Constant(_I64, 0)), loop, done)

            builder.position_at_end(loop)
            p = builder.phi(_I64)
            acc = [[builder.phi(v32) for _ in range(vectors)] for _ in range(rows)]
            brow = builder.mul(p, ldb_)
            bv = [
                builder.load(vector_at(pb, builder.add(brow, _I64(64 * v))), align=1)
                for v in range(vectors)
            ]
            new = []
            four = builder.mul(p, _I64(4))
            for r in range(rows):
                at = builder.add(builder.mul(_I64(r), lda_), four)
                quad = builder.load(
                    builder.bitcast(builder.gep(pa, [at]), _I32.as_pointer()), align=1
                )
                a4 = splat(quad)
                new.append([madd(acc[r][v], a4, bv[v]) for v in range(vectors)])
            step = builder.add(p, _I64(1))
            body_end = builder.block
            p.add_incoming(_I64(0), entry)
            p.add_incoming(step, body_end)
            for r in range(rows):
                for v in range(vectors):
                    acc[r][v].add_incoming(zero_v, entry)
                    acc[r][v].add_incoming(new[r][v], body_end)
            builder.cbranch(builder.icmp_signed("<", step, kk), loop, done)

            builder.position_at_end(done)
            final = []  # phis first
            for r in range(rows):
                for v in range(vectors):
                    value = builder.phi(v32)
                    value.add_incoming(zero_v, entry)
                    value.add_incoming(new[r][v], body_end)
                    final.append(value)
            zv = splat(zero)
            shares = []
            for v in range(vectors):
                sums = builder.load(
                    builder.bitcast(builder.gep(ps, [_I64(LANES * v)]), v32.as_pointer()), align=4
                )
                shares.append(builder.mul(sums, zv))
            fv = ir.VectorType(_F32, LANES)
            for r in range(rows):
                crow = builder.gep(pc, [builder.mul(_I64(r), ldc_)])
                for v in range(vectors):
                    exact = builder.sub(final[r * vectors + v], shares[v])
                    out = builder.bitcast(builder.gep(crow, [_I64(LANES * v)]), fv.as_pointer())
                    builder.store(builder.sitofp(exact, fv), out, align=4)
            return context.get_dummy_value()

        return sig, codegen

    def tile(typingctx, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero):
        return typed(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero)

    tile.__name__ = f"q8tile_{rows}x{vectors}{'_vnni' if vnni else ''}"
    return intrinsic(tile)


_VNNI = available()
# Tiles of every row count up to MR for whole strips (NV vectors) and for single vectors
# (the columns past the last whole strip, a multiple of 16).
_T1, _T2, _T3, _T4, _T5, _T6 = (_tile(r, NV, _VNNI) for r in range(1, 7))
_N1, _N2, _N3, _N4, _N5, _N6 = (_tile(r, 1, _VNNI) for r in range(1, 7))
assert MR == 6 and NV * LANES == STRIP or W != LANES  # the dispatch below: 1..6 rows


@sealed_njit
def _strip(m, a, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero):
    """C's ``STRIP`` columns at ``c_off`` from the strip at byte ``b_off``, every row."""
    i = 0
    while i + 6 <= m:
        _T6(a, i * lda, lda, b, b_off, ldb, c, c_off + i * ldc, ldc, kq, s, s_off, zero)
        i += 6
    rest, ao, co = m - i, i * lda, c_off + i * ldc
    if rest == 5:
        _T5(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 4:
        _T4(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 3:
        _T3(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 2:
        _T2(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 1:
        _T1(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)


@sealed_njit
def _vector(m, a, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero):
    """C's 16 columns at ``c_off`` from the 16 columns at byte ``b_off``, every row."""
    i = 0
    while i + 6 <= m:
        _N6(a, i * lda, lda, b, b_off, ldb, c, c_off + i * ldc, ldc, kq, s, s_off, zero)
        i += 6
    rest, ao, co = m - i, i * lda, c_off + i * ldc
    if rest == 5:
        _N5(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 4:
        _N4(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 3:
        _N3(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 2:
        _N2(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)
    elif rest == 1:
        _N1(a, ao, lda, b, b_off, ldb, c, co, ldc, kq, s, s_off, zero)


@sealed_njit
def gemm_q8_packed(m, n, k, a, a_off, lda, zero, q8, bp, ncols, c0, c, c_off, ldc):
    """C[c_off:] = A[a_off:] @ B[:, c0:c0 + n] for a ``k x ncols`` B packed by ``pack_q8``
    in ``bp``: A float32 (``m x k``, rows ``lda`` apart) holding integers ``v`` with
    ``v + zero`` in 0..255, B's codes in -128..127; ``q8`` a float32 scratch of at least
    ``m * k4 / 4`` elements (``k4``: k rounded up to 4) for A's bytes. ``n`` is a
    multiple of 16 and ``c0`` of ``STRIP``; a C of columns past the last whole strip
    ends at B's last column."""
    k4 = (k + 3) // 4 * 4
    ab = q8[: m * k4 // 4].view(np.uint8)
    for i in range(m):
        row, at = a_off + i * lda, i * k4
        for p in range(k):
            ab[at + p] = np.uint8(np.int32(a[row + p]) + zero)
        for p in range(k, k4):
            ab[at + p] = np.uint8(0)
    sums = ncols * k4 // 4  # the column sums' first element in bp
    kq = k4 // 4
    strips = n // STRIP
    for t in range(strips):
        col = c0 + t * STRIP
        _strip(m, q8, k4, bp, col * k4, 4 * STRIP, c, c_off + t * STRIP, ldc, kq, bp,
               sums + col, zero)  # fmt: skip
    done = strips * STRIP
    if done < n:  # B's last columns, a packed strip narrower than STRIP of their own
        col = c0 + done
        width = ncols - col
        for v in range((n - done) // LANES):
            _vector(m, q8, k4, bp, col * k4 + 64 * v, 4 * width, c, c_off + done + LANES * v,
                    ldc, kq, bp, sums + col + LANES * v, zero)  # fmt: skip


def pack_q8(b: np.ndarray, transposed: bool = False) -> np.ndarray:
    """A 2-D B of integer values in -128..127 (``k x n``, or ``n x k`` given
    ``transposed``; float32 or integer) as ``gemm_q8_packed`` reads it, flat float32 whose
    bytes are: B's column strips of ``STRIP`` (the last one narrower when ``n`` is not
    whole strips), each ``k4 / 4`` quad rows of 4 bytes a column (rows ``4q .. 4q + 3`` of
    the column, zeros past ``k``), then B's ``n`` int32 column sums."""
    matrix = np.asarray(b.T if transposed else b)
    k, n = matrix.shape
    codes = matrix.astype(np.int8)
    if not np.array_equal(codes, matrix):
        raise ValueError("pack_q8: B must hold integers in -128..127")
    k4 = -(-k // 4) * 4
    padded = np.zeros((k4, n), np.int8)
    padded[:k] = codes
    quads = padded.reshape(k4 // 4, 4, n).transpose(0, 2, 1)  # (quad, column, 4)
    pieces = []
    for c0 in range(0, n, STRIP):
        pieces.append(np.ascontiguousarray(quads[:, c0 : c0 + STRIP, :]).reshape(-1))
    sums = codes.astype(np.int32).sum(axis=0).astype(np.int32)
    data = np.concatenate([*pieces, sums.view(np.int8)])
    return data.view(np.float32)


def fits(n: int) -> bool:
    """Whether ``gemm_q8_packed`` computes a C of ``n`` columns (whole vectors of 16)."""
    return n > 0 and n % LANES == 0


__all__ = ["LANES", "available", "fits", "gemm_q8_packed", "pack_q8"]
