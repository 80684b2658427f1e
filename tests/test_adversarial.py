"""Adversarial input to fusec's user-facing surface: the CLI and the Python API.

Every case is bad (or odd) input a user can write. The contract: a located
``FusecError`` (``FILE:LINE:COL: error: ...`` on the command line, exit 1),
never a Python traceback or an "internal error" (exit 2), and no output file
written half-way. The few valid-but-odd inputs (a fused group that passes an
input through, hexadecimal float constants, a byte-order mark) must work.

The command line runs in-process (``fusec.cli.main``); a diagnostic's line and
column are computed here from a ``needle``: the first occurrence of that text
in the input.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec import FusecError, cli

T = "tensor<2x3xf32>"
X4, W4 = "tensor<1x4x8x8xf32>", "tensor<4x4x3x3xf32>"


def fn(args: str, body: str, result: str = T, name: str = "f", ret: str = "%r") -> str:
    return f"func.func @{name}({args}) -> {result} {{\n{body}\n  return {ret} : {result}\n}}\n"


def relu_fn(name: str = "f") -> str:
    return fn(f"%x: {T}", f"  %r = ai.relu %x : {T}", name=name)


def conv(attrs: str = "", x: str = X4, result: str = "tensor<1x4x6x6xf32>") -> str:
    return fn(f"%x: {x}, %w: {W4}", f"  %r = ai.conv2d %x, %w {attrs}: {x} * {W4}", result)


def fused(kind: str, body: str, yields: str = "%e", types: str = T) -> str:
    return fn(
        f"%x: {T}",
        f'  %r = ai.fused "{kind}" (%x) : ({T}) -> {T} {{\n  ^bb0(%a: {T}):\n{body}\n'
        f"    ai.yield {yields} : {types}\n  }}",
    )


def position(text: str, needle: str) -> tuple[int, int]:
    index = text.index(needle)
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_user_error(rc: int, err: str, pattern: str) -> None:
    """Exit 1, a one-diagnostic error matching ``pattern``, no traceback or internal error."""
    assert rc == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert re.search(pattern, err), f"{err!r} !~ {pattern!r}"


# ------------------------------------------------------------ hostile .mlir

# name -> (file text or bytes, message regex, needle giving line:col, or None)
MLIR_CASES: dict[str, tuple[str | bytes, str, str | None]] = {
    "truncated_file": (relu_fn()[:-12], r"unexpected end of input", None),
    "garbage_bytes": (b"\xff\xfe\x00\x80garbage", r"cannot read the file: .*utf-8", None),
    "nul_byte": ("func.func @f\x00", r"Unexpected character", None),
    "dims_beyond_int64": (
        fn(
            "%x: tensor<99999999999999999999999x3xf32>",
            "  %r = ai.relu %x : tensor<99999999999999999999999x3xf32>",
            "tensor<99999999999999999999999x3xf32>",
        ),
        r"at most 2\^60 elements",
        "%r = ai.relu",
    ),
    "zero_size_dim": (
        fn("%x: tensor<0x4xf32>", "  %r = ai.relu %x : tensor<0x4xf32>", "tensor<0x4xf32>"),
        r"zero-size dimension: empty tensors are not supported",
        "%r = ai.relu",
    ),
    "zero_size_softmax_row": (
        fn("%x: tensor<4x0xf32>", "  %r = ai.softmax %x : tensor<4x0xf32>", "tensor<4x0xf32>"),
        r"zero-size dimension",
        "%r = ai.softmax",
    ),
    "zero_size_returned_argument": (
        "func.func @f(%x: tensor<0xf32>) -> tensor<0xf32> {\n  return %x : tensor<0xf32>\n}\n",
        r"'func\.func' op argument #0: tensor<0xf32> has a zero-size dimension",
        "func.func",
    ),
    "rank0_conv": (conv(x="tensor<f32>"), r"operand 'input' must have rank 4", "%r"),
    "rank0_matmul": (
        fn("%a: tensor<f32>", "  %r = ai.matmul %a, %a : tensor<f32> * tensor<f32>", "tensor<f32>"),
        r"operand 'lhs' must have rank >= 1",
        "%r",
    ),
    "rank0_layernorm": (
        fn(
            "%x: tensor<f32>",
            "  %r = ai.layernorm %x, %x, %x : tensor<f32> * tensor<f32> * tensor<f32>",
            "tensor<f32>",
        ),
        r"'ai\.layernorm' op operand 'input' must have rank >= 1",
        "%r",
    ),
    "negative_strides": (
        conv("{strides = array<i64: -1, 1>} "),
        r"strides must be 2 positive values",
        "%r",
    ),
    "padding_with_3_values": (
        conv("{padding = array<i64: 1, 1, 1>} "),
        r"padding must have 2 or 4 values",
        "%r",
    ),
    "conv_groups_0": (conv("{groups = 0 : i64} "), r"groups must be positive, got 0", "%r"),
    "huge_padding_result": (
        conv("{padding = array<i64: 9999999999, 9999999999>} "),
        r"'ai\.conv2d' op result tensor<1x4x20000000004x20000000004xf32> has .* elements",
        "%r",
    ),
    "softmax_axis_out_of_range": (
        fn(f"%x: {T}", f"  %r = ai.softmax %x {{axis = 2 : i64}} : {T}"),
        r"axis 2 is out of range for rank 2",
        "%r",
    ),
    "softmax_axis_beyond_i64": (
        fn(f"%x: {T}", f"  %r = ai.softmax %x {{axis = 99999999999999999999 : i64}} : {T}"),
        r"out of range for type i64",
        "%r",
    ),
    "strides_is_an_integer": (
        conv("{strides = 2} "),
        r"attribute 'strides' must be array<i64: \.\.\.>, got 2 : i64",
        "%r",
    ),
    "epsilon_is_a_string": (
        fn(
            f"%x: {T}, %g: tensor<3xf32>",
            f'  %r = ai.layernorm %x, %g, %g {{epsilon = "x"}} : {T} * tensor<3xf32> * '
            "tensor<3xf32>",
        ),
        r"attribute 'epsilon' must be a float",
        "%r",
    ),
    "epsilon_is_nan": (
        fn(
            f"%x: {T}, %g: tensor<3xf32>",
            f"  %r = ai.layernorm %x, %g, %g {{epsilon = 0x7FC00000 : f32}} : {T} * "
            "tensor<3xf32> * tensor<3xf32>",
        ),
        r"epsilon must be a finite number >= 0, got nan",
        "%r",
    ),
    "epsilon_is_negative": (
        fn(
            f"%x: {T}, %g: tensor<3xf32>",
            f"  %r = ai.layernorm %x, %g, %g {{epsilon = -1.0 : f32}} : {T} * "
            "tensor<3xf32> * tensor<3xf32>",
        ),
        r"epsilon must be a finite number >= 0, got -1",
        "%r",
    ),
    "transpose_a_is_an_integer": (
        fn(
            "%a: tensor<3x2xf32>, %b: tensor<3x3xf32>",
            "  %r = ai.matmul %a, %b {transpose_a = 1 : i64} : tensor<3x2xf32> * tensor<3x3xf32>",
        ),
        r"attribute 'transpose_a' must be true or false, got 1 : i64",
        "%r",
    ),
    "generic_property_wrong_type": (
        fn(f"%x: {T}", f'  %r = "ai.softmax"(%x) <{{axis = "x"}}> : ({T}) -> {T}'),
        r"'ai\.softmax' op attribute 'axis' must be an integer \(: i64\), got \"x\"",
        "%r",
    ),
    "generic_property_strides": (
        f"func.func @f(%x: {X4}, %w: {W4}) -> tensor<1x4x6x6xf32> {{\n"
        f'  %r = "ai.conv2d"(%x, %w) <{{strides = 1 : i64}}> : ({X4}, {W4}) -> '
        "tensor<1x4x6x6xf32>\n  return %r : tensor<1x4x6x6xf32>\n}\n",
        r"attribute 'strides' must be array<i64: \.\.\.>",
        "%r",
    ),
    "tensor_encoding": (
        fn('%x: tensor<2x3xf32, "e">', '  %r = ai.relu %x : tensor<2x3xf32, "e">', T),
        r"tensor encodings are not supported",
        "%r",
    ),
    "function_with_no_return": (
        f"func.func @f(%x: {T}) -> {T} {{\n  %r = ai.relu %x : {T}\n}}\n",
        r"terminates block .* but is not a terminator",
        "%r",
    ),
    "function_declaration": (
        f"func.func @f(%x: {T}) -> {T}\n",
        r"'func\.func' op without a body \(a declaration\) is not supported",
        "func.func",
    ),
    "function_with_two_blocks": (
        f"func.func @f(%x: {T}) -> {T} {{\n  %r = ai.relu %x : {T}\n  return %r : {T}\n"
        f"^bb1:\n  return %x : {T}\n}}\n",
        r"'func\.func' op must have a single block",
        "func.func",
    ),
    "two_public_functions": (
        relu_fn("f") + relu_fn("g"),
        r"cannot pick the entry function: 2 public functions \(@f, @g\)",
        None,
    ),
    "call_to_a_missing_function": (
        fn(f"%x: {T}", f"  %r = func.call @nope(%x) : ({T}) -> {T}"),
        r"'@nope' could not be found",
        "%r",
    ),
    "recursive_call": (
        fn(f"%x: {T}", f"  %r = func.call @f(%x) : ({T}) -> {T}"),
        r"'func\.call' op makes a recursive call to '@f'",
        "%r",
    ),
    "mutually_recursive_calls": (
        fn(f"%x: {T}", f"  %r = func.call @g(%x) : ({T}) -> {T}")
        + fn(f"%x: {T}", f"  %r = func.call @f(%x) : ({T}) -> {T}", name="g").replace(
            "func.func @g", "func.func private @g"
        ),
        r"makes a recursive call to '@f'",
        "%r",
    ),
    "call_to_a_declaration": (
        f"func.func private @g(%x: {T}) -> {T}\n"
        + fn(f"%x: {T}", f"  %r = func.call @g(%x) : ({T}) -> {T}"),
        r"'func\.func' op without a body",
        "func.func",
    ),
    "fused_yields_too_much": (
        fused("pointwise", f"    %e = ai.relu %a : {T}", "%e, %e", f"{T}, {T}"),
        r"'ai\.fused' op 'ai\.yield' types .* must match the results",
        "%r",
    ),
    "fused_arity": (
        fn(
            f"%x: {T}",
            f'  %r = ai.fused "pointwise" (%x) : ({T}) -> {T} {{\n  ^bb0(%a: {T}, %b: {T}):\n'
            f"    %e = ai.add %a, %b : {T} * {T}\n    ai.yield %e : {T}\n  }}",
        ),
        r"body arguments .* must match the operands",
        "%r",
    ),
    "fused_unknown_kind": (
        fused("bogus", f"    %e = ai.relu %a : {T}"),
        r"'ai\.fused' op unknown kind 'bogus' \(registered kinds: conv, matmul",
        "%r",
    ),
    "fused_kind_does_not_fit": (
        fused("conv", f"    %e = ai.relu %a : {T}"),
        r'"conv" group must hold exactly one ai\.conv2d',
        "%e",
    ),
    "nested_fused": (
        fused(
            "pointwise",
            f'    %e = ai.fused "pointwise" (%a) : ({T}) -> {T} {{\n    ^bb0(%b: {T}):\n'
            f"      %f = ai.relu %b : {T}\n      ai.yield %f : {T}\n    }}",
        ),
        r"'ai\.fused' op cannot be inside an 'ai\.fused' body",
        "%e",
    ),
    "constant_inside_fused": (
        fused(
            "pointwise",
            f"    %c = arith.constant dense<1.0> : {T}\n    %e = ai.add %a, %c : {T} * {T}",
        ),
        r"'arith\.constant' op cannot be inside an 'ai\.fused' body",
        "%c",
    ),
    "constant_of_the_wrong_shape": (
        fn(
            f"%x: {T}",
            f"  %c = arith.constant dense<[1.0, 2.0]> : {T}\n  %r = ai.add %x, %c : {T} * {T}",
        ),
        r"Shape mismatch in dense literal",
        "dense<",
    ),
    "constant_out_of_range_for_f16": (
        fn(
            "%x: tensor<2xf16>",
            "  %c = arith.constant dense<1.0e10> : tensor<2xf16>\n"
            "  %r = ai.add %x, %c : tensor<2xf16> * tensor<2xf16>",
            "tensor<2xf16>",
        ),
        r"out of range for its element type",
        "dense<",
    ),
    "hex_constant_wider_than_its_type": (
        fn(
            "%x: tensor<2xf16>",
            "  %c = arith.constant dense<0x1FFFF> : tensor<2xf16>\n"
            "  %r = ai.add %x, %c : tensor<2xf16> * tensor<2xf16>",
            "tensor<2xf16>",
        ),
        r"hexadecimal float constant out of range",
        "0x1FFFF",
    ),
    "dense_resource": (
        fn(
            f"%x: {T}",
            f"  %c = arith.constant dense_resource<b> : {T}\n  %r = ai.add %x, %c : {T} * {T}",
        ),
        r"only dense tensor constants are supported",
        "%c",
    ),
    "value_used_before_definition": (
        fn(f"%x: {T}", f"  %r = ai.relu %s : {T}\n  %s = ai.exp %x : {T}"),
        r"'ai\.relu' op uses the value '%s' before its definition",
        "%r",
    ),
    "duplicate_ssa_name": (
        fn(f"%x: {T}", f"  %r = ai.relu %x : {T}\n  %r = ai.exp %x : {T}"),
        r"SSA value %r is already defined",
        "%r = ai.exp",
    ),
    "unicode_ssa_name": (
        relu_fn().replace("%x", "%ü"),
        r"Expected suffix identifier after '%'",
        "%ü",
    ),
    "cast_changes_the_shape": (
        fn(f"%x: {T}", f"  %r = ai.cast %x : {T} to tensor<3x2xf16>", "tensor<3x2xf16>"),
        r"'ai\.cast' op 'to' type tensor<3x2xf16> must be tensor<2x3xf16>",
        "%r",
    ),
    "return_operand_count": (
        fn(f"%x: {T}", f"  %r = ai.relu %x : {T}", ret="%r, %r"),
        r"expected 1 operand types but had 2",
        "return",
    ),
    "deeply_nested_modules": (
        "builtin.module {" * 500 + "}" * 500,
        r"case\.mlir:1:1040: error: brackets nested deeper than 64 levels \(fusec's limit\)",
        None,  # the 65th "{", at column 65 * 16
    ),
}


@pytest.mark.parametrize("case", MLIR_CASES, ids=str)
def test_hostile_mlir_is_a_located_error(case: str, tmp_path: Path, capsys):
    text, pattern, needle = MLIR_CASES[case]
    path = tmp_path / "case.mlir"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    out = tmp_path / "out.mlir"
    rc, stdout, err = run_cli(capsys, "compile", path, "-o", out)
    assert_user_error(rc, err, pattern)
    assert not out.exists() and stdout == ""
    if needle is not None:
        line, col = position(text, needle)
        assert err.startswith(f"{path}:{line}:{col}: error: "), err
        assert err.splitlines()[1] == text.splitlines()[line - 1]  # the quoted source line


def test_a_byte_order_mark_is_not_an_error(tmp_path: Path, capsys):
    path = tmp_path / "bom.mlir"
    path.write_bytes(b"\xef\xbb\xbf" + relu_fn().encode())
    rc, out, err = run_cli(capsys, "compile", path, "--target", "reference")
    assert rc == 0, err
    assert "ai.relu" in out


def test_hex_float_constants_are_bit_patterns_and_round_trip():
    """MLIR prints NaN and infinities as hexadecimal bits; they must read back as such
    (xDSL alone reads 0x7FC00000 as the number 2143289344)."""
    text = fn(
        "%x: tensor<4xf32>",
        "  %c = arith.constant dense<[0x7FC00000, 0x7F800000, 0xFF800000, 0x3F800000]> : "
        "tensor<4xf32>\n  %r = ai.add %x, %c : tensor<4xf32> * tensor<4xf32>",
        "tensor<4xf32>",
    )
    x = np.array([0.5, -0.25, 2.0, 3.0], dtype=np.float32)
    want = np.array([np.nan, np.inf, -np.inf, 4.0], dtype=np.float32)
    module = fusec.parse(text)
    np.testing.assert_array_equal(fusec.reference(module)(x), want)
    reparsed = fusec.parse(str(module))  # the printer writes 0x7fc00000 back
    np.testing.assert_array_equal(fusec.reference(reparsed)(x), want)


def test_run_check_accepts_infinities_that_match_the_reference(tmp_path: Path, capsys):
    """inf - inf is NaN: equal infinities used to fail --check (exit 1) on a right result."""
    path = tmp_path / "inf.mlir"
    path.write_text(
        fn(
            f"%x: {T}",
            f"  %c = arith.constant dense<[0x7F800000, 0xFF800000, 1.0]> : tensor<3xf32>\n"
            f"  %r = ai.add %x, %c : {T} * tensor<3xf32>",
        )
    )
    rc, out, err = run_cli(capsys, "run", path, "--random-inputs", "--check", "--target", "cpu")
    assert rc == 0, out + err
    assert "PASS" in out and "FAIL" not in out and "Warning" not in err


def test_a_group_that_passes_an_input_through_runs(tmp_path: Path, capsys):
    """Unpacking such a group used to leave the return using an erased block argument."""
    text = (
        f"func.func @f(%x: {T}) -> ({T}, {T}) {{\n"
        f'  %r, %s = ai.fused "pointwise" (%x) : ({T}) -> ({T}, {T}) {{\n  ^bb0(%a: {T}):\n'
        f"    %e = ai.relu %a : {T}\n    ai.yield %e, %a : {T}, {T}\n  }}\n"
        f"  return %r, %s : {T}, {T}\n}}\n"
    )
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    relu, same = fusec.compile(text, target="cpu")(x)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    np.testing.assert_array_equal(same, x)
    only_input = fused("pointwise", "", yields="%a")
    np.testing.assert_array_equal(fusec.compile(only_input, target="reference")(x), x)


def test_hostile_function_names_stay_out_of_generated_source(tmp_path: Path, capsys):
    name = "import os\\0Aos.system(\\22echo pwned\\22)"
    text = relu_fn(f'"{name}"').replace(
        "ai.relu %x :", 'ai.relu %x {fusec.origin = "\\0Aimport os"} :'
    )
    path = tmp_path / "evil.mlir"
    path.write_text(text)
    rc, out, err = run_cli(capsys, "compile", path, "--emit", "kernels")
    assert rc == 0, err
    assert "os.system" not in out and "import os" not in out and "pwned" not in out
    rc, out, err = run_cli(capsys, "compile", path)
    assert rc == 0, err
    assert '@"import os\\0Aos.system(\\22echo pwned\\22)"' in out  # escaped in the IR


def test_unicode_function_names_compile_and_run(tmp_path: Path, capsys):
    path = tmp_path / "u.mlir"
    path.write_text(relu_fn('"fünf→λ"'))
    rc, out, err = run_cli(capsys, "run", path, "--random-inputs", "--check", "--target", "cpu")
    assert rc == 0, err
    assert out.startswith("ran @fünf→λ on target 'cpu'") and "PASS" in out


# ------------------------------------------------------------ fusec run

RELU = relu_fn()


@pytest.fixture
def relu_file(tmp_path: Path) -> Path:
    path = tmp_path / "relu.mlir"
    path.write_text(RELU)
    return path


def arr(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(3).standard_normal(shape).astype(dtype)


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


NPZ_CASES = {
    "missing_array": (lambda p: write_npz(p, y=arr(2, 3)), r"expected arrays named x .*found y"),
    "wrong_shape": (lambda p: write_npz(p, x=arr(3, 2)), r"array 'x' has shape \(3, 2\)"),
    "wrong_dtype": (
        lambda p: write_npz(p, x=arr(2, 3).astype(np.complex64)),
        r"array 'x' has dtype complex64",
    ),
    "extra_array": (
        lambda p: write_npz(p, x=arr(2, 3), extra=arr(2)),
        r"unexpected array\(s\) extra: @f takes x",
    ),
    "float64_values": (  # refused, as a compiled module refuses them: never rounded
        lambda p: write_npz(p, x=np.full((2, 3), 1e300)),
        r"array 'x' has dtype float64, expected float32 for tensor<2x3xf32>",
    ),
    "not_an_npz_file": (lambda p: write_bytes(p, b"hello"), r"not an \.npz file"),
    "an_npy_file": (
        lambda p: np.save(p.with_suffix(".npy"), arr(2, 3)) or p.with_suffix(".npy"),
        r"a \.npy file holds one array",
    ),
    "truncated_npz": (
        lambda p: write_bytes(p, write_npz(p, x=arr(2, 3)).read_bytes()[:100]),
        r"not a readable \.npz file",
    ),
    "missing_file": (lambda p: p, r"no such file"),
}


@pytest.mark.parametrize("case", NPZ_CASES, ids=str)
def test_bad_npz_inputs(case: str, relu_file: Path, tmp_path: Path, capsys):
    make, pattern = NPZ_CASES[case]
    inputs = make(tmp_path / "in.npz")
    out = tmp_path / "out.npz"
    rc, _, err = run_cli(capsys, "run", relu_file, "--inputs", inputs, "-o", out)
    assert_user_error(rc, err, pattern)
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (("--random-inputs", "--seed", "-1"), r"the seed must be >= 0"),
        (("--random-inputs", "-o", "{tmp}"), r"it is a directory"),
        (("--random-inputs", "-o", "{tmp}/no/such/dir/out.npz"), r"cannot write the output"),
        (("--random-inputs", "-o", ""), r"the file name is empty"),
        (("--random-inputs", "--target", "gpu"), r"unknown target 'gpu'"),
        (("--random-inputs", "--inputs", "x.npz"), r"give exactly one of"),
    ],
)
def test_bad_run_options(argv, pattern, relu_file: Path, tmp_path: Path, capsys):
    rc, _, err = run_cli(capsys, "run", relu_file, *(a.format(tmp=tmp_path) for a in argv))
    assert_user_error(rc, err, pattern)


def test_run_writes_exactly_the_output_path(relu_file: Path, tmp_path: Path, capsys):
    """numpy.savez would append '.npz' to a name without it."""
    out = tmp_path / "results.bin"
    rc, _, err = run_cli(capsys, "run", relu_file, "--random-inputs", "-o", out)
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relu.mlir", "results.bin"]
    with np.load(out) as data:
        assert data["result0"].shape == (2, 3)


def test_huge_random_inputs_are_an_error_not_a_crash(tmp_path: Path, capsys):
    big = "tensor<99999999999x3xf32>"
    path = tmp_path / "big.mlir"
    path.write_text(fn(f"%x: {big}", f"  %r = ai.relu %x : {big}", big))
    rc, _, err = run_cli(capsys, "run", path, "--random-inputs", "--target", "reference")
    assert_user_error(rc, err, r"random inputs: 2\.2 TiB needed, more than the .* of memory")


def test_an_unusable_kernel_cache_folder(relu_file: Path, tmp_path: Path, capsys, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(not_a_folder))
    rc, _, err = run_cli(
        capsys, "run", relu_file, "--random-inputs", "--target", "cpu", "--check", "--quiet"
    )  # runs without a disk cache, and says so once (--quiet: no progress of the compile)
    assert rc == 0, err
    (line,) = err.splitlines()
    assert re.fullmatch(
        r"fusec: warning: not using the kernel cache folder .*file: it is not a folder; .*"
        r"\(set FUSEC_CACHE_DIR to a folder only you can write\)",
        line,
    )


# ------------------------------------------------------------ --pipeline and -o


@pytest.mark.parametrize(
    ("pipeline", "pattern"),
    [
        ("fuse-epilogue{softmax_tile_limit=-1}", r"'softmax_tile_limit' must be >= 0, got -1"),
        ('fuse-epilogue{rules="missing.rules"}', r"missing\.rules: error: cannot read the fusion"),
        ('fuse-epilogue{rules=""}', r"the fusion rules path is empty"),
        ("fuse-epilogue{", r"bad pass pipeline 'fuse-epilogue\{' at column 15"),
        ("fuse-epilogue}", r"bad pass pipeline 'fuse-epilogue\}' at column 14"),
        ("builtin.module(cse)", r"bad pass pipeline .* Unknown token"),
        ("fuse-epilogue{softmax_tile_limit=abc}", r"bad pass pipeline"),
        ("no-such-pass", r"bad pass pipeline .*known passes"),
    ],
)
def test_pipeline_garbage(pipeline: str, pattern: str, relu_file: Path, capsys):
    rc, out, err = run_cli(capsys, "compile", relu_file, "--pipeline", pipeline)
    assert_user_error(rc, err, pattern)
    assert out == ""


def test_rules_file_that_is_not_text(relu_file: Path, tmp_path: Path, capsys):
    rules = tmp_path / "bin.rules"
    rules.write_bytes(b"\xff\xfe\x00")
    rc, _, err = run_cli(
        capsys, "compile", relu_file, "--pipeline", f'fuse-epilogue{{rules="{rules}"}}'
    )
    assert_user_error(rc, err, r"bin\.rules: error: cannot read the fusion rules: not UTF-8")


@pytest.mark.parametrize(
    ("output", "pattern"),
    [("{tmp}", r"it is a directory"), ("", r"the file name is empty")],
)
def test_compile_output_that_is_not_a_file(output, pattern, relu_file: Path, tmp_path, capsys):
    rc, _, err = run_cli(capsys, "compile", relu_file, "-o", output.format(tmp=tmp_path))
    assert_user_error(rc, err, pattern)


# ------------------------------------------------------------ fusec viz


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("file.txt/graph.svg", r"cannot write the output: Not a directory"),
        ("no/such/dir/graph.svg", r"cannot write the output: No such file or directory"),
        ("graph.png", r"cannot tell the picture format .*use a \.svg, \.dot or \.html"),
        ("graph", r"cannot tell the picture format"),
    ],
)
def test_viz_to_a_bad_path(name: str, pattern: str, relu_file: Path, tmp_path: Path, capsys):
    (tmp_path / "file.txt").write_text("x")
    before = sorted(tmp_path.rglob("*"))
    rc, _, err = run_cli(capsys, "viz", relu_file, "-o", tmp_path / name)
    assert_user_error(rc, err, pattern)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, no temporary left


def test_viz_escapes_hostile_names(tmp_path: Path, capsys):
    path = tmp_path / "q.mlir"
    path.write_text(relu_fn('"a\\22b\\5Cc<script>&"'))
    for suffix in ("dot", "svg", "html"):
        rc, _, err = run_cli(capsys, "viz", path, "-o", tmp_path / f"g.{suffix}")
        assert rc == 0, err
        picture = (tmp_path / f"g.{suffix}").read_text()
        if suffix == "dot":
            assert 'label="fusion of @a\\"b\\\\c<script>&"' in picture
        else:
            assert "<script>&" not in picture and "&lt;script&gt;&amp;" in picture


# ------------------------------------------------------------ fusec import


def onnx_relu_model():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return onnx, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_import_of_a_non_onnx_and_a_truncated_file(tmp_path: Path, capsys):
    _, model = onnx_relu_model()
    data = model.SerializeToString()
    cases = {
        "text.onnx": b"this is not a model",
        "truncated.onnx": data[: len(data) // 2],
    }
    for name, payload in cases.items():
        (tmp_path / name).write_bytes(payload)
        out = tmp_path / f"{name}.mlir"
        rc, _, err = run_cli(capsys, "import", tmp_path / name, "-o", out)
        assert_user_error(rc, err, rf"{name}: error: cannot read the ONNX model")
        assert not out.exists()
    rc, _, err = run_cli(capsys, "import", tmp_path)
    assert_user_error(rc, err, r"is a directory, not an ONNX model file")


def test_import_of_malformed_models(tmp_path: Path, capsys):
    onnx, model = onnx_relu_model()
    from onnx import TensorProto, helper

    bad_initializer = onnx.ModelProto()
    bad_initializer.CopyFrom(model)
    node = bad_initializer.graph.node[0]
    node.op_type, node.input[:] = "Add", ["x", "w"]
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    weight.dims[:] = [2, 3]  # 2 values for 6 elements
    bad_initializer.graph.initializer.append(weight)

    bad_cast = onnx.ModelProto()
    bad_cast.CopyFrom(model)
    bad_cast.graph.node[0].op_type = "Cast"
    bad_cast.graph.node[0].attribute.append(helper.make_attribute("to", 999))

    twice = onnx.ModelProto()
    twice.CopyFrom(model)
    twice.graph.node.append(helper.make_node("Exp", ["x"], ["y"]))

    cases = [
        (bad_initializer, r"initializer 'w' is malformed"),
        (bad_cast, r"Cast: the cast target has an unknown element type code 999"),
        (twice, r'node "#1": error: Exp: output \'y\' is already defined'),
    ]
    for model_case, pattern in cases:
        path = tmp_path / "m.onnx"
        path.write_bytes(model_case.SerializeToString())
        rc, _, err = run_cli(capsys, "import", path)
        assert_user_error(rc, err, pattern)


# ------------------------------------------------------------ the Python API


@pytest.mark.parametrize("bad", [None, 3, RELU.encode()], ids=["None", "int", "bytes"])
def test_parse_and_compile_take_text_or_a_path(bad):
    with pytest.raises(FusecError, match="expected IR text or a file path"):
        fusec.parse(bad)
    with pytest.raises(FusecError, match="expected IR text or a file path"):
        fusec.compile(bad, target="reference")


def test_a_long_line_of_text_is_not_a_path_crash():
    with pytest.raises(FusecError) as info:
        fusec.parse("x" * 100_000)
    assert len(info.value.location.file) <= 200
    with pytest.raises(FusecError, match="cannot read the file"):
        fusec.parse("a\x00b")


def test_compiled_module_rejects_keyword_arguments():
    compiled = fusec.compile(RELU, target="reference")
    with pytest.raises(FusecError, match="takes its arguments by position"):
        compiled(x=arr(2, 3))


def test_compile_rejects_a_pipeline_that_is_not_a_string():
    with pytest.raises(FusecError, match="a pass pipeline must be a string, got list"):
        fusec.compile(RELU, target="reference", pipeline=["cse"])


@pytest.mark.parametrize("bad", [None, 3, b"bytes", "func.func @f() {\n}"])
def test_from_onnx_rejects_what_is_not_a_model_or_path(bad):
    pytest.importorskip("onnx")
    with pytest.raises(FusecError, match="expected an onnx.ModelProto or the path"):
        fusec.from_onnx(bad)
