"""ONNX 1-D Conv/MaxPool/AveragePool (2-D of a height-1 view; a constant conv weight
reshaped at import), 3-D pooling (two 2-D pools: (H, W), then depth) and LpPool (1-D,
2-D and 3-D: the window's mean of |x|^p, padding as zeros, times its size, to the power
1/p) against onnxruntime on fresh random inputs; the refusals say why."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx_nets import node_model, run_onnxruntime
from xdsl.dialects import arith

import fusec
from fusec.dialect import ops as ai
from fusec.frontend.onnx_import import UnsupportedOnnx
from fusec.ir.tensors import shape_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(17)

CASES = {
    # id: (op, input shape, attributes)
    "max-1d-pads-strides": (
        "MaxPool", (2, 3, 17), {"kernel_shape": [3], "pads": [1, 2], "strides": [2]},
    ),
    "max-1d-dilations-ceil": (
        "MaxPool", (1, 2, 16),
        {"kernel_shape": [2], "dilations": [3], "ceil_mode": 1, "strides": [2]},
    ),
    "avg-1d-same-upper": (
        "AveragePool", (2, 3, 11), {"kernel_shape": [4], "auto_pad": "SAME_UPPER"},
    ),
    "avg-1d-include-pad": (
        "AveragePool", (1, 2, 9), {"kernel_shape": [3], "pads": [2, 1], "count_include_pad": 1},
    ),
    "lp-1d": ("LpPool", (1, 3, 12), {"kernel_shape": [3], "p": 3}),
    "lp-2d-pads": ("LpPool", (1, 2, 7, 6), {"kernel_shape": [3, 3], "pads": [1, 2, 1, 0], "p": 2}),
    "lp-2d-same-lower-strides": (
        "LpPool", (2, 1, 8, 9),
        {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2], "p": 4},
    ),
    "lp-2d-dilations": (
        "LpPool", (1, 1, 6, 6), {"kernel_shape": [2, 2], "dilations": [2, 2], "p": 1},
    ),
    # 3-D: two 2-D pools, (H, W) then depth
    "max-3d-pads-strides-dilations": (
        "MaxPool", (2, 3, 7, 6, 8),
        {"kernel_shape": [3, 2, 3], "pads": [1, 0, 2, 2, 1, 0], "strides": [2, 1, 3],
         "dilations": [2, 1, 1]},
    ),
    "max-3d-ceil": ("MaxPool", (1, 2, 6, 5, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2],
                                                 "ceil_mode": 1}),
    "avg-3d-pads": (
        "AveragePool", (1, 2, 5, 6, 7), {"kernel_shape": [3, 3, 2], "pads": [1, 2, 0, 1, 0, 1]},
    ),
    "avg-3d-include-pad-ceil": (
        "AveragePool", (2, 1, 7, 5, 6),
        {"kernel_shape": [2, 2, 3], "pads": [1, 1, 1, 0, 1, 1], "strides": [2, 2, 2],
         "count_include_pad": 1, "ceil_mode": 1},
    ),
    "avg-3d-same-upper": (
        "AveragePool", (1, 2, 5, 4, 6), {"kernel_shape": [2, 3, 2], "auto_pad": "SAME_UPPER",
                                         "strides": [2, 1, 2]},
    ),
    "lp-3d": ("LpPool", (1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "pads": [1, 0, 1, 0, 1, 1],
                                          "p": 2}),
}  # fmt: skip


def _case(case: str):
    op, shape, attrs = CASES[case]
    x = RNG.standard_normal(shape).astype(np.float32)
    return node_model(op, {"x": x}, opset=18, **attrs), x


@pytest.mark.parametrize("case", sorted(CASES))
def test_pool_matches_onnxruntime(case):
    model, x = _case(case)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    want = run_onnxruntime(model, {"x": x})[0]
    assert got.shape == want.shape and not np.isnan(got).any()
    assert_close(got, want, tol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", ["max-1d-pads-strides", "lp-2d-pads", "max-3d-ceil", "avg-3d-include-pad-ceil"]
)
def test_pool_on_the_cpu_target(case):
    model, x = _case(case)
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(x)
    assert_close(got, run_onnxruntime(model, {"x": x})[0], tol=1e-4)


@pytest.mark.parametrize(
    ("op", "shape", "attrs", "message"),
    [
        (
            "MaxPool",
            (1, 1, 2, 4, 4, 4),
            {"kernel_shape": [1, 2, 2, 2]},
            "only 1-D, 2-D and 3-D pooling",
        ),
        ("MaxPool", (1, 1, 4, 4, 4), {"kernel_shape": [2, 2]}, "kernel_shape must have 3"),
        ("LpPool", (1, 1, 6, 6), {"kernel_shape": [2, 2], "ceil_mode": 1}, "ceil_mode=1"),
    ],
)
def test_unsupported_pools_are_refused_with_the_reason(op, shape, attrs, message):
    x = RNG.standard_normal(shape).astype(np.float32)
    with pytest.raises(UnsupportedOnnx, match=message):
        fusec.from_onnx(node_model(op, {"x": x}, opset=18, **attrs))


CONVS = {
    # id: (input shape, weight shape, attributes)
    "pads-strides": ((2, 3, 15), (4, 3, 3), {"pads": [1, 2], "strides": [2]}),
    "dilations-groups": ((1, 4, 12), (6, 2, 2), {"dilations": [3], "group": 2}),
    "same-lower": ((2, 2, 9), (3, 2, 4), {"auto_pad": "SAME_LOWER"}),
}


@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_1d_is_a_2d_conv_of_height_one(case):
    shape, weight_shape, attrs = CONVS[case]
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(weight_shape).astype(np.float32)
    b = RNG.standard_normal(weight_shape[0]).astype(np.float32)
    model = node_model("Conv", {"x": x, "w": w, "b": b}, opset=13, **attrs)
    module = fusec.from_onnx(model)
    assert "ai.conv2d" in {op.name for op in module.walk()}
    got = fusec.compile(module, target="reference")(x, w, b)
    want = run_onnxruntime(model, {"x": x, "w": w, "b": b})[0]
    assert got.shape == want.shape
    assert_close(got, want, tol=1e-4)


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_1d_constant_weight_is_reshaped_at_import(case, target):
    """A constant (initializer) weight ``[K, C, R]`` becomes a ``[K, C, 1, R]`` constant
    at import, no ai.reshape of it at run time; same numbers as onnxruntime."""
    shape, weight_shape, attrs = CONVS[case]
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(weight_shape).astype(np.float32)
    b = RNG.standard_normal(weight_shape[0]).astype(np.float32)
    model = node_model("Conv", {"x": x}, weights={"w": w, "b": b}, opset=13, **attrs)
    module = fusec.from_onnx(model)
    (conv,) = [op for op in module.walk() if isinstance(op, ai.Conv2DOp)]
    weight = conv.operands[1].owner
    assert isinstance(weight, arith.ConstantOp)  # not ai.reshape of one
    k, c, r = weight_shape
    assert shape_of(weight.results[0]) == (k, c, 1, r)
    got = fusec.compile(module, target=target)(x)
    want = run_onnxruntime(model, {"x": x})[0]
    assert got.shape == want.shape
    assert_close(got, want, tol=1e-4)


def _weight_copies(model: onnx.ModelProto) -> list[str]:
    """What the channels-last copy kernels of a cuda compile (no GPU needed) transpose."""
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    heads = [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind == "copy"]
    return [m[1] for h in heads if (m := re.search(r"channels-last transpose (\S+)", h))]


def test_conv_1d_constant_weight_is_not_relaid_out_per_call_on_cuda():
    """Whisper's front end: the cuda conv layout folds the KCRS -> KRSC transpose of a
    constant weight at compile time, which it sees only when the 1-D conv's weight is a
    constant and not an ai.reshape of one; a weight given at run time is still copied."""
    x = RNG.standard_normal((1, 16, 32)).astype(np.float16)
    w = RNG.standard_normal((32, 16, 3)).astype(np.float16)
    constant = node_model("Conv", {"x": x}, weights={"w": w}, pads=[1, 1])
    assert _weight_copies(constant) == ["[1][16][32]"]  # the input's only
    given = node_model("Conv", {"x": x, "w": w}, pads=[1, 1])
    assert _weight_copies(given) == ["[1][16][32]", "[32][16][3]"]
