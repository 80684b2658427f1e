"""ONNX ``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` imported as ai ops
(``fusec/frontend/onnx_loss.py``): each form against onnxruntime on fresh random scores
and labels given at run time (the conformance suite bakes its labels into constants),
ignored labels among them; the refusals are located."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from onnx import TensorProto, helper
from onnx_nets import run_onnxruntime

import fusec
from fusec.errors import FusecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def loss_model(op_type: str, shape: tuple[int, ...], weight: bool, log_prob: bool, **attrs):
    """One loss node: scores ``shape`` (f32), int64 labels and optional weights, all
    graph inputs; outputs the loss (and the log-probabilities)."""
    labels = shape[:1] + shape[2:]
    inputs = [
        helper.make_tensor_value_info("x", F32, shape),
        helper.make_tensor_value_info("t", I64, labels),
    ]
    if weight:
        inputs.append(helper.make_tensor_value_info("w", F32, shape[1:2]))
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op_type, [i.name for i in inputs], outputs, **attrs)
    graph = helper.make_graph(
        [node], "loss", inputs, [helper.make_tensor_value_info(o, F32, None) for o in outputs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def loss_feeds(shape, weight: bool, ignore: int | None, rng) -> dict[str, np.ndarray]:
    scores = rng.standard_normal(shape).astype(np.float32)
    labels = rng.integers(0, shape[1], size=shape[:1] + shape[2:]).astype(np.int64)
    if ignore is not None:  # a quarter of the positions ignored, at least one
        flat = labels.reshape(-1)
        flat[rng.random(flat.size) < 0.25] = ignore
        flat[0] = ignore
    feeds = {"x": scores, "t": labels}
    if weight:
        feeds["w"] = rng.uniform(0.2, 2.0, size=shape[1]).astype(np.float32)
    return feeds


CASES = {
    # id: (op, scores shape, weights, ignore_index, reduction)
    "nll-NC-mean": ("NegativeLogLikelihoodLoss", (5, 4), False, None, "mean"),
    "nll-NCd-none-weight": ("NegativeLogLikelihoodLoss", (3, 4, 6), True, None, "none"),
    "nll-NCdd-sum-ii": ("NegativeLogLikelihoodLoss", (2, 3, 4, 5), False, 1, "sum"),
    "nll-NCd-mean-weight-ii": ("NegativeLogLikelihoodLoss", (3, 5, 4), True, 2, "mean"),
    "nll-NCd-mean-ii-no-weight": ("NegativeLogLikelihoodLoss", (3, 5, 4), False, 0, "mean"),
    "nll-negative-ii": ("NegativeLogLikelihoodLoss", (3, 5, 4), True, -1, "mean"),
    "nll-high-ii": ("NegativeLogLikelihoodLoss", (2, 3, 4, 2), True, 10, "sum"),
    "sce-NC-mean": ("SoftmaxCrossEntropyLoss", (6, 5), False, None, "mean"),
    "sce-NCdd-none-weight-ii": ("SoftmaxCrossEntropyLoss", (2, 4, 3, 2), True, 3, "none"),
    "sce-NCd-sum": ("SoftmaxCrossEntropyLoss", (3, 5, 2), False, None, "sum"),
    "sce-NCd-mean-ii": ("SoftmaxCrossEntropyLoss", (3, 5, 4), False, -5, "mean"),
    "sce-NCd-mean-weight-ii": ("SoftmaxCrossEntropyLoss", (3, 5, 4), True, 0, "mean"),
}


def _case(case: str, seed: int):
    op, shape, weight, ignore, reduction = CASES[case]
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    log_prob = op == "SoftmaxCrossEntropyLoss"
    model = loss_model(op, shape, weight, log_prob, **attrs)
    return model, loss_feeds(shape, weight, ignore, np.random.default_rng(seed))


def _check(model, feeds, target: str) -> None:
    got = fusec.compile(fusec.from_onnx(model), target=target)(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    want = run_onnxruntime(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.shape)
        assert not np.isnan(g).any()
        assert_close(g, w, tol=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_matches_onnxruntime(case):
    model, feeds = _case(case, seed=len(case))
    _check(model, feeds, "reference")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["nll-NCd-mean-weight-ii", "sce-NCdd-none-weight-ii"])
def test_loss_on_the_cpu_target(case):
    model, feeds = _case(case, seed=7)
    _check(model, feeds, "cpu")


def test_the_labels_pick_by_select_not_product():
    """An infinite score of a class no label names does not reach the loss (0 * inf)."""
    model, feeds = _case("nll-NCd-none-weight", seed=3)
    named = feeds["t"][:, None, :] == np.arange(feeds["x"].shape[1])[None, :, None]
    feeds["x"] = np.where(named, feeds["x"], np.inf).astype(np.float32)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(*feeds.values())
    assert np.isfinite(got).all()
    assert_close(got, run_onnxruntime(model, feeds)[0], tol=1e-4)


def test_the_loss_is_built_from_a_one_hot_select():
    model, _ = _case("sce-NCd-mean-weight-ii", seed=1)
    names = [op.name for op in fusec.from_onnx(model).walk()]
    for op in ("ai.equal", "ai.where", "ai.reduce_sum", "ai.not", "ai.div", "ai.log"):
        assert op in names, names


@pytest.mark.parametrize(
    ("shape", "labels", "message"),
    [
        ((4,), (4,), "must be N x C"),
        ((3, 4, 5), (3, 4), "do not match the input"),
    ],
)
def test_bad_shapes_are_located_errors(shape, labels, message):
    inputs = [
        helper.make_tensor_value_info("x", F32, shape),
        helper.make_tensor_value_info("t", I64, labels),
    ]
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["loss"], name="nll")
    graph = helper.make_graph(
        [node], "loss", inputs, [helper.make_tensor_value_info("loss", F32, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(FusecError, match=message) as info:
        fusec.from_onnx(model)
    assert 'node "nll"' in info.value.format()


def test_an_unknown_reduction_is_a_located_error():
    model = loss_model("NegativeLogLikelihoodLoss", (3, 4), False, False, reduction="max")
    with pytest.raises(FusecError, match="reduction 'max' is not one of none, sum, mean"):
        fusec.from_onnx(model)
