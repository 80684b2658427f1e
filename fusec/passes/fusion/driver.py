"""Running a fusion stage over every function of a module.

Each fusion pass unpacks the ``ai.fused`` groups of a function body, lets the
planner regroup the flat ops, and packs the groups again (``outline.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block
from xdsl.passes import ModulePass

from fusec.dialect.ops import AiOp
from fusec.passes.fusion.legality import check_group
from fusec.passes.fusion.outline import Group, pack, unpack
from fusec.passes.fusion.planner import STAGES, Planner
from fusec.passes.fusion.rules import Rules, load_rules


def function_blocks(module: ModuleOp) -> Iterator[Block]:
    """The body of each single-block function of ``module``."""
    for op in module.walk():
        if isinstance(op, func.FuncOp) and len(op.body.blocks) == 1:
            yield op.body.block


def run_stage(module: ModuleOp, stage: str, rules: Rules) -> None:
    """Grow the groups of one planner stage (a fusion pass) in every function."""
    for block in function_blocks(module):
        planner = Planner(block, rules, unpack(block))
        planner.run(STAGES[stage])
        planner.erase_dead_originals()
        pack(block, planner.groups)


def wrap_singletons(module: ModuleOp, rules: Rules) -> None:
    """Give every ai op that is in no group a one-op group of its own kind."""
    for block in function_blocks(module):
        groups = unpack(block)
        grouped = {m for g in groups for m in g.members}
        for op in list(block.ops):
            if isinstance(op, AiOp) and op not in grouped:
                verdict = check_group([op], rules)
                if verdict.ok and verdict.kind is not None:
                    groups.append(Group(verdict.kind, [op], anchor=verdict.anchor))
        pack(block, groups)


@dataclass(frozen=True)
class FusionPass(ModulePass):
    """Options every fusion pass takes: another rules file, overrides of its limits."""

    name = "fusion"

    rules: str | None = None
    """Path of a rules file to use instead of the shipped ``default.rules``."""

    softmax_tile_limit: int | None = None
    """Overrides the rules' ``softmax_tile_limit`` parameter."""

    max_chain_ops: int | None = None
    """Overrides the rules' ``max_chain_ops`` parameter (elementwise ops per group)."""

    target: str | None = None
    """The back end the groups are for (``fusec.target``): only groups it generates,
    and gains by, are formed. ``fusec.api.compile`` sets its resolved target."""

    def overrides(self) -> dict[str, int | None]:
        """Rule parameters this pass sets (``None``: the rules file's value)."""
        return {"softmax_tile_limit": self.softmax_tile_limit, "max_chain_ops": self.max_chain_ops}

    def policy(self) -> Rules:
        rules = load_rules(self.rules, **self.overrides())
        if self.target is None:
            return rules
        from fusec.target import get_target

        return rules.for_target(get_target(self.target))

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        run_stage(op, self.name, self.policy())
