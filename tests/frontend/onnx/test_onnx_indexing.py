"""ONNX ``GatherElements`` and ``Hardmax`` imported as ai ops
(``fusec/frontend/onnx_indexing.py``), against onnxruntime on fresh random data:
constant indices (one ai.gather) and indices given at run time (a one-hot select of
float data, one ai.take of integer data), negative ones among them; the refusals are
located."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx import TensorProto, helper, numpy_helper
from onnx_nets import node_model, run_onnxruntime

import fusec
from fusec.errors import FusecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(41)


def _indices(data_shape, index_shape, axis):
    dim = data_shape[axis]
    return RNG.integers(-dim, dim, size=index_shape).astype(np.int64)


def _run(model, feeds, target="reference"):
    got = fusec.compile(fusec.from_onnx(model), target=target)(*feeds.values())
    want = run_onnxruntime(model, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert not np.isnan(got).any()
    return got, want


GATHERS = [  # data shape, indices shape, axis
    ((3, 4), (3, 4), 1),
    ((3, 4), (2, 4), 0),
    ((2, 5, 3), (2, 2, 3), 1),
    ((2, 3, 4), (1, 3, 6), -1),
]


@pytest.mark.parametrize(("data_shape", "index_shape", "axis"), GATHERS)
def test_gather_elements_at_run_time_indices(data_shape, index_shape, axis):
    data = RNG.standard_normal(data_shape).astype(np.float32)
    indices = _indices(data_shape, index_shape, axis)
    model = node_model("GatherElements", {"data": data, "indices": indices}, axis=axis)
    module = fusec.from_onnx(model)
    assert "ai.reduce_sum" in {op.name for op in module.walk()}
    got, want = _run(model, {"data": data, "indices": indices})
    np.testing.assert_array_equal(got, want)  # a select: exact


@pytest.mark.parametrize(("data_shape", "index_shape", "axis"), GATHERS)
def test_gather_elements_at_constant_indices_is_one_gather(data_shape, index_shape, axis):
    data = RNG.standard_normal(data_shape).astype(np.float32)
    indices = _indices(data_shape, index_shape, axis)
    model = node_model("GatherElements", {"data": data}, weights={"indices": indices}, axis=axis)
    names = [op.name for op in fusec.from_onnx(model).walk()]
    assert names.count("ai.gather") == 1 and "ai.reduce_sum" not in names
    got, want = _run(model, {"data": data})
    np.testing.assert_array_equal(got, want)


def test_gather_elements_leaves_out_what_it_does_not_pick():
    """An infinite element that no index names stays out of the result (no 0 * inf)."""
    data = np.array([[1.0, np.inf, 3.0], [np.nan, 5.0, 6.0]], dtype=np.float32)
    indices = np.array([[0, 2], [1, 2]], dtype=np.int64)
    model = node_model("GatherElements", {"data": data, "indices": indices}, axis=1)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(data, indices)
    np.testing.assert_array_equal(got, [[1.0, 3.0], [5.0, 6.0]])


@pytest.mark.slow
def test_gather_elements_and_hardmax_on_the_cpu_target():
    data = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    indices = _indices((2, 5, 3), (2, 2, 3), 1)
    model = node_model("GatherElements", {"data": data, "indices": indices}, axis=1)
    got, want = _run(model, {"data": data, "indices": indices}, target="cpu")
    np.testing.assert_array_equal(got, want)
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    got, want = _run(node_model("Hardmax", {"x": x}, axis=1), {"x": x}, target="cpu")
    np.testing.assert_array_equal(got, want)


def test_out_of_range_constant_indices_are_a_located_error():
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    indices = np.array([[0, 4]], dtype=np.int64)
    model = node_model(
        "GatherElements", {"data": data}, weights={"indices": indices}, axis=1, name="ge"
    )
    with pytest.raises(FusecError, match="out of range") as info:
        fusec.from_onnx(model)
    assert 'node "ge"' in info.value.format()


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
@pytest.mark.parametrize(("data_shape", "index_shape", "axis"), GATHERS)
def test_gather_elements_of_integer_data_at_run_time_indices_is_one_take(
    data_shape, index_shape, axis, dtype, target
):
    """Integer and bool data at run-time indices (negative ones among them): the lookup
    torch.gather lowers to, one ai.take of the flattened data; exact."""
    data = RNG.integers(-50, 50, size=data_shape).astype(dtype)
    indices = _indices(data_shape, index_shape, axis)
    model = node_model("GatherElements", {"data": data, "indices": indices}, axis=axis)
    names = [op.name for op in fusec.from_onnx(model).walk()]
    assert names.count("ai.take") == 1 and "ai.reduce_sum" not in names
    got = fusec.compile(fusec.from_onnx(model), target=target)(data, indices)
    want = run_onnxruntime(model, {"data": data, "indices": indices})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
def test_integer_gather_elements_at_an_index_out_of_range_fails(target):
    """An index outside the axis fails the lookup, as onnxruntime's does, instead of
    reading the next row's element at the same flat position."""
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    indices = np.array([[0, 1], [4, 2]], dtype=np.int64)  # (1, 4): flat 8 is inside
    model = node_model("GatherElements", {"data": data, "indices": indices}, axis=1)
    compiled = fusec.compile(fusec.from_onnx(model), target=target)
    with pytest.raises(FusecError, match="out of range"):
        compiled(data, indices)


def test_float_indices_at_run_time_are_refused_with_the_reason():
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    indices = np.array([[0.0, 1.0]], dtype=np.float32)
    model = node_model("GatherElements", {"data": data, "indices": indices}, axis=1)
    with pytest.raises(FusecError, match="the indices must be integers, got tensor<1x2xf32>"):
        fusec.from_onnx(model)


def _position_ids_model(table: np.ndarray, vocab: int, width: int) -> onnx.ModelProto:
    """RoBERTa's position lookup from ``input_ids`` (HF ``create_position_ids_from_input_ids``
    and the buffered ``token_type_ids``), as the dynamo exporter writes it: positions
    ``cumsum(ids != pad) * (ids != pad) + pad`` index the int64 buffer ``table`` through
    GatherElements, the result is an embedding lookup (Gather) of a float table."""
    pad = 1
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
        helper.make_node("Not", ["is_pad"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["mask"], to=TensorProto.INT32),
        helper.make_node("CumSum", ["mask", "one"], ["running"]),
        helper.make_node("Mul", ["running", "mask"], ["counted"]),
        helper.make_node("Cast", ["counted"], ["counted64"], to=TensorProto.INT64),
        helper.make_node("Add", ["counted64", "pad"], ["positions"]),
        helper.make_node("GatherElements", ["table", "positions"], ["types"], axis=1),
        helper.make_node("Gather", ["embedding", "types"], ["y"]),
    ]
    embedding = RNG.standard_normal((vocab, width)).astype(np.float32)
    graph = helper.make_graph(
        nodes,
        "position_ids",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, (2, 12))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(pad, np.int64), "pad"),
            numpy_helper.from_array(np.array(1, np.int32), "one"),
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(embedding, "embedding"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
def test_position_ids_computed_from_the_ids_index_an_integer_buffer(target):
    """RoBERTa fed ``input_ids``: the computed positions gather from a constant int64
    buffer (random types here, so that every position's entry counts), then a float
    embedding row each; padding tokens among the ids."""
    table = RNG.integers(0, 3, size=(2, 20)).astype(np.int64)
    model = _position_ids_model(table, vocab=3, width=8)
    ids = RNG.integers(0, 50, size=(2, 12)).astype(np.int64)
    ids[0, 9:] = 1  # padding at the end of the first row
    ids[1, 4] = 1
    got = fusec.compile(fusec.from_onnx(model), target=target)(ids)
    np.testing.assert_array_equal(got, run_onnxruntime(model, {"ids": ids})[0])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_hardmax_marks_the_first_maximum(axis):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x[0, 0, :3] = 2.5  # a tie: the first one wins
    got, want = _run(node_model("Hardmax", {"x": x}, axis=axis), {"x": x})
    np.testing.assert_array_equal(got, want)


def test_hardmax_is_an_argmax_against_the_iota():
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    names = [op.name for op in fusec.from_onnx(node_model("Hardmax", {"x": x})).walk()]
    assert {"ai.argmax", "ai.equal", "ai.cast"} <= set(names)
    assert_close(
        fusec.compile(fusec.from_onnx(node_model("Hardmax", {"x": x})), target="reference")(x),
        (x == x.max(axis=-1, keepdims=True)).astype(np.float32),
        tol=0,
    )


def _one_hot_model(indices, axis, depth=5.0, values_constant=False):
    inputs = {"indices": indices}
    weights = {"depth": np.array(depth, np.float32)}
    values = np.array([-0.5, 2.5], np.float32)
    if values_constant:
        weights["values"] = values
    else:
        inputs["values"] = values
    model = node_model("OneHot", inputs, weights=weights, opset=11, axis=axis)
    model.graph.node[0].input[:] = ["indices", "depth", "values"]
    model.graph.output[0].type.tensor_type.elem_type = 1  # FLOAT
    feeds = {"indices": indices} if values_constant else {"indices": indices, "values": values}
    return model, feeds


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32])
def test_one_hot(axis, dtype):
    indices = np.array([[0, 4, -1], [-5, 2, 7]], dtype=dtype)  # 7: out of range, all off
    model, feeds = _one_hot_model(indices, axis)
    got, want = _run(model, feeds)
    np.testing.assert_array_equal(got, want)


def test_one_hot_with_constant_values_and_a_run_time_depth():
    indices = np.array([1, 3], np.int64)
    model, feeds = _one_hot_model(indices, -1, values_constant=True)
    got, want = _run(model, feeds)
    np.testing.assert_array_equal(got, want)
    model.graph.initializer.pop(0)  # depth
    model.graph.input.append(helper.make_tensor_value_info("depth", TensorProto.FLOAT, ()))
    with pytest.raises(FusecError, match="depth is computed at run time"):
        fusec.from_onnx(model)


SCATTERS = {
    # id: (op, data shape, constant indices, updates shape, attributes)
    "elements-axis1": ("ScatterElements", (3, 5), [[1, 4, -1], [0, 2, 3]], (2, 3), {"axis": 1}),
    "elements-add-repeats": (
        "ScatterElements", (4, 3), [[1, 1, 0], [1, 3, 0]], (2, 3), {"reduction": "add"},
    ),
    "elements-max": (
        "ScatterElements", (4, 3), [[2, 0, 1], [2, 0, 3]], (2, 3), {"reduction": "max"},
    ),
    "nd-rows": ("ScatterND", (4, 3, 2), [[2], [0]], (2, 3, 2), {}),
    "nd-elements-mul-repeats": (
        "ScatterND", (3, 4), [[1, 2], [0, 0], [1, 2]], (3,), {"reduction": "mul"},
    ),
    "nd-min-negative": ("ScatterND", (4, 3), [[-1], [1]], (2, 3), {"reduction": "min"}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SCATTERS))
def test_scatter_at_constant_indices(case):
    op, shape, indices, updates_shape, attrs = SCATTERS[case]
    data = RNG.standard_normal(shape).astype(np.float32)
    updates = RNG.standard_normal(updates_shape).astype(np.float32)
    index_array = np.array(indices, np.int64)
    model = node_model(op, {"data": data}, weights={"indices": index_array}, opset=18, **attrs)
    model.graph.input.append(
        helper.make_tensor_value_info("updates", TensorProto.FLOAT, updates_shape)
    )
    model.graph.node[0].input.append("updates")
    got, want = _run(model, {"data": data, "updates": updates})
    assert_close(got, want, tol=1e-6)


def test_scatter_at_run_time_indices_is_refused_with_the_reason():
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    indices = np.array([[0, 1]], np.int64)
    model = node_model(
        "ScatterElements", {"data": data, "indices": indices, "updates": data[:1, :2]}, axis=1
    )
    with pytest.raises(FusecError, match="indices are computed at run time"):
        fusec.from_onnx(model)


# ------------------------------------------------------------------ TopK


def _top_k_model(x, k, **attrs):
    model = node_model("TopK", {"x": x}, outputs=("values", "indices"), opset=11, **attrs)
    model.graph.initializer.append(helper.make_tensor("k", TensorProto.INT64, (1,), [k]))
    model.graph.node[0].input.append("k")
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    return model


def _ties_and_infinities(shape):
    """Random values with repeats (ties go to the lower index) and infinities (exact)."""
    x = RNG.integers(-4, 5, size=shape).astype(np.float32)
    x.reshape(-1)[::7] = -np.inf
    x.reshape(-1)[3::11] = np.inf
    return x


TOP_KS = [  # shape, K, attributes
    ((3, 7), 3, {}),
    ((3, 7), 1, {"largest": 0}),
    ((4, 5, 6), 4, {"axis": 1}),
    ((4, 5, 6), 6, {"axis": -1, "largest": 0}),
    ((2, 9, 2), 9, {"axis": 1, "sorted": 1}),
]


@pytest.mark.parametrize(("shape", "k", "attrs"), TOP_KS)
def test_top_k_matches_onnxruntime(shape, k, attrs):
    """Values and int64 indices in order, ties to the lower index, infinities among
    them, on fresh random data."""
    x = _ties_and_infinities(shape)
    model = _top_k_model(x, k, **attrs)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    want = run_onnxruntime(model, {"x": x})
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.slow  # kernel compiles
@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_on_the_cpu_target(largest):
    x = _ties_and_infinities((3, 4, 10))
    model = _top_k_model(x, 3, axis=2, largest=largest)
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(x)
    for g, w in zip(got, run_onnxruntime(model, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(("k", "reason"), [(0, "K=0 must be in [1, 7]"),
                                           (8, "K=8 must be in [1, 7]")])  # fmt: skip
def test_top_k_out_of_range_is_a_located_error(k, reason):
    model = _top_k_model(RNG.standard_normal((2, 7)).astype(np.float32), k)
    with pytest.raises(FusecError) as caught:
        fusec.from_onnx(model)
    assert f'node "node0": error: TopK: {reason}' in caught.value.format()


def test_top_k_beyond_the_unrolled_rounds_is_refused_with_the_reason():
    from fusec.frontend.onnx_import import UnsupportedOnnx
    from fusec.frontend.onnx_indexing import TOPK_ROUNDS

    k = TOPK_ROUNDS + 1
    model = _top_k_model(RNG.standard_normal((2, 80)).astype(np.float32), k)
    with pytest.raises(UnsupportedOnnx, match=f"K={k}: fusec unrolls TopK up to K={TOPK_ROUNDS}"):
        fusec.from_onnx(model)


# ------------------------------------------------------------------ ReverseSequence


def _reverse_sequence_model(x, lengths, **attrs):
    model = node_model("ReverseSequence", {"x": x}, opset=10, **attrs)
    model.graph.initializer.append(
        helper.make_tensor("lens", TensorProto.INT64, (len(lengths),), lengths)
    )
    model.graph.node[0].input.append("lens")
    return model


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize(
    ("shape", "lengths", "attrs"),
    [((5, 3, 2), [5, 1, 3], {}), ((4, 6), [6, 0, 2, 4], {"batch_axis": 0, "time_axis": 1})],
)
def test_reverse_sequence_matches_onnxruntime(shape, lengths, attrs, target):
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _reverse_sequence_model(x, lengths, **attrs)
    got = fusec.compile(fusec.from_onnx(model), target=target)(x)
    np.testing.assert_array_equal(got, run_onnxruntime(model, {"x": x})[0])


def test_reverse_sequence_lengths_out_of_range_are_a_located_error():
    model = _reverse_sequence_model(np.ones((3, 2), np.float32), [4, 1])
    with pytest.raises(FusecError) as caught:
        fusec.from_onnx(model)
    message = caught.value.format()
    assert "error: ReverseSequence: sequence_lens [4, 1] must be 2 lengths in [0, 3]" in message
