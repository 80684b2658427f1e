"""``row_copy.copy_floats``: one memcpy of a run of floats between two arrays, the
padded-row copies of the conv kernels (depthwise planes, taps, Winograd, im2col)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from fusec.targets.cpu.row_copy import copy_floats


@numba.njit
def _copy(dst, d_off, src, s_off, n):
    copy_floats(dst, d_off, src, s_off, n)


@pytest.mark.parametrize(
    "d_off, s_off, n", [(3, 5, 17), (0, 0, 64), (7, 1, 1), (2, 9, 0), (4, 2, -3)]
)
def test_copy_floats_copies_the_run_and_nothing_else(d_off, s_off, n):
    rng = np.random.default_rng(n + 10)
    src = rng.standard_normal(80).astype(np.float32)
    dst = np.full(80, np.nan, np.float32)  # poisoned: every float outside the run stays NaN
    _copy(dst, d_off, src, s_off, n)
    want = np.full(80, np.nan, np.float32)
    if n > 0:
        want[d_off : d_off + n] = src[s_off : s_off + n]
    np.testing.assert_array_equal(dst, want)


def test_copy_floats_refuses_other_arrays():
    with pytest.raises(numba.core.errors.TypingError, match="copy_floats: src must be a float32"):
        _copy(np.zeros(4, np.float32), 0, np.zeros(4, np.float64), 0, 2)
