"""The quantized element types and ``ai.quantize`` / ``ai.dequantize`` in the dialect
(issue 31): located verifier messages, the printer/parser round trip of every
quantized type (constants included), the reference executor in both precisions
and roundings, the Python front end, and ``fusec run --check``'s random inputs."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import fusec
from fusec import FusecError
from fusec.dialect import numpy_ops
from fusec.frontend.mlir import parse_module
from fusec.ir.module import entry_function
from fusec.runtime.reference import run_reference
from fusec.tools import runner

RNG = np.random.default_rng(3131)


def _fn(args: str, body: str, result: str) -> str:
    return f"func.func @f({args}) -> {result} {{\n{body}\n  return %r : {result}\n}}\n"


def _quantize(x: str, s: str, z: str, attrs: str = "") -> str:
    dims, quantized = x[len("tensor<") : x.rindex("x") + 1], re.split("[<x]", z[:-1])[-1]
    result = f"tensor<{dims}{quantized}>"
    body = f"  %r = ai.quantize %x, %s, %z {attrs}: {x} * {s} * {z}"
    return _fn(f"%x: {x}, %s: {s}, %z: {z}", body, result)


# (text, message regex): each diagnostic is located at the op (line 2, column 3).
ERRORS = {
    "axis_scale_length": (
        _quantize("tensor<4x6xf32>", "tensor<6xf32>", "tensor<6xi8>", "{axis = 0} "),
        r"operand 'scale' must be a scalar, or 1-D of 4 values \(one per index of axis 0",
    ),
    "block_shape": (
        _quantize("tensor<4x6xf32>", "tensor<4x3xf32>", "tensor<4x3xi8>", "{block_size = 4} "),
        r"operand 'scale' must have shape 4x2 for blocks of 4 along axis 1",
    ),
    "negative_block": (
        _quantize("tensor<4x6xf32>", "tensor<f32>", "tensor<i8>", "{block_size = -1} "),
        r"block_size must be >= 0, got -1",
    ),
    "float_zero_point": (
        _quantize("tensor<4x6xf32>", "tensor<f32>", "tensor<f32>"),
        r"operand 'zero_point' has element type f32; ai.quantize takes f8E4M3FN, f8E5M2, i8, "
        r"ui8, i4, ui4",
    ),
    "zero_point_shape": (
        _quantize("tensor<4x6xf32>", "tensor<4xf32>", "tensor<i8>", "{axis = 0} "),
        r"operand 'zero_point' must have the shape of 'scale' \(4\)",
    ),
    "scale_type": (
        _quantize("tensor<4x6xf32>", "tensor<f16>", "tensor<i8>"),
        r"operand 'scale' has element type f16, expected f32",
    ),
    "axis_range": (
        _quantize("tensor<4x6xf32>", "tensor<4xf32>", "tensor<4xi8>", "{axis = 2} "),
        r"axis 2 is out of range for rank 2",
    ),
    "dequantize_float_input": (
        _fn(
            "%x: tensor<4xf32>, %s: tensor<f32>, %z: tensor<f32>",
            "  %r = ai.dequantize %x, %s, %z : tensor<4xf32> * tensor<f32> * tensor<f32>",
            "tensor<4xf32>",
        ),
        r"operand 'input' has element type f32; ai.dequantize takes f8E4M3FN",
    ),
    "add_of_int8": (
        _fn(
            "%x: tensor<4xi8>", "  %r = ai.add %x, %x : tensor<4xi8> * tensor<4xi8>", "tensor<4xi8>"
        ),
        r"operand 'lhs' has element type i8; ai.add takes f16, bf16, f32, i64, i32",
    ),
    "cast_to_float8": (
        _fn(
            "%x: tensor<4xf32>",
            "  %r = ai.cast %x : tensor<4xf32> to tensor<4xf8E4M3FN>",
            "tensor<4xf8E4M3FN>",
        ),
        r"'ai.cast' op target element type must be one of \('f16', 'bf16', 'f32', 'i64'",
    ),
}


@pytest.mark.parametrize("name", ERRORS)
def test_bad_quantization_is_located(name):
    text, message = ERRORS[name]
    with pytest.raises(FusecError, match=message) as err:
        parse_module(text, "q.mlir")
    location = err.value.location
    assert (location.file, location.line, location.col) == ("q.mlir", 2, 3)


ROUND_TRIP = (
    "func.func @f(%x: tensor<2x8xf32>, %q: tensor<2x8xui8>) -> (tensor<2x8xf8E5M2>,"
    " tensor<2x8xf32>) {\n"
    "  %s = arith.constant dense<[[5.000000e-01, 2.000000e+00], [1.000000e+00,"
    " 2.500000e-01]]> : tensor<2x2xf32>\n"
    "  %z8 = arith.constant dense<[[0.000000e+00, -1.500000e+00], [5.734400e+04,"
    " 1.000000e+00]]> : tensor<2x2xf8E5M2>\n"
    "  %zu = arith.constant dense<[[0, 255], [128, 7]]> : tensor<2x2xui8>\n"
    "  %zi = arith.constant dense<[-128, 127]> : tensor<2xi8>\n"
    "  %e = arith.constant dense<[4.480000e+02, -2.000000e+00]> : tensor<2xf8E4M3FN>\n"
    "  %a = ai.quantize %x, %s, %z8 {saturate = false, block_size = 4 : i64} :"
    " tensor<2x8xf32> * tensor<2x2xf32> * tensor<2x2xf8E5M2>\n"
    "  %b = ai.dequantize %q, %s, %zu {block_size = 4 : i64} : tensor<2x8xui8> *"
    " tensor<2x2xf32> * tensor<2x2xui8>\n"
    "  func.return %a, %b : tensor<2x8xf8E5M2>, tensor<2x8xf32>\n"
    "}"
)


def test_quantized_types_round_trip():
    module = parse_module(ROUND_TRIP, "rt.mlir")
    printed = str(entry_function(module))
    assert printed == ROUND_TRIP
    assert str(entry_function(parse_module(printed, "again.mlir"))) == printed


def _program(dtype: str) -> str:
    """quantize per channel of axis 1 then dequantize: the fake quantization of an input."""
    x, s, z = "tensor<2x3x5xf32>", "tensor<3xf32>", f"tensor<3x{dtype}>"
    q = f"tensor<2x3x5x{dtype}>"
    body = (
        f"  %q = ai.quantize %x, %s, %z : {x} * {s} * {z}\n"
        f"  %r = ai.dequantize %q, %s, %z : {q} * {s} * {z}"
    )
    return _fn(f"%x: {x}, %s: {s}, %z: {z}", body, x)


def _expected(x, scale, zero, dtype):
    """The same maths written out for numpy, separately from numpy_ops."""
    s = scale.reshape(1, 3, 1)
    z = zero.astype(np.float32).reshape(1, 3, 1)
    q = x / s
    if dtype in ("i8", "ui8"):
        info = np.iinfo(np.int8 if dtype == "i8" else np.uint8)
        codes = np.clip(np.rint(q) + z, info.min, info.max)
    else:
        kind = ml_dtypes.float8_e4m3fn if dtype == "f8E4M3FN" else ml_dtypes.float8_e5m2
        big = float(ml_dtypes.finfo(kind).max)
        codes = np.clip(q + z, -big, big).astype(kind).astype(np.float32)
    return ((codes - z) * s).astype(np.float32)


@pytest.mark.parametrize("dtype", ["i8", "ui8", "f8E4M3FN", "f8E5M2"])
@pytest.mark.parametrize(
    ("precision", "rounding"), [("float64", "none"), ("float64", "every-op"), ("native", "none")]
)
def test_fake_quantization_reference(dtype, precision, rounding):
    module = parse_module(_program(dtype), "fq.mlir")
    x = (RNG.standard_normal((2, 3, 5)) * 40).astype(np.float32)
    scale = RNG.uniform(0.1, 2.0, 3).astype(np.float32)
    zero = np.array([0, 3, 9]) if dtype in ("i8", "ui8") else np.zeros(3)
    zero = zero.astype(fusec.ir.dtypes.numpy_dtype(dtype))
    (got,) = run_reference(module, [x, scale, zero], precision=precision, rounding=rounding)
    want = _expected(x, scale, zero, dtype)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert len(np.unique(got)) > 5  # not collapsed to a few codes


def test_round_half_to_even_and_saturation():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0], np.float32)
    zero = np.zeros((), np.int8)
    got = numpy_ops.quantize_linear(x, np.float32(1.0), zero, saturate=True)
    np.testing.assert_array_equal(got, np.array([0, 2, 2, 0, -2, 127, -128], np.int8))
    e4m3 = np.zeros((), ml_dtypes.float8_e4m3fn)
    big = np.array([500.0, -np.inf, np.nan], np.float32)
    clamped = numpy_ops.quantize_linear(big, np.float32(1.0), e4m3, saturate=True)
    assert clamped[:2].astype(np.float32).tolist() == [448.0, -448.0]
    assert np.isnan(clamped[2].astype(np.float32))
    wrapped = numpy_ops.quantize_linear(big, np.float32(1.0), e4m3, saturate=False)
    assert np.isnan(wrapped.astype(np.float32)).all()  # e4m3fn has no inf


def test_traced_quantize_dequantize():
    scale = np.array([0.5, 0.25, 2.0, 1.0], np.float32)

    @fusec.fuse(target="reference")
    def fake_fp8(x):
        q = fusec.ops.quantize(x, scale, "f8E4M3FN", axis=1)
        return fusec.ops.dequantize(q, scale, axis=1)

    x = (RNG.standard_normal((3, 4)) * 100).astype(np.float32)
    got = fake_fp8(x)
    q = np.clip(x / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(got, q.astype(np.float32) * scale)


def test_traced_quantize_names_a_bad_dtype():
    @fusec.fuse(target="reference")
    def f(x):
        return fusec.ops.quantize(x, np.float32(1.0), "i2")

    with pytest.raises(FusecError, match=r"fusec.ops.quantize: dtype must be one of"):
        f(np.ones(3, np.float32))


def test_random_inputs_and_check_of_quantized_arguments():
    """``fusec run --random-inputs --check`` draws codes of every quantized argument type and
    holds quantized results exactly."""
    text = _fn(
        "%w: tensor<4x3xf8E4M3FN>, %q: tensor<4x3xi8>, %s: tensor<3xf32>",
        "  %z = arith.constant dense<0.0> : tensor<3xf8E4M3FN>\n"
        "  %zi = arith.constant dense<0> : tensor<3xi8>\n"
        "  %a = ai.dequantize %w, %s, %z : tensor<4x3xf8E4M3FN> * tensor<3xf32> * "
        "tensor<3xf8E4M3FN>\n"
        "  %b = ai.dequantize %q, %s, %zi : tensor<4x3xi8> * tensor<3xf32> * tensor<3xi8>\n"
        "  %r = ai.add %a, %b : tensor<4x3xf32> * tensor<4x3xf32>",
        "tensor<4x3xf32>",
    )
    fn = entry_function(parse_module(text, "w.mlir"))
    w, q, s = runner.random_inputs(fn, seed=5)
    assert w.dtype == ml_dtypes.float8_e4m3fn and q.dtype == np.int8
    assert len(np.unique(q)) > 6 and np.count_nonzero(w.astype(np.float32)) > 6
    assert runner.lowest_precisions(fn) == ["f32"]
