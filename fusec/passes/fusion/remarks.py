"""Why-not-fused remarks: one line per producer -> consumer edge left between kernels.

The ``fuse`` pass records, as it refuses each candidate, the reason
(``Planner.rejections``: the verdict of ``legality.check_group``, the single
judge, or the cycle the merge would close). When it packs the groups it
reports a remark for every edge crossing from one unit (an ``ai.fused``
group, or an op in none) to another, with the reason recorded for that edge;
an edge the pass never judged gets the verdict on the union of its two units
under the same rules and target (for a pipeline of single-stage passes, whose
earlier stages ran in an earlier pass), else "allowed, but no stage made it".

Reports go to whoever collects them (``collect()``, as an MLIR diagnostic
handler would): ``fusec.api.compile`` does, so ``CompiledModule.remarks()``
are the pass's own. ``fusion_remarks(module)`` explains an already fused IR
the same way, after the fact.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from fusec.dialect.ops import AiOp
from fusec.errors import SourceLocation
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
    #: The reason is a decision the pass took (not a judgement after the fact).
    decided: bool = field(default=False, compare=False)

    @property
    def edge(self) -> tuple[SourceLocation | None, str, str, str]:
        return (self.location, self.consumer, self.producer, self.producer_at)

    def __str__(self) -> str:
        where_ = f"{self.location}: " if self.location is not None else ""
        return (
            f"{where_}remark: {self.consumer} not fused with its producer "
            f"{self.producer} ({self.producer_at}): {self.reason}"
        )


def functions(module: ModuleOp) -> Iterator[func.FuncOp]:
    """Each single-block function of ``module``."""
    for op in module.walk():
        if isinstance(op, func.FuncOp) and len(op.body.blocks) == 1:
            yield op


def fusion_remarks(module: ModuleOp, rules: Rules | None = None) -> list[Remark]:
    """The remarks of every function of an already fused ``module`` (left unchanged)."""
    rules = rules or default_rules()
    flat = module.clone()
    found: list[Remark] = []
    for fn in functions(flat):
        block = fn.body.block
        found += cut_edge_remarks(Planner(block, rules, unpack(block)))
    return found


def cut_edge_remarks(planner: Planner) -> list[Remark]:
    """A remark for every edge between two units of ``planner``, in program order, with
    the reason recorded when the merge was refused (else judged now)."""
    from fusec.ir.diagnostics import location_of

    found = []
    for producer, consumer in _cut_edges(planner):
        reason = planner.rejections.get((producer, consumer))
        decided = reason is not None
        if reason is None:
            units = planner.unit(producer), planner.unit(consumer)
            reason = why_not_fused(planner, *units, edge=(producer, consumer))
        reason += _not_attention(producer, consumer)
        location = location_of(consumer)
        found.append(
            Remark(location, consumer.name, producer.name, where(producer), reason, decided)
        )
    return found


# ------------------------------------------------------------- the collector

_SINK: ContextVar[dict[str, list[Remark]] | None] = ContextVar("fusec_remarks", default=None)


@contextmanager
def collect() -> Iterator[dict[str, list[Remark]]]:
    """Collect the remarks the fusion passes report while the block runs: function
    name -> its remarks, as the last fusion pass to run on it left them."""
    sink: dict[str, list[Remark]] = {}
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def collecting() -> bool:
    """Whether someone collects remarks (otherwise the pass need not compute them)."""
    return _SINK.get() is not None


def report(function: str, found: list[Remark]) -> None:
    """The remarks of ``function`` after a fusion pass, replacing an earlier pass's; an
    edge this pass did not judge keeps the decision an earlier pass took on it."""
    sink = _SINK.get()
    if sink is None:
        return
    earlier = {r.edge: r for r in sink.get(function, ()) if r.decided}
    sink[function] = [r if r.decided else earlier.get(r.edge, r) for r in found]


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


def _not_attention(producer: Operation, consumer: Operation) -> str:
    """On the edge from the probabilities (a softmax, or its NaN guard) to the matmul
    ending the chain: why recognize-patterns did not make it ``ai.attention``."""
    from fusec.dialect.ops import SoftmaxOp, WhereOp
    from fusec.passes.recognize_attention import attention_chain

    if not isinstance(producer, SoftmaxOp | WhereOp):
        return ""
    why = attention_chain(consumer)
    return f"; not recognised as ai.attention: {why}" if isinstance(why, str) else ""


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
        return planner.cycle_reason(producer, consumer)
    return "the rules allow this fusion, but no stage of the pipeline made it"
