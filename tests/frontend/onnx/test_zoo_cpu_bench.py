"""The cpu model zoo benchmark's own parts (benchmarks/models_cpu.py), without torch.

How a run's records become rows (a step that timed out, a refusal, an export error, the
torch backend's column), the row status, the alternating timer, the output check (NaN
never passes), the export cache's keys and the options. The zoo itself runs end to end
with ``python benchmarks/models_cpu.py --quick --models mobilenet_v3_large`` in a Python
with torch, torchvision, transformers and onnxruntime.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import models_cpu as cpu_zoo  # noqa: E402


def _records() -> list[dict]:
    """A run of two models: ResNet-50 measured at 1 thread, timed out at 2; ConvNeXt-T
    refused by fusec; GPT-2 not exported."""
    return [
        {"kind": "env", "onnxruntime": "1.0"},
        {"kind": "export", "model": "resnet50", "batch": 1, "status": "ok", "onnx_nodes": 120},
        {"kind": "compile", "model": "resnet50", "batch": 1, "cache": "cold", "status": "ok",
         "total_s": 30.0},
        {"kind": "compile", "model": "resnet50", "batch": 1, "cache": "warm", "status": "ok",
         "total_s": 1.5},
        {"kind": "compile", "model": "resnet50", "batch": 1, "cache": "fill", "status": "ok",
         "total_s": 2.5},
        {"kind": "compile", "model": "resnet50", "batch": 1, "cache": "program", "status": "ok",
         "total_s": 0.9},
        {"kind": "time", "model": "resnet50", "batch": 1, "threads": 1, "status": "ok",
         "passed": True, "rel_l2": 1e-7, "fusec_ms": 10.0, "fusec_min_ms": 9.0,
         "ort_ms": 20.0, "ort_min_ms": 18.0, "kernels": 3, "kinds": {"conv": 3}},
        {"kind": "time", "model": "resnet50", "batch": 1, "threads": 2, "status": "timeout",
         "message": "timeout after 900 s"},
        {"kind": "torch", "model": "resnet50", "batch": 1, "threads": 1, "status": "ok",
         "passed": True, "rel_l2": 2e-7, "fusec_ms": 8.0, "eager_ms": 16.0, "graphs": 1,
         "partitions": 1, "eager_nodes": 0, "first_s": 5.0, "remark": ""},
        {"kind": "export", "model": "convnext_tiny", "batch": 1, "status": "ok"},
        {"kind": "compile", "model": "convnext_tiny", "batch": 1, "cache": "cold",
         "status": "refused", "message": "FusecError: x.onnx: op 'Foo' is not supported"},
        {"kind": "time", "model": "convnext_tiny", "batch": 1, "threads": 1,
         "status": "refused", "message": "FusecError: x.onnx: op 'Foo' is not supported",
         "ort_ms": 5.0, "ort_min_ms": 4.0},
        {"kind": "torch", "model": "convnext_tiny", "batch": 1, "threads": 1,
         "status": "error", "message": "RuntimeError: eager broke"},
        {"kind": "export", "model": "gpt2", "batch": 4, "status": "export error",
         "message": "RuntimeError: no"},
    ]  # fmt: skip


def test_merge_makes_one_row_per_model_batch_and_threads() -> None:
    rows, env = cpu_zoo.merge(_records())
    assert env == {"onnxruntime": "1.0"}
    keys = [(r["model"], r["batch"], r["threads"]) for r in rows]
    # the zoo's order; a model without any timing keeps one row (threads unknown)
    assert keys == [
        ("resnet50", 1, 1),
        ("resnet50", 1, 2),
        ("convnext_tiny", 1, 1),
        ("gpt2", 4, None),
    ]
    ok, late, refused, unexported = rows
    assert ok["status"] == "ok" and ok["cold_s"] == 30.0 and ok["warm_s"] == 1.5
    assert ok["program_s"] == 0.9  # the fill step (storing the program) is not tabled
    assert ok["onnx_nodes"] == 120 and ok["tb_fusec_ms"] == 8.0 and ok["tb_eager_ms"] == 16.0
    assert late["status"] == "timeout" and late["cold_s"] == 30.0  # the compile is the model's
    assert late["messages"] == ["fusec: timeout after 900 s"]
    assert refused["status"] == "refused"
    assert refused["messages"][0] == "cold compile: FusecError: x.onnx: op 'Foo' is not supported"
    assert unexported["status"] == "export error"
    assert unexported["messages"] == ["export: RuntimeError: no"]


def test_a_failed_check_is_wrong_and_left_out_of_the_chart() -> None:
    records = _records()
    first = next(n for n, r in enumerate(records) if r["kind"] == "time")
    records[first] = records[first] | {"passed": False}
    rows, _ = cpu_zoo.merge(records)
    assert rows[0]["status"] == "wrong"
    labels, series = cpu_zoo.chart_series(rows)
    assert labels == [] and series["onnxruntime / fusec"] == []


def test_chart_series_has_the_backend_when_measured() -> None:
    rows, _ = cpu_zoo.merge(_records())
    labels, series = cpu_zoo.chart_series(rows)
    assert labels == ["ResNet-50 b1 t1"]
    assert series == {"onnxruntime / fusec": [2.0], "eager / backend=fusec": [2.0]}


def test_markdown_rows_and_messages() -> None:
    rows, env = cpu_zoo.merge(_records())
    text = cpu_zoo.markdown(rows, {"environment": env, "torch_backend": True, "date": "d"})
    lines = text.splitlines()
    head = next(n for n, line in enumerate(lines) if line.startswith("| model |"))
    assert lines[head].count("|") == lines[head + 1].count("|") == lines[head + 2].count("|")
    assert lines[head + 2].startswith(
        "| ResNet-50 | 1 | 1 | ok | 10.00 (9.00) | 20.00 (18.00) | 2.00x | 2.00x "
        "| PASS (1.0e-07) | 3 (3 conv) | 30.0 | 1.5 | 0.9 | 8.00 | 16.00 | 2.00x | PASS (2.0e-07) "
        "| 1 / 1 / 0 | 5.0 |"
    )
    # onnxruntime is timed where fusec fails; a failed backend says so, its message below
    assert (
        "| ConvNeXt-T | 1 | 1 | refused | - | 5.00 (4.00) | - | - | - | - | - | - | - "
        "| error | - | - | - | - | - |" in text
    )
    assert "- ConvNeXt-T batch 1: torch backend: RuntimeError: eager broke" in text
    # a refusal repeated by the compile and timing steps is one message per step
    assert text.count("ConvNeXt-T batch 1: cold compile: FusecError") == 1
    assert "- GPT-2 decoder batch 4: export: RuntimeError: no" in text


def test_alternate_calls_in_turn() -> None:
    calls: list[str] = []
    timed = cpu_zoo.alternate(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, seconds=0.0
    )
    assert calls == ["a", "b"] * 7  # two warm-up rounds, then the 5 timed at least
    assert timed["a"]["runs"] == timed["b"]["runs"] == 5
    assert 0.0 <= timed["a"]["min_ms"] <= timed["a"]["ms"]


def test_check_against_the_baseline() -> None:
    want = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    assert cpu_zoo.check([want + 1e-7], [want])["passed"]
    off = want.copy()
    off[0, 0] += 1.0
    bad = cpu_zoo.check([off], [want])
    assert not bad["passed"] and "out of tolerance" in bad["why"]
    nan = want.copy()
    nan[1, 1] = np.nan
    assert not cpu_zoo.check([nan], [want])["passed"]
    assert cpu_zoo.check([want], [want, want]) == {
        "passed": False,
        "rel_l2": None,
        "why": "1 outputs, 2 wanted",
    }


def test_export_cache_keys(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bert, resnet = cpu_zoo.CPU_ZOO["bert"], cpu_zoo.CPU_ZOO["resnet50"]
    assert cpu_zoo.onnx_path(bert, 4, "2.13.0+cpu") == (
        tmp_path / "fusec/models-cpu/torch-2.13.0+cpu/bert-4l-s128-h768-b4.onnx"
    )
    assert cpu_zoo.onnx_path(resnet, 1, "2.13.0").name == "resnet50-128px-b1.onnx"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # ignored, as XDG says
    assert cpu_zoo.cache_folder() == Path.home() / ".cache/fusec/models-cpu"
    assert bert.input_shape(2) == (2, 128, 768) and resnet.input_shape(2) == (2, 3, 128, 128)


def test_options() -> None:
    args = cpu_zoo.parse_args(["--quick", "--models", "gpt2,resnet50"])
    assert (args.batch_list, args.thread_list, args.seconds) == (["1"], [1], 1.0)
    assert [m.name for m in args.model_list] == ["gpt2", "resnet50"]
    args = cpu_zoo.parse_args([])
    assert args.thread_list == [1, 2] and len(args.model_list) == 8
    assert cpu_zoo.batches_of(cpu_zoo.CPU_ZOO["resnet50"], args.batch_list) == [1, 8]
    assert cpu_zoo.batches_of(cpu_zoo.CPU_ZOO["gpt2"], ["1", "throughput", "4"]) == [1, 4]
    with pytest.raises(SystemExit):
        cpu_zoo.parse_args(["--models", "alexnet"])


def test_first_line_of_an_error() -> None:
    err = ValueError("/tmp/abc/m.onnx: node 3 is odd\nmore detail")
    assert cpu_zoo.first_line(err) == "ValueError: m.onnx: node 3 is odd"
