"""Idioms the PyTorch exporters write that need care at import, against onnxruntime:
integer reductions of bools (T5's f16 overflow guard ``isinf(h).any()``: Cast(bool ->
int64) -> ReduceMax or ReduceSum), reduced exactly in f32 when their bounds allow; a
Cast to DOUBLE read only by IsInf/IsNaN/Cast (the same guard through the TorchScript
exporter); an empty Slice that only a Concat reads (Phi-3's partial-rotary pass-through
when the rotary dim is the head dim). What stays unsupported is a located error.

Most cases run on the reference target (what the import means); one of each on the cpu
target too (``slow``: it compiles kernels).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_nets import run_onnxruntime, tensor

import fusec
from fusec.errors import FusecError
from fusec.frontend.onnx_import import UnsupportedOnnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(31)
TARGETS = ["reference", pytest.param("cpu", marks=pytest.mark.slow)]


def make_model(nodes, inputs, outputs, initializers, opset: int) -> onnx.ModelProto:
    """A model of ``nodes`` (outputs may leave their shapes out: not checked)."""
    graph = helper.make_graph(nodes, "idiom", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9  # onnxruntime from PyPI may lag behind onnx's newest IR version
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str) -> list[np.ndarray]:
    """fusec's results, each checked equal (exactly: integers, bools, moved values) to
    onnxruntime's."""
    module = fusec.from_onnx(model)
    got = fusec.compile(module, target=target)(*feeds.values())
    got = list(got) if isinstance(got, tuple) else [got]
    want = run_onnxruntime(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return got


def _halves_with(shape, *specials: float) -> np.ndarray:
    """f16 values with ``specials`` (inf, nan) at a few places."""
    x = RNG.standard_normal(shape).astype(np.float16)
    for k, value in enumerate(specials):
        x.reshape(-1)[(7 * k + 3) % x.size] = value
    return x


def _ints(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


# ------------------------------------------------------------ integer reductions


def _any_model(reduce: str, to: int = TensorProto.INT64) -> onnx.ModelProto:
    """T5's ``isinf(h).any()`` as the dynamo exporter writes it (ReduceMax) or the
    TorchScript one (ReduceSum, then > 0): a bool cast to an integer, reduced whole."""
    nodes = [
        helper.make_node("IsInf", ["x"], ["inf"]),
        helper.make_node("Cast", ["inf"], ["n"], to=to),
        helper.make_node(reduce, ["n"], ["y"], keepdims=0),
    ]
    outputs = [helper.make_tensor_value_info("y", to, None)]
    return make_model(nodes, [tensor("x", (2, 16, 24), np.float16)], outputs, [], opset=20)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduce", ["ReduceMax", "ReduceSum"])
@pytest.mark.parametrize("specials", [(), (np.inf,), (np.inf, -np.inf, np.inf)])
def test_any_of_a_bool_cast_to_int64_reduces_exactly(reduce, specials, target):
    model = _any_model(reduce)
    (got,) = _run(model, {"x": _halves_with((2, 16, 24), *specials)}, target)
    assert got == (min(len(specials), 1) if reduce == "ReduceMax" else len(specials))
    names = {op.name for op in fusec.from_onnx(model).walk()}
    assert ("ai.reduce_max" if reduce == "ReduceMax" else "ai.reduce_sum") in names


KINDS = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceL1", "ReduceSumSquare"]


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
def test_integer_reductions_of_bounded_values_over_axes(kind, keepdims):
    """Values a bool picks between two constants (-7 and 5): bounded, so exact in f32;
    int32 as well as int64."""
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["positive"]),
        helper.make_node("Where", ["positive", "high", "low"], ["picked"]),
        helper.make_node("Cast", ["picked"], ["picked32"], to=TensorProto.INT32),
        helper.make_node(kind, ["picked", "axes"], ["y"], keepdims=keepdims),
        helper.make_node(kind, ["picked32"], ["y32"], keepdims=keepdims),
    ]
    inits = [
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        _ints("high", 5),
        _ints("low", [[-7], [-1], [0]]),
        _ints("axes", [0, 2]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.INT64, None),
        helper.make_tensor_value_info("y32", TensorProto.INT32, None),
    ]
    model = make_model(nodes, [tensor("x", (4, 3, 5))], outputs, inits, opset=18)
    _run(model, {"x": RNG.standard_normal((4, 3, 5)).astype(np.float32)}, "reference")


@pytest.mark.parametrize("kind", ["ReduceMax", "ReduceMin"])
def test_bool_max_and_min_are_any_and_all(kind):
    """Opset 20's bool ReduceMax/ReduceMin, against onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["positive"]),
        helper.make_node(kind, ["positive", "axes"], ["y"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero"), _ints("axes", [1])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.BOOL, None)]
    model = make_model(nodes, [tensor("x", (6, 3))], outputs, inits, opset=20)
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    x[0], x[1] = 1.0, -1.0  # a row all true, one all false
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)


def _error(model: onnx.ModelProto) -> FusecError:
    with pytest.raises(FusecError) as info:
        fusec.from_onnx(model)
    return info.value


def test_integer_reductions_fusec_cannot_make_exact_are_located_errors():
    ids = tensor("ids", (2, 8), np.int64)
    out = [helper.make_tensor_value_info("y", TensorProto.INT64, None)]

    def one(nodes, inputs=(ids,), inits=()):
        return _error(make_model(nodes, list(inputs), out, list(inits), opset=18))

    unbounded = one([helper.make_node("ReduceSum", ["ids"], ["y"], name="count")])
    assert isinstance(unbounded, UnsupportedOnnx) and unbounded.feature == "dtype"
    assert 'node "count"' in unbounded.format() and "not bounded" in unbounded.message
    # squares of values up to 3000, two a sum: 1.8e7, past f32's exact 2**24
    big = one(
        [
            helper.make_node("Greater", ["x", "zero"], ["b"]),
            helper.make_node("Where", ["b", "k", "zero_i"], ["v"]),
            helper.make_node("ReduceSumSquare", ["v"], ["y"], name="squares"),
        ],
        [tensor("x", (2,))],
        [
            numpy_helper.from_array(np.zeros((), np.float32), "zero"),
            _ints("k", 3000),
            _ints("zero_i", 0),
        ],
    )
    assert "could reach 18000000" in big.message and "2**24" in big.message
    mean = one(
        [
            helper.make_node("Greater", ["x", "zero"], ["b"]),
            helper.make_node("Cast", ["b"], ["n"], to=TensorProto.INT64),
            helper.make_node("ReduceMean", ["n"], ["y"], name="mean"),
        ],
        [tensor("x", (2,))],
        [numpy_helper.from_array(np.zeros((), np.float32), "zero")],
    )
    assert mean.feature == "dtype" and "ReduceMean of i64 values is not supported" in mean.message


# ------------------------------------------------------------ casts to DOUBLE


def _double_guard(extra_nodes=(), extra_outputs=()) -> onnx.ModelProto:
    """T5's guard through the TorchScript exporter: Cast(DOUBLE) -> IsInf -> Cast(int64)
    -> ReduceSum -> Greater; IsNaN and a Cast back to f32 read the DOUBLE value too."""
    nodes = [
        helper.make_node("Cast", ["x"], ["wide"], to=TensorProto.DOUBLE, name="to_double"),
        helper.make_node("IsInf", ["wide"], ["inf"], detect_negative=0),
        helper.make_node("Cast", ["inf"], ["n"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["n"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["any"]),
        helper.make_node("IsNaN", ["wide"], ["nan"]),
        helper.make_node("Cast", ["wide"], ["wide2"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["wide2"], ["back"], to=TensorProto.FLOAT),
        *extra_nodes,
    ]
    outputs = [
        helper.make_tensor_value_info("any", TensorProto.BOOL, None),
        helper.make_tensor_value_info("nan", TensorProto.BOOL, None),
        helper.make_tensor_value_info("back", TensorProto.FLOAT, None),
        *extra_outputs,
    ]
    inits = [_ints("zero", 0)]
    return make_model(nodes, [tensor("x", (3, 40), np.float16)], outputs, inits, opset=17)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("specials", [(), (np.nan,), (-np.inf, np.nan), (np.inf,)])
def test_a_double_cast_read_by_isinf_isnan_and_casts_is_its_source(specials, target):
    model = _double_guard()
    any_inf, _, _ = _run(model, {"x": _halves_with((3, 40), *specials)}, target)
    assert bool(any_inf) == (np.inf in specials)
    names = {op.name for op in fusec.from_onnx(model).walk()}
    assert "ai.reduce_sum" in names


def test_a_double_cast_that_other_nodes_read_is_a_located_error():
    add = _error(
        _double_guard(
            [helper.make_node("Add", ["wide", "wide"], ["sum"], name="add_f64")],
            [helper.make_tensor_value_info("sum", TensorProto.DOUBLE, None)],
        )
    )
    assert isinstance(add, UnsupportedOnnx) and add.feature == "dtype"
    assert 'node "to_double"' in add.format()
    assert 'node "add_f64" (Add) reads it' in add.message and "DOUBLE" in add.message
    model = _double_guard()
    model.graph.output.append(helper.make_tensor_value_info("wide", TensorProto.DOUBLE, None))
    assert "it is a graph output" in _error(model).message


# ------------------------------------------------------------ empty slices


def _partial_rotary(scaled: bool = False) -> onnx.ModelProto:
    """``cat([q[..., :rot] * 2, q[..., rot:]], -1)`` with rot = head dim (64), as the
    TorchScript exporter writes Phi-3's: the pass-through slice is empty. ``scaled``:
    a Mul by an input reads it too, its (empty) result a second output."""
    nodes = [
        helper.make_node("Slice", ["q", "zero", "rot", "last"], ["rotated_in"]),
        helper.make_node("Slice", ["q", "rot", "end", "last"], ["passed"], name="pass"),
        helper.make_node("Mul", ["rotated_in", "two"], ["rotated"]),
        helper.make_node("Concat", ["rotated", "passed"], ["y"], axis=-1),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    inputs = [tensor("q", (1, 4, 6, 64))]
    if scaled:
        nodes.append(helper.make_node("Mul", ["passed", "scale"], ["scaled"], name="reader"))
        outputs.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, None))
        inputs.append(tensor("scale", (1,)))
    inits = [
        _ints("zero", [0]),
        _ints("rot", [64]),
        _ints("end", [2**63 - 1]),
        _ints("last", [-1]),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
    ]
    return make_model(nodes, inputs, outputs, inits, opset=17)


@pytest.mark.parametrize("target", TARGETS)
def test_an_empty_slice_is_left_out_of_its_concat(target):
    model = _partial_rotary()
    q = RNG.standard_normal((1, 4, 6, 64)).astype(np.float32)
    (got,) = _run(model, {"q": q}, target)
    np.testing.assert_array_equal(got, q * 2)
    names = {op.name for op in fusec.from_onnx(model).walk()}
    assert "ai.concat" not in names


def test_an_empty_slice_read_elsewhere_is_a_located_error():
    err = _error(_partial_rotary(scaled=True))
    assert 'node "reader"' in err.format()
    assert "'passed' of shape 1x4x6x0 has a zero-size dimension" in err.message
    model = _partial_rotary()
    model.graph.output[0].name = "passed"  # an empty tensor as a result: refused
    assert "'passed' of shape 1x4x6x0 has a zero-size dimension" in _error(model).message
