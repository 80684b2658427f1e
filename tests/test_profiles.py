"""The hypothesis profiles: derandomised by default, a deeper search on request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings
from profiles import examples

HERE = Path(__file__).parent


def test_the_default_profile_is_reproducible(request):
    chosen = request.config.getoption("--hypothesis-profile", default=None)
    if chosen is None and "HYPOTHESIS_PROFILE" not in os.environ:
        assert settings.default.derandomize, "CI runs must be reproducible"
        assert examples(5) == 5


def test_profile_reports(request):
    """Run by the next test under --hypothesis-profile slow: prints what it sees."""
    print(f"PROFILE max_examples={settings.default.max_examples} examples5={examples(5)}")


def test_the_slow_profile_is_selectable_from_the_command_line():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            f"{HERE / 'test_profiles.py'}::test_profile_reports",
            "--hypothesis-profile",
            "slow",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PROFILE max_examples=1000 examples5=50" in proc.stdout
