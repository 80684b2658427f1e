"""``ai.moe_experts`` (issue 31): its shape function, its reference against the
definition token by token, and its errors."""

from __future__ import annotations

import numpy as np
import pytest
from experts_cases import dense_moe, moe_inputs, moe_text

import fusec
from fusec.dialect import ops as ai
from fusec.dialect import shapes
from fusec.dialect.shapes import ShapeError, TensorSpec
from fusec.errors import FusecError


def _specs(tokens=6, width=8, hidden=5, count=4, k=2):
    return [
        TensorSpec((tokens, width), "f32"),
        TensorSpec((tokens, k), "f32"),
        TensorSpec((tokens, k), "i64"),
        TensorSpec((count, 2 * hidden, width), "f32"),
        TensorSpec((count, width, hidden), "f32"),
    ]


def test_shape_is_the_tokens():
    assert shapes.moe_experts(*_specs()) == TensorSpec((6, 8), "f32")


@pytest.mark.parametrize(
    ("index", "spec", "message"),
    [
        (0, TensorSpec((6, 8, 1), "f32"), "operand 'input' must have rank 2"),
        (1, TensorSpec((5, 2), "f32"), "must both be (6, k)"),
        (2, TensorSpec((6, 2), "f32"), "operand 'experts' has element type f32"),
        (1, TensorSpec((6, 2), "i64"), "operand 'weights' has element type i64"),
        (3, TensorSpec((4, 9, 8), "f32"), "must be (E, 2F, 8)"),
        (4, TensorSpec((4, 8, 4), "f32"), "expected 4x8x5 (E, D, F)"),
        (4, TensorSpec((4, 8, 5), "f16"), "operand 'down' has element type f16"),
    ],
)
def test_shape_errors_name_the_operand(index, spec, message):
    specs = _specs()
    specs[index] = spec
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        shapes.moe_experts(*specs)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_reference_is_the_definition(k):
    args = moe_inputs(7, 8, 5, 6, k, seed=k)
    got = fusec.reference(moe_text(7, 8, 5, 6, k))(*args)
    want = dense_moe(*args)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6


def test_reference_rounds_the_hidden_values_to_half():
    args = moe_inputs(5, 16, 8, 4, 2, dtype="f16", seed=3)
    got = fusec.reference(moe_text(5, 16, 8, 4, 2, dtype="f16"))(*args)
    assert got.dtype == np.float16
    want = dense_moe(*args)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


@pytest.mark.parametrize("bad", [4, -5])
def test_an_expert_index_out_of_range_is_an_error(bad):
    args = moe_inputs(3, 8, 5, 4, 2)
    args[2][1, 0] = bad
    with pytest.raises(FusecError, match=f"expert index {bad} is out of range for 4 experts"):
        fusec.reference(moe_text(3, 8, 5, 4, 2))(*args)


def test_op_prints_and_parses_back():
    module = fusec.parse(moe_text(3, 8, 5, 4, 2, index="i32"))
    (op,) = [o for o in module.walk() if isinstance(o, ai.MoEExpertsOp)]
    assert "ai.moe_experts %x, %w, %e, %gu, %dn :" in str(module)
    assert op.result_dtype() == "f32"
