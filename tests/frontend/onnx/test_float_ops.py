"""ONNX's float operators fusec imports as ai ops or as patterns over them, against
onnxruntime: the activations with their attributes, variadic Sum/Mean, the composite
reductions, LogSoftmax and the normalisations; the refusals say why.

Most cases run on the reference target (what the import means); one model of every
pattern runs on the cpu target too (``slow``: it compiles kernels).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx import TensorProto, helper, numpy_helper
from onnx_nets import node_model, random, run_onnxruntime, tensor

import fusec
from fusec.frontend.onnx_import import UnsupportedOnnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(29)


def r(*shape, low=None):
    return random(RNG, *shape, dtype=np.float32, low=low)


def _check(model: onnx.ModelProto, feeds: dict, target: str = "reference", ops=()):
    module = fusec.from_onnx(model)
    names = {op.name for op in module.walk()}
    assert set(ops) <= names, names
    got = fusec.compile(module, target=target)(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    want = run_onnxruntime(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert_close(g, w, tol=1e-4)


ACTIVATIONS = [
    ("LeakyRelu", {"alpha": 0.3}, "ai.leaky_relu"),
    ("Elu", {"alpha": 0.7}, "ai.elu"),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}, "ai.selu"),
    ("Celu", {"alpha": 0.5}, "ai.celu"),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "ai.hard_sigmoid"),
    ("ThresholdedRelu", {"alpha": 0.2}, "ai.thresholded_relu"),
    ("HardSwish", {}, "ai.hard_swish"),
    ("Softplus", {}, "ai.softplus"),
    ("Softsign", {}, "ai.softsign"),
    ("Mish", {}, "ai.mish"),
    ("Round", {}, "ai.round"),
    ("Sin", {}, "ai.sin"),
]


@pytest.mark.parametrize(("op_type", "attrs", "op"), ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_with_its_attributes(op_type, attrs, op):
    x = r(3, 17) * 4
    x[0, :4] = [0.5, 1.5, 2.5, -2.5]  # Round: halves to even
    _check(node_model(op_type, {"x": x}, opset=22, **attrs), {"x": x}, ops=[op])


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_swish(alpha):
    x = r(3, 17) * 4
    model = node_model("Swish", {"x": x}, opset=24, alpha=alpha)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    want = x.astype(np.float64) / (1 + np.exp(-alpha * x.astype(np.float64)))
    assert_close(got, want.astype(np.float32), tol=1e-4)


def test_prelu_broadcasts_its_slope():
    x, slope = r(2, 3, 4), r(3, 1)
    _check(
        node_model("PRelu", {"x": x, "slope": slope}), {"x": x, "slope": slope}, ops=["ai.prelu"]
    )


@pytest.mark.parametrize("op_type", ["Sum", "Mean"])
def test_variadic_sum_and_mean_broadcast(op_type):
    feeds = {"a": r(2, 3), "b": r(3), "c": r(2, 1)}
    _check(node_model(op_type, feeds), feeds, ops=["ai.add"])


REDUCTIONS = ["ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
              "ReduceLogSumExp", "ReduceProd"]  # fmt: skip


@pytest.mark.parametrize("op_type", REDUCTIONS)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_over_axes(op_type, keepdims):
    x = r(2, 5, 3, low=0.1) if op_type == "ReduceLogSum" else r(2, 5, 3)
    axes = numpy_helper.from_array(np.array([0, 2], dtype=np.int64), "axes")
    model = node_model(op_type, {"x": x}, opset=18, keepdims=keepdims)
    model.graph.initializer.append(axes)
    model.graph.node[0].input.append("axes")
    _check(model, {"x": x})


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape", [(7,), (3, 1, 9), (2, 16, 3)])
def test_reduce_prod_over_every_axis(shape, target):
    """No axes: every axis halved pairwise (odd sizes carry their last element); values
    near 1 keep a product of 96 elements in float32's range."""
    x = r(*shape, low=0.6)
    _check(node_model("ReduceProd", {"x": x}, opset=18, keepdims=0), {"x": x}, target=target)


def test_log_sum_exp_is_stable_and_keeps_infinities():
    x = np.array([[500.0, 499.0, -3.0], [-np.inf, 2.0, 1.0], [np.inf, 1.0, 0.0]], np.float32)
    model = node_model("ReduceLogSumExp", {"x": x}, opset=18, keepdims=0)
    model.graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    model.graph.node[0].input.append("axes")
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    want = np.array([500.0 + np.log1p(np.exp(-1.0)), 2.0 + np.log1p(np.exp(-1.0)), np.inf])
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("axis", [-1, 1])
def test_log_softmax_does_not_underflow(axis):
    x = r(2, 4, 6) * 40  # probabilities below float32's range: log(softmax) would be -inf
    got = fusec.compile(fusec.from_onnx(node_model("LogSoftmax", {"x": x}, axis=axis)),
                        target="reference")(x)  # fmt: skip
    shifted = x.astype(np.float64) - x.max(axis=axis, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    assert np.isfinite(got).all()
    assert_close(got, want.astype(np.float32), tol=1e-4)


NORMALISATIONS = [
    ("InstanceNormalization", {"x": r(2, 3, 4, 5)}, {"s": r(3), "b": r(3)}, {}, 22),
    ("GroupNormalization", {"x": r(2, 6, 4, 3)}, {"s": r(6), "b": r(6)}, {"num_groups": 3}, 21),
    ("GroupNormalization", {"x": r(2, 6, 5)}, {"s": r(2), "b": r(2)}, {"num_groups": 2}, 18),
    ("RMSNormalization", {"x": r(2, 3, 8)}, {"s": r(8)}, {"axis": -1}, 23),
    ("RMSNormalization", {"x": r(2, 3, 8)}, {"s": r(3, 8)}, {"axis": 1, "epsilon": 0.1}, 23),
    ("LpNormalization", {"x": r(3, 7)}, {}, {"axis": 1, "p": 1}, 22),
    ("LpNormalization", {"x": r(3, 7)}, {}, {"axis": 0, "p": 2}, 22),
]


@pytest.mark.parametrize("case", NORMALISATIONS, ids=lambda c: f"{c[0]}-{c[4]}")
def test_normalisation(case):
    op_type, inputs, weights, attrs, opset = case
    _check(node_model(op_type, inputs, weights=weights, opset=opset, **attrs), inputs)


def test_lp_normalization_of_a_zero_vector_is_zero():
    x = np.zeros((2, 3), np.float32)
    x[1] = [3.0, 4.0, 0.0]
    got = fusec.compile(fusec.from_onnx(node_model("LpNormalization", {"x": x}, axis=1)),
                        target="reference")(x)  # fmt: skip
    np.testing.assert_array_equal(got, np.float32([[0, 0, 0], [0.6, 0.8, 0]]))


@pytest.mark.slow
def test_the_patterns_on_the_cpu_target():
    """One graph of the composite forms through fusion and the cpu templates."""
    x, scale, bias = r(2, 6, 4, 3), r(6), r(6)
    nodes = [
        helper.make_node("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=3),
        helper.make_node("Mish", ["g"], ["m"]),
        helper.make_node("LogSoftmax", ["m"], ["ls"], axis=-1),
        helper.make_node("ReduceLogSumExp", ["ls", "axes"], ["y"], keepdims=1),
        helper.make_node("HardSwish", ["g"], ["h"]),
        helper.make_node("ReduceL2", ["h", "axes"], ["z"], keepdims=0),
        helper.make_node("ReduceProd", ["h", "axes"], ["p"], keepdims=1),
    ]
    axes = numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "axes")
    graph = helper.make_graph(
        nodes, "patterns", [tensor("x", x.shape, x.dtype)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z", "p")],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b"), axes],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    _check(model, {"x": x}, target="cpu")


# ------------------------------------------------------------------ refusals


def _refusal(model: onnx.ModelProto) -> UnsupportedOnnx:
    with pytest.raises(UnsupportedOnnx) as caught:
        fusec.from_onnx(model)
    return caught.value


def _dropout(training: bool, ratio: float = 0.5, mask: bool = False) -> onnx.ModelProto:
    x = r(2, 3)
    outputs = ("y", "mask") if mask else ("y",)
    model = node_model("Dropout", {"x": x}, outputs=outputs, opset=13)
    model.graph.initializer.extend([
        numpy_helper.from_array(np.array(ratio, np.float32), "ratio"),
        numpy_helper.from_array(np.array(training), "training"),
    ])  # fmt: skip
    model.graph.node[0].input.extend(["ratio", "training"])
    if mask:
        model.graph.output[1].type.tensor_type.elem_type = TensorProto.BOOL
    return model


def test_dropout_in_inference_is_the_identity():
    module = fusec.from_onnx(_dropout(training=False))
    assert not [op for op in module.walk() if op.name.startswith("ai.")]
    module = fusec.from_onnx(_dropout(training=True, ratio=0.0))  # drops nothing
    assert not [op for op in module.walk() if op.name.startswith("ai.")]


@pytest.mark.parametrize(("training", "ratio"), [(False, 0.5), (True, 0.0)])
def test_dropout_that_drops_nothing_has_a_mask_of_true(training, ratio):
    """Inference, or training at ratio 0: the identity and a constant all-true mask,
    as onnxruntime gives them."""
    model = _dropout(training=training, ratio=ratio, mask=True)
    x = r(2, 3)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    want = run_onnxruntime(model, {"x": x})
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert got[1].all()


def test_dropout_in_training_is_refused_with_a_reason():
    err = _refusal(_dropout(training=True))
    assert err.feature == "attribute" and "training_mode=1 with a ratio of 0.5" in err.message


def test_an_unsupported_p_is_refused():
    err = _refusal(node_model("LpNormalization", {"x": r(2, 3)}, p=3))
    assert err.feature == "attribute" and "p=3" in err.message


# ------------------------------------------------------------------ data movement


def _with_constants(model: onnx.ModelProto, **constants: np.ndarray) -> onnx.ModelProto:
    """``model`` with extra node inputs that are initializers (in keyword order)."""
    for name, value in constants.items():
        model.graph.initializer.append(numpy_helper.from_array(value, name))
        model.graph.node[0].input.append(name)
    return model


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_modes(mode):
    x = r(2, 3, 4)
    pads = np.array([0, 2, 1, 1, -1 if mode == "constant" else 2, 2], np.int64)
    constants = {"pads": pads, "value": np.array(1.5, np.float32)}
    if mode != "constant":
        constants.pop("value")
    model = _with_constants(node_model("Pad", {"x": x}, opset=19, mode=mode), **constants)
    _check(model, {"x": x})


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("rank", [0, 1])
def test_pad_with_a_constant_value_computed_at_run_time(rank, target):
    """The value (a graph input, rank 0 or 1 of one element) broadcast into the pad
    blocks (ai.expand), as Attention's expanded form pads its mask with -inf."""
    x, value = r(2, 3, 4), np.full((1,) * rank, -np.inf, np.float32)
    model = node_model("Pad", {"x": x, "value": value}, opset=19)
    model = _with_constants(model, pads=np.array([0, 2, 1, 1, -1, 2], np.int64))
    model.graph.node[0].input[:] = ["x", "pads", "value"]
    _check(model, {"x": x, "value": value}, target=target, ops=["ai.expand"])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_trilu_of_a_value_computed_at_run_time(upper, k):
    x = r(2, 4, 5)
    model = _with_constants(node_model("Trilu", {"x": x}, upper=upper), k=np.array(k, np.int64))
    _check(model, {"x": x}, ops=["ai.where"])


@pytest.mark.parametrize(
    ("transform", "rounding", "scales"),
    [
        ("half_pixel", "round_prefer_floor", [1.0, 1.0, 2.0, 1.5]),
        ("asymmetric", "floor", [1.0, 1.0, 0.5, 3.0]),
        ("align_corners", "round_prefer_ceil", [1.0, 1.0, 1.7, 2.0]),
        ("pytorch_half_pixel", "ceil", [1.0, 1.0, 0.6, 2.0]),
    ],
)
def test_resize_nearest(transform, rounding, scales):
    x = r(1, 2, 5, 4)
    model = node_model(
        "Resize", {"x": x}, opset=19, mode="nearest",
        coordinate_transformation_mode=transform, nearest_mode=rounding,
    )  # fmt: skip
    model.graph.node[0].input.append("")  # no roi
    _check(_with_constants(model, scales=np.array(scales, np.float32)), {"x": x})


def test_resize_nearest_with_antialias_is_refused_with_a_reason():
    """(Linear and cubic: tests/frontend/onnx/test_onnx_resize.py.)"""
    x = r(1, 2, 5, 4)
    model = node_model("Resize", {"x": x}, opset=19, mode="nearest", antialias=1)
    model.graph.node[0].input.append("")
    err = _refusal(_with_constants(model, scales=np.array([1, 1, 0.5, 0.5], np.float32)))
    assert err.feature == "attribute" and "antialias" in err.message


@pytest.mark.parametrize(
    ("op_type", "attrs"),
    [("DepthToSpace", {"mode": "DCR"}), ("DepthToSpace", {"mode": "CRD"}), ("SpaceToDepth", {})],
)  # SpaceToDepth's CRD mode: the node suite (onnxruntime has no such attribute)
def test_depth_and_space(op_type, attrs):
    x = r(2, 8, 4, 6)
    model = node_model(op_type, {"x": x}, blocksize=2, **attrs)
    _check(model, {"x": x}, ops=["ai.transpose"])


@pytest.mark.parametrize("inverse", ["Reciprocal", "Div"])
def test_exported_rms_norm_pattern(inverse):
    """Llama's RMSNorm as exporters write it: x * 1/sqrt(mean(x^2) + eps) * w (Pow,
    ReduceMean, Add, Sqrt, then Reciprocal and Mul, or Div)."""
    x, w = r(2, 5, 16), r(16)
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
    ]
    if inverse == "Reciprocal":
        nodes += [helper.make_node("Reciprocal", ["rms"], ["inv"]),
                  helper.make_node("Mul", ["x", "inv"], ["n"])]  # fmt: skip
    else:
        nodes.append(helper.make_node("Div", ["x", "rms"], ["n"]))
    nodes.append(helper.make_node("Mul", ["n", "w"], ["y"]))
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array([-1], np.int64), "axes"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
        numpy_helper.from_array(w, "w"),
    ]
    graph = helper.make_graph(
        nodes, "rms", [tensor("x", x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    _check(model, {"x": x})
