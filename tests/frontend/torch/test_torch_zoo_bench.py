"""The torch.compile backend zoo benchmark's own parts (benchmarks/torch_backend_zoo.py),
without torch or a GPU: the plan at batch 1 and each model's throughput batch, the
baselines of a row (inductor at every batch, reduce-overhead at batch 1 on cuda), a
failed baseline kept as a note of its row, and tables merged over several runs.
End to end: ``python benchmarks/torch_backend_zoo.py --target cpu --smoke --models tiny``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import torch_backend_zoo as bench  # noqa: E402


def _args(*argv: str):
    return bench.parse_args(list(argv))


def test_the_default_plan_is_batch_1_and_each_models_throughput_batch() -> None:
    cases = bench.plan(_args("--models", "resnet50,bert,branchy"))
    assert cases == [
        ("resnet50", "f16", 1),
        ("resnet50", "f16", 32),
        ("bert", "f16", 1),
        ("bert", "f16", 8),
        ("branchy", "f16", 1),
        ("branchy", "f16", bench.TINY_THROUGHPUT),
    ]
    smoke = bench.plan(_args("--models", "gpt2", "--smoke", "--batches", "throughput,1,2"))
    assert smoke == [("gpt2", "f16", 2), ("gpt2", "f16", 1)]  # the smoke batch is 2: once


@pytest.mark.parametrize("batches", ["0", "x", "1,-2"])
def test_a_bad_batch_is_refused_by_name(batches: str) -> None:
    with pytest.raises(SystemExit, match="bad batch size"):
        bench.plan(_args("--models", "mlp", "--batches", batches))


def test_inductor_at_every_batch_and_reduce_overhead_at_batch_1_on_cuda() -> None:
    cuda = _args()
    assert bench.baseline_modes(cuda, 1) == [
        ("inductor", "default"),
        ("reduce_overhead", "reduce-overhead"),
    ]
    assert bench.baseline_modes(cuda, 32) == [("inductor", "default")]
    assert bench.baseline_modes(_args("--target", "cpu"), 1) == [("inductor", "default")]
    assert bench.baseline_modes(_args("--no-reduce-overhead"), 1) == [("inductor", "default")]
    assert bench.baseline_modes(_args("--no-inductor"), 1) == []


def _row(model: str, batch: int, **fields) -> dict:
    return {
        "model": model, "dtype": "f16", "batch": batch, "fusec_ms": 2.0, "eager_ms": 4.0,
        "fusec_err": 1e-3, "eager_err": 1e-3, "verdict": "ok", "graphs": 1, "partitions": 1,
        "eager_nodes": 0, "remark": "",
    } | fields  # fmt: skip


def test_a_failed_baseline_is_a_note_of_its_row() -> None:
    rows = [
        _row("bert", 1, inductor_ms=3.0, reduce_overhead_error="RuntimeError: cudagraphs"),
        _row("bert", 8, inductor_error="TimeoutError: compile | took long"),
    ]
    text = bench.markdown(rows, {"date": "d", "target": "cuda", "torch": "2.x"})
    first, second = (line for line in text.splitlines() if line.startswith("| bert"))
    cells = [c.strip() for c in first.split("|")[1:-1]]
    header = [c.strip() for c in text.splitlines()[6].split("|")[1:-1]]
    row = dict(zip(header, cells, strict=True))
    assert row["inductor ms"] == "3.000" and row["vs inductor"] == "1.50x"
    assert row["r-o ms"] == "failed" and row["vs r-o"] == "-"
    assert row["note"] == "r-o: RuntimeError: cudagraphs"
    assert "| failed |" in second and "inductor: TimeoutError: compile / took long" in second


def test_merge_keeps_the_rows_a_run_does_not_remake(tmp_path: Path) -> None:
    meta = {"date": "d1", "target": "cuda", "smoke": False, "torch": "2.x"}
    stem, old = bench.open_table(tmp_path, "", dict(meta), merge=True)  # no table yet
    assert stem.name == "torch-backend" and old == []
    bench.write_table(stem, old, [_row("bert", 1), _row("resnet50", 1)], meta)
    again = [_row("bert", 1, fusec_ms=1.0), _row("bert", 8)]
    later = meta | {"date": "d2"}
    stem, old = bench.open_table(tmp_path, "", later, merge=True)
    bench.write_table(stem, old, again, later)
    table = json.loads(stem.with_suffix(".json").read_text())
    keys = [(r["model"], r["batch"], r["fusec_ms"]) for r in table["rows"]]
    assert keys == [("resnet50", 1, 2.0), ("bert", 1, 1.0), ("bert", 8, 2.0)]  # zoo order
    assert table["meta"]["merged"] == ["d1"]
    assert "| resnet50 |" in stem.with_suffix(".md").read_text()
    skipped = {"model": "resnet50", "dtype": "f16", "batch": 1, "error": "not run: over --budget"}
    rows = bench.merged_rows(table["rows"], [skipped, skipped | {"batch": 32}])
    assert [(r["model"], r["batch"], "error" in r) for r in rows] == [
        ("resnet50", 1, False),  # the old row stays: the new one was not run
        ("resnet50", 32, True),
        ("bert", 1, False),
        ("bert", 8, False),
    ]
    assert bench.open_table(tmp_path, "", dict(meta), merge=False)[1] == []  # replaces
    with pytest.raises(SystemExit, match="another target"):
        bench.open_table(tmp_path, "", meta | {"target": "cpu"}, merge=True)


def test_past_the_budget_no_baseline_is_compiled() -> None:
    import time

    args = _args("--budget", "5")
    assert not bench.over_budget(args)  # not started
    args.start = time.monotonic()
    assert not bench.over_budget(args)
    args.start = time.monotonic() - 6
    assert bench.over_budget(args)
    assert not bench.over_budget(_args())  # no budget
