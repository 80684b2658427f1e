"""``fuse-singletons``: every ai op still in no group gets a one-op group.

The last fusion pass of ``fusec-default``: afterwards every ai tensor op of a
function lives in exactly one ``ai.fused`` (the contract the code generators
rely on), with the kind its rules give it alone (conv, matmul, row_reduce,
pointwise, reduce, pool, copy or view).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from fusec.passes.fusion.driver import FusionPass, wrap_singletons


@dataclass(frozen=True)
class FuseSingletonsPass(FusionPass):
    """Wrap each ungrouped ai op in its own ``ai.fused``."""

    name = "fuse-singletons"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        wrap_singletons(op, self.policy())
