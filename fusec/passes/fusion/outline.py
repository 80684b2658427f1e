"""Moving ops into and out of ``ai.fused`` regions (the IR side of fusion).

Every fusion pass works on a *flat* function body: ``unpack`` inlines each
``ai.fused`` back into the function, remembering its members and kind, the
planner regroups the flat ops, and ``pack`` outlines every group again. Packing
is a pure function of the members and their block order, so a group a pass
did not touch is rebuilt exactly as it was (the passes are idempotent).

Outlining a group: its inputs are the values its members use but do not
define (in order of first use), its results the member values used outside
(in block order). The members are cloned into the new body with inputs mapped
to block arguments, the uses outside are redirected to the ``ai.fused``
results, and the originals are erased. A stable topological sort of the block
then puts every group after the producers of its inputs, and the constants go
first, in the order of their first use: where a constant was written (or traced)
does not change the packed IR.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from fusec.dialect.ops import FusedOp, YieldOp
from fusec.errors import FusecError
from fusec.ir.constants import is_constant


@dataclass(eq=False)
class Group:
    """One planned kernel: its kind and member ops (in the flat function body).

    Compared and hashed by identity: groups are nodes of the planner's graph.
    """

    kind: str
    members: list[Operation]
    attributes: dict[str, Attribute] = field(default_factory=dict)
    anchor: Operation | None = None


def unpack(block: Block) -> list[Group]:
    """Inline every ``ai.fused`` of ``block``; return the groups they were."""
    groups = []
    for op in list(block.ops):
        if isinstance(op, FusedOp):
            groups.append(_inline(op))
    return groups


def _inline(fused: FusedOp) -> Group:
    body = fused.block
    term = body.last_op
    assert isinstance(term, YieldOp)
    # A yielded block argument (a group input passed straight through) is that input.
    args: dict[SSAValue, SSAValue] = dict(zip(body.args, fused.inputs, strict=True))
    yielded = [args.get(v, v) for v in term.operands]
    Rewriter.erase_op(term)
    members = list(body.ops)
    Rewriter.inline_block(body, InsertPoint.before(fused), list(fused.inputs))
    for res, value in zip(fused.results, yielded, strict=True):
        res.replace_all_uses_with(value)
    attrs = dict(fused.attributes)
    Rewriter.erase_op(fused)
    return Group(fused.kind_name, members, attrs)


def pack(block: Block, groups: Sequence[Group]) -> list[FusedOp]:
    """Outline each group of ``block`` into an ``ai.fused``; sort the block."""
    order = {op: i for i, op in enumerate(block.ops)}
    fused = [_outline(g, order) for g in groups if g.members]
    topo_sort(block)
    place_constants(block)
    return fused


def merge_groups(block: Block, first: FusedOp, second: FusedOp) -> FusedOp:
    """Outline the members of ``first`` and ``second`` (both of ``block``) as one group of
    ``second``'s kind and attributes (a target pass joining two kernels); sort the block."""
    one, two = _inline(first), _inline(second)
    return pack(block, [Group(two.kind, one.members + two.members, two.attributes)])[0]


def place_constants(block: Block) -> None:
    """Move the constants of ``block`` to its start, in the order of their first use:
    the first op using them, then the operand (unused ones after them, in block
    order)."""
    constants = [op for op in block.ops if is_constant(op)]
    if not constants:
        return
    first_use: dict[Operation, tuple[int, int]] = {}
    for position, op in enumerate(block.ops):
        for index, value in enumerate(op.operands):
            owner = value.owner
            if is_constant(owner) and owner.parent is block:
                first_use.setdefault(owner, (position, index))
    unused = (len(block.ops), 0)
    ordered = sorted(constants, key=lambda c: first_use.get(c, unused))  # stable
    if ordered == list(block.ops)[: len(ordered)]:
        return
    for op in ordered:
        op.detach()
    if block.first_op is None:
        block.add_ops(ordered)
    else:
        block.insert_ops_before(ordered, block.first_op)


def _outline(group: Group, order: Mapping[Operation, int]) -> FusedOp:
    members = sorted(group.members, key=order.__getitem__)
    memberset = set(members)
    inputs: list[SSAValue] = []
    for op in members:
        for value in op.operands:
            if value.owner not in memberset and value not in inputs:
                inputs.append(value)
    outputs = [
        r for op in members for r in op.results if any(u.operation not in memberset for u in r.uses)
    ]
    body = Block(arg_types=[v.type for v in inputs])
    mapper: dict[SSAValue, SSAValue] = {}
    for value, arg in zip(inputs, body.args, strict=True):
        arg.name_hint = value.name_hint
        mapper[value] = arg
    for op in members:
        body.add_op(op.clone(value_mapper=mapper))
    body.add_op(YieldOp(*(mapper[r] for r in outputs)))
    if not all(isinstance(r.type, TensorType) for r in outputs):
        raise FusecError(f"fusion group of kind '{group.kind}' yields a non-tensor value")
    fused = FusedOp(group.kind, inputs, [r.type for r in outputs], Region(body), group.attributes)
    fused.location = (group.anchor or members[0]).location
    for old, new in zip(outputs, fused.results, strict=True):
        new.name_hint = old.name_hint
    Rewriter.insert_op(fused, InsertPoint.before(members[0]))
    for old, new in zip(outputs, fused.results, strict=True):
        old.replace_all_uses_with(new)
    for op in reversed(members):
        Rewriter.erase_op(op)
    return fused


def retyped_group(
    group: FusedOp,
    inputs: Sequence[SSAValue],
    retype: Callable[[Attribute], Attribute],
    attributes: Mapping[str, Attribute],
) -> FusedOp:
    """A new ``ai.fused`` of ``group``'s kind on ``inputs`` (one for each of its block
    arguments): its body's ops cloned in order, each result's type (and the group's) given
    by ``retype`` of the old one, name hints kept, with ``attributes``. Not inserted: the
    caller places it (a layout pass computing a pointwise group on relaid values)."""
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = {}
    for new, old in zip(block.args, group.block.args, strict=True):
        new.name_hint = old.name_hint
        mapping[old] = new
    for op in group.block.ops:
        operands = [mapping[v] for v in op.operands]
        if isinstance(op, YieldOp):
            block.add_op(YieldOp(*operands))
            continue
        clone = op.create(
            operands=operands,
            result_types=[retype(r.type) for r in op.results],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        block.add_op(clone)
        for old, new in zip(op.results, clone.results, strict=True):
            new.name_hint = old.name_hint
            mapping[old] = new
    result_types = [retype(r.type) for r in group.results]
    return FusedOp(group.kind_name, list(inputs), result_types, Region(block), dict(attributes))


def _deps(op: Operation, block: Block) -> set[Operation]:
    """Ops of ``block`` whose results ``op`` (or anything nested in it) uses."""
    out = set()
    for inner in op.walk():
        for value in inner.operands:
            owner: Operation | Block | None = value.owner
            while isinstance(owner, Operation) and owner.parent is not block:
                owner = owner.parent_op()
            if isinstance(owner, Operation) and owner is not op:
                out.add(owner)
    return out


def topo_sort(block: Block) -> None:
    """Order ``block`` so every op follows its producers, keeping the order otherwise.

    Kahn's algorithm, always taking the earliest ready op, so an already valid
    order is left exactly as it is. Raises if the ops form a cycle.
    """
    ops = list(block.ops)
    term = ops.pop() if ops and ops[-1].has_trait(_terminator()) else None
    index = {op: i for i, op in enumerate(ops)}
    deps = {op: {d for d in _deps(op, block) if d in index} for op in ops}
    users: dict[Operation, list[Operation]] = {op: [] for op in ops}
    for op, ds in deps.items():
        for d in ds:
            users[d].append(op)
    waiting = {op: len(ds) for op, ds in deps.items()}
    ready = [index[op] for op in ops if waiting[op] == 0]
    heapq.heapify(ready)
    result = []
    while ready:
        op = ops[heapq.heappop(ready)]
        result.append(op)
        for user in users[op]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, index[user])
    if len(result) != len(ops):
        raise AssertionError("fusion produced a cycle between groups")
    if result == ops:
        return
    for op in ops:
        op.detach()
    if term is not None:
        block.insert_ops_before(result, term)
    else:
        block.add_ops(result)


def _terminator():
    from xdsl.traits import IsTerminator

    return IsTerminator
