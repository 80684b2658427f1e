"""Tests of the pure-numpy reference kernels (fusec.dialect.numpy_ops).

Every kernel is checked against an independent, deliberately naive reference
(explicit Python loops, the ``math`` module) on fresh seeded random inputs.
"""

from __future__ import annotations

import itertools
import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import assert_close
from profiles import examples

from fusec.dialect import numpy_ops as ops

BF16 = np.dtype(ml_dtypes.bfloat16)
LOW_PRECISION = [np.dtype(np.float16), BF16]
SMALLEST_SUBNORMAL = 5e-324


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240611)


def randn(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    """Standard-normal float64 samples, guaranteed free of exact zeros."""
    a = rng.standard_normal(shape) * scale
    a[a == 0.0] = 0.5 * scale
    return a


# --------------------------------------------------------------------------
# conv2d
# --------------------------------------------------------------------------


def conv2d_loops(x, w, strides, pads, dilations, groups):
    """Direct 7-nested-loop convolution; pads = (h_begin, w_begin, h_end, w_end)."""
    n_, c_, h_, w_ = x.shape
    k_, cg, r_, s_ = w.shape
    sh, sw = strides
    dh, dw = dilations
    pt, pl, pb, pr = pads
    oh = (h_ + pt + pb - dh * (r_ - 1) - 1) // sh + 1
    ow = (w_ + pl + pr - dw * (s_ - 1) - 1) // sw + 1
    kg = k_ // groups
    xl, wl = x.tolist(), w.tolist()
    out = np.empty((n_, k_, oh, ow))
    for n in range(n_):
        for k in range(k_):
            g = k // kg
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for c in range(cg):
                        for r in range(r_):
                            ih = i * sh - pt + r * dh
                            if not 0 <= ih < h_:
                                continue
                            for s in range(s_):
                                iw = j * sw - pl + s * dw
                                if 0 <= iw < w_:
                                    acc += xl[n][g * cg + c][ih][iw] * wl[k][c][r][s]
                    out[n, k, i, j] = acc
    return out


def _as_four(padding):
    return tuple(padding) * 2 if len(padding) == 2 else tuple(padding)


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("dilations", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("padding", [(0, 0), (1, 2), (2, 0, 1, 1)])
@pytest.mark.parametrize("strides", [(1, 1), (2, 1), (2, 3)])
def test_conv2d_matches_loops(rng, strides, padding, dilations, groups):
    x = randn(rng, 2, 4, 7, 6)
    w = randn(rng, 8, 4 // groups, 3, 2)
    out = ops.conv2d(x, w, strides=strides, padding=padding, dilations=dilations, groups=groups)
    ref = conv2d_loops(x, w, strides, _as_four(padding), dilations, groups)
    assert out.dtype == np.float64
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_conv2d_depthwise_and_float32(rng):
    x = randn(rng, 1, 6, 5, 5).astype(np.float32)
    w = randn(rng, 6, 1, 3, 3).astype(np.float32)
    out = ops.conv2d(x, w, padding=(1, 1, 0, 2), groups=6)
    ref = conv2d_loops(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1, 0, 2), (1, 1), 6)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_conv2d_padding_forms_agree(rng):
    x = randn(rng, 1, 3, 5, 6)
    w = randn(rng, 2, 3, 3, 3)
    a = ops.conv2d(x, w, padding=1)
    b = ops.conv2d(x, w, padding=(1, 1))
    c = ops.conv2d(x, w, padding=(1, 1, 1, 1))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, c)


def test_conv2d_non_contiguous_input(rng):
    big = randn(rng, 2, 3, 10, 7)
    x = big[:, ::-1, ::2, :]  # negative and doubled strides
    w = randn(rng, 4, 3, 2, 2)
    out = ops.conv2d(x, w, strides=(1, 2))
    ref = conv2d_loops(np.ascontiguousarray(x), w, (1, 2), (0, 0, 0, 0), (1, 1), 1)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"padding": (1, 1, 1)},
        {"groups": 3},
        {"strides": (0, 1)},
        {"padding": (-1, 0)},
    ],
)
def test_conv2d_rejects_bad_arguments(rng, kwargs):
    with pytest.raises(ValueError):
        ops.conv2d(randn(rng, 1, 4, 5, 5), randn(rng, 4, 4, 3, 3), **kwargs)


def test_conv2d_rejects_channel_mismatch_and_empty_output(rng):
    with pytest.raises(ValueError):
        ops.conv2d(randn(rng, 1, 4, 5, 5), randn(rng, 4, 3, 3, 3))
    with pytest.raises(ValueError):
        ops.conv2d(randn(rng, 1, 4, 2, 2), randn(rng, 4, 4, 3, 3))


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_conv2d_low_precision_accumulates_in_float32(dtype):
    # 4096 ones: a float16 accumulator stalls at 2048, a bfloat16 one at 256.
    x = np.ones((1, 4096, 1, 1), dtype=dtype)
    w = np.ones((1, 4096, 1, 1), dtype=dtype)
    out = ops.conv2d(x, w)
    assert out.dtype == dtype
    assert float(out[0, 0, 0, 0]) == 4096.0


# --------------------------------------------------------------------------
# bias_add and binary element-wise ops
# --------------------------------------------------------------------------


def test_bias_add_channels_and_last_axis(rng):
    x = randn(rng, 2, 3, 4, 5)
    b = randn(rng, 3)
    out = ops.bias_add(x, b)
    for n, c, h, w in itertools.product(range(2), range(3), range(4), range(5)):
        assert out[n, c, h, w] == x[n, c, h, w] + b[c]
    b5 = randn(rng, 5)
    np.testing.assert_array_equal(ops.bias_add(x, b5, axis=-1), x + b5)
    np.testing.assert_array_equal(ops.bias_add(x, b5, axis=3), x + b5)
    with pytest.raises(ValueError):
        ops.bias_add(x, b5)


@pytest.mark.parametrize(
    "op, ref",
    [
        (ops.add, lambda a, b: a + b),
        (ops.sub, lambda a, b: a - b),
        (ops.mul, lambda a, b: a * b),
        (ops.div, lambda a, b: a / b),
        (ops.maximum, max),
    ],
    ids=["add", "sub", "mul", "div", "maximum"],
)
def test_binary_ops_broadcast(rng, op, ref):
    a = randn(rng, 3, 1, 4)
    b = randn(rng, 5, 1)
    out = op(a, b)
    assert out.shape == (3, 5, 4)
    assert out.dtype == np.float64
    for i, j, k in itertools.product(range(3), range(5), range(4)):
        assert out[i, j, k] == ref(float(a[i, 0, k]), float(b[j, 0]))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), *LOW_PRECISION], ids=str)
@pytest.mark.parametrize("op", [ops.add, ops.sub, ops.mul, ops.div, ops.maximum])
def test_binary_ops_keep_dtype(rng, op, dtype):
    a = randn(rng, 4, 3).astype(dtype)
    b = randn(rng, 3).astype(dtype)
    out = op(a, b)
    assert out.dtype == dtype
    ref = op(a.astype(np.float64), b.astype(np.float64))
    assert_close(out, ref, tol=1e-2)


def test_maximum_propagates_nan():
    out = ops.maximum(np.array([np.nan, 1.0]), np.array([2.0, np.nan]))
    assert np.isnan(out).all()


# --------------------------------------------------------------------------
# erf / erfc
# --------------------------------------------------------------------------


def _erf_points() -> np.ndarray:
    pos = np.concatenate(
        [
            np.linspace(0.0, 8.0, 20001)[1:],
            np.linspace(0.46, 0.48, 401),  # first region boundary (0.46875)
            np.linspace(3.99, 4.01, 401),  # second region boundary (4)
            np.logspace(-300, 0, 601),
            np.logspace(0, 300, 301),
            [1e-16, 1.11e-16, 2.2250738585072014e-308, 5.9, 6.0, 6.5, 26.5, 27.0, 1e308],
        ]
    )
    return np.concatenate([pos, -pos, [0.0, -0.0]])


def test_erf_matches_math_erf():
    xs = _erf_points()
    out = ops.erf(xs)
    ref = np.array([math.erf(v) for v in xs])
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, ref, rtol=1e-14, atol=0.0)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


def test_erf_subnormals_and_specials():
    tiny = np.array([SMALLEST_SUBNORMAL, 2e-323, 4.29266e-318, 1e-310, 2e-308])
    xs = np.concatenate([tiny, -tiny])
    out = ops.erf(xs)
    ref = np.array([math.erf(v) for v in xs])
    assert np.all(np.abs(out - ref) <= 2 * SMALLEST_SUBNORMAL)
    special = ops.erf(np.array([np.inf, -np.inf, np.nan, -0.0]))
    assert special[0] == 1.0 and special[1] == -1.0 and np.isnan(special[2])
    assert special[3] == 0.0 and np.signbit(special[3])


def test_erfc_matches_math_erfc():
    xs = _erf_points()
    xs = xs[xs < 26.0]  # beyond, erfc is subnormal or underflows
    out = ops.erfc(xs)
    ref = np.array([math.erfc(v) for v in xs])
    np.testing.assert_allclose(out, ref, rtol=2e-14, atol=0.0)
    special = ops.erfc(np.array([np.inf, -np.inf, np.nan, 30.0, 1e300]))
    np.testing.assert_array_equal(special, [0.0, 2.0, np.nan, 0.0, 0.0])


@settings(max_examples=examples(300), deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_erf_property(x):
    out = float(ops.erf(np.array([x]))[0])
    ref = math.erf(x)
    assert abs(out - ref) <= max(4 * math.ulp(ref), 2 * SMALLEST_SUBNORMAL)
    assert float(ops.erf(np.array([-x]))[0]) == -out


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["float16", "float32"])
def test_erf_keeps_dtype(rng, dtype):
    x = randn(rng, 100).astype(dtype)
    out = ops.erf(x)
    assert out.dtype == dtype
    ref = np.array([math.erf(float(v)) for v in x]).astype(dtype)
    np.testing.assert_array_equal(out, ref)


# --------------------------------------------------------------------------
# activations
# --------------------------------------------------------------------------


def test_gelu_exact_matches_math(rng):
    xs = np.concatenate([np.linspace(-12.0, 12.0, 4001), randn(rng, 500, scale=3.0)])
    out = ops.gelu(xs)
    s2 = math.sqrt(2.0)
    # the textbook form (absolute agreement) ...
    textbook = np.array([0.5 * v * (1.0 + math.erf(v / s2)) for v in xs])
    np.testing.assert_allclose(out, textbook, rtol=1e-14, atol=1e-15)
    # ... and the cancellation-free form (relative agreement, also for x << 0)
    precise = np.array([0.5 * v * math.erfc(-v / s2) for v in xs])
    np.testing.assert_allclose(out, precise, rtol=1e-12, atol=0.0)


def test_gelu_tanh_matches_math(rng):
    xs = np.concatenate([np.linspace(-12.0, 12.0, 4001), randn(rng, 500, scale=3.0)])
    out = ops.gelu(xs, approximate="tanh")
    c = math.sqrt(2.0 / math.pi)
    ref = np.array([0.5 * v * (1.0 + math.tanh(c * (v + 0.044715 * v**3))) for v in xs])
    np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-14)


def test_gelu_limits_and_bad_mode():
    x = np.array([np.inf, -np.inf, np.nan, 1e300, -1e300])
    for mode in ("none", "tanh"):
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            out = ops.gelu(x, approximate=mode)
        assert out[0] == np.inf and out[1] == 0.0 and np.isnan(out[2])
        assert out[3] == 1e300 and out[4] == 0.0
    with pytest.raises(ValueError):
        ops.gelu(x, approximate="fast")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, BF16], ids=str)
def test_sigmoid_is_stable(dtype):
    x = np.array([-1000.0, 1000.0, -60000.0, 60000.0, -np.inf, np.inf]).astype(dtype)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        out = ops.sigmoid(x)
        silu = ops.silu(x)
        gelu = ops.gelu(x, approximate="tanh")
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.astype(np.float64), [0, 1, 0, 1, 0, 1])
    for y in (silu, gelu):
        assert not np.isnan(y.astype(np.float64)).any()
        np.testing.assert_array_equal(y.astype(np.float64)[1::2], x.astype(np.float64)[1::2])
        np.testing.assert_array_equal(y.astype(np.float64)[0::2], 0.0)


def test_sigmoid_silu_match_math(rng):
    xs = np.concatenate([np.linspace(-30.0, 30.0, 2001), randn(rng, 200, scale=5.0)])
    sig = np.array([1.0 / (1.0 + math.exp(-v)) for v in xs])
    np.testing.assert_allclose(ops.sigmoid(xs), sig, rtol=1e-14)
    np.testing.assert_allclose(ops.silu(xs), xs * sig, rtol=1e-14)


def test_relu_tanh_exp_match_math(rng):
    xs = randn(rng, 300, scale=4.0)
    np.testing.assert_array_equal(ops.relu(xs), [max(v, 0.0) for v in xs])
    np.testing.assert_allclose(ops.tanh(xs), [math.tanh(v) for v in xs], rtol=1e-15)
    np.testing.assert_allclose(ops.exp(xs), [math.exp(v) for v in xs], rtol=1e-15)
    assert np.isnan(ops.relu(np.array([np.nan])))[0]


# --------------------------------------------------------------------------
# matmul
# --------------------------------------------------------------------------


def matmul_loops(a, b):
    """np.dot over every broadcast batch index; a: (..., M, K), b: (..., K, N)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_b = np.broadcast_to(a, batch + a.shape[-2:])
    b_b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(*batch):
        out[idx] = np.dot(a_b[idx], b_b[idx])
    return out


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((4, 3), (3, 5)),
        ((2, 1, 4, 3), (3, 3, 5)),
        ((4, 3), (2, 3, 5)),
        ((3, 1, 4, 3), (1, 2, 3, 5)),
    ],
)
def test_matmul_batched_broadcast_transposes(rng, a_shape, b_shape, transpose_a, transpose_b):
    a = randn(rng, *a_shape)
    b = randn(rng, *b_shape)
    a_arg = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if transpose_a else a
    b_arg = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if transpose_b else b
    out = ops.matmul(a_arg, b_arg, transpose_a=transpose_a, transpose_b=transpose_b)
    ref = matmul_loops(a, b)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-13)


def test_matmul_rejects_transposed_vector(rng):
    with pytest.raises(ValueError):
        ops.matmul(randn(rng, 3), randn(rng, 3, 2), transpose_a=True)


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_matmul_low_precision_accumulates_in_float32(dtype):
    a = np.ones((1, 4096), dtype=dtype)
    out = ops.matmul(a, a, transpose_b=True)
    assert out.dtype == dtype
    assert float(out[0, 0]) == 4096.0


# --------------------------------------------------------------------------
# layernorm / softmax
# --------------------------------------------------------------------------


def layernorm_rows(x, gamma, beta, eps):
    rows = x.reshape(-1, x.shape[-1]).tolist()
    out = []
    for row in rows:
        mean = math.fsum(row) / len(row)
        var = math.fsum((v - mean) ** 2 for v in row) / len(row)
        inv = 1.0 / math.sqrt(var + eps)
        out.append([(v - mean) * inv * g + b for v, g, b in zip(row, gamma, beta, strict=True)])
    return np.array(out).reshape(x.shape)


@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 33), (1, 1)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layernorm_matches_rows(rng, shape, eps):
    x = randn(rng, *shape, scale=3.0) + 2.0
    gamma = randn(rng, shape[-1])
    beta = randn(rng, shape[-1])
    out = ops.layernorm(x, gamma, beta, epsilon=eps)
    np.testing.assert_allclose(out, layernorm_rows(x, gamma, beta, eps), rtol=1e-12, atol=1e-12)


def test_layernorm_without_affine(rng):
    x = randn(rng, 4, 10)
    ones = np.ones(10)
    np.testing.assert_allclose(
        ops.layernorm(x, None, None), layernorm_rows(x, ones, ones - 1.0, 1e-5), rtol=1e-12
    )


def test_layernorm_float16_accumulates_in_float32(rng):
    # A float16 running sum of 4096 values near 100 would overflow (> 65504).
    x = (100.0 + randn(rng, 2, 4096)).astype(np.float16)
    gamma = randn(rng, 4096).astype(np.float16)
    beta = randn(rng, 4096).astype(np.float16)
    out = ops.layernorm(x, gamma, beta)
    assert out.dtype == np.float16
    ref = layernorm_rows(
        x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64), 1e-5
    )
    assert_close(out, ref, tol=1e-2)


def softmax_rows(x, axis):
    moved = np.moveaxis(x, axis, -1)
    out = []
    for row in moved.reshape(-1, moved.shape[-1]).tolist():
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = math.fsum(e)
        out.append([v / s for v in e])
    return np.moveaxis(np.array(out).reshape(moved.shape), -1, axis)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_matches_rows(rng, axis):
    x = randn(rng, 3, 4, 5, scale=4.0)
    out = ops.softmax(x, axis=axis)
    np.testing.assert_allclose(out, softmax_rows(x, axis), rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(out.sum(axis=axis), 1.0, rtol=1e-14)


def test_softmax_large_inputs_are_stable(rng):
    x = randn(rng, 4, 7) * 10.0 + 1000.0
    x[0] -= 3000.0
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise"):
        warnings.simplefilter("error")
        out = ops.softmax(x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, softmax_rows(x, -1), rtol=1e-13, atol=1e-16)


# --------------------------------------------------------------------------
# low-precision inputs: dtype is preserved and results track float64
# --------------------------------------------------------------------------


def _case_inputs(name: str, rng: np.random.Generator):
    if name == "conv2d":
        return (randn(rng, 2, 8, 9, 9), randn(rng, 6, 4, 3, 3)), {"padding": (1, 1), "groups": 2}
    if name == "matmul":
        return (randn(rng, 2, 16, 64), randn(rng, 32, 64)), {"transpose_b": True}
    if name == "layernorm":
        return (randn(rng, 8, 64), randn(rng, 64), randn(rng, 64)), {}
    if name == "softmax":
        return (randn(rng, 8, 64, scale=3.0),), {"axis": 0}
    if name == "bias_add":
        return (randn(rng, 2, 4, 3, 3), randn(rng, 4)), {}
    return (randn(rng, 500, scale=3.0),), {}


CASES = {
    "conv2d": ops.conv2d,
    "matmul": ops.matmul,
    "layernorm": ops.layernorm,
    "softmax": ops.softmax,
    "bias_add": ops.bias_add,
    "relu": ops.relu,
    "sigmoid": ops.sigmoid,
    "tanh": ops.tanh,
    "exp": ops.exp,
    "silu": ops.silu,
    "gelu": ops.gelu,
    "gelu_tanh": lambda x: ops.gelu(x, approximate="tanh"),
    "erf": ops.erf,
}


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_low_precision_tracks_float64(rng, name, dtype):
    args, kwargs = _case_inputs(name, rng)
    low = [a.astype(dtype) for a in args]
    out = CASES[name](*low, **kwargs)
    assert out.dtype == dtype
    ref = CASES[name](*[a.astype(np.float64) for a in low], **kwargs)
    assert ref.dtype == np.float64
    assert_close(out, ref, tol=1e-2)


# --------------------------------------------------------------------------
# cast
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16], ids=str)
def test_cast(rng, dtype):
    x = randn(rng, 3, 4)
    out = ops.cast(x, dtype)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, x.astype(dtype))
    back = ops.cast(out, np.float64)
    assert back.dtype == np.float64
    assert_close(back, x, tol=1e-2)
    assert out is not x


def test_cast_rounds_to_nearest_even():
    x = np.array([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-11, 65520.0])
    bf = ops.cast(x, ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(bf[:2], [1.0, 1.0 + 2.0**-6])
    hf = ops.cast(x, np.float16).astype(np.float64)
    assert hf[2] == 1.0 and hf[3] == np.inf
    assert ops.cast(x, "bfloat16").dtype == BF16
