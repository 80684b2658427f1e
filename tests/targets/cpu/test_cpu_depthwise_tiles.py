"""The register tiles of depthwise tap sums (``fusec.targets.cpu.depthwise_tiles``),
issue #30: ``taps_plane`` (one channel plane), ``taps_row`` and every tile shape of both
vector widths (16 lanes: AVX-512; 8: AVX2, built here whatever the host, LLVM splits or
joins the vectors) against a float64 sum of the same terms, outputs poisoned; one tap is
a plain product (bit for bit). The planar form in a whole conv: test_cpu_depthwise_lanes."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from fusec.targets.cpu import depthwise_tiles
from fusec.targets.cpu.depthwise_tiles import (
    CHANNELS,
    PIXELS,
    ROWS,
    taps_plane,
    taps_row,
    taps_rows,
)
from fusec.targets.cpu.host import W


def _reference(x, x_off, pstride, s, rowstep, colstep, taps, wt, npix, cb):
    out = np.zeros((npix, cb))
    for p in range(npix):
        for k in range(taps):
            at = x_off + (k // s) * rowstep + (k % s) * colstep + p * pstride
            out[p] += wt[k * cb : (k + 1) * cb].astype(np.float64) * x[at : at + cb]
    return out.ravel()


def _inputs(rng, npix, r, s, cb, pstride_px):
    wp = (npix - 1) * pstride_px + s
    x = rng.standard_normal((r * wp + 3) * cb).astype(np.float32)
    wt = rng.standard_normal(r * s * cb).astype(np.float32)
    return x, wt, wp


# stride 1 with 3, 5 or 7 taps a row: the shared-column tiles (AVX-512), a last pixel
# (PIXELS + 1) by the one-pixel tile
@pytest.mark.parametrize("npix", [1, 4, PIXELS - 1, PIXELS, PIXELS + 1, 2 * PIXELS + 3])
@pytest.mark.parametrize("r, s, stride", [(3, 3, 1), (7, 7, 1), (5, 5, 1), (5, 5, 2), (1, 3, 1)])
def test_taps_row_against_float64(npix, r, s, stride):
    rng = np.random.default_rng(npix * 100 + r * 10 + s)
    cb = CHANNELS
    x, wt, wp = _inputs(rng, npix, r, s, cb, stride)
    ot = np.full(npix * cb + 5, np.nan, np.float32)  # poisoned; the tail must stay so
    args = (x, 2 * cb, stride * cb, s, wp * cb, cb, r * s, wt)
    taps_row(*args, ot, 3, npix)
    want = _reference(*args, npix, cb)
    got = ot[3 : 3 + npix * cb]
    assert np.isfinite(got).all() and np.isnan(ot[:3]).all() and np.isnan(ot[3 + npix * cb :]).all()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6


@pytest.mark.parametrize("npix, r, s, stride", [(4, 5, 5, 1), (PIXELS + 1, 3, 3, 1), (7, 3, 3, 2)])
def test_taps_rows_is_taps_row_a_row_at_a_time(npix, r, s, stride):
    """A plane's rows in one call (``taps_rows``, what the lanes kernels call) give what
    ``taps_row`` gives row by row, bit for bit: shared-column tiles (stride 1) and tap tiles
    (stride 2); the rows' inputs ``stride`` padded rows apart."""
    rows, cb = 3, CHANNELS
    rng = np.random.default_rng(npix + r)
    wp = (npix - 1) * stride + s
    x = rng.standard_normal(((rows - 1) * stride + r) * wp * cb + cb).astype(np.float32)
    wt = rng.standard_normal(r * s * cb).astype(np.float32)
    a = np.full(rows * npix * cb + 5, np.nan, np.float32)
    b = a.copy()
    args = (x, cb, stride * cb, s, wp * cb, cb, r * s, wt)
    taps_rows(*args, a, 2, npix, rows, stride * wp * cb, npix * cb)
    for row in range(rows):
        at = (x, cb + row * stride * wp * cb, *args[2:])
        taps_row(*at, b, 2 + row * npix * cb, npix)
    assert np.isfinite(a[2 : 2 + rows * npix * cb]).all()
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("lanes, vectors", [(8, 4), (16, 2)])
@pytest.mark.parametrize("pixels", [1, 3])
@pytest.mark.parametrize("taps", [1, 9])
def test_tiles_of_both_widths(lanes, vectors, pixels, taps):
    tile = depthwise_tiles._taps_tile(pixels, vectors, lanes)

    @numba.njit
    def call(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off):
        tile(x, x_off, pstride, s, rowstep, colstep, taps, wt, ot, o_off)

    cb = lanes * vectors
    rng = np.random.default_rng(lanes + pixels + taps)
    s = 3 if taps == 9 else 1
    r = taps // s
    x, wt, wp = _inputs(rng, pixels, r, s, cb, 1)
    ot = np.full(pixels * cb, np.nan, np.float32)
    args = (x, 0, cb, s, wp * cb, cb, taps, wt)
    call(*args, ot, 0)
    want = _reference(*args, pixels, cb)
    if taps == 1:  # one product, rounded once: numpy's float32 product
        np.testing.assert_array_equal(ot, (x[: pixels * cb] * np.tile(wt, pixels)))
    assert np.isfinite(ot).all()
    assert np.linalg.norm(ot - want) / np.linalg.norm(want) < 1e-6


@pytest.mark.parametrize("lanes, vectors", [(8, 4), (16, 2)])
@pytest.mark.parametrize("pixels", [2, 4, 8])
@pytest.mark.parametrize("r, width", [(3, 3), (1, 5), (7, 7)])
def test_shared_column_tiles_sum_like_the_tap_tiles(lanes, vectors, pixels, r, width):
    """A shared-column tile (each kernel row's input vectors loaded once) gives the tap
    tile's sums bit for bit: the same products and fmas in the same order. Both are
    cases of one switch tile (as ``taps_rows`` calls them); a case it lacks writes
    nothing."""
    tiles = depthwise_tiles._switch_tile(
        "shared_or_taps",
        {
            1: (pixels, depthwise_tiles._shared_taps_sums(pixels, width, vectors, lanes)),
            2: (pixels, depthwise_tiles._taps_sums(pixels, vectors, lanes)),
        },
        vectors,
        lanes,
    )

    @numba.njit
    def call(x, x_off, pstride, s, rowstep, colstep, taps, wt, a, b, c):
        tiles(x, x_off, pstride, s, rowstep, colstep, taps, wt, a, 0, 1)
        tiles(x, x_off, pstride, s, rowstep, colstep, taps, wt, b, 0, 2)
        tiles(x, x_off, pstride, s, rowstep, colstep, taps, wt, c, 0, 0)
        tiles(x, x_off, pstride, s, rowstep, colstep, taps, wt, c, 0, 3)

    cb = lanes * vectors
    rng = np.random.default_rng(pixels * 10 + width)
    x, wt, wp = _inputs(rng, pixels, r, width, cb, 1)
    a = np.full(pixels * cb, np.nan, np.float32)
    b = np.full(pixels * cb, np.nan, np.float32)
    c = np.full(pixels * cb, np.nan, np.float32)
    args = (x, cb, cb, width, wp * cb, cb, r * width, wt)
    call(*args, a, b, c)
    assert np.isnan(c).all()  # cases 0 and 3: no tile
    assert np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)
    want = _reference(*args, pixels, cb)
    assert np.linalg.norm(a - want) / np.linalg.norm(want) < 1e-6


def _plane_reference(x, x_off, rstride, s, rowstep, colstep, taps, w, w_off, oh, ow):
    out = np.zeros((oh, ow))
    for p in range(oh):
        for j in range(ow):
            for k in range(taps):
                at = x_off + p * rstride + (k // s) * rowstep + (k % s) * colstep + j
                out[p, j] += np.float64(w[w_off + k]) * x[at]
    return out.ravel()


@pytest.mark.parametrize(
    "oh, ow, r, s, dil, stride_h",
    [
        (11, W + 5, 5, 5, 1, 1),
        (ROWS, W, 7, 7, 1, 1),
        (3, 2 * W, 3, 5, 2, 2),
        (1, W + 1, 1, 2, 1, 1),
        (4, W - 3, 3, 3, 1, 1),  # rows shorter than a vector: scalar sums
        # full tiles that load each input row once (consecutive input rows: rstride ==
        # rowstep): 3x3, and 3x5 with dilation 2 at stride 2; a stride-2 3x3 does not
        (2 * ROWS + 3, 2 * W, 3, 3, 1, 1),
        (ROWS + 1, W + 2, 3, 5, 2, 2),
        (ROWS, W, 3, 3, 1, 2),
    ],
)
def test_taps_plane_against_float64(oh, ow, r, s, dil, stride_h):
    """Whole vectors in tiles of ROWS rows and the rest, ragged columns by one more
    vector ending at the row's end (rows shorter than a vector as scalars); the plane
    between its poisoned neighbours is all written, nothing else."""
    rng = np.random.default_rng(oh * ow + r)
    wq = ow + (s - 1) * dil
    hp = (oh - 1) * stride_h + (r - 1) * dil + 1
    x = rng.standard_normal(hp * wq + 7).astype(np.float32)
    w = rng.standard_normal(3 + r * s).astype(np.float32)
    out = np.full(oh * ow + 9, np.nan, np.float32)
    args = (x, 2, stride_h * wq, s, dil * wq, dil, r * s, w, 3)
    taps_plane(*args, out, 4, oh, ow)
    got, want = out[4 : 4 + oh * ow], _plane_reference(*args, oh, ow)
    assert np.isnan(out[:4]).all() and np.isnan(out[4 + oh * ow :]).all()
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 32, 45, 64])
@pytest.mark.parametrize("x_off", [0, 3])
def test_deinterleave_splits_column_pairs(n: int, x_off: int) -> None:
    """``deinterleave``: the even and odd floats of ``2 n`` at ``x_off`` at two offsets of
    ``dst``, bit for bit (whole vectors, the last ``n % W`` by an overlapping one, or one at a
    time below ``W``), nothing else written."""
    x = np.random.default_rng(n).standard_normal(200).astype(np.float32)
    got = np.full(300, -7.0, np.float32)
    depthwise_tiles.deinterleave(x, x_off, got, 5, 150, n)
    want = np.full(300, -7.0, np.float32)
    want[5 : 5 + n] = x[x_off : x_off + 2 * n : 2]
    want[150 : 150 + n] = x[x_off + 1 : x_off + 2 * n : 2]
    assert np.array_equal(got, want)
