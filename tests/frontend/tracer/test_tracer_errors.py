"""Every ``@fusec.fuse`` error is a FusecError located at the user's own line.

Each failing line below carries a ``# <- NAME`` marker; the test checks that
the error points at this file and that line.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from markers import Markers

import fusec
from fusec import ops

_MARKERS = Markers(__file__)
line_of = _MARKERS.line_of
raises_at = _MARKERS.raises_at


def arr(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(shape).astype(dtype)


def fuse(fn):
    return fusec.fuse(fn, target="reference", disk_cache=False)


# ---------------------------------------------------------- inside a trace


def test_branching_on_a_traced_tensor():
    @fuse
    def f(x):
        if ops.relu(x):  # <- branch
            return x
        return -x

    with raises_at("branch", match="cannot branch on a traced tensor"):
        f(arr(3))


def test_comparisons():
    @fuse
    def f(x):
        return ops.exp(x) > 1.0  # <- compare

    with raises_at("compare", match="comparison of traced tensors is not supported"):
        f(arr(3))


def test_unsupported_numpy_ufunc_is_named():
    @fuse
    def f(x):
        return np.log2(x)  # <- ufunc

    with raises_at("ufunc", match=r"numpy\.log2 is not supported"):
        f(arr(3))


def test_unsupported_numpy_function_is_named():
    @fuse
    def f(x):
        return np.concatenate([x, x])  # <- function

    with raises_at("function", match=r"numpy\.concatenate is not supported"):
        f(arr(3))


def test_converting_to_a_number():
    @fuse
    def f(x):
        return math.exp(x)  # <- number

    with raises_at("number", match="cannot convert a traced tensor to a Python number"):
        f(arr(3))


def test_shape_error_at_the_line_that_made_the_op():
    @fuse
    def f(x, w):
        h = ops.relu(x)
        return h @ w  # <- matmul

    with raises_at("matmul", match="inner dimensions do not match") as info:
        f(arr(4, 8), arr(5, 3))
    err = info.value
    assert "shape 4x8" in err.message and "shape 5x3" in err.message


def test_conv_shape_error_names_the_shapes():
    @fuse
    def f(x, w):
        return ops.conv2d(x, w, padding=1)  # <- conv

    with raises_at("conv", match="input channels") as info:
        f(arr(1, 3, 8, 8), arr(4, 2, 3, 3))
    err = info.value
    assert "4x2x3x3" in err.message and "1x3x8x8" in err.message


def test_dot_t_of_higher_rank():
    @fuse
    def f(x):
        return x.T  # <- dot_t

    with raises_at("dot_t", match=r"use \.mT"):
        f(arr(2, 3, 4))


def test_indexing_with_integers_and_slices():
    @fuse
    def f(x):
        return x[1:]  # <- slice

    with raises_at("slice", match="supports only None"):
        f(arr(3))


def test_escaped_tracer():
    leaked = []

    @fuse
    def keep(x):
        leaked.append(x)
        return ops.relu(x)

    @fuse
    def use(y):
        return y + leaked[0]  # <- escaped

    keep(arr(3))
    with raises_at("escaped", match="outside the trace that made it"):
        use(arr(3))


def test_bad_op_keyword_values():
    @fuse
    def f(x, w):
        return ops.conv2d(x, w, stride=(1, 2, 3))  # <- stride

    with raises_at("stride", match="stride must be"):
        f(arr(1, 1, 4, 4), arr(1, 1, 1, 1))


def test_returning_a_non_tensor():
    @fuse  # <- returns
    def f(x):
        return 1.0

    with raises_at("returns", match="expected a traced tensor"):
        f(arr(3))


def test_ops_outside_a_trace():
    with raises_at("outside", match="inside a @fusec.fuse"):
        ops.relu(arr(3))  # <- outside


# -------------------------------------------------------------- at a call


def test_wrong_argument_count_on_a_later_call():
    f = fuse(lambda x, y: x + y)
    f(arr(3), arr(3))
    with raises_at("count", match="missing a required argument: 'y'"):
        f(arr(3))  # <- count
    with pytest.raises(fusec.FusecError, match="too many positional arguments"):
        f(arr(3), arr(3), arr(3))


def test_wrong_dtype_on_a_later_call():
    f = fuse(lambda x, y: x + y)
    f(arr(3), arr(3))
    x64 = arr(3).astype(np.float64)
    with raises_at("dtype", match="argument 'y' has dtype float64"):
        f(arr(3), x64)  # <- dtype
    with pytest.raises(fusec.FusecError, match="has dtype uint16"):
        f(np.arange(3, dtype=np.uint16), arr(3))
    with pytest.raises(fusec.FusecError, match="element type f32, expected i32"):
        f(np.arange(3, dtype=np.int32), arr(3))  # an integer tensor meets a float one


def test_mixed_element_types_on_a_later_call():
    @fuse
    def f(x, y):
        return ops.exp(x) * y  # <- mixed

    f(arr(3), arr(3))
    with raises_at("mixed", match="element type f16"):
        f(arr(3), arr(3, dtype=np.float16))


def test_unknown_target_at_decoration():
    with pytest.raises(fusec.FusecError, match="unknown target 'tpu'") as info:
        fusec.fuse(target="tpu")  # <- target
    assert info.value.location.line == line_of("target")


def test_unhashable_python_argument():
    f = fuse(lambda x, opts: x)
    with raises_at("unhashable", match="neither an array"):
        f(arr(3), bytearray(b"options"))  # <- unhashable
