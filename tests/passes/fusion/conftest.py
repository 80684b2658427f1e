"""Fixtures of the fusion tests: example graphs, pass runners, contract checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "passes" / "golden" / "fusion"


@pytest.fixture
def example():
    """``example(name)``: the parsed module of ``examples/NAME.mlir``."""
    import fusec

    return lambda name: fusec.parse(EXAMPLES / f"{name}.mlir")
