"""Winograd F(2x2, 3x3) filter transform for the cpu conv kernels, compiled once.

A conv group computed by Winograd (``fusec.targets.cpu.conv``) needs
``U = G g G^T`` of every 3x3 filter ``g`` at each launch (the weights are
operands). Written with numpy's batched ``@`` on float64 it took 0.48 ms for
64x64 filters on one core, a third of the whole N1 C64 56x56 convolution
(single-threaded CPU time 2.3 ms); this loop takes 0.03 ms, computes in float64
too and rounds once (bit-identical to numpy's float64 ``G @ g @ G.T`` rounded).
"""

from __future__ import annotations

import numba
import numpy as np
from numpy import uint64 as U

from fusec.runtime.numba_cache import sealed_njit


@sealed_njit
def redo_nonfinite_tiles(y, y_at, pitch, tiles, x, x_at, xw, plane, cg, w, w_at):
    """``redo_nonfinite_tiles_m`` for F(2x2, 3x3): 2x2 output tiles."""
    redo_nonfinite_tiles_m(y, y_at, pitch, tiles, x, x_at, xw, plane, cg, w, w_at, 2)


@sealed_njit
def redo_nonfinite_tiles_m(y, y_at, pitch, tiles, x, x_at, xw, plane, cg, w, w_at, m):
    """Recompute directly the m x m output tiles of one tile row that are not finite.

    ``y[y_at:]`` holds the row's ``m`` output rows (``pitch`` apart, ``tiles`` tiles of
    ``m`` columns), just written by the output transform; ``x[x_at:]`` the block's padded
    input from the tile row's first input row (rows ``xw`` apart, input channels
    ``plane`` apart, zeros in the padding); ``w[w_at:]`` the output channel's ``cg x 3
    x 3`` filters as they are. A tile with a NaN or an Inf gets each of its 4 pixels
    as the reference computes it: the sum over (c, r, s) of w * x, zero padding
    included (0 * Inf is NaN), in float64, rounded once. The kernel calls this only
    for an output channel of a block whose values are not all finite."""
    for t in range(tiles):
        if _tile_finite(y, y_at + m * t, pitch, m):
            continue
        for i in range(m):
            for j in range(m):
                at = x_at + i * xw + m * t + j
                total = 0.0
                for c in range(cg):
                    for r in range(3):
                        for s in range(3):
                            tap = np.float64(w[w_at + 9 * c + 3 * r + s])
                            total += tap * np.float64(x[at + c * plane + r * xw + s])
                y[y_at + i * pitch + m * t + j] = np.float32(total)


@numba.njit(inline="always")
def _tile_finite(y, at, pitch, m):
    """Whether the tile's m x m outputs at ``y[at]`` (rows ``pitch`` apart) are finite."""
    for i in range(m):
        for j in range(m):
            if not np.isfinite(y[at + i * pitch + j]):
                return False
    return True


@sealed_njit
def winograd_filters(w, groups, kg, cg):
    """``G g G^T`` (``conv.transforms.WINOGRAD_G``) of each filter of ``w`` (flat ``groups x kg x cg
    x 3 x 3``), as float32 ``[g, a, b, k, c]``: for each group and element (a, b) of the
    4x4 transform, the ``kg x cg`` matrix the block's sgemms multiply by.

    The 16 elements of a filter go to 16 planes ``kg * cg`` floats apart, which at
    64x64 all map to one L1 set: filters are taken ``CHUNK`` input channels at a time
    into ``tile`` and each plane written a cache line at a time (0.13 -> 0.03 ms)."""
    out = np.empty(groups * 16 * kg * cg, dtype=np.float32)
    plane = U(kg * cg)
    tile = np.empty((16, CHUNK), dtype=np.float32)
    for gk in range(groups * kg):
        at = U(gk // kg) * U(16) * plane + U(gk % kg * cg)
        for c0 in range(0, cg, CHUNK):
            n = min(CHUNK, cg - c0)
            for c in range(n):  # filter (g, k, c0 + c); unsigned indices: no wraparound
                x = U(9 * (gk * cg + c0 + c))
                f0, f1, f2 = np.float64(w[x]), np.float64(w[x + U(1)]), np.float64(w[x + U(2)])
                f3, f4, f5 = (
                    np.float64(w[x + U(3)]),
                    np.float64(w[x + U(4)]),
                    np.float64(w[x + U(5)]),
                )
                f6, f7, f8 = (
                    np.float64(w[x + U(6)]),
                    np.float64(w[x + U(7)]),
                    np.float64(w[x + U(8)]),
                )
                s0, s1, s2 = 0.5 * (f0 + f6), 0.5 * (f1 + f7), 0.5 * (f2 + f8)
                d0, d1, d2 = 0.5 * f3, 0.5 * f4, 0.5 * f5
                # the rows of t = G g, each times G^T
                _filter_row(tile, 0, c, f0, f1, f2)
                _filter_row(tile, 4, c, s0 + d0, s1 + d1, s2 + d2)
                _filter_row(tile, 8, c, s0 - d0, s1 - d1, s2 - d2)
                _filter_row(tile, 12, c, f6, f7, f8)
            for e in range(16):
                dst = out[at + U(e) * plane + U(c0) :]
                for c in range(n):
                    dst[c] = tile[e, c]
    return out


#: G of F(4x4, 3x3) (Lavin and Gray; points 0, +-1, +-2, infinity): ``fusec.targets.cpu.
#: conv`` generates its B^T and A^T (F(2x2, 3x3)'s G is ``conv.transforms.WINOGRAD_G``).
WINOGRAD4_G = (
    (1 / 4, 0.0, 0.0),
    (-1 / 6, -1 / 6, -1 / 6),
    (-1 / 6, 1 / 6, -1 / 6),
    (1 / 24, 1 / 12, 1 / 6),
    (1 / 24, -1 / 12, 1 / 6),
    (0.0, 0.0, 1.0),
)
#: Filters (input channels) transformed per pass (one 64-byte line of each plane).
CHUNK = 16


@numba.njit(inline="always")
def _filter_row(tile, e, c, t0, t1, t2):
    """Row (t0, t1, t2) of G g times G^T: elements ``e .. e + 3`` of filter ``c``."""
    tile[e, c] = np.float32(t0)
    tile[e + 1, c] = np.float32(0.5 * (t0 + t1 + t2))
    tile[e + 2, c] = np.float32(0.5 * (t0 - t1 + t2))
    tile[e + 3, c] = np.float32(t2)


def prepare_winograd(layout: str, weights: np.ndarray) -> np.ndarray:
    """A constant conv weight (K x C/G x 3 x 3) as ``winograd_filters`` lays it out, then
    as it is (the kernel's ``wraw``: tiles with non-finite values are recomputed from it),
    for the layout ``"winograd:<groups>"`` a kernel names (``KernelSource.prepared_inputs``);
    ``"winograd:<groups>:4"``: the same for F(4x4, 3x3) (36 matrices ``[g, a, b, k, c]``
    of ``G g G^T`` with ``G`` = ``WINOGRAD4_G``, in float64, rounded once)."""
    _, groups_text, *tile = layout.split(":")
    groups = int(groups_text)
    k, cg, r, s = weights.shape
    if (r, s) != (3, 3) or k % groups or tile not in ([], ["4"]):
        raise ValueError(f"{layout}: not a 3x3 weight of {groups} groups: {weights.shape}")
    flat = np.ascontiguousarray(weights, dtype=np.float32).reshape(-1)
    if not tile:
        transformed = winograd_filters(flat, groups, k // groups, cg)
    else:  # once per program: numpy's float64 matrix products are quick enough
        g = np.array(WINOGRAD4_G)
        filters = flat.astype(np.float64).reshape(groups, k // groups, cg, 3, 3)
        u = g @ filters @ g.T  # groups, kg, cg, 6, 6
        transformed = u.transpose(0, 3, 4, 1, 2).astype(np.float32).reshape(-1)
    # the filters as they are after their transform: tiles redone directly read them
    return np.concatenate([transformed, flat])
