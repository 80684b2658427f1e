"""``fusec-opt``'s command line: a bad option is one ``fusec-opt: error:`` line naming the
option (exit 2), never a traceback nor a silent success; bad input is located (exit 1)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from fusec.errors import ExitCode
from fusec.tools import opt

ROOT = Path(__file__).parents[2]
CONV = str(ROOT / "examples" / "conv_bias_relu.mlir")


def run_opt(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = opt.main(list(argv))
    except SystemExit as exit_:  # argparse's own exit, as the console script sees it
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(code: int, err: str, option: str, needle: str) -> None:
    """Exit 2, and one error line that names ``option`` and holds ``needle``."""
    assert code == ExitCode.USAGE, err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("fusec-opt: error: ")]
    assert line.startswith(f"fusec-opt: error: argument {option}: ") and needle in line, line


# Each printed a traceback (llvm, x86-asm, riscv-asm, mps) or nothing at all with exit 0
# (wgsl): xDSL's back ends take lowered dialects, not ai IR.
@pytest.mark.parametrize("target", ["llvm", "x86-asm", "riscv-asm", "mps", "wgsl", "nope"])
def test_targets_other_than_mlir_are_usage_errors(capsys, target: str):
    code, out, err = run_opt(capsys, CONV, "-t", target)
    assert_usage_error(code, err, "-t/--target", f"invalid choice: '{target}'")
    assert "(choose from mlir)" in err
    assert out == ""


@pytest.mark.parametrize(
    ("pipeline", "needle"),
    [
        ("fuse{", "bad pass pipeline 'fuse{' at column 6: Expected argument name here"),
        ("fuse{rules=/x.rules}", "at column 12: Unknown token (a value that is not a plain"),
        ("no-such-pass", "Unrecognized passes: ['no-such-pass'] (known passes: infer-shapes"),
        ("fuse{bogus=1}", 'Provided arguments ["bogus"] not found'),
    ],
)
def test_bad_pipelines_are_usage_errors(capsys, pipeline: str, needle: str):
    code, out, err = run_opt(capsys, CONV, "-p", pipeline)
    assert_usage_error(code, err, "-p/--passes", needle)
    assert out == ""


def test_a_missing_rules_file_is_bad_input(capsys):
    code, out, err = run_opt(capsys, CONV, "-p", 'fuse{rules="/no/such.rules"}')
    assert code == ExitCode.BAD_INPUT
    assert err == "/no/such.rules: error: cannot read the fusion rules: No such file or directory\n"


def test_dash_reads_stdin_and_names_it_as_fusec_does(capsys, monkeypatch):
    """``-`` is stdin, as no file is (it was a file named '-': an [Errno 2] line), and a
    diagnostic names it ``<stdin>`` as ``fusec compile -`` does."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(Path(CONV).read_bytes())))
    code, out, err = run_opt(capsys, "-", "-p", "fusec-default")
    assert code == ExitCode.OK, err
    assert 'ai.fused "conv"' in out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"garbage\n")))
    code, _, err = run_opt(capsys, "-")
    assert code == ExitCode.BAD_INPUT and err.startswith("<stdin>:1:1: error: unknown operation")


def test_files_it_cannot_use_are_located_one_line_errors(capsys, tmp_path: Path):
    """An input it cannot read, or of another kind, and an output it cannot write: one
    ``FILE: error:`` line each, as ``fusec compile`` has them (each was a Python
    exception's text after ``error:``)."""
    text = tmp_path / "graph.txt"
    text.write_bytes(Path(CONV).read_bytes())
    missing = tmp_path / "missing.mlir"
    cases = [
        ([str(missing)], f"{missing}: error: no such file\n"),
        ([str(tmp_path)], f"{tmp_path}: error: cannot read the file: Is a directory\n"),
        (
            [str(text)],
            f"{text}: error: Unrecognized file extension 'txt': fusec-opt reads .mlir files "
            "(or - for stdin)\n",
        ),
        (
            [CONV, "-o", str(missing.parent / "no" / "out.mlir")],
            f"{missing.parent / 'no' / 'out.mlir'}: error: cannot write the output: No such "
            "file or directory\n",
        ),
    ]
    for argv, expected in cases:
        code, out, err = run_opt(capsys, *argv)
        assert (code, out, err) == (ExitCode.BAD_INPUT, "", expected)


def test_the_mlir_target_and_named_pipelines_work(capsys):
    code, out, err = run_opt(capsys, CONV, "-t", "mlir", "-p", "fusec-default")
    assert code == ExitCode.OK, err
    assert 'ai.fused "conv"' in out


def test_help_lists_the_named_pipelines_and_exit_codes(capsys):
    code, out, _ = run_opt(capsys, "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "named pipelines (in -p): fusec-default, fusec-cpu, fusec-cuda" in text
    assert "Exit status: 0 ok, 1 bad input, 2 bad command line, 70 a fusec bug." in text


def test_version(capsys):
    from fusec import __version__

    code, out, _ = run_opt(capsys, "--version")
    assert code == 0 and out.startswith(f"fusec-opt {__version__} (xDSL ")


def test_internal_errors_exit_70_without_a_traceback(monkeypatch, capsys):
    def broken(self, *args):
        raise RuntimeError("boom")

    monkeypatch.setattr(opt.FusecOptMain, "apply_passes", broken)
    monkeypatch.delenv("FUSEC_DEBUG", raising=False)
    code, _, err = run_opt(capsys, CONV, "-p", "cse")
    assert code == ExitCode.INTERNAL
    assert err.startswith("fusec-opt: internal error: RuntimeError: boom\n")
    assert "Traceback" not in err


def test_console_script_usage_error_as_users_see_it(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "fusec.tools.opt", CONV, "-t", "llvm"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == ExitCode.USAGE
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "fusec-opt: error: argument -t/--target: invalid choice: 'llvm' (choose from mlir)"
    )
