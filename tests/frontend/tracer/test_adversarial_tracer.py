"""Misusing ``@fusec.fuse`` and ``fusec.ops``: every mistake is a FusecError at the user's line.

Like ``test_tracer_errors.py``, each failing line carries a ``# <- NAME`` marker
and the test checks the error points at this file and that line (or, for
errors about the function as a whole, at its ``def`` line).
"""

from __future__ import annotations

import numpy as np
import pytest
from markers import Markers

import fusec
from fusec import ops

_MARKERS = Markers(__file__)
line_of = _MARKERS.line_of
raises_at = _MARKERS.raises_at


def arr(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(11).standard_normal(shape).astype(dtype)


def fuse(fn=None, **options):
    options = {"target": "reference", "disk_cache": False, **options}
    return fusec.fuse(fn, **options) if fn is not None else fusec.fuse(**options)


# ------------------------------------------------------------ outside a trace


def test_ops_on_numpy_arrays_outside_a_trace():
    x = arr(1, 1, 4, 4)
    with raises_at("relu_np", match=r"fusec\.ops\.relu works on traced tensors"):
        ops.relu(x)  # <- relu_np
    with raises_at("add_np", match=r"fusec\.ops\.add works on traced tensors"):
        ops.add(x, 1.0)  # <- add_np
    with raises_at("conv_np", match=r"fusec\.ops\.conv2d works on traced tensors"):
        ops.conv2d(x, arr(1, 1, 3, 3))  # <- conv_np


# ------------------------------------------------------------ inside a trace


def test_mixing_element_types():
    @fuse
    def f(x, y):
        return ops.matmul(x, y)  # <- mix

    with raises_at("mix", match=r"ai\.matmul: operand 'rhs' has element type f16, expected f32"):
        f(arr(2, 2), arr(2, 2, dtype=np.float16))


@pytest.mark.parametrize(
    ("result", "what"),
    [
        (None, r"the result is a NoneType"),
        (1.5, r"the result is a float"),
        (np.ones(3, np.float32), r"the result is a ndarray"),
        ((None,), r"result #0 is a NoneType"),
    ],
    ids=["None", "scalar", "numpy_constant", "tuple_with_None"],
)
def test_returning_something_that_is_not_a_traced_tensor(result, what):
    def f(x):  # <- returns
        ops.relu(x)
        return result

    with raises_at("returns", match=rf"@f: {what}, expected a traced tensor"):
        fuse(f)(arr(3))


def test_unbounded_recursion_is_an_error_at_the_function():
    @fuse  # <- recursion
    def f(x):  # (a decorated function's location is its first decorator, as co_firstlineno)
        return ops.relu(f(x))

    with raises_at("recursion", match=r"@f: maximum recursion depth exceeded while tracing"):
        f(arr(3))


def test_bounded_recursion_through_a_python_value_works():
    @fuse
    def f(x, n):
        return x if n == 0 else ops.relu(f(x, n - 1)) + 1.0

    x = arr(3)
    np.testing.assert_allclose(f(x, 3), np.maximum(np.maximum(np.maximum(x, 0) + 1, 0) + 1, 0) + 1)


def test_an_empty_array_argument():
    @fuse
    def f(x):
        return ops.softmax(x)

    with raises_at("empty", match=r"argument 'x' \(shape \(4, 0\)\) has a zero-size dimension"):
        f(arr(4, 0))  # <- empty


def test_missing_tensor_methods_are_located_attribute_errors():
    probes = {}

    @fuse
    def f(x):
        probes["hasattr"] = hasattr(x, "sum")  # must stay False, not raise
        probes["getattr"] = getattr(x, "reshape", "default")
        return x.sum()  # <- method

    with raises_at("method", match=r"traced tensors have no attribute or method 'sum'") as info:
        f(arr(3))
    assert isinstance(info.value, AttributeError)
    assert probes == {"hasattr": False, "getattr": "default"}


def test_formatting_a_traced_tensor():
    @fuse
    def f(x):
        print(f"{x:.3f}")  # <- format
        return x

    with raises_at("format", match=r"cannot format a traced tensor's value"):
        f(arr(3))


def test_too_many_new_axes():
    @fuse
    def f(x):
        return x[(None,) * 40]  # <- axes

    with raises_at("axes", match=r"indexing gives rank 41; fusec supports rank <= 32"):
        f(arr(3))


@pytest.mark.parametrize(
    ("constant", "dtype", "match"),
    [
        (1e10, np.float16, r"constant 10000000000\.0 is out of range of f16"),
        (10**400, np.float32, r"an integer constant of 401 digits is out of range"),
        (np.ones(0, np.float32), np.float32, r"constant of shape \(0,\) has a zero-size dim"),
    ],
    ids=["f16_overflow", "huge_int", "empty_array"],
)
def test_constants_that_do_not_fit(constant, dtype, match):
    @fuse
    def f(x):
        return x + constant  # <- constant

    with raises_at("constant", match=match):
        f(arr(3, dtype=dtype))


def test_layernorm_epsilon_nan():
    @fuse
    def f(x, g, b):
        return ops.layernorm(x, g, b, eps=float("nan"))  # <- eps

    with raises_at("eps", match=r"epsilon must be a finite number >= 0, got nan"):
        f(arr(2, 3), arr(3), arr(3))


# ------------------------------------------------------------ decorator options


def test_a_pipeline_that_is_not_a_string():
    with raises_at("pipeline_type", match=r"pipeline must be a pass-pipeline string, got int"):
        fusec.fuse(pipeline=3)  # <- pipeline_type


def test_a_bad_pipeline_is_reported_at_the_call():
    f = fuse(lambda x: ops.relu(x), pipeline="fuse-epilogue{")
    with raises_at("bad_pipeline", match=r"bad pass pipeline 'fuse-epilogue\{' at column 15"):
        f(arr(3))  # <- bad_pipeline


def test_a_numpy_ufunc_is_not_a_python_function():
    with raises_at("ufunc", match=r"@fusec\.fuse needs a Python function, got numpy ufunc exp"):
        fusec.fuse(np.exp)  # <- ufunc
