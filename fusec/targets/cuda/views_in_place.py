"""``read-views-in-place``: a pointwise group reads a slice of its input where it lies.

After fusion a column slice that only a pointwise group reads is a copy kernel of its
own (``ai.fused "copy"``), often behind a reshape (a ``"view"`` group): the slice of a
combined QKV projection that Llama-style RoPE reads (``combine-projections{rope=true}``,
issue 28) is copied to a buffer of its own and read back. This pass moves such a chain of
layout ops into the pointwise group instead, at the head of its body, reading the chain's
root: the pointwise kernel addresses the elements through the chain's strides
(``pointwise.input_views``) and the copy kernel goes.

A chain qualifies when every group on it is a ``copy`` or ``view`` group of slices,
reshapes and transposes only (``pointwise.VIEW_OPS``), with one input and one result that
nothing else reads, at least one of them a copy (a chain of views alone costs nothing),
its end has the shape of the pointwise group's loop (not a broadcast operand), and the
pointwise kernel can address it (each dim one stride, the last contiguous:
``pointwise.view_problem``). Cuda only (the cpu pointwise kernel reads whole buffers); in
the ``fusec-cuda`` pipeline after ``fuse``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from fusec.codegen.expr import broadcast_shapes, shape_of
from fusec.dialect import ops as ai
from fusec.targets.cuda.pointwise import VIEW_OPS, view_problem
from fusec.targets.cuda.strided import View, source_view, view_after

#: The groups a chain of layout ops may pass through: a copy kernel and a view (no kernel).
_CHAIN_KINDS = ("copy", "view")


def _layout_ops(group: ai.FusedOp) -> list[Operation] | None:
    """The body ops of ``group`` when they are a chain of ``VIEW_OPS`` from its one input to
    its one result, else None."""
    if len(group.inputs) != 1 or len(group.results) != 1 or group.kind_name not in _CHAIN_KINDS:
        return None
    body = [op for op in group.block.ops if not isinstance(op, ai.YieldOp)]
    value: SSAValue = group.block.args[0]
    for op in body:
        if not isinstance(op, VIEW_OPS) or op.operands[0] is not value:
            return None
        value = op.results[0]
    end = group.block.last_op
    return body if body and end is not None and end.operands[0] is value else None


def view_chain(value: SSAValue) -> tuple[SSAValue, list[ai.FusedOp]] | None:
    """The root and the groups (root first) of the chain of layout groups ending at
    ``value``, each read only by the next (the last by one consumer), or None."""
    groups: list[ai.FusedOp] = []
    while isinstance(value.owner, ai.FusedOp) and _layout_ops(value.owner) is not None:
        if len(list(value.uses)) != 1:
            break
        groups.insert(0, value.owner)
        value = value.owner.inputs[0]
    return (value, groups) if groups else None


def _readable(root: SSAValue, groups: list[ai.FusedOp], space: tuple[int, ...]) -> bool:
    """Whether moving the chain saves a copy and the pointwise kernel, whose loop runs over
    ``space``, can address the chain's end in ``root``'s buffer."""
    if all(group.kind_name != "copy" for group in groups):
        return False
    if shape_of(groups[-1].results[0]) != space:
        return False
    view: View | str = source_view(0, shape_of(root))
    for group in groups:
        for op in _layout_ops(group) or ():
            assert not isinstance(view, str)
            view = view_after(view, op)
            if view_problem(op, view) is not None:
                return False
    return True


def read_in_place(fused: ai.FusedOp, index: int, space: tuple[int, ...]) -> bool:
    """Move the chain of layout groups before input ``index`` of pointwise group ``fused``,
    whose loop runs over ``space``, into its body, reading the chain's root; False where
    there is none to move."""
    found = view_chain(fused.inputs[index])
    if found is None or not _readable(*found, space):
        return False
    root, groups = found
    block, old = fused.block, fused.block.args[index]
    fused.operands[index] = root
    arg = block.insert_arg(root.type, index)
    arg.name_hint = root.name_hint  # (the block reads the root now, not the view)
    value: SSAValue = arg
    clones: list[Operation] = []
    for group in groups:
        for op in _layout_ops(group) or ():
            clone = op.clone()
            clone.operands[0] = value
            clones.append(clone)
            value = clone.results[0]
    Rewriter.insert_op(clones, InsertPoint.at_start(block))
    old.replace_all_uses_with(value)
    block.erase_arg(old)
    for group in reversed(groups):  # the last first: each read only by the next
        Rewriter.erase_op(group)
    return True


@dataclass(frozen=True)
class ReadViewsInPlacePass(ModulePass):
    """Move slice/reshape/transpose chains that only a pointwise group reads into that
    group."""

    name = "read-views-in-place"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fused in [o for o in op.walk() if isinstance(o, ai.FusedOp)]:
            if fused.kind_name != "pointwise":
                continue
            values = (*fused.results, *fused.inputs)
            try:
                space = tuple(broadcast_shapes(*(shape_of(v) for v in values)))
            except ValueError:  # a group that reads inputs through views already
                continue
            for index in range(len(fused.inputs)):
                read_in_place(fused, index, space)
