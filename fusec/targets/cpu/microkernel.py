"""A register-tiled float32 GEMM for operands read in place: ``gemm_nn``.

Why. Attention's two GEMMs per block are narrow: ``q @ key^T`` with K = D (64 in
most heads) and ``p @ v`` with N = E. OpenBLAS packs A and B on every call, which
such shapes do not amortise: single-threaded on the 2-core Zen 4 VM, 256 x 512 x 64
and 256 x 64 x 512 ran at 88-104 GFLOP/s through numpy's OpenBLAS against 107-117
for this kernel in the same processes (``benchmarks/results/cpu-notes.md``).

How. ``C = A @ B`` (row-major, no transposes) in tiles of ``MR`` rows by ``NV``
vectors of ``W`` lanes that stay in registers for the whole K loop: per ``k``, the
tile loads ``NV`` vectors of B's row ``k``, broadcasts ``A[i, k]`` for its ``MR``
rows and issues ``MR * NV`` fused multiply-adds (float32 accumulation, in the order
of ``k``). B's rows are read where they are, so the kernel suits a B whose rows
are short enough to stay in L1/L2 across the tiles (a head's key^T or v); it needs
no workspace. The tile is written as LLVM IR (``llvm.fma`` on ``<W x float>``):
Numba has no vector type, and LLVM's vectoriser does not keep a 2-D accumulator
in registers. ``W`` follows the target Numba compiles for: 16 lanes with
AVX-512 (32 vector registers: 6 x 4 tiles, 24 accumulators), else 8 (16 registers:
6 x 2); other architectures legalise the vectors to their own width. Columns past
the last multiple of ``W`` take a scalar loop.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from fusec.runtime.numba_cache import sealed_njit
from fusec.targets.cpu import intrinsics

# The tile shape is the code generators' too (``host``: read there without Numba).
from fusec.targets.cpu.host import MR, NV, STRIP, W, fits, packs, target_features, vector_lanes

_I32, _I64, _F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()


def _tile(rows: int, vectors: int, lanes: int, prefetch: bool = False):
    """The intrinsic ``tile(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, k)``: C's
    ``rows x vectors * lanes`` tile at ``c_off`` = A's rows at ``a_off`` @ B's columns at
    ``b_off`` over ``k`` (the sum over no terms, 0, when ``k <= 0``). With ``prefetch``
    it takes one more argument, ``pf_off``: at step ``p`` of the K loop the tile also
    prefetches (into L2, for reading: ``prefetcht1``) the 64-byte line of ``b`` at element
    ``pf_off + 16 * p``, so that ``k`` consecutive lines from ``pf_off`` on arrive while
    the tile computes (``gemm_packed``: the next strip of a B too large for L2)."""
    vty = ir.VectorType(_F32, lanes)

    def typed(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, k, *pf_off):
        intrinsics.check_f32_arrays("gemm tile", {"a": a, "b": b, "c": c})
        sig = types.void(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, k, *pf_off)

        def codegen(context, builder, signature, args):
            arg = intrinsics.Arguments(context, builder, signature, args)
            integer = arg.integer

            def pointer(i: int, off: int) -> ir.Value:
                return builder.gep(arg.data(i), [integer(off)])

            def vector_at(row: ir.Value, v: int) -> ir.Value:
                at = builder.gep(row, [ir.Constant(_I64, v * lanes)])
                return builder.bitcast(at, vty.as_pointer())

            pa, pb, pc = pointer(0, 1), pointer(3, 4), pointer(6, 7)
            lda_, ldb_, ldc_, kk = integer(2), integer(5), integer(8), integer(9)
            fma = builder.module.declare_intrinsic(
                f"llvm.fma.v{lanes}f32", (), ir.FunctionType(vty, [vty, vty, vty])
            )
            if prefetch:
                b_data = arg.data(3)
                b_lines, line_ptr = integer(10), b_data.type
                prefetch_fn = builder.module.declare_intrinsic(
                    "llvm.prefetch",
                    [line_ptr],
                    ir.FunctionType(ir.VoidType(), [line_ptr, _I32, _I32, _I32]),
                )
            zero = ir.Constant(vty, None)
            splat_mask = ir.Constant(ir.VectorType(_I32, lanes), None)
            entry, loop, done = intrinsics.open_loop(
                builder, "tile", builder.icmp_signed(">", kk, ir.Constant(_I64, 0))
            )
            p = builder.phi(_I64)
            acc = [[builder.phi(vty) for _ in range(vectors)] for _ in range(rows)]
            brow = builder.gep(pb, [builder.mul(p, ldb_)])
            bv = [builder.load(vector_at(brow, v), align=4) for v in range(vectors)]
            if prefetch:  # (address, read, locality 2: L2 and out (prefetcht1), data)
                line = builder.add(b_lines, builder.mul(p, ir.Constant(_I64, 16)))
                at = builder.gep(b_data, [line])
                builder.call(prefetch_fn, [at, _I32(0), _I32(2), _I32(1)])
            new = []
            for r in range(rows):
                at = builder.add(builder.mul(ir.Constant(_I64, r), lda_), p)
                scalar = builder.load(builder.gep(pa, [at]))
                one = builder.insert_element(ir.Constant(vty, ir.Undefined), scalar, _I32(0))
                splat = builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), splat_mask)
                new.append([builder.call(fma, [splat, bv[v], acc[r][v]]) for v in range(vectors)])
            final = intrinsics.close_accumulator_loop(
                builder, p, kk, acc, new, zero, (entry, loop, done)
            )
            for r in range(rows):
                crow = builder.gep(pc, [builder.mul(ir.Constant(_I64, r), ldc_)])
                for v in range(vectors):
                    builder.store(final[r * vectors + v], vector_at(crow, v), align=4)
            return context.get_dummy_value()

        return sig, codegen

    def tile_prefetch(typingctx, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, k, pf_off):
        return typed(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, k, pf_off)

    def tile_plain(typingctx, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, k):
        return typed(a, a_off, lda, b, b_off, ldb, c, c_off, ldc, k)

    tile = tile_prefetch if prefetch else tile_plain
    tile.__name__ = f"tile_{rows}x{vectors}x{lanes}{'_prefetch' if prefetch else ''}"
    return intrinsic(tile)


# Tiles of every row count up to MR (the last rows of C) for full strips (NV
# vectors), and for the narrower strips left at C's right edge.
_T1, _T2, _T3, _T4, _T5, _T6 = (_tile(r, NV, W) for r in range(1, 7))
_N1, _N2, _N3, _N4, _N5, _N6 = (_tile(r, 1, W) for r in range(1, 7))
# Only the 6-row tile prefetches: every tile variant is expanded into each kernel that
# calls gemm_packed, and cold-compiling one such kernel took 2.1-2.4 s of CPU before the
# prefetching tiles, 3.0-3.2 with one per row count, 2.7 with this one (and 3.2-3.4 with
# K blocks' accumulating tiles as well, c787e77: not worth ~1.5% of ViT or BERT's time).
_P6 = _tile(6, NV, W, prefetch=True)
assert MR == 6  # the dispatch below names the tiles of 1..6 rows
#: Tiles of a packed strip that prefetch the next strip, one 64-byte line of it a K
#: step each: a strip is ``k * STRIP * 4 / 64`` lines, ``k`` lines a tile.
PREFETCH_TILES = max(1, STRIP // 16)


@sealed_njit
def _strip(m, n0, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """C's columns ``n0 : n0 + NV * W``, every row (``_narrow_strip`` is this body over
    the one-vector tiles ``_N1`` .. ``_N6``)."""
    i = 0
    while i + 6 <= m:
        _T6(a, a_off + i * lda, lda, b, b_off + n0, ldb, c, c_off + i * ldc + n0, ldc, k)
        i += 6
    rest = m - i
    ao, co = a_off + i * lda, c_off + i * ldc + n0
    if rest == 5:
        _T5(a, ao, lda, b, b_off + n0, ldb, c, co, ldc, k)
    elif rest == 4:
        _T4(a, ao, lda, b, b_off + n0, ldb, c, co, ldc, k)
    elif rest == 3:
        _T3(a, ao, lda, b, b_off + n0, ldb, c, co, ldc, k)
    elif rest == 2:
        _T2(a, ao, lda, b, b_off + n0, ldb, c, co, ldc, k)
    elif rest == 1:
        _T1(a, ao, lda, b, b_off + n0, ldb, c, co, ldc, k)


_NARROW = "C's columns ``n0 : n0 + W``, every row (``_strip`` over the one-vector tiles)."
_narrow_strip = intrinsics.retiled(_strip, "_narrow_strip", _NARROW, _T1=_N1, _T2=_N2,
                                   _T3=_N3, _T4=_N4, _T5=_N5, _T6=_N6)  # fmt: skip


@sealed_njit
def gemm_nn(m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """C[c_off:] = A[a_off:] @ B[b_off:]: row-major float32, ``m x n`` from ``m x k`` and
    ``k x n`` with leading dimensions ``lda``, ``ldb``, ``ldc`` (the ``sgemm`` intrinsics'
    contract without the transpose flags). Strips of C's columns, each over all rows:
    a strip's columns of B stay in cache while its tiles go down A."""
    full, lanes = NV * W, W
    n0 = 0
    while n0 + full <= n:
        _strip(m, n0, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)
        n0 += full
    while n0 + lanes <= n:
        _narrow_strip(m, n0, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)
        n0 += lanes
    for i in range(m):  # the columns right of the last whole vector
        for j in range(n0, n):
            s = numba.float32(0.0)
            for p in range(k):
                s += a[a_off + i * lda + p] * b[b_off + p * ldb + j]
            c[c_off + i * ldc + j] = s


@sealed_njit
def gemm_nn_staged(m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, buf):
    """``gemm_nn``, each strip of B's columns first copied into ``buf`` (``k x STRIP``
    floats, contiguous; ``buf`` holds at least ``k * STRIP``), for a B whose rows are a
    multiple of 2 KiB apart (``host.staging_pays``: a channel plane of 32x32 pixels or more
    read in place by a 1x1 conv). Those rows fall in one or two of L1's 64 sets, and each tile's
    K loop evicts the strip's own lines; a copy's rows are 64 bytes apart. The sums are
    ``gemm_nn``'s, in its order: the same results. The columns right of the last whole strip
    go to ``gemm_nn`` (a narrow strip reads one vector a row)."""
    full = NV * W
    n0 = 0
    while n0 + full <= n:
        for p in range(k):
            src, dst = b_off + p * ldb + n0, p * full
            for j in range(full):
                buf[dst + j] = b[src + j]
        _strip(m, 0, k, a, a_off, lda, buf, 0, full, c, c_off + n0, ldc)
        n0 += full
    if n0 < n:
        gemm_nn(m, n - n0, k, a, a_off, lda, b, b_off + n0, ldb, c, c_off + n0, ldc)


@sealed_njit
def _packed_strip(m, k, a, a_off, lda, b, b_off, c, c_off, ldc, pf_off):
    """C's ``STRIP`` columns from one packed strip of B at ``b_off``, every row; the first
    ``PREFETCH_TILES`` tiles prefetch ``k`` lines each of the strip at ``pf_off``."""
    i = 0
    while i + 6 <= m:
        t = i // 6
        ao, co = a_off + i * lda, c_off + i * ldc
        if t < PREFETCH_TILES:
            _P6(a, ao, lda, b, b_off, STRIP, c, co, ldc, k, pf_off + t * k * 16)
        else:
            _T6(a, ao, lda, b, b_off, STRIP, c, co, ldc, k)
        i += 6
    if i < m:  # the last rows: tiles that do not prefetch (few rows: little to hide)
        _strip(m - i, 0, k, a, a_off + i * lda, lda, b, b_off, STRIP, c, c_off + i * ldc, ldc)


@sealed_njit
def _narrow_window(m, cols, k, a, a_off, lda, b, b_off, c, c_off, ldc):
    """C's ``cols`` (< ``STRIP``) columns at ``c_off`` from ``cols`` columns of a packed
    strip at ``b_off`` (the last ``cols`` of the window strip), every row, in the order
    of ``p``: a C of fewer columns than a strip, where the window's tile would write
    left of C's first column (a thread's last column tile, or a whole narrow C)."""
    for i in range(m):
        row = c_off + i * ldc
        for j in range(cols):
            c[row + j] = numba.float32(0.0)
        for p in range(k):
            x = a[a_off + i * lda + p]
            bs = b_off + p * STRIP
            for j in range(cols):
                c[row + j] += x * b[bs + j]


@sealed_njit
def gemm_packed(m, n, k, a, a_off, lda, bp, bp_off, c, c_off, ldc):
    """C[c_off:] = A[a_off:] @ B for a B packed by ``pack_strips`` at ``bp[bp_off:]``
    (``n`` columns; past the whole strips, C's last ``STRIP`` columns from ``bp``'s window
    strip, ``pack_strips``): the tiles of each strip read its ``k x STRIP``
    block of B contiguously, so B's rows do not alias in the caches as a wide B's do
    in place (rows 8 KiB apart share a few L1/L2 sets). While a strip's first tiles
    run they prefetch the next strip into L2: a B larger than L2 (a layer's weight
    inside a model) then streams from memory under the arithmetic instead of stalling
    each strip's first tile (65x768 @ 768x3072, weights rotated through L3, 1 thread:
    thread-time median 2.90 -> 2.38 ms with all 65 rows in one block;
    benchmarks/results/cpu-notes.md)."""
    strips = n // STRIP
    for s in range(strips):
        off = bp_off + s * k * STRIP
        ahead = off + k * STRIP if s + 1 < strips else off  # the last: its own lines, cached
        _packed_strip(m, k, a, a_off, lda, bp, off, c, c_off + s * STRIP, ldc, ahead)
    if n > strips * STRIP:  # the window strip, B's last STRIP columns: C's last STRIP
        off = bp_off + strips * k * STRIP
        if n >= STRIP:  # (tiles of whole strips: columns left of it written twice, alike)
            _strip(m, 0, k, a, a_off, lda, bp, off, STRIP, c, c_off + n - STRIP, ldc)
        else:
            _narrow_window(m, n, k, a, a_off, lda, bp, off + STRIP - n, c, c_off, ldc)


def pack_strips(b: np.ndarray, transposed: bool = False) -> np.ndarray:
    """A 2-D float32 B (``k x n``, or ``n x k`` given ``transposed``) as ``gemm_packed``
    reads it: its column strips of ``STRIP`` one after the other, each ``k x STRIP``
    row-major; flat, ``k * STRIP * ceil(n / STRIP)`` floats. Past the whole strips, the
    last strip is a window on B's last ``STRIP`` columns, ``n - STRIP`` to ``n`` (zeros
    left of column 0): ``gemm_packed`` computes C's last ``STRIP`` columns from it with
    the tiles of whole strips."""
    matrix = b.T if transposed else b
    k, n = matrix.shape
    if n % STRIP:
        whole = n // STRIP * STRIP
        window = np.zeros((k, STRIP), dtype=np.float32)
        window[:, max(0, STRIP - n) :] = matrix[:, max(0, n - STRIP) :]
        matrix, n = np.concatenate([matrix[:, :whole], window], axis=1), whole + STRIP
    strips = matrix.reshape(k, n // STRIP, STRIP).transpose(1, 0, 2)
    return np.ascontiguousarray(strips, dtype=np.float32).reshape(-1)


__all__ = [
    "MR",
    "NV",
    "STRIP",
    "W",
    "fits",
    "gemm_nn",
    "gemm_nn_staged",
    "gemm_packed",
    "pack_strips",
    "packs",
    "target_features",
    "vector_lanes",
]
