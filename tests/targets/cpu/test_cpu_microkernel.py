"""``gemm_nn``, the cpu target's register-tiled GEMM (``fusec.targets.cpu.microkernel``).

Every case writes into a NaN-poisoned C larger than the result, on fresh random
inputs, and checks the result against float64 numpy and the poison around it.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

from fusec.targets.cpu import microkernel
from fusec.targets.cpu.microkernel import STRIP, gemm_nn, gemm_nn_staged

W, NV = microkernel.W, microkernel.NV

SHAPES = [
    (256, 512, 64),  # attention's q @ key^T block
    (256, 64, 512),  # and p @ v
    (6 * 3 + 5, NV * W * 2 + W + 3, 17),  # row remainder 5, a narrow strip, scalar columns
    (4, NV * W, 1),
    (1, 1, 1),  # no vector at all
    (7, W - 1, 9),
    (13, 2 * W, 0),  # no terms: zeros
]


def _relative(out: np.ndarray, ref: np.ndarray) -> float:
    scale = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / scale) if scale else float(np.abs(out).max())


@pytest.mark.parametrize("shape", SHAPES)
def test_gemm_nn_against_numpy(shape):
    m, n, k = shape
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    lda, ldb, ldc = k + 3, n + 5, n + 2  # leading dimensions wider than the rows
    a_off, b_off, c_off = 7, 2, 11
    a = rng.standard_normal(a_off + m * lda, dtype=np.float32)
    b = rng.standard_normal(b_off + max(k, 1) * ldb, dtype=np.float32)
    a.flags.writeable = b.flags.writeable = False  # read-only operands (initialisers)
    c = np.full(c_off + m * ldc + 4, np.nan, dtype=np.float32)
    gemm_nn(m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)
    a2 = a[a_off:].reshape(m, lda)[:, :k].astype(np.float64)
    b2 = b[b_off : b_off + k * ldb].reshape(k, ldb)[:, :n].astype(np.float64)
    out = c[c_off : c_off + m * ldc].reshape(m, ldc)
    assert not np.isnan(out[:, :n]).any()
    assert _relative(out[:, :n].astype(np.float64), a2 @ b2) < 1e-5
    assert np.isnan(out[:, n:]).all() and np.isnan(c[:c_off]).all()  # nothing else written
    assert np.isnan(c[c_off + m * ldc :]).all()


@pytest.mark.parametrize(
    "m, n, k, ldb",
    [
        (64, 1024, 16, 4096),  # a 1x1 conv over 64x64 planes: B's rows 16 KiB apart
        (37, 3 * STRIP + 5, 9, 1024),  # ragged rows, a narrow strip and scalar columns
        (6, STRIP, 1, 256),
        (13, 2 * STRIP, 40, 2 * STRIP + 3),  # a stride that does not alias: the same too
    ],
)
def test_gemm_nn_staged_gives_gemm_nn_results_bit_for_bit(m, n, k, ldb):
    """``gemm_nn_staged`` copies each strip of B into its buffer and runs ``gemm_nn``'s
    tiles on the copy: the same sums in the same order, so the same bits, into a C
    poisoned with NaN first (a column it did not write fails), its buffer poisoned too."""
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.standard_normal(m * k, dtype=np.float32)
    b = rng.standard_normal(5 + k * ldb, dtype=np.float32)
    want = np.full(3 + m * n, np.nan, np.float32)
    got = np.full(3 + m * n, np.nan, np.float32)
    buf = np.full(k * STRIP, np.nan, np.float32)
    gemm_nn(m, n, k, a, 0, k, b, 5, ldb, want, 3, n)
    gemm_nn_staged(m, n, k, a, 0, k, b, 5, ldb, got, 3, n, buf)
    assert not np.isnan(got[3:]).any() and np.isnan(got[:3]).all()
    assert np.array_equal(got, want, equal_nan=True)
    b2 = b[5:].reshape(k, ldb)[:, :n].astype(np.float64)
    ref = a.reshape(m, k).astype(np.float64) @ b2
    assert _relative(got[3:].reshape(m, n).astype(np.float64), ref) < 1e-5


def _tile_runner(rows: int, vectors: int, lanes: int):
    tile = microkernel._tile(rows, vectors, lanes)

    @numba.njit
    def run(a, b, c, k, n):
        tile(a, 0, k, b, 0, n, c, 0, n, k)

    return run


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize(("rows", "vectors"), [(1, 1), (6, 2), (5, 4)])
def test_tiles_of_either_width(lanes, rows, vectors):
    """Both vector widths compile and compute on any target (LLVM legalises the vectors):
    the one this machine does not use is what another machine runs."""
    n, k = vectors * lanes, 37
    rng = np.random.default_rng(lanes + rows)
    a = rng.standard_normal(rows * k, dtype=np.float32)
    b = rng.standard_normal(k * n, dtype=np.float32)
    c = np.full(rows * n, np.nan, dtype=np.float32)
    _tile_runner(rows, vectors, lanes)(a, b, c, k, n)
    ref = a.reshape(rows, k).astype(np.float64) @ b.reshape(k, n)
    assert _relative(c.reshape(rows, n).astype(np.float64), ref) < 1e-5


def test_vector_width_follows_the_target_features():
    assert microkernel.vector_lanes("+sse2,+avx2,+avx512f,+fma") == 16
    assert microkernel.vector_lanes("+sse2,+avx2,-avx512f,+fma") == 8
    assert microkernel.vector_lanes("") == 8
    assert microkernel.fits(4 * W) and not microkernel.fits(W + 1) and not microkernel.fits(0)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(
    "m, strips, k, extra",
    [(23, 3, 40, 0), (6, 1, 1, 0), (1, 2, 300, 0), (33, 2, 17, 0), (13, 2, 2500, 0)]
    + [(1, 2, 37, 5), (1, 3, 2048, 40), (4, 1, 19, 1), (7, 2, 33, 17), (2, 1, 0, 9)],
)
def test_gemm_packed_reads_b_as_pack_strips_lays_it_out(transposed, m, strips, k, extra):
    """C's columns from strip 1 on (``bp_off`` = 1 strip of k rows) into a poisoned C
    with a wider leading dimension: the strips are B's columns, each k x STRIP; ``extra``
    columns past the last whole strip: C's last STRIP columns from the window strip, or
    (fewer than STRIP columns of C) its last columns one by one (``k = 0``: the sum over
    no terms, 0)."""
    n = strips * microkernel.STRIP + extra
    rng = np.random.default_rng(m + strips + k + extra)
    b = rng.standard_normal((n, k) if transposed else (k, n), dtype=np.float32)
    b2 = (b.T if transposed else b).astype(np.float64)
    packed = microkernel.pack_strips(b, transposed=transposed)
    whole = -(-n // microkernel.STRIP) * microkernel.STRIP
    assert packed.shape == (k * whole,) and packed.dtype == np.float32
    lda, ldc, c_off = k + 1, n + 3, 5
    a = rng.standard_normal(m * lda, dtype=np.float32)
    c = np.full(c_off + m * ldc, np.nan, dtype=np.float32)
    cols = n - microkernel.STRIP  # all but the first strip
    microkernel.gemm_packed(m, cols, k, a, 0, lda, packed, k * microkernel.STRIP, c, c_off, ldc)
    out = c[c_off:].reshape(m, ldc)
    ref = a.reshape(m, lda)[:, :k].astype(np.float64) @ b2[:, microkernel.STRIP :]
    if cols:
        assert np.isfinite(out[:, :cols]).all()
        if k == 0:
            assert not out[:, :cols].any()
        else:
            assert _relative(out[:, :cols].astype(np.float64), ref) < 1e-5
    assert np.isnan(out[:, cols:]).all() and np.isnan(c[:c_off]).all()


def test_pack_strips_ends_a_ragged_width_with_a_window_on_the_last_columns():
    """Past the whole strips, one strip of B's last STRIP columns; zeros left of column 0
    when B has fewer than STRIP."""
    strip = microkernel.STRIP
    b = np.random.default_rng(0).standard_normal((5, strip + 3)).astype(np.float32)
    packed = microkernel.pack_strips(b.T.copy(), transposed=True)
    assert packed.shape == (5 * 2 * strip,)
    np.testing.assert_array_equal(packed[: 5 * strip].reshape(5, strip), b[:, :strip])
    np.testing.assert_array_equal(packed[5 * strip :].reshape(5, strip), b[:, 3:])
    narrow = microkernel.pack_strips(b[:, :7]).reshape(5, strip)
    assert not narrow[:, : strip - 7].any()
    np.testing.assert_array_equal(narrow[:, strip - 7 :], b[:, :7])
    assert microkernel.packs(2 * microkernel.STRIP) and not microkernel.packs(microkernel.W)
