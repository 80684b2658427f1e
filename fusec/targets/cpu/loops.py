"""The pointwise loop of the cpu kernel layer: elementwise ops over their iteration space.

The loop runs over the broadcast of every value's shape (the iteration
space). Adjacent dims that every array treats alike (all full or all
broadcast) are merged first, so a plain chain over 2^24 elements is one flat
loop and a channel bias over NCHW is a 3-deep nest. The last merged dim is the
inner loop (contiguous, vectorisable loads); the outer dims, and chunks of the
inner one when there are few outer rows, are spread over threads by
``numba.prange``. The pointwise template is this loop alone; the other templates
run it for the stages that do not fit their own loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.ir import Operation, SSAValue

from fusec.codegen.expr import (
    ExprGenerator,
    block_axis_dims,
    block_axis_shapes,
    block_leaves,
    block_offset,
    broadcast_offset,
    broadcast_shapes,
    coalesce,
    error_at,
    leaf_shapes,
    shape_of,
)
from fusec.dialect import ops as ai
from fusec.targets.cpu.common import (
    PARALLEL_MIN_ELEMENTS,
    Stage,
    body_ops,
    check_elementwise,
    fmt_shape,
    input_names,
    outputs_of,
)
from fusec.targets.cpu.rows import row_count

#: Aim for this many parallel tasks, each at least MIN_CHUNK elements long.
TASKS = 64
MIN_CHUNK = 2048


def elementwise_stage(
    fused_op: ai.FusedOp, name: str, gen: ExprGenerator, allowed: tuple[type, ...] = ()
) -> Stage:
    """The pointwise loop of a group of elementwise ops (or of ``allowed`` types; else a
    located error): stage ``<name>_pointwise`` reading the group's inputs, storing its
    results."""
    ops = body_ops(fused_op)
    check_elementwise(ops, allowed)
    return pointwise_stage(
        f"{name}_pointwise", gen, ops, input_names(fused_op), outputs_of(fused_op)
    )


def pointwise_stage(
    fn_name: str,
    gen: ExprGenerator,
    ops: Sequence[Operation],
    reads: dict[SSAValue, str],
    writes: Sequence[tuple[SSAValue, str]],
) -> Stage:
    """A parallel loop computing ``ops`` and storing each ``writes`` value to its array.

    ``reads`` names the array of every value the ops use but do not define
    (and of written values that are not computed here).
    """
    leaves = leaf_shapes(ops)
    for value, _ in writes:
        if value not in leaves and value not in {r for op in ops for r in op.results}:
            leaves[value] = shape_of(value)
    shapes = [shape_of(r) for op in ops for r in op.results] + [shape_of(v) for v, _ in writes]
    try:
        space = broadcast_shapes(*shapes, *leaves.values())
    except ValueError:
        culprit = ops[0] if ops else writes[0][0].owner
        assert isinstance(culprit, Operation)
        raise error_at(
            culprit,
            "is in a group whose values have no common broadcast shape (one loop cannot "
            "compute them)",
        ) from None
    leaf_list = list(leaves)
    # A per-block scale (issue 31) is read at index // block along its axis: that axis
    # stays a dim of its own (a shape full along it alone keeps it from merging).
    blocks = block_leaves(ops)
    isolate = block_axis_shapes(space, leaves, blocks)
    # An ai.rotate_half reads its (full) operand at j + n/2 or j - n/2 along the last
    # axis: that axis stays the inner loop of its own.
    rotations = [op for op in ops if isinstance(op, ai.RotateHalfOp)]
    for op in rotations:
        if shape_of(op.input) != tuple(space):
            raise error_at(
                op, f"reads an operand of another shape than the loop's {fmt_shape(space)}"
            )
    if rotations:
        isolate.append((1,) * (len(space) - 1) + (space[-1],))
    merged, merged_shapes = coalesce(
        space, [leaves[v] for v in leaf_list] + [shape_of(v) for v, _ in writes] + isolate
    )
    leaf_merged = dict(zip(leaf_list, merged_shapes[: len(leaf_list)], strict=True))
    write_merged = merged_shapes[len(leaf_list) : len(leaf_list) + len(writes)]
    isolated = merged_shapes[len(leaf_list) + len(writes) :][: len(blocks)]
    block_dims = dict(zip(blocks, block_axis_dims(isolated), strict=True))

    index = [f"i{d}" for d in range(len(merged) - 1)] + ["j"]
    body, inner = loop_header(merged, gen)

    # Offsets are unsigned (``U``, the prelude's uint64): a signed index makes Numba check
    # for a negative one (wraparound) at every access, and inside a ``prange`` body LLVM
    # cannot prove it away, so the loop stayed scalar: EfficientNet-B0's SE scale
    # (1x144x32x32, one thread) took 189 us a call, 18 us with unsigned offsets.
    def leaf(value: SSAValue) -> str:
        if value in blocks:
            offset = block_offset(
                merged, leaf_merged[value], index, block_dims[value], blocks[value][1]
            )
            return f"{reads[value]}[U({offset})]"
        return f"{reads[value]}[U({broadcast_offset(merged, leaf_merged[value], index)})]"

    def rotated(value: SSAValue) -> tuple[str, str]:
        offset = broadcast_offset(merged, leaf_merged[value], [*index[:-1], "jr"])
        return f"{reads[value]}[U({offset})]", f"j < {space[-1] // 2}"

    stmts, names = gen.chain(ops, leaf, rotated)
    if rotations:
        half = space[-1] // 2
        assert merged[-1] == space[-1]
        stmts.insert(0, f"jr = j + {half} if j < {half} else j - {half}")
    for (value, array), shape in zip(writes, write_merged, strict=True):
        expr = names[value] if value in names else leaf(value)
        stmts.append(f"{array}[U({broadcast_offset(merged, shape, index)})] = {expr}")
    body.extend(f"{inner}{s}" for s in stmts)
    params = _params([reads[v] for v in leaf_list if v in reads], [a for _, a in writes])
    parallel = math.prod(space) >= PARALLEL_MIN_ELEMENTS
    comment = f"pointwise over {fmt_shape(space)}"
    return Stage(fn_name, params, body, comment=comment, parallel=parallel)


def loop_header(space: Sequence[int], gen: ExprGenerator) -> tuple[list[str], str]:
    """Loop nest lines over a merged space (index vars i0.. and j) and the inner indent; a
    whole short inner row runs over ``rows.row_count``'s opaque count."""
    outer = math.prod(space[:-1])
    inner = space[-1]
    chunks = 1
    if outer < TASKS:
        chunks = max(1, min(math.ceil(TASKS / outer), inner // MIN_CHUNK))
    chunk = math.ceil(inner / chunks)
    lines = [f"for task in numba.prange({outer * chunks}):"]
    row = "task"
    if chunks > 1:
        lines.append(f"    row = task // {chunks}")
        lines.append(f"    j0 = task % {chunks} * {chunk}")
        lines.append(f"    j1 = min(j0 + {chunk}, {inner})")
        row, bounds = "row", "j0, j1"
    else:
        bounds = row_count(gen, inner, f"{inner}")
    stride = outer
    for d in range(len(space) - 1):
        stride //= space[d]
        expr = row if stride == 1 else f"{row} // {stride}"
        if d > 0:
            expr = f"{expr} % {space[d]}"
        lines.append(f"    i{d} = {expr}")
    lines.append(f"    for j in range({bounds}):")
    return lines, "        "


def _params(reads: Sequence[str], writes: Sequence[str]) -> list[str]:
    params: list[str] = []
    for name in [*reads, *writes]:
        if name not in params:
            params.append(name)
    return params
