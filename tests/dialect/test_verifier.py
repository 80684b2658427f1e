"""Every verifier message of the ai dialect, with its location.

Each case is IR text, a regex the message must match, and a ``needle``: the
diagnostic must point at the first occurrence of the needle in the text (its
line and column are computed here, independently of the parser).
"""

from __future__ import annotations

import re

import pytest

from fusec import FusecError, SourceLocation
from fusec.frontend.mlir import parse_module

T = "tensor<2x3xf32>"


def fn(args: str, body: str, result: str = T) -> str:
    return f"func.func @f({args}) -> {result} {{\n{body}\n  return %r : {result}\n}}\n"


def position(text: str, needle: str) -> tuple[int, int]:
    index = text.index(needle)
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, col


def conv(x: str, w: str, attrs: str = "", result: str = "tensor<1x4x6x6xf32>") -> str:
    return fn(f"%x: {x}, %w: {w}", f"  %r = ai.conv2d %x, %w {attrs}: {x} * {w}", result)


X4 = "tensor<1x4x8x8xf32>"
W4 = "tensor<4x4x3x3xf32>"

# name -> (text, message regex, needle)
CASES: dict[str, tuple[str, str, str]] = {
    # ---- ai.conv2d
    "conv_channel_mismatch": (
        conv(X4, "tensor<4x3x3x3xf32>"),
        r"'ai\.conv2d' op operand 'weight' has 3 input channels \(shape 4x3x3x3\), expected 4 "
        r"to match operand 'input' \(shape 1x4x8x8, 4 channels, groups = 1\)",
        "%r = ai.conv2d",
    ),
    "conv_grouped_channel_mismatch": (
        conv(X4, W4, "{groups = 2 : i64} "),
        r"operand 'weight' has 4 input channels .*expected 2 .*groups = 2",
        "%r = ai.conv2d",
    ),
    "conv_groups_do_not_divide": (
        conv(X4, "tensor<6x1x3x3xf32>", "{groups = 3 : i64} "),
        r"groups = 3 must divide input channels \(4\) and output channels \(6\)",
        "%r = ai.conv2d",
    ),
    "conv_groups_not_positive": (
        conv(X4, W4, "{groups = 0 : i64} "),
        r"groups must be positive, got 0",
        "%r = ai.conv2d",
    ),
    "conv_padding_count": (
        conv(X4, W4, "{padding = array<i64: 1, 1, 1>} "),
        r"'ai\.conv2d' op padding must have 2 or 4 values, got 3",
        "%r = ai.conv2d",
    ),
    "conv_negative_padding": (
        conv(X4, W4, "{padding = array<i64: -1, 0>} "),
        r"padding must be non-negative, got \[-1, 0\]",
        "%r = ai.conv2d",
    ),
    "conv_strides": (
        conv(X4, W4, "{strides = array<i64: 0, 1>} "),
        r"strides must be 2 positive values, got \[0, 1\]",
        "%r = ai.conv2d",
    ),
    "conv_dilations_count": (
        conv(X4, W4, "{dilations = array<i64: 1>} "),
        r"dilations must be 2 positive values, got \[1\]",
        "%r = ai.conv2d",
    ),
    "conv_kernel_larger_than_input": (
        conv("tensor<1x4x2x8xf32>", W4),
        r"kernel height 3 \(dilated to 3\) exceeds padded input height 2",
        "%r = ai.conv2d",
    ),
    "conv_dilated_kernel_larger_than_input": (
        conv(X4, W4, "{dilations = array<i64: 1, 4>} "),
        r"kernel width 3 \(dilated to 9\) exceeds padded input width 8",
        "%r = ai.conv2d",
    ),
    "conv_input_rank": (
        conv("tensor<4x8x8xf32>", W4),
        r"operand 'input' must have rank 4, got tensor<4x8x8xf32> \(rank 3\)",
        "%r = ai.conv2d",
    ),
    "conv_weight_rank": (
        conv(X4, "tensor<4x4x3xf32>"),
        r"operand 'weight' must have rank 4, got tensor<4x4x3xf32> \(rank 3\)",
        "%r = ai.conv2d",
    ),
    "conv_dtype_mismatch": (
        conv(X4, "tensor<4x4x3x3xf16>"),
        r"operand 'weight' has element type f16, expected f32 \(the element type of 'input'\)",
        "%r = ai.conv2d",
    ),
    # ---- ai.bias_add
    "bias_length": (
        fn(f"%x: {T}, %b: tensor<4xf32>", f"  %r = ai.bias_add %x, %b : {T} * tensor<4xf32>"),
        r"'ai\.bias_add' op operand 'bias' has length 4, expected 3 "
        r"\(dim 1 of operand 'input', shape 2x3\)",
        "%r = ai.bias_add",
    ),
    "bias_rank": (
        fn(f"%x: {T}, %b: {T}", f"  %r = ai.bias_add %x, %b : {T} * {T}"),
        r"operand 'bias' must have rank 1, got tensor<2x3xf32> \(rank 2\)",
        "%r = ai.bias_add",
    ),
    "bias_axis": (
        fn(
            f"%x: {T}, %b: tensor<3xf32>",
            f"  %r = ai.bias_add %x, %b {{axis = 2 : i64}} : {T} * tensor<3xf32>",
        ),
        r"'ai\.bias_add' op axis 2 is out of range for rank 2",
        "%r = ai.bias_add",
    ),
    "bias_dtype": (
        fn(f"%x: {T}, %b: tensor<3xbf16>", f"  %r = ai.bias_add %x, %b : {T} * tensor<3xbf16>"),
        r"operand 'bias' has element type bf16, expected f32",
        "%r = ai.bias_add",
    ),
    # ---- elementwise binary
    **{
        f"{name}_broadcast": (
            fn(f"%a: {T}, %b: tensor<4xf32>", f"  %r = ai.{name} %a, %b : {T} * tensor<4xf32>"),
            rf"'ai\.{name}' op operands 'lhs' \(shape 2x3\) and 'rhs' \(shape 4\) "
            r"do not broadcast: 3 vs 4",
            f"%r = ai.{name}",
        )
        for name in ("add", "sub", "mul", "div", "maximum")
    },
    "binary_dtype_mismatch": (
        fn(f"%a: {T}, %b: tensor<2x3xf16>", f"  %r = ai.add %a, %b : {T} * tensor<2x3xf16>"),
        r"'ai\.add' op operand 'rhs' has element type f16, expected f32 "
        r"\(the element type of 'lhs'\)",
        "%r = ai.add",
    ),
    # ---- ai.matmul
    "matmul_inner_dims": (
        fn(
            "%a: tensor<2x3xf32>, %b: tensor<4x5xf32>",
            "  %r = ai.matmul %a, %b : tensor<2x3xf32> * tensor<4x5xf32>",
            "tensor<2x5xf32>",
        ),
        r"'ai\.matmul' op inner dimensions do not match: operand 'lhs' \(shape 2x3\) has K = 3, "
        r"operand 'rhs' \(shape 4x5\) has K = 4",
        "%r = ai.matmul",
    ),
    "matmul_transpose_b": (
        fn(
            "%a: tensor<2x3xf32>, %b: tensor<3x5xf32>",
            "  %r = ai.matmul %a, %b {transpose_b = true} : tensor<2x3xf32> * tensor<3x5xf32>",
            "tensor<2x5xf32>",
        ),
        r"operand 'rhs' \(shape 3x5, transposed\) has K = 5",
        "%r = ai.matmul",
    ),
    "matmul_transpose_a": (
        fn(
            "%a: tensor<2x3xf32>, %b: tensor<3x5xf32>",
            "  %r = ai.matmul %a, %b {transpose_a = true} : tensor<2x3xf32> * tensor<3x5xf32>",
            "tensor<3x5xf32>",
        ),
        r"operand 'lhs' \(shape 2x3, transposed\) has K = 2",
        "%r = ai.matmul",
    ),
    "matmul_batch_broadcast": (
        fn(
            "%a: tensor<2x2x3xf32>, %b: tensor<3x3x5xf32>",
            "  %r = ai.matmul %a, %b : tensor<2x2x3xf32> * tensor<3x3x5xf32>",
            "tensor<2x2x5xf32>",
        ),
        r"batch dimensions of 'lhs' \(2\) and 'rhs' \(3\) do not broadcast",
        "%r = ai.matmul",
    ),
    "matmul_scalar_operand": (
        fn(
            "%a: tensor<f32>, %b: tensor<3x5xf32>",
            "  %r = ai.matmul %a, %b : tensor<f32> * tensor<3x5xf32>",
            "tensor<5xf32>",
        ),
        r"operand 'lhs' must have rank",
        "%r = ai.matmul",
    ),
    "matmul_dtype": (
        fn(
            "%a: tensor<2x3xf16>, %b: tensor<3x5xf32>",
            "  %r = ai.matmul %a, %b : tensor<2x3xf16> * tensor<3x5xf32>",
            "tensor<2x5xf16>",
        ),
        r"operand 'rhs' has element type f32, expected f16",
        "%r = ai.matmul",
    ),
    # ---- ai.layernorm
    "layernorm_gamma": (
        fn(
            f"%x: {T}, %g: tensor<4xf32>, %b: tensor<3xf32>",
            f"  %r = ai.layernorm %x, %g, %b : {T} * tensor<4xf32> * tensor<3xf32>",
        ),
        r"'ai\.layernorm' op operand 'gamma' has shape 4, expected 3 "
        r"\(the last dim of operand 'input', shape 2x3\)",
        "%r = ai.layernorm",
    ),
    "layernorm_beta": (
        fn(
            f"%x: {T}, %g: tensor<3xf32>, %b: tensor<1x3xf32>",
            f"  %r = ai.layernorm %x, %g, %b : {T} * tensor<3xf32> * tensor<1x3xf32>",
        ),
        r"operand 'beta' has shape 1x3, expected 3",
        "%r = ai.layernorm",
    ),
    "layernorm_dtype": (
        fn(
            f"%x: {T}, %g: tensor<3xf16>, %b: tensor<3xf32>",
            f"  %r = ai.layernorm %x, %g, %b : {T} * tensor<3xf16> * tensor<3xf32>",
        ),
        r"operand 'gamma' has element type f16, expected f32",
        "%r = ai.layernorm",
    ),
    "layernorm_epsilon_type": (
        fn(
            f"%x: {T}, %g: tensor<3xf32>, %b: tensor<3xf32>",
            f"  %r = ai.layernorm %x, %g, %b {{epsilon = 1 : i64}} : {T} * tensor<3xf32> *"
            " tensor<3xf32>",
        ),
        r"attribute 'epsilon' must be a float \(: f32\), got 1 : i64",
        "%r = ai.layernorm",
    ),
    # ---- ai.softmax
    "softmax_axis": (
        fn(f"%x: {T}", f"  %r = ai.softmax %x {{axis = 2 : i64}} : {T}"),
        r"'ai\.softmax' op axis 2 is out of range for rank 2",
        "%r = ai.softmax",
    ),
    "softmax_negative_axis": (
        fn(f"%x: {T}", f"  %r = ai.softmax %x {{axis = -3 : i64}} : {T}"),
        r"axis -3 is out of range for rank 2",
        "%r = ai.softmax",
    ),
    "softmax_scalar": (
        fn("%x: tensor<f32>", "  %r = ai.softmax %x : tensor<f32>", "tensor<f32>"),
        r"'ai\.softmax' op operand 'input' must have rank >= 1",
        "%r = ai.softmax",
    ),
    # ---- ai.cast
    "cast_to_f64": (
        fn(f"%x: {T}", f"  %r = ai.cast %x : {T} to tensor<2x3xf64>", "tensor<2x3xf64>"),
        r"'ai\.cast' op unsupported element type f64",
        "%r = ai.cast",
    ),
    "cast_changes_shape_generic": (
        fn(f"%x: {T}", f'  %r = "ai.cast"(%x) : ({T}) -> tensor<3x2xf16>', "tensor<3x2xf16>"),
        r"'ai\.cast' op result type tensor<3x2xf16> does not match the inferred type "
        r"tensor<2x3xf16>",
        '%r = "ai.cast"',
    ),
    # ---- element types and shapes
    "unsupported_f64": (
        fn("%x: tensor<2x3xf64>", "  %r = ai.relu %x : tensor<2x3xf64>", "tensor<2x3xf32>"),
        r"'ai\.relu' op unsupported element type f64: expected one of f16, bf16, f32",
        "%r = ai.relu",
    ),
    "unsupported_f64_function_argument": (
        fn(f"%x: {T}, %y: tensor<2xf64>", f"  %r = ai.relu %x : {T}"),
        r"'func\.func' op argument #1: unsupported element type f64",
        "func.func",
    ),
    "unsupported_function_result": (
        "func.func @f(%x: tensor<2xf32>) -> (tensor<2xf32>, i32) {\n"
        "  %c = arith.constant 1 : i32\n"
        "  return %x, %c : tensor<2xf32>, i32\n}\n",
        r"'func\.func' op result #1: expected a tensor type, got i32",
        "func.func",
    ),
    "unsupported_f64_in_op": (
        fn(
            f"%x: {T}",
            "  %c = arith.constant dense<1.0> : tensor<2x3xf64>\n"
            "  %r = ai.exp %c : tensor<2x3xf64>",
        ),
        r"'ai\.exp' op unsupported element type f64: expected one of f16, bf16, f32",
        "%r = ai.exp",
    ),
    "unsupported_i32": (
        fn(
            f"%x: {T}",
            "  %c = arith.constant dense<1> : tensor<2x3xi32>\n"
            "  %r = ai.sigmoid %c : tensor<2x3xi32>",
        ),
        r"'ai\.sigmoid' op operand 'input' has element type i32; ai\.sigmoid takes f16, bf16, f32",
        "%r = ai.sigmoid",
    ),
    "dynamic_shape": (
        fn(
            f"%x: {T}",
            "  %c = arith.constant dense<1.0> : tensor<2x3xf32>\n"
            '  %r = "ai.tanh"(%c) : (tensor<2x3xf32>) -> tensor<?x3xf32>',
            "tensor<?x3xf32>",
        ),
        r"'ai\.tanh' op dynamic shapes are not supported: tensor<\?x3xf32>",
        '%r = "ai.tanh"',
    ),
    "dynamic_shape_argument": (
        fn("%x: tensor<?x3xf32>", "  %r = ai.relu %x : tensor<?x3xf32>", "tensor<?x3xf32>"),
        r"dynamic shapes are not supported",
        "%r = ai.relu",
    ),
    "not_a_tensor": (
        fn("%x: f32", "  %r = ai.relu %x : f32", "f32"),
        r"'ai\.relu' op expected a tensor type, got f32",
        "%r = ai.relu",
    ),
    # ---- attributes
    "unknown_attribute": (
        fn(f"%x: {T}", f"  %r = ai.relu %x {{alpha = 1 : i64}} : {T}"),
        r"'ai\.relu' op unknown attribute 'alpha' \(ai\.relu has no attributes\)",
        "{alpha",
    ),
    "unknown_attribute_lists_known": (
        fn(f"%x: {T}", f"  %r = ai.softmax %x {{dim = 1 : i64}} : {T}"),
        r"unknown attribute 'dim' \(expected one of: axis\)",
        "{dim",
    ),
    "unknown_attribute_generic": (
        fn(f"%x: {T}", f'  %r = "ai.relu"(%x) {{alpha = 1 : i64}} : ({T}) -> {T}'),
        r"'ai\.relu' op unknown attribute 'alpha'",
        '%r = "ai.relu"',
    ),
    "unknown_property_generic": (
        fn(f"%x: {T}", f'  %r = "ai.relu"(%x) <{{alpha = 1 : i64}}> : ({T}) -> {T}'),
        r"property 'alpha' is not defined",
        '%r = "ai.relu"',
    ),
    "bad_attribute_value_string": (
        fn(f"%x: {T}", f'  %r = ai.gelu %x {{approximate = "fast"}} : {T}'),
        r"'ai\.gelu' op attribute 'approximate' must be \"none\" or \"tanh\", got \"fast\"",
        "%r = ai.gelu",
    ),
    "bad_attribute_value_bool": (
        fn(
            "%a: tensor<2x3xf32>, %b: tensor<3x5xf32>",
            "  %r = ai.matmul %a, %b {transpose_a = 1 : i64} : tensor<2x3xf32> * tensor<3x5xf32>",
            "tensor<2x5xf32>",
        ),
        r"attribute 'transpose_a' must be true or false, got 1 : i64",
        "%r = ai.matmul",
    ),
    "bad_attribute_value_int": (
        fn(f"%x: {T}", f"  %r = ai.softmax %x {{axis = 1.0 : f32}} : {T}"),
        r"attribute 'axis' must be an integer \(: i64\), got 1\.000000e\+00 : f32",
        "%r = ai.softmax",
    ),
    "bad_attribute_value_array": (
        conv(X4, W4, "{strides = array<f32: 1.0, 1.0>} "),
        r"attribute 'strides' must be array<i64: \.\.\.>",
        "%r = ai.conv2d",
    ),
    # ---- operand and type counts
    "operand_count_generic": (
        fn(f"%x: {T}", f'  %r = "ai.add"(%x) : ({T}) -> {T}'),
        r"'ai\.add' op Expected 2 operands, but got 1",
        '%r = "ai.add"',
    ),
    "operand_count_custom": (
        fn(f"%x: {T}", f"  %r = ai.relu %x, %x : {T} * {T}"),
        r"^'ai\.relu' op expects 1 operand\(s\) \(input\), got 2$",
        "%r = ai.relu",
    ),
    "type_count_custom": (
        fn(f"%x: {T}", f"  %r = ai.add %x, %x : {T}"),
        r"'ai\.add' op has 2 operand\(s\) but 1 type\(s\) after ':'",
        "%r = ai.add",
    ),
    "result_type_generic": (
        fn(f"%x: {T}", f'  %r = "ai.relu"(%x) : ({T}) -> tensor<2x4xf32>', "tensor<2x4xf32>"),
        r"'ai\.relu' op result type tensor<2x4xf32> does not match the inferred type "
        r"tensor<2x3xf32>",
        '%r = "ai.relu"',
    ),
    "result_dtype_generic": (
        fn(
            "%a: tensor<2x3xf16>, %b: tensor<3x5xf16>",
            '  %r = "ai.matmul"(%a, %b) : (tensor<2x3xf16>, tensor<3x5xf16>) -> tensor<2x5xf32>',
            "tensor<2x5xf32>",
        ),
        r"result type tensor<2x5xf32> does not match the inferred type tensor<2x5xf16>",
        '%r = "ai.matmul"',
    ),
    # ---- ai.fused / ai.yield
    "fused_arg_types": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            "  ^bb0(%a: tensor<2x3xf16>):\n"
            "    %e = ai.cast %a : tensor<2x3xf16> to tensor<2x3xf32>\n"
            f"    ai.yield %e : {T}\n  }}",
        ),
        r"'ai\.fused' op body arguments \(tensor<2x3xf16>\) must match the operands "
        r"\(tensor<2x3xf32>\)",
        "%r = ai.fused",
    ),
    "fused_arg_count": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}, %b: {T}):\n"
            f"    ai.yield %a : {T}\n  }}",
        ),
        r"body arguments \(tensor<2x3xf32>, tensor<2x3xf32>\) must match the operands "
        r"\(tensor<2x3xf32>\)",
        "%r = ai.fused",
    ),
    "fused_yield_types": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            "    %h = ai.cast %a : tensor<2x3xf32> to tensor<2x3xf16>\n"
            "    ai.yield %h : tensor<2x3xf16>\n  }",
        ),
        r"'ai\.fused' op 'ai\.yield' types \(tensor<2x3xf16>\) must match the results "
        r"\(tensor<2x3xf32>\)",
        "%r = ai.fused",
    ),
    "fused_yield_count": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            f"    ai.yield %a, %a : {T}, {T}\n  }}",
        ),
        r"'ai\.yield' types \(tensor<2x3xf32>, tensor<2x3xf32>\) must match the results",
        "%r = ai.fused",
    ),
    "fused_without_yield": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            f"    %e = ai.exp %a : {T}\n  }}",
        ),
        r"'ai\.fused' op body must end in 'ai\.yield'",
        "%r = ai.fused",
    ),
    "fused_empty_kind": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            f"    ai.yield %a : {T}\n  }}",
        ),
        r"'ai\.fused' op 'kind' must be a non-empty string",
        "%r = ai.fused",
    ),
    "fused_operand_type_count": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x, %x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            f"    ai.yield %a : {T}\n  }}",
        ),
        r"'ai\.fused' op has 2 operand\(s\) but 1 input type\(s\)",
        "%r = ai.fused",
    ),
    "fused_kind_not_a_string": (
        fn(
            f"%x: {T}",
            f"  %r = ai.fused pointwise (%x) : ({T}) -> {T} {{\n"
            f"  ^bb0(%a: {T}):\n"
            f"    ai.yield %a : {T}\n  }}",
        ),
        r"string literal expected \(the kind of 'ai\.fused'",
        "pointwise",
    ),
    "fused_two_blocks": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            f"    ai.yield %a : {T}\n"
            f"  ^bb1(%b: {T}):\n"
            f"    ai.yield %b : {T}\n  }}",
        ),
        r"expected a single block, but got 2 blocks",
        "%r = ai.fused",
    ),
    "fused_captures_an_outer_value": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            f"    %e = ai.add %a, %x : {T} * {T}\n"
            f"    ai.yield %e : {T}\n  }}",
        ),
        r"'ai\.fused' op .*value defined out of its IsolatedFromAbove parent",
        "%r = ai.fused",
    ),
    "fused_body_op_error": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
            f"  ^bb0(%a: {T}):\n"
            f"    %e = ai.softmax %a {{axis = 5 : i64}} : {T}\n"
            f"    ai.yield %e : {T}\n  }}",
        ),
        r"'ai\.softmax' op axis 5 is out of range for rank 2",
        "%e = ai.softmax",
    ),
    "yield_outside_fused": (
        f"func.func @f(%x: {T}) -> {T} {{\n  ai.yield %x : {T}\n}}\n",
        r"'ai\.yield' op 'ai\.yield' expects parent op 'ai\.fused'",
        "ai.yield",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_invalid_input_is_reported_at_its_location(case: str):
    text, pattern, needle = CASES[case]
    with pytest.raises(FusecError) as info:
        parse_module(text, "case.mlir")
    err = info.value
    assert re.search(pattern, err.message), f"{err.message!r} !~ {pattern!r}"
    line, col = position(text, needle)
    assert err.location == SourceLocation("case.mlir", line, col), err.format()
    assert err.source_line == text.splitlines()[line - 1]


VALID = {
    "matmul_batch_broadcast_ok": fn(
        "%a: tensor<3x1x2x4xf32>, %b: tensor<5x4x6xf32>",
        "  %r = ai.matmul %a, %b : tensor<3x1x2x4xf32> * tensor<5x4x6xf32>",
        "tensor<3x5x2x6xf32>",
    ),
    "bias_negative_axis_ok": fn(
        f"%x: {T}, %b: tensor<3xf32>",
        f"  %r = ai.bias_add %x, %b {{axis = -1 : i64}} : {T} * tensor<3xf32>",
    ),
    "softmax_negative_axis_ok": fn(f"%x: {T}", f"  %r = ai.softmax %x {{axis = -2 : i64}} : {T}"),
    "scalar_broadcast_ok": fn(
        f"%x: {T}, %s: tensor<f32>", f"  %r = ai.maximum %s, %x : tensor<f32> * {T}"
    ),
    "dotted_discardable_attribute_ok": fn(
        f"%x: {T}", f'  %r = ai.relu %x {{fusec.origin = "onnx:Relu_3"}} : {T}'
    ),
    "grouped_conv_ok": conv(
        X4, "tensor<8x1x3x3xf32>", "{groups = 4 : i64} ", "tensor<1x8x6x6xf32>"
    ),
}


@pytest.mark.parametrize("case", VALID, ids=str)
def test_valid_edge_cases_verify(case: str):
    parse_module(VALID[case], "case.mlir")


def test_verifier_catches_ops_built_in_python_with_a_wrong_result_type():
    """Without text there is no location, but the message is the same."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp, TensorType, f32
    from xdsl.ir import Block, Region

    from fusec.dialect.ops import ReluOp
    from fusec.ir.diagnostics import verify_module

    block = Block(arg_types=[TensorType(f32, [2, 3])])
    relu = ReluOp(block.args[0], result_type=TensorType(f32, [3, 2]))
    block.add_ops([relu, func.ReturnOp(relu.results[0])])
    fn_op = func.FuncOp("f", ([TensorType(f32, [2, 3])], [TensorType(f32, [3, 2])]), Region(block))
    with pytest.raises(FusecError) as info:
        verify_module(ModuleOp([fn_op]))
    assert info.value.message == (
        "'ai.relu' op result type tensor<3x2xf32> does not match the inferred type tensor<2x3xf32>"
    )
    assert info.value.location is None
