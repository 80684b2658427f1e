"""Constant folding at ONNX import: shape arithmetic, masks and integer constants.

Each model is built with ``onnx.helper`` the way exporters write it, imported
with fixed input shapes, compared with onnxruntime (on the dynamic model) and
checked to contain no trace of the folded nodes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx import TensorProto, helper, numpy_helper
from onnx_nets import make_model, random, run_onnxruntime, tensor

import fusec
from fusec.errors import FusecError
from fusec.frontend.onnx_fold import evaluate
from fusec.frontend.onnx_import import UnsupportedOnnx, import_onnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(7)


def const(name: str, array) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(array))
    )


def dynamic_input(name: str, dims) -> onnx.ValueInfoProto:
    """A float input whose string dims are dynamic (dim_param)."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))


def mask_model() -> onnx.ModelProto:
    """y = x + where(arange(S)[None, :] <= arange(S)[:, None], 0, -1e4) * ones(shape(x)),
    with S = shape(x)[-1]: a causal mask built from the input's shape, as
    transformers' exports compute it (Shape, Gather, Range, Unsqueeze,
    LessOrEqual, Where, ConstantOfShape, Cast)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        const("minus1", np.int64(-1)),
        helper.make_node("Gather", ["shape", "minus1"], ["s"], axis=0, name="seq_len"),
        const("zero", np.int64(0)),
        const("one", np.int64(1)),
        helper.make_node("Range", ["zero", "s", "one"], ["pos"], name="range"),
        const("ax0", np.array([0], np.int64)),
        const("ax1", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["row"]),
        helper.make_node("Unsqueeze", ["pos", "ax1"], ["col"]),
        helper.make_node("LessOrEqual", ["row", "col"], ["keep"]),
        const("zero_f", np.float32(0.0)),
        const("neg_f", np.float32(-1e4)),
        helper.make_node("Where", ["keep", "zero_f", "neg_f"], ["bias"], name="mask"),
        helper.make_node(
            "ConstantOfShape",
            ["shape"],
            ["ones_i"],
            value=numpy_helper.from_array(np.array([1], np.int64)),
        ),
        helper.make_node("Cast", ["ones_i"], ["ones"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["bias", "ones"], ["scaled"]),
        helper.make_node("Add", ["x", "scaled"], ["y"], name="add_mask"),
    ]
    return make_model(
        nodes,
        [dynamic_input("x", ["batch", 6, 6])],
        [dynamic_input("y", ["batch", 6, 6])],
        [],
        opset=17,
    )


def test_shape_arithmetic_is_folded_and_matches_onnxruntime():
    model = mask_model()
    result = import_onnx(model, input_shapes={"x": (2, 6, 6)})
    ops = {op.name for op in result.module.walk()}
    assert ops == {"builtin.module", "func.func", "arith.constant", "ai.add", "func.return"}
    assert sum(result.evaluated.values()) == len(model.graph.node) - 1  # all but add_mask
    assert result.evaluated["Shape"] == 1 and result.evaluated["Where"] == 1
    x = random(RNG, 2, 6, 6)
    got = fusec.compile(result.module)(x)
    want = run_onnxruntime(model, {"x": x})[0]
    assert_close(got, want, tol=1e-6)


def test_summary_names_the_folded_operators():
    result = import_onnx(mask_model(), input_shapes={"x": (1, 6, 6)})
    summary = result.summary()
    assert summary.startswith("18 nodes, 17 evaluated at import (constant folding): ")
    assert "Range 1" in summary and "Constant 7" in summary


def test_shape_of_a_computed_value_is_its_static_shape():
    """Shape(relu(x)) with start/end (opset 15) folds: every value's shape is static."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["tail"], start=1),
        helper.make_node("Size", ["r"], ["n"]),
        helper.make_node("Cast", ["tail"], ["tail_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["n"], ["n_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["r", "tail_f"], ["m"]),
        helper.make_node("Div", ["m", "n_f"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor("x", (3, 4, 2))],
        [tensor("y", (3, 4, 2))],
        [],
    )
    result = import_onnx(model)
    assert result.evaluated == {"Shape": 1, "Size": 1, "Cast": 2}
    x = random(RNG, 3, 4, 2)
    got = fusec.compile(result.module)(x)
    assert_close(got, run_onnxruntime(model, {"x": x})[0])


def test_integer_initializers_stay_constants_with_weights_as_args():
    """Shape data (int64 initializers) is not a weight: only float initializers become
    arguments, the rest is folded."""
    nodes = [
        helper.make_node("Cast", ["k"], ["k_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "k_f"], ["xk"]),
        helper.make_node("Add", ["xk", "w"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([1, 2, 3], np.int64), "k"),
        numpy_helper.from_array(random(RNG, 3), "w"),
    ]
    model = make_model(
        nodes,
        [tensor("x", (3,))],
        [tensor("y", (3,))],
        inits,
    )
    module = fusec.from_onnx(model, weights_as_args=True)
    fn = next(op for op in module.walk() if op.name == "func.func")
    assert [str(t) for t in fn.function_type.inputs] == ["tensor<3xf32>", "tensor<3xf32>"]
    x, w = random(RNG, 3), numpy_helper.to_array(inits[1])
    assert_close(fusec.compile(module)(x, w), x * [1, 2, 3] + w)


def test_gather_elements_folds_like_numpy():
    """onnx.reference's own GatherElements is wrong here (indices shorter than the
    data along the axis, more than 64 choices): fusec uses take_along_axis."""
    data = np.arange(2 * 100, dtype=np.int64).reshape(2, 100)
    indices = np.array([[3, 99, -1], [0, 50, 7]], np.int64)
    node = helper.make_node("GatherElements", ["d", "i"], ["o"], axis=1)
    (out,) = evaluate(node, [data, indices], 17)
    assert np.array_equal(out, np.take_along_axis(data, indices % 100, axis=1))


# ------------------------------------------------------------------ errors


def _error(model, **kwargs) -> FusecError:
    with pytest.raises(FusecError) as info:
        import_onnx(model, **kwargs)
    return info.value


def embedding_model() -> onnx.ModelProto:
    """A token-id lookup: Gather(table, ids) with int64 ids given at run time."""
    node = helper.make_node("Gather", ["table", "ids"], ["emb"], name="word_embeddings", axis=0)
    relu = helper.make_node("Relu", ["emb"], ["y"])
    return make_model(
        [node, relu],
        [tensor("ids", (2, 5), np.int64)],
        [tensor("y", (2, 5, 4))],
        [numpy_helper.from_array(random(RNG, 10, 4), "table")],
    )


def test_integer_data_at_run_time_is_an_argument_and_a_lookup():
    """int64 ids given at run time: an argument of the function, gathered by ai.take."""
    model = embedding_model()
    module = fusec.from_onnx(model)
    assert "ai.take" in str(module) and "%ids: tensor<2x5xi64>" in str(module)
    ids = np.array([[0, 9, 3, -1, 4], [5, 5, 1, 2, 8]])
    want = run_onnxruntime(model, {"ids": ids})[0]
    np.testing.assert_array_equal(fusec.compile(module)(ids), want)


def test_integer_input_used_by_a_float_op_is_a_dtype_error():
    """A float-only op (Relu) reading an int64 input: the op's operand type is the problem."""
    model = make_model(
        [helper.make_node("Relu", ["ids"], ["y"], name="relu_ids")],
        [tensor("ids", (4,), np.int64)],
        [tensor("y", (4,), np.int64)],
        [],
    )
    err = _error(model)
    assert isinstance(err, UnsupportedOnnx)
    assert err.feature == "dtype" and 'node "relu_ids"' in err.format()
    assert "operand 'input' has element type i64; ai.relu takes f16, bf16, f32" in err.message


def test_an_input_of_a_type_fusec_has_no_tensors_of_is_a_dtype_error_where_used():
    model = make_model(
        [helper.make_node("Cast", ["b"], ["y"], name="cast_bytes", to=TensorProto.FLOAT)],
        [helper.make_tensor_value_info("b", TensorProto.UINT16, [4])],
        [tensor("y", (4,))],
        [],
    )
    err = _error(model)
    assert err.feature == "dtype" and 'node "cast_bytes"' in err.format()
    assert "input 'b' is UINT16 data known only at run time" in err.message


def test_a_quantized_input_is_an_argument_that_only_dequantize_reads():
    """UINT8 inputs are ``ui8`` arguments (issue 31); a Cast of one is refused by name."""
    model = make_model(
        [helper.make_node("Cast", ["b"], ["y"], name="cast_bytes", to=TensorProto.FLOAT)],
        [tensor("b", (4,), np.uint8)],
        [tensor("y", (4,))],
        [],
    )
    err = _error(model)
    assert err.feature == "dtype" and 'node "cast_bytes"' in err.format()
    assert "operand 'input' has element type ui8; ai.cast takes" in err.message


def test_integer_input_whose_shape_alone_is_used_imports():
    """Only Shape reads ``ids``: its shape is a constant; it is still an argument (every
    INT64, INT32 or BOOL graph input is, as onnxruntime takes them)."""
    nodes = [
        helper.make_node("Shape", ["ids"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "sf"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor("x", (3,)), tensor("ids", (3,), np.int64)],
        [tensor("y", (3,))],
        [],
    )
    module = fusec.from_onnx(model)
    x = random(RNG, 3)
    assert_close(fusec.compile(module)(x, np.zeros(3, np.int64)), 3 * x)


def test_dynamic_dimensions_need_input_shapes():
    err = _error(mask_model())
    assert "dynamic dimension ('batch')" in err.message
    assert "--input-shape x=Nx6x6" in err.message


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"x": (2, 6)}, "input 'x' has rank 3, but the shape given for it (2x6) has rank 2"),
        ({"x": (2, 6, 7)}, "input 'x' has dimension 6 at axis 2, but the shape given"),
        ({"x": (2, 6, 6), "y": (1,)}, "input shapes given for 'y', which is not a graph input"),
        ({"x": (0, 6, 6)}, "input 'x' of shape 0x6x6"),
    ],
)
def test_bad_input_shapes(shapes, message):
    assert message in _error(mask_model(), input_shapes=shapes).message


def test_random_operators_are_never_folded():
    node = helper.make_node("RandomNormal", [], ["r"], shape=[3], dtype=TensorProto.FLOAT)
    add = helper.make_node("Add", ["x", "r"], ["y"])
    model = make_model(
        [node, add],
        [tensor("x", (3,))],
        [tensor("y", (3,))],
        [],
    )
    err = _error(model)
    assert err.feature == "operator" and "RandomNormal: unsupported operator" in err.message


def test_a_node_that_fails_to_evaluate_is_located():
    """A Reshape of a constant to an impossible shape: the error says which node."""
    nodes = [
        const("c", np.ones(6, np.float32)),
        const("shape", np.array([4, 2], np.int64)),
        helper.make_node("Reshape", ["c", "shape"], ["r"], name="bad_reshape"),
        helper.make_node("Add", ["x", "r"], ["y"]),
    ]
    model = onnx.helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [tensor("x", (4, 2))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    err = _error(model)
    assert err.format().startswith('<onnx>: node "bad_reshape": error: Reshape: cannot evaluate')
