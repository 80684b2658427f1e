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

1. A's rows as uint8 ``v + zero`` into a byte buffer, rows of ``kp`` bytes (K rounded
   up to 64, zeros past K);
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

``gemm_q8_packed_amx`` is the same GEMM on AMX-INT8 where the CPU has it and Linux
grants the process the tile state (``amx_available``; asked when this module is
imported): 32 x 32 blocks of C in four int32 tiles, ``tileloadd`` of A's bytes (16 rows
of 64) and of B's packed quad rows (the same layout: 16 quad rows of 16 columns, K
padded to 64 by ``pack_q8``), ``tdpbusd``, then the zero point's share and the float
conversion as above; fewer than ``AMX_MIN_ROWS`` rows take the VNNI tiles. The template
names it only where AMX is granted, so a kernel's cached code uses the tiles only on a
host and process that generated it for them. onnxruntime's MLAS runs its int8 GEMMs on
AMX here too (``benchmarks/results/cpu-quant-int8.md``).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from fusec.runtime.numba_cache import sealed_njit
from fusec.targets.cpu import intrinsics
from fusec.targets.cpu.host import MR, NV, STRIP, W, target_features

_I8, _I32, _I64, _F32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
#: Lanes of the int32 accumulators (and columns of B a vector of the tile covers).
LANES = 16


def available(features: str | None = None) -> bool:
    """Whether the target has AVX-512 with VNNI (``vpdpbusd`` on 512-bit vectors)."""
    flags = set((target_features() if features is None else features).split(","))
    return W == LANES and "+avx512bw" in flags and bool({"+avx512vnni", "+avx512_vnni"} & flags)


def _tile(rows: int, vectors: int, vnni: bool, signed_a: bool = False):
    """The intrinsic ``tile(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off,
    zero)``: C's ``rows x vectors * 16`` tile at ``c_off`` (float32 elements, row stride
    ``ldc``) = ``float32(A @ B - zero * s)`` over ``kq`` quads of K, where A is uint8 at
    byte ``a_off`` of ``a`` (rows ``lda`` bytes apart), B one packed strip at byte
    ``b_off`` of ``b`` (quad rows ``ldb`` bytes apart: 4 bytes a column) and ``s`` the
    int32 column sums at element ``s_off`` (the arrays are float32: their bytes are read).

    ``signed_a``: the same product the other way round (``gemm_q8_rows``): A int8 (a
    weight's rows), B uint8 (activation codes packed as above), ``s`` A's int32 row sums
    (A's row ``a_off / lda`` first), ``zero`` times row ``i``'s sum taken off C's row
    ``i``."""
    v32 = ir.VectorType(_I32, LANES)
    v8 = ir.VectorType(_I8, 4 * LANES)

    def typed(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero):
        intrinsics.check_f32_arrays("int8 gemm tile", {"a": a, "b": b, "c": c, "s": s})
        sig = types.void(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero)

        def codegen(context, builder, signature, args):
            arg = intrinsics.Arguments(context, builder, signature, args)
            integer, data = arg.integer, arg.data

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
                unsigned, signed = (bv, a4) if signed_a else (a4, bv)
                if vnni:
                    return builder.call(dot, [acc, unsigned, signed])
                wide = ir.VectorType(_I32, 4 * LANES)
                products = builder.mul(
                    builder.zext(builder.bitcast(unsigned, v8), wide),
                    builder.sext(builder.bitcast(signed, v8), wide),
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
            entry, loop, done = intrinsics.open_loop(
                builder, "q8tile", builder.icmp_signed(">", kk, ir.Constant(_I64, 0))
            )
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
            final = intrinsics.close_accumulator_loop(
                builder, p, kk, acc, new, zero_v, (entry, loop, done)
            )
            zv = splat(zero)
            shares = []  # per vector of columns; by rows (signed_a), per row
            for v in range(rows if signed_a else vectors):
                if signed_a:  # A's row a_off / lda and the next ones
                    first = builder.sdiv(integer(1), lda_)
                    at = builder.gep(ps, [builder.add(first, _I64(v))])
                    sums = splat(builder.load(at, align=4))
                else:
                    at = builder.bitcast(builder.gep(ps, [_I64(LANES * v)]), v32.as_pointer())
                    sums = builder.load(at, align=4)
                shares.append(builder.mul(sums, zv))
            fv = ir.VectorType(_F32, LANES)
            for r in range(rows):
                crow = builder.gep(pc, [builder.mul(_I64(r), ldc_)])
                for v in range(vectors):
                    exact = builder.sub(final[r * vectors + v], shares[r if signed_a else v])
                    out = builder.bitcast(builder.gep(crow, [_I64(LANES * v)]), fv.as_pointer())
                    builder.store(builder.sitofp(exact, fv), out, align=4)
            return context.get_dummy_value()

        return sig, codegen

    def tile(typingctx, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero):
        return typed(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero)

    tile.__name__ = f"q8tile_{rows}x{vectors}{'_vnni' if vnni else ''}{'_rows' if signed_a else ''}"
    return intrinsic(tile)


_VNNI = available()
# Tiles of every row count up to MR for whole strips (NV vectors) and for single vectors
# (the columns past the last whole strip, a multiple of 16).
_T1, _T2, _T3, _T4, _T5, _T6 = (_tile(r, NV, _VNNI) for r in range(1, 7))
_N1, _N2, _N3, _N4, _N5, _N6 = (_tile(r, 1, _VNNI) for r in range(1, 7))
# ... and the same with A the signed operand (``gemm_q8_rows``)
_R1, _R2, _R3, _R4, _R5, _R6 = (_tile(r, NV, _VNNI, True) for r in range(1, 7))
_Q1, _Q2, _Q3, _Q4, _Q5, _Q6 = (_tile(r, 1, _VNNI, True) for r in range(1, 7))
assert MR == 6 and NV * LANES == STRIP or W != LANES  # the dispatch below: 1..6 rows


@sealed_njit
def _strip(m, a, lda, b, b_off, ldb, c, c_off, ldc, kq, s, s_off, zero):
    """C's ``STRIP`` columns at ``c_off`` from the strip at byte ``b_off``, every row
    (``_vector`` is this body over the one-vector tiles ``_N1`` .. ``_N6``)."""
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


_vector = intrinsics.retiled(
    _strip,
    "_vector",
    """C's 16 columns at ``c_off`` from the 16 columns at byte ``b_off``, every row.""",
    _T1=_N1, _T2=_N2, _T3=_N3, _T4=_N4, _T5=_N5, _T6=_N6,
)  # fmt: skip


_rows_strip = intrinsics.retiled(
    _strip,
    "_rows_strip",
    """``_strip`` over the tiles of a signed A (``gemm_q8_rows``).""",
    _T1=_R1, _T2=_R2, _T3=_R3, _T4=_R4, _T5=_R5, _T6=_R6,
)  # fmt: skip
_rows_vector = intrinsics.retiled(
    _strip,
    "_rows_vector",
    """``_vector`` over the tiles of a signed A (``gemm_q8_rows``).""",
    _T1=_Q1, _T2=_Q2, _T3=_Q3, _T4=_Q4, _T5=_Q5, _T6=_Q6,
)  # fmt: skip


@sealed_njit
def gemm_q8_rows(m, n, kq, w, s_off, zero, xq, c, c_off, ldc):
    """``C[c_off:] = W @ X - zero * rowsum(W)``, ``m x n`` (rows ``ldc`` apart, ``n`` a
    multiple of 16), the product of ``gemm_q8_packed`` the other way round: W's ``m``
    rows of ``kq`` quads of int8 codes in ``w``'s bytes (rows ``4 * kq`` bytes apart,
    their int32 sums at element ``s_off`` of ``w``: ``pack_q8_rows``), X uint8 codes
    ``v + zero`` in ``xq``'s bytes as ``pack_q8`` lays out a B: strips of ``STRIP``
    columns (the last one ``n`` less the whole strips wide), each ``kq`` quad rows of 4
    bytes a column. A quantized convolution's output channels by its pixels
    (``targets/cpu/conv/q8.py``): C is the channel rows its epilogue reads, no transpose.
    In the VNNI register tiles (``vpdpbusd`` with X the unsigned operand)."""
    lda = 4 * kq
    strips = n // STRIP
    for t in range(strips):
        _rows_strip(m, w, lda, xq, t * STRIP * lda, 4 * STRIP, c, c_off + t * STRIP, ldc, kq,
                    w, s_off, zero)  # fmt: skip
    done = strips * STRIP
    width = n - done
    for v in range(width // LANES):
        _rows_vector(m, w, lda, xq, done * lda + 64 * v, 4 * width, c, c_off + done + LANES * v,
                     ldc, kq, w, s_off, zero)  # fmt: skip


def pack_q8_rows(w: np.ndarray) -> np.ndarray:
    """A 2-D W of integer values in -128..127 (``m x k``) as ``gemm_q8_rows`` reads it,
    flat float32 whose bytes are W's rows of ``4 * ceil(k / 4)`` bytes (zeros past ``k``),
    then the ``m`` int32 row sums."""
    matrix = np.asarray(w)
    codes = matrix.astype(np.int8)
    if matrix.ndim != 2 or not np.array_equal(codes, matrix):
        raise ValueError("pack_q8_rows: W must be 2-D and hold integers in -128..127")
    m, k = codes.shape
    padded = np.zeros((m, -(-k // 4) * 4), np.int8)
    padded[:, :k] = codes
    sums = codes.astype(np.int32).sum(axis=1).astype(np.int32)
    return np.concatenate([padded.reshape(-1), sums.view(np.int8)]).view(np.float32)


#: K is padded to a multiple of this in the packing and A's bytes (one AMX tile's K).
K_BLOCK = 64
#: Rows of A (and C) one AMX block computes: two tiles of 16.
AMX_ROWS = 32
#: Fewer rows than this run in the VNNI tiles even with AMX: the AMX block computes 32
#: rows whatever ``m`` is (6 x 256 @ 256 x 64: 218-221 GOP/s on AMX, 536 in VNNI tiles;
#: 64 x 1024 @ 1024 x 1024: 740-1190 against 570; 1 thread, load ~6).
AMX_MIN_ROWS = 16


def padded_k(k: int) -> int:
    return -(-k // K_BLOCK) * K_BLOCK


def scratch_floats(m: int, k: int) -> int:
    """Float32 elements of the ``q8`` scratch ``gemm_q8_packed`` needs for ``m`` rows of A:
    A's bytes (rows of ``padded_k(k)``, ``m`` rounded up to ``AMX_ROWS``), the int32 sums
    of four AMX tiles and the 64-byte tile configuration."""
    return -(-m // AMX_ROWS) * AMX_ROWS * padded_k(k) // 4 + 4 * 256 + 16


def _request_amx() -> bool:
    """Ask Linux for the AMX tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA)``, for the whole process): True when granted."""
    import ctypes
    import platform
    import sys

    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return False  # (158 is arch_prctl's number on x86-64 only)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(158, 0x1023, 18) == 0  # SYS_arch_prctl on x86-64
    except (OSError, AttributeError):
        return False


def amx_available(features: str | None = None) -> bool:
    """Whether the target has AMX-INT8 (``tdpbusd``) and the process may use its tiles
    (asked once per process)."""
    flags = set((target_features() if features is None else features).split(","))
    if not {"+amx_int8", "+amx-int8"} & flags or not {"+amx_tile", "+amx-tile"} & flags:
        return False
    global _PERMITTED
    if _PERMITTED is None:
        _PERMITTED = _request_amx()
    return _PERMITTED


_PERMITTED: bool | None = None


def _amx_block(two_columns: bool):
    """The intrinsic ``block(a, a_off, lda, b, b_off, b_off2, ldb, kb, t, t_off, cfg)``:
    the int32 sums of a 32-row block of A (uint8 at byte ``a_off``, rows ``lda`` bytes
    apart) by one or two 16-column blocks of packed B (at bytes ``b_off``, ``b_off2``;
    quad rows ``ldb`` bytes apart) over ``kb`` blocks of 64 of K, on AMX tiles: C tiles
    0-3 (rows 0-15 / 16-31 by columns 0-15 / 16-31), A tiles 4-5, B tiles 6-7; the sums
    stored at byte ``t_off`` of ``t`` as 16 x 16 int32 tiles in the order 0, 1, 2, 3 (1 and
    3 unwritten with one column block). The tiles must be configured (``_amx_tiles``):
    ``cfg`` is not read."""
    void = ir.VoidType()
    ptr = _I8.as_pointer()

    def block(typingctx, a, a_off, lda, b, b_off, b_off2, ldb, kb, t, t_off, cfg):
        sig = types.void(a, a_off, lda, b, b_off, b_off2, ldb, kb, t, t_off, cfg)

        def codegen(context, builder, signature, args):
            argtys = signature.args

            def integer(i: int) -> ir.Value:
                return context.cast(builder, args[i], argtys[i], types.int64)

            def data(i: int) -> ir.Value:
                raw = context.make_array(argtys[i])(context, builder, args[i]).data
                return builder.bitcast(raw, ptr)

            module = builder.module
            load = module.declare_intrinsic(
                "llvm.x86.tileloadd64", (), ir.FunctionType(void, [_I8, ptr, _I64])
            )
            dot = module.declare_intrinsic(
                "llvm.x86.tdpbusd", (), ir.FunctionType(void, [_I8, _I8, _I8])
            )
            store = module.declare_intrinsic(
                "llvm.x86.tilestored64", (), ir.FunctionType(void, [_I8, ptr, _I64])
            )
            zero = module.declare_intrinsic("llvm.x86.tilezero", (), ir.FunctionType(void, [_I8]))
            pa = builder.gep(data(0), [integer(1)])
            pb, pb2 = builder.gep(data(3), [integer(4)]), builder.gep(data(3), [integer(5)])
            lda_, ldb_, kk = integer(2), integer(6), integer(7)
            pt = builder.gep(data(8), [integer(9)])
            tiles = (0, 1, 2, 3) if two_columns else (0, 2)
            for tile in tiles:
                builder.call(zero, [_I8(tile)])
            entry, loop, done = intrinsics.open_loop(
                builder, "amx", builder.icmp_signed(">", kk, _I64(0))
            )
            p = builder.phi(_I64)
            a0 = builder.gep(pa, [builder.mul(p, _I64(K_BLOCK))])
            builder.call(load, [_I8(4), a0, lda_])
            builder.call(load, [_I8(5), builder.gep(a0, [builder.mul(lda_, _I64(16))]), lda_])
            b_step = builder.mul(builder.mul(p, _I64(16)), ldb_)  # 16 quad rows a K block
            builder.call(load, [_I8(6), builder.gep(pb, [b_step]), ldb_])
            builder.call(dot, [_I8(0), _I8(4), _I8(6)])
            builder.call(dot, [_I8(2), _I8(5), _I8(6)])
            if two_columns:
                builder.call(load, [_I8(7), builder.gep(pb2, [b_step]), ldb_])
                builder.call(dot, [_I8(1), _I8(4), _I8(7)])
                builder.call(dot, [_I8(3), _I8(5), _I8(7)])
            step = builder.add(p, _I64(1))
            p.add_incoming(_I64(0), entry)
            p.add_incoming(step, builder.block)
            intrinsics.close_loop(builder, builder.icmp_signed("<", step, kk), loop, done)
            for tile in tiles:
                builder.call(store, [_I8(tile), builder.gep(pt, [_I64(1024 * tile)]), _I64(64)])
            return context.get_dummy_value()

        return sig, codegen

    block.__name__ = f"amx_block_{2 if two_columns else 1}"
    return intrinsic(block)


@intrinsic
def _amx_tiles(typingctx, cfg, on):
    """``_amx_tiles(cfg, True)`` loads the 64-byte tile configuration in ``cfg``
    (``ldtilecfg``); ``_amx_tiles(cfg, False)`` releases the tiles (``tilerelease``)."""
    if not isinstance(on, types.BooleanLiteral):
        raise TypingError("_amx_tiles: 'on' must be a literal bool")

    def codegen(context, builder, signature, args):
        void, ptr = ir.VoidType(), _I8.as_pointer()
        if on.literal_value:
            raw = context.make_array(signature.args[0])(context, builder, args[0]).data
            fn = builder.module.declare_intrinsic(
                "llvm.x86.ldtilecfg", (), ir.FunctionType(void, [ptr])
            )
            builder.call(fn, [builder.bitcast(raw, ptr)])
        else:
            fn = builder.module.declare_intrinsic(
                "llvm.x86.tilerelease", (), ir.FunctionType(void, [])
            )
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(cfg, on), codegen


_B2, _B1 = _amx_block(True), _amx_block(False)
# Every process that runs ``gemm_q8_packed_amx`` imports this module first (a kernel
# module names it through the ABI): ask for the tile state now, so that a kernel loaded
# from the cache (no code generation in this process) may use the tiles.
amx_available()


@sealed_njit
def _amx_store(tiles, m, cols, sums, s_off, zero, c, c_off, ldc):
    """C's ``m`` (<= 32) rows by ``cols`` (16 or 32) columns at ``c_off`` from the int32
    tiles in ``tiles`` (``_amx_block``'s order), less ``zero`` times the column sums."""
    for half in range(cols // 16):
        share = sums[s_off + 16 * half : s_off + 16 * half + 16]
        for i in range(m):
            at = ((i // 16) * 2 + half) * 256 + (i % 16) * 16
            out = c_off + i * ldc + 16 * half
            for j in range(16):
                c[out + j] = np.float32(tiles[at + j] - zero * share[j])


@sealed_njit
def _gemm_amx(m, n, kp, q8, ab_bytes, bp, sums, ncols, c0, zero, c, c_off, ldc):
    """The AMX form of ``gemm_q8_packed`` (A's bytes already in ``q8``, rows of ``kp``)."""
    cfg_at = ab_bytes + 4 * 1024  # after A's bytes and four int32 tiles
    cfg = q8[cfg_at // 4 : cfg_at // 4 + 16].view(np.uint8)
    for p in range(64):
        cfg[p] = np.uint8(0)
    cfg[0] = np.uint8(1)  # palette 1: every tile 16 rows of 64 bytes
    for tile in range(8):
        cfg[16 + 2 * tile] = np.uint8(64)
        cfg[48 + tile] = np.uint8(16)
    tiles = q8[ab_bytes // 4 : ab_bytes // 4 + 1024].view(np.int32)
    kb = kp // K_BLOCK
    _amx_tiles(cfg, True)
    j = 0
    while j < n:
        col = c0 + j  # B's column: its strip, the strip's width and the offset in it
        strip = col // STRIP * STRIP
        width = min(STRIP, ncols - strip)
        b_at = strip * kp + (col - strip) * 4  # 4 bytes a column in each quad row
        two = j + 32 <= n and col - strip + 32 <= width
        for i in range(0, m, AMX_ROWS):
            if two:
                _B2(q8, i * kp, kp, bp, b_at, b_at + 64, 4 * width, kb, q8, ab_bytes, cfg)
            else:
                _B1(q8, i * kp, kp, bp, b_at, b_at, 4 * width, kb, q8, ab_bytes, cfg)
            rows = min(AMX_ROWS, m - i)
            _amx_store(tiles, rows, 32 if two else 16, sums, col, zero, c, c_off + i * ldc + j, ldc)
        j += 32 if two else 16
    _amx_tiles(cfg, False)


@intrinsic
def _bytes16(typingctx, a, a_at, q8, byte, zero):
    """``q8``'s bytes ``byte .. byte + 15`` = uint8(int32(a[a_at + j]) + zero), j < 16: one
    vector conversion (a loop of Numba's over the two arrays, slices of one workspace
    that LLVM cannot tell apart, stayed scalar: 33 us for 32 x 1024 values, 2 here)."""
    intrinsics.check_f32_arrays("_bytes16", {"a": a, "q8": q8})
    f16, i16 = ir.VectorType(_F32, 16), ir.VectorType(_I32, 16)

    def codegen(context, builder, signature, args):
        arg = intrinsics.Arguments(context, builder, signature, args)
        integer = arg.integer
        src, dst = arg.data(0), arg.data(2)
        at = builder.bitcast(builder.gep(src, [integer(1)]), f16.as_pointer())
        values = builder.fptosi(builder.load(at, align=4), i16)
        undef = ir.Constant(i16, ir.Undefined)
        one = builder.insert_element(undef, integer(4, types.int32), _I32(0))
        shift = builder.shuffle_vector(one, undef, ir.Constant(i16, None))
        codes = builder.trunc(builder.add(values, shift), ir.VectorType(_I8, 16))
        out = builder.gep(builder.bitcast(dst, _I8.as_pointer()), [integer(3)])
        builder.store(codes, builder.bitcast(out, ir.VectorType(_I8, 16).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(a, a_at, q8, byte, zero), codegen


@sealed_njit
def _a_bytes(m, k, kp, rows, a, a_off, lda, zero, q8):
    """A's ``m`` rows as uint8 ``v + zero`` into ``q8``'s bytes, rows of ``kp`` (zeros
    past ``k``), zero rows from ``m`` to ``rows``."""
    ab = q8[: rows * kp // 4].view(np.uint8)
    whole = k // 16 * 16
    for i in range(m):
        row, at = a_off + i * lda, i * kp
        for p in range(0, whole, 16):
            _bytes16(a, row + p, q8, at + p, zero)
        for p in range(whole, k):
            ab[at + p] = np.uint8(np.int32(a[row + p]) + zero)
        for p in range(k, kp):
            ab[at + p] = np.uint8(0)
    for p in range(m * kp, rows * kp):
        ab[p] = np.uint8(0)


@sealed_njit
def _gemm_vnni(m, n, k, kp, q8, bp, ncols, c0, zero, c, c_off, ldc):
    """The VNNI register tiles over A's bytes in ``q8`` (rows of ``kp``)."""
    sums = ncols * kp // 4  # the column sums' first element in bp
    kq = (k + 3) // 4
    strips = n // STRIP
    for t in range(strips):
        col = c0 + t * STRIP
        _strip(m, q8, kp, bp, col * kp, 4 * STRIP, c, c_off + t * STRIP, ldc, kq, bp,
               sums + col, zero)  # fmt: skip
    done = strips * STRIP
    if done < n:  # B's last columns, a packed strip narrower than STRIP of their own
        col = c0 + done
        width = ncols - col
        for v in range((n - done) // LANES):
            _vector(m, q8, kp, bp, col * kp + 64 * v, 4 * width, c, c_off + done + LANES * v,
                    ldc, kq, bp, sums + col + LANES * v, zero)  # fmt: skip


@sealed_njit
def gemm_q8_packed(m, n, k, a, a_off, lda, zero, q8, bp, ncols, c0, c, c_off, ldc):
    """C[c_off:] = A[a_off:] @ B[:, c0:c0 + n] for a ``k x ncols`` B packed by ``pack_q8``
    in ``bp``: A float32 (``m x k``, rows ``lda`` apart) holding integers ``v`` with
    ``v + zero`` in 0..255, B's codes in -128..127; ``q8`` a float32 scratch of at least
    ``scratch_floats(m, k)`` elements for A's bytes. ``n`` is a multiple of 16 and ``c0``
    of ``STRIP``; a C of columns past the last whole strip ends at B's last column. In
    the VNNI register tiles."""
    kp = (k + K_BLOCK - 1) // K_BLOCK * K_BLOCK
    _a_bytes(m, k, kp, m, a, a_off, lda, zero, q8)
    _gemm_vnni(m, n, k, kp, q8, bp, ncols, c0, zero, c, c_off, ldc)


@sealed_njit
def gemm_q8_packed_amx(m, n, k, a, a_off, lda, zero, q8, bp, ncols, c0, c, c_off, ldc):
    """``gemm_q8_packed`` on AMX-INT8 tiles (``amx_available``: the template names this
    one only then, so a kernel's cached code has AMX only where it was generated for it):
    32 x 32 blocks of ``tdpbusd`` for ``AMX_MIN_ROWS`` rows or more, else the VNNI tiles."""
    kp = (k + K_BLOCK - 1) // K_BLOCK * K_BLOCK
    if m < AMX_MIN_ROWS:
        _a_bytes(m, k, kp, m, a, a_off, lda, zero, q8)
        _gemm_vnni(m, n, k, kp, q8, bp, ncols, c0, zero, c, c_off, ldc)
        return
    rows = (m + AMX_ROWS - 1) // AMX_ROWS * AMX_ROWS
    _a_bytes(m, k, kp, rows, a, a_off, lda, zero, q8)
    sums = bp[ncols * kp // 4 :].view(np.int32)
    _gemm_amx(m, n, kp, q8, rows * kp, bp, sums, ncols, c0, zero, c, c_off, ldc)


@sealed_njit
def gemm_q8_bytes(m, n, k, q8, zero, bp, ncols, c0, c, c_off, ldc):
    """``gemm_q8_packed`` with A's rows already uint8 codes in ``q8``'s bytes (rows of
    ``padded_k(k)`` bytes; what lies past ``k`` in a row multiplies the packing's zeros
    and does not count): the caller gathered them (the QDQ convs did, before they went
    by channel rows, ``gemm_q8_rows``; no template names it now). In the
    VNNI register tiles."""
    kp = (k + K_BLOCK - 1) // K_BLOCK * K_BLOCK
    _gemm_vnni(m, n, k, kp, q8, bp, ncols, c0, zero, c, c_off, ldc)


@sealed_njit
def gemm_q8_bytes_amx(m, n, k, q8, zero, bp, ncols, c0, c, c_off, ldc):
    """``gemm_q8_bytes`` on AMX-INT8 tiles (as ``gemm_q8_packed_amx``); A's rows past
    ``m`` up to a multiple of ``AMX_ROWS`` are read and their sums dropped."""
    kp = (k + K_BLOCK - 1) // K_BLOCK * K_BLOCK
    if m < AMX_MIN_ROWS:
        _gemm_vnni(m, n, k, kp, q8, bp, ncols, c0, zero, c, c_off, ldc)
        return
    rows = (m + AMX_ROWS - 1) // AMX_ROWS * AMX_ROWS
    sums = bp[ncols * kp // 4 :].view(np.int32)
    _gemm_amx(m, n, kp, q8, rows * kp, bp, sums, ncols, c0, zero, c, c_off, ldc)


def pack_q8(b: np.ndarray, transposed: bool = False) -> np.ndarray:
    """A 2-D B of integer values in -128..127 (``k x n``, or ``n x k`` given
    ``transposed``; float32 or integer) as ``gemm_q8_packed`` reads it, flat float32 whose
    bytes are: B's column strips of ``STRIP`` (the last one narrower when ``n`` is not
    whole strips), each ``padded_k(k) / 4`` quad rows of 4 bytes a column (rows ``4q ..
    4q + 3`` of the column, zeros past ``k``), then B's ``n`` int32 column sums."""
    matrix = np.asarray(b.T if transposed else b)
    k, n = matrix.shape
    codes = matrix.astype(np.int8)
    if not np.array_equal(codes, matrix):
        raise ValueError("pack_q8: B must hold integers in -128..127")
    kp = padded_k(k)
    padded = np.zeros((kp, n), np.int8)
    padded[:k] = codes
    quads = padded.reshape(kp // 4, 4, n).transpose(0, 2, 1)  # (quad, column, 4)
    pieces = []
    for c0 in range(0, n, STRIP):
        pieces.append(np.ascontiguousarray(quads[:, c0 : c0 + STRIP, :]).reshape(-1))
    sums = codes.astype(np.int32).sum(axis=0).astype(np.int32)
    data = np.concatenate([*pieces, sums.view(np.int8)])
    return data.view(np.float32)


def fits(n: int) -> bool:
    """Whether ``gemm_q8_packed`` computes a C of ``n`` columns (whole vectors of 16)."""
    return n > 0 and n % LANES == 0


__all__ = [
    "LANES",
    "amx_available",
    "available",
    "fits",
    "gemm_q8_bytes",
    "gemm_q8_bytes_amx",
    "gemm_q8_packed",
    "gemm_q8_packed_amx",
    "gemm_q8_rows",
    "pack_q8",
    "pack_q8_rows",
    "scratch_floats",
]
