"""ONNX ``ConvTranspose`` as an ai.conv2d of a zero-inserted input
(``fusec/frontend/onnx_conv_transpose.py``): strides, dilations, groups, pads (negative
conv paddings crop), output_padding, output_shape and auto_pad, 1-D and 2-D, run-time
and constant weights, against onnxruntime on fresh random inputs; the refusals say why.

The reference target checks what the import means; the cpu target runs a sample (the
conv template compiles kernels) and the slow lane the rest.
"""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from onnx_nets import node_model, random, run_onnxruntime

import fusec
from fusec.errors import FusecError
from fusec.frontend.onnx_import import UnsupportedOnnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(31)

#: (id, input shape, weight shape, attributes)
CASES = [
    ("plain", (1, 2, 4, 5), (2, 3, 3, 3), {}),
    ("stride2", (2, 3, 4, 3), (3, 2, 3, 2), {"strides": [2, 2]}),
    ("stride32_pads", (1, 2, 5, 4), (2, 2, 3, 3), {"strides": [3, 2], "pads": [1, 2, 0, 1]}),
    ("dilations", (1, 2, 4, 4), (2, 2, 2, 3), {"dilations": [2, 1], "strides": [1, 2]}),
    ("groups", (1, 4, 3, 4), (4, 3, 3, 2), {"group": 2, "strides": [2, 1]}),
    ("depthwise", (2, 3, 5, 5), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [1] * 4}),
    ("output_padding", (1, 2, 3, 3), (2, 2, 3, 3),
     {"strides": [3, 2], "output_padding": [1, 1], "pads": [0, 1, 1, 0]}),
    ("output_shape", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ("output_shape_crops", (1, 2, 4, 4), (2, 2, 3, 3),
     {"strides": [2, 2], "output_shape": [6, 7]}),
    ("same_upper", (1, 2, 3, 4), (2, 2, 3, 2), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("same_lower", (1, 2, 3, 4), (2, 2, 3, 2), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ("pads_crop_everything_but_one", (1, 1, 2, 2), (1, 1, 2, 2), {"pads": [1, 1, 1, 1]}),
    ("one_d", (2, 3, 6), (3, 2, 3), {"strides": [2], "pads": [1, 0], "output_padding": [1]}),
]  # fmt: skip


def _model(x_shape, w_shape, attrs, *, constant_weight=False, bias=True, dtype=np.float32):
    x = random(RNG, *x_shape, dtype=dtype)
    w = random(RNG, *w_shape, dtype=dtype)
    b = random(RNG, w_shape[1] * attrs.get("group", 1), dtype=dtype)
    inputs = {"x": x} if constant_weight else {"x": x, "w": w}
    weights = {"w": w} if constant_weight else {}
    if bias:
        (weights if constant_weight else inputs)["b"] = b
    model = node_model("ConvTranspose", inputs, weights=weights, opset=22, **attrs)
    return model, inputs


def _check(model, feeds, target="reference", tol=1e-4):
    got = fusec.compile(fusec.from_onnx(model), target=target)(*feeds.values())
    (want,) = run_onnxruntime(model, feeds)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    assert_close(got, want, tol=tol)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, attrs):
    _check(*_model(x_shape, w_shape, attrs))


@pytest.mark.parametrize("bias", [True, False])
def test_a_constant_weight_is_flipped_at_import(bias):
    model, feeds = _model((1, 4, 3, 3), (4, 2, 3, 3), {"group": 2, "strides": [2, 2]},
                          constant_weight=True, bias=bias)  # fmt: skip
    names = [op.name for op in fusec.from_onnx(model).walk()]
    assert "ai.transpose" not in names and "ai.slice" not in names, names
    _check(model, feeds)


def test_float16():
    model, feeds = _model((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2]}, dtype=np.float16)
    _check(model, feeds, tol=1e-2)


@pytest.mark.slow  # kernel compiles
@pytest.mark.parametrize("case", ["stride2", "groups", "one_d"])
def test_conv_transpose_on_the_cpu_target(case):
    (_, x_shape, w_shape, attrs) = next(c for c in CASES if c[0] == case)
    _check(*_model(x_shape, w_shape, attrs), target="cpu")


@pytest.mark.slow
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_conv_transpose_on_the_cpu_target_every_case(x_shape, w_shape, attrs):
    _check(*_model(x_shape, w_shape, attrs), target="cpu")


#: (input, weight, attributes, the reason, whether it is a missing feature rather than
#: an invalid node)
REFUSALS = [
    ((1, 1, 3, 4, 5), (1, 2, 3, 3, 3), {}, "only 1-D and 2-D ConvTranspose", True),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"auto_pad": "FOO"}, "auto_pad='FOO' is not supported", True),
    ((1, 3, 4, 4), (2, 2, 3, 3), {}, "needs 3 input channels in 1 groups", False),
    ((1, 2, 2, 2), (2, 2, 1, 1), {"pads": [1, 1, 1, 1]}, "the pads leave no output", False),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"strides": [0, 1]}, "strides [0, 1] must be 2 values", False),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "reason", "feature"), REFUSALS)
def test_refusals_say_why(x_shape, w_shape, attrs, reason, feature):
    model, _ = _model(x_shape, w_shape, attrs)
    with pytest.raises(FusecError) as caught:
        fusec.from_onnx(model)
    assert isinstance(caught.value, UnsupportedOnnx) == feature
    assert 'node "node0": error: ConvTranspose: ' in caught.value.format()
    assert reason in caught.value.message, caught.value.message


# ------------------------------------------------------------------ Col2Im


def _col2im(image, block, channels=2, batch=2, **attrs):
    from onnx import TensorProto, helper

    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    blocks = [(image[d] + pads[d] + pads[d + 2] - dilations[d] * (block[d] - 1) - 1)
              // strides[d] + 1 for d in range(2)]  # fmt: skip
    x = random(RNG, batch, channels * block[0] * block[1], blocks[0] * blocks[1])
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="c2i", **attrs)
    graph = helper.make_graph(
        [node], "col2im", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("image", TensorProto.INT64, (2,), image),
         helper.make_tensor("block", TensorProto.INT64, (2,), block)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return model, {"x": x}


COL2IMS = [
    ((5, 5), (2, 2), {}),
    ((6, 7), (3, 2), {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    ((4, 5), (1, 3), {"strides": [1, 2]}),
]


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("image", "block", "attrs"), COL2IMS)
def test_col2im_matches_onnxruntime(image, block, attrs, target):
    model, feeds = _col2im(image, block, **attrs)
    _check(model, feeds, target=target)
