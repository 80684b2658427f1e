"""ONNX ``SwiGLU`` and ``RotaryEmbedding`` imported as ai ops
(``fusec/frontend/onnx_llm.py``), and Split with an empty part (RoPE graphs), against
onnx's reference evaluator on fresh random inputs; the refusals are located."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import fusec
from fusec.errors import FusecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64
RNG = np.random.default_rng(23)


def _model(op_type, inputs, opset, initializers=(), name="node", **attrs) -> onnx.ModelProto:
    names = [n for n, _, _ in inputs] + [t.name for t in initializers]
    node = helper.make_node(op_type, names, ["y"], name=name, **attrs)
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info("y", inputs[0][1], None)],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _feeds(inputs) -> dict[str, np.ndarray]:
    feeds = {}
    for name, kind, shape in inputs:
        if kind == I64:
            feeds[name] = RNG.integers(0, 6, size=shape).astype(np.int64)
        else:
            dtype = np.float16 if kind == F16 else np.float32
            feeds[name] = RNG.standard_normal(shape).astype(dtype)
    return feeds


def _check(model, feeds, target="reference", tol=1e-5):
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = fusec.compile(fusec.from_onnx(model), target=target)(*feeds.values())
    assert got.dtype == want.dtype and got.shape == want.shape
    assert not np.isnan(got).any()
    assert_close(got, want, tol=tol)


@pytest.mark.parametrize(("alpha", "kind"), [(1.0, F32), (1.7, F32), (1.0, F16)])
def test_swiglu(alpha, kind):
    inputs = [("a", kind, (3, 8)), ("b", kind, (3, 8))]
    model = _model("SwiGLU", inputs, 28, alpha=alpha)
    _check(model, _feeds(inputs), tol=1e-2 if kind == F16 else 1e-5)


def test_swiglu_of_two_shapes_is_a_located_error():
    model = _model("SwiGLU", [("a", F32, (3, 8)), ("b", F32, (3, 4))], 28, name="glu")
    with pytest.raises(FusecError, match="must have one type and shape") as info:
        fusec.from_onnx(model)
    assert 'node "glu"' in info.value.format()


B, H, S, D = 2, 3, 5, 8
ROPE = {
    # id: (input shape, position ids given at run time, attributes)
    "4d": ((B, H, S, D), True, {}),
    "4d-interleaved": ((B, H, S, D), True, {"interleaved": 1}),
    "3d-partial": ((B, S, H * D), True, {"num_heads": H, "rotary_embedding_dim": 4}),
    "4d-interleaved-partial": ((B, H, S, D), True, {"interleaved": 1, "rotary_embedding_dim": 6}),
    "no-ids": ((B, H, S, D), False, {}),
}


def _rope(case: str, constant_ids: bool = False):
    shape, ids, attrs = ROPE[case]
    half = (attrs.get("rotary_embedding_dim") or D) // 2
    cache = (10, half) if ids else (B, S, half)
    inputs = [("x", F32, shape), ("cos", F32, cache), ("sin", F32, cache)]
    feeds = _feeds(inputs)
    initializers = []
    if ids and constant_ids:
        positions = RNG.integers(0, 10, size=(B, S)).astype(np.int64)
        initializers.append(numpy_helper.from_array(positions, "ids"))
    elif ids:
        inputs.append(("ids", I64, (B, S)))
        feeds["ids"] = RNG.integers(0, 10, size=(B, S)).astype(np.int64)
    return _model("RotaryEmbedding", inputs, 23, initializers, **attrs), feeds


@pytest.mark.parametrize("case", sorted(ROPE))
def test_rotary_embedding(case):
    model, feeds = _rope(case)
    _check(model, feeds)


def test_rotary_embedding_at_constant_ids_gathers_the_cache_rows():
    model, feeds = _rope("4d", constant_ids=True)
    names = [op.name for op in fusec.from_onnx(model).walk()]
    assert "ai.gather" in names and "ai.take" not in names
    _check(model, feeds)


@pytest.mark.slow
def test_rotary_embedding_on_the_cpu_target():
    model, feeds = _rope("4d-interleaved-partial")
    _check(model, feeds, target="cpu", tol=1e-4)


def test_an_odd_rotary_dim_is_a_located_error():
    model, _ = _rope("4d")
    model.graph.node[0].attribute.append(helper.make_attribute("rotary_embedding_dim", 5))
    with pytest.raises(FusecError, match="must be even"):
        fusec.from_onnx(model)


def test_a_split_part_of_size_zero_is_left_out_by_concat():
    x = helper.make_tensor_value_info("x", F32, (2, 6))
    sizes = numpy_helper.from_array(np.array([6, 0], np.int64), "sizes")
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["kept", "empty"], axis=1),
        helper.make_node("Concat", ["kept", "empty"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "split", [x], [helper.make_tensor_value_info("y", F32, None)], [sizes]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"x": RNG.standard_normal((2, 6)).astype(np.float32)}
    _check(model, feeds)
    model.graph.output[0].name = "empty"  # an empty tensor as a result: refused, located
    with pytest.raises(FusecError, match="zero-size dimension"):
        fusec.from_onnx(model)


def _causal_conv(k: int, past: bool, bias: bool, activation: str = "none"):
    inputs = [("x", F32, (2, 4, 7)), ("w", F32, (4, 1, k))]
    names = ["x", "w", "b" if bias else "", "past" if past else ""]
    if bias:
        inputs.append(("b", F32, (4,)))
    if past:
        inputs.append(("past", F32, (2, 4, k - 1)))
    while names[-1] == "":
        names.pop()
    node = helper.make_node(
        "CausalConvWithState", names, ["y", "state"], name="ccs", activation=activation
    )
    graph = helper.make_graph(
        [node],
        "ccs",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, F32, None) for o in ("y", "state")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    model.ir_version = 10
    return model, _feeds(inputs)


@pytest.mark.parametrize(
    ("k", "past", "bias", "activation"),
    [(3, False, False, "none"), (4, True, True, "silu"), (2, True, False, "swish")],
)
def test_causal_conv_with_state(k, past, bias, activation):
    model, feeds = _causal_conv(k, past, bias, activation)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(*feeds.values())
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and not np.isnan(g).any()
        assert_close(g, w, tol=1e-5)


def test_causal_conv_of_kernel_one_is_refused():
    model, _ = _causal_conv(1, False, False)
    with pytest.raises(FusecError, match="kernel of size 1"):
        fusec.from_onnx(model)


@pytest.mark.slow
def test_causal_conv_decode_step_on_the_cpu_target():
    """CausalConvWithState's decode step (input length 1): a depthwise conv with a 1 x 1
    output and a bias_add epilogue (it asserted 'row segments need contiguous rows')."""
    model, feeds = _causal_conv(4, True, True)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 1
    feeds["x"] = feeds["x"][:, :, :1].copy()
    want = ReferenceEvaluator(model).run(None, feeds)
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(*feeds.values())
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, tol=1e-4)
