"""ONNX ``GridSample`` as ai ops at run-time grid positions
(``fusec/frontend/onnx_grid_sample.py``): nearest, linear and cubic, zeros, border and
reflection padding, align_corners, 2-D and volumetric, on fresh random grids reaching
past the borders, against onnx's reference evaluator (and onnxruntime in 2-D)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numerics import assert_close
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_nets import run_onnxruntime

import fusec
from fusec.errors import FusecError

RNG = np.random.default_rng(20)


def _case(shape, out, **attrs):
    dims = len(shape) - 2
    x = RNG.standard_normal(shape).astype(np.float32)
    grid = RNG.uniform(-1.4, 1.4, (shape[0], *out, dims)).astype(np.float32)
    grid.reshape(-1)[:4] = [-1.0, 1.0, 0.0, -0.5]  # the borders and centre exactly
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs", **attrs)
    graph = helper.make_graph(
        [node], "grid_sample",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]), x, grid


FORMS = list(itertools.product(["nearest", "linear", "cubic"], ["zeros", "border", "reflection"],
                               [0, 1]))  # fmt: skip


@pytest.mark.parametrize(("mode", "padding", "align"), FORMS)
def test_grid_sample_2d_matches_onnx_reference(mode, padding, align):
    model, x, grid = _case((2, 3, 5, 6), (4, 3), mode=mode, padding_mode=padding,
                           align_corners=align)  # fmt: skip
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x, grid)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})
    assert got.shape == want.shape and not np.isnan(got).any()
    assert_close(got, want, tol=1e-4)
    # onnxruntime rounds nearest ties its own way, and for cubic with border padding
    # clamps only the taps (PyTorch's rule) where ONNX's reference first clips the
    # coordinate: the node suite expects the reference's
    if mode != "nearest" and (mode, padding) != ("cubic", "border"):
        assert_close(got, run_onnxruntime(model, {"x": x, "grid": grid})[0], tol=1e-4)


@pytest.mark.parametrize(("mode", "padding"), [("nearest", "zeros"), ("linear", "reflection")])
def test_grid_sample_volumetric(mode, padding):
    model, x, grid = _case((1, 2, 3, 4, 5), (2, 3, 2), mode=mode, padding_mode=padding)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x, grid)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})
    assert_close(got, want, tol=1e-4)


@pytest.mark.slow  # kernel compiles
@pytest.mark.parametrize(("mode", "padding"), [("linear", "zeros"), ("cubic", "reflection")])
def test_grid_sample_on_the_cpu_target(mode, padding):
    model, x, grid = _case((2, 3, 5, 6), (4, 3), mode=mode, padding_mode=padding)
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(x, grid)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})
    assert_close(got, want, tol=1e-4)


def test_a_grid_of_the_wrong_rank_is_a_located_error():
    model, _, _ = _case((1, 2, 4, 4), (3, 3))
    model.graph.input[1].type.tensor_type.shape.dim[-1].dim_value = 3
    with pytest.raises(FusecError) as caught:
        fusec.from_onnx(model)
    assert 'node "gs": error: GridSample: X tensor<1x2x4x4xf32> and grid' in caught.value.format()
