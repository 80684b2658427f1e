"""``fusec run``: inputs from .npz or random, outputs to .npz, ``--check`` verdicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fusec.api import CompiledModule
from fusec.cli import main
from fusec.tools import runner

EXAMPLES = Path(__file__).parents[2] / "examples"
CHAIN = EXAMPLES / "elementwise_chain.mlir"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "run-cli-cache"))


def _inputs(seed=3):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((4, 8, 16)).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
        "s": rng.standard_normal((8, 1)).astype(np.float32),
    }


def test_run_check_passes_on_random_inputs(capsys):
    assert (
        main(["run", str(CHAIN), "--random-inputs", "--seed", "7", "--check", "--target", "cpu"])
        == 0
    )
    out = capsys.readouterr().out
    assert "on target 'cpu'" in out
    assert "result #0 tensor<4x8x16xf16>: rel err" in out and "PASS" in out


def test_run_inputs_by_name_and_output_file(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", **_inputs())
    out_path = tmp_path / "out.npz"
    assert (
        main(
            [
                "run",
                str(CHAIN),
                "--inputs",
                str(tmp_path / "in.npz"),
                "--target",
                "cpu",
                "-o",
                str(out_path),
                "--check",
            ]
        )
        == 0
    )
    with np.load(out_path) as data:
        result = data["result0"]
    import fusec

    ref = fusec.reference(CHAIN)(*_inputs().values())
    assert result.dtype == np.float16 and result.shape == (4, 8, 16)
    assert np.linalg.norm(result.astype(np.float64) - ref) / np.linalg.norm(ref) < 1e-2


def test_run_positional_npz_and_float64_inputs_are_converted(tmp_path):
    np.savez(tmp_path / "in.npz", *[a.astype(np.float64) for a in _inputs().values()])
    assert (
        main(
            ["run", str(CHAIN), "--inputs", str(tmp_path / "in.npz"), "--target", "cpu", "--check"]
        )
        == 0
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "exactly one of --inputs"),
        (["--random-inputs", "--inputs", "x.npz"], "exactly one of --inputs"),
        (["--inputs", "missing.npz"], "no such file"),
    ],
)
def test_run_usage_errors(capsys, argv, message):
    assert main(["run", str(CHAIN), "--target", "cpu", *argv]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and message in err and "Traceback" not in err


def test_run_wrong_npz_names_and_shapes(tmp_path, capsys):
    np.savez(tmp_path / "bad.npz", q=np.zeros(3))
    assert main(["run", str(CHAIN), "--inputs", str(tmp_path / "bad.npz")]) == 1
    assert "expected arrays named x, b, s" in capsys.readouterr().err
    bad = _inputs()
    bad["b"] = np.ones(15, np.float32)
    np.savez(tmp_path / "bad2.npz", **bad)
    assert main(["run", str(CHAIN), "--inputs", str(tmp_path / "bad2.npz")]) == 1
    assert "array 'b' has shape (15,)" in capsys.readouterr().err


def test_run_check_fails_on_wrong_results(monkeypatch, capsys):
    def broken(self, *args):
        return np.full((4, 8, 16), np.nan, dtype=np.float16)

    monkeypatch.setattr(CompiledModule, "__call__", broken)
    assert main(["run", str(CHAIN), "--random-inputs", "--check", "--target", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "FAIL (NaN in the result)" in out


def test_compare_verdicts():
    ref = np.linspace(1, 2, 10)
    fn_text = "func.func @f(%x: tensor<10xf32>) -> tensor<10xf32> { return %x : tensor<10xf32> }"
    import fusec
    from fusec.ir.module import entry_function

    fn = entry_function(fusec.parse(fn_text))
    (ok,) = runner.compare(fn, [ref.astype(np.float32)], [ref])
    assert ok.passed and ok.rel_err < 1e-7
    (off,) = runner.compare(fn, [(ref * 1.001).astype(np.float32)], [ref])
    assert not off.passed and "FAIL" in off.format()
    nan = ref.copy()
    nan[2] = np.nan
    (bad,) = runner.compare(fn, [nan.astype(np.float32)], [ref])
    assert not bad.passed and bad.has_nan
