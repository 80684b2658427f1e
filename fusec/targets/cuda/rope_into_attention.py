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

GPT-NeoX rotates the first R of each head's dims only (``concat(rope(x[..., :R]),
x[..., R:])``): the concat is a copy group reading the RoPE group, and both move in (the
kernel rotates the first R dims, ``AttentionSpec.rotary``). Its q, k and v are slices of
one per-head split of the projection, which leaves v's split a copy group of layout ops
alone: such a copy, read by the attention group alone, moves in too (the kernel reads v
through the strides, as it reads a head split in its own group).

A group moves only where the merged group plans onto the flash kernel: the pass asks the
template's ``plan`` of the merged group built aside first (a dry run on clones), so a
group the kernel would not take stays as it was (never a fallback). Cuda only; after
``read-views-in-place`` in ``fusec-cuda-rope-prologue``, not in ``fusec-cuda``, the default:
measured on the zoo's Llama (128 queries) it is no faster than the RoPE kernel, and slower
with more query blocks (``benchmarks/results/models-gpu.md``);
``tests/targets/cuda/test_attention_rope_gpu.py`` runs the kernel.
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
from fusec.passes.matching import ATTENTION_VIEWS


def _read_by_alone(value: SSAValue, reader: Operation) -> ai.FusedOp | None:
    """The group making ``value`` when it has that one result and ``reader`` alone reads
    it, else None."""
    group = value.owner
    if not isinstance(group, ai.FusedOp) or len(group.results) != 1:
        return None
    return group if all(use.operation is reader for use in value.uses) else None


def _is_rope(group: ai.FusedOp) -> bool:
    return group.kind_name == "pointwise" and any(
        isinstance(op, ai.RotateHalfOp) for op in group.block.ops
    )


def _is_view(group: ai.FusedOp) -> bool:
    """A copy group of layout ops the attention kernel addresses through strides."""
    return group.kind_name == "copy" and all(
        isinstance(op, ATTENTION_VIEWS) for op in group.block.ops if not isinstance(op, ai.YieldOp)
    )


def _rope_chains(attention: ai.FusedOp) -> list[list[ai.FusedOp]]:
    """The groups to move into ``attention``, each chain's groups read by the next alone:
    a RoPE pointwise group it alone reads (``[rope]``), or a copy group it alone reads
    whose concat puts a RoPE group's rotated part before the passed-through one (GPT-NeoX's
    partial rotary: ``[rope, copy]``)."""
    found: list[list[ai.FusedOp]] = []
    for value in dict.fromkeys(attention.inputs):
        group = _read_by_alone(value, attention)
        if group is None:
            continue
        if _is_rope(group) or _is_view(group):
            found.append([group])
        elif group.kind_name == "copy" and any(
            isinstance(op, ai.ConcatOp) for op in group.block.ops
        ):
            ropes = [_read_by_alone(v, group) for v in dict.fromkeys(group.inputs)]
            found += [[rope, group] for rope in ropes if rope is not None and _is_rope(rope)][:1]
    return found


def _merged(block: Block, chain: list[ai.FusedOp], attention: ai.FusedOp) -> ai.FusedOp:
    """``chain``'s groups and ``attention`` merged in ``block``, in order."""
    merged = chain[0]
    for group in [*chain[1:], attention]:
        merged = merge_groups(block, merged, group)
    return merged


def _plans_merged(chain: list[ai.FusedOp], attention: ai.FusedOp, max_query_blocks: int) -> bool:
    """Whether the flash kernel takes ``attention`` with ``chain`` moved in, rotating k
    for at most ``max_query_blocks`` query blocks (0: any number): the merge made on
    clones in a scratch block, planned, and thrown away."""
    from fusec.targets.cuda.attention.template import plan

    scratch = Block()
    mapping: dict[SSAValue, SSAValue] = {}
    clones = []
    for group in [*chain, attention]:
        clone = group.clone(value_mapper=mapping)
        mapping[group.results[0]] = clone.results[0]
        clones.append(clone)
    # a reader of the attention's results, as the program's ops are: the merge yields them
    reader = ai.YieldOp(*clones[-1].results)
    scratch.add_ops([*clones, reader])
    try:
        planned = plan(_merged(scratch, clones[:-1], clones[-1]))
        if isinstance(planned, str):
            return False
        spec = planned[0]
        rotates_k = any(role == "k" for role, _, _ in spec.rope)
        return not (rotates_k and 0 < max_query_blocks < spec.q_blocks)
    finally:
        for op in reversed(list(scratch.ops)):
            Rewriter.erase_op(op, safe_erase=False)


def rope_into_attention(attention: ai.FusedOp, max_query_blocks: int = 0) -> ai.FusedOp:
    """``attention`` with each RoPE group it alone reads (``_rope_chains``) moved in where
    the flash kernel then takes it (``max_query_blocks``: ``RopeIntoAttentionPass``'s; the
    new group, or ``attention`` itself)."""
    for chain in _rope_chains(attention):
        if _plans_merged(chain, attention, max_query_blocks):
            block = attention.parent_block()
            assert block is not None
            attention = _merged(block, chain, attention)
    return attention


@dataclass(frozen=True)
class RopeIntoAttentionPass(ModulePass):
    """Move the RoPE pointwise groups that only an attention group reads into it.

    ``max_query_blocks`` (0: no limit): move a RoPE of k only where the attention has at
    most this many query blocks of 128 rows a (batch, head). The kernel rotates each K
    tile once per query block, so at one block it does the RoPE kernel's work without
    its launch and round trip through memory, and at more it repeats that work (measured:
    1.18x the RoPE kernel and attention at 4 blocks, 1.77x at 32)."""

    name = "rope-into-attention"

    max_query_blocks: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        groups: list[Operation] = [o for o in op.walk() if isinstance(o, ai.FusedOp)]
        for group in groups:
            if isinstance(group, ai.FusedOp) and group.kind_name == "attention":
                rope_into_attention(group, self.max_query_blocks)
