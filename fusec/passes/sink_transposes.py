"""``sink-transposes``: a transpose moves below the elementwise ops that read it, towards
an ``ai.attention`` that reads its operands through strides (issue 28).

Llama-style models split Q and K into heads (``[B, S, H, D] -> [B, H, S, D]``) *before*
RoPE, ``q * cos + rotate_half(q) * sin`` with ``cos``/``sin`` of shape ``[1, 1, S, D]``
broadcast over the heads. The elementwise RoPE cannot read the transpose in place, so
the head split was a copy kernel for Q and one for K in every layer, while the flash
attention after it reads a head split through strides. Elementwise ops commute with a
permutation of their operands' axes when every operand is permuted alike::

    op(transpose(x, p), c)  ==  transpose(op(x, c'), p)     c' = c permuted by p^-1

where ``c`` broadcasts to the result (``cos``: ``[1, 1, S, D]`` -> ``[1, S, 1, D]``, a
reshape, as only its size-1 axes move; a constant of another order is transposed at
compile time). ``ai.rotate_half`` commutes with a permutation that keeps the last axis.
So RoPE runs on ``[B, S, H, D]`` rows as the projection wrote them and the transpose
reaches the attention, which reads it as strides: one copy fewer per rotated operand.

The pass moves a transpose only where that removes it from the elementwise chain: every
reader of the transpose is such an op (so the transpose dies, none is duplicated), its
result is the op's full shape (no broadcast of the transposed operand: the moved
transpose is no larger), and the chain's result reaches only ``ai.attention`` operands
(q, key, v) through elementwise ops and layout ops, which the attention kernels read.
The rewrite is exact: the same elements, the same arithmetic. Target-independent; it
runs before fusion in every pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.rewriter import InsertPoint

from fusec.dialect import ops as ai
from fusec.dialect.ops.elementwise import BinaryOp, UnaryOp
from fusec.dialect.views import at_function_level, feeds_attention
from fusec.ir.constants import dense_constant
from fusec.passes.matching import constant, shape

#: Layout ops between the chain and an attention operand (the kernels read through them).
_VIEWS = (ai.ReshapeOp, ai.TransposeOp, ai.SliceOp, ai.ExpandOp, ai.GatherOp)


def _elementwise(op: Operation) -> TypeGuard[ai.AiOp]:
    """An op computing each result element from the operands' elements at the same
    (broadcast) index, or ``ai.rotate_half`` (along the last axis), at function level."""
    if not at_function_level(op):
        return False
    return isinstance(op, BinaryOp | UnaryOp | ai.WhereOp | ai.RotateHalfOp) and not (
        isinstance(op, ai.CastOp)
    )


def _commutes(op: Operation, perm: tuple[int, ...]) -> bool:
    """``op`` commutes with the axis permutation ``perm`` of its operands."""
    return not isinstance(op, ai.RotateHalfOp) or perm[-1] == len(perm) - 1


def _through(user: Operation) -> bool:
    """An op a moved transpose's chain may pass on its way to attention operands."""
    return (_elementwise(user) or isinstance(user, _VIEWS)) and at_function_level(user)


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(perm)
    for k, axis in enumerate(perm):
        inverse[axis] = k
    return tuple(inverse)


@dataclass
class _Broadcast:
    """How an operand that broadcasts to the result reads after the move: the same value
    reshaped to ``new_shape``, or a constant transposed at compile time."""

    value: SSAValue
    new_shape: tuple[int, ...]
    folded: object | None  # the transposed numpy array of a constant, else None


def _broadcast_operand(value: SSAValue, perm: tuple[int, ...]) -> _Broadcast | None:
    """``value`` (broadcast to a rank-``len(perm)`` result) permuted by ``perm``^-1, as a
    reshape (only its size-1 axes move) or a folded constant; None when neither."""
    rank = len(perm)
    dims = shape(value)
    if len(dims) > rank:
        return None
    padded = (1,) * (rank - len(dims)) + tuple(dims)
    # the moved op's operand c' with transpose(c', perm) == padded
    inverse = _inverse(perm)
    new_shape = tuple(padded[inverse[axis]] for axis in range(rank))
    kept = [padded[k] for k in range(rank) if padded[k] != 1]
    moved = [new_shape[a] for a in range(rank) if new_shape[a] != 1]
    order = [perm[k] for k in range(rank) if padded[k] != 1]
    if kept == moved and order == sorted(order):
        return _Broadcast(value, new_shape, None)
    array = constant(value)
    if array is None:
        return None
    import numpy as np

    return _Broadcast(value, new_shape, np.transpose(array.reshape(padded), inverse))


class SinkTransposeBelowElementwise(RewritePattern):
    """``op(transpose(x, p), c...)`` -> ``transpose(op(x, c'...), p)`` on a chain that
    ends at attention operands (see the module docstring)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not _elementwise(op):
            return
        result_shape = shape(op.results[0])
        perm: tuple[int, ...] | None = None
        transposes: list[ai.TransposeOp] = []
        for operand in op.operands:
            owner = operand.owner
            if isinstance(owner, ai.TransposeOp) and at_function_level(owner):
                if shape(operand) != result_shape:
                    return  # a broadcast transposed operand: the moved one would be larger
                p = tuple(owner.attr("perm"))
                if perm is not None and p != perm:
                    return
                perm = p
                transposes.append(owner)
        if perm is None or not _commutes(op, perm):
            return
        for transpose in transposes:  # every reader moves too: no transpose is duplicated
            for use in transpose.output.uses:
                if not _elementwise(use.operation) or not _commutes(use.operation, perm):
                    return
        if not feeds_attention(op.results[0], _through):
            return
        new_ops: list[Operation] = []
        operands: list[SSAValue] = []
        for operand in op.operands:
            owner = operand.owner
            if isinstance(owner, ai.TransposeOp) and owner in transposes:
                operands.append(owner.operands[0])
                continue
            broadcast = _broadcast_operand(operand, perm)
            if broadcast is None:
                return
            operands.append(self._read(broadcast, new_ops))
        moved = type(op)(*operands, **op.attr_values())
        back = ai.TransposeOp(moved.results[0], perm=perm)
        for created in (*new_ops, moved, back):
            created.location = op.location
        rewriter.insert([*new_ops, moved, back], InsertPoint.before(op))
        rewriter.replace(op, [], [back.output])
        for transpose in transposes:
            if not list(transpose.output.uses) and transpose.parent is not None:
                rewriter.erase(transpose)

    @staticmethod
    def _read(broadcast: _Broadcast, new_ops: list[Operation]) -> SSAValue:
        value = broadcast.value
        if broadcast.folded is not None:
            import numpy as np

            from fusec.dialect.ops import spec_of

            folded = dense_constant(np.asarray(broadcast.folded), spec_of(value.type).dtype)
            new_ops.append(folded)
            return folded.results[0]
        if shape(value) == broadcast.new_shape:
            return value
        reshaped = ai.ReshapeOp(value, shape=broadcast.new_shape)
        new_ops.append(reshaped)
        return reshaped.output


@dataclass(frozen=True)
class SinkTransposesPass(ModulePass):
    """Move transposes below elementwise chains that end at attention operands."""

    name = "sink-transposes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(SinkTransposeBelowElementwise()).rewrite_module(op)
