"""``fusec import`` and ``fusec conformance`` on the command line."""

from __future__ import annotations

import numpy as np
import onnx
from onnx_nets import node_model

import fusec
from fusec.cli import main


def _save(tmp_path, model, name="model.onnx"):
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_import_writes_the_ir_with_node_locations(tmp_path, capsys):
    path = _save(tmp_path, node_model("Relu", {"x": np.ones((2, 3), np.float32)}, name="r1"))
    out = tmp_path / "model.mlir"
    assert main(["import", str(path), "-o", str(out)]) == 0
    text = out.read_text()
    assert f'loc("r1"("{path}":0:0))' in text
    assert str(fusec.parse(text)) == str(fusec.from_onnx(path))
    assert capsys.readouterr().out == ""


def test_import_to_stdout_with_weights_as_args(tmp_path, capsys):
    model = node_model("Add", {"x": np.ones(3, np.float32)}, weights={"c": np.ones(3, np.float32)})
    assert main(["import", str(_save(tmp_path, model)), "--weights-as-args"]) == 0
    out = capsys.readouterr().out
    assert '%c: tensor<3xf32> {onnx.name = "c"}' in out and "arith.constant" not in out


def test_import_error_writes_nothing(tmp_path, capsys):
    path = _save(tmp_path, node_model("Erf", {"x": np.ones(2, np.float32)}, name="bad"))
    out = tmp_path / "model.mlir"
    assert main(["import", str(path), "-o", str(out)]) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [path]
    err = capsys.readouterr().err
    assert err.startswith(f'{path}: node "bad": error: Erf: unsupported operator')
    assert "Traceback" not in err

    out.write_text("keep me")
    assert main(["import", str(path), "-o", str(out)]) == 1
    assert out.read_text() == "keep me"


def test_import_of_a_missing_file(tmp_path, capsys):
    assert main(["import", str(tmp_path / "nope.onnx")]) == 1
    assert capsys.readouterr().err == f"{tmp_path / 'nope.onnx'}: error: no such file\n"


def test_conformance_reports_per_operator(capsys):
    assert main(["conformance", "--op", "Relu", "--op", "Gemm", "--target", "reference"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:5]}
    assert set(rows) == {"Gemm", "Relu", "total"}
    cases, run, passed, failed = (int(n) for n in rows["total"][:4])
    assert cases >= 13 and run == passed >= 12 and failed == 0


def test_conformance_verbose_lists_skips(capsys):
    assert main(["conformance", "--op", "Identity", "--target", "reference", "-v"]) == 0
    out = capsys.readouterr().out
    assert "skipped cases:" in out and "test_identity_sequence" in out


def test_conformance_rejects_an_unknown_operator(capsys):
    assert main(["conformance", "--op", "Erf"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: not a supported operator: Erf (supported: ") and " Add," in err
