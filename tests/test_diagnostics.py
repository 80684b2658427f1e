"""Located diagnostics through the API: ``FILE:LINE:COL: error: ...``, source line, caret.

The verifier messages of each op are in test_verifier.py; this file covers the
diagnostic machinery itself and the errors that are not an op's verifier
(syntax, unknown ops, undefined values, signatures, files, passes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fusec
from fusec import FusecError, SourceLocation

T = "tensor<2x3xf32>"


def fn(body: str, args: str = f"%x: {T}", result: str = T) -> str:
    return f"func.func @f({args}) -> {result} {{\n{body}\n}}\n"


def parse_error(text: str, name: str = "in.mlir") -> FusecError:
    """Parse ``text`` as if it were the file ``name`` and return the error."""
    from fusec.frontend.mlir import parse_module

    with pytest.raises(FusecError) as info:
        parse_module(text, name)
    return info.value


# --------------------------------------------------------------- formatting


def test_format_has_header_source_line_and_caret():
    err = FusecError("bad thing", SourceLocation("a.mlir", 3, 5), "  %r = ai.relu %x", length=4)
    assert err.format() == "a.mlir:3:5: error: bad thing\n  %r = ai.relu %x\n    ^^^^"
    assert str(err) == err.format()
    assert err.message == "bad thing"


def test_format_without_location_or_source():
    assert FusecError("no entry").format() == "error: no entry"
    err = FusecError("x", SourceLocation("a.mlir", 2, 1))
    assert err.format() == "a.mlir:2:1: error: x"


def test_whole_file_location_prints_the_file_only():
    assert str(SourceLocation("gone.mlir", 0, 0)) == "gone.mlir"
    assert FusecError("no such file", SourceLocation("gone.mlir", 0, 0)).format() == (
        "gone.mlir: error: no such file"
    )


def test_caret_is_clamped_to_the_line():
    err = FusecError("eol", SourceLocation("a", 1, 50), "short")
    assert err.format().splitlines()[-1] == " " * 5 + "^"


def test_fusec_error_is_the_exception_users_catch():
    assert issubclass(FusecError, Exception)
    assert fusec.FusecError is FusecError


# ------------------------------------------------------------- parse errors


def test_syntax_error_points_at_the_unexpected_token():
    text = fn(f"  %r = ai.relu %x {T}\n  return %r : {T}")
    err = parse_error(text)
    assert err.location == SourceLocation("in.mlir", 2, 19)
    assert err.message == "Expected ':'"
    assert err.format().splitlines()[1:] == [f"  %r = ai.relu %x {T}", " " * 18 + "^" * 6]


def test_unknown_op_suggests_the_closest_name_and_underlines_it():
    text = fn(f"  %r = ai.rellu %x : {T}\n  return %r : {T}")
    err = parse_error(text)
    assert err.message == "unknown operation 'ai.rellu'; did you mean 'ai.relu'?"
    assert err.location == SourceLocation("in.mlir", 2, 8)
    assert err.format().splitlines()[2] == " " * 7 + "^" * len("ai.rellu")


def test_unknown_op_without_a_close_name_lists_the_dialect():
    err = parse_error(fn(f"  %r = foo.frobnicate %x : {T}\n  return %r : {T}"))
    assert err.message.startswith("unknown operation 'foo.frobnicate'; the ai dialect has: ")
    assert "ai.conv2d" in err.message and "ai.fused" in err.message


def test_unknown_op_in_generic_form():
    err = parse_error(fn(f'  %r = "ai.rellu"(%x) : ({T}) -> {T}\n  return %r : {T}'))
    assert "did you mean 'ai.relu'" in err.message
    assert err.location.line == 2


def test_undefined_value_points_at_its_first_use():
    err = parse_error(fn(f"  %r = ai.add %x, %y : {T} * {T}\n  return %r : {T}"))
    assert err.message == "use of undefined value '%y'"
    assert err.location == SourceLocation("in.mlir", 2, 19)


def test_redefined_value():
    err = parse_error(fn(f"  %r = ai.relu %x : {T}\n  %r = ai.exp %x : {T}\n  return %r : {T}"))
    assert "%r is already defined" in err.message
    assert err.location == SourceLocation("in.mlir", 3, 3)


def test_operand_type_differs_from_its_definition():
    err = parse_error(fn(f"  %r = ai.relu %x : tensor<3x2xf32>\n  return %r : {T}"))
    assert "used with type tensor<3x2xf32>" in err.message
    assert err.location == SourceLocation("in.mlir", 2, 16)


def test_return_type_mismatch():
    text = fn(f"  %r = ai.relu %x : {T}\n  return %r : {T}", result="tensor<2x4xf32>")
    err = parse_error(text)
    assert err.message.startswith("'func.return' op ")
    assert "expected [tensor<2x4xf32>], got [tensor<2x3xf32>]" in err.message
    assert err.location == SourceLocation("in.mlir", 3, 3)
    assert err.format().splitlines()[1:] == [f"  return %r : {T}", "  ^^^^^^"]


def test_unterminated_string():
    err = parse_error(fn(f'  %r = ai.fused "abc (%x)\n  return %r : {T}'))
    assert "closing string literal" in err.message
    assert err.location == SourceLocation("in.mlir", 2, 17)


def test_missing_closing_brace_at_end_of_input():
    err = parse_error(f"func.func @f(%x: {T}) -> {T} {{\n  return %x : {T}\n")
    assert err.message.startswith("unexpected end of input")
    assert "'}' missing" in err.message
    assert err.location.line == 3


@pytest.mark.parametrize("text", ["", "\n\n", "// only a comment\n"])
def test_empty_input(text: str):
    err = parse_error(text)
    assert err.message == "empty input: expected a func.func or a builtin.module"
    assert err.location.file == "in.mlir"


def test_error_in_a_later_function_has_the_right_line():
    text = f"func.func @g(%x: {T}) -> {T} {{\n  return %x : {T}\n}}\n" + fn(
        f"  %r = ai.softmax %x {{axis = 9 : i64}} : {T}\n  return %r : {T}"
    )
    err = parse_error(text)
    assert err.location == SourceLocation("in.mlir", 5, 3)
    assert err.source_line == f"  %r = ai.softmax %x {{axis = 9 : i64}} : {T}"


def test_error_inside_a_fused_body_points_at_the_inner_op():
    text = fn(
        f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n'
        f"  ^bb0(%a: {T}):\n"
        f"    %e = ai.bias_add %a, %a : {T} * {T}\n"
        f"    ai.yield %e : {T}\n"
        f"  }}\n  return %r : {T}"
    )
    err = parse_error(text)
    assert err.message.startswith("'ai.bias_add' op operand 'bias' must have rank 1")
    assert err.location == SourceLocation("in.mlir", 4, 5)


def test_duplicate_function_points_at_the_second_definition():
    one = f"func.func @f(%x: {T}) -> {T} {{\n  return %x : {T}\n}}\n"
    err = parse_error(one + one)
    assert err.message == "'func.func' op redefinition of symbol '@f'"
    assert err.location == SourceLocation("in.mlir", 4, 1)


# ------------------------------------------- valid MLIR that fusec cannot run


def test_foreign_op_is_rejected_with_its_location():
    err = parse_error(fn(f"  %r = arith.addf %x, %x : {T}\n  return %r : {T}"))
    assert err.message.startswith("'arith.addf' op is not supported by fusec")
    assert err.location == SourceLocation("in.mlir", 2, 3)


@pytest.mark.parametrize(
    "constant",
    ["arith.constant 1.0 : f32", f"arith.constant dense_resource<blob> : {T}"],
)
def test_non_dense_tensor_constants_are_rejected(constant: str):
    err = parse_error(fn(f"  %c = {constant}\n  return %x : {T}"))
    assert err.message == "'arith.constant' op only dense tensor constants are supported"
    assert err.location == SourceLocation("in.mlir", 2, 3)


def test_unsupported_constant_element_type():
    err = parse_error(fn(f"  %c = arith.constant dense<1.0> : tensor<f64>\n  return %x : {T}"))
    assert err.message == (
        "'arith.constant' op unsupported element type f64: expected one of f16, bf16, f32, "
        "i64, i32, i1, f8E4M3FN, f8E5M2, i8, ui8, i4, ui4"
    )


@pytest.mark.parametrize(
    ("args", "result", "what"),
    [
        ("%x: tensor<2xf64>", "tensor<2xf32>", "argument #0: unsupported element type f64"),
        ("%x: tensor<2xf32>", "tensor<2xi16>", "result #0: unsupported element type i16"),
        ("%x: tensor<?xf32>", "tensor<2xf32>", "argument #0: dynamic shapes are not supported"),
        ("%x: f32", "tensor<2xf32>", "argument #0: expected a tensor type, got f32"),
    ],
)
def test_unsupported_function_signatures(args: str, result: str, what: str):
    err = parse_error(f"func.func private @f({args}) -> {result}\n")
    assert err.message.startswith(f"'func.func' op {what}")
    assert err.location == SourceLocation("in.mlir", 1, 1)


# ------------------------------------------------------------- files and API


def test_missing_file(tmp_path: Path):
    path = tmp_path / "nope.mlir"
    with pytest.raises(FusecError) as info:
        fusec.parse(str(path))
    assert info.value.message == "no such file"
    assert info.value.location == SourceLocation(str(path), 0, 0)
    assert info.value.format() == f"{path}: error: no such file"


def test_directory_is_not_a_file(tmp_path: Path):
    with pytest.raises(FusecError, match="cannot read the file") as info:
        fusec.parse(tmp_path)
    assert info.value.location.file == str(tmp_path)


def test_undecodable_file(tmp_path: Path):
    path = tmp_path / "bin.mlir"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FusecError, match="cannot read the file"):
        fusec.parse(path)


def test_errors_in_files_carry_the_path(tmp_path: Path):
    path = tmp_path / "bad.mlir"
    path.write_text(fn(f"  %r = ai.relu %x : {T}\n  return %r : {T}", result="tensor<9xf32>"))
    with pytest.raises(FusecError) as info:
        fusec.parse(path)
    assert info.value.location == SourceLocation(str(path), 3, 3)
    assert info.value.format().startswith(f"{path}:3:3: error: 'func.return' op ")


def test_text_errors_are_named_string():
    with pytest.raises(FusecError) as info:
        fusec.parse(fn(f"  %r = ai.rellu %x : {T}\n  return %r : {T}"))
    assert info.value.location.file == "<string>"


def test_pass_errors_are_located_at_the_op(tmp_path: Path):
    """A module changed after parsing still reports where the op came from."""
    from xdsl.dialects.builtin import IntegerAttr, i64

    from fusec.dialect.ops import SoftmaxOp

    path = tmp_path / "m.mlir"
    path.write_text(fn(f"  %r = ai.softmax %x : {T}\n  return %r : {T}"))
    module = fusec.parse(path)
    softmax = next(op for op in module.walk() if isinstance(op, SoftmaxOp))
    softmax.properties["axis"] = IntegerAttr(7, i64)
    with pytest.raises(FusecError) as info:
        fusec.compile(module, target="reference", pipeline="infer-shapes")
    assert info.value.message == "'ai.softmax' op axis 7 is out of range for rank 2"
    assert info.value.location == SourceLocation(str(path), 2, 3)


def test_bad_pipeline_names_the_known_passes():
    with pytest.raises(FusecError) as info:
        fusec.compile(fn(f"  return %x : {T}"), target="reference", pipeline="canonicalize,nope")
    assert "bad pass pipeline" in info.value.message
    assert "nope" in info.value.message
    assert "infer-shapes" in info.value.message and "fusec-default" in info.value.message
