"""ONNX ``LinearAttention`` (opset 27) as ai ops, its recurrence unrolled
(``fusec/frontend/onnx_linear_attention.py``): every update rule, per-head and per-key
decay, a scalar beta, grouped-query heads, a past state, float16, against onnx's
reference evaluator on fresh random inputs; the refusals say why."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import fusec
from fusec.errors import FusecError
from fusec.frontend.onnx_import import UnsupportedOnnx

RNG = np.random.default_rng(27)
B, T, DK, DV = 2, 5, 4, 3


def _case(rule="gated_delta", q_heads=2, kv_heads=2, steps=T, past=True, decay_per_key=False,
          beta_heads=None, dtype=np.float32, **attrs):  # fmt: skip
    """(model, feeds): query/key/value [B, T, H * D], decay and beta as the rule needs."""
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    feeds = {
        "query": RNG.standard_normal((B, steps, q_heads * DK)),
        "key": RNG.standard_normal((B, steps, kv_heads * DK)) * 0.5,
        "value": RNG.standard_normal((B, steps, kv_heads * DV)),
    }
    names = ["query", "key", "value", "", "", ""]
    if past:
        feeds["past_state"] = RNG.standard_normal((B, kv_heads, DK, DV)) * 0.3
        names[3] = "past_state"
    if rule in ("gated", "gated_delta"):
        width = kv_heads * DK if decay_per_key else kv_heads
        feeds["decay"] = -RNG.uniform(0.05, 0.5, (B, steps, width))
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        feeds["beta"] = RNG.uniform(0.2, 0.9, (B, steps, beta_heads or kv_heads))
        names[5] = "beta"
    feeds = {k: v.astype(dtype) for k, v in feeds.items()}
    while names[-1] == "":
        names.pop()
    node = helper.make_node(
        "LinearAttention", names, ["output", "present_state"], update_rule=rule,
        q_num_heads=q_heads, kv_num_heads=kv_heads, **attrs,
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "linear_attention",
        [helper.make_tensor_value_info(n, elem, a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, elem, None) for o in ("output", "present_state")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)]), feeds


CASES = {
    "linear": {"rule": "linear"},
    "gated-per-head": {"rule": "gated", "past": False},
    "gated-per-key": {"rule": "gated", "decay_per_key": True},
    "delta": {"rule": "delta"},
    "gated-delta-gqa-scalar-beta": {"q_heads": 4, "kv_heads": 2, "beta_heads": 1},
    "gated-delta-scale-one-step": {"steps": 1, "scale": 0.7},
}


def _check(model, feeds, target, tol):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = fusec.compile(fusec.from_onnx(model), target=target)(*feeds.values())
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert_close(g, w, tol=tol)


@pytest.mark.parametrize("case", sorted(CASES))
def test_linear_attention_matches_onnx_reference(case):
    _check(*_case(**CASES[case]), target="reference", tol=1e-4)


def test_linear_attention_in_float16():
    _check(*_case(dtype=np.float16), target="reference", tol=1e-2)


@pytest.mark.slow  # kernel compiles
@pytest.mark.parametrize("case", ["gated-delta-gqa-scalar-beta", "gated-per-key"])
def test_linear_attention_on_the_cpu_target(case):
    _check(*_case(**CASES[case]), target="cpu", tol=1e-4)


def test_a_long_sequence_is_refused_with_the_reason():
    from fusec.frontend.onnx_linear_attention import MAX_STEPS

    model, _ = _case(steps=MAX_STEPS + 1)
    with pytest.raises(UnsupportedOnnx, match=f"unrolls LinearAttention up to {MAX_STEPS}"):
        fusec.from_onnx(model)


def test_a_rule_without_its_input_is_a_located_error():
    model, _ = _case(rule="delta")
    (rule,) = [a for a in model.graph.node[0].attribute if a.name == "update_rule"]
    rule.s = b"gated"  # gated, but no decay given
    with pytest.raises(FusecError) as caught:
        fusec.from_onnx(model)
    assert "error: LinearAttention: update_rule 'gated' needs decay" in caught.value.format()
