"""benchmarks/bench_common.py: the commit a results table names, and the files it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_common  # noqa: E402


def test_commit_prefers_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree copied without git (the device machines) names its commit by FUSEC_COMMIT."""
    monkeypatch.setenv("FUSEC_COMMIT", "1a2b3c4")
    assert bench_common.commit(dirty="+dirty", missing="unknown") == "1a2b3c4"


def test_commit_reads_git_head(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUSEC_COMMIT", raising=False)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=bench_common.ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    assert bench_common.commit() == head
    # the dirty mark is the given text after the hash, or nothing
    assert bench_common.commit(dirty="+dirty") in (head, head + "+dirty")


def test_commit_without_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUSEC_COMMIT", raising=False)
    monkeypatch.setattr(bench_common, "ROOT", Path("/"))
    assert bench_common.commit(missing="unknown") == "unknown"


def test_write_results_appends_the_suffixes(tmp_path: Path) -> None:
    """Both files land beside each other, the folder made; a dotted stem keeps its dots."""
    stem = tmp_path / "new" / "gemm-2026-12-01.5"
    bench_common.write_results(stem, {"rows": [1, 2]}, "| a |\n", indent=1)
    assert json.loads((tmp_path / "new" / "gemm-2026-12-01.5.json").read_text()) == {"rows": [1, 2]}
    assert (tmp_path / "new" / "gemm-2026-12-01.5.md").read_text() == "| a |\n"


def test_alternate_times_every_contender_each_round() -> None:
    """Warm-ups are untimed, every round times each contender ``calls`` times (in a new
    order when shuffled), and each time is a non-negative number of ms per call."""
    seen: list[str] = []
    fns = {name: (lambda n=name: seen.append(n)) for name in ("a", "b", "c")}
    times = bench_common.alternate(fns, rounds=4, calls=3, warmup=2, shuffle=True)
    assert sorted(times) == ["a", "b", "c"]
    assert all(len(t) == 4 and all(x >= 0.0 for x in t) for t in times.values())
    assert seen[:6] == ["a", "a", "b", "b", "c", "c"]  # the warm-ups, each in turn
    assert sorted(seen[6:]) == sorted(["a", "b", "c"] * 12)


def test_best_ms_is_the_fastest_round() -> None:
    calls: list[int] = []
    best = bench_common.best_ms(lambda: calls.append(1), rounds=3, calls=5)
    assert len(calls) == 15 and 0.0 <= best < 1e3
