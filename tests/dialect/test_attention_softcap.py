"""``ai.attention``'s ``softcap`` (Gemma-2's logit soft-capping): ``softcap * tanh(q @ k^T *
scale / softcap)`` before the mask, 0 meaning none. The property prints only when set (an
attention without it prints as before), parses back, refuses a negative or non-finite
cap, and the numpy reference computes it in the accumulation type."""

from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.dialect import ShapeError
from fusec.dialect import numpy_ops as K
from fusec.dialect import ops as ai
from fusec.errors import FusecError

Q, KEY, V, M = "tensor<2x5x4xf32>", "tensor<2x7x4xf32>", "tensor<2x7x3xf32>", "tensor<5x7xf32>"


def _text(attrs: str, dtype: str = "f32") -> str:
    q, k, v, m, r = (t.replace("f32", dtype) for t in (Q, KEY, V, M, "tensor<2x5x3xf32>"))
    return (
        f"func.func @f(%q: {q}, %k: {k}, %v: {v}, %m: {m}) -> {r} {{\n"
        f"  %r = ai.attention %q, %k, %v, %m {attrs} : {q} * {k} * {v} * {m}\n"
        f"  return %r : {r}\n}}\n"
    )


def _op(module) -> ai.AttentionOp:
    (op,) = [o for o in module.walk() if isinstance(o, ai.AttentionOp)]
    return op


def test_softcap_prints_only_when_set_and_parses_back() -> None:
    plain = fusec.parse(_text("{scale = 5.000000e-01 : f32}"))
    zero = fusec.parse(_text("{scale = 5.000000e-01 : f32, softcap = 0.0 : f32}"))
    assert str(zero) == str(plain)  # the default is no attribute: one representation
    assert "softcap" not in str(plain)
    assert _op(plain).attr("softcap") == 0.0
    capped = fusec.parse(_text("{softcap = 5.0e+01 : f32, scale = 5.000000e-01 : f32}"))
    printed = str(capped)
    # declaration order: scale, nan_to_zero, softcap
    assert "{scale = 5.000000e-01 : f32, softcap = 5.000000e+01 : f32}" in printed
    assert str(fusec.parse(printed)) == printed
    assert _op(capped).attr("softcap") == 50.0


@pytest.mark.parametrize("cap", ["-2.0", "0x7F800000", "0x7FC00000"])
def test_a_negative_or_non_finite_softcap_is_refused(cap: str) -> None:
    with pytest.raises(FusecError, match="softcap must be 0 \\(none\\) or a positive finite"):
        fusec.parse(_text(f"{{softcap = {cap} : f32}}"))


def test_the_builder_checks_the_softcap_too() -> None:
    module = fusec.parse(_text("{scale = 5.000000e-01 : f32}"))
    q, k, v, m = _op(module).operands
    assert ai.AttentionOp(q, k, v, m, scale=0.5, softcap=30.0).attr("softcap") == 30.0
    with pytest.raises(ShapeError, match="softcap must be"):
        ai.AttentionOp(q, k, v, m, softcap=-1.0)


def _formula(q, k, v, mask, scale, cap):
    """The definition in float64: softmax(cap * tanh(q k^T scale / cap) + mask) v."""
    q, k, v, mask = (np.asarray(a, np.float64) for a in (q, k, v, mask))
    s = q @ np.swapaxes(k, -1, -2) * scale
    s = cap * np.tanh(s / cap) + mask
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def test_reference_soft_caps_before_the_mask() -> None:
    rng = np.random.default_rng(5)
    q, k = 3 * rng.standard_normal((2, 5, 4)), 3 * rng.standard_normal((2, 7, 4))
    v = rng.standard_normal((2, 7, 3))
    mask = np.triu(np.full((5, 7), -np.inf), 1)
    got = K.attention(q, k, v, mask, scale=0.5, softcap=1.5)
    np.testing.assert_allclose(got, _formula(q, k, v, mask, 0.5, 1.5), rtol=1e-12)
    # the cap changes the values (scores of several units saturate the tanh)
    assert not np.allclose(got, K.attention(q, k, v, mask, scale=0.5), rtol=1e-3)
    # 0 is no cap
    np.testing.assert_array_equal(
        K.attention(q, k, v, mask, scale=0.5, softcap=0.0), K.attention(q, k, v, mask, scale=0.5)
    )


def test_reference_of_f16_operands_soft_caps_in_f32() -> None:
    """16-bit operands: the scores, their cap and the softmax in float32, one rounding."""
    rng = np.random.default_rng(6)
    q, k, v = (
        (3 * rng.standard_normal(s)).astype(np.float16) for s in ((2, 5, 4), (2, 7, 4), (2, 7, 3))
    )
    mask = np.zeros((5, 7), np.float16)
    got = K.attention(q, k, v, mask, scale=0.5, softcap=1.5)
    assert got.dtype == np.float16
    want = _formula(q, k, v, mask, 0.5, 1.5).astype(np.float16)
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=1e-3
    )


def test_the_reference_target_runs_the_op_with_its_softcap() -> None:
    module = fusec.parse(_text("{scale = 5.000000e-01 : f32, softcap = 1.5 : f32}"))
    rng = np.random.default_rng(7)
    q, k, v = (
        3 * rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 4), (2, 7, 4), (2, 7, 3))
    )
    mask = rng.standard_normal((5, 7)).astype(np.float32)
    got = fusec.compile(module, target="reference")(q, k, v, mask)
    np.testing.assert_allclose(got, _formula(q, k, v, mask, 0.5, 1.5), rtol=1e-5, atol=1e-6)
