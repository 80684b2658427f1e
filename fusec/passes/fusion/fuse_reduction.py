"""``fuse-reduction``: each LayerNorm/softmax grows a row-reduce kernel.

Its cheap elementwise producers are cloned in (recomputed per row instead of
written to memory) and its elementwise consumers are moved in. A reduction
with nothing to absorb is left alone for ``fuse-singletons``.

The decisions are the planner's stage "fuse-reduction" (see ``planner.py``) under
the clauses of ``default.rules``; this module only names the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.fusion.driver import FusionPass


@dataclass(frozen=True)
class FuseReductionPass(FusionPass):
    """Grow row-reduce groups around each LayerNorm/softmax."""

    name = "fuse-reduction"
