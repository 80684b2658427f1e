"""The fusion planner: which ops of a function run together in one kernel.

The algorithm
=============

Like TVM's FuseOps, the planner works on the dataflow DAG of one function
body and on a lattice of fusion patterns (``classify.py``): elementwise <
broadcast < injective < reduction < anchor < opaque. Each op of a group is
classified relative to the group's *anchor*, the one member highest in that
lattice (a conv2d or matmul; a LayerNorm or softmax when there is none of
those; nothing for a pure elementwise group): ops that feed it are its
*prologue*, ops that consume it its *epilogue*. Which ops may take which role
in which kind of kernel, and under which size limits, is not written here: it
is data (``default.rules``), and ``legality.check_group`` is the single judge
of whether a set of ops is a legal kernel.

Groups are grown greedily from anchors, in program order (the injective
stage: reversed), one stage after the other (``STAGE_ORDER``; the ``fuse``
pass runs them all on one planner):

1. ``prologue``: every conv2d/matmul looks at the producers of its
   operands. A LayerNorm feeding a matmul's A operand joins it; because the
   normalisation happens as A is loaded, and A is read by that matmul anyway,
   the LayerNorm is *cloned* into every matmul that reads it (the rules mark
   it ``duplicate``) instead of being written to memory once and read back.
2. ``epilogue``: every conv2d/matmul absorbs its consumers while they
   are elementwise/broadcast ops over the anchor's output shape (bias, residual
   add, activations, casts) and, for a matmul, one softmax over the last axis
   whose row fits in one tile. Absorbing a consumer *moves* it; if an absorbed
   value is also used outside, the group gets several results
   (a multi-output group) rather than recomputing anything.
3. ``reduction``: every LayerNorm/softmax left over grows a row-reduce
   group: its cheap elementwise producers are cloned in (each row-reduce
   consumer recomputes them, so the value need not be written out) and its
   elementwise consumers are moved in.
4. ``elementwise``: the remaining elementwise/broadcast ops are merged
   with their neighbours into pointwise kernels over one iteration space.
5. ``injective``: the layout ops left (transposes, reshapes, slices, gathers,
   concats: views no anchor took) join the copy kernel at the end of their
   chain. Groups grow from their *sinks*, seeded in reverse program order, and
   only upwards (prologue): every member feeds the sink, so a chain of index
   maps is one kernel with one result, reading its root once (the head split
   ``slice -> reshape -> transpose`` of a fused QKV projection is one copy, not
   two with a view between). A layout op also read elsewhere is cloned into
   the chain (the rules mark it ``duplicate``): the chain then reads the root
   directly, which costs no more than reading the op's own buffer.
6. ``singletons``: any op still alone (a seed of an earlier stage that
   found nothing to absorb stays free) becomes a one-op kernel, so every ai op
   ends up in exactly one ``ai.fused``.

Three invariants hold throughout:

* An anchor's work is never duplicated: only clauses marked ``duplicate`` may
  clone an op, and the rules loader refuses ``duplicate`` on an anchor. A
  group has one anchor, so two anchors never merge either. (A layout op cloned
  into a copy chain is a prologue there: the chain reads through it, no
  arithmetic is repeated.)
* The graph of groups stays acyclic. The planner keeps the networkx quotient
  graph of the function (one node per group or free op, an edge per
  producer -> consumer pair) and, before two units merge, rejects the merge if
  one reaches the other through a third unit: contracting them would close a
  cycle (the kernel would need its own output as input). The search visits
  only units ranked between the two in a topological order, so it stays local
  on large graphs; and where the use lists alone prove there is no third unit on
  a path between them (a plain chain), the graph is not built at all. Cloning
  a producer cannot create a cycle: the consumer group already depended on
  everything the producer depends on. Packing
  sorts the groups topologically and fails loudly on a cycle.
* A group never computes the same value twice: a producer reached along two
  paths of a prologue (a diamond) is cloned once, and an op that joins later
  reads the group's clone rather than the original.

Each stage is idempotent: groups are grown to a fixed point (a stage loops
until no candidate joins), and re-packing an untouched group rebuilds it
identically (``outline.py``), so a second run finds nothing to do. Every
refused merge is recorded with its reason as it is refused (``rejections``),
which is what the remarks report.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.ir import Block, Operation, OpResult

from fusec.dialect.ops import AiOp
from fusec.passes.fusion.classify import Pattern, pattern_of
from fusec.passes.fusion.legality import check_group, find_anchor, roles, where
from fusec.passes.fusion.outline import Group
from fusec.passes.fusion.rules import Rules

if TYPE_CHECKING:
    import networkx as nx

Unit = Group | Operation
"""A node of the quotient graph: a group, or an op that belongs to none."""


@dataclass(frozen=True)
class Stage:
    """What one pass grows: groups anchored by ``anchor`` ops, in ``roles``; seeded in
    reverse program order when ``sinks_first`` (a stage growing upwards only: the last op
    of a chain must seed it, or its producers would seed groups of their own first)."""

    name: str
    anchor: Pattern | None
    roles: frozenset[str]
    sinks_first: bool = False


STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage("prologue", Pattern.ANCHOR, frozenset({"prologue"})),
        Stage("epilogue", Pattern.ANCHOR, frozenset({"epilogue"})),
        Stage("reduction", Pattern.REDUCTION, frozenset({"prologue", "epilogue"})),
        Stage("elementwise", None, frozenset({"body"})),
        Stage("injective", Pattern.INJECTIVE, frozenset({"prologue"}), sinks_first=True),
    )
}
"""The growth stages (see the module docstring); ``singletons`` is the last stage."""

#: Every stage, in the order ``fuse`` runs them; ``fuse-<stage>`` runs one alone.
STAGE_ORDER: tuple[str, ...] = (*STAGES, "singletons")


@dataclass(frozen=True)
class Candidate:
    """Ops that may join a group: moved (a free op or a whole group) or cloned."""

    unit: Unit
    clone: bool = False

    @property
    def ops(self) -> list[Operation]:
        return list(self.unit.members) if isinstance(self.unit, Group) else [self.unit]


class Planner:
    """Groups of one flat function body, the quotient graph, and the growth loop."""

    def __init__(self, block: Block, rules: Rules, groups: list[Group]) -> None:
        self.block = block
        self.rules = rules
        self.groups = list(groups)
        self.group_of: dict[Operation, Group] = {m: g for g in groups for m in g.members}
        self._cloned: list[Operation] = []
        self._graph: nx.DiGraph | None = None
        self._rank: dict[Unit, int] | None = None
        self._topo: list[Unit | None] | None = None  # units by rank; None marks a hole
        self._order: dict[Operation, int] | None = None
        #: Why each producer -> consumer edge was refused when a merge across it was
        #: last judged (the verdict's reason, or the cycle it would close).
        self.rejections: dict[tuple[Operation, Operation], str] = {}
        for group in self.groups:
            if group.anchor is None:
                group.anchor = find_anchor(group.members, rules).anchor

    # ------------------------------------------------------------- the graph
    def unit(self, op: Operation) -> Unit:
        return self.group_of.get(op, op)

    def position(self, op: Operation) -> int:
        if self._order is None:
            self._order = {o: i for i, o in enumerate(self.block.ops)}
        return self._order[op]

    def graph(self) -> nx.DiGraph:
        """The quotient graph: units as nodes, an edge per producer -> consumer unit."""
        if self._graph is None:
            import networkx as nx  # on first use: ~0.25 s, which a plain chain never pays

            graph = nx.DiGraph()
            for op in self.block.ops:
                node = self.unit(op)
                graph.add_node(node)
                for value in op.operands:
                    owner = value.owner
                    if isinstance(owner, Operation) and owner.parent is self.block:
                        source = self.unit(owner)
                        if source is not node:
                            graph.add_edge(source, node)
            self._graph = graph
        return self._graph

    def creates_cycle(self, a: Unit, b: Unit) -> bool:
        """Would merging units ``a`` and ``b`` make the quotient graph cyclic?

        Contracting two nodes of a DAG creates a cycle exactly when one reaches
        the other by a path through some third node. The search only visits
        nodes ranked (in a topological order of the graph) before its target:
        no path to the target can pass through a later one, so a check near
        the frontier of a large graph stays local.
        """
        if self._cannot_reach_around(a, b) and self._cannot_reach_around(b, a):
            return False
        return self._reaches_around(a, b) or self._reaches_around(b, a)

    def _cannot_reach_around(self, source: Unit, target: Unit) -> bool:
        """A local proof that no path leads from ``source`` to ``target`` through a third unit.

        True when ``source`` feeds no unit but ``target``, when nothing but ``source``
        feeds ``target``, or when ``target`` feeds ``source`` (a path back would close a
        cycle in what is a DAG). Read from the IR's use lists, so a chain's merges are
        judged without building the quotient graph (or importing networkx) at all.
        """
        consumers = self._consumer_units(source)
        if consumers <= {target}:
            return True
        return self._producer_units(target) <= {source} or source in self._consumer_units(target)

    def _unit_ops(self, unit: Unit) -> list[Operation]:
        return list(unit.members) if isinstance(unit, Group) else [unit]

    def _consumer_units(self, unit: Unit) -> set[Unit]:
        ops = self._unit_ops(unit)
        users = {use.operation for op in ops for res in op.results for use in res.uses}
        return {self.unit(u) for u in users if u.parent is self.block} - {unit}

    def _producer_units(self, unit: Unit) -> set[Unit]:
        owners = {v.owner for op in self._unit_ops(unit) for v in op.operands}
        return {
            self.unit(o) for o in owners if isinstance(o, Operation) and o.parent is self.block
        } - {unit}

    def _reaches_around(self, source: Unit, target: Unit) -> bool:
        graph, rank = self.graph(), self.ranks()
        limit = rank[target]
        stack = [s for s in graph.successors(source) if s is not target and rank[s] < limit]
        seen = set(stack)
        while stack:
            for nxt in graph.successors(stack.pop()):
                if nxt is target:
                    return True
                if nxt not in seen and rank[nxt] < limit:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    def ranks(self) -> dict[Unit, int]:
        """Each unit's index in a topological order of the quotient graph."""
        if self._rank is None:
            import networkx as nx

            order: list[Unit] = list(nx.topological_sort(self.graph()))
            self._topo = list(order)
            self._rank = {u: i for i, u in enumerate(order)}
        return self._rank

    def _changed(self) -> None:
        """Ops were added or erased: recompute positions and the graph when next needed."""
        self._graph = None
        self._rank = None
        self._topo = None
        self._order = None

    def _contract(self, keep: Unit, gone: Unit) -> None:
        """``gone`` merged into ``keep``: update the cached graph and order in place."""
        if self._graph is None:
            self._rank = None
            return
        if self._rank is not None:
            self._reorder_window(keep, gone)
        import networkx as nx  # already loaded: the graph exists

        nx.contracted_nodes(self._graph, keep, gone, self_loops=False, copy=False)

    def _reorder_window(self, keep: Unit, gone: Unit) -> None:
        """Keep the topological order valid when ``gone`` merges into ``keep``.

        Only the window of the order between the two changes (a Pearce-Kelly
        style local repair instead of re-sorting the whole graph on every
        join): the window's ancestors of its last unit go first, then the
        merged unit, then the rest, in their old order. This is valid because
        the merge passed ``creates_cycle``: no unit in the window is both a
        descendant of the first and an ancestor of the last. ``gone``'s slot
        becomes a hole, so no rank outside the window moves.
        """
        assert self._rank is not None and self._topo is not None and self._graph is not None
        rank, topo = self._rank, self._topo
        lo, hi = sorted((rank[keep], rank[gone]))
        last = topo[hi]
        before: set[Unit] = set()
        stack = [last]
        while stack:
            for pred in self._graph.predecessors(stack.pop()):
                if pred not in before and lo < rank[pred] < hi:
                    before.add(pred)
                    stack.append(pred)
        middle = [u for u in topo[lo + 1 : hi] if u is not None]
        window: list[Unit | None] = [u for u in middle if u in before]
        window.append(keep)
        window += [u for u in middle if u not in before]
        window += [None] * (hi - lo + 1 - len(window))
        topo[lo : hi + 1] = window
        del rank[gone]
        for i, unit in enumerate(window, start=lo):
            if unit is not None:
                rank[unit] = i

    def _relabel(self, old: Unit, new: Unit) -> None:
        if self._graph is not None:
            import networkx as nx  # already loaded: the graph exists

            nx.relabel_nodes(self._graph, {old: new}, copy=False)
        if self._rank is not None and self._topo is not None:
            self._rank[new] = self._rank.pop(old)
            self._topo[self._rank[new]] = new

    # ------------------------------------------------------------- the stages
    def run_stage(self, name: str) -> None:
        """Run the stage ``name`` of ``STAGE_ORDER`` on the current groups."""
        if name == "singletons":
            self.wrap_singletons()
        else:
            self.run(STAGES[name])
        self.erase_dead_originals()

    def wrap_singletons(self) -> None:
        """Give every ai op that is in no group a one-op group of its own kind."""
        for op in list(self.block.ops):
            if isinstance(op, AiOp) and op not in self.group_of:
                verdict = check_group([op], self.rules)
                if verdict.ok and verdict.kind is not None:
                    group = Group(verdict.kind, [op], anchor=verdict.anchor)
                    self.groups.append(group)
                    self.group_of[op] = group
        self._changed()

    def run(self, stage: Stage) -> None:
        """Grow groups of ``stage`` until nothing more joins."""
        while self._round(stage):
            pass

    def _round(self, stage: Stage) -> bool:
        grew = False
        for seed in self._seeds(stage):
            group = self._group_for(seed)
            if group is None:
                continue
            tentative = group not in self.groups
            if tentative:
                self._add_group(group)
            if self._grow(group, stage):
                grew = True
            elif tentative:
                self._remove_group(group)
        return grew

    def _seeds(self, stage: Stage) -> list[Operation]:
        """Anchors (or, for anchorless kinds, body ops) in program order (reversed for a
        ``sinks_first`` stage)."""
        seeds: list[Operation] = []
        ops = list(self.block.ops)
        for op in reversed(ops) if stage.sinks_first else ops:
            group = self.group_of.get(op)
            if group is not None:
                leads = op is (group.anchor or group.members[0])
                if leads and self._group_in_stage(group, stage):
                    seeds.append(op)
            elif isinstance(op, AiOp) and self._seed_pattern_ok(op, stage):
                seeds.append(op)
        return seeds

    def _group_in_stage(self, group: Group, stage: Stage) -> bool:
        if group.anchor is None:
            anchorless = self.rules.anchorless_kind()
            return stage.anchor is None and anchorless is not None and group.kind == anchorless.name
        return pattern_of(group.anchor) == stage.anchor

    def _seed_pattern_ok(self, op: Operation, stage: Stage) -> bool:
        if stage.anchor is None:
            return pattern_of(op) < Pattern.REDUCTION and check_group([op], self.rules).ok
        return pattern_of(op) == stage.anchor and self.rules.kind_anchored_by(op) is not None

    def _group_for(self, seed: Operation) -> Group | None:
        """The seed's group, or a new tentative one-op group (None if it has left)."""
        if seed.parent is not self.block:
            return None
        if seed in self.group_of:
            return self.group_of[seed]
        verdict = check_group([seed], self.rules)
        if not verdict.ok or verdict.kind is None:
            return None
        return Group(verdict.kind, [seed], anchor=verdict.anchor)

    def _add_group(self, group: Group) -> None:
        """Register a new one-op group (a seed): its op's node becomes the group's."""
        (op,) = group.members
        self.groups.append(group)
        self.group_of[op] = group
        self._relabel(op, group)

    def _remove_group(self, group: Group) -> None:
        """Dissolve a seed group that did not grow."""
        (op,) = group.members
        self.groups.remove(group)
        del self.group_of[op]
        self._relabel(group, op)

    # ------------------------------------------------------------- growing
    def _grow(self, group: Group, stage: Stage) -> bool:
        grew = False
        while any(self._try_join(group, c, stage) for c in self._candidates(group, stage)):
            grew = True
        return grew

    def _candidates(self, group: Group, stage: Stage) -> Iterator[Candidate]:
        """Neighbouring units, nearest in program order first, each once."""
        members = set(group.members)
        seen: set[int] = set()
        found: list[tuple[int, Candidate]] = []
        moving = stage.roles & {"epilogue", "body"}
        for op in group.members:
            if moving:
                for res in op.results:
                    for use in res.uses:
                        self._consider(use.operation, members, False, seen, found)
            if stage.roles & {"prologue", "body"}:
                for value in op.operands:
                    owner = value.owner
                    if isinstance(owner, Operation):
                        clone = "prologue" in stage.roles
                        self._consider(owner, members, clone, seen, found)
        found.sort(key=lambda item: item[0])
        for _, candidate in found:
            yield candidate

    def _consider(self, op, members, clone, seen, found) -> None:
        if op in members or op.parent is not self.block or not isinstance(op, AiOp):
            return
        unit = self.unit(op)
        if id(unit) in seen:
            return
        if isinstance(unit, Group):
            anchorless = self.rules.anchorless_kind()
            if clone or anchorless is None or unit.kind != anchorless.name:
                return
        seen.add(id(unit))
        found.append((self.position(op), Candidate(unit, clone)))

    def _try_join(self, group: Group, cand: Candidate, stage: Stage) -> bool:
        """Add ``cand`` to ``group`` if the rules allow it and no cycle appears."""
        if isinstance(cand.unit, Operation) and cand.unit.parent is not self.block:
            return False
        members = group.members + cand.ops
        verdict = check_group(members, self.rules)
        if not verdict.ok:
            assert verdict.reason is not None
            self._reject(group, cand, verdict.reason)
            return False
        if verdict.kind != group.kind:
            return False
        member_roles = roles(members, verdict.anchor)
        if any(member_roles[op] not in stage.roles for op in cand.ops):
            return False
        if cand.clone:
            assert isinstance(cand.unit, Operation)  # only single ops are cloned
            self._clone_in(group, cand.unit)
            self._changed()
        else:
            if self.creates_cycle(group, cand.unit):
                self._reject(group, cand, self.cycle_reason(group, cand.unit))
                return False
            self._move_in(group, cand)
        group.anchor = verdict.anchor
        return True

    def _reject(self, group: Group, cand: Candidate, reason: str) -> None:
        """Record ``reason`` on every producer -> consumer edge between the two units."""
        ours, theirs = set(group.members), set(cand.ops)
        for side, other in ((ours, theirs), (theirs, ours)):
            for producer in side:
                for res in producer.results:
                    for use in res.uses:
                        if use.operation in other:
                            self.rejections[(producer, use.operation)] = reason

    def cycle_reason(self, producer: Unit, consumer: Unit) -> str:
        """Why merging the units closes a cycle: the unit on the path between them."""
        import networkx as nx

        graph = self.graph()
        for a, b in ((producer, consumer), (consumer, producer)):
            for middle in graph.successors(a) if a in graph else ():
                if middle is not b and nx.has_path(graph, middle, b):
                    op = middle.anchor or middle.members[0] if isinstance(middle, Group) else middle
                    return (
                        "fusing would create a cycle between kernels: the consumer also "
                        f"depends on the producer through {op.name} ({where(op)})"
                    )
        return "fusing would create a cycle between kernels"

    def _move_in(self, group: Group, cand: Candidate) -> None:
        if isinstance(cand.unit, Group):
            self.groups.remove(cand.unit)
        for op in cand.ops:
            group.members.append(op)
            self.group_of[op] = group
        self._contract(group, cand.unit)
        if self._reuse_clones(group, cand.ops):
            self._changed()

    def _clone_in(self, group: Group, producer: Operation) -> None:
        """Put ``producer`` in ``group``: moved if only the group uses it, else cloned."""
        members = set(group.members)
        uses = [u for r in producer.results for u in r.uses]
        twin = next((m for m in group.members if _same_computation(m, producer)), None)
        if twin is not None:  # the group already computes it (a diamond in the prologue)
            _redirect(producer, twin, members)
            _erase_if_dead(producer)
            return
        if all(u.operation in members for u in uses):
            group.members.append(producer)
            self.group_of[producer] = group
            return
        copy = producer.clone()
        self._cloned.append(producer)
        self.block.insert_op_after(copy, producer)
        _redirect(producer, copy, members)
        group.members.append(copy)
        self.group_of[copy] = group

    def _reuse_clones(self, group: Group, new_ops: list[Operation]) -> bool:
        """Let ops that just joined read the group's clone of a producer, not the original.

        Returns whether any operand was redirected.
        """
        redirected = False
        for op in new_ops:
            for index, value in enumerate(op.operands):
                owner = value.owner
                if not isinstance(owner, Operation) or owner in self.group_of:
                    continue
                twin = next((m for m in group.members if _same_computation(m, owner)), None)
                if twin is not None:
                    assert isinstance(value, OpResult)
                    op.operands[index] = twin.results[value.index]
                    _erase_if_dead(owner)
                    redirected = True
        return redirected

    def erase_dead_originals(self) -> None:
        """Drop the originals of cloned producers that no one uses any more."""
        for op in reversed(self._cloned):
            if op not in self.group_of:
                _erase_if_dead(op)
        self._cloned.clear()
        self._changed()


def _same_computation(a: Operation, b: Operation) -> bool:
    """Same op, same operands, same properties: one may stand for the other."""
    return (
        a is not b
        and a.name == b.name
        and tuple(a.operands) == tuple(b.operands)
        and a.properties == b.properties
        and [r.type for r in a.results] == [r.type for r in b.results]
    )


def _redirect(old: Operation, new: Operation, users: set[Operation]) -> None:
    """Make the ``users`` of ``old``'s results read ``new``'s instead."""
    for old_res, new_res in zip(old.results, new.results, strict=True):
        for use in list(old_res.uses):
            if use.operation in users:
                use.operation.operands[use.index] = new_res


def _erase_if_dead(op: Operation) -> None:
    if op.parent is not None and all(not r.uses for r in op.results):
        op.parent.erase_op(op)
