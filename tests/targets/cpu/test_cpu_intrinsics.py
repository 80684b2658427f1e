"""``intrinsics.retiled``: a Numba row dispatch compiled again over other tiles (gemm_int8's
``_vector`` and microkernel's ``_narrow_strip`` are their ``_strip`` retiled): the copy
calls the tiles it was given, the original keeps its own, each has its own name (its disk
cache's file), and a tile name the body does not use is refused."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from fusec.runtime.numba_cache import sealed_njit
from fusec.targets.cpu import gemm_int8, intrinsics, microkernel


@numba.njit
def _one(out, i):
    out[i] = 1.0


@numba.njit
def _two(out, i):
    out[i] = 2.0


@sealed_njit
def _fill(out):
    for i in range(out.size):
        _TILE(out, i)


_TILE = _one


def test_retiled_calls_its_own_tiles_and_leaves_the_original_alone():
    twos = intrinsics.retiled(_fill, "_fill_twos", "Fills with twos.", _TILE=_two)
    a, b = np.full(5, np.nan, np.float32), np.full(5, np.nan, np.float32)
    twos(a)
    _fill(b)
    np.testing.assert_array_equal(a, 2.0)
    np.testing.assert_array_equal(b, 1.0)
    assert twos.py_func.__qualname__ == "_fill_twos" and twos.__doc__ == "Fills with twos."


def test_retiled_refuses_a_name_the_body_does_not_use():
    with pytest.raises(ValueError, match=r"_fill does not name \['_T7'\]"):
        intrinsics.retiled(_fill, "_bad", "", _T7=_two)


@pytest.mark.parametrize(
    "strip, copy",
    [(gemm_int8._strip, gemm_int8._vector), (microkernel._strip, microkernel._narrow_strip)],
)
def test_the_narrow_dispatches_are_their_strips_over_the_one_vector_tiles(strip, copy):
    assert copy.py_func.__code__ is strip.py_func.__code__
    module = strip.py_func.__globals__
    for rows in range(1, 7):
        assert copy.py_func.__globals__[f"_T{rows}"] is module[f"_N{rows}"]
        assert module[f"_T{rows}"] is not module[f"_N{rows}"]
