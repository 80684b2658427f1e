"""cpu template for "matmul" groups, and the prologue/core/epilogue split conv reuses.

A group with a core op (ai.matmul here, ai.conv2d in ``cpu_conv``) runs as
three steps inside one ``launch``:

1. prologue: the ops the core does not depend on (an ``ai.layernorm`` of the
   A operand with its elementwise producers, or plain elementwise ops) as one
   row-reduce or pointwise stage, writing the values later steps or the
   group's results need;
2. core: numpy's BLAS (``np.matmul``, float32 sgemm) into a float32 buffer,
   or straight into the output when nothing follows;
3. epilogue: the ops depending on the core (elementwise, optionally one
   ``ai.softmax``/``ai.layernorm``) as one pointwise or row-reduce stage.

BLAS is far faster than an njit matmul on the cpu, and the fused stages save
one full pass over memory per elementwise op compared with op-by-op numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.ir import Operation, SSAValue

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import ExprGenerator, error_at, shape_of
from fusec.codegen.layout import LAYOUT_OPS, is_layout, numpy_expression
from fusec.dialect import ops as ai
from fusec.targets.cpu.common import (
    REDUCE_OPS,
    Buffers,
    Stage,
    ancestors,
    assemble,
    body_ops,
    check_elementwise,
    depends_on,
    input_names,
    outputs_of,
    scratch_lines,
    single_core,
    values_needed_after,
)
from fusec.targets.cpu.pointwise import pointwise_stage
from fusec.targets.cpu.row_reduce import row_reduce_stage, the_reduction

#: (core op, its result's array, arrays of values) -> (stages, launch lines) for the core.
CoreEmitter = Callable[[Operation, str, Buffers, str], tuple[list[Stage], list[str]]]


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "matmul", ai.MatmulOp, matmul_core)


def matmul_core(
    op: Operation, out: str, buffers: Buffers, name: str
) -> tuple[list[Stage], list[str]]:
    """``np.matmul`` on reshaped views of the flat operands, into ``out``."""
    assert isinstance(op, ai.MatmulOp)
    a, b = (buffers.reads[v] for v in op.operands)
    lines = [f"a = {a}.reshape({shape_of(op.operands[0])})"]
    if op.attr("transpose_a"):
        lines.append("a = a.swapaxes(-1, -2)")
    lines.append(f"b = {b}.reshape({shape_of(op.operands[1])})")
    if op.attr("transpose_b"):
        lines.append("b = b.swapaxes(-1, -2)")
    lines.append(f"np.matmul(a, b, out={out}.reshape({shape_of(op.results[0])}))")
    return [], lines


def generate_core_group(
    fused_op: ai.FusedOp, name: str, kind: str, core_type: type, emit_core: CoreEmitter
) -> KernelSource:
    """Prologue stage(s), core, epilogue stage (see the module docstring)."""
    ops = body_ops(fused_op)
    core = single_core(fused_op, core_type)
    views = [op for op in ops if is_layout(op)]
    late = [op for op in ops if op in depends_on(ops, core.results) and is_layout(op)]
    if late:
        raise error_at(late[0], "follows the core of its group: a layout op must come before it")
    ops = [op for op in ops if not is_layout(op)]
    before, after = _segments(ops, core)
    outputs = outputs_of(fused_op)
    yielded = [v for v, _ in outputs]
    gen = ExprGenerator()
    buffers = Buffers(reads=dict(input_names(fused_op)))
    stages: list[Stage] = []
    flat_readers = {v for op in ops if op is not core for v in op.operands} | set(yielded)
    view_core = core if core_type is ai.MatmulOp else None
    launch: list[str] = view_lines(views, buffers, view_core, flat_readers)

    def destinations(values: Sequence[SSAValue]) -> list[tuple[SSAValue, str]]:
        """Where each value goes: all its output arrays, or one new scratch buffer."""
        writes: list[tuple[SSAValue, str]] = []
        for value in values:
            arrays = [array for v, array in outputs if v == value]
            if not arrays:
                arrays = [buffers.add_scratch(value)]
            else:
                buffers.reads[value] = arrays[0]
            writes.extend((value, array) for array in arrays)
        return writes

    for i, (label, segment) in enumerate(before):
        later = [op for _, seg in before[i + 1 :] for op in seg] + [core, *after]
        writes = destinations(values_needed_after(segment, later, yielded))
        stages.append(_stage(f"{name}_{label}", gen, segment, buffers.reads, writes))
        launch.append(stages[-1].call())
    core_out = destinations([core.results[0]])[0][1]
    core_stages, core_lines = emit_core(core, core_out, buffers, name)
    stages += core_stages
    launch += core_lines
    for value, array in outputs:
        if value == core.results[0] and array != core_out:
            launch.append(f"{array}[:] = {core_out}")
    if after:
        results = {r for op in after for r in op.results}
        writes = [(v, a) for v, a in outputs if v in results]
        stages.append(_stage(f"{name}_epilogue", gen, after, buffers.reads, writes))
        launch.append(stages[-1].call())
    for value, array in outputs:  # a group input (or a view of one) yielded as it is
        if value in fused_op.block.args or isinstance(value.owner, LAYOUT_OPS):
            launch.append(f"{array}[:] = {buffers.reads[value]}")

    source = assemble(fused_op, gen, stages, scratch_lines(buffers) + launch)
    inputs, outs = io_specs(fused_op)
    return KernelSource(name, kind, "cpu", source, inputs, outs)


def view_lines(
    views: Sequence[Operation],
    buffers: Buffers,
    core: Operation | None,
    flat_readers: set[SSAValue],
) -> list[str]:
    """numpy lines computing the group's layout ops before anything else.

    The core (a matmul: ``np.matmul`` takes strided operands) reads a layout
    op's result as a numpy view, with no copy when the view is strided; the
    values in ``flat_readers`` (read by a stage's njit loop, or yielded) are
    made once into contiguous flat float32 arrays.
    """
    lines: list[str] = []
    shaped: dict[SSAValue, str] = {}
    for index, op in enumerate(views):
        args = [
            shaped[v] if v in shaped else f"{buffers.reads[v]}.reshape({shape_of(v)!r})"
            for v in op.operands
        ]
        name = f"v{index}"
        lines.append(f"{name} = {numpy_expression(op, args)}")
        result = op.results[0]
        shaped[result] = name
        feeds_core = core is not None and any(u.operation is core for u in result.uses)
        if result in flat_readers or not feeds_core:
            lines.append(f"{name}f = np.ascontiguousarray({name}, dtype=np.float32).reshape(-1)")
            buffers.reads[result] = f"{name}f"
        else:
            buffers.reads[result] = name
    return lines


def _segments(
    ops: Sequence[Operation], core: Operation
) -> tuple[list[tuple[str, list[Operation]]], list[Operation]]:
    """The stages before the core (labelled) and the ops of the epilogue stage.

    Each core operand's producers form one prologue stage (A's and B's chains
    live in different iteration spaces). The epilogue holds the ops that
    depend on the core, plus the independent ops whose shapes fit its space;
    other independent ops get a stage of their own, run first.
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
        before.insert(0, ("side", rest))
    after = [op for op in ops if op in post or op in fits]
    return before, after


def _space(values: Sequence[SSAValue]) -> tuple[int, ...] | None:
    if not values:
        return None
    return tuple(np.broadcast_shapes(*(shape_of(v) for v in values)))


def _fits(op: Operation, space: tuple[int, ...]) -> bool:
    try:
        return all(tuple(np.broadcast_shapes(space, shape_of(r))) == space for r in op.results)
    except ValueError:
        return False


def _stage(
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
