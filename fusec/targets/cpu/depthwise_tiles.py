"""Register tiles of a depthwise convolution's tap sums: ``taps_row`` (issue #30).

The lanes form of a depthwise convolution (``fusec.targets.cpu.depthwise``) holds a
block of ``LANES_CHANNELS`` channels channels-last (``xpad``: padded input, ``wt``:
weights tap-major). Its tap sums written as Numba loops ran one output pixel's 32
channels at a time through a chain of separate multiplies and adds on 8-float vectors
(strict float semantics: LLVM may not contract them into FMAs, and keeps no pixels in
registers). Here a tile of ``pixels`` output pixels x ``LANES_CHANNELS`` channels stays
in vector registers for the whole tap loop: per tap, the channels' weight vectors are
loaded once and each pixel's input vectors feed one ``llvm.fma`` each. The first tap
is a multiply, the rest fused multiply-adds in the order of the taps (row-major over
the kernel, as the planar loop sums them): one rounding a tap where the planar loop
has two, so the results differ from it in the last bits (NaN and Inf land alike: a
product that overflows gives Inf either way unless the sum so far is an opposite
Inf-sized value). As ``microkernel``, the tile is LLVM IR on ``<W x float>`` (``W``
from ``host``: 16 lanes with AVX-512, else 8).

Standalone, 1 thread, 384 channels of 8x8 output, 7x7 taps (the tap sums only, us
least CPU time): the Numba loop 62.8-64.2, these tiles 33.2-34.1.
"""

from __future__ import annotations

import functools

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from fusec.runtime.numba_cache import sealed_njit
from fusec.targets.cpu import intrinsics
from fusec.targets.cpu.host import W

_I64, _F32 = ir.IntType(64), ir.FloatType()

#: Channels of one tile row: a lanes block (``depthwise.LANES_CHANNELS``).
CHANNELS = 32
#: Vectors a pixel: ``CHANNELS / W``.
VECTORS = CHANNELS // W
#: Pixels of a full tile: 8 x 2 16-float accumulators with AVX-512 (32 registers), 3 x 4
#: 8-float ones else (16 registers: 12 accumulators and the tap's 4 weight vectors).
PIXELS = 8 if W == 16 else 3
assert VECTORS * W == CHANNELS


def _next_tap(
    builder: ir.IRBuilder,
    t: ir.Value,
    col: ir.Value,
    s: ir.Value,
    rowstep: ir.Value,
    colstep: ir.Value,
) -> tuple[ir.Value, ir.Value]:
    """The offset and column of the tap after the one at offset ``t``, column ``col``
    (``s`` taps a kernel row): no division a tap (a 64-bit divide per tap held the
    tiles to its throughput)."""
    one, zero = ir.Constant(_I64, 1), ir.Constant(_I64, 0)
    nxt = builder.add(col, one)
    wrap = builder.icmp_signed("==", nxt, s)
    back = builder.sub(rowstep, builder.mul(builder.sub(s, one), colstep))
    return builder.add(t, builder.select(wrap, back, colstep)), builder.select(wrap, zero, nxt)


def _emit_lanes_tile(builder: ir.IRBuilder, arg, pixels: int, vectors: int, lanes: int, sums):
    """A lanes tile's IR at the builder's position: ``sums(builder, arg, vload, const,
    fma)`` emits the ``pixels x vectors`` sums, then they are stored, pixel ``p``'s vector
    ``v`` at ``ot[o_off + p * cb + v * lanes:]`` (``cb = vectors * lanes``)."""
    vty = ir.VectorType(_F32, lanes)
    cb = vectors * lanes

    def vload(base: ir.Value, off: ir.Value) -> ir.Value:
        at = builder.bitcast(builder.gep(base, [off]), vty.as_pointer())
        return builder.load(at, align=4)

    def const(v: int) -> ir.Constant:
        return ir.Constant(_I64, v)

    fma = builder.module.declare_intrinsic(
        f"llvm.fma.v{lanes}f32", (), ir.FunctionType(vty, [vty, vty, vty])
    )
    final = sums(builder, arg, vload, const, fma)
    po, oo = arg.data(8), arg.integer(9)
    for p in range(pixels):
        for v in range(vectors):
            at = builder.gep(po, [builder.add(oo, const(p * cb + v * lanes))])
            builder.store(final[p * vectors + v], builder.bitcast(at, vty.as_pointer()), align=4)


def _lanes_tile(name: str, pixels: int, vectors: int, lanes: int, sums):
    """The lanes tile intrinsic ``tile(x, x_off, pstride, s, rowstep, colstep, taps, wt,
    ot, o_off)``: the typing, and ``_emit_lanes_tile`` of ``sums``."""

    def typed(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off):
        intrinsics.check_f32_arrays("depthwise taps tile", {"x": x, "wt": wt, "ot": ot})
        sig = types.void(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off)

        def codegen(context, builder, signature, args):
            arg = intrinsics.Arguments(context, builder, signature, args)
            _emit_lanes_tile(builder, arg, pixels, vectors, lanes, sums)
            return context.get_dummy_value()

        return sig, codegen

    def tile(typingctx, x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off):
        return typed(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off)

    tile.__name__ = name
    return intrinsic(tile)


def _switch_codegen(name: str, case: int, cases: dict):
    """The codegen of a switch intrinsic: an LLVM ``switch`` on its argument ``case`` to
    ``cases[value](builder, arg)`` (no code for any other value)."""

    def codegen(context, builder, signature, args):
        arg = intrinsics.Arguments(context, builder, signature, args)
        done = builder.append_basic_block(f"{name}.done")
        switch = builder.switch(arg.integer(case), done)
        for value, emit in cases.items():
            block = builder.append_basic_block(f"{name}.{value}")
            switch.add_case(ir.Constant(_I64, value), block)
            builder.position_at_end(block)
            emit(builder, arg)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return codegen


def _switch_tile(name: str, cases: dict, vectors: int, lanes: int):
    """One intrinsic ``tile(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off,
    case)`` over several lanes tiles: the tile of ``cases[case] = (pixels, sums)`` (no
    tile for any other value). The callers pick among the tiles of a row's last pixels
    and of each kernel width this way, where a ladder of ``if``s called one intrinsic
    each."""
    emits = {
        value: functools.partial(
            _emit_lanes_tile, pixels=pixels, vectors=vectors, lanes=lanes, sums=sums
        )
        for value, (pixels, sums) in cases.items()
    }

    def tile(typingctx, x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off, case):
        intrinsics.check_f32_arrays("depthwise taps tile", {"x": x, "wt": wt, "ot": ot})
        sig = types.void(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off, case)
        return sig, _switch_codegen(name, 10, emits)

    tile.__name__ = name
    return intrinsic(tile)


def _taps_sums(pixels: int, vectors: int, lanes: int):
    """The sums of a lanes tile (``_emit_lanes_tile``; arguments ``x, x_off, pstride, s,
    rowstep, colstep, taps, wt, ot, o_off``): for pixel ``p < pixels`` and vector ``v <
    vectors``, ``ot[o_off + p * cb + v * lanes:]``
    (``cb = vectors * lanes``, ``lanes`` floats) = the sum over taps ``k < taps`` of
    ``wt[k * cb + v * lanes:] * x[x_off + (k // s) * rowstep + (k % s) * colstep + p *
    pstride + v * lanes:]``: the first term a product, each next one a fused
    multiply-add. ``taps >= 1``."""
    vty = ir.VectorType(_F32, lanes)
    cb = vectors * lanes

    def sums(builder, arg, vload, const, fma) -> list[ir.Value]:
        px, pw = arg.data(0), arg.data(7)
        xo, ps, ss, rs, cs, kk = (arg.integer(i) for i in (1, 2, 3, 4, 5, 6))

        def terms(k: ir.Value, t: ir.Value) -> tuple[list[ir.Value], list[list[ir.Value]]]:
            t = builder.add(xo, t)
            wb = builder.mul(k, const(cb))
            wv = [vload(pw, builder.add(wb, const(v * lanes))) for v in range(vectors)]
            xs = []
            for p in range(pixels):
                at = builder.add(t, builder.mul(ps, const(p)))
                xs.append([vload(px, builder.add(at, const(v * lanes))) for v in range(vectors)])
            return wv, xs

        wv, xs = terms(const(0), const(0))
        init = [[builder.fmul(wv[v], xs[p][v]) for v in range(vectors)] for p in range(pixels)]
        t1, col1 = _next_tap(builder, const(0), const(0), ss, rs, cs)
        entry, loop, done = intrinsics.open_loop(
            builder, "taps", builder.icmp_signed(">", kk, const(1))
        )
        k, t, col = builder.phi(_I64), builder.phi(_I64), builder.phi(_I64)
        acc = [[builder.phi(vty) for _ in range(vectors)] for _ in range(pixels)]
        wv, xs = terms(k, t)
        new = [
            [builder.call(fma, [wv[v], xs[p][v], acc[p][v]]) for v in range(vectors)]
            for p in range(pixels)
        ]
        step = builder.add(k, const(1))
        t_next, col_next = _next_tap(builder, t, col, ss, rs, cs)
        body_end = builder.block
        intrinsics.carry(
            [k, t, col], [const(1), t1, col1], [step, t_next, col_next], entry, body_end
        )
        return _close(builder, vty, init, acc, new, step, kk, entry, loop, done, body_end)

    return sums


def _taps_tile(pixels: int, vectors: int, lanes: int):
    """``_taps_sums`` as an intrinsic of its own."""
    sums = _taps_sums(pixels, vectors, lanes)
    return _lanes_tile(f"taps_{pixels}x{vectors}x{lanes}", pixels, vectors, lanes, sums)


def _close(builder, vty, init, acc, new, step, count, entry, loop, done, body_end):
    """The accumulators' loop phis carried (``init`` from ``entry``, ``new`` from the body),
    the loop closed while ``step < count``, and the sums after it, flat, pixel-major."""
    inits = [value for row in init for value in row]
    news = [value for row in new for value in row]
    intrinsics.carry([phi for row in acc for phi in row], inits, news, entry, body_end)
    intrinsics.close_loop(builder, builder.icmp_signed("<", step, count), loop, done)
    return intrinsics.exit_values(builder, vty, inits, news, entry, body_end)


def _shared_taps_sums(pixels: int, width: int, vectors: int, lanes: int):
    """``_taps_sums`` (same arguments and sums, bit for bit) for kernels
    ``width`` taps wide whose neighbouring pixels read neighbouring columns (``pstride ==
    colstep``, ``s == width``, ``taps`` a multiple of ``width``): pixel ``p``'s tap in
    column ``c`` reads what pixel ``p + 1`` reads in column ``c - 1``, so a kernel row
    loads its ``pixels + width - 1`` input vectors once and feeds ``pixels x width`` fmas
    from them, where the tap loop loads ``pixels`` vectors a tap (a kernel row of 5 taps
    over 4 pixels: 8 loads instead of 20, the weights' 5 besides)."""
    vty = ir.VectorType(_F32, lanes)
    cb = vectors * lanes

    def sums(builder, arg, vload, const, fma) -> list[ir.Value]:
        px, pw = arg.data(0), arg.data(7)
        xo, cs, rs, kk = (arg.integer(i) for i in (1, 5, 4, 6))

        def kernel_row(r: ir.Value, acc: list[list[ir.Value]] | None) -> list[list[ir.Value]]:
            """The sums after kernel row ``r`` (from ``acc``; None: the first row, whose
            first tap is a product)."""
            t = builder.add(xo, builder.mul(r, rs))
            wb = builder.mul(r, const(width * cb))
            out = [[None] * vectors for _ in range(pixels)] if acc is None else acc
            out = [list(row) for row in out]
            for v in range(vectors):
                xs = [
                    vload(
                        px, builder.add(builder.add(t, builder.mul(cs, const(j))), const(v * lanes))
                    )
                    for j in range(pixels + width - 1)
                ]
                for c in range(width):
                    w = vload(pw, builder.add(wb, const(c * cb + v * lanes)))
                    for p in range(pixels):
                        if out[p][v] is None:
                            out[p][v] = builder.fmul(w, xs[p + c])
                        else:
                            out[p][v] = builder.call(fma, [w, xs[p + c], out[p][v]])
            return out

        init = kernel_row(const(0), None)
        rows = builder.sdiv(kk, const(width))
        entry, loop, done = intrinsics.open_loop(
            builder, "rows", builder.icmp_signed(">", rows, const(1))
        )
        r = builder.phi(_I64)
        acc = [[builder.phi(vty) for _ in range(vectors)] for _ in range(pixels)]
        new = kernel_row(r, acc)
        step = builder.add(r, const(1))
        body_end = builder.block
        intrinsics.carry([r], [const(1)], [step], entry, body_end)
        return _close(builder, vty, init, acc, new, step, rows, entry, loop, done, body_end)

    return sums


_T1, _FULL = _taps_tile(1, VECTORS, W), _taps_tile(PIXELS, VECTORS, W)
#: A row's last ``rest < PIXELS`` pixels: ``_REST(..., rest)``.
_REST = _switch_tile(
    "taps_rest", {p: (p, _taps_sums(p, VECTORS, W)) for p in range(1, PIXELS)}, VECTORS, W
)

#: Kernel widths with shared-column tiles (``_shared_taps_sums``), on 16-float vectors only:
#: with 8-float ones a tile's accumulators and a kernel row's inputs exceed the 16
#: registers (not measured there). One thread, the tap sums of a batch of 8 through
#: ``taps_row`` (us): 960 channels of 4x4, 5x5 taps 125.7 -> 75; 672 channels of 8x8, 3x3
#: taps 98 -> 84 (the tile intrinsic called directly: 54-58, the rest is ``taps_row``'s
#: call); 384 channels of 8x8, 7x7 taps 355 -> 184. The same sums, bit for bit.
SHARED_WIDTHS = (3, 5, 7) if W == 16 else ()
#: ... for rows of at least this many pixels (2-pixel rows ran slower than by the taps).
SHARED_MIN_PIXELS = 4
#: A tile of ``2 <= n <= PIXELS`` pixels of a ``SHARED_WIDTHS`` kernel ``s`` taps wide:
#: ``_SHARED(..., s * _SHARED_KEY + n)``.
_SHARED_KEY = 16
_SHARED = _switch_tile(
    "shared_taps",
    {
        s * _SHARED_KEY + p: (p, _shared_taps_sums(p, s, VECTORS, W))
        for s in SHARED_WIDTHS
        for p in range(2, PIXELS + 1)
    },
    VECTORS,
    W,
)


@sealed_njit
def taps_rows(
    x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off, npix, rows, x_rowstep, o_rowstep
):
    """``rows`` rows of ``npix`` output pixels of ``CHANNELS`` channels, row ``r`` into
    ``ot`` from ``o_off + r * o_rowstep`` on (``CHANNELS`` floats a pixel), its pixel
    ``p``'s taps reading ``x`` from ``x_off + r * x_rowstep + p * pstride`` on, tap ``k`` at
    ``(k // s) * rowstep + (k % s) * colstep`` further, with weights ``wt[k * CHANNELS:]``;
    full tiles of ``PIXELS`` pixels, then one of the rest, each by its shared-column tile
    when neighbouring pixels read neighbouring columns of a ``SHARED_WIDTHS`` kernel (the
    same sums). One call a lanes block's plane: a call passes three arrays' fields (~22 ns
    a call where a 4-pixel row's sums take ~40)."""
    shared = pstride == colstep and s in SHARED_WIDTHS and taps % s == 0
    shared = shared and npix >= SHARED_MIN_PIXELS
    for row in range(rows):
        xr, orow = x_off + row * x_rowstep, o_off + row * o_rowstep
        if shared:
            # each tile by its shared-column form: the intrinsics written out, in this
            # function (a call into another one passed ~30 arguments a tile)
            p = 0
            while p < npix:
                n = min(PIXELS, npix - p)
                xo, oo = xr + p * pstride, orow + p * CHANNELS
                if n == 1:  # one pixel: nothing to share
                    _T1(x, xo, pstride, s, rowstep, colstep, taps, wt, ot, oo)
                else:
                    key = s * _SHARED_KEY + n
                    _SHARED(x, xo, pstride, s, rowstep, colstep, taps, wt, ot, oo, key)
                p += n
        else:
            p = 0
            while p + PIXELS <= npix:
                _FULL(
                    x,
                    xr + p * pstride,
                    pstride,
                    s,
                    rowstep,
                    colstep,
                    taps,
                    wt,
                    ot,
                    orow + p * CHANNELS,
                )
                p += PIXELS
            rest = npix - p
            xo, oo = xr + p * pstride, orow + p * CHANNELS
            _REST(x, xo, pstride, s, rowstep, colstep, taps, wt, ot, oo, rest)


@sealed_njit
def taps_row(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off, npix):
    """One row of ``taps_rows`` (the ABI's ``depthwise_taps_row``, which cached kernels
    call)."""
    taps_rows(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off, npix, 1, 0, 0)


def _emit_plane_tile(builder: ir.IRBuilder, arg, rows: int, lanes: int, sums):
    """A planar tile's IR at the builder's position: the ``llvm.fma`` declaration, a
    scalar's splat, ``sums(builder, arg, vty, fma, splat)`` (the ``rows`` sums), then
    their stores, output row ``p`` at ``out[o_off + p * ostride:]``."""
    vty = ir.VectorType(_F32, lanes)
    fma = builder.module.declare_intrinsic(
        f"llvm.fma.v{lanes}f32", (), ir.FunctionType(vty, [vty, vty, vty])
    )
    splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), None)

    def splat(scalar: ir.Value) -> ir.Value:
        one = builder.insert_element(
            ir.Constant(vty, ir.Undefined), scalar, ir.Constant(ir.IntType(32), 0)
        )
        return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), splat_mask)

    final = sums(builder, arg, vty, fma, splat)
    po, oo, ost = arg.data(9), arg.integer(10), arg.integer(11)
    for p in range(rows):
        at = builder.gep(po, [builder.add(oo, builder.mul(ost, ir.Constant(_I64, p)))])
        builder.store(final[p], builder.bitcast(at, vty.as_pointer()), align=4)


def _plane_switch(name: str, cases: dict, lanes: int):
    """The planar tile intrinsic ``tile(x, x_off, rstride, s, rowstep, colstep, taps, w,
    w_off, out, o_off, ostride, case)``: the tile of ``cases[case] = (rows, sums)``
    (``_emit_plane_tile``; no tile for any other value)."""
    emits = {
        value: functools.partial(_emit_plane_tile, rows=rows, lanes=lanes, sums=sums)
        for value, (rows, sums) in cases.items()
    }

    def tile(
        typingctx, x, x_off, rstride, s, rowstep, colstep, taps, w, w_off, out, o_off, ostride, case
    ):
        intrinsics.check_f32_arrays(f"depthwise {name}", {"x": x, "w": w, "out": out})
        sig = types.void(
            x, x_off, rstride, s, rowstep, colstep, taps, w, w_off, out, o_off, ostride, case
        )
        return sig, _switch_codegen(name, 12, emits)

    tile.__name__ = name
    return intrinsic(tile)


def _rows_sums(rows: int, lanes: int):
    """The sums of a planar tile (``_emit_plane_tile``; arguments ``x, x_off, rstride, s,
    rowstep, colstep, taps, w, w_off, out, o_off, ostride``) of one channel plane (the
    planar form): for output row ``p <
    rows``, the ``lanes`` pixels ``out[o_off + p * ostride:]`` = the sum over taps ``k <
    taps`` of the scalar weight ``w[w_off + k]`` times the vector ``x[x_off + p * rstride
    + (k // s) * rowstep + (k % s) * colstep:]``: the first term a product, then fused
    multiply-adds in the order of the taps. ``taps >= 1``."""

    def sums(builder, arg, vty, fma, splat):
        integer, data = arg.integer, arg.data

        def const(v: int) -> ir.Constant:
            return ir.Constant(_I64, v)

        px, pw = data(0), data(7)
        xo, rst, ss, rs, cs, kk, wo = (integer(i) for i in (1, 2, 3, 4, 5, 6, 8))

        def terms(k: ir.Value, t: ir.Value) -> tuple[ir.Value, list[ir.Value]]:
            t = builder.add(xo, t)
            wv = splat(builder.load(builder.gep(pw, [builder.add(wo, k)])))
            xs = []
            for p in range(rows):
                at = builder.gep(px, [builder.add(t, builder.mul(rst, const(p)))])
                xs.append(builder.load(builder.bitcast(at, vty.as_pointer()), align=4))
            return wv, xs

        wv, xs = terms(const(0), const(0))
        init = [builder.fmul(wv, xs[p]) for p in range(rows)]
        t1, col1 = _next_tap(builder, const(0), const(0), ss, rs, cs)
        entry, loop, done = intrinsics.open_loop(
            builder, "taps", builder.icmp_signed(">", kk, const(1))
        )
        k, t, col = builder.phi(_I64), builder.phi(_I64), builder.phi(_I64)
        acc = [builder.phi(vty) for _ in range(rows)]
        wv, xs = terms(k, t)
        new = [builder.call(fma, [wv, xs[p], acc[p]]) for p in range(rows)]
        step = builder.add(k, const(1))
        t_next, col_next = _next_tap(builder, t, col, ss, rs, cs)
        body_end = builder.block
        intrinsics.carry(
            [k, t, col], [const(1), t1, col1], [step, t_next, col_next], entry, body_end
        )
        intrinsics.carry(acc, init, new, entry, body_end)
        intrinsics.close_loop(builder, builder.icmp_signed("<", step, kk), loop, done)
        return intrinsics.exit_values(builder, vty, init, new, entry, body_end)

    return sums


def _shared_rows_sums(rows: int, height: int, lanes: int):
    """``_rows_sums`` (same arguments and sums) for a kernel ``height`` rows
    high whose output rows read consecutive input rows (``rstride == rowstep``: stride 1
    and dilation 1 down the plane, or equal): each input row's vector at each kernel
    column is loaded once and multiplied into every output row of the tile that reads it,
    ``rows + height - 1`` loads a kernel column where ``_rows_sums`` makes ``rows *
    height``. The sums run kernel column by kernel column (the taps of column 0 from the
    top, then column 1, ...), fused multiply-adds from zero. Why: with 16-float vectors a
    row's shifted loads cross a cache line two times in three, and the loads, not the
    FMAs, set the planar tile's pace."""

    def sums(builder, arg, vty, fma, splat):
        integer, data = arg.integer, arg.data
        px, pw = data(0), data(7)
        xo, ss, rs, cs, wo = (integer(i) for i in (1, 3, 4, 5, 8))
        blocks = intrinsics.open_loop(
            builder, "columns", builder.icmp_signed(">", ss, ir.Constant(_I64, 0))
        )
        col = builder.phi(_I64)
        acc = [builder.phi(vty) for _ in range(rows)]
        weights = []  # this column's weights, one splat a kernel row
        for r in range(height):
            at = builder.add(wo, builder.add(builder.mul(ss, ir.Constant(_I64, r)), col))
            weights.append(splat(builder.load(builder.gep(pw, [at]))))
        base = builder.add(xo, builder.mul(col, cs))
        new = list(acc)
        for i in range(rows + height - 1):  # input row i of the tile
            at = builder.gep(px, [builder.add(base, builder.mul(rs, ir.Constant(_I64, i)))])
            v = builder.load(builder.bitcast(at, vty.as_pointer()), align=4)
            for p in range(max(0, i - height + 1), min(rows - 1, i) + 1):
                new[p] = builder.call(fma, [weights[i - p], v, new[p]])
        zero = ir.Constant(vty, None)
        return intrinsics.close_accumulator_loop(
            builder, col, ss, [[a] for a in acc], [[n] for n in new], zero, blocks
        )

    return sums


#: Output rows of a full planar tile (one vector of ``W`` pixels each).
ROWS = 8
#: Kernel heights with full tiles that load each input row once (``_shared_rows_sums``).
SHARED_HEIGHTS = (3, 5, 7)
#: A full tile of ``ROWS`` rows: ``_FULL_ROWS(..., height)`` by the shared tile of a
#: ``SHARED_HEIGHTS`` kernel, ``_FULL_ROWS(..., 0)`` by the taps.
_FULL_ROWS = _plane_switch(
    "full_rows",
    {0: (ROWS, _rows_sums(ROWS, W))}
    | {h: (ROWS, _shared_rows_sums(ROWS, h, W)) for h in SHARED_HEIGHTS},
    W,
)
#: The last ``rest < ROWS`` rows: ``_REST_ROWS(..., rest)``.
_REST_ROWS = _plane_switch("rest_rows", {p: (p, _rows_sums(p, W)) for p in range(1, ROWS)}, W)


@sealed_njit
def _plane_column(x, x_off, rstride, s, rowstep, colstep, taps, w, w_off, out, o_off, oh, ow, j):
    """``taps_plane``'s vector of ``W`` output columns from column ``j`` on, every row:
    tiles of ``ROWS`` rows, then one of the rest."""
    p = 0
    height = taps // s if rstride == rowstep and taps % s == 0 else 0  # shared tiles
    full = height if height == 3 or height == 5 or height == 7 else 0  # SHARED_HEIGHTS
    while p + ROWS <= oh:
        xo, oo = x_off + p * rstride + j, o_off + p * ow + j
        _FULL_ROWS(x, xo, rstride, s, rowstep, colstep, taps, w, w_off, out, oo, ow, full)
        p += ROWS
    rest = oh - p
    xo, oo = x_off + p * rstride + j, o_off + p * ow + j
    _REST_ROWS(x, xo, rstride, s, rowstep, colstep, taps, w, w_off, out, oo, ow, rest)


@sealed_njit
def taps_plane(x, x_off, rstride, s, rowstep, colstep, taps, w, w_off, out, o_off, oh, ow):
    """One channel's output plane (``oh`` rows of ``ow`` pixels, ``out`` from ``o_off``
    on, rows ``ow`` apart) from its padded input plane in ``x`` (output row ``p`` reads
    from ``x_off + p * rstride`` on, tap ``k`` at ``(k // s) * rowstep + (k % s) *
    colstep`` further, stride 1 along the row) and weights ``w[w_off:][:taps]``: the
    columns of whole vectors of ``W`` pixels in tiles of ``ROWS`` rows; the last
    ``ow % W`` columns by one more vector that ends at the row's end (over columns
    already written, with the same sums in the same order: the same values; a row of
    56 pixels had 8 columns of scalar sums, 96x56x56 7x7 + bias 3.5 ms against 0.56 in
    the channels-last kernel), or, in rows shorter than a vector, as scalars (a
    multiply-add each, not fused)."""
    full = ow - ow % W
    for j in range(0, full, W):
        _plane_column(x, x_off, rstride, s, rowstep, colstep, taps, w, w_off, out, o_off, oh, ow, j)
    if full == ow:
        return
    if full > 0:
        _plane_column(
            x, x_off, rstride, s, rowstep, colstep, taps, w, w_off, out, o_off, oh, ow, ow - W
        )
        return
    for p in range(oh):
        for j in range(ow):
            at = x_off + p * rstride + j
            total = w[w_off] * x[at]
            for k in range(1, taps):
                total += w[w_off + k] * x[at + (k // s) * rowstep + (k % s) * colstep]
            out[o_off + p * ow + j] = total


def _split_pairs(lanes: int):
    """The intrinsic ``split(x, x_off, dst, even_off, odd_off)``: the ``2 * lanes`` floats
    of ``x`` at ``x_off`` (one unaligned vector load), their even elements stored at
    ``dst[even_off:]`` and their odd ones at ``dst[odd_off:]`` (two shuffles, two vector
    stores). A copy written as Numba loops reads ``x`` with a stride of 2, which LLVM
    left scalar: 16 K floats of 64-float rows in 5.0 us on the Zen 4 VM, where the same
    rows copied as they are took 0.3."""
    vty, wide = ir.VectorType(_F32, lanes), ir.VectorType(_F32, 2 * lanes)
    evens = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [2 * i for i in range(lanes)])
    odds = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [2 * i + 1 for i in range(lanes)])

    def split(typingctx, x, x_off, dst, even_off, odd_off):
        intrinsics.check_f32_arrays("split pairs", {"x": x, "dst": dst})
        sig = types.void(x, x_off, dst, even_off, odd_off)

        def codegen(context, builder, signature, args):
            arg = intrinsics.Arguments(context, builder, signature, args)

            def at(array: int, offset: int, ty: ir.Type) -> ir.Value:
                pointer = builder.gep(arg.data(array), [arg.integer(offset)])
                return builder.bitcast(pointer, ty.as_pointer())

            pairs = builder.load(at(0, 1, wide), align=4)
            undef = ir.Constant(wide, ir.Undefined)
            builder.store(builder.shuffle_vector(pairs, undef, evens), at(2, 3, vty), align=4)
            builder.store(builder.shuffle_vector(pairs, undef, odds), at(2, 4, vty), align=4)
            return context.get_dummy_value()

        return sig, codegen

    split.__name__ = f"split_pairs_{lanes}"
    return intrinsic(split)


_SPLIT = _split_pairs(W)


@sealed_njit
def deinterleave(x, x_off, dst, even_off, odd_off, n):
    """``dst[even_off + j] = x[x_off + 2 j]`` and ``dst[odd_off + j] = x[x_off + 2 j + 1]``
    for ``j < n``: a stride-2 depthwise convolution's input row split into its two column
    phases (``conv.planes``), ``W`` pairs a step; the last ``n % W`` by one more step that
    overlaps the one before (the same values again), or one at a time when ``n < W``. A
    copy: the same floats, bit for bit."""
    if n < W:
        for j in range(n):
            dst[even_off + j] = x[x_off + 2 * j]
            dst[odd_off + j] = x[x_off + 2 * j + 1]
        return
    for j in range(0, n - W + 1, W):
        _SPLIT(x, x_off + 2 * j, dst, even_off + j, odd_off + j)
    if n % W:
        j = n - W
        _SPLIT(x, x_off + 2 * j, dst, even_off + j, odd_off + j)


def _transpose_tile(size: int):
    """The intrinsic ``tile(src, s_off, s_stride, dst, d_off, d_stride)``: the ``size x size``
    floats whose row ``r`` is ``src[s_off + r * s_stride:][:size]`` written transposed, row
    ``r`` of the result to ``dst[d_off + r * d_stride:][:size]``: ``size`` vector loads,
    ``size * log2(size)`` two-source shuffles (each stage swaps the off-diagonal blocks of
    its size), ``size`` vector stores. The lanes form's channel-major <-> pixel-major
    copies (``depthwise.lanes_lines``) ran as scalar loops with a strided side: 50 us of the
    input copies and 10 of the output copies in a 240-channel 16x16 plane, one thread; with
    the tiles EfficientNet-B0's C240 16x16 3x3/2 + bias + SiLU took 81 -> 27 us and its C672
    8x8 5x5/2 51 -> 27 (onnxruntime 27 and 28 in the same run, ``cpu_conv_layers.py``)."""
    vty = ir.VectorType(_F32, size)
    i32 = ir.IntType(32)

    def mask(indices: list[int]) -> ir.Constant:
        return ir.Constant(ir.VectorType(i32, size), indices)

    def tile(typingctx, src, s_off, s_stride, dst, d_off, d_stride):
        intrinsics.check_f32_arrays("transpose tile", {"src": src, "dst": dst})
        sig = types.void(src, s_off, s_stride, dst, d_off, d_stride)

        def codegen(context, builder, signature, args):
            arg = intrinsics.Arguments(context, builder, signature, args)

            def row(array: int, off: int, stride: int, r: int) -> ir.Value:
                at = builder.add(
                    arg.integer(off), builder.mul(ir.Constant(_I64, r), arg.integer(stride))
                )
                return builder.bitcast(builder.gep(arg.data(array), [at]), vty.as_pointer())

            v = [builder.load(row(0, 1, 2, r), align=4) for r in range(size)]
            s = 1
            while s < size:
                low = mask([j if not j & s else size + j - s for j in range(size)])
                high = mask([j + s if not j & s else size + j for j in range(size)])
                new = list(v)
                for i in range(size):
                    if not i & s:
                        new[i] = builder.shuffle_vector(v[i], v[i | s], low)
                        new[i | s] = builder.shuffle_vector(v[i], v[i | s], high)
                v, s = new, 2 * s
            for r in range(size):
                builder.store(v[r], row(3, 4, 5, r), align=4)
            return context.get_dummy_value()

        return sig, codegen

    tile.__name__ = f"transpose_tile_{size}"
    return intrinsic(tile)


_TRANSPOSE4, _TRANSPOSE8, _TRANSPOSE16 = (_transpose_tile(n) for n in (4, 8, 16))


@sealed_njit
def transpose(src, s_off, s_stride, dst, d_off, d_stride, size):
    """A ``size x size`` tile (4, 8 or 16: ``depthwise.TRANSPOSE_SIZES``) of ``src`` (rows
    ``s_stride`` apart) written transposed into ``dst`` (rows ``d_stride`` apart): a copy,
    the same floats bit for bit."""
    if size == 16:
        _TRANSPOSE16(src, s_off, s_stride, dst, d_off, d_stride)
    elif size == 8:
        _TRANSPOSE8(src, s_off, s_stride, dst, d_off, d_stride)
    else:
        _TRANSPOSE4(src, s_off, s_stride, dst, d_off, d_stride)
