"""``fuse-epilogue``: Elementwise consumers (and a fitting softmax) of a conv2d/matmul join its kernel.

The decisions are the planner's stage "fuse-epilogue" (see ``planner.py``) under
the clauses of ``default.rules``; this module only names the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.fusion.driver import FusionPass


@dataclass(frozen=True)
class FuseEpiloguePass(FusionPass):
    """Elementwise consumers (and a fitting softmax) of a conv2d/matmul join its kernel."""

    name = "fuse-epilogue"
