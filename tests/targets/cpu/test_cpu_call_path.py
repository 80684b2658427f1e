"""The cpu program's call path: the fast argument check and value slots give the same
results and the same errors as the full check (fusec.ir.module.check_arguments)."""

import numpy as np
import pytest

import fusec
from fusec.errors import FusecError
from tests.numerics import assert_close

T = "tensor<4x8xf32>"
GRAPH = f"""
func.func @f(%x: {T}, %y: {T}) -> ({T}, tensor<4x8xf16>) {{
  %a = ai.add %x, %y : {T} * {T}
  %r = ai.relu %a : {T}
  %h = ai.cast %r : {T} to tensor<4x8xf16>
  return %r, %h : {T}, tensor<4x8xf16>
}}
"""


@pytest.fixture(scope="module")
def compiled():
    return fusec.compile(GRAPH, target="cpu")


def _inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))


def test_repeated_calls_match_the_reference_and_return_new_arrays(compiled) -> None:
    reference = fusec.reference(GRAPH)
    first = None
    for seed in range(3):
        x, y = _inputs(seed)
        r, h = compiled(x, y)
        want_r, want_h = reference(x, y)
        assert_close(r, want_r)
        assert_close(h, want_h)
        assert h.dtype == np.float16
        if first is None:
            first = r.copy(), r
        else:  # an earlier result is never overwritten by a later call
            np.testing.assert_array_equal(first[1], first[0])


def test_strided_and_list_arguments(compiled) -> None:
    x, y = _inputs(4)
    wide = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)
    strided = wide[:, ::2]  # the right shape and dtype, not contiguous
    r, _ = compiled(strided, y)
    assert_close(r, np.maximum(strided + y, 0))
    with pytest.raises(FusecError, match="dtype float64"):
        compiled(x.tolist(), y)  # a list becomes float64: the full check names it


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.zeros((4, 8), np.float32),), "takes 2 argument"),
        ((np.zeros((4, 7), np.float32), np.zeros((4, 8), np.float32)), r"argument #0 has shape"),
        ((np.zeros((4, 8), np.float32), np.zeros((4, 8), np.float64)), r"argument #1 has dtype"),
    ],
)
def test_bad_arguments_are_named(compiled, args, message) -> None:
    with pytest.raises(FusecError, match=message):
        compiled(*args)
