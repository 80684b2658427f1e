"""``fuse-prologue``: producers of a conv2d/matmul's operands join its kernel.

With the shipped rules that is a LayerNorm feeding a matmul's A operand,
cloned into every matmul that reads it (the normalisation happens as A is
loaded, so no normalised copy of A is written to memory).

The decisions are the planner's stage "fuse-prologue" (see ``planner.py``) under
the clauses of ``default.rules``; this module only names the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.fusion.driver import FusionPass


@dataclass(frozen=True)
class FuseProloguePass(FusionPass):
    """Move (or clone, where the rules allow) operand producers into anchor groups."""

    name = "fuse-prologue"
