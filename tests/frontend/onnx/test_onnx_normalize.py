"""ONNX ``LRN`` and ``MeanVarianceNormalization`` (``fusec/frontend/onnx_normalize.py``),
``Shrink`` and ``CenterCropPad`` (``onnx_elementwise``, ``onnx_layout``) against onnxruntime
on fresh random inputs; the refusals say why."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from onnx import numpy_helper
from onnx_nets import node_model, run_onnxruntime

import fusec
from fusec.errors import FusecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(19)


def _check(model, x, target="reference", want=None):
    got = fusec.compile(fusec.from_onnx(model), target=target)(x)
    want = run_onnxruntime(model, {"x": x})[0] if want is None else want
    assert got.shape == want.shape and got.dtype == want.dtype
    assert not np.isnan(got).any()
    assert_close(got, want, tol=1e-4)


@pytest.mark.parametrize(
    "attrs",
    [{"size": 3}, {"size": 4, "alpha": 0.01, "beta": 0.6, "bias": 2.0}, {"size": 1}],
    ids=["default", "even-size", "size-1"],
)
def test_lrn(attrs):
    x = RNG.standard_normal((2, 6, 3, 4)).astype(np.float32)
    model = node_model("LRN", {"x": x}, opset=13, **attrs)
    _check(model, x, want=_lrn_float64(x, **attrs))
    if attrs["size"] % 2:  # onnxruntime's LRN takes odd sizes only
        _check(model, x)


def _lrn_float64(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """ONNX's definition (its reference evaluator loops over the batch, not the channels)."""
    wide = x.astype(np.float64)
    channels = x.shape[1]
    before, after = (size - 1) // 2, -(-(size - 1) // 2) + 1
    sums = np.stack(
        [
            (wide[:, max(0, c - before) : min(channels, c + after)] ** 2).sum(axis=1)
            for c in range(channels)
        ],
        axis=1,
    )
    return (wide / (bias + alpha / size * sums) ** beta).astype(np.float32)


@pytest.mark.parametrize("axes", [None, [1], [0, 1, 2, 3]])
def test_mean_variance_normalization(axes):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    _check(node_model("MeanVarianceNormalization", {"x": x}, opset=13, **attrs), x)


@pytest.mark.parametrize("attrs", [{}, {"lambd": 0.8, "bias": 0.3}])
def test_shrink(attrs):
    x = RNG.standard_normal((4, 7)).astype(np.float32) * 2
    _check(node_model("Shrink", {"x": x}, opset=13, **attrs), x)


@pytest.mark.parametrize(
    ("shape", "target", "axes"),
    [
        ((5, 8, 3), [3, 11, 3], None),  # crop an odd margin, pad an odd margin
        ((6, 7, 2), [6, 4], [0, 1]),
        ((3, 9, 4), [10, 2], [-2, -1]),
    ],
)
def test_center_crop_pad(shape, target, axes):
    x = RNG.standard_normal(shape).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    model = node_model("CenterCropPad", {"x": x}, opset=18, **attrs)
    model.graph.initializer.append(numpy_helper.from_array(np.array(target, np.int64), "shape"))
    model.graph.node[0].input.append("shape")
    _check(model, x)


@pytest.mark.slow
def test_lrn_and_shrink_on_the_cpu_target():
    x = RNG.standard_normal((2, 6, 3, 4)).astype(np.float32)
    _check(node_model("LRN", {"x": x}, opset=13, size=3), x, target="cpu")
    _check(node_model("Shrink", {"x": x}, opset=13, lambd=0.3, bias=0.1), x, target="cpu")


def test_lrn_of_a_3d_input_is_refused():
    x = RNG.standard_normal((2, 6, 3)).astype(np.float32)
    with pytest.raises(FusecError, match="N x C x H x W"):
        fusec.from_onnx(node_model("LRN", {"x": x}, opset=13, size=3))


def _layer_norm64(x, g, b, eps=1e-5):
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps) * g.astype(np.float64) + b.astype(np.float64)


@pytest.mark.parametrize("constant", [True, False], ids=["initializers", "inputs"])
def test_layer_norm_with_f16_parameters_of_an_f32_input(constant):
    """LayerNormalization of an f32 input with f16 scale and bias, as the TorchScript
    exporter writes it after an f32 attention (issue 28; it was refused: 'gamma has element
    type f16, expected f32'): the parameters taken in f32 (exact), the result the float64
    LayerNorm's, on the reference and the cpu target."""
    x = RNG.standard_normal((3, 5, 16)).astype(np.float32)
    g = (1.0 + 0.2 * RNG.standard_normal(16)).astype(np.float16)
    b = (0.2 * RNG.standard_normal(16)).astype(np.float16)
    if constant:
        model = node_model("LayerNormalization", {"x": x}, weights={"g": g, "b": b}, opset=17)
    else:
        model = node_model("LayerNormalization", {"x": x, "g": g, "b": b}, opset=17)
    want = _layer_norm64(x, g, b).astype(np.float32)
    args = [x] if constant else [x, g, b]
    for target in ("reference", "cpu"):
        got = fusec.compile(fusec.from_onnx(model), target=target)(*args)
        assert got.dtype == np.float32 and not np.isnan(got).any()
        assert_close(got, want, tol=1e-4)
