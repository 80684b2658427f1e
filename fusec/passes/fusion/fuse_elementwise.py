"""``fuse-elementwise``: chains of elementwise/broadcast ops become pointwise kernels.

The decisions are the planner's stage "fuse-elementwise" (see ``planner.py``) under
the clauses of ``default.rules``; this module only names the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.fusion.driver import FusionPass


@dataclass(frozen=True)
class FuseElementwisePass(FusionPass):
    """Chains of elementwise/broadcast ops become pointwise kernels."""

    name = "fuse-elementwise"
