"""Results of ``@fusec.fuse`` functions against plain numpy, on random inputs.

The expected values are computed here in float64 numpy, independently of
fusec's reference executor; tolerances are the project's (relative error
1e-4 for f32, 1e-2 for f16/bf16; NaN never passes).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import assert_close
from profiles import examples

import fusec
from fusec import ops


def check(actual, expected, dtype) -> None:
    assert np.asarray(actual).dtype == np.dtype(dtype)
    assert_close(actual, expected, {np.float32: "f32", np.float16: "f16"}.get(dtype, "bf16"))


def rand(rng, shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


# ------------------------------------------------------- numpy references


def np_conv2d(x, w, pad):
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, k, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out


def np_layernorm(x, g, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


erf = np.vectorize(math.erf)


def np_gelu(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


# ------------------------------------------------------------ the programs


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_conv_bias_relu(rng, dtype):
    @fusec.fuse(disk_cache=False)
    def block(x, w, b):
        return ops.relu(ops.conv2d(x, w, padding=1) + b[None, :, None, None])

    x, w, b = rand(rng, (2, 3, 9, 9), dtype), rand(rng, (5, 3, 3, 3), dtype), rand(rng, 5, dtype)
    xd, wd, bd = f64(x, w, b)
    check(block(x, w, b), np.maximum(np_conv2d(xd, wd, 1) + bd[None, :, None, None], 0), dtype)


def test_mlp_block(rng):
    @fusec.fuse(disk_cache=False)
    def mlp(x, gamma, beta, w1, b1, w2, b2):
        h = ops.gelu(ops.layernorm(x, gamma, beta) @ w1 + b1)
        return x + (h @ w2 + b2)

    shapes = [(2, 8, 32), (32,), (32,), (32, 64), (64,), (64, 32), (32,)]
    args = [rand(rng, s) for s in shapes]
    x, g, be, w1, b1, w2, b2 = f64(*args)
    expected = x + (np_gelu(np_layernorm(x, g, be) @ w1 + b1) @ w2 + b2)
    check(mlp(*args), expected, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_attention_core(rng, dtype):
    @fusec.fuse(disk_cache=False)
    def attention(q, k, v, mask):
        scores = q @ k.mT / math.sqrt(q.shape[-1]) + mask
        return ops.softmax(scores) @ v

    q, k, v = (rand(rng, (2, 3, 16, 8), dtype) for _ in range(3))
    mask = rand(rng, (16, 16), dtype)
    qd, kd, vd, md = f64(q, k, v, mask)
    expected = np_softmax(qd @ np.swapaxes(kd, -1, -2) / math.sqrt(8) + md) @ vd
    check(attention(q, k, v, mask), expected, dtype)


def test_bf16_elementwise(rng):
    @fusec.fuse(disk_cache=False)
    def f(x, y):
        return ops.silu(x) * ops.sigmoid(y) - ops.tanh(x) / 2

    x, y = rand(rng, (4, 8), ml_dtypes.bfloat16), rand(rng, (4, 8), ml_dtypes.bfloat16)
    xd, yd = f64(x, y)
    expected = xd / (1 + np.exp(-xd)) / (1 + np.exp(-yd)) - np.tanh(xd) / 2
    check(f(x, y), expected, ml_dtypes.bfloat16)


# ------------------------------------------------------- Python features


def test_multiple_outputs_tuple_and_list(rng):
    @fusec.fuse(disk_cache=False)
    def two(x, y):
        s = x + y
        return ops.relu(s), ops.exp(s) * 0.5

    @fusec.fuse(disk_cache=False)
    def as_list(x):
        return [x * 2, ops.softmax(x, axis=0)]

    x, y = rand(rng, (3, 4)), rand(rng, (3, 4))
    r, e = two(x, y)
    check(r, np.maximum(x + y, 0), np.float32)
    check(e, np.exp(f64(x)[0] + y) * 0.5, np.float32)
    result = as_list(x)
    assert isinstance(result, list) and len(result) == 2
    check(result[1], np_softmax(f64(x)[0], axis=0), np.float32)


def test_single_tuple_output_stays_a_tuple(rng):
    block = fusec.fuse(lambda x: (ops.relu(x),), disk_cache=False)
    x = rand(rng, 5)
    (out,) = block(x)
    check(out, np.maximum(x, 0), np.float32)


def test_keyword_arguments_and_defaults(rng):
    @fusec.fuse(disk_cache=False)
    def f(x, bias=None, *, scale=1.0, act="relu"):
        y = x * scale
        if bias is not None:  # a Python value: fine to branch on
            y = y + bias
        return ops.relu(y) if act == "relu" else ops.tanh(y)

    x, b = rand(rng, (2, 3)), rand(rng, 3)
    check(f(x), np.maximum(x, 0), np.float32)
    check(f(x, bias=b, scale=2.0), np.maximum(2 * f64(x)[0] + b, 0), np.float32)
    check(f(scale=0.5, x=x, act="tanh"), np.tanh(0.5 * f64(x)[0]), np.float32)
    assert f.trace_count == 3


def test_var_args_and_containers(rng):
    @fusec.fuse(disk_cache=False)
    def total(*xs, weights=(1.0, 2.0)):
        return xs[0] * weights[0] + xs[1] * weights[1]

    @fusec.fuse(disk_cache=False)
    def pair(p):
        return p[0] - p[1]

    a, b = rand(rng, 4), rand(rng, 4)
    check(total(a, b), f64(a)[0] + 2 * f64(b)[0], np.float32)
    check(pair((a, b)), f64(a)[0] - b, np.float32)


def test_closures_over_numpy_arrays(rng):
    w = rng.standard_normal((6, 4))  # float64: becomes an f32 constant
    b = rng.standard_normal(4).astype(np.float32)

    @fusec.fuse(disk_cache=False)
    def linear(x):
        return ops.relu(x @ w + b)

    x = rand(rng, (3, 6))
    check(linear(x), np.maximum(f64(x)[0] @ w.astype(np.float32) + b, 0), np.float32)


def test_reflected_operators_and_numpy_on_the_left(rng):
    c = rng.standard_normal((3, 4)).astype(np.float32)

    @fusec.fuse(disk_cache=False)
    def f(x):
        return 1.0 / (2.0 + ops.exp(-x)) - c * x + c @ x.T @ np.ones((3, 1), np.float32)

    x = rand(rng, (3, 4))
    xd, cd = f64(x, c)
    expected = 1 / (2 + np.exp(-xd)) - cd * xd + cd @ xd.T @ np.ones((3, 1))
    check(f(x), expected, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_negation_and_absolute_value(rng, dtype):
    @fusec.fuse(disk_cache=False)
    def f(x, y):
        return ops.abs(-x) * np.negative(y) + abs(ops.neg(y)) - np.abs(x)

    x, y = rand(rng, (5, 33), dtype), rand(rng, (5, 33), dtype)
    xd, yd = f64(x, y)
    check(f(x, y), np.abs(xd) * -yd + np.abs(yd) - np.abs(xd), dtype)


def test_nested_fused_functions_are_inlined(rng):
    @fusec.fuse(disk_cache=False)
    def inner(x, b):
        return ops.gelu(x + b)

    @fusec.fuse(disk_cache=False)
    def outer(x, b):
        return inner(x, b) * 2

    x, b = rand(rng, (2, 5)), rand(rng, 5)
    check(outer(x, b), 2 * np_gelu(f64(x)[0] + b), np.float32)
    assert inner.trace_count == 0 and outer.ir(x, b).count("ai.gelu") == 1


def test_indexed_argument_used_by_several_ops(rng):
    @fusec.fuse(disk_cache=False)
    def f(x, s):
        scale = s[None, :, None, None]
        return x * scale + ops.relu(x) / (scale * scale + 1)

    x, s = rand(rng, (2, 3, 4, 4)), rand(rng, 3)
    xd, sd = f64(x, s)
    sv = sd[None, :, None, None]
    check(f(x, s), xd * sv + np.maximum(xd, 0) / (sv * sv + 1), np.float32)
    assert f.ir(x, s).count("ai.reshape %s") == 1  # one reshape, three uses


def test_views_the_front_end_builds_as_ops(rng):
    @fusec.fuse(disk_cache=False)
    def f(x, y):
        other = ops.exp(y.transpose(2, 1, 0)).transpose(2, 1, 0)[None] + ops.tanh(y.mT).mT
        return ops.relu(x.T)[:, :, None] * y + other

    x, y = rand(rng, (3, 4)), rand(rng, (4, 3, 5))
    xd, yd = f64(x, y)
    other = np.exp(yd)[None] + np.tanh(yd)
    check(f(x, y), np.maximum(xd.T, 0)[:, :, None] * yd + other, np.float32)
    assert "ai.transpose" in f.ir(x, y) and "ai.reshape" in f.ir(x, y)


_BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "max": (ops.maximum, np.maximum),
}


@settings(max_examples=examples(12), deadline=None)
@given(
    shapes=st.lists(st.integers(1, 4), min_size=1, max_size=3).flatmap(
        lambda full: st.tuples(
            st.just(tuple(full)),
            st.lists(st.booleans(), min_size=len(full), max_size=len(full)),
            st.integers(0, len(full)),
        )
    ),
    names=st.lists(st.sampled_from(sorted(_BINARY)), min_size=1, max_size=3),
    scalar=st.floats(-3, 3, allow_nan=False).filter(lambda v: abs(v) > 0.1),
)
def test_broadcasting_chains_match_numpy(shapes, names, scalar):
    full, ones, drop = shapes
    other = tuple(1 if one else d for d, one in zip(full, ones, strict=True))[drop:]
    rng = np.random.default_rng(len(names))
    x, y = rand(rng, full), rand(rng, other)

    def program(x, y):
        acc = x
        for name in names:
            acc = _BINARY[name][0](acc, y) * scalar
        return acc

    expected = f64(x)[0]
    for name in names:
        expected = _BINARY[name][1](expected, f64(y)[0]) * np.float64(np.float32(scalar))
    check(fusec.fuse(program, disk_cache=False)(x, y), expected, np.float32)


def test_batch_norm_after_a_conv_folds_into_it_as_for_onnx(rng):
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(6).astype(np.float32) for _ in range(3))
    var = rng.random(6).astype(np.float32) + 0.5

    @fusec.fuse(disk_cache=False)
    def block(x):
        return ops.relu(ops.batch_norm(ops.conv2d(x, w, padding=1), scale, bias, mean, var))

    x = rand(rng, (2, 3, 8, 8))
    fused = block.fused_ir(x)
    assert "ai.batch_norm" not in fused and fused.count("ai.fused") == 1  # one conv kernel
    xd, wd = f64(x, w)
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    conv = np_conv2d(xd, wd, 1)
    expected = np.maximum((conv - mean[None, :, None, None]) * a[None, :, None, None]
                          + bias[None, :, None, None], 0)  # fmt: skip
    check(block(x), expected, np.float32)
