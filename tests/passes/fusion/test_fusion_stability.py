"""Fusion of the examples is stable: fused IR is valid input and a fixed point, and the
one ``fuse`` pass plans what its stages one pass each plan.

Which ops end up in which kernel is stated per example by the FileCheck tests
of ``tests/passes/filecheck/fusion`` (they replaced whole-module snapshots).
"""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

import fusec
from fusec.passes.fusion.driver import STAGE_PASSES

#: The fusion stages one pass each.
STAGED = "infer-shapes,recognize-patterns,canonicalize,cse," + ",".join(STAGE_PASSES)

GRAPHS = sorted(p.stem for p in EXAMPLES.glob("*.mlir"))


@pytest.mark.parametrize("name", GRAPHS)
def test_fuse_plans_what_its_stages_plan_one_pass_each(name):
    path = EXAMPLES / f"{name}.mlir"
    staged = fusec.compile(path, target="reference", pipeline=STAGED)
    assert fusec.compile(path, target="reference").ir == staged.ir


@pytest.mark.parametrize("name", GRAPHS)
def test_fused_ir_parses_back_and_is_a_fixed_point(name):
    """The fused IR is valid input: parsing it and re-running the pipeline changes nothing."""
    final = fusec.compile(EXAMPLES / f"{name}.mlir", target="reference").ir
    assert fusec.compile(final, target="reference").ir == final
