"""The reference executor, run from IR text, against independent numpy formulas.

Each op is checked in ``float64`` precision (exact maths: the formula on the
same inputs, to 1e-12) and in ``native`` precision (the declared element type:
f32 to 1e-4, f16/bf16 to 1e-2), with inputs of every supported element type.
numpy_ops itself is tested in tests/dialect/; here the formulas are written
out from their definitions (conv2d as a direct loop, softmax and layernorm as
in the textbook, GELU through math.erf).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from numerics import assert_close

import fusec
from fusec import FusecError
from fusec.frontend.mlir import parse_module
from fusec.ir.dtypes import numpy_dtype
from fusec.runtime.reference import run_reference

NATIVE_TOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2}


def tensor(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


# ------------------------------------------------------- independent formulas


def conv2d_loop(x, w, strides, padding, dilations, groups):
    """Direct definition: out[n,k,i,j] = sum_{c,r,s} xpad[n, g*C+c, i*sh + r*dh, j*sw + s*dw] w[k,c,r,s]."""  # noqa: E501
    n, _, h, wd = x.shape
    k, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = padding
    xp = np.zeros((n, x.shape[1], h + pt + pb, wd + pl + pr))
    xp[:, :, pt : pt + h, pl : pl + wd] = x
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.empty((n, k, oh, ow))
    per_group = k // groups
    for b in range(n):
        for o in range(k):
            g = o // per_group
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for r in range(kh):
                        for s in range(kw):
                            pix = xp[b, g * cg : (g + 1) * cg, i * sh + r * dh, j * sw + s * dw]
                            acc += float(np.dot(pix, w[o, :, r, s]))
                    out[b, o, i, j] = acc
    return out


_erf = np.vectorize(math.erf)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm(x, g, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def matmul(a, b, ta=False, tb=False):
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    return np.einsum("...mk,...kn->...mn", a, b)


# ------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """``body`` uses {d} for the element type and {T0}, {T1}, ... for argument types."""

    args: tuple[tuple[int, ...], ...]
    body: str
    result: tuple[int, ...]
    formula: Callable[..., np.ndarray]
    positive: tuple[int, ...] = ()  # indices of arguments that must be > 0


S = (3, 5)
CASES: dict[str, Case] = {
    "conv2d": Case(
        ((2, 3, 6, 6), (4, 3, 3, 3)),
        "%r = ai.conv2d %a0, %a1 : {T0} * {T1}",
        (2, 4, 4, 4),
        lambda x, w: conv2d_loop(x, w, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ),
    "conv2d_all_attributes": Case(
        ((2, 4, 7, 8), (6, 2, 3, 2)),
        "%r = ai.conv2d %a0, %a1 {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>,"
        " dilations = array<i64: 1, 2>, groups = 2 : i64} : {T0} * {T1}",
        (2, 6, 4, 7),
        lambda x, w: conv2d_loop(x, w, (2, 1), (1, 0, 2, 1), (1, 2), 2),
    ),
    "conv2d_symmetric_padding": Case(
        ((1, 2, 5, 5), (3, 2, 3, 3)),
        "%r = ai.conv2d %a0, %a1 {padding = array<i64: 1, 2>} : {T0} * {T1}",
        (1, 3, 5, 7),
        lambda x, w: conv2d_loop(x, w, (1, 1), (1, 2, 1, 2), (1, 1), 1),
    ),
    "bias_add": Case(
        ((2, 3, 4, 5), (3,)),
        "%r = ai.bias_add %a0, %a1 : {T0} * {T1}",
        (2, 3, 4, 5),
        lambda x, b: x + b[None, :, None, None],
    ),
    "bias_add_last_axis": Case(
        ((2, 3, 4), (4,)),
        "%r = ai.bias_add %a0, %a1 {axis = -1 : i64} : {T0} * {T1}",
        (2, 3, 4),
        lambda x, b: x + b,
    ),
    "add": Case((S, S), "%r = ai.add %a0, %a1 : {T0} * {T1}", S, lambda a, b: a + b),
    "sub_broadcast": Case(
        ((4, 1, 5), (3, 1)), "%r = ai.sub %a0, %a1 : {T0} * {T1}", (4, 3, 5), lambda a, b: a - b
    ),
    "mul": Case((S, (5,)), "%r = ai.mul %a0, %a1 : {T0} * {T1}", S, lambda a, b: a * b),
    "div": Case((S, S), "%r = ai.div %a0, %a1 : {T0} * {T1}", S, lambda a, b: a / b, (1,)),
    "maximum": Case(
        (S, (3, 1)), "%r = ai.maximum %a0, %a1 : {T0} * {T1}", S, lambda a, b: np.where(a > b, a, b)
    ),
    "relu": Case((S,), "%r = ai.relu %a0 : {T0}", S, lambda x: np.where(x > 0, x, 0.0)),
    "sigmoid": Case((S,), "%r = ai.sigmoid %a0 : {T0}", S, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": Case((S,), "%r = ai.tanh %a0 : {T0}", S, lambda x: np.sinh(x) / np.cosh(x)),
    "exp": Case((S,), "%r = ai.exp %a0 : {T0}", S, lambda x: math.e**x),
    "silu": Case((S,), "%r = ai.silu %a0 : {T0}", S, lambda x: x / (1 + np.exp(-x))),
    "sqrt": Case((S,), "%r = ai.sqrt %a0 : {T0}", S, lambda x: x**0.5, (0,)),
    "gelu": Case((S,), "%r = ai.gelu %a0 : {T0}", S, lambda x: 0.5 * x * (1 + _erf(x / 2**0.5))),
    "gelu_tanh": Case(
        (S,),
        '%r = ai.gelu %a0 {approximate = "tanh"} : {T0}',
        S,
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "matmul": Case(
        ((4, 8), (8, 3)), "%r = ai.matmul %a0, %a1 : {T0} * {T1}", (4, 3), lambda a, b: matmul(a, b)
    ),
    "matmul_transpose_b_batched": Case(
        ((2, 3, 4, 8), (3, 5, 8)),
        "%r = ai.matmul %a0, %a1 {transpose_b = true} : {T0} * {T1}",
        (2, 3, 4, 5),
        lambda a, b: matmul(a, b, tb=True),
    ),
    "matmul_transpose_a_broadcast_batch": Case(
        ((1, 8, 4), (3, 8, 5)),
        "%r = ai.matmul %a0, %a1 {transpose_a = true} : {T0} * {T1}",
        (3, 4, 5),
        lambda a, b: matmul(a, b, ta=True),
    ),
    "layernorm": Case(
        ((3, 4, 16), (16,), (16,)),
        "%r = ai.layernorm %a0, %a1, %a2 : {T0} * {T1} * {T2}",
        (3, 4, 16),
        lambda x, g, b: layernorm(x, g, b, 1e-5),
    ),
    "layernorm_epsilon": Case(
        ((4, 8), (8,), (8,)),
        "%r = ai.layernorm %a0, %a1, %a2 {epsilon = 5.000000e-01 : f32} : {T0} * {T1} * {T2}",
        (4, 8),
        lambda x, g, b: layernorm(x, g, b, 0.5),
    ),
    "softmax": Case(((3, 4, 7),), "%r = ai.softmax %a0 : {T0}", (3, 4, 7), softmax),
    "softmax_axis_1": Case(
        ((3, 4, 7),),
        "%r = ai.softmax %a0 {axis = 1 : i64} : {T0}",
        (3, 4, 7),
        lambda x: softmax(x, axis=1),
    ),
    "scalar_constant": Case(
        (S,),
        "%c = arith.constant dense<7.500000e-01> : tensor<{d}>\n"
        "  %r = ai.mul %c, %a0 : tensor<{d}> * {T0}",
        S,
        lambda x: 0.75 * x,
    ),
    "dense_constant": Case(
        ((2, 3),),
        "%c = arith.constant dense<[[1.0, -2.0, 3.0], [0.5, 0.25, -4.0]]> : tensor<2x3x{d}>\n"
        "  %r = ai.add %a0, %c : {T0} * tensor<2x3x{d}>",
        (2, 3),
        lambda x: x + np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -4.0]]),
    ),
    "fused_body": Case(
        ((4, 8), (8,)),
        '%r = ai.fused "pointwise" (%a0, %a1) : ({T0}, {T1}) -> {T0} {\n'
        "  ^bb0(%x: {T0}, %b: {T1}):\n"
        "    %y = ai.bias_add %x, %b : {T0} * {T1}\n"
        "    %z = ai.gelu %y : {T0}\n"
        "    ai.yield %z : {T0}\n"
        "  }",
        (4, 8),
        lambda x, b: 0.5 * (x + b) * (1 + _erf((x + b) / 2**0.5)),
    ),
}

# A 1-D lhs acts as a row vector and its unit dim is dropped (numpy semantics).
CASES["matmul_vector"] = Case(
    ((8,), (2, 8, 3)),
    "%r = ai.matmul %a0, %a1 : {T0} * {T1}",
    (2, 3),
    lambda a, b: np.einsum("k,bkn->bn", a, b),
)


def case_text(case: Case, dtype: str) -> str:
    types = {f"T{i}": tensor(shape, dtype) for i, shape in enumerate(case.args)}
    args = ", ".join(f"%a{i}: {types[f'T{i}']}" for i in range(len(case.args)))
    names = {"d": dtype, **types}
    body = re.sub(r"\{(d|T\d)\}", lambda m: names[m.group(1)], case.body)
    result = tensor(case.result, dtype)
    return f"func.func @f({args}) -> {result} {{\n  {body}\n  return %r : {result}\n}}\n"


def case_inputs(case: Case, dtype: str, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for i, shape in enumerate(case.args):
        data = rng.standard_normal(shape)
        if i in case.positive:
            data = np.abs(data) + 0.5
        arrays.append(data.astype(numpy_dtype(dtype)))
    return arrays


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("name", CASES, ids=str)
def test_op_against_formula(name: str, dtype: str, rng):
    case = CASES[name]
    module = parse_module(case_text(case, dtype))
    args = case_inputs(case, dtype, rng)
    want = case.formula(*(a.astype(np.float64) for a in args))
    assert np.isfinite(want).all()

    (exact,) = run_reference(module, args, precision="float64")
    assert exact.dtype == np.float64
    assert_close(exact, want, tol=1e-12)
    (native,) = run_reference(module, args, precision="native")
    assert native.dtype == numpy_dtype(dtype)
    assert_close(native, want, tol=NATIVE_TOL[dtype])


# --------------------------------------------------------------------- cast


@pytest.mark.parametrize(
    ("src", "dst"), [("f32", "f16"), ("f32", "bf16"), ("bf16", "f32"), ("f16", "bf16")]
)
def test_cast(src: str, dst: str, rng):
    a, b = tensor((4, 6), src), tensor((4, 6), dst)
    text = (
        f"func.func @f(%x: {a}) -> {b} {{\n  %r = ai.cast %x : {a} to {b}\n  return %r : {b}\n}}\n"
    )
    x = rng.standard_normal((4, 6)).astype(numpy_dtype(src))
    (native,) = run_reference(parse_module(text), [x], precision="native")
    assert native.dtype == numpy_dtype(dst)
    np.testing.assert_array_equal(native, x.astype(numpy_dtype(dst)))
    # float64 is the exact maths the IR means: a cast changes nothing.
    (exact,) = run_reference(parse_module(text), [x], precision="float64")
    np.testing.assert_array_equal(exact, x.astype(np.float64))


def test_native_precision_rounds_between_ops(rng):
    """An f16 chain is rounded to f16 after each op, float64 is not."""
    t = tensor((64,), "f16")
    text = (
        f"func.func @f(%x: {t}) -> {t} {{\n"
        "  %c = arith.constant dense<1.000000e-03> : tensor<f16>\n"
        f"  %y = ai.add %x, %c : {t} * tensor<f16>\n"
        f"  %r = ai.sub %y, %x : {t} * {t}\n"
        f"  return %r : {t}\n}}\n"
    )
    x = (rng.uniform(100, 200, 64)).astype(np.float16)
    module = parse_module(text)
    (exact,) = run_reference(module, [x], precision="float64")
    (native,) = run_reference(module, [x], precision="native")
    c = float(np.float16(1e-3))
    np.testing.assert_allclose(exact, c, rtol=1e-9)
    np.testing.assert_array_equal(native, ((x + np.float16(c)) - x).astype(np.float16))
    assert not np.allclose(native.astype(np.float64), c)  # f16 spacing at 100..200 is 0.0625


# ----------------------------------------------------------- whole programs


def test_multiple_results_come_back_as_a_tuple(rng):
    t = tensor((3, 4), "f32")
    text = (
        f"func.func @f(%x: {t}, %y: {t}) -> ({t}, {t}, tensor<3x4xf16>) {{\n"
        f"  %s = ai.add %x, %y : {t} * {t}\n"
        f"  %m = ai.mul %x, %y : {t} * {t}\n"
        f"  %h = ai.cast %m : {t} to tensor<3x4xf16>\n"
        f"  return %s, %m, %h : {t}, {t}, tensor<3x4xf16>\n}}\n"
    )
    x, y = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    out = fusec.reference(text)(x, y)
    assert isinstance(out, tuple) and len(out) == 3
    assert_close(out[0], x + y, tol=1e-6)
    assert_close(out[1], x * y, tol=1e-6)
    assert out[2].dtype == np.float16
    assert_close(out[2], x * y, tol=1e-3)


def test_multi_output_fused_group(rng):
    t, h = tensor((4, 8), "f32"), tensor((4, 8), "f16")
    text = (
        f"func.func @f(%x: {t}) -> ({t}, {h}) {{\n"
        f'  %a, %b = ai.fused "row_reduce" (%x) : ({t}) -> ({t}, {h}) {{\n'
        f"  ^bb0(%p: {t}):\n"
        f"    %s = ai.softmax %p : {t}\n"
        f"    %c = ai.cast %s : {t} to {h}\n"
        f"    ai.yield %s, %c : {t}, {h}\n"
        "  }\n"
        f"  return %a, %b : {t}, {h}\n}}\n"
    )
    x = rng.standard_normal((4, 8)).astype(np.float32)
    soft, half = fusec.reference(text)(x)
    assert_close(soft, softmax(x.astype(np.float64)), tol=1e-6)
    assert half.dtype == np.float16
    assert_close(half, softmax(x.astype(np.float64)), tol=1e-3)


def test_fused_and_unfused_ir_agree(rng):
    t, b = tensor((2, 4, 5, 5), "f32"), tensor((4,), "f32")
    w = tensor((4, 4, 1, 1), "f32")
    plain = (
        f"func.func @f(%x: {t}, %w: {w}, %b: {b}) -> {t} {{\n"
        f"  %c = ai.conv2d %x, %w : {t} * {w}\n"
        f"  %y = ai.bias_add %c, %b : {t} * {b}\n"
        f"  %r = ai.relu %y : {t}\n"
        f"  return %r : {t}\n}}\n"
    )
    fused = (
        f"func.func @f(%x: {t}, %w: {w}, %b: {b}) -> {t} {{\n"
        f'  %r = ai.fused "conv" (%x, %w, %b) : ({t}, {w}, {b}) -> {t} {{\n'
        f"  ^bb0(%p: {t}, %q: {w}, %s: {b}):\n"
        f"    %c = ai.conv2d %p, %q : {t} * {w}\n"
        f"    %y = ai.bias_add %c, %s : {t} * {b}\n"
        f"    %z = ai.relu %y : {t}\n"
        f"    ai.yield %z : {t}\n"
        "  }\n"
        f"  return %r : {t}\n}}\n"
    )
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 5, 5), (4, 4, 1, 1), (4,))]
    for precision in ("float64", "native"):
        (want,) = run_reference(parse_module(plain), args, precision=precision)
        (got,) = run_reference(parse_module(fused), args, precision=precision)
        np.testing.assert_array_equal(got, want)
    direct = conv2d_loop(*(a.astype(np.float64) for a in args[:2]), (1, 1), (0,) * 4, (1, 1), 1)
    assert_close(want, np.maximum(direct + args[2][None, :, None, None], 0), tol=1e-5)


def test_private_function_call(rng):
    t = tensor((5,), "f32")
    text = (
        f"func.func private @act(%x: {t}) -> {t} {{\n"
        f"  %r = ai.silu %x : {t}\n  return %r : {t}\n}}\n"
        f"func.func @main(%x: {t}) -> {t} {{\n"
        f"  %y = func.call @act(%x) : ({t}) -> {t}\n"
        f"  %r = func.call @act(%y) : ({t}) -> {t}\n"
        f"  return %r : {t}\n}}\n"
    )
    x = rng.standard_normal(5).astype(np.float32)
    silu = lambda v: v / (1 + np.exp(-v))  # noqa: E731
    assert_close(fusec.reference(text)(x), silu(silu(x.astype(np.float64))), tol=1e-6)


def test_scalar_argument_and_result(rng):
    text = (
        "func.func @f(%x: tensor<f32>, %y: tensor<3xf32>) -> tensor<f32> {\n"
        "  %r = ai.exp %x : tensor<f32>\n  return %r : tensor<f32>\n}\n"
    )
    out = fusec.reference(text)(np.float32(0.5), rng.standard_normal(3).astype(np.float32))
    assert out.shape == () and abs(float(out) - math.exp(0.5)) < 1e-6


def _example(name: str):
    from pathlib import Path

    from fusec.dialect import spec_of
    from fusec.ir.constants import constant_value
    from fusec.ir.module import entry_function

    path = Path(__file__).parents[2] / "examples" / name
    module = fusec.parse(path)
    specs = [spec_of(t) for t in entry_function(module).function_type.inputs.data]
    constants = [constant_value(op) for op in module.walk() if op.name == "arith.constant"]
    return path, module, specs, constants


def test_attention_example_against_formula(rng):
    """examples/attention.mlir = softmax(q k^T * scale) v."""
    path, module, specs, constants = _example("attention.mlir")
    (scale,) = (float(c) for c in constants if c.ndim == 0)
    args = [rng.standard_normal(s.shape).astype(numpy_dtype(s.dtype)) for s in specs]
    q, k, v = (a.astype(np.float64) for a in args)
    want = softmax(q @ np.swapaxes(k, -1, -2) * scale) @ v
    (exact,) = run_reference(module, args, precision="float64")
    assert_close(exact, want, tol=1e-12)
    out = fusec.reference(path)(*args)
    assert out.dtype == args[0].dtype
    assert_close(out, want, tol=NATIVE_TOL[specs[0].dtype])


def test_mlp_block_example_against_formula(rng):
    """examples/mlp_block.mlir = x + gelu(layernorm(x) w1 + b1) w2 + b2."""
    path, module, specs, _ = _example("mlp_block.mlir")
    args = []
    for s in specs:  # weights scaled by 1/sqrt(fan-in) to keep activations O(1)
        scale = 1 / math.sqrt(s.shape[0]) if s.rank == 2 and s.shape[0] > 1 else 1.0
        args.append((rng.standard_normal(s.shape) * scale).astype(numpy_dtype(s.dtype)))
    x, g, b, w1, b1, w2, b2 = (a.astype(np.float64) for a in args)
    h = layernorm(x, g, b, 1e-5) @ w1 + b1
    want = x + (0.5 * h * (1 + _erf(h / 2**0.5))) @ w2 + b2
    (exact,) = run_reference(module, args, precision="float64")
    assert_close(exact, want, tol=1e-12)
    out = fusec.reference(path)(*args)
    assert out.dtype == args[0].dtype
    assert_close(out, want, tol=NATIVE_TOL[specs[0].dtype])


# ---------------------------------------------------------------- bad calls

RELU = (
    "func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf16>) -> tensor<2x3xf32> {\n"
    "  %r = ai.relu %x : tensor<2x3xf32>\n  return %r : tensor<2x3xf32>\n}\n"
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.ones((2, 3), np.float32),), r"^@f takes 2 argument\(s\), got 1$"),
        (
            (np.ones((3, 2), np.float32), np.ones(3, np.float16)),
            r"^@f: argument #0 has shape \(3, 2\), expected \(2, 3\) \(tensor<2x3xf32>\)$",
        ),
        (
            (np.ones((2, 3), np.float16), np.ones(3, np.float16)),
            r"^@f: argument #0 has dtype float16, expected float32 \(tensor<2x3xf32>\)$",
        ),
        (
            (np.ones((2, 3), np.float32), np.ones(3, np.float32)),
            r"^@f: argument #1 has dtype float32, expected float16 \(tensor<3xf16>\)$",
        ),
        ((np.ones((2, 3), np.int32), np.ones(3, np.float16)), r"argument #0 has dtype int32"),
    ],
)
def test_wrong_arguments_raise_fusec_error(args, message):
    with pytest.raises(FusecError) as info:
        fusec.reference(RELU)(*args)
    assert re.search(message, info.value.message), info.value.message
    with pytest.raises(FusecError) as info:
        run_reference(parse_module(RELU), args)
    assert re.search(message, info.value.message), info.value.message


def test_float64_arguments_are_accepted_as_exact_values():
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    out = fusec.reference(RELU)(x, np.ones(3, np.float16))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.maximum(x, 0).astype(np.float32))


def test_bad_precision_and_entry():
    module = parse_module(RELU)
    args = (np.ones((2, 3), np.float32), np.ones(3, np.float16))
    with pytest.raises(FusecError, match="precision must be one of"):
        run_reference(module, args, precision="f16")
    with pytest.raises(FusecError, match=r"no function named '@g' in the module \(functions: @f\)"):
        run_reference(module, args, entry="g")


ROUNDING_CHAIN = """
func.func @f(%x: tensor<257xf32>) -> (tensor<257xf32>, tensor<257xf16>) {
  %h = ai.cast %x : tensor<257xf32> to tensor<257xf16>
  %e = ai.exp %h : tensor<257xf16>
  %r = ai.cast %e : tensor<257xf16> to tensor<257xf32>
  return %r, %e : tensor<257xf32>, tensor<257xf16>
}
"""


def test_rounding_modes_place_the_roundings():
    """none: exact maths; casts: what one fused kernel does; every-op: what op-by-op
    execution does (every 16-bit result stored)."""
    module = fusec.parse(ROUNDING_CHAIN)
    x = np.linspace(-3, 3, 257).astype(np.float32) + np.float32(1e-3)
    h = x.astype(np.float16).astype(np.float64)
    exact = run_reference(module, [x], rounding="none")
    casts = run_reference(module, [x], rounding="casts")
    every = run_reference(module, [x], rounding="every-op")
    np.testing.assert_array_equal(exact[0], np.exp(x.astype(np.float64)))
    # casts: the f16 cast rounds, exp does not (inside a kernel), the f32 cast rounds to f32
    np.testing.assert_array_equal(casts[0], np.exp(h).astype(np.float32).astype(np.float64))
    np.testing.assert_array_equal(casts[1], np.exp(h))
    np.testing.assert_array_equal(every[1], np.exp(h).astype(np.float16).astype(np.float64))
    np.testing.assert_array_equal(every[0], every[1])  # f16 -> f32 is exact
    assert not np.array_equal(exact[0], casts[0])


def test_groups_rounding_rounds_at_fused_results_only():
    text = """
func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
  %h = ai.fused "pointwise" (%x) : (tensor<64xf32>) -> tensor<64xf16> {
  ^bb0(%a: tensor<64xf32>):
    %c = ai.cast %a : tensor<64xf32> to tensor<64xf16>
    %t = ai.tanh %c : tensor<64xf16>
    %s = ai.mul %t, %c : tensor<64xf16> * tensor<64xf16>
    ai.yield %s : tensor<64xf16>
  }
  %r = ai.fused "pointwise" (%h) : (tensor<64xf16>) -> tensor<64xf32> {
  ^bb0(%b: tensor<64xf16>):
    %e = ai.exp %b : tensor<64xf16>
    %f = ai.cast %e : tensor<64xf16> to tensor<64xf32>
    ai.yield %f : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}
"""
    x = np.linspace(-2, 2, 64).astype(np.float32)
    (got,) = run_reference(fusec.parse(text), [x], rounding="groups")
    c = x.astype(np.float16).astype(np.float64)  # the cast rounds
    s = (np.tanh(c) * c).astype(np.float16).astype(np.float64)  # the group result rounds
    want = np.exp(s).astype(np.float32).astype(np.float64)  # exp stays inside: f32 at the end
    np.testing.assert_array_equal(got, want)


def test_lowest_precision_a_result_passed_through():
    from fusec.ir.module import entry_function
    from fusec.tools.runner import lowest_precisions

    text = """
func.func @f(%x: tensor<4xf32>, %y: tensor<4xbf16>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %h = ai.cast %x : tensor<4xf32> to tensor<4xf16>
  %b = ai.cast %h : tensor<4xf16> to tensor<4xf32>
  %z = ai.cast %y : tensor<4xbf16> to tensor<4xf32>
  %s = ai.add %b, %z : tensor<4xf32> * tensor<4xf32>
  %t = ai.exp %x : tensor<4xf32>
  return %b, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
"""
    assert lowest_precisions(entry_function(fusec.parse(text))) == ["f16", "bf16", "f32"]
