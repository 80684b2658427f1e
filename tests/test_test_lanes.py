"""The test suite's own machinery: its lanes and the cuda skips (``tests/conftest.py``).

- ``python -m pytest`` (the default lane) leaves out ``slow`` and ``gpu`` tests
  through ``addopts`` in pyproject.toml; ``-m slow`` / ``-m gpu`` / ``-m fuzz`` on
  the command line select those lanes instead.
- Without numba-cuda (``-p tests.without_numba_cuda`` hides it), every test
  needing the cuda target skips with the Target's reason instead of failing,
  before its fixtures run (the simulator's module fixture among them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MARKED = textwrap.dedent("""
    import pytest

    def test_plain(): pass

    @pytest.mark.slow
    def test_slow(): pass

    @pytest.mark.gpu
    def test_gpu(): pass

    @pytest.mark.fuzz
    def test_fuzz(): pass

    @pytest.mark.fuzz
    @pytest.mark.slow
    def test_fuzz_slow(): pass
""")


def _pytest(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _collected(tmp_path: Path, *selection: str) -> set[str]:
    """The tests of MARKED that ``pytest <selection>`` collects, under the repository's
    pytest configuration (its ``addopts`` included)."""
    path = tmp_path / "test_marked.py"
    path.write_text(MARKED)
    config = str(ROOT / "pyproject.toml")
    done = _pytest("-c", config, "--rootdir", str(tmp_path), "--co", "-q", *selection, str(path))
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize(
    "selection, lane",
    [
        ((), {"test_plain", "test_fuzz"}),
        (("-m", "slow"), {"test_slow", "test_fuzz_slow"}),
        (("-m", "gpu"), {"test_gpu"}),
        (("-m", "fuzz"), {"test_fuzz", "test_fuzz_slow"}),
        (("-m", ""), {"test_plain", "test_slow", "test_gpu", "test_fuzz", "test_fuzz_slow"}),
    ],
    ids=["default", "slow", "gpu", "fuzz", "everything"],
)
def test_each_lane_selects_its_tests(tmp_path, selection, lane):
    assert _collected(tmp_path, *selection) == lane


CUDA_TESTS = [
    # requires_target, a module fixture running the simulator
    "tests/targets/cuda/test_cuda_sim.py",
    "tests/targets/cuda/test_cuda_ptx.py",  # requires_target at module level
    "tests/codegen/test_code_injection.py::test_cuda_modules_import_without_running_payloads",
    "tests/passes/test_golden.py::test_gpu_marked_tests_run_only_where_cuda_works",  # gpu
]
TARGETS_REASON = "numba-cuda is not installed (install the 'cuda' extra: pip install 'fusec[cuda]')"


def test_without_numba_cuda_the_cuda_tests_skip_with_the_targets_reason():
    done = _pytest("-p", "tests.without_numba_cuda", "-m", "", "-q", "-rs", *CUDA_TESTS)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and re.fullmatch(r"\d+ skipped in .*", summary), done.stdout
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips, done.stdout
    for line in skips:
        assert TARGETS_REASON in line, line
    assert sum(int(re.match(r"SKIPPED \[(\d+)\]", line)[1]) for line in skips) == int(
        summary.split()[0]
    )


def test_the_lane_budget_keeps_a_spread_of_each_file_within_its_share(monkeypatch) -> None:
    """A test that would overrun its file's share goes to the slow lane; a cheaper one
    after it still fits; unmeasured tests count UNMEASURED_S; files are independent."""
    import lane_budget

    monkeypatch.setattr(lane_budget, "FILE_BUDGET_S", 4.0)
    monkeypatch.setattr(lane_budget, "FILE_BUDGET_OVERRIDES_S", {"tests/b.py": 1.0})
    durations = {"tests/a.py::x": 3.0, "tests/a.py::y": 2.0, "tests/a.py::z": 0.5,
                 "tests/b.py::x": 0.8}  # fmt: skip
    ids = ["tests/a.py::x", "tests/a.py::y", "tests/a.py::z", "tests/a.py::new",
           "tests/b.py::x", "tests/b.py::new"]  # fmt: skip
    over = lane_budget.over_budget(ids, durations)
    assert over == {"tests/a.py::y", "tests/b.py::new"}  # a.py: 3 + 0.5 + 0.5 fit
