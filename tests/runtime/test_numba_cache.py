"""fusec's own compiled helpers (``sealed_njit``) compile once per tuple of argument
types, whatever constants the generated kernels call them with
(``fusec.runtime.numba_cache.compile_once_per_types``)."""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types

from fusec.runtime.numba_cache import compile_once_per_types


def _scaled_sum(x, n, scale):
    total = numba.float32(0.0)
    for i in range(n):
        total += x[i] * scale
    return total


def _call_from_two_kernels(helper) -> None:
    """``helper`` called by two njit functions with different integer constants."""

    @numba.njit
    def first(x):
        return helper(x, 4, 2)

    @numba.njit
    def second(x):
        return helper(x, 8, 3)

    x = np.arange(8, dtype=np.float32)
    assert first(x) == np.float32(12.0) and second(x) == np.float32(84.0)


def test_callers_passing_different_constants_share_one_specialization():
    helper = numba.njit(_scaled_sum)
    compile_once_per_types(helper)
    _call_from_two_kernels(helper)
    (signature,) = helper.signatures
    assert signature[1:] == (types.int64, types.int64)


def test_without_it_numba_compiles_one_specialization_per_constant():
    """The behaviour the override exists for: if Numba stops typing constants as
    literals (or stops calling ``get_call_template``), this fails and the override can go."""
    helper = numba.njit(_scaled_sum)
    _call_from_two_kernels(helper)
    assert len(helper.signatures) == 2
    assert all(isinstance(sig[1], types.IntegerLiteral) for sig in helper.signatures)
