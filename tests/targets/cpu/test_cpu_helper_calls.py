"""The GEMM helpers called through their symbols (``fusec.targets.cpu.helper_calls``):
the same results as calling the dispatcher, bit for bit, and the caller's library holds
the call, not a compiled copy of the helper."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba.core.errors import TypingError

from fusec.targets.cpu import helper_calls, microkernel

RO = numba.types.Array(numba.float32, 1, "C", readonly=True)


def _inputs(m: int, n: int, k: int):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(m * k).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b


@pytest.mark.parametrize("m, n, k", [(37, 45, 70), (6, 16, 8), (130, 200, 96)])
def test_gemm_packed_call_matches_the_dispatcher(m: int, n: int, k: int) -> None:
    a, b = _inputs(m, n, k)
    bp = microkernel.pack_strips(b)
    call = helper_calls.gemm_packed_call

    @numba.njit(numba.void(RO, RO, numba.float32[::1], numba.int32))
    def through_symbol(a, bp, c, m):  # read-only arrays and an int32 count
        call(m, n, k, a, 0, k, bp, 0, c, 0, n)

    got = np.full(m * n, np.nan, dtype=np.float32)  # poisoned: every element written
    through_symbol(a, bp, got, np.int32(m))
    want = np.full(m * n, np.nan, dtype=np.float32)
    microkernel.gemm_packed(m, n, k, a, 0, k, bp, 0, want, 0, n)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got.reshape(m, n), a.reshape(m, k) @ b, rtol=1e-4, atol=1e-4)
    # the caller declares the helper's symbol and links none of its code
    (ir,) = through_symbol.inspect_llvm().values()
    assert f'declare i32 @"{helper_calls.symbol("gemm_packed")}"' in ir or (
        f"declare i32 @{helper_calls.symbol('gemm_packed')}" in ir
    )
    assert "_packed_strip" not in ir


def test_gemm_nn_and_staged_calls_match_the_dispatchers() -> None:
    m, n, k = 40, 70, 33
    a, b = _inputs(m, n, k)
    flat_b = b.reshape(-1)
    nn, staged = helper_calls.gemm_nn_call, helper_calls.gemm_nn_staged_call

    @numba.njit
    def both(a, b, c, d, buf):
        nn(m, n, k, a, 0, k, b, 0, n, c, 0, n)
        staged(m, n, k, a, 0, k, b, 0, n, d, 0, n, buf)

    c, d = np.zeros(m * n, np.float32), np.zeros(m * n, np.float32)
    buf = np.zeros(k * microkernel.STRIP, np.float32)
    both(a, flat_b, c, d, buf)
    want = np.zeros(m * n, np.float32)
    microkernel.gemm_nn(m, n, k, a, 0, k, flat_b, 0, n, want, 0, n)
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(d, want)


def test_a_call_with_a_matrix_is_refused_at_typing() -> None:
    call = helper_calls.gemm_packed_call

    @numba.njit
    def wrong(a, bp, c):
        call(2, 2, 2, a, 0, 2, bp, 0, c, 0, 2)

    matrix = np.zeros((2, 2), np.float32)
    with pytest.raises(TypingError, match="argument 3 is .* expected a flat float32 array"):
        wrong(matrix, np.zeros(16, np.float32), np.zeros(4, np.float32))


def test_unknown_helper_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="gemm_tt_call"):
        _ = helper_calls.gemm_tt_call
