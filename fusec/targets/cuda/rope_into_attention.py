"""``rope-into-attention``: the flash kernel applies rotary position embeddings to q and k
itself (issue 28: RoPE as the attention's prologue, not a kernel of its own).

After fusion, a Llama-style layer's RoPE (``x * cos + rotate_half(x) * sin`` over q's and
k's heads; with ``combine-projections{rope=true}`` one chain over both, reading the
combined q/k/v projection's columns in place) is a pointwise group whose one result only
the attention group reads. This pass moves that group into the attention group
(``merge_groups``): the attention template's plan (``attention.template._layout_in``) then
reads x where the pointwise kernel read it, through the same layout ops, and the kernel
rotates the Q tile and each K stage in shared memory after the TMA load, reading cos and
sin at their broadcast strides (``attention.cuh``: ``attention_rope``). One kernel and
the round trip of the rotated q and k through memory go.

A group moves only where the merged group plans onto the flash kernel: the pass asks the
template's ``plan`` of the merged group built aside first (a dry run on clones), so a
group the kernel would not take stays as it was (never a fallback). Cuda only; after
``read-views-in-place`` in the ``fusec-cuda-rope-prologue`` pipeline, opt-in until
``tests/targets/cuda/test_attention_rope_gpu.py`` has passed on a GPU (then the default).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from fusec.dialect import ops as ai
from fusec.passes.fusion.outline import merge_groups


def _rope_groups(attention: ai.FusedOp) -> list[ai.FusedOp]:
    """The pointwise groups with a rotate_half whose one result only ``attention`` reads."""
    found = []
    for value in attention.inputs:
        group = value.owner
        if not (isinstance(group, ai.FusedOp) and group.kind_name == "pointwise"):
            continue
        if len(group.results) != 1 or group in found:
            continue
        if any(use.operation is not attention for use in value.uses):
            continue
        if any(isinstance(op, ai.RotateHalfOp) for op in group.block.ops):
            found.append(group)
    return found


def _plans_merged(rope: ai.FusedOp, attention: ai.FusedOp) -> bool:
    """Whether the flash kernel takes ``attention`` with ``rope`` moved in: the merge made
    on clones in a scratch block, planned, and thrown away."""
    from fusec.targets.cuda.attention.template import plan

    scratch = Block()
    rope_clone = rope.clone()
    mapping: dict[SSAValue, SSAValue] = {rope.results[0]: rope_clone.results[0]}
    attention_clone = attention.clone(value_mapper=mapping)
    # a reader of the attention's results, as the program's ops are: the merge yields them
    reader = ai.YieldOp(*attention_clone.results)
    scratch.add_ops([rope_clone, attention_clone, reader])
    try:
        merged = merge_groups(scratch, rope_clone, attention_clone)
        return not isinstance(plan(merged), str)
    finally:
        for op in reversed(list(scratch.ops)):
            Rewriter.erase_op(op, safe_erase=False)


def rope_into_attention(attention: ai.FusedOp) -> ai.FusedOp:
    """``attention`` with each RoPE group it alone reads moved in where the flash kernel
    then takes it (the new group, or ``attention`` itself)."""
    for rope in _rope_groups(attention):
        if _plans_merged(rope, attention):
            block = attention.parent_block()
            assert block is not None
            attention = merge_groups(block, rope, attention)
    return attention


@dataclass(frozen=True)
class RopeIntoAttentionPass(ModulePass):
    """Move the RoPE pointwise groups that only an attention group reads into it."""

    name = "rope-into-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        groups: list[Operation] = [o for o in op.walk() if isinstance(o, ai.FusedOp)]
        for group in groups:
            if isinstance(group, ai.FusedOp) and group.kind_name == "attention":
                rope_into_attention(group)
