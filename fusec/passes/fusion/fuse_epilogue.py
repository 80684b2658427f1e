"""``fuse-epilogue``: the consumers of a conv2d/matmul join its kernel as an epilogue.

Elementwise and broadcast ops over the anchor's output (bias, residual add,
activations, casts) and, after a matmul, one softmax whose row fits a tile.

The decisions are the planner's stage "fuse-epilogue" (see ``planner.py``) under
the clauses of ``default.rules``; this module only names the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.fusion.driver import FusionPass


@dataclass(frozen=True)
class FuseEpiloguePass(FusionPass):
    """Grow conv/matmul groups along their consumers."""

    name = "fuse-epilogue"
