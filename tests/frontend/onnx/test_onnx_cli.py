"""``fusec import`` and ``fusec conformance`` on the command line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
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
    path = _save(tmp_path, node_model("Det", {"x": np.ones((2, 2), np.float32)}, name="bad"))
    out = tmp_path / "model.mlir"
    assert main(["import", str(path), "-o", str(out)]) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [path]
    err = capsys.readouterr().err
    assert err.startswith(f'{path}: node "bad": error: Det: unsupported operator')
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
    assert main(["conformance", "--op", "GRU"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: not a supported operator: GRU (supported: ") and " Add," in err


# ------------------------------------------------------------ dynamic input shapes


def _dynamic_relu(tmp_path):
    """relu(x) + shape(x)[0] with a dynamic batch dimension."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["x"], ["s"], end=1),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["r", "sf"], ["y"], name="add"),
    ]
    dims = ["batch", 3]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return _save(tmp_path, model)


def test_import_with_input_shape_reports_what_was_folded(tmp_path, capsys):
    path = _dynamic_relu(tmp_path)
    assert main(["import", str(path), "--input-shape", "x=4x3"]) == 0
    captured = capsys.readouterr()
    assert "%x: tensor<4x3xf32>" in captured.out and "ai.add" in captured.out
    assert captured.err == (
        f"{path}: 4 nodes, 2 evaluated at import (constant folding): Cast 1, Shape 1\n"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x", "expected NAME=DIMS"),
        ("x=4x", "expected NAME=DIMS"),
        ("x=4x-3", "expected NAME=DIMS"),
        ("=4x3", "expected NAME=DIMS"),
        ("y=4x3", "input shapes given for 'y', which is not a graph input (inputs: x)"),
    ],
)
def test_bad_input_shape_options(tmp_path, capsys, spec, message):
    path = _dynamic_relu(tmp_path)
    assert main(["import", str(path), "--input-shape", spec]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_dynamic_model_without_input_shape_says_how(tmp_path, capsys):
    path = _dynamic_relu(tmp_path)
    assert main(["compile", str(path)]) == 1
    assert "--input-shape x=Nx3" in capsys.readouterr().err


def test_run_and_compile_take_onnx_models(tmp_path, capsys):
    path = _dynamic_relu(tmp_path)
    args = [str(path), "--input-shape", "x=2x3", "--target", "cpu"]
    assert main(["run", *args, "--random-inputs", "--check"]) == 0
    out = capsys.readouterr().out
    assert "ran @g on target 'cpu'" in out and "PASS" in out and "FAIL" not in out
    assert main(["compile", *args, "--remarks"]) == 0
    assert 'ai.fused "pointwise"' in capsys.readouterr().out


def test_input_shape_is_for_onnx_models_only(capsys):
    assert main(["compile", "examples/conv_bias_relu.mlir", "--input-shape", "x=1"]) == 1
    assert "--input-shape applies to .onnx models only" in capsys.readouterr().err
