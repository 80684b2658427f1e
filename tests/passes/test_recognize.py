"""``recognize-patterns``: exporters' spellings of GELU, LayerNorm, scales and reshapes.

Each case is IR as an importer builds it from an exported graph; the pass must
rewrite it into the dialect's op (the ops that remain are pinned) and keep its
meaning: the float64 reference gives the same results before and after, on
random inputs (to 1e-6: the constants written in the IR are float32 roundings
of the numbers the dialect's ops use exactly). Negative cases pin what must not be rewritten.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from numerics import assert_close

import fusec
from fusec.dialect import ops as ai
from fusec.passes.recognize import recognize
from fusec.runtime.reference import entry_function, run_reference
from fusec.tools import runner

T = "tensor<2x5x8xf32>"
S = "tensor<f32>"


def _func(args: str, body: str, result: str = T) -> str:
    return f"func.func @f({args}) -> {result} {{\n{body}\n  return %r : {result}\n}}"


def _consts(**values: float) -> str:
    return "\n".join(
        f"  %{name} = arith.constant dense<{value:.9e}> : {S}" for name, value in values.items()
    )


def _check(text: str, expected_ops: Counter, rewrites: dict[str, int] | None = None) -> None:
    """Recognise, pin the ai ops left (and the rewrites counted), compare numerics."""
    before = fusec.parse(text)
    after = fusec.parse(text)
    counts = recognize(after)
    after.verify()
    left = Counter(op.name for op in after.walk() if isinstance(op, ai.AiOp))
    assert left == expected_ops, str(after)
    if rewrites is not None:
        assert {k: counts[k] for k in rewrites} == rewrites, counts
    fn = entry_function(before)
    inputs = runner.random_inputs(fn, seed=3)
    want = run_reference(before, inputs, precision="float64")
    got = run_reference(after, inputs, precision="float64")
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, tol=1e-6)


# ------------------------------------------------------------------ GELU

ERF_FORMS = {
    # x * (0.5 * (1 + erf(x / sqrt2))), as the dynamo exporter writes it
    "dynamo": """
  %d = ai.div %x, %sqrt2 : {T} * {S}
  %e = ai.erf %d : {T}
  %a = ai.add %e, %one : {T} * {S}
  %m = ai.mul %half, %a : {S} * {T}
  %r = ai.mul %x, %m : {T} * {T}""",
    # (x * (1 + erf(x * 1/sqrt2))) * 0.5, other orders and the reciprocal
    "reassociated": """
  %d = ai.mul %rsqrt2, %x : {S} * {T}
  %e = ai.erf %d : {T}
  %a = ai.add %one, %e : {S} * {T}
  %m = ai.mul %a, %x : {T} * {T}
  %r = ai.mul %m, %half : {T} * {S}""",
}


@pytest.mark.parametrize("form", ERF_FORMS)
def test_erf_gelu(form):
    consts = _consts(sqrt2=2**0.5, rsqrt2=0.5**0.5, one=1.0, half=0.5)
    text = _func(f"%x: {T}", consts + ERF_FORMS[form].format(T=T, S=S))
    _check(text, Counter({"ai.gelu": 1}), {"gelu (erf)": 1})


def test_gpt2_tanh_gelu_with_pow_and_with_products():
    consts = _consts(half=0.5, three=3.0, c=0.044715, k=0.7978845608028654, one=1.0)
    for cube in (
        f"  %p = ai.pow %x, %three : {T} * {S}",
        f"  %xx = ai.mul %x, %x : {T} * {T}\n  %p = ai.mul %xx, %x : {T} * {T}",
    ):
        body = f"""{consts}
  %h = ai.mul %x, %half : {T} * {S}
{cube}
  %q = ai.mul %p, %c : {T} * {S}
  %s = ai.add %x, %q : {T} * {T}
  %u = ai.mul %s, %k : {T} * {S}
  %t = ai.tanh %u : {T}
  %a = ai.add %t, %one : {T} * {S}
  %r = ai.mul %h, %a : {T} * {T}"""
        _check(_func(f"%x: {T}", body), Counter({"ai.gelu": 1}), {"gelu (tanh)": 1})


def test_f16_tanh_gelu_with_its_constants_rounded_to_f16():
    """An f16 GPT-2 holds sqrt(2/pi) as 0.7978515625 and 0.044715 as 0.04470825: still the
    tanh GELU (before, the chain stayed a pointwise kernel of its own after the MLP-up
    GEMM instead of joining its epilogue); a constant off by more than its rounding is not."""
    h, hs = "tensor<2x5x8xf16>", "tensor<f16>"

    def body(k: float) -> str:
        consts = "\n".join(
            f"  %{name} = arith.constant dense<{float(np.float16(value)):.9e}> : {hs}"
            for name, value in dict(half=0.5, c=0.044715, k=k, one=1.0).items()
        )
        return f"""{consts}
  %h = ai.mul %x, %half : {h} * {hs}
  %xx = ai.mul %x, %x : {h} * {h}
  %p = ai.mul %xx, %x : {h} * {h}
  %q = ai.mul %p, %c : {h} * {hs}
  %s = ai.add %x, %q : {h} * {h}
  %u = ai.mul %s, %k : {h} * {hs}
  %t = ai.tanh %u : {h}
  %a = ai.add %t, %one : {h} * {hs}
  %r = ai.mul %h, %a : {h} * {h}"""

    text = _func(f"%x: {h}", body(0.7978845608028654), h)
    before, after = fusec.parse(text), fusec.parse(text)
    assert recognize(after)["gelu (tanh)"] == 1
    assert Counter(op.name for op in after.walk() if isinstance(op, ai.AiOp)) == {"ai.gelu": 1}
    inputs = runner.random_inputs(entry_function(before), seed=3)
    (want,) = run_reference(before, inputs, precision="float64")
    (got,) = run_reference(after, inputs, precision="float64")
    assert_close(got, want, "f16")
    off = fusec.parse(_func(f"%x: {h}", body(0.7985), h))  # two f16 steps away
    assert recognize(off)["gelu (tanh)"] == 0


def test_a_gelu_factor_used_elsewhere_is_kept():
    """1 + erf(...) is also returned: rewriting would not remove it; nothing changes."""
    consts = _consts(sqrt2=2**0.5, one=1.0, half=0.5)
    body = f"""{consts}
  %d = ai.div %x, %sqrt2 : {T} * {S}
  %e = ai.erf %d : {T}
  %a = ai.add %e, %one : {T} * {S}
  %m = ai.mul %half, %a : {S} * {T}
  %g = ai.mul %x, %m : {T} * {T}
  %r = ai.add %g, %a : {T} * {T}"""
    expected = Counter({"ai.div": 1, "ai.erf": 1, "ai.add": 2, "ai.mul": 2})
    _check(_func(f"%x: {T}", body), expected)


# ------------------------------------------------------------------ LayerNorm


def _moments(square: str, tail: str) -> str:
    consts = _consts(two=2.0, eps=1e-5)
    return f"""{consts}
  %mean = ai.reduce_mean %x {{axes = array<i64: -1>, keepdims = true}} : {T}
  %c = ai.sub %x, %mean : {T} * tensor<2x5x1xf32>
  {square}
  %var = ai.reduce_mean %sq {{axes = array<i64: 2>, keepdims = true}} : {T}
  %ve = ai.add %var, %eps : tensor<2x5x1xf32> * {S}
  %std = ai.sqrt %ve : tensor<2x5x1xf32>
  %n = ai.div %c, %std : {T} * tensor<2x5x1xf32>
{tail}"""


@pytest.mark.parametrize(
    ("square", "tail"),
    [
        (
            f"%sq = ai.pow %c, %two : {T} * {S}",
            f"  %s = ai.mul %n, %g : {T} * tensor<8xf32>\n"
            f"  %r = ai.add %s, %b : {T} * tensor<8xf32>",
        ),
        (
            f"%sq = ai.mul %c, %c : {T} * {T}",
            f"  %s = ai.mul %g, %n : tensor<8xf32> * {T}\n"
            f"  %r = ai.add %b, %s : tensor<8xf32> * {T}",
        ),
        (f"%sq = ai.mul %c, %c : {T} * {T}", f"  %r = ai.mul %n, %g : {T} * tensor<8xf32>"),
        (f"%sq = ai.mul %c, %c : {T} * {T}", f"  %r = ai.add %n, %b : {T} * tensor<8xf32>"),
    ],
    ids=["pow_scale_shift", "product_reordered", "scale_only", "plain_then_shift"],
)
def test_layernorm_from_moments(square, tail):
    args = f"%x: {T}, %g: tensor<8xf32>, %b: tensor<8xf32>"
    text = _func(args, _moments(square, tail))
    expected = Counter({"ai.layernorm": 1})
    if "%r = ai.add %n" in tail:  # a shift without a scale: the shift stays an add
        expected["ai.add"] = 1
    _check(text, expected, {"layernorm": 1})


def test_a_mean_used_elsewhere_is_no_layernorm():
    body = _moments(
        f"%sq = ai.mul %c, %c : {T} * {T}", f"  %r = ai.add %n, %mean : {T} * tensor<2x5x1xf32>"
    )
    text = _func(f"%x: {T}", body)
    after = fusec.parse(text)
    recognize(after)
    assert not any(isinstance(op, ai.LayerNormOp) for op in after.walk())


# ------------------------------------------------------------------ scales, reshapes


def test_attention_scales_move_after_the_matmul_through_views():
    """q * s @ (transpose(reshape(k)) * s): both scales leave the operands, through the
    key's layout ops, and merge into one scale of the product."""
    q, k = "tensor<2x4x6x8xf32>", "tensor<2x6x32xf32>"
    body = f"""{_consts(s=0.35355339)}
  %qs = ai.mul %q, %s : {q} * {S}
  %ks = ai.mul %k, %s : {k} * {S}
  %kh = ai.reshape %ks {{shape = array<i64: 2, 6, 4, 8>}} : {k}
  %kt = ai.transpose %kh {{perm = array<i64: 0, 2, 3, 1>}} : tensor<2x6x4x8xf32>
  %r = ai.matmul %qs, %kt : {q} * tensor<2x4x8x6xf32>"""
    expected = Counter({"ai.matmul": 1, "ai.mul": 1, "ai.reshape": 1, "ai.transpose": 1})
    _check(
        _func(f"%q: {q}, %k: {k}", body, "tensor<2x4x6x6xf32>"),
        expected,
        {"scale moved after matmul": 1, "scales merged": 1},
    )


def test_a_linear_layer_on_a_flattened_input_becomes_batched():
    """reshape -> matmul -> bias -> reshape back -> gelu (a Gemm export): the reshapes
    vanish and the bias meets the gelu in one epilogue."""
    x, w, b = "tensor<2x5x8xf32>", "tensor<8x16xf32>", "tensor<16xf32>"
    body = f"""
  %flat = ai.reshape %x {{shape = array<i64: 10, 8>}} : {x}
  %m = ai.matmul %flat, %w : tensor<10x8xf32> * {w}
  %a = ai.bias_add %m, %b : tensor<10x16xf32> * {b}
  %back = ai.reshape %a {{shape = array<i64: 2, 5, 16>}} : tensor<10x16xf32>
  %r = ai.gelu %back : tensor<2x5x16xf32>"""
    text = _func(f"%x: {x}, %w: {w}, %b: {b}", body, "tensor<2x5x16xf32>")
    _check(text, Counter({"ai.matmul": 1, "ai.bias_add": 1, "ai.gelu": 1}))
    kinds = [k.kind for k in fusec.compile(text, target="cpu").kernels]
    assert kinds == ["matmul"]


def test_a_flattened_one_row_batch_stays_one_product():
    """reshape (5, 1, 8) -> (5, 8) -> matmul: the unit dim goes to the columns, so the
    product keeps its 5 rows (not 5 batched one-row products, each reading all of w)."""
    x, w = "tensor<5x1x8xf32>", "tensor<8x16xf32>"
    body = f"""
  %flat = ai.reshape %x {{shape = array<i64: 5, 8>}} : {x}
  %r = ai.matmul %flat, %w : tensor<5x8xf32> * {w}"""
    text = _func(f"%x: {x}, %w: {w}", body, "tensor<5x16xf32>")
    _check(text, Counter({"ai.matmul": 1, "ai.reshape": 1}), {"reshape moved after matmul": 0})
    module = fusec.parse(text)
    recognize(module)
    (matmul,) = (op for op in module.walk() if isinstance(op, ai.MatmulOp))
    assert str(matmul.operands[0].type) == "tensor<5x8xf32>"


def test_a_batch_of_one_row_products_becomes_rows():
    """(5, 1, 8) @ (8, 16) + bias, as PyTorch's MultiheadAttention exports its input
    projection at batch 1: one 5-row product whose bias stays in its epilogue;
    ``ReshapeAfterMatmul`` does not batch it back."""
    x, w, b, y = "tensor<5x1x8xf32>", "tensor<8x16xf32>", "tensor<16xf32>", "tensor<5x1x16xf32>"
    body = f"""
  %m = ai.matmul %x, %w : {x} * {w}
  %r = ai.bias_add %m, %b {{axis = 2}} : {y} * {b}"""
    text = _func(f"%x: {x}, %w: {w}, %b: {b}", body, y)
    expected = Counter({"ai.matmul": 1, "ai.bias_add": 1, "ai.reshape": 2})
    _check(text, expected, {"one-row batched products merged into rows": 1})
    module = fusec.parse(text)
    recognize(module)
    (matmul,) = (op for op in module.walk() if isinstance(op, ai.MatmulOp))
    assert str(matmul.results[0].type) == "tensor<5x16xf32>"
    kernels = fusec.compile(text, target="cpu").kernels
    assert [k.kind for k in kernels] == ["matmul"]


def test_a_batch_of_longer_products_stays_batched():
    """(2, 4, 8) @ (8, 16): products of more than one row stay a batch (merging them
    would put reshapes between the product and its neighbours)."""
    x, w, y = "tensor<2x4x8xf32>", "tensor<8x16xf32>", "tensor<2x4x16xf32>"
    body = f"  %r = ai.matmul %x, %w : {x} * {w}"
    _check(_func(f"%x: {x}, %w: {w}", body, y), Counter({"ai.matmul": 1}))


def test_pow_and_neutral_operands():
    body = f"""{_consts(two=2.0, half=0.5, zero=0.0, one=1.0)}
  %a = ai.pow %x, %two : {T} * {S}
  %b = ai.abs %a : {T}
  %c = ai.pow %b, %half : {T} * {S}
  %d = ai.add %c, %zero : {T} * {S}
  %r = ai.mul %one, %d : {S} * {T}"""
    _check(_func(f"%x: {T}", body), Counter({"ai.mul": 1, "ai.abs": 1, "ai.sqrt": 1}))


def test_the_default_pipeline_recognises():
    consts = _consts(sqrt2=2**0.5, one=1.0, half=0.5)
    text = _func(f"%x: {T}", consts + ERF_FORMS["dynamo"].format(T=T, S=S))
    ir = fusec.compile(text, target="reference").ir
    assert "ai.gelu" in ir and "ai.erf" not in ir


def test_scalars_are_left_alone():
    """A scalar has no last axis to scale or shift along (found by tests/differential:
    the pattern used to index the empty shape of a 0-d tensor)."""
    text = """func.func @f(%a: tensor<f32>) -> tensor<f32> {
  %r = ai.relu %a : tensor<f32>
  %s = ai.add %a, %r : tensor<f32> * tensor<f32>
  return %s : tensor<f32>
}"""
    compiled = fusec.compile(text, target="reference")
    assert compiled.ir.count("ai.add") == 1


def test_a_vector_against_a_reshaped_scalar_stays():
    """where(c, x, reshape(scalar)) with a (1,) condition: the reshape's source has no
    last axis for the vector to run along, so nothing sinks (found by tests/differential:
    the pattern indexed the empty shape)."""
    text = """func.func @f(%a: tensor<f32>) -> tensor<1x1x1xf32> {
  %c = arith.constant dense<1.0> : tensor<1xf32>
  %r = ai.reshape %a {shape = array<i64: 1, 1, 1>} : tensor<f32>
  %w = ai.where %c, %a, %r : tensor<1xf32> * tensor<f32> * tensor<1x1x1xf32>
  return %w : tensor<1x1x1xf32>
}"""
    _check(text, Counter({"ai.reshape": 1, "ai.where": 1}))


def test_a_bias_on_a_reshaped_scalar_stays():
    """bias_add(reshape(scalar to 1x1), b): the scalar has no axis for the bias, so the
    reshape does not sink (found by tests/differential on the H200: the pattern indexed
    the empty shape)."""
    text = """func.func @f(%a: tensor<f32>, %b: tensor<1xf32>) -> tensor<1x1xf32> {
  %r = ai.reshape %a {shape = array<i64: 1, 1>} : tensor<f32>
  %y = ai.bias_add %r, %b {axis = 1 : i64} : tensor<1x1xf32> * tensor<1xf32>
  return %y : tensor<1x1xf32>
}"""
    _check(text, Counter({"ai.reshape": 1, "ai.bias_add": 1}))


# ------------------------------------------------------------------ attention

Q, K_T, V = "tensor<2x3x6x8xf32>", "tensor<2x3x8x6xf32>", "tensor<2x3x6x8xf32>"
P = "tensor<2x3x6x6xf32>"


def test_gpt2_attention_with_a_causal_mask_and_the_nan_guard():
    """softmax(q @ kt * s + mask) guarded against NaN, then @ v: one ai.attention."""
    mask = np.triu(np.full((6, 6), -np.inf), 1)
    rows = ", ".join("[" + ", ".join(f"{v:.1e}" for v in row) + "]" for row in mask)
    rows = rows.replace("-inf", "0xFF800000")
    body = f"""{_consts(s=0.125, zero=0.0)}
  %mask = arith.constant dense<[{rows}]> : tensor<6x6xf32>
  %qk = ai.matmul %q, %kt : {Q} * {K_T}
  %sc = ai.mul %qk, %s : {P} * {S}
  %am = ai.add %sc, %mask : {P} * tensor<6x6xf32>
  %p = ai.softmax %am : {P}
  %n = ai.isnan %p : {P}
  %g = ai.where %n, %zero, %p : {P} * {S} * {P}
  %r = ai.matmul %g, %v : {P} * {V}"""
    text = _func(f"%q: {Q}, %kt: {K_T}, %v: {V}", body, V)
    # k^T given as it is: the key is its transpose (a view of it for the kernels)
    _check(text, Counter({"ai.attention": 1, "ai.transpose": 1}), {"attention": 1})
    module = fusec.parse(text)
    recognize(module)
    (op,) = [o for o in module.walk() if isinstance(o, ai.AttentionOp)]
    assert op.attr("nan_to_zero") and op.attr("scale") == 0.125


def test_bert_attention_without_mask_or_guard():
    body = f"""
  %qk = ai.matmul %q, %kt : {Q} * {K_T}
  %p = ai.softmax %qk : {P}
  %r = ai.matmul %p, %v : {P} * {V}"""
    expected = Counter({"ai.attention": 1, "ai.transpose": 1})
    _check(_func(f"%q: {Q}, %kt: {K_T}, %v: {V}", body, V), expected)


def test_probabilities_used_elsewhere_are_no_attention():
    body = f"""
  %qk = ai.matmul %q, %kt : {Q} * {K_T}
  %p = ai.softmax %qk : {P}
  %o = ai.matmul %p, %v : {P} * {V}
  %r = ai.reduce_sum %p {{axes = array<i64: 3>, keepdims = true}} : {P}"""
    module = fusec.parse(_func(f"%q: {Q}, %kt: {K_T}, %v: {V}", body, "tensor<2x3x6x1xf32>"))
    recognize(module)
    assert not any(isinstance(o, ai.AttentionOp) for o in module.walk())


def _remarks(text: str) -> list[str]:
    return [str(r) for r in fusec.compile(text, target="cpu", executable=False).remarks()]


def test_why_a_chain_is_not_attention_is_a_remark():
    """A chain that looks like attention but is not one says why, at its last matmul."""
    runtime_scale = f"""
  %s = ai.matmul %q, %kt : {Q} * {K_T}
  %t = ai.mul %s, %c : {P} * {S}
  %p = ai.softmax %t : {P}
  %r = ai.matmul %p, %v : {P} * {V}"""
    remarks = _remarks(_func(f"%q: {Q}, %kt: {K_T}, %v: {V}, %c: {S}", runtime_scale, V))
    why = "not recognised as ai.attention: the scores are scaled by a value that is not one"
    assert any(r.startswith("<string>:6:3: remark: ai.matmul") and why in r for r in remarks)
    returned = f"""
  %s = ai.matmul %q, %kt : {Q} * {K_T}
  %p = ai.softmax %s : {P}
  %o = ai.matmul %p, %v : {P} * {V}"""
    text = _func(f"%q: {Q}, %kt: {K_T}, %v: {V}", returned, f"{V}, {P}")
    text = text.replace("return %r : " + f"{V}, {P}", "return %o, %p : " + f"{V}, {P}")
    text = text.replace(f"-> {V}, {P} {{", f"-> ({V}, {P}) {{")
    why = "not recognised as ai.attention: the probabilities are also read by func.return"
    assert any(why in r for r in _remarks(text)), _remarks(text)
