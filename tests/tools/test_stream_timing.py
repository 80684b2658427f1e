"""benchmarks/stream_timing.py: the stream check's loop, retried where the host was late."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import stream_timing  # noqa: E402


def _loops(monkeypatch: pytest.MonkeyPatch, results: list[tuple[float, float]]) -> list[int]:
    """Make ``loop_event_and_wall_ms`` return ``results`` in turn; the list counts calls."""
    calls: list[int] = []
    it: Iterator[tuple[float, float]] = iter(results)

    def fake(fn, calls_: int = 20, warmup: int = 1) -> tuple[float, float]:
        calls.append(calls_)
        return next(it)

    monkeypatch.setattr(stream_timing, "loop_event_and_wall_ms", fake)
    return calls


def test_agree_allows_ten_percent_and_a_tenth_of_a_millisecond() -> None:
    assert stream_timing.agree(1.0, 1.2)
    assert not stream_timing.agree(0.98, 1.26)  # the GPU lane's copy under load, one loop
    assert not stream_timing.agree(1.0, 2.0)


def test_a_late_wakeup_in_one_loop_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _loops(monkeypatch, [(0.98, 1.26), (0.97, 1.01)])
    assert stream_timing.checked_loop(lambda: None, 20) == (0.97, 1.01, True)
    assert calls == [20, 20]


def test_work_on_another_stream_fails_every_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each loop's wall clock exceeds its events; the closest loop is reported, failed."""
    calls = _loops(monkeypatch, [(1.0, 2.0), (1.0, 1.6), (1.0, 1.9)])
    assert stream_timing.checked_loop(lambda: None, 20) == (1.0, 1.6, False)
    assert len(calls) == 3
