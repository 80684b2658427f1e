"""``fuse``: operator fusion as one transform, its stages as data.

Each function body is unpacked once (its ``ai.fused`` groups inlined, their
membership kept), the planner runs the stages of ``stages`` in order on the
flat ops (``planner.STAGE_ORDER`` by default: prologue, epilogue, reduction,
elementwise, singletons), and the groups are packed once at the end
(``outline.py``). Every candidate the planner refuses is recorded with its
reason as it is refused; the edges left between kernels are reported from that
record (``remarks.py``), so ``--remarks`` says exactly what the pass decided
under exactly the rules and target it used.

``fuse-prologue`` ... ``fuse-singletons`` run one stage each (the same pass
with ``stages`` fixed), for pipelines and tests that look between stages;
``fuse{dump_stages=true}`` prints the IR after every stage to stderr instead.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from fusec.errors import FusecError
from fusec.passes.fusion import remarks
from fusec.passes.fusion.outline import pack, unpack
from fusec.passes.fusion.planner import STAGE_ORDER, Planner
from fusec.passes.fusion.remarks import functions
from fusec.passes.fusion.rules import Rules, load_rules


@dataclass(frozen=True)
class FusePass(ModulePass):
    """Group the ai ops of every function into ``ai.fused`` kernels (see the module
    docstring); its options set the policy once for all stages."""

    name = "fuse"

    stages: tuple[str, ...] = ()
    """The stages to run, in order (default: all of ``STAGE_ORDER``)."""

    rules: str | None = None
    """Path of a rules file to use instead of the shipped ``default.rules``."""

    softmax_tile_limit: int | None = None
    """Overrides the rules' ``softmax_tile_limit`` parameter."""

    max_chain_ops: int | None = None
    """Overrides the rules' ``max_chain_ops`` parameter (elementwise ops per group)."""

    target: str | None = None
    """The back end the groups are for (``fusec.target``): only groups it generates,
    and gains by, are formed. ``fusec.api.compile`` sets its resolved target."""

    dump_stages: bool = False
    """Print the IR after every stage to stderr (a debugging aid)."""

    def stage_list(self) -> tuple[str, ...]:
        chosen = self.stages or STAGE_ORDER
        unknown = [s for s in chosen if s not in STAGE_ORDER]
        if unknown:
            raise FusecError(
                f"unknown fusion stage '{unknown[0]}' (stages: {', '.join(STAGE_ORDER)})"
            )
        return chosen

    def overrides(self) -> dict[str, int | None]:
        """Rule parameters this pass sets (``None``: the rules file's value)."""
        return {"softmax_tile_limit": self.softmax_tile_limit, "max_chain_ops": self.max_chain_ops}

    def policy(self) -> Rules:
        """The rules file, with the target's parameter values (``Target.rule_params``,
        those the file defines) and then this pass's own options applied."""
        if self.target is None:
            return load_rules(self.rules, **self.overrides())
        from fusec.target import get_target

        target = get_target(self.target)
        rules = load_rules(self.rules)
        own = {k: v for k, v in target.rule_params.items() if k in rules.params}
        return rules.with_params(**own).with_params(**self.overrides()).for_target(target)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rules = self.policy()
        stages = self.stage_list()
        for fn in functions(op):
            block = fn.body.block
            planner = Planner(block, rules, unpack(block))
            for stage in stages:
                planner.run_stage(stage)
                if self.dump_stages:
                    planner = self._dump(op, planner, stage)
            if remarks.collecting():
                remarks.report(fn.sym_name.data, remarks.cut_edge_remarks(planner))
            pack(block, planner.groups)

    def _dump(self, module: ModuleOp, planner: Planner, stage: str) -> Planner:
        """Print the IR as it stands after ``stage``; a planner for the stages left."""
        pack(planner.block, planner.groups)
        sys.stderr.write(f"// -----// IR Dump After {self.name}[{stage}] //----- //\n")
        sys.stderr.write(f"{module}\n\n")
        again = Planner(planner.block, planner.rules, unpack(planner.block))
        again.rejections = planner.rejections
        return again


@functools.cache
def stage_pass(stage: str) -> type[FusePass]:
    """The pass running the one stage ``stage`` of ``fuse`` (``fuse-<stage>``), made on
    first use: a frozen dataclass takes ~1 ms to make, and a compile runs ``fuse`` only."""

    @dataclass(frozen=True)
    class StagePass(FusePass):
        def stage_list(self) -> tuple[str, ...]:
            return (stage,)

    StagePass.name = f"fuse-{stage}"
    StagePass.__name__ = StagePass.__qualname__ = f"Fuse{stage.title()}Pass"
    StagePass.__doc__ = f"The {stage} stage of ``fuse`` alone."
    return StagePass


def __getattr__(name: str) -> dict[str, type[FusePass]]:
    if name == "STAGE_PASSES":  # fuse-prologue, fuse-epilogue, ...: one pass per stage
        return {f"fuse-{stage}": stage_pass(stage) for stage in STAGE_ORDER}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pipeline_rules(pipeline: str | None = None, target: str | None = None) -> Rules:
    """The policy the fusion passes of ``pipeline`` used (their ``rules`` and limits,
    applied for ``target``, the back end the groups were planned for).

    So that ``--remarks`` after ``fuse-epilogue{softmax_tile_limit=128}`` explains
    the decisions with the limit that made them.
    """
    from fusec.passes import build_pipeline

    passes = build_pipeline(pipeline, target=target).passes
    fusion = [p for p in passes if isinstance(p, FusePass)]
    path = next((p.rules for p in fusion if p.rules is not None), None)
    overrides: dict[str, int] = {}
    for fusion_pass in fusion:
        for name, value in fusion_pass.overrides().items():
            if value is not None:
                overrides.setdefault(name, value)
    rules = load_rules(path, **overrides)
    planned_for = next((p.target for p in fusion if p.target is not None), None)
    if planned_for is None:
        return rules
    from fusec.target import get_target

    return rules.for_target(get_target(planned_for))
