"""Every example graph on the cuda target vs the float64 reference (needs a GPU).

This is ``fusec run --random-inputs --check --target cuda`` as a test: it
caught TF32 in the PyTorch fallback of f32 conv groups (rel err 4e-4).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fusec
from fusec.ir.module import entry_function
from fusec.runtime.reference import run_reference
from fusec.tools.runner import compare, random_inputs

pytestmark = pytest.mark.gpu

EXAMPLES = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.mlir"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_reference_on_cuda(path: Path) -> None:
    compiled = fusec.compile(path, target="cuda")
    fn = entry_function(compiled.module)
    args = random_inputs(fn, seed=3)
    out = compiled(*args)
    outs = out if isinstance(out, tuple) else (out,)
    refs = run_reference(fusec.parse(path), args, precision="float64")
    for check in compare(fn, outs, refs):
        assert check.passed, check.format()
