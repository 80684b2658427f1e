"""Every example graph on the cuda target vs the float64 reference (needs a GPU).

This is ``fusec run --random-inputs --check --target cuda`` as a test: it
caught TF32 in the PyTorch fallback of f32 conv groups (rel err 4e-4).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fusec
from fusec.ir.module import entry_function
from fusec.tools.runner import check, random_inputs

pytestmark = pytest.mark.gpu

EXAMPLES = sorted(Path(__file__).resolve().parents[3].joinpath("examples").glob("*.mlir"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_reference_on_cuda(path: Path) -> None:
    compiled = fusec.compile(path, target="cuda")
    fn = entry_function(compiled.module)
    args = random_inputs(fn, seed=3)
    out = compiled(*args)
    outs = out if isinstance(out, tuple) else (out,)
    for result in check(fusec.parse(path), compiled, args, outs):  # fusec run --check
        assert result.passed, result.format()
