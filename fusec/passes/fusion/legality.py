"""Is a set of ops one legal kernel under the rules, and if not, why not?

One function answers both the planner ("may this op join?") and the remarks
("why were these two groups not merged?"), so the reasons users read are the
reasons the planner acted on. It is the single judge: besides the rules it
asks the target the rules are applied for (``Rules.target``) whether its
template for the kind generates the group and gains by fusing it, so a plan
never asks a back end for a kernel it cannot emit, nor for a fusion that
would run slower than separate kernels.

A legal group has at most one anchor (the highest op of the pattern lattice;
no anchor means an anchorless kind such as pointwise). Every other member
either feeds the anchor (prologue) or depends on it (epilogue); an op that
does neither would be a second, unrelated loop nest in the same kernel. Each
member must match a clause of the kind for its role, with all the clause's
conditions true and its ``max`` count respected. A prologue op whose value is
also needed outside the group must be cloned into it, which its clause must
allow (``duplicate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from xdsl.ir import Operation

from fusec.passes.fusion.classify import Pattern, pattern_of, result_shape
from fusec.passes.fusion.rules import Clause, KindRules, RuleContext, Rules, clause_failure


@dataclass(frozen=True)
class Verdict:
    """The kind of a legal group, or the reason the group is illegal."""

    kind: str | None
    anchor: Operation | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def where(op: Operation) -> str:
    """``line:col`` of an op, or ``node "name"`` for an imported ONNX node, for messages
    (the remark line itself names the file)."""
    from fusec.ir.diagnostics import location_of

    loc = location_of(op)
    if loc is None:
        return "?"
    if loc.line > 0:
        return f"{loc.line}:{loc.col}"
    _, found, label = loc.file.rpartition(": node ")
    return f"node {label}" if found else "?"


def _illegal(reason: str) -> Verdict:
    return Verdict(None, None, reason)


def find_anchor(members: Sequence[Operation], rules: Rules) -> Verdict:
    """The group's anchor and kind: the one op highest in the lattice above broadcast."""
    for op in members:
        if pattern_of(op) is Pattern.OPAQUE:
            return _illegal(f"{op.name} is opaque: it fuses with nothing")
    top = max((pattern_of(op) for op in members), default=Pattern.ELEMENTWISE)
    if top < Pattern.INJECTIVE:
        kind = rules.anchorless_kind()
        if kind is None:
            return _illegal("no kind of the rules groups anchorless ops")
        return Verdict(kind.name)
    tops = [op for op in members if pattern_of(op) is top]
    noun = {Pattern.ANCHOR: "anchor", Pattern.REDUCTION: "reduction"}.get(top, "layout op")
    if len(tops) > 1 and top is Pattern.ANCHOR:
        a, b = tops[0], tops[1]
        return _illegal(
            f"{a.name} ({where(a)}) and {b.name} ({where(b)}) would both be anchors of one "
            "kernel; a kernel has one anchor, whose work is never merged or duplicated"
        )
    anchor = _layout_anchor(tops, members, rules) if top is Pattern.INJECTIVE else tops[0]
    kind = rules.kind_anchored_by(anchor)
    if kind is None:
        return _illegal(f"no kind of the rules is anchored by {anchor.name}")
    others = [op for op in tops if op is not anchor and not _has_clause(kind, op)]
    if others:
        b = others[0]
        return _illegal(
            f"{anchor.name} ({where(anchor)}) and {b.name} ({where(b)}) would both be in "
            f"one {kind.name} kernel, which has one {noun}"
        )
    return Verdict(kind.name, anchor)


def _layout_anchor(
    tops: Sequence[Operation], members: Sequence[Operation], rules: Rules
) -> Operation:
    """The anchor of a group of layout ops (a chain of index maps): the sink, the op the
    others feed, where its kind takes them (else the first member that anchors such a
    kind: a trailing reshape is a view, not a copy). Independent of the members' order
    when the sink anchors, so a group re-read from the IR gets the anchor it was built
    with (the injective stage grows chains from their sinks)."""
    memberset = set(members)

    def feeds_member(op: Operation) -> bool:
        return any(use.operation in memberset for r in op.results for use in r.uses)

    for op in sorted(tops, key=feeds_member):  # stable: sinks first, then members' order
        kind = rules.kind_anchored_by(op)
        if kind is not None and all(o is op or _has_clause(kind, o) for o in tops):
            return op
    return tops[0]


def _has_clause(kind: KindRules, op: Operation) -> bool:
    return any(c.selects(op) for c in kind.clauses if c.role != "anchor")


def _reach(start: Operation, members: set[Operation], forward: bool) -> set[Operation]:
    """Members reachable from ``start`` along users (forward) or producers."""
    seen: set[Operation] = set()
    stack = [start]
    while stack:
        op = stack.pop()
        if forward:
            nxt = [use.operation for r in op.results for use in r.uses]
        else:
            nxt = [v.owner for v in op.operands if isinstance(v.owner, Operation)]
        for other in nxt:
            if other in members and other not in seen:
                seen.add(other)
                stack.append(other)
    return seen


def roles(members: Sequence[Operation], anchor: Operation | None) -> dict[Operation, str]:
    """Each member's role: anchor, prologue, epilogue, body, or side (illegal)."""
    if anchor is None:
        return dict.fromkeys(members, "body")
    memberset = set(members)
    before = _reach(anchor, memberset, forward=False)
    after = _reach(anchor, memberset, forward=True)
    out = {}
    for op in members:
        if op is anchor:
            out[op] = "anchor"
        else:
            out[op] = "prologue" if op in before else "epilogue" if op in after else "side"
    return out


def _domain(members: Sequence[Operation], anchor: Operation | None) -> tuple[int, ...]:
    if anchor is not None:
        return result_shape(anchor)
    return max((result_shape(op) for op in members), key=prod, default=())


def outside_users(op: Operation, members: set[Operation]) -> int:
    return sum(1 for r in op.results for use in r.uses if use.operation not in members)


def check_group(members: Sequence[Operation], rules: Rules) -> Verdict:
    """The verdict on ``members`` (ops of one block) forming one kernel."""
    found = find_anchor(members, rules)
    if not found.ok:
        return found
    assert found.kind is not None
    kind = rules.kind(found.kind)
    assert kind is not None
    anchor = found.anchor
    domain = _domain(members, anchor)
    memberset = set(members)
    counts: dict[Clause, int] = {}
    for op, role in roles(members, anchor).items():
        if role == "anchor":
            continue
        if role == "side":
            assert anchor is not None  # anchorless groups have only "body" members
            return _illegal(
                f"{op.name} neither feeds nor follows the anchor {anchor.name} ({where(anchor)})"
            )
        ctx = RuleContext(op, role, kind.name, anchor, domain, rules)
        clause, reason = _match(kind, ctx)
        if clause is None:
            return _illegal(reason)
        extra = outside_users(op, memberset) if role == "prologue" else 0
        if extra and not clause.duplicate:
            return _illegal(
                f"{op.name} has {extra} consumer(s) outside the group and the rules do not "
                "let it be duplicated"
            )
        counts[clause] = counts.get(clause, 0) + 1
        if clause.max_count is not None and counts[clause] > rules.limit(clause.max_count):
            limit = rules.describe_limit(clause.max_count)
            return _illegal(
                f"a {kind.name} group takes at most {limit} {clause.describe()} {role} op(s)"
            )
    if rules.target is not None:
        refusal = rules.target.can_fuse(kind.name, members, anchor)
        if refusal is not None:
            return _illegal(refusal)
    return Verdict(kind.name, anchor)


def _match(kind: KindRules, ctx: RuleContext) -> tuple[Clause | None, str]:
    """The first clause that takes ``ctx.op`` in its role, or why none does."""
    candidates = [c for c in kind.clauses_for(ctx.role) if c.selects(ctx.op)]
    first_reason = ""
    for clause in candidates:
        reason = clause_failure(clause, ctx)
        if reason is None:
            return clause, ""
        first_reason = first_reason or reason
    if candidates:
        return None, first_reason
    return None, _no_clause(kind, ctx)


def _no_clause(kind: KindRules, ctx: RuleContext) -> str:
    clauses = kind.clauses_for(ctx.role)
    what = f"{ctx.op.name} ({pattern_of(ctx.op).label})"
    if not clauses:
        return f"a {kind.name} group takes no {ctx.role} op, so not {what}"
    takes = ", ".join(dict.fromkeys(s for c in clauses for s in c.selectors))
    return f"a {kind.name} group's {ctx.role} takes {takes}, not {what}"
