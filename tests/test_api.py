"""The public Python API: parse, compile, reference, CompiledModule, FusecError.

Compilation uses ``target="reference"`` (the numpy executor) and, where the IR
text is compared, a pinned pipeline: the default pipeline and the ``auto``
target change as the fusion passes and back ends land.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import fusec
from fusec import FusecError, SourceLocation

EXAMPLES = Path(__file__).parent.parent / "examples"
CONV = EXAMPLES / "conv_bias_relu.mlir"
PINNED = "infer-shapes,canonicalize,cse"
T = "tensor<2x3xf32>"

TWO_PUBLIC = f"""\
func.func @double(%x: {T}) -> {T} {{
  %r = ai.add %x, %x : {T} * {T}
  return %r : {T}
}}
func.func @square(%x: {T}) -> {T} {{
  %r = ai.mul %x, %x : {T} * {T}
  return %r : {T}
}}
"""


# -------------------------------------------------------------------- parse


def test_parse_text_path_and_str_path_give_the_same_module(tmp_path: Path):
    text = CONV.read_text()
    copy = tmp_path / "conv.mlir"
    copy.write_text(text)
    modules = [fusec.parse(text), fusec.parse(copy), fusec.parse(str(copy))]
    assert all(isinstance(m, ModuleOp) for m in modules)
    assert len({str(m) for m in modules}) == 1
    assert "ai.conv2d %input, %weight" in str(modules[0])


def test_parse_returns_a_verified_module():
    fusec.parse(CONV).verify()


def test_parse_error_has_a_location():
    with pytest.raises(FusecError) as info:
        fusec.parse(f"func.func @f(%x: {T}) -> {T} {{\n  return %y : {T}\n}}\n")
    assert info.value.location == SourceLocation("<string>", 2, 10)
    assert info.value.message == "use of undefined value '%y'"


def test_parse_missing_path_is_a_fusec_error(tmp_path: Path):
    with pytest.raises(FusecError) as info:
        fusec.parse(tmp_path / "missing.mlir")
    assert info.value.location.file == str(tmp_path / "missing.mlir")


# ------------------------------------------------------------------ compile


def test_compile_returns_ir_text_after_the_pipeline():
    compiled = fusec.compile(CONV, target="reference", pipeline=PINNED)
    assert isinstance(compiled, fusec.CompiledModule)
    assert compiled.ir == str(fusec.parse(CONV)) + "\n"
    assert compiled.entry == "fused_conv_bias_relu"
    assert compiled.target == "reference"


def test_compile_runs_the_given_pipeline():
    text = f"func.func @f(%x: {T}) -> {T} {{\n  %a = ai.relu %x : {T}\n  %b = ai.relu %a : {T}\n  return %b : {T}\n}}\n"  # noqa: E501
    assert fusec.compile(text, target="reference", pipeline="").ir.count("ai.relu") == 2
    assert fusec.compile(text, target="reference", pipeline="canonicalize").ir.count("ai.relu") == 1


def test_default_pipeline_output_is_valid_ir_with_the_same_numerics(random_args):
    compiled = fusec.compile(CONV, target="reference")
    module = fusec.parse(compiled.ir)  # the final IR is itself valid input
    args = random_args(module)
    want = fusec.reference(CONV)(*args)
    got = compiled(*args)
    assert got.dtype == want.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_compile_records_pass_timings_and_calls_after_pass():
    seen = []
    compiled = fusec.compile(
        CONV, target="reference", pipeline=PINNED, after_pass=lambda n, m: seen.append(n)
    )
    assert seen == ["infer-shapes", "canonicalize", "cse"]
    assert [t.name for t in compiled.timings] == seen
    assert all(t.seconds >= 0 for t in compiled.timings)


def test_compile_of_a_module_leaves_the_module_unchanged():
    text = f"func.func @f(%x: {T}) -> {T} {{\n  %a = ai.relu %x : {T}\n  %b = ai.relu %a : {T}\n  return %b : {T}\n}}\n"  # noqa: E501
    module = fusec.parse(text)
    before = str(module)
    compiled = fusec.compile(module, target="reference", pipeline="canonicalize")
    assert str(module) == before
    assert compiled.ir.count("ai.relu") == 1


def test_kernels_attribute():
    compiled = fusec.compile(CONV, target="reference", pipeline=PINNED)
    assert isinstance(compiled.kernels, list)
    assert compiled.kernels == []  # the reference target generates no kernels
    assert "kernels=0" in repr(compiled)


def test_kernel_record_fields():
    compiled = fusec.compile(CONV, target="cpu", executable=False)
    (kernel,) = compiled.kernels
    assert isinstance(kernel, fusec.Kernel)  # one kernel type: fusec.codegen.KernelSource
    assert (kernel.name, kernel.kind, kernel.target) == ("k0", "conv", "cpu")
    assert kernel.source.startswith("# fusec kernel") and kernel.outputs[0].dtype == "f16"


def test_unknown_target_is_a_fusec_error():
    with pytest.raises(FusecError, match="unknown target 'tpu'"):
        fusec.compile(CONV, target="tpu")


# -------------------------------------------------------------- entry point


def test_entry_selects_among_several_public_functions(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(
        fusec.compile(TWO_PUBLIC, target="reference", entry="double")(x), 2 * x, rtol=1e-6
    )
    np.testing.assert_allclose(fusec.reference(TWO_PUBLIC, entry="square")(x), x * x, rtol=1e-6)


def test_several_public_functions_without_entry_is_an_error():
    with pytest.raises(FusecError) as info:
        fusec.compile(TWO_PUBLIC, target="reference")
    assert info.value.message == (
        "cannot pick the entry function: 2 public functions (@double, @square); pass entry=NAME"
    )
    with pytest.raises(FusecError, match="2 public functions"):
        fusec.reference(TWO_PUBLIC)


def test_private_functions_are_not_entry_candidates(rng):
    text = TWO_PUBLIC.replace("func.func @double", "func.func private @double")
    x = rng.standard_normal((2, 3)).astype(np.float32)
    compiled = fusec.compile(text, target="reference", pipeline=PINNED)
    assert compiled.entry == "square"
    np.testing.assert_allclose(compiled(x), x * x, rtol=1e-6)


def test_unknown_entry_names_the_functions():
    with pytest.raises(FusecError) as info:
        fusec.compile(TWO_PUBLIC, target="reference", entry="triple")
    assert info.value.message == (
        "no function named '@triple' in the module (functions: @double, @square)"
    )


# --------------------------------------------------------------- calling


def test_call_returns_an_array_or_a_tuple(rng):
    single = fusec.reference(CONV)
    args = [
        rng.standard_normal(s).astype(np.float16) for s in ((1, 32, 28, 28), (64, 32, 3, 3), (64,))
    ]
    out = single(*args)
    assert isinstance(out, np.ndarray) and out.shape == (1, 64, 26, 26)
    assert np.isfinite(out.astype(np.float32)).all()
    assert (out >= 0).all() and (out > 0).any()

    pair = f"func.func @f(%x: {T}) -> ({T}, {T}) {{\n  %r = ai.exp %x : {T}\n  return %r, %x : {T}, {T}\n}}\n"  # noqa: E501
    x = rng.standard_normal((2, 3)).astype(np.float32)
    result = fusec.reference(pair)(x)
    assert isinstance(result, tuple) and len(result) == 2
    np.testing.assert_allclose(result[0], np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(result[1], x)


def test_call_with_bad_arguments_is_a_fusec_error():
    compiled = fusec.compile(CONV, target="reference", pipeline=PINNED)
    with pytest.raises(FusecError, match=r"takes 3 argument\(s\), got 0"):
        compiled()


# ----------------------------------------------------------- package surface


def test_public_names_resolve():
    for name in (
        "parse",
        "compile",
        "reference",
        "CompiledModule",
        "Kernel",
        "FusecError",
        "SourceLocation",
    ):
        assert getattr(fusec, name) is not None
        assert name in fusec.__all__
    with pytest.raises(AttributeError):
        fusec.no_such_name  # noqa: B018


def test_import_fusec_is_lazy():
    """``import fusec`` must not pull in xDSL or numpy: the CLI's start-up depends on it."""
    code = "import sys, fusec; print(sorted(m for m in ('xdsl', 'numpy') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


CALLS_A_FUNCTION = """
func.func private @helper(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = ai.relu %x : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
func.func @main(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %y = func.call @helper(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %z = ai.exp %y : tensor<4x4xf32>
  return %z : tensor<4x4xf32>
}
"""


def test_auto_target_never_falls_back_to_the_interpreter():
    """A module the pipeline leaves partly unfused (a func.call) is an error naming the op
    on target 'auto', not a silent run on the numpy reference executor."""
    with pytest.raises(FusecError, match=r"'func\.call' op is outside any ai\.fused group") as info:
        fusec.compile(CALLS_A_FUNCTION)
    assert "target 'reference'" in str(info.value)  # the opt-in way to interpret it
    assert info.value.location is not None and info.value.location.line == 7


def test_the_interpreter_is_opt_in_and_says_so():
    compiled = fusec.compile(CALLS_A_FUNCTION, target="reference")
    assert compiled.target == "reference" and "reference" in repr(compiled)
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_allclose(compiled(x), np.exp(np.maximum(x, 0)), rtol=1e-6)
