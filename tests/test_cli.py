"""``fusec compile``: diagnostics (in a subprocess, as users see them), options, start-up.

Every input error prints ``FILE:LINE:COL: error: ...``, the source line and a
caret to stderr, exits with status 1, prints no traceback and writes no output
file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fusec import cli

ROOT = Path(__file__).parent.parent
CONV = ROOT / "examples" / "conv_bias_relu.mlir"
PINNED = "infer-shapes,canonicalize,cse"
# The IR-only options run on the reference target: the cpu/cuda targets need
# fusion groups, which the pinned (fusion-free) pipeline does not make.
REF = ("--target", "reference")
T = "tensor<2x3xf32>"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fusec.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def fn(body: str, args: str = f"%x: {T}", result: str = T) -> str:
    return f"func.func @f({args}) -> {result} {{\n{body}\n}}\n"


# name -> (file text, message regex, line, col)
DIAGNOSTICS = {
    "syntax_error": (
        fn(f"  %r = ai.relu %x {T}\n  return %r : {T}"),
        r"Expected ':'",
        2,
        19,
    ),
    "unknown_op": (
        fn(f"  %r = ai.sigmod %x : {T}\n  return %r : {T}"),
        r"unknown operation 'ai\.sigmod'; did you mean 'ai\.sigmoid'\?",
        2,
        8,
    ),
    "conv_channel_mismatch": (
        fn(
            "  %r = ai.conv2d %x, %w : tensor<1x3x8x8xf32> * tensor<4x2x3x3xf32>\n"
            "  return %r : tensor<1x4x6x6xf32>",
            "%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>",
            "tensor<1x4x6x6xf32>",
        ),
        r"'ai\.conv2d' op operand 'weight' has 2 input channels \(shape 4x2x3x3\), expected 3",
        2,
        3,
    ),
    "bias_length": (
        fn(
            f"  %r = ai.bias_add %x, %b : {T} * tensor<2xf32>\n  return %r : {T}",
            f"%x: {T}, %b: tensor<2xf32>",
        ),
        r"'ai\.bias_add' op operand 'bias' has length 2, expected 3",
        2,
        3,
    ),
    "matmul_inner_dims": (
        fn(
            "\n  %r = ai.matmul %x, %y : tensor<4x8xf32> * tensor<7x5xf32>\n"
            "  return %r : tensor<4x5xf32>",
            "%x: tensor<4x8xf32>, %y: tensor<7x5xf32>",
            "tensor<4x5xf32>",
        ),
        r"'ai\.matmul' op inner dimensions do not match: operand 'lhs' \(shape 4x8\) has K = 8, "
        r"operand 'rhs' \(shape 7x5\) has K = 7",
        3,
        3,
    ),
    "return_type_mismatch": (
        fn(f"  %r = ai.relu %x : {T}\n  return %r : {T}", result="tensor<3x2xf32>"),
        r"'func\.return' op .*expected \[tensor<3x2xf32>\], got \[tensor<2x3xf32>\]",
        3,
        3,
    ),
}


@pytest.mark.parametrize("case", DIAGNOSTICS, ids=str)
def test_input_errors_are_located_and_exit_1(case: str, tmp_path: Path):
    text, pattern, line, col = DIAGNOSTICS[case]
    (tmp_path / "in.mlir").write_text(text)
    proc = run_cli("compile", "in.mlir", "-o", "out.mlir", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "out.mlir").exists()
    header, source, caret = proc.stderr.splitlines()[:3]
    prefix = f"in.mlir:{line}:{col}: error: "
    assert header.startswith(prefix), proc.stderr
    assert re.search(pattern, header[len(prefix) :]), header
    assert source == text.splitlines()[line - 1]
    assert re.fullmatch(" " * (col - 1) + r"\^+", caret), proc.stderr


def test_missing_file(tmp_path: Path):
    proc = run_cli("compile", "nope.mlir", "-o", "out.mlir", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == "nope.mlir: error: no such file\n"
    assert proc.stdout == ""
    assert not (tmp_path / "out.mlir").exists()


def test_bad_pass_name(tmp_path: Path):
    proc = run_cli("compile", str(CONV), "--pipeline", "infer-shapes,no-such-pass", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: bad pass pipeline 'infer-shapes,no-such-pass': ")
    assert "no-such-pass" in proc.stderr and "known passes: " in proc.stderr


def test_console_script(tmp_path: Path):
    # The script installed next to this interpreter (a venv's bin/), else on PATH.
    beside = Path(sys.executable).parent / "fusec"
    script = str(beside) if beside.exists() else shutil.which("fusec")
    if script is None:
        pytest.skip("no fusec console script (package not installed?)")
    proc = subprocess.run(
        [script, "compile", str(CONV), "--pipeline", PINNED, *REF],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ai.conv2d %input, %weight" in proc.stdout


def test_compile_does_not_import_heavy_modules_it_does_not_need():
    """What makes start-up slow is importing numba/llvmlite or every xDSL interpreter."""
    code = (
        "import contextlib, io, sys\n"
        "from fusec import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert cli.main(['compile', {str(CONV)!r}, '--target', 'reference']) == 0\n"
        "heavy = ('numba', 'llvmlite', 'scipy', 'xdsl.interpreters', 'onnx')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# ------------------------------------------------------ options, in-process


def test_emit_ir_to_stdout(capsys):
    assert cli.main(["compile", str(CONV), "--pipeline", PINNED, *REF]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("builtin.module {\n  func.func @fused_conv_bias_relu(")
    assert "func.return %r : tensor<1x64x26x26xf16>" in out
    assert err == ""


def test_output_file(tmp_path: Path, capsys):
    out_path = tmp_path / "out.mlir"
    assert cli.main(["compile", str(CONV), "--pipeline", PINNED, *REF, "-o", str(out_path)]) == 0
    assert capsys.readouterr().out == ""
    text = out_path.read_text()
    assert "ai.conv2d" in text
    assert cli.main(["compile", str(CONV), "--pipeline", PINNED, *REF, "-o", "-"]) == 0
    assert capsys.readouterr().out == text


def test_failed_compile_keeps_an_existing_output_file(tmp_path: Path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text(fn(f"  %r = ai.relu %x : {T}\n  return %r : tensor<9xf32>"))
    out_path = tmp_path / "out.mlir"
    out_path.write_text("previous\n")
    assert cli.main(["compile", str(bad), "-o", str(out_path)]) == 1
    assert out_path.read_text() == "previous\n"
    assert capsys.readouterr().err.startswith(f"{bad}:")


def test_default_pipeline_output_parses_back(capsys):
    import fusec

    assert cli.main(["compile", str(CONV), *REF]) == 0
    fusec.parse(capsys.readouterr().out)


@pytest.mark.parametrize("emit", ["kernels", "all"])
def test_emit_kernels(emit: str, capsys):
    assert cli.main(["compile", str(CONV), "--target", "reference", "--emit", emit]) == 0
    out = capsys.readouterr().out
    assert "// no kernels generated for target 'reference'" in out
    assert ("builtin.module" in out) == (emit == "all")


def test_print_ir_after_all(capsys):
    assert cli.main(["compile", str(CONV), "--pipeline", PINNED, *REF, "--print-ir-after-all"]) == 0
    out, err = capsys.readouterr()
    headers = re.findall(r"// -----// IR Dump After (\S+) //----- //", err)
    assert headers == ["infer-shapes", "canonicalize", "cse"]
    assert err.count("builtin.module {") == 3
    assert out.startswith("builtin.module {")


def test_timing(capsys):
    """The whole compile, not only the passes: its lines add up to the total."""
    assert cli.main(["compile", str(CONV), "--pipeline", PINNED, *REF, "--timing"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "timing (wall clock):"
    rows = [re.fullmatch(r" +(\d+\.\d) ms  (.+)", line) for line in lines[1:]]
    assert all(rows), lines
    # a top-level row's number ends at column 11, a pass's (under "passes") at 15
    top = {
        m.group(2).split(" (")[0]: float(m.group(1))
        for line, m in zip(lines[1:], rows, strict=True)
        if line.index(" ms  ") == 11
    }
    passes = [
        m.group(2) for line, m in zip(lines[1:], rows, strict=True) if line.index(" ms  ") == 15
    ]
    assert passes == ["infer-shapes", "canonicalize", "cse"]
    names = [name for name in top if name != "start-up"]  # start-up: where /proc tells it
    assert names == ["imports", "parse", "passes", "code generation", "other", "total"]
    parts = sum(seconds for name, seconds in top.items() if name != "total")
    assert abs(top["total"] - parts) <= 0.1 * len(top)  # each row rounded to 0.1 ms


def test_unknown_entry_is_an_error(capsys):
    assert cli.main(["compile", str(CONV), "--entry", "nope"]) == 1
    assert capsys.readouterr().err == (
        "error: no function named '@nope' in the module (functions: @fused_conv_bias_relu)\n"
    )


def test_internal_errors_exit_70_without_a_traceback(monkeypatch, capsys):
    import fusec.api

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(fusec.api, "compile", broken)
    monkeypatch.delenv("FUSEC_DEBUG", raising=False)
    assert cli.main(["compile", str(CONV)]) == 70
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: boom" in err and "Traceback" not in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["compile"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["compile", str(CONV), "--emit", "assembly"])
