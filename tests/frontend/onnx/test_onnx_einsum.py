"""ONNX ``Einsum`` imported as ai ops (``fusec/frontend/onnx_einsum.py``): equations of
one, two and three operands against onnxruntime on fresh random inputs (and numpy's
einsum in float64); the refusals say why."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from onnx import TensorProto, helper
from onnx_nets import run_onnxruntime

import fusec
from fusec.frontend.onnx_import import UnsupportedOnnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(13)
SIZES = {"a": 2, "b": 3, "c": 4, "d": 5, "e": 3, "h": 2, "i": 4, "j": 3, "k": 5, "q": 3}


def _model(equation: str, shapes: list[tuple[int, ...]]):
    names = [f"x{k}" for k in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], name="einsum", equation=equation)
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
        for n, s in zip(names, shapes, strict=True)
    ]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "einsum", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


def _shapes(equation: str) -> list[tuple[int, ...]]:
    left = equation.replace(" ", "").split("->")[0]
    return [tuple(SIZES[c] for c in term) for term in left.split(",")]


EQUATIONS = [
    "ij,jk->ik",
    "bij,bjk->bik",
    "ij->ji",
    "ij->i",
    "ij->",
    "i,i->",
    "i,j->ij",
    "bhqd,bhkd->bhqk",
    "ij,jk->k",
    "ij,jk",
    "ik,jk",
    "abc,cd,de->abe",
    "ab, bc -> ca",
]


@pytest.mark.parametrize("equation", EQUATIONS)
def test_einsum_matches_onnxruntime_and_numpy(equation):
    shapes = _shapes(equation)
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    model = _model(equation, shapes)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(*arrays)
    want = run_onnxruntime(model, {f"x{k}": a for k, a in enumerate(arrays)})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert_close(got, want, tol=1e-4)
    exact = np.einsum(equation.replace(" ", ""), *[a.astype(np.float64) for a in arrays])
    assert_close(got, exact.astype(np.float32), tol=1e-4)


@pytest.mark.slow
def test_einsum_on_the_cpu_target():
    shapes = _shapes("bhqd,bhkd->bhqk")
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    model = _model("bhqd,bhkd->bhqk", shapes)
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(*arrays)
    assert_close(got, run_onnxruntime(model, {"x0": arrays[0], "x1": arrays[1]})[0], tol=1e-4)


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], "ellipsis"),
        ("ii->i", [(3, 3)], "diagonal"),
        ("ij,jk->ik", [(3, 1), (4, 5)], "broadcasting"),
    ],
)
def test_unsupported_equations_are_refused_with_the_reason(equation, shapes, message):
    with pytest.raises(UnsupportedOnnx, match=message) as info:
        fusec.from_onnx(_model(equation, shapes))
    assert 'node "einsum"' in info.value.format()
