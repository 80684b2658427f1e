"""How a core group splits, for the cpu kernel layer: the group's layout ops (computed
first by numpy, ``view_lines``), the core op, the stages before it (each operand's
producers, and independent ops that fit nowhere else) and its epilogue
(``core_segments``); and the full-size stage of a segment (``full_stage``: the row
loop around a layernorm/softmax, else the pointwise loop). The blocked kernel and the
reduce template's library calls share them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.ir import Operation, SSAValue

from fusec.codegen.expr import ExprGenerator, broadcast_shapes, error_at, shape_of
from fusec.codegen.layout import LAYOUT_OPS, is_layout, numpy_expression
from fusec.dialect import ops as ai
from fusec.targets.cpu.common import (
    REDUCE_OPS,
    Buffers,
    Stage,
    ancestors,
    body_ops,
    check_elementwise,
    depends_on,
    single_core,
    values_needed_after,
)
from fusec.targets.cpu.loops import pointwise_stage
from fusec.targets.cpu.rows import row_reduce_stage, the_reduction


def core_segments(
    fused_op: ai.FusedOp, core_type: type, core: Operation | None = None
) -> tuple[
    Operation,
    list[Operation],
    list[Operation],
    tuple[list[tuple[str, list[Operation]]], list[Operation]],
]:
    """A core group's core op, its layout ops (views, which must come before the core),
    its other ops, and those split into the stages before the core and the epilogue
    (``split_segments``); ``core``: the core op when the group holds more than one op of
    ``core_type`` (the others are then in its prologue)."""
    ops = body_ops(fused_op)
    core = core if core is not None else single_core(fused_op, core_type)
    views = [op for op in ops if is_layout(op)]
    late = [op for op in views if op in depends_on(ops, core.results)]
    if late:
        raise error_at(late[0], "follows the core of its group: a layout op must come before it")
    ops = [op for op in ops if not is_layout(op)]
    return core, views, ops, split_segments(ops, core)


def split_segments(
    ops: Sequence[Operation], core: Operation
) -> tuple[list[tuple[str, list[Operation]]], list[Operation]]:
    """The stages before the core (labelled) and the ops of the epilogue.

    Each core operand's producers form one prologue (A's and B's chains live in
    different iteration spaces). The epilogue holds the ops that depend on the
    core, plus the independent ops whose shapes fit its space; other independent
    ops get a stage of their own, run after the prologues that run in full.
    """
    before: list[tuple[str, list[Operation]]] = []
    done: set[Operation] = set()
    for i, operand in enumerate(core.operands):
        chain = ancestors(ops, [operand]) - done
        if chain:
            before.append((f"prologue{i}", [op for op in ops if op in chain]))
            done |= chain
    post = depends_on(ops, core.results)
    side = [op for op in ops if op is not core and op not in done and op not in post]
    space = _space([r for op in ops if op in post for r in op.results])
    fits = [op for op in side if space is not None and _fits(op, space)]
    rest = [op for op in side if op not in fits]
    if rest:
        before.append(("side", rest))
    after = [op for op in ops if op in post or op in fits]
    return before, after


def _space(values: Sequence[SSAValue]) -> tuple[int, ...] | None:
    if not values:
        return None
    return broadcast_shapes(*(shape_of(v) for v in values))


def _fits(op: Operation, space: tuple[int, ...]) -> bool:
    try:
        return all(broadcast_shapes(space, shape_of(r)) == space for r in op.results)
    except ValueError:
        return False


def full_stage(
    fn_name: str,
    gen: ExprGenerator,
    ops: Sequence[Operation],
    reads: dict[SSAValue, str],
    writes: list[tuple[SSAValue, str]],
) -> Stage:
    """A row-reduce stage when ``ops`` hold a layernorm/softmax, else a pointwise one."""
    if any(isinstance(op, REDUCE_OPS) for op in ops):
        reduce_op = the_reduction(ops[0], ops)
        return row_reduce_stage(fn_name, gen, ops, reduce_op, reads, writes)
    check_elementwise(ops)
    if not writes:
        raise error_at(ops[0], "computes a value nothing uses")
    return pointwise_stage(fn_name, gen, ops, reads, writes)


def view_lines(views: Sequence[Operation], buffers: Buffers) -> tuple[list[str], int]:
    """numpy lines computing the group's layout ops first, and the bytes they allocate.

    Every result becomes a contiguous flat float32 array (the njit loops index
    flat arrays, and sgemm takes row-major operands): a copy of the operand's
    size where the layout op is a strided view.
    """
    lines: list[str] = []
    shaped: dict[SSAValue, str] = {}
    allocated = 0
    for index, op in enumerate(views):
        args = [
            shaped[v] if v in shaped else f"{buffers.reads[v]}.reshape({shape_of(v)!r})"
            for v in op.operands
        ]
        name = f"v{index}"
        lines.append(f"{name} = {numpy_expression(op, args)}")
        lines.append(f"{name}f = np.ascontiguousarray({name}, dtype=np.float32).reshape(-1)")
        result = op.results[0]
        shaped[result] = name
        buffers.reads[result] = f"{name}f"
        allocated += 4 * math.prod(shape_of(result))
    return lines, allocated


def destinations(
    values: Sequence[SSAValue], outputs: Sequence[tuple[SSAValue, str]], buffers: Buffers
) -> list[tuple[SSAValue, str]]:
    """Where each value goes: all its output arrays (later stages read the first), or one
    new full-size scratch buffer."""
    writes: list[tuple[SSAValue, str]] = []
    for value in values:
        arrays = [array for v, array in outputs if v == value]
        if not arrays:
            arrays = [buffers.add_scratch(value)]
        else:
            buffers.reads[value] = arrays[0]
        writes.extend((value, array) for array in arrays)
    return writes


def stages_before(
    name: str,
    gen: ExprGenerator,
    before: Sequence[tuple[str, list[Operation]]],
    later_ops: Sequence[Operation],
    outputs: Sequence[tuple[SSAValue, str]],
    buffers: Buffers,
) -> list[Stage]:
    """The full-size stage of each segment that runs before the core (``split_segments``),
    in order: each writes what the segments after it, ``later_ops`` (the core and what
    follows it) or the group's results read."""
    yielded = [v for v, _ in outputs]
    stages: list[Stage] = []
    for i, (label, segment) in enumerate(before):
        later = [op for _, seg in before[i + 1 :] for op in seg] + list(later_ops)
        writes = destinations(values_needed_after(segment, later, yielded), outputs, buffers)
        stages.append(full_stage(f"{name}_{label}", gen, segment, buffers.reads, writes))
    return stages


def passthrough_lines(
    fused_op: ai.FusedOp, outputs: Sequence[tuple[SSAValue, str]], buffers: Buffers
) -> list[str]:
    """Copies into the outputs that yield a group input (or a view of one) as it is."""
    return [
        f"{array}[:] = {buffers.reads[value]}"
        for value, array in outputs
        if value in fused_op.block.args or isinstance(value.owner, LAYOUT_OPS)
    ]
