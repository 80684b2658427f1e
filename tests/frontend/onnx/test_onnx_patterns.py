"""ONNX operator combinations that exported models contain, against onnxruntime.

The node tests (``test_conformance.py``) check each operator alone; these
check what the exporters write around them: SDPA's NaN guard after a softmax
(``Where(IsNaN(p), 0, p)``), BERT's pooler (``Gather`` of token 0), GPT-2's
QKV ``Split`` into three, integer exponents, and the errors for what fusec
cannot compile (token-id lookups, booleans used as data).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx import TensorProto, helper, numpy_helper
from onnx_nets import make_model, random, run_onnxruntime, tensor

import fusec
from fusec.dialect import ops as ai
from fusec.errors import FusecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(2024)


def _compare(model: onnx.ModelProto, feeds: dict):
    module = fusec.from_onnx(model)
    got = fusec.compile(module, target="cpu")(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, run_onnxruntime(model, feeds), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert_close(g, w)
    return module


def _ops(module) -> list[str]:
    return [op.name for op in module.walk() if isinstance(op, ai.AiOp)]


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def test_softmax_nan_guard_of_sdpa():
    """Where(IsNaN(softmax(s + mask)), 0, p): a row masked out entirely gives NaN in the
    softmax, and zeros after the guard."""
    mask = np.zeros((1, 1, 4, 4), np.float32)
    mask[..., 2, :] = -np.inf  # row 2 sees nothing
    nodes = [
        helper.make_node("Add", ["s", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["y"], name="guard"),
    ]
    model = make_model(
        nodes,
        [tensor("s", (2, 3, 4, 4))],
        [tensor("y", (2, 3, 4, 4))],
        [_const("mask", mask), _const("zero", np.float32(0.0))],
    )
    s = random(RNG, 2, 3, 4, 4)
    module = fusec.from_onnx(model)
    got = fusec.compile(module, target="cpu")(s)
    want = run_onnxruntime(model, {"s": s})[0]
    assert np.all(got[..., 2, :] == 0.0) and not np.isnan(got).any()
    assert_close(got, want)
    assert "ai.isnan" in _ops(module) and "ai.where" in _ops(module)


def test_bert_pooler_gathers_token_zero():
    """hidden[:, 0] is a Gather with a scalar constant index: a slice and a reshape."""
    nodes = [
        helper.make_node("Gather", ["h", "zero"], ["first"], axis=1),
        helper.make_node("Gemm", ["first", "w", "b"], ["dense"], transB=1),
        helper.make_node("Tanh", ["dense"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor("h", (2, 5, 8))],
        [tensor("y", (2, 8))],
        [_const("zero", np.int64(0)), _const("w", random(RNG, 8, 8)), _const("b", random(RNG, 8))],
    )
    module = _compare(model, {"h": random(RNG, 2, 5, 8)})
    assert "ai.slice" in _ops(module) and "ai.gather" not in _ops(module)


def test_gpt2_qkv_split_into_heads():
    """Split(num_outputs=3) of the fused QKV projection, each part reshaped into heads
    and transposed: one attention kernel reads q, k and v through views."""
    nodes = [
        helper.make_node("Split", ["qkv"], ["q", "k", "v"], axis=2, num_outputs=3),
        helper.make_node("Reshape", ["q", "heads"], ["qh"]),
        helper.make_node("Reshape", ["k", "heads"], ["kh"]),
        helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("Reshape", ["v", "heads"], ["vh"]),
        helper.make_node("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["p", "vt"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor("qkv", (2, 6, 24))],
        [tensor("y", (2, 2, 6, 4))],
        [_const("heads", np.array([2, 6, 2, 4], np.int64))],
        opset=18,
    )
    module = _compare(model, {"qkv": random(RNG, 2, 6, 24)})
    kinds = [k.kind for k in fusec.compile(module, target="cpu").kernels]
    assert kinds == ["attention"]  # q, k and v read through views: no copy kernel


def test_integer_exponent_and_clip_bounds():
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["cube"]),
        helper.make_node("Clip", ["cube", "lo", "hi"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor("x", (3, 7))],
        [tensor("y", (3, 7))],
        [_const("three", np.int64(3)), _const("lo", np.float32(-2)), _const("hi", np.float32(6))],
    )
    module = _compare(model, {"x": random(RNG, 3, 7)})
    assert _ops(module) == ["ai.pow", "ai.clip"]


def test_layernorm_over_two_axes_with_a_broadcast_scale():
    """axis=-2: the two trailing dims are normalised together; the scale is a (1, 6)
    row, broadcast over the 5 rows of each matrix."""
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-2, epsilon=1e-3)
    model = make_model(
        [node],
        [tensor("x", (2, 3, 5, 6))],
        [tensor("y", (2, 3, 5, 6))],
        [_const("g", random(RNG, 1, 6)), _const("b", random(RNG, 5, 6))],
    )
    module = _compare(model, {"x": random(RNG, 2, 3, 5, 6)})
    assert _ops(module).count("ai.layernorm") == 1


def _error(model) -> FusecError:
    with pytest.raises(FusecError) as info:
        fusec.from_onnx(model)
    return info.value


def test_a_token_id_lookup_is_ai_take_at_its_node():
    node = helper.make_node("Gather", ["table", "ids"], ["emb"], name="embeddings/word", axis=0)
    model = make_model(
        [node],
        [tensor("ids", (1, 5), np.int64)],
        [tensor("emb", (1, 5, 4))],
        [_const("table", random(RNG, 10, 4))],
    )
    module = fusec.from_onnx(model)
    take = next(op for op in module.walk() if isinstance(op, ai.TakeOp))
    assert "embeddings/word" in str(take.location)
    ids = np.array([[3, 0, 9, -2, 3]])
    np.testing.assert_array_equal(
        fusec.compile(module)(ids), run_onnxruntime(model, {"ids": ids})[0]
    )


def test_a_boolean_used_as_data_is_cast():
    nodes = [
        helper.make_node("IsNaN", ["x"], ["n"]),
        helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT, name="cast_bool"),
    ]
    model = make_model(nodes, [tensor("x", (4,))], [tensor("y", (4,))], [])
    x = np.array([1.0, np.nan, -np.inf, 0.0], np.float32)
    got = fusec.compile(fusec.from_onnx(model))(x)
    np.testing.assert_array_equal(got, np.isnan(x).astype(np.float32))


@pytest.mark.parametrize(("positive", "negative"), [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf_is_a_bool_of_comparisons_with_infinities(positive, negative):
    node = helper.make_node(
        "IsInf", ["x"], ["y"], detect_positive=positive, detect_negative=negative
    )
    model = make_model([node], [tensor("x", (6,))], [tensor("y", (6,), np.bool_)], [], opset=20)
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -1.5, 3e38], np.float32)
    got = fusec.compile(fusec.from_onnx(model))(x)
    np.testing.assert_array_equal(got, run_onnxruntime(model, {"x": x})[0])
