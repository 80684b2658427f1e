"""Dialect features added for the ONNX operators: ``ai.sqrt`` and 1-D ``ai.matmul``."""

from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.dialect.ops import MatmulOp, SqrtOp
from fusec.dialect.shapes import ShapeError, TensorSpec, matmul

F32 = "f32"


def spec(*shape):
    return TensorSpec(tuple(shape), F32)


@pytest.mark.parametrize(
    ("a", "b", "out"),
    [
        ((5,), (5,), ()),
        ((5,), (5, 3), (3,)),
        ((5,), (2, 5, 3), (2, 3)),
        ((4, 5), (5,), (4,)),
        ((2, 1, 4, 5), (5,), (2, 1, 4)),
        ((3, 4, 5), (5, 6), (3, 4, 6)),
    ],
)
def test_matmul_follows_numpy_for_1d_operands(a, b, out):
    assert matmul(spec(*a), spec(*b)).shape == out
    assert np.matmul(np.ones(a), np.ones(b)).shape == out


@pytest.mark.parametrize(
    ("a", "b", "kwargs", "message"),
    [
        ((5,), (4,), {}, "inner dimensions do not match"),
        ((5,), (5, 3), {"transpose_a": True}, "operand 'lhs' is 1-D"),
        ((3, 5), (5,), {"transpose_b": True}, "operand 'rhs' is 1-D"),
        ((), (5,), {}, "operand 'lhs' must have rank >= 1"),
    ],
)
def test_matmul_1d_errors(a, b, kwargs, message):
    with pytest.raises(ShapeError, match=message):
        matmul(spec(*a), spec(*b), **kwargs)


def test_1d_matmul_and_sqrt_parse_print_and_run():
    text = """func.func @f(%a: tensor<4xf32>, %b: tensor<2x4x3xf32>)
    -> (tensor<2x3xf32>, tensor<4xf32>) {
  %r = ai.matmul %a, %b : tensor<4xf32> * tensor<2x4x3xf32>
  %s = ai.sqrt %a : tensor<4xf32>
  func.return %r, %s : tensor<2x3xf32>, tensor<4xf32>
}
"""
    module = fusec.parse(text)
    assert str(fusec.parse(str(module))) == str(module)
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    b = rng.normal(size=(2, 4, 3)).astype(np.float32)
    r, s = fusec.reference(module)(a, b)
    assert np.allclose(r, np.matmul(a, b), rtol=1e-6) and np.allclose(s, np.sqrt(a), rtol=1e-6)
    ops = [op for op in module.walk() if isinstance(op, (MatmulOp, SqrtOp))]
    assert [type(op) for op in ops] == [MatmulOp, SqrtOp]


def test_sqrt_of_a_negative_is_nan_in_the_reference():
    module = fusec.parse("""func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %s = ai.sqrt %a : tensor<2xf32>
  func.return %s : tensor<2xf32>
}
""")
    out = fusec.reference(module)(np.array([-1.0, 4.0], np.float32))
    assert np.isnan(out[0]) and out[1] == 2.0


def test_sqrt_verifier_rejects_a_wrong_result_type():
    with pytest.raises(fusec.FusecError, match="does not match the inferred type"):
        fusec.parse("""func.func @f(%a: tensor<2xf32>) -> tensor<2xf16> {
  %s = "ai.sqrt"(%a) : (tensor<2xf32>) -> tensor<2xf16>
  func.return %s : tensor<2xf16>
}
""")
