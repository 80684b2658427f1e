"""ONNX ``Resize`` in linear and cubic mode (``fusec/frontend/onnx_resize.py``): one
ai.matmul per resized axis with a constant interpolation matrix built at import, against
onnxruntime on fresh random data for each coordinate transformation, cubic_coeff_a,
exclude_outside, antialias, keep_aspect_ratio_policy and tf_crop_and_resize with its
extrapolation value; 16-bit data; the refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_nets import node_model, run_onnxruntime

import fusec
from fusec.frontend.onnx_import import UnsupportedOnnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(31)


def resize_model(
    x: np.ndarray,
    *,
    scales=None,
    sizes=None,
    roi=None,
    opset: int = 19,
    **attrs,
) -> onnx.ModelProto:
    """One Resize node of ``x`` with constant roi / scales / sizes."""
    model = node_model("Resize", {"x": x}, opset=opset, **attrs)
    node = model.graph.node[0]
    for name, value in (("roi", roi), ("scales", scales), ("sizes", sizes)):
        if value is None:
            node.input.append("")
            continue
        dtype = np.int64 if name == "sizes" else np.float32
        model.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype), name))
        node.input.append(name)
    while node.input[-1] == "":
        node.input.pop()
    return model


CASES = {
    # id: (input shape, resize_model keywords)
    "linear-up-half-pixel": ((1, 2, 4, 5), {"mode": "linear", "scales": [1, 1, 2, 1.5]}),
    "linear-down-align-corners": (
        (1, 2, 6, 4),  # whole resized lengths: onnxruntime and ONNX agree then
        {"mode": "linear", "scales": [1, 1, 0.5, 0.5],
         "coordinate_transformation_mode": "align_corners"},
    ),
    "linear-sizes-pytorch-half-pixel": (
        (2, 3, 5, 4),
        {"mode": "linear", "sizes": [2, 3, 3, 1],
         "coordinate_transformation_mode": "pytorch_half_pixel"},
    ),
    "linear-asymmetric-3d": (
        (2, 6, 5),
        {"mode": "linear", "scales": [1, 1.5, 2.2], "coordinate_transformation_mode": "asymmetric"},
    ),
    "linear-half-pixel-symmetric": (
        (1, 1, 4, 5),
        {"mode": "linear", "scales": [1, 1, 1.7, 0.8],
         "coordinate_transformation_mode": "half_pixel_symmetric"},
    ),
    "cubic-up": ((1, 2, 4, 4), {"mode": "cubic", "scales": [1, 1, 2.5, 1.5]}),
    "cubic-down-a-exclude": (
        (1, 2, 8, 7),
        {"mode": "cubic", "scales": [1, 1, 0.7, 0.6], "cubic_coeff_a": -0.5,
         "exclude_outside": 1},
    ),
    "cubic-align-corners-sizes": (
        (1, 1, 5, 6),
        {"mode": "cubic", "sizes": [1, 1, 9, 4],
         "coordinate_transformation_mode": "align_corners"},
    ),
    "linear-antialias-down": (
        (1, 2, 9, 8), {"mode": "linear", "scales": [1, 1, 0.4, 0.6], "antialias": 1},
    ),
    "cubic-antialias-down": (
        (1, 1, 10, 9), {"mode": "cubic", "sizes": [1, 1, 4, 5], "antialias": 1},
    ),
    "linear-not-larger": (
        (1, 2, 6, 4),
        {"mode": "linear", "sizes": [9, 9], "axes": [2, 3],
         "keep_aspect_ratio_policy": "not_larger"},
    ),
    "cubic-not-smaller-axes-3-2": (
        (1, 2, 6, 4),
        {"mode": "cubic", "sizes": [3, 5], "axes": [3, 2],
         "keep_aspect_ratio_policy": "not_smaller"},
    ),
    "tf-crop-and-resize": (
        (1, 1, 6, 5),
        {"mode": "linear", "sizes": [1, 1, 4, 7], "roi": [0, 0, -0.2, 0.3, 1, 1, 0.7, 1.4],
         "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.5},
    ),
}  # fmt: skip


def _run(case: str, target: str = "reference", dtype=np.float32):
    shape, keywords = CASES[case]
    x = RNG.standard_normal(shape).astype(dtype)
    model = resize_model(x, **keywords)
    got = fusec.compile(fusec.from_onnx(model), target=target)(x)
    want = run_onnxruntime(model, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    assert not np.isnan(got).any()
    return model, got, want


@pytest.mark.parametrize("case", sorted(CASES))
def test_resize_matches_onnxruntime(case):
    model, got, want = _run(case)
    assert_close(got, want, tol=1e-4)
    names = [op.name for op in fusec.from_onnx(model).walk()]
    assert "ai.matmul" in names


def test_extrapolated_positions_take_the_value():
    _, got, _ = _run("tf-crop-and-resize")
    assert (got == 7.5).any() and (got != 7.5).any()


def test_sixteen_bit_data_is_interpolated_in_float32():
    model, got, want = _run("cubic-up", dtype=np.float16)
    assert_close(got, want, tol=1e-2)
    names = [op.name for op in fusec.from_onnx(model).walk()]
    assert names.count("ai.cast") == 4  # in and out of f32, per resized axis


@pytest.mark.slow
@pytest.mark.parametrize("case", ["linear-antialias-down", "tf-crop-and-resize"])
def test_resize_on_the_cpu_target(case):
    _, got, want = _run(case, target="cpu")
    assert_close(got, want, tol=1e-4)


def _refusal(model: onnx.ModelProto) -> UnsupportedOnnx:
    with pytest.raises(UnsupportedOnnx) as caught:
        fusec.from_onnx(model)
    return caught.value


def test_run_time_scales_are_refused_with_a_reason():
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    model = node_model(
        "Resize", {"x": x, "scales": np.ones(4, np.float32)}, opset=19, mode="linear"
    )
    model.graph.node[0].input[:] = ["x", "", "scales"]  # no roi; scales a graph input
    err = _refusal(model)
    assert err.feature == "attribute" and "computed at run time" in err.message


def test_upsample_in_linear_mode_is_refused_with_a_reason():
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    model = node_model("Upsample", {"x": x}, opset=9, mode="linear")
    model.graph.initializer.append(
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    )
    model.graph.node[0].input.append("scales")
    err = _refusal(model)
    assert err.feature == "attribute" and "Upsample in mode 'linear'" in err.message


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 1, 3, 2, 4]])
def test_affine_grid_matches_onnx_reference(size, align_corners):
    dims = len(size) - 2
    theta = RNG.standard_normal((size[0], dims, dims + 1)).astype(np.float32)
    model = node_model(
        "AffineGrid", {"theta": theta}, weights={"size": np.array(size, np.int64)},
        opset=20, align_corners=align_corners,
    )  # fmt: skip
    got = fusec.compile(fusec.from_onnx(model), target="reference")(theta)
    want = ReferenceEvaluator(model).run(None, {"theta": theta})[0]
    assert got.shape == want.shape == (size[0], *size[2:], dims)
    assert_close(got, want, tol=1e-5)
