"""The MLIR-style pass tests: ``lit`` runs ``tests/passes/filecheck`` (``fusec-opt | filecheck``).

Each ``.mlir`` file there states one fact with FileCheck lines (which ops are
in which ``ai.fused`` group, what canonicalize leaves). Run here so that the
README's one test command (and so ``.ci/run``) runs them; ``lit -v
tests/passes/filecheck`` runs them alone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).parent / "filecheck"


def test_filecheck_suite_passes():
    bin_dir = str(Path(sys.executable).parent)
    lit = shutil.which("lit", path=bin_dir)
    if lit is None or shutil.which("filecheck", path=bin_dir) is None:
        pytest.fail("lit and filecheck are not installed: they are part of the 'test' extra")
    done = subprocess.run(
        [lit, "-v", "--no-progress-bar", str(SUITE)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-5000:]
    tests = len(list(SUITE.rglob("*.mlir")))
    # a test whose REQUIRES this host lacks (cpu-int8-gemm: AVX-512 VNNI) is unsupported
    counts = dict(re.findall(r"^\s*(Passed|Unsupported)\s*:\s*(\d+)", done.stdout, re.M))
    assert int(counts.get("Passed", 0)) + int(counts.get("Unsupported", 0)) == tests, done.stdout
