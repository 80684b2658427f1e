"""``recognize-patterns`` on soft-capped attention (Gemma-2's ``attn_logit_softcapping``):
``softmax(cap * tanh(q @ k^T * c / cap) [+ mask]) @ v`` in the spellings exporters write
becomes one ``ai.attention {softcap = cap, scale = c}`` that the float64 reference
evaluates as the ops did (to 1e-6: the property holds the f32 rounding of the factors'
product); a cap that is not one positive constant, or capped scores read elsewhere,
stay ops with a remark saying why."""

from __future__ import annotations

from collections import Counter

import pytest
from numerics import assert_close

import fusec
from fusec.dialect import ops as ai
from fusec.passes.recognize import recognize
from fusec.runtime.reference import entry_function, run_reference
from fusec.tools import runner

Q, K_T, V = "tensor<2x3x6x8xf32>", "tensor<2x3x8x6xf32>", "tensor<2x3x6x8xf32>"
P, S, MASK = "tensor<2x3x6x6xf32>", "tensor<f32>", "tensor<6x6xf32>"
CAP, SCALE = 1.5, 0.7

FORMS = {
    # HF's Gemma-2 eager attention as the dynamo exporter writes it: (s * c) / cap, a mask
    "scale-then-div": (
        True,
        """
  %a = ai.mul %qk, %s : {P} * {S}
  %b = ai.div %a, %cap : {P} * {S}
  %t = ai.tanh %b : {P}
  %sc = ai.mul %t, %cap : {P} * {S}""",
    ),
    # the reciprocal first, operands commuted, the cap's product commuted
    "reciprocal-first": (
        False,
        """
  %a = ai.mul %rcap, %qk : {S} * {P}
  %b = ai.mul %s, %a : {S} * {P}
  %t = ai.tanh %b : {P}
  %sc = ai.mul %cap, %t : {S} * {P}""",
    ),
    # scale / cap folded into one factor
    "one-factor": (
        False,
        """
  %b = ai.mul %qk, %f : {P} * {S}
  %t = ai.tanh %b : {P}
  %sc = ai.mul %t, %cap : {P} * {S}""",
    ),
    # no scale: cap * tanh(s / cap), a mask added first
    "unscaled": (
        True,
        """
  %b = ai.div %qk, %cap : {P} * {S}
  %t = ai.tanh %b : {P}
  %sc = ai.mul %t, %cap : {P} * {S}""",
    ),
}


def _consts(**values: float) -> str:
    return "\n".join(
        f"  %{name} = arith.constant dense<{value:.9e}> : {S}" for name, value in values.items()
    )


def _text(scores: str, masked: bool, cap: float = CAP, result: str = V) -> str:
    consts = _consts(s=SCALE, cap=cap, rcap=1.0 / cap, f=SCALE / cap)
    if masked:
        probs = f"\n  %am = ai.add %mask, %sc : {MASK} * {P}\n  %p = ai.softmax %am : {P}"
    else:
        probs = f"\n  %p = ai.softmax %sc : {P}"
    args = f"%q: {Q}, %kt: {K_T}, %v: {V}" + (f", %mask: {MASK}" if masked else "")
    returned = "%r" if result == V else "%r, %t"
    return f"""func.func @f({args}) -> ({result}) {{
{consts}
  %qk = ai.matmul %q, %kt : {Q} * {K_T}{scores.format(P=P, S=S)}{probs}
  %r = ai.matmul %p, %v : {P} * {V}
  return {returned} : {result}
}}"""


@pytest.mark.parametrize("form", FORMS)
def test_soft_capped_scores_are_the_attention_softcap(form: str) -> None:
    masked, scores = FORMS[form]
    text = _text(scores, masked)
    before, after = fusec.parse(text), fusec.parse(text)
    counts = recognize(after)
    after.verify()
    assert counts["attention"] == 1
    left = Counter(op.name for op in after.walk() if isinstance(op, ai.AiOp))
    assert left == Counter({"ai.attention": 1, "ai.transpose": 1}), str(after)
    (op,) = [o for o in after.walk() if isinstance(o, ai.AttentionOp)]
    assert op.attr("softcap") == CAP
    assert op.attr("scale") == pytest.approx(1.0 if form == "unscaled" else SCALE, rel=1e-6)
    # scores of several units: the tanh saturates, a dropped or misplaced cap shows
    inputs = [3 * x for x in runner.random_inputs(entry_function(before), seed=3)]
    want = run_reference(before, inputs, precision="float64")
    got = run_reference(after, inputs, precision="float64")
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, tol=1e-6)


def _remarks(text: str) -> list[str]:
    return [str(r) for r in fusec.compile(text, target="cpu", executable=False).remarks()]


def test_why_soft_capped_scores_are_not_attention_is_a_remark() -> None:
    """A negative cap (ai.attention's softcap would not mean the same) and capped scores
    that are also a result: the ops kept, a remark at the last matmul."""
    _, scores = FORMS["unscaled"]
    negative = _text(scores, masked=False, cap=-CAP)
    module = fusec.parse(negative)
    recognize(module)
    assert not any(isinstance(o, ai.AttentionOp) for o in module.walk())
    why = "the scores are soft-capped by a value that is not one positive constant"
    assert any(why in r for r in _remarks(negative)), _remarks(negative)
    returned = _text(scores, masked=False, result=f"{V}, {P}")
    why = "the soft-capped scores are also read elsewhere"
    assert any(why in r for r in _remarks(returned)), _remarks(returned)
