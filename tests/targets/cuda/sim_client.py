"""Running a simulator script (``sim_runner.py``, ``pool_reduce_sim.py``) from a test:
the cases as JSON in, one JSON line a case out, under Numba's CUDA simulator in a
process of its own (the simulator patches numba.cuda for the whole process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_simulator(script: Path, records: list[dict], timeout: int = 600) -> dict:
    """``script``'s result records by case name; a run that prints none fails the test
    with its output."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(records)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            results[record["name"]] = record
    if not results:
        pytest.fail(f"simulator run produced nothing:\n{done.stdout}\n{done.stderr}")
    return results
