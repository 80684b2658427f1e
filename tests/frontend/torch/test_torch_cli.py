"""``fusec import model.pt2`` and ``fusec run model.pt2``: saved torch.export programs on
the command line (where torch is installed)."""

from __future__ import annotations

import pytest
from torch_cases import quiet_torch_trace

torch = pytest.importorskip("torch")

from fusec.cli import main  # noqa: E402
from fusec.errors import ExitCode  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    yield from quiet_torch_trace()


@pytest.fixture
def program(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(model.eval(), (torch.randn(2, 8),)), str(path))
    return path


def test_import_prints_the_ir_with_locations(program, capsys) -> None:
    assert main(["import", str(program)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "ai.gelu" in out and "ai.matmul" in out and 'loc("addmm"' in out


def test_run_checks_a_saved_program(program, capsys) -> None:
    argv = ["run", str(program), "--random-inputs", "--check", "--target", "reference"]
    assert main(argv) == ExitCode.OK
    assert "PASS" in capsys.readouterr().out


def test_onnx_options_are_refused_for_a_program(program, capsys) -> None:
    assert main(["import", str(program), "--weights-as-args"]) == ExitCode.BAD_INPUT
    assert "apply to .onnx models only" in capsys.readouterr().err
