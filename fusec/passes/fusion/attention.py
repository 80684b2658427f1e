"""The ``attention`` stage of ``fuse``: attention chains become one ``ai.fused "attention"``.

The chain, as fusec graphs write it (``examples/attention.mlir``)::

    %s = ai.matmul %q, %k {transpose_b = true}   // [..., Sq, D] x [..., Sk, D]
    %t = ai.mul %s, %c        (or ai.div; optional; %c one value)
    %u = ai.add %t, %mask     (optional; %mask a causal constant, see below)
    %p = ai.softmax %u        (over the last axis)
    %o = ai.matmul %p, %v                        // [..., Sk, Dv]

with every intermediate used only by the next op, so no scores need to exist
outside the kernel, and Q, K, V with the same batch dims. A flash-style kernel
computes the whole chain with the S x S scores in registers.

A mask is recognised only when it is an ``arith.constant`` that is causal:
0 on and below the diagonal and -inf (or at most -1e4, which underflows to
the same result) above it; the group then carries ``fusec.causal``. Any other
add stops the match (the ops then fuse as two matmul kernels).

This is a pattern rather than a clause of ``default.rules``: the rules give a
kernel one anchor, and attention has two (its matmuls). It is the first stage
of the planner; the rule-driven stages leave an ``attention`` group alone (it
is nobody's seed, and no rule kind accepts two anchors). A chain becomes a
group only when the target the plan is for has an ``attention`` template that
takes it (``Target.can_fuse``); without a target, or on one without the
template, its ops fuse as two matmul kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, UnitAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.facts import CAUSAL_ATTR
from fusec.dialect.ops import spec_of
from fusec.passes.fusion.outline import Group

if TYPE_CHECKING:
    from fusec.target import Target

KIND = "attention"
#: a mask entry at most this is "masked": exp(-1e4 + anything the scores reach) is 0 in f32
MASKED = -1.0e4


def _single_use(value: SSAValue) -> bool:
    return value.has_one_use()


OpT = TypeVar("OpT", bound=Operation)


def _owner(value: SSAValue, kind: type[OpT]) -> OpT | None:
    owner = value.owner
    return owner if isinstance(owner, kind) else None


def _is_scalar(value: SSAValue) -> bool:
    return all(d == 1 for d in spec_of(value.type).shape)


def _causal_constant(value: SSAValue, rows: int, cols: int) -> bool:
    """``value`` is an arith.constant mask: 0 where key <= query, <= MASKED above."""
    const = _owner(value, arith.ConstantOp)
    if const is None or not isinstance(const.value, DenseIntOrFPElementsAttr):
        return False
    shape = spec_of(value.type).shape
    if len(shape) < 2 or tuple(shape[-2:]) != (rows, cols) or any(d != 1 for d in shape[:-2]):
        return False
    data = const.value.get_values()
    if len(data) == 1:  # a splat of a full tensor
        return False
    mask = np.asarray(data, dtype=np.float64).reshape(rows, cols)
    above = np.triu(np.ones((rows, cols), dtype=bool), k=1)
    return bool(np.all(mask[~above] == 0) and np.all(mask[above] <= MASKED))


def match(out_matmul: ai.MatmulOp) -> tuple[list[Operation], bool] | None:
    """The chain ending at ``out_matmul`` (members in program order, causal) or None."""
    if out_matmul.attr("transpose_a") or out_matmul.attr("transpose_b"):
        return None
    softmax = _owner(out_matmul.lhs, ai.SoftmaxOp)
    if softmax is None or not _single_use(out_matmul.lhs):
        return None
    rank = len(spec_of(softmax.results[0].type).shape)
    if softmax.attr("axis") % rank != rank - 1:
        return None
    members: list[Operation] = [softmax, out_matmul]
    causal = False
    value = softmax.input
    add = _owner(value, ai.AddOp)
    if add is not None and _single_use(value):
        rows, cols = spec_of(value.type).shape[-2:]
        if not _causal_constant(add.rhs, rows, cols):
            return None
        members.insert(0, add)
        causal = True
        value = add.lhs
    scale: ai.BinaryOp | None = _owner(value, ai.MulOp) or _owner(value, ai.DivOp)
    if scale is not None and _single_use(value) and _is_scalar(scale.rhs):
        members.insert(0, scale)
        value = scale.lhs
    scores = _owner(value, ai.MatmulOp)
    if scores is None or not _single_use(value):
        return None
    if scores.attr("transpose_a") or not scores.attr("transpose_b"):
        return None
    q, k, v = (spec_of(x.type) for x in (scores.lhs, scores.rhs, out_matmul.rhs))
    if len({len(q.shape), len(k.shape), len(v.shape)}) != 1 or len(q.shape) < 2:
        return None
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]) or k.shape[-2] != v.shape[-2]:
        return None
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        return None
    return [scores, *members], causal


def attention_groups(block: Block, grouped: set[Operation], target: Target | None) -> list[Group]:
    """New groups for the attention chains of ``block`` (ops of ``grouped`` excluded)."""
    if target is None or KIND not in target.templates:
        return []
    groups = []
    taken = set(grouped)
    for candidate in list(block.ops):
        if not isinstance(candidate, ai.MatmulOp) or candidate in taken:
            continue
        found = match(candidate)
        if found is None or any(m in taken for m in found[0]):
            continue
        members, causal = found
        if target.can_fuse(KIND, members, candidate) is not None:
            continue
        attrs: dict[str, Attribute] = {CAUSAL_ATTR: UnitAttr()} if causal else {}
        groups.append(Group(KIND, members, attrs, anchor=candidate))
        taken.update(members)
    return groups
