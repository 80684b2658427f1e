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
