"""The model zoo benchmark's own parts (benchmarks/models_gpu.py), without torch or a GPU.

The ratio and verdict maths, the merging of a run's JSON lines (a torn last line, rows of a
killed worker), the table and JSON writing, the kernel counts on real cuda kernels (generated
without a GPU), the bar chart (with matplotlib) and ``--attention-mask``'s pieces (the padding
mask sample, the inputs, the skipped models, the table, NaN where the reference has NaN, no
resume across the setting). The zoo itself runs end to end with ``python
benchmarks/models_gpu.py --target cpu --smoke`` and on the GPU in
tests/targets/cuda/test_zoo_gpu.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import models_gpu as zoo  # noqa: E402

import fusec  # noqa: E402


def test_ratio_is_baseline_over_fusec() -> None:
    assert zoo.ratio(3.0, 1.5) == 2.0
    assert zoo.ratio(1.0, 4.0) == 0.25
    assert zoo.ratio(None, 1.0) is None
    assert zoo.ratio(1.0, None) is None
    assert zoo.ratio(1.0, 0.0) is None


@pytest.mark.parametrize(
    "fusec_err, eager_err, nonfinite, expected",
    [
        (5e-3, 1e-3, 0, "ok"),  # under the 1e-2 floor
        (3e-2, 1e-2, 0, "ok"),  # within 4x eager's own error
        (5e-2, 1e-2, 0, "wrong"),  # beyond it
        (2e-2, 1e-3, 0, "wrong"),  # beyond the floor, eager much better
        (1e-4, 1e-4, 1, "wrong"),  # a NaN never passes
        (float("nan"), 1e-3, 0, "wrong"),
        (float("inf"), 1e-3, 0, "wrong"),
    ],
)
def test_verdict(fusec_err: float, eager_err: float, nonfinite: int, expected: str) -> None:
    assert zoo.verdict(fusec_err, eager_err, nonfinite) == expected


def _row(**fields) -> dict:
    return {"pass": "fusec", "model": "resnet50", "dtype": "f16", "exporter": "dynamo"} | fields


def test_later_records_update_earlier_ones_and_a_torn_line_is_ignored() -> None:
    lines = [
        json.dumps({"pass": "env", "torch": "2.x", "device": "H200"}),
        json.dumps(_row(batch=1, stage="export")),
        json.dumps(_row(batch=1, stage="done", status="ok", fusec_ms=2.0)),
        json.dumps({"pass": "env", "torch": "other"}),
        json.dumps(_row(batch=32, stage="import"))[:25],  # a worker killed mid-write
    ]
    rows, env = zoo.merge_records(lines)
    assert env["torch"] == "2.x"  # the first environment record
    assert list(rows) == [("fusec", "resnet50", "f16", "dynamo", 1)]
    assert rows[("fusec", "resnet50", "f16", "dynamo", 1)]["fusec_ms"] == 2.0


def test_torch_baselines_join_every_exporter_of_their_model_dtype_and_batch() -> None:
    lines = [
        _row(batch=1, exporter="torchscript", status="ok", fusec_ms=4.0, eager_ms=2.0),
        _row(batch=1, status="ok", fusec_ms=2.0, eager_ms=2.0),
        _row(model="bert", batch=1, status="refused at import", message="no"),
        {"pass": "torch", "model": "resnet50", "dtype": "f16", "exporter": "-", "batch": 1}
        | {"compile_ms": 1.0, "reduce_overhead_ms": 0.5, "compile_s": 30.0, "stage": "done"},
    ]
    rows, _ = zoo.merge_records(json.dumps(r) for r in lines)
    table = zoo.combined_rows(rows)
    assert [(r["model"], r["exporter"]) for r in table] == [
        ("resnet50", "dynamo"),
        ("resnet50", "torchscript"),
        ("bert", "dynamo"),  # the zoo's order
    ]
    dynamo, torchscript, bert = table
    assert (dynamo["eager_over_fusec"], dynamo["compile_over_fusec"]) == (1.0, 0.5)
    assert dynamo["reduce_overhead_over_fusec"] == 0.25
    assert (torchscript["compile_over_fusec"], torchscript["compile_s"]) == (0.25, 30.0)
    assert bert["compile_over_fusec"] is None and "compile_ms" not in bert


def test_the_torch_backend_is_a_column_of_the_zoo_table() -> None:
    """--torch-backend (issue 32): the torch worker's torch.compile(backend="fusec") time,
    error and partitions join each fusec row of the model, dtype and batch, with the ONNX
    path's time over the backend's; a failed backend is a cell saying so, not a lost row."""
    lines = [
        _row(batch=1, status="ok", fusec_ms=2.0, eager_ms=2.0),
        _row(batch=32, status="ok", fusec_ms=8.0, eager_ms=9.0),
        {"pass": "torch", "model": "resnet50", "dtype": "f16", "exporter": "-", "batch": 1}
        | {"torch_backend_ms": 2.5, "torch_backend_err": 1e-3, "torch_backend_partitions": 1}
        | {"torch_backend_eager_nodes": 0, "stage": "done"},
        {"pass": "torch", "model": "resnet50", "dtype": "f16", "exporter": "-", "batch": 32}
        | {"torch_backend_error": "RuntimeError: x | y", "stage": "done"},
    ]
    rows, _ = zoo.merge_records(json.dumps(r) for r in lines)
    one, many = zoo.combined_rows(rows)
    assert one["fusec_over_torch_backend"] == 0.8 and "fusec_over_torch_backend" not in many
    text = zoo.markdown([one, many], {"torch_backend": True})
    head = next(line for line in text.splitlines() if line.startswith("| model |"))
    assert head.endswith("| backend ms | ONNX path / backend | backend err "
                         "| backend partitions, eager nodes |")  # fmt: skip
    table = [line for line in text.splitlines() if line.startswith("| ResNet-50 |")]
    assert table[0].endswith("| 2.500 | 0.80x | 1.0e-03 | 1, 0 |")
    assert table[1].endswith("| failed | - | - | RuntimeError: x / y |")
    assert "backend ms" not in zoo.markdown([one], {})  # without the option: no column


def test_a_killed_worker_leaves_each_unfinished_row_closed_at_its_stage(tmp_path) -> None:
    results = tmp_path / "run.jsonl"
    case = zoo.Case("resnet50", "f16", "dynamo", (1, 32, 64))
    results.write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                _row(batch=1, stage="done", status="ok"),
                _row(batch=32, stage="compile"),
            )
        )
        + "\n"
    )
    assert not zoo.done("fusec", case, zoo.merge_records(results.read_text().splitlines())[0])
    zoo.close_unfinished("fusec", case, "timeout after 180 s", results)
    rows, _ = zoo.merge_records(results.read_text().splitlines())
    assert rows[("fusec", "resnet50", "f16", "dynamo", 1)]["status"] == "ok"
    b32 = rows[("fusec", "resnet50", "f16", "dynamo", 32)]
    assert b32["status"] == "timeout" and b32["message"] == "timeout after 180 s (in compile)"
    assert rows[("fusec", "resnet50", "f16", "dynamo", 64)]["message"].endswith("(in start)")
    assert zoo.done("fusec", case, rows)
    assert not zoo.done("fusec", case, rows, retry=True)  # --resume tries the timeouts again


def test_a_new_attempt_keeps_nothing_of_the_last_one() -> None:
    lines = [
        _row(batch=1, stage="export"),
        _row(batch=1, stage="done", status="timeout", message="timeout after 180 s"),
        _row(batch=1, stage="export"),  # --resume: the case again
        _row(batch=1, stage="done", status="ok", fusec_ms=1.0),
    ]
    rows, _ = zoo.merge_records(json.dumps(r) for r in lines)
    (row,) = rows.values()
    assert row["status"] == "ok" and "message" not in row


def test_markdown_and_json(tmp_path) -> None:
    rows = [
        _row(batch=1, status="ok", fusec_ms=2.0, eager_ms=3.0, kernels=3)
        | {"kinds": {"conv": 2, "copy": 1}, "fallback": 1, "direct_conv": 0}
        | {"fallback_reasons": ["pool: no fused CUDA template"], "fusec_err": 1e-3},
        _row(model="llama", batch=8, status="refused at import", message="Reciprocal"),
        _row(model="gpt2", batch=2, status="ok", fusec_ms=1.0)
        | {"cuda_structure": {"kernels": 4, "kinds": {"matmul": 3, "attention": 1}}},
    ]
    rows[2]["cuda_structure"] |= {"fallback": 1, "direct_conv": 0}
    table = zoo.combined_rows({zoo.row_key(r): r for r in rows})
    meta = {"device": "NVIDIA H200", "driver": "580", "commit": "abc1234", "date": "today"}
    md, js = zoo.write_results(tmp_path, "test", table, meta)
    assert (md.name, js.name) == ("models-gpu-test.md", "models-gpu-test.json")
    text = md.read_text()
    head, rule, *body = [line for line in text.splitlines() if line.startswith("|")]
    assert head.count("|") == rule.count("|") == body[0].count("|") == body[1].count("|")
    assert "| GPT-2 decoder | f16 | dynamo | 2 | 4 (3 matmul, 1 attention) | 1 | 0 |" in body
    assert "| ResNet-50 | f16 | dynamo | 1 | - | ok | 2.000 | 3.000 |" in body[0]
    assert "1.50x" in body[0] and "3 (2 conv, 1 copy)" in body[0]
    assert "Llama-style decoder f16 dynamo batch 8: refused at import: Reciprocal" in text
    assert "- pool: no fused CUDA template" in text
    assert "NVIDIA H200, driver 580; commit abc1234" in text
    saved = json.loads(js.read_text())
    assert saved["commit"] == "abc1234" and saved["rows"][0]["eager_over_fusec"] == 1.5


CONV = """func.func @f(%x: tensor<2x{c}x9x10xf16>, %k: tensor<64x{cg}x3x3xf16>)
    -> tensor<2x64x9x{q}xf16> {{
  %c = ai.conv2d %x, %k {{strides = array<i64: 1, {sw}>, padding = array<i64: 1, 1>,
                         groups = {g} : i64}}
       : tensor<2x{c}x9x10xf16> * tensor<64x{cg}x3x3xf16>
  %r = ai.relu %c : tensor<2x64x9x{q}xf16>
  return %r : tensor<2x64x9x{q}xf16>
}}"""


@pytest.mark.requires_target("cuda")
@pytest.mark.parametrize(
    "groups, stride_w, fallback, direct",
    [(1, 1, 0, 0), (64, 1, 0, 1), (1, 2, 0, 0), (1, 5, 1, 0)],
    ids=["implicit-gemm", "depthwise-direct", "stride-w-2-implicit-gemm", "stride-w-5-fallback"],
)
def test_kernel_stats_reads_the_cuda_kernel_headers(groups, stride_w, fallback, direct) -> None:
    text = CONV.format(c=64, cg=64 // groups, g=groups, sw=stride_w, q=(10 - 1) // stride_w + 1)
    compiled = fusec.compile(text, target="cuda", executable=False)
    stats = zoo.kernel_stats(compiled.kernels)
    assert stats["kernels"] == len(compiled.kernels) == sum(stats["kinds"].values())
    assert stats["kinds"].get("conv") == 1
    assert (stats["fallback"], stats["direct_conv"]) == (fallback, direct)
    if fallback:
        (reason,) = stats["fallback_reasons"]
        assert reason.startswith(
            "conv: the Tensor Core template cannot serve it: stride along W of 5"
        )


def test_quick_plan_and_batches() -> None:
    quick = zoo.plan(zoo.parse_args(["--quick", "--models", "resnet50,bert"]))
    assert quick == [
        zoo.Case("resnet50", "f16", "dynamo", (1, 32)),
        zoo.Case("bert", "f16", "dynamo", (1, 8)),
    ]
    full = zoo.plan(zoo.parse_args(["--models", "gpt2", "--batches", "1,4,throughput"]))
    assert {(c.dtype, c.exporter) for c in full} == {
        (d, e) for d in zoo.DTYPES for e in zoo.EXPORTERS
    }
    assert full[0].batches == (1, 4, 8)
    assert zoo.plan(zoo.parse_args(["--smoke", "--quick", "--models", "gpt2"]))[0].batches == (
        1,
        zoo.SMOKE_BATCH,
    )
    with pytest.raises(SystemExit, match="unknown model"):
        zoo.plan(zoo.parse_args(["--models", "alexnet"]))


def test_bar_chart(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    rows = [
        _row(batch=1, status="ok", fusec_ms=2.0, eager_over_fusec=1.5, compile_over_fusec=0.8),
        _row(batch=32, status="wrong", fusec_ms=2.0, eager_over_fusec=9.0),
    ]
    labels, series = zoo.chart_series(rows)
    assert labels == ["ResNet-50 f16 dynamo b1"]  # only the rows that are right
    assert series["eager / fusec"] == [1.5] and series["reduce-overhead / fusec"] == [None]
    path = tmp_path / "chart.png"
    assert zoo.bar_chart(rows, path, "title") is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert zoo.bar_chart(rows[1:], tmp_path / "none.png", "t") == "No chart: no row was measured."
    assert not (tmp_path / "none.png").exists()


def test_a_refusal_is_shortened_to_the_file_node_and_reason() -> None:
    message = (
        '/tmp/tmpab12/llama-b1.onnx: node "node_expand_1": error: Expand: unsupported '
        "operator on values computed at run time (input 'u'); fusec evaluates any operator "
        "at import when all its inputs are constants, and compiles: Abs, Acos, ..."
    )
    assert zoo.short(message) == (
        'llama-b1.onnx: node "node_expand_1": error: Expand: unsupported operator on values '
        "computed at run time (input 'u')"
    )
    assert zoo.short("x" * 700) == "x" * 600


def _state(pid: int) -> str:
    """A process's scheduler state letter from /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_that_times_stops_the_other_workers_until_it_is_done(tmp_path) -> None:
    import subprocess
    import time

    lock = tmp_path / "run.lock"
    sleeper = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); import models_gpu as zoo; "
        "zoo.Registry(zoo.Path(sys.argv[2])).join(); print('ready', flush=True); time.sleep(60)"
    )
    bench = str(Path(zoo.__file__).parent)
    other = subprocess.Popen(
        [sys.executable, "-c", sleeper, bench, str(lock.with_suffix(".workers"))],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        timer = zoo.Timer("cuda", smoke=True, lock=lock)
        with timer.exclusive():
            deadline = time.monotonic() + 10
            while _state(other.pid) != "T" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _state(other.pid) == "T"
        deadline = time.monotonic() + 10
        while _state(other.pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(other.pid) != "T"
        # a holder killed mid-timing left it stopped: the parent's resume_workers mends that
        zoo.Registry(lock.with_suffix(".workers")).signal_others(zoo.signal.SIGSTOP)
        while _state(other.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        zoo.resume_workers(lock)
        while _state(other.pid) == "T" and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        assert _state(other.pid) != "T"
    finally:
        other.kill()
        other.wait()


def test_the_attention_mask_sample_pads_every_other_row_on_the_right() -> None:
    """--attention-mask: int64 [batch, seq], ones, the last seq // 8 positions zero in rows
    0, 2, ... (batch 1 is padded too), never a whole row (no fully masked softmax row)."""
    import numpy as np

    assert zoo.padding_lengths(4, 16) == [14, 16, 14, 16]
    assert zoo.padding_lengths(1, 128) == [112]
    assert zoo.padding_lengths(3, 4) == [3, 4, 3]  # at least one position padded
    assert zoo.padding_lengths(2, 2) == [1, 2]  # and never all of a row
    mask = zoo.padding_mask(3, 16)
    assert mask.dtype == np.int64 and mask.shape == (3, 16)
    assert mask.sum(axis=1).tolist() == [14, 16, 14]
    assert set(np.unique(mask).tolist()) == {0, 1}
    # right padding: each row is its ones, then its zeros
    assert (np.diff(mask, axis=1) <= 0).all() and (mask[:, 0] == 1).all()


def test_the_attention_mask_option_feeds_the_transformers_and_skips_the_rest() -> None:
    bert = zoo.ZOO["bert"]
    assert zoo.input_names(bert, "embeds") == ["inputs_embeds"]  # the default: one input
    assert zoo.input_names(bert, "ids", mask=True) == ["input_ids", "attention_mask"]
    assert zoo.input_label(bert, "embeds", mask=True) == "inputs_embeds+mask"
    assert zoo.input_label(bert, "embeds") == "inputs_embeds"
    assert {m for m, e in zoo.ZOO.items() if e.attention_mask} == {"bert", "gpt2", "llama"}
    argv = ["--quick", "--models", "resnet50,bert,vit_b_16,llama"]
    masked = zoo.parse_args([*argv, "--attention-mask"])
    assert [c.model for c in zoo.plan(masked)] == ["bert", "llama"]
    assert zoo.mask_skipped(masked) == ["resnet50", "vit_b_16"]
    plain = zoo.parse_args(argv)
    assert [c.model for c in zoo.plan(plain)] == ["resnet50", "bert", "vit_b_16", "llama"]
    assert zoo.mask_skipped(plain) == []
    assert masked.suffix.endswith("-mask") and not plain.suffix.endswith("-mask")
    assert zoo.parse_args(["--smoke", "--attention-mask"]).suffix.endswith("-smoke-mask")


def test_the_attention_mask_is_said_in_the_table() -> None:
    row = _row(model="gpt2", batch=2, status="ok", input_form="inputs_embeds+mask", mask="yes")
    meta = {"attention_mask": True, "attention_masks_env": "tensor"}
    text = zoo.markdown([row], meta | {"mask_skipped": ["ResNet-50", "ViT-B/16"]})
    assert "| GPT-2 decoder | f16 | dynamo | 2 | inputs_embeds+mask | ok |" in text
    assert "`$FUSEC_ATTENTION_MASKS`: tensor." in text
    assert "Not run with --attention-mask (no attention_mask input): ResNet-50, ViT-B/16." in text
    plain = zoo.markdown([_row(batch=1, status="ok")], {})
    assert "Attention masks" not in plain and "--attention-mask" not in plain


def test_errors_with_same_nan_leave_out_the_references_nan_positions() -> None:
    """--attention-mask: where the float32 module is NaN (a fully masked softmax row),
    fusec must be NaN too; those positions are out of the error, a finite value there is
    counted as non-finite; without the option any NaN of fusec counts, as before."""
    import numpy as np

    want = [np.array([[1.0, 2.0], [np.nan, np.nan]])]
    same = [np.array([[1.0, 2.0], [np.nan, np.nan]])]
    assert zoo.errors(same, want, same_nan=True) == (0.0, 0)
    err, bad = zoo.errors(same, want)
    assert bad == 2 and err == float("inf")  # the default: NaN is non-finite
    finite = [np.array([[1.0, 2.0], [0.5, np.nan]])]
    assert zoo.errors(finite, want, same_nan=True) == (0.0, 1)
    extra = [np.array([[np.nan, 2.0], [np.nan, np.nan]])]
    assert zoo.errors(extra, want, same_nan=True)[1] == 1


def test_resume_refuses_rows_of_the_other_mask_setting() -> None:
    """Rows do not key on --attention-mask: a resumed run must not mix the two."""
    plain = _row(model="bert", batch=1, stage="done", input_form="inputs_embeds")
    masked = plain | {"input_form": "inputs_embeds+mask", "mask": "yes"}
    closed = _row(model="gpt2", batch=1, stage="done", status="timeout")  # never exported
    rows = {zoo.row_key(r): r for r in (plain, closed)}
    assert zoo.mask_conflict(rows, mask=False) is None
    assert "made without --attention-mask" in zoo.mask_conflict(rows, mask=True)
    rows = {zoo.row_key(r): r for r in (masked, closed)}
    assert zoo.mask_conflict(rows, mask=True) is None
    assert "made with --attention-mask" in zoo.mask_conflict(rows, mask=False)
