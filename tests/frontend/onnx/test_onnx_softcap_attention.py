"""Gemma-2's soft-capped attention as exporters write it, imported, recognised as one
``ai.attention`` with ``softcap`` and run by the cpu target's attention kernel, against
onnxruntime: ``softmax(tanh(q @ k^T * scale / cap) * cap + mask) @ v`` (HF's eager
attention with ``attn_logit_softcapping``), in f32 and in f16 with the softmax upcast to
f32 after the mask, as the dynamo exporter writes it; a division by the cap, a product by
its reciprocal, or one factor for both. A cap that is not positive keeps the ops (and
their values)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics import assert_close, assert_rel_l2
from onnx import TensorProto, helper, numpy_helper
from onnx_nets import make_model, random, run_onnxruntime, tensor

import fusec
from fusec.dialect import ops as ai

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

B, H, S, D = 1, 3, 20, 16
SCALE = 0.25


def _const(name: str, value, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _gemma2(form: str, cap: float, dtype=np.float32, mask: bool = True) -> onnx.ModelProto:
    """The eager attention: q, k, v (B, H, S, D) inputs; k transposed for the product; the
    scale and the cap as scalar initializers; a causal mask of the model's type; with f16
    the masked scores cast to f32 for the softmax and the probabilities back to f16."""
    inits = [_const("scale", SCALE, dtype), _const("cap", cap, dtype)]
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
    ]
    if form == "div":  # HF: (s * scale) / cap
        nodes += [
            helper.make_node("Mul", ["s", "scale"], ["ss"]),
            helper.make_node("Div", ["ss", "cap"], ["inner"]),
        ]
    elif form == "reciprocal":  # (1 / cap) * s, then the scale
        inits.append(_const("rcap", 1.0 / cap, dtype))
        nodes += [
            helper.make_node("Mul", ["rcap", "s"], ["sr"]),
            helper.make_node("Mul", ["sr", "scale"], ["inner"]),
        ]
    else:  # one factor scale / cap, folded by an optimiser
        inits.append(_const("factor", SCALE / cap, dtype))
        nodes.append(helper.make_node("Mul", ["s", "factor"], ["inner"]))
    nodes += [
        helper.make_node("Tanh", ["inner"], ["t"]),
        helper.make_node("Mul", ["cap", "t"], ["capped"]),
    ]
    last = "capped"
    if mask:
        inits.append(_const("mask", np.triu(np.full((S, S), -np.inf), 1), dtype))
        nodes.append(helper.make_node("Add", ["capped", "mask"], ["masked"]))
        last = "masked"
    if dtype == np.float16:
        nodes += [
            helper.make_node("Cast", [last], ["s32"], to=TensorProto.FLOAT),
            helper.make_node("Softmax", ["s32"], ["p32"], axis=-1),
            helper.make_node("Cast", ["p32"], ["p"], to=TensorProto.FLOAT16),
        ]
    else:
        nodes.append(helper.make_node("Softmax", [last], ["p"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["p", "v"], ["y"]))
    shape = (B, H, S, D)
    inputs = [tensor(n, shape, dtype) for n in "qkv"]
    return make_model(nodes, inputs, [tensor("y", shape, dtype)], inits, name="gemma2", opset=17)


def _feeds(dtype, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    # scores of a few units: the tanh saturates at the small caps below
    return {n: (3.0 * random(rng, B, H, S, D)).astype(dtype) for n in "qkv"}


def _attentions(module) -> list[ai.AttentionOp]:
    return [op for op in module.walk() if isinstance(op, ai.AttentionOp)]


@pytest.mark.parametrize("form", ["div", "reciprocal", "folded"])
def test_f32_soft_capped_attention_is_one_kernel(form: str) -> None:
    model = _gemma2(form, cap=2.0)
    feeds = _feeds(np.float32)
    program = fusec.compile(fusec.from_onnx(model), target="cpu")
    (op,) = _attentions(program.module)
    assert op.attr("softcap") == 2.0
    assert op.attr("scale") == pytest.approx(SCALE, rel=1e-6)
    assert [k.kind for k in program.kernels] == ["attention"]
    (want,) = run_onnxruntime(model, feeds)
    assert_close(program(*feeds.values()), want)


def test_f16_softmax_upcast_after_the_mask() -> None:
    """The f16 attention (f32 statistics), no cast left: the mask added in f16 and the
    sum upcast is the attention's own mask."""
    model = _gemma2("div", cap=2.0, dtype=np.float16)
    feeds = _feeds(np.float16, seed=1)
    program = fusec.compile(fusec.from_onnx(model), target="cpu")
    (op,) = _attentions(program.module)
    assert op.attr("softcap") == 2.0 and op.attr("scale") == SCALE
    assert not any(isinstance(o, ai.CastOp | ai.TanhOp) for o in program.module.walk())
    assert [k.kind for k in program.kernels] == ["attention"]
    (want,) = run_onnxruntime(model, feeds)
    # onnxruntime rounds the scores to f16 after every op, the kernel keeps them in f32
    assert_rel_l2(program(*feeds.values()), want)


def test_a_cap_that_is_not_positive_keeps_the_ops() -> None:
    model = _gemma2("div", cap=-2.0, mask=False)
    feeds = _feeds(np.float32, seed=2)
    program = fusec.compile(fusec.from_onnx(model), target="cpu")
    assert not _attentions(program.module)
    assert any(isinstance(o, ai.TanhOp) for o in program.module.walk())
    got = program(*feeds.values())
    (want,) = run_onnxruntime(model, feeds)
    assert_close(got, want)
