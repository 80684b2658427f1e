"""Why-not-fused remarks: one line per producer -> consumer edge left between kernels.

The remarks are computed on the final IR, not logged while planning, so they
describe the program the user gets whatever pipeline produced it. For each
edge that crosses from one unit (an ``ai.fused`` group, or an op in none) to
another, the explanation is the first reason the two units could not be one
kernel: the rules' verdict on their union (``legality.check_group``, the same
judge the planner uses), else the cycle merging them would create, else
"allowed, but no pass of the pipeline merged them".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from fusec.dialect.ops import AiOp
from fusec.errors import SourceLocation
from fusec.passes.fusion.driver import function_blocks
from fusec.passes.fusion.legality import check_group, where
from fusec.passes.fusion.outline import Group, unpack
from fusec.passes.fusion.planner import Planner, Unit
from fusec.passes.fusion.rules import Rules, default_rules


@dataclass(frozen=True)
class Remark:
    """An unfused edge: where the consumer is, what it and its producer are, and why."""

    location: SourceLocation | None
    consumer: str
    producer: str
    producer_at: str
    reason: str

    def __str__(self) -> str:
        where_ = f"{self.location}: " if self.location is not None else ""
        return (
            f"{where_}remark: {self.consumer} not fused with its producer "
            f"{self.producer} ({self.producer_at}): {self.reason}"
        )


def fusion_remarks(module: ModuleOp, rules: Rules | None = None) -> list[Remark]:
    """The remarks of every function of ``module`` in program order (module unchanged)."""
    from fusec.ir.diagnostics import location_of

    rules = rules or default_rules()
    flat = module.clone()
    remarks = []
    for block in function_blocks(flat):
        planner = Planner(block, rules, unpack(block))
        for producer, consumer in _cut_edges(planner):
            units = planner.unit(producer), planner.unit(consumer)
            reason = why_not_fused(planner, *units, edge=(producer, consumer))
            remarks.append(
                Remark(location_of(consumer), consumer.name, producer.name, where(producer), reason)
            )
    return remarks


def _cut_edges(planner: Planner) -> Iterator[tuple[Operation, Operation]]:
    """(producer, consumer) ai op pairs in different units, each once, in program order."""
    seen = set()
    for consumer in planner.block.ops:
        if not isinstance(consumer, AiOp):
            continue
        for value in consumer.operands:
            producer = value.owner
            if not isinstance(producer, AiOp) or producer.parent is not planner.block:
                continue
            if planner.unit(producer) is planner.unit(consumer) or (producer, consumer) in seen:
                continue
            seen.add((producer, consumer))
            yield producer, consumer


def _members(unit: Unit) -> list[Operation]:
    return list(unit.members) if isinstance(unit, Group) else [unit]


def why_not_fused(
    planner: Planner,
    producer: Unit,
    consumer: Unit,
    edge: tuple[Operation, Operation] | None = None,
) -> str:
    """Why the units ``producer`` and ``consumer`` (joined by ``edge``) are not one kernel."""
    ops = _members(producer) + _members(consumer)
    if edge is not None:  # judge the edge's own ops first, so the reason is about them
        ops = [*edge, *(op for op in ops if op not in edge)]
    verdict = check_group(ops, planner.rules)
    if not verdict.ok:
        assert verdict.reason is not None
        return verdict.reason
    if planner.creates_cycle(producer, consumer):
        return _cycle_reason(planner, producer, consumer)
    return "the rules allow this fusion, but no pass of the pipeline made it"


def _cycle_reason(planner: Planner, producer: Unit, consumer: Unit) -> str:
    import networkx as nx

    graph = planner.graph()
    for middle in graph.successors(producer):
        if middle is not consumer and nx.has_path(graph, middle, consumer):
            op = _members(middle)[0] if isinstance(middle, Operation) else middle.anchor
            op = op or _members(middle)[0]
            return (
                f"fusing would create a cycle between kernels: the consumer also depends on "
                f"the producer through {op.name} ({where(op)})"
            )
    return "fusing would create a cycle between kernels"


def pipeline_rules(pipeline: str | None = None, target: str | None = None) -> Rules:
    """The policy the fusion passes of ``pipeline`` used (their ``rules`` and limits,
    applied for ``target``, the back end the groups were planned for).

    So that ``--remarks`` after ``fuse-epilogue{softmax_tile_limit=128}`` explains
    the decisions with the limit that made them.
    """
    from fusec.passes import build_pipeline
    from fusec.passes.fusion.driver import FusionPass
    from fusec.passes.fusion.rules import load_rules

    passes = build_pipeline(pipeline, target=target).passes
    fusion = [p for p in passes if isinstance(p, FusionPass)]
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


def format_remarks(remarks: list[Remark]) -> str:
    """The remarks as text, one per line (empty when every edge is fused)."""
    return "".join(f"{r}\n" for r in remarks)
