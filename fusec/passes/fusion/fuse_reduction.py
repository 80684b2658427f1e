"""``fuse-reduction``: Each LayerNorm/softmax becomes a row-reduce kernel with its elementwise neighbours.

The decisions are the planner's stage "fuse-reduction" (see ``planner.py``) under
the clauses of ``default.rules``; this module only names the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.fusion.driver import FusionPass


@dataclass(frozen=True)
class FuseReductionPass(FusionPass):
    """Each LayerNorm/softmax becomes a row-reduce kernel with its elementwise neighbours."""

    name = "fuse-reduction"
