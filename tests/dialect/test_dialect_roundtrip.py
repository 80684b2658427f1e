"""The ai dialect prints and parses back: custom and generic form, every op.

Also: the design-document text parses exactly as written, builders infer the
same result types as the parser, and defaults are elided when printing.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples
from xdsl.dialects.builtin import ModuleOp, TensorType, f16, f32
from xdsl.ir import Block
from xdsl.printer import Printer

from fusec.dialect import AI, FusedOp, ShapeError, TensorSpec, YieldOp, spec_of
from fusec.dialect import ops as ai
from fusec.errors import FusecError
from fusec.frontend.mlir import parse_module

DESIGN_DOC_TEXT = """\
func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
  %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
  %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
  %r = ai.relu %b : tensor<1x64x26x26xf16>
  return %r : tensor<1x64x26x26xf16>
}
"""  # noqa: E501 - verbatim from the design document

DESIGN_DOC_PRINTED = """\
builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
    %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
    %r = ai.relu %b : tensor<1x64x26x26xf16>
    func.return %r : tensor<1x64x26x26xf16>
  }
}"""  # noqa: E501


def generic(module: ModuleOp) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(module)
    return stream.getvalue()


def wrap(args: str, body: str, results: str) -> str:
    """A one-function module whose body ends by returning %r."""
    return f"func.func @f({args}) -> {results} {{\n{body}\n  return %r : {results}\n}}\n"


def _short_names(base: type) -> list[str]:
    """``relu``, ... for every dialect op derived from ``base`` (new ops are covered too)."""
    return [op.name.removeprefix("ai.") for op in ai.TENSOR_OPS if issubclass(op, base)]


# One snippet per op (several for ops with attributes): (args, body, result type).
T = "tensor<2x3xf32>"


def _element_type(name: str) -> str:
    """The first of f32, i64, i1 that the op ``ai.<name>`` takes."""
    op = next(op for op in ai.TENSOR_OPS if op.name == f"ai.{name}")
    return next(t for t in ("f32", "i64", "i1") if t in op.DTYPES)


def _binary_case(name: str) -> tuple[str, str, str]:
    t = _element_type(name)
    result = "i1" if name in ("equal", "less", "greater", "less_equal", "greater_equal") else t
    body = f"  %r = ai.{name} %a, %b : tensor<2x3x{t}> * tensor<3x{t}>"
    return f"%a: tensor<2x3x{t}>, %b: tensor<3x{t}>", body, f"tensor<2x3x{result}>"


def _unary_case(name: str) -> tuple[str, str, str]:
    t = f"tensor<2x3x{_element_type(name)}>"
    return f"%a: {t}", f"  %r = ai.{name} %a : {t}", t


OP_CASES: dict[str, tuple[str, str, str]] = {
    "conv2d": (
        "%x: tensor<1x4x8x8xf16>, %w: tensor<6x4x3x3xf16>",
        "  %r = ai.conv2d %x, %w : tensor<1x4x8x8xf16> * tensor<6x4x3x3xf16>",
        "tensor<1x6x6x6xf16>",
    ),
    "conv2d_all_attrs": (
        "%x: tensor<2x4x9x8xbf16>, %w: tensor<6x2x3x2xbf16>",
        "  %r = ai.conv2d %x, %w {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>,"
        " dilations = array<i64: 2, 3>, groups = 2 : i64} : tensor<2x4x9x8xbf16> *"
        " tensor<6x2x3x2xbf16>",
        "tensor<2x6x4x6xbf16>",
    ),
    "bias_add": (
        "%x: tensor<2x3x4xf32>, %b: tensor<3xf32>",
        "  %r = ai.bias_add %x, %b : tensor<2x3x4xf32> * tensor<3xf32>",
        "tensor<2x3x4xf32>",
    ),
    "bias_add_axis": (
        "%x: tensor<2x3x4xf32>, %b: tensor<4xf32>",
        "  %r = ai.bias_add %x, %b {axis = -1 : i64} : tensor<2x3x4xf32> * tensor<4xf32>",
        "tensor<2x3x4xf32>",
    ),
    **{name: _binary_case(name) for name in _short_names(ai.BinaryOp)},
    "add_scalar": (f"%a: {T}, %s: tensor<f32>", f"  %r = ai.add %s, %a : tensor<f32> * {T}", T),
    "add_i64": (
        "%a: tensor<2x3xi64>, %b: tensor<3xi64>",
        "  %r = ai.add %a, %b : tensor<2x3xi64> * tensor<3xi64>",
        "tensor<2x3xi64>",
    ),
    "mod_fmod": (
        "%a: tensor<2x3xi32>, %b: tensor<3xi32>",
        "  %r = ai.mod %a, %b {fmod = true} : tensor<2x3xi32> * tensor<3xi32>",
        "tensor<2x3xi32>",
    ),
    **{name: _unary_case(name) for name in _short_names(ai.UnaryOp)},
    "where_i1": (
        "%c: tensor<3xi1>, %a: tensor<2x3xi64>, %b: tensor<i64>",
        "  %r = ai.where %c, %a, %b : tensor<3xi1> * tensor<2x3xi64> * tensor<i64>",
        "tensor<2x3xi64>",
    ),
    "cast_to_i1": (
        f"%a: {T}",
        f"  %r = ai.cast %a : {T} to tensor<2x3xi1>",
        "tensor<2x3xi1>",
    ),
    "take": (
        "%t: tensor<10x4xf16>, %i: tensor<2x3xi64>",
        "  %r = ai.take %t, %i : tensor<10x4xf16> * tensor<2x3xi64>",
        "tensor<2x3x4xf16>",
    ),
    "take_axis": (
        "%t: tensor<4x10xf32>, %i: tensor<5xi32>",
        "  %r = ai.take %t, %i {axis = -1 : i64} : tensor<4x10xf32> * tensor<5xi32>",
        "tensor<4x5xf32>",
    ),
    "quantize_per_axis": (
        "%a: tensor<2x6xf32>, %s: tensor<2xf32>, %z: tensor<2xf8E4M3FN>",
        "  %r = ai.quantize %a, %s, %z {axis = 0 : i64} : tensor<2x6xf32> * tensor<2xf32> * "
        "tensor<2xf8E4M3FN>",
        "tensor<2x6xf8E4M3FN>",
    ),
    "dequantize_per_block": (
        "%a: tensor<2x6xi8>, %s: tensor<2x3xf32>, %z: tensor<2x3xi8>",
        "  %r = ai.dequantize %a, %s, %z {axis = 1 : i64, block_size = 2 : i64} : "
        "tensor<2x6xi8> * tensor<2x3xf32> * tensor<2x3xi8>",
        "tensor<2x6xf32>",
    ),
    "cumsum": (
        "%a: tensor<2x3xi64>",
        "  %r = ai.cumsum %a {axis = 1 : i64, exclusive = true, reverse = true} : tensor<2x3xi64>",
        "tensor<2x3xi64>",
    ),
    "argmax": (
        "%a: tensor<2x3xf16>",
        "  %r = ai.argmax %a {axis = -1 : i64, keepdims = false} : tensor<2x3xf16>",
        "tensor<2xi64>",
    ),
    "argmin_last": (
        "%a: tensor<2x3xi32>",
        "  %r = ai.argmin %a {select_last_index = true} : tensor<2x3xi32>",
        "tensor<1x3xi64>",
    ),
    "expand": (
        "%a: tensor<3x1xi1>",
        "  %r = ai.expand %a {shape = array<i64: 2, 3, 4>} : tensor<3x1xi1>",
        "tensor<2x3x4xi1>",
    ),
    "relu_with_discardable_attribute": (
        f"%a: {T}",
        f'  %r = ai.relu %a {{fusec.origin = "onnx:Relu_3"}} : {T}',
        T,
    ),
    "gelu_tanh": (f"%a: {T}", f'  %r = ai.gelu %a {{approximate = "tanh"}} : {T}', T),
    "matmul": (
        "%a: tensor<2x3xf16>, %b: tensor<3x5xf16>",
        "  %r = ai.matmul %a, %b : tensor<2x3xf16> * tensor<3x5xf16>",
        "tensor<2x5xf16>",
    ),
    "matmul_transposed_batched": (
        "%a: tensor<4x1x3x2xf32>, %b: tensor<7x5x3xf32>",
        "  %r = ai.matmul %a, %b {transpose_a = true, transpose_b = true} :"
        " tensor<4x1x3x2xf32> * tensor<7x5x3xf32>",
        "tensor<4x7x2x5xf32>",
    ),
    "layernorm": (
        "%x: tensor<2x8xbf16>, %g: tensor<8xbf16>, %b: tensor<8xbf16>",
        "  %r = ai.layernorm %x, %g, %b : tensor<2x8xbf16> * tensor<8xbf16> * tensor<8xbf16>",
        "tensor<2x8xbf16>",
    ),
    "layernorm_eps": (
        "%x: tensor<2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>",
        "  %r = ai.layernorm %x, %g, %b {epsilon = 1.000000e-03 : f32} :"
        " tensor<2x8xf32> * tensor<8xf32> * tensor<8xf32>",
        "tensor<2x8xf32>",
    ),
    "rms_norm": (
        "%x: tensor<2x8xf16>, %g: tensor<8xf16>",
        "  %r = ai.rms_norm %x, %g {epsilon = 1.000000e-05 : f32} :"
        " tensor<2x8xf16> * tensor<8xf16>",
        "tensor<2x8xf16>",
    ),
    "rotate_half": (
        "%x: tensor<2x3x8xbf16>",
        "  %r = ai.rotate_half %x : tensor<2x3x8xbf16>",
        "tensor<2x3x8xbf16>",
    ),
    "batch_norm": (
        "%x: tensor<2x3x4xf32>, %v: tensor<3xf32>",
        "  %r = ai.batch_norm %x, %v, %v, %v, %v {epsilon = 1.000000e-03 : f32} :"
        " tensor<2x3x4xf32> * tensor<3xf32> * tensor<3xf32> * tensor<3xf32> * tensor<3xf32>",
        "tensor<2x3x4xf32>",
    ),
    "softmax": (f"%a: {T}", f"  %r = ai.softmax %a : {T}", T),
    "softmax_axis": (f"%a: {T}", f"  %r = ai.softmax %a {{axis = 0 : i64}} : {T}", T),
    "cast": (f"%a: {T}", f"  %r = ai.cast %a : {T} to tensor<2x3xbf16>", "tensor<2x3xbf16>"),
    "constant": (
        "",
        "  %r = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.5]]> : tensor<2x3xf32>",
        T,
    ),
    "clip": (f"%a: {T}", f"  %r = ai.clip %a {{min = 0.0 : f32, max = 6.0 : f32}} : {T}", T),
    "where": (
        f"%c: {T}, %a: {T}, %b: tensor<3xf32>",
        f"  %r = ai.where %c, %a, %b : {T} * {T} * tensor<3xf32>",
        T,
    ),
    "reshape": (
        f"%a: {T}",
        f"  %r = ai.reshape %a {{shape = array<i64: 3, 1, 2>}} : {T}",
        "tensor<3x1x2xf32>",
    ),
    "transpose": (
        f"%a: {T}",
        f"  %r = ai.transpose %a {{perm = array<i64: 1, 0>}} : {T}",
        "tensor<3x2xf32>",
    ),
    "slice_negative_stride": (
        f"%a: {T}",
        f"  %r = ai.slice %a {{offsets = array<i64: 1, 2>, sizes = array<i64: 1, 2>, "
        f"strides = array<i64: 1, -2>}} : {T}",
        "tensor<1x2xf32>",
    ),
    "concat_three": (
        f"%a: {T}, %b: tensor<2x1xf32>",
        f"  %r = ai.concat %a, %b, %a {{axis = 1 : i64}} : {T} * tensor<2x1xf32> * {T}",
        "tensor<2x7xf32>",
    ),
    "gather": (
        f"%a: {T}",
        f"  %r = ai.gather %a {{axis = 1 : i64, indices = array<i64: 2, 2, 0>}} : {T}",
        T,
    ),
    **{
        name: (
            f"%a: {T}",
            f"  %r = ai.{name} %a {{axes = array<i64: 0>, keepdims = true}} : {T}",
            "tensor<1x3xf32>",
        )
        for name in ("reduce_mean", "reduce_sum", "reduce_max")
    },
    "reduce_all": (f"%a: {T}", f"  %r = ai.reduce_sum %a : {T}", "tensor<f32>"),
    "max_pool2d": (
        "%x: tensor<1x2x5x5xf16>",
        "  %r = ai.max_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, "
        "padding = array<i64: 1, 1>, ceil_mode = true} : tensor<1x2x5x5xf16>",
        "tensor<1x2x3x3xf16>",
    ),
    "avg_pool2d": (
        "%x: tensor<1x2x5x5xf32>",
        "  %r = ai.avg_pool2d %x {kernel = array<i64: 2, 2>, padding = array<i64: 0, 0, 1, 1>, "
        "dilations = array<i64: 2, 2>, count_include_pad = true} : tensor<1x2x5x5xf32>",
        "tensor<1x2x4x4xf32>",
    ),
    "attention": (
        "%q: tensor<2x5x4xf32>, %k: tensor<2x7x4xf32>, %v: tensor<2x7x3xf32>, %m: tensor<5x7xf32>",
        "  %r = ai.attention %q, %k, %v, %m {scale = 5.000000e-01 : f32, nan_to_zero = true} :"
        " tensor<2x5x4xf32> * tensor<2x7x4xf32> * tensor<2x7x3xf32> * tensor<5x7xf32>",
        "tensor<2x5x3xf32>",
    ),
    "moe_experts": (
        "%x: tensor<6x8xf16>, %w: tensor<6x2xf32>, %e: tensor<6x2xi32>, "
        "%gu: tensor<4x10x8xf16>, %dn: tensor<4x8x5xf16>",
        "  %r = ai.moe_experts %x, %w, %e, %gu, %dn : tensor<6x8xf16> * tensor<6x2xf32> *"
        " tensor<6x2xi32> * tensor<4x10x8xf16> * tensor<4x8x5xf16>",
        "tensor<6x8xf16>",
    ),
    "fused": (
        f"%a: {T}, %s: tensor<f32>",
        f'  %r = ai.fused "pointwise" (%a, %s) : ({T}, tensor<f32>) -> {T} {{\n'
        f"  ^bb0(%x: {T}, %y: tensor<f32>):\n"
        f"    %m = ai.mul %x, %y : {T} * tensor<f32>\n"
        f"    ai.yield %m : {T}\n"
        "  }",
        T,
    ),
    "fused_multi_result": (
        f"%a: {T}",
        f'  %r, %h = ai.fused "row_reduce" (%a) {{fusec.note = "kept"}} : ({T}) -> ({T},'
        f" tensor<2x3xf16>) {{\n"
        f"  ^bb0(%x: {T}):\n"
        f"    %m = ai.softmax %x : {T}\n"
        f"    %c = ai.cast %m : {T} to tensor<2x3xf16>\n"
        f"    ai.yield %m, %c : {T}, tensor<2x3xf16>\n"
        "  }",
        T,
    ),
}


@pytest.mark.parametrize("case", OP_CASES, ids=str)
def test_custom_form_round_trips(case: str):
    text = wrap(*OP_CASES[case])
    printed = str(parse_module(text))
    assert str(parse_module(printed)) == printed


@pytest.mark.parametrize("case", OP_CASES, ids=str)
def test_generic_form_round_trips(case: str):
    module = parse_module(wrap(*OP_CASES[case]))
    text = generic(module)
    assert '"ai.' in text or '"arith.constant"' in text
    reparsed = parse_module(text)
    assert generic(reparsed) == text
    assert str(reparsed) == str(module)  # generic and custom forms mean the same IR


def test_every_ai_op_has_a_round_trip_case():
    covered = set()
    for case in OP_CASES.values():
        covered |= {op.name for op in parse_module(wrap(*case)).walk()}
    assert {op.name for op in AI.operations} <= covered


def test_design_document_text_parses_exactly_as_written():
    module = parse_module(DESIGN_DOC_TEXT)
    assert str(module) == DESIGN_DOC_PRINTED
    names = [op.name for op in module.walk()]
    assert names == [
        "builtin.module",
        "func.func",
        "ai.conv2d",
        "ai.bias_add",
        "ai.relu",
        "func.return",
    ]
    # The printed form (explicit builtin.module, func.return) parses back identically.
    assert str(parse_module(DESIGN_DOC_PRINTED)) == DESIGN_DOC_PRINTED


def test_default_attributes_are_elided_and_others_kept():
    text = wrap(
        "%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x3x3xf32>",
        "  %r = ai.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 1, 1>,"
        " dilations = array<i64: 1, 1>, groups = 1 : i64} : tensor<1x4x8x8xf32> *"
        " tensor<4x4x3x3xf32>",
        "tensor<1x4x8x8xf32>",
    )
    printed = str(parse_module(text))
    assert "ai.conv2d %x, %w {padding = array<i64: 1, 1>} : " in printed
    for default in ("strides", "dilations", "groups"):
        assert default not in printed


def test_attribute_values_read_back():
    module = parse_module(wrap(*OP_CASES["conv2d_all_attrs"]))
    conv = next(op for op in module.walk() if isinstance(op, ai.Conv2DOp))
    assert conv.attr_values() == {
        "strides": (2, 1),
        "padding": (1, 0, 2, 1),
        "dilations": (2, 3),
        "groups": 2,
    }
    module = parse_module(wrap(*OP_CASES["matmul"]))
    mm = next(op for op in module.walk() if isinstance(op, ai.MatmulOp))
    assert mm.attr_values() == {"transpose_a": False, "transpose_b": False}


def test_kind_must_be_registered_and_is_escaped_in_the_error():
    text = wrap(
        f"%a: {T}",
        f'  %r = ai.fused "a\\"b\\n}} {{" (%a) : ({T}) -> {T} {{\n'
        f"  ^bb0(%x: {T}):\n    ai.yield %x : {T}\n  }}",
        T,
    )
    with pytest.raises(FusecError, match="unknown kind") as err:
        parse_module(text)
    assert err.value.location is not None and err.value.location.line == 2
    assert "\n" not in err.value.message  # the kind is quoted with escapes, on one line
    printed = str(parse_module(text.replace('a\\"b\\n} {', "pointwise")))
    assert '"pointwise"' in printed and str(parse_module(printed)) == printed


# ------------------------------------------------------------------ builders


def _block_args(*types):
    return Block(arg_types=list(types)).args


def test_builders_infer_result_types():
    x, w = _block_args(TensorType(f16, [1, 3, 16, 16]), TensorType(f16, [8, 3, 3, 3]))
    conv = ai.Conv2DOp(x, w, strides=(2, 2), padding=(1, 1))
    assert spec_of(conv.results[0].type) == TensorSpec((1, 8, 8, 8), "f16")
    assert conv.attr("strides") == (2, 2) and conv.attr("dilations") == (1, 1)
    assert "dilations" not in conv.properties  # defaults are not stored

    a, b = _block_args(TensorType(f32, [4, 5]), TensorType(f32, [7, 5]))
    mm = ai.MatmulOp(a, b, transpose_b=True)
    assert spec_of(mm.results[0].type) == TensorSpec((4, 7), "f32")

    cast = ai.CastOp(a, "bf16")
    assert spec_of(cast.results[0].type) == TensorSpec((4, 5), "bf16")


def test_builder_rejects_bad_shapes_and_attributes_like_the_parser():
    a, b = _block_args(TensorType(f32, [4, 5]), TensorType(f32, [6, 7]))
    with pytest.raises(ShapeError, match="inner dimensions do not match"):
        ai.MatmulOp(a, b)
    with pytest.raises(ShapeError, match="unknown attribute 'transpose_c'"):
        ai.MatmulOp(a, b, transpose_c=True)
    with pytest.raises(ShapeError, match="target element type"):
        ai.CastOp(a, "f64")


def test_built_module_prints_and_parses_back():
    from xdsl.dialects import func

    block = Block(arg_types=[TensorType(f32, [2, 8]), TensorType(f32, [8]), TensorType(f32, [8])])
    x, g, b = block.args
    ln = ai.LayerNormOp(x, g, b, epsilon=1e-3)
    sm = ai.SoftmaxOp(ln.results[0], axis=0)
    inner = Block(arg_types=[sm.results[0].type])
    relu = ai.ReluOp(inner.args[0])
    inner.add_ops([relu, YieldOp(relu.results[0])])
    from xdsl.ir import Region

    fused = FusedOp("pointwise", [sm.results[0]], [relu.results[0].type], Region(inner))
    block.add_ops([ln, sm, fused, func.ReturnOp(fused.results[0])])
    fn = func.FuncOp(
        "built", ([a.type for a in block.args], [fused.results[0].type]), Region(block)
    )
    module = ModuleOp([fn])
    module.verify()
    text = str(module)
    assert "ai.layernorm %0, %1, %2 {epsilon = 1.000000e-03 : f32}" in text
    assert "ai.softmax %3 {axis = 0 : i64}" in text
    assert str(parse_module(text)) == text


# ------------------------------------------- shape functions vs independent formulas


@settings(max_examples=examples(30), deadline=None)
@given(
    c=st.integers(1, 4),
    g=st.sampled_from([1, 2]),
    k=st.integers(1, 3),
    h=st.integers(3, 12),
    w=st.integers(3, 12),
    kh=st.integers(1, 3),
    kw=st.integers(1, 3),
    sh=st.integers(1, 3),
    sw=st.integers(1, 3),
    dh=st.integers(1, 2),
    dw=st.integers(1, 2),
    pads=st.lists(st.integers(0, 2), min_size=4, max_size=4),
)
def test_conv2d_printed_result_type_matches_the_textbook_formula(
    c, g, k, h, w, kh, kw, sh, sw, dh, dw, pads
):
    cin, cout = c * g, k * g
    oh = (h + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pads[1] + pads[3] - dw * (kw - 1) - 1) // sw + 1
    x, wt = f"tensor<2x{cin}x{h}x{w}xf32>", f"tensor<{cout}x{c}x{kh}x{kw}xf32>"
    attrs = (
        f"{{strides = array<i64: {sh}, {sw}>, padding = array<i64: {', '.join(map(str, pads))}>,"
        f" dilations = array<i64: {dh}, {dw}>, groups = {g} : i64}}"
    )
    if oh < 1 or ow < 1:
        with pytest.raises(Exception, match="exceeds padded input"):
            parse_module(
                wrap(
                    f"%x: {x}, %w: {wt}",
                    f"  %r = ai.conv2d %x, %w {attrs} : {x} * {wt}",
                    "tensor<1xf32>",
                )
            )
        return
    result = f"tensor<2x{cout}x{oh}x{ow}xf32>"
    text = wrap(f"%x: {x}, %w: {wt}", f"  %r = ai.conv2d %x, %w {attrs} : {x} * {wt}", result)
    printed = str(parse_module(text))
    assert f"func.return %r : {result}" in printed
    assert str(parse_module(printed)) == printed


@settings(max_examples=examples(30), deadline=None)
@given(
    a=st.lists(st.integers(1, 3), min_size=0, max_size=3),
    b=st.lists(st.integers(1, 3), min_size=0, max_size=3),
)
def test_broadcasting_matches_numpy(a, b):
    import numpy as np

    try:
        want = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        want = None
    ta = f"tensor<{''.join(f'{d}x' for d in a)}f32>"
    tb = f"tensor<{''.join(f'{d}x' for d in b)}f32>"
    if want is None:
        with pytest.raises(Exception, match="do not broadcast"):
            parse_module(
                wrap(f"%a: {ta}, %b: {tb}", f"  %r = ai.add %a, %b : {ta} * {tb}", "tensor<1xf32>")
            )
        return
    result = f"tensor<{''.join(f'{d}x' for d in want)}f32>"
    printed = str(
        parse_module(wrap(f"%a: {ta}, %b: {tb}", f"  %r = ai.add %a, %b : {ta} * {tb}", result))
    )
    assert f"func.return %r : {result}" in printed
