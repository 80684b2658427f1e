"""cpu template for "reduce" groups: numpy's reduction over the axes, then the epilogue.

The core is ``np.mean``/``np.sum``/``np.max`` over the shaped input (float32
with numpy's pairwise summation), written straight into the output or a
scratch buffer, followed by the fused elementwise epilogue as one pointwise
stage: a whole-tensor library call, so not the blocked kernel (``blocked``)
(the prologues and epilogue are split the same way, into stages of their own).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.ir import Operation

from fusec.codegen import CompiledEntry, KernelSource, ScratchPlan, io_specs
from fusec.codegen.expr import ExprGenerator, shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu import abi
from fusec.targets.cpu.common import (
    Buffers,
    Stage,
    assemble,
    input_names,
    outputs_of,
    scratch_lines,
)
from fusec.targets.cpu.entry import EntryScratch, copy_lines
from fusec.targets.cpu.entry import passthrough_lines as entry_passthrough
from fusec.targets.cpu.entry import view_lines as entry_view_lines
from fusec.targets.cpu.segments import (
    core_segments,
    destinations,
    full_stage,
    passthrough_lines,
    stages_before,
    view_lines,
)

_NUMPY = {"mean": "np.mean", "sum": "np.sum", "max": "np.max"}
#: Max reductions over trailing axes of at most this many elements a row run in
#: ``reduce_rows`` (compiled) instead of numpy, whose per-row cost dominates short rows
#: (sums and means over trailing axes run there at any length: ``reduce_core``):
#: MobileNetV2's global pool, 32x1280 rows of 4, took 0.74 ms in np.mean.
SHORT_ROWS = 256
_KINDS = {"sum": 0, "mean": 1, "max": 2}


def generate(fused_op, name: str) -> KernelSource:
    """Prologue stage(s), the numpy reduction, the epilogue stage."""
    return library_group(fused_op, name, "reduce", ai.ReduceOp, reduce_core)


#: (core op, its result's array, arrays of values) -> the launch lines computing it.
CoreLines = Callable[[Operation, str, Buffers], list[str]]


def library_group(
    fused_op: ai.FusedOp, name: str, kind: str, core_type: type, core_lines: CoreLines
) -> KernelSource:
    """A group whose core is whole-tensor library calls (numpy): full-size stages for
    its prologues, the core, one stage for its elementwise epilogue."""
    core, views, _, (before, after) = core_segments(fused_op, core_type)
    outputs = outputs_of(fused_op)
    gen = ExprGenerator(fast_exp=True)
    buffers = Buffers(reads=dict(input_names(fused_op)))
    stages: list[Stage] = []
    scratch = EntryScratch()
    entry = entry_view_lines(views, buffers.reads, scratch)
    launch, view_bytes = view_lines(views, buffers)

    stages += stages_before(name, gen, before, [core, *after], outputs, buffers)
    launch += [stage.call() for stage in stages]
    core_out = destinations([core.results[0]], outputs, buffers)[0][1]
    computed = core_lines(core, core_out, buffers)
    launch += computed
    if entry is not None:  # only reduce_rows is compiled: numpy's reductions are not
        compiled = all(line.startswith("reduce_rows(") for line in computed)
        entry = entry + [stage.call() for stage in stages] + computed if compiled else None
    for k, (value, array) in enumerate(outputs):
        if value == core.results[0] and array != core_out:
            launch.append(f"{array}[:] = {core_out}")
            if entry is not None:
                size = math.prod(shape_of(value))
                entry += copy_lines(array, core_out, (size,), f"r{k}_")
    if after:
        results = {r for op in after for r in op.results}
        writes = [(v, a) for v, a in outputs if v in results]
        stages.append(full_stage(f"{name}_epilogue", gen, after, buffers.reads, writes))
        launch.append(stages[-1].call())
        if entry is not None:
            entry.append(stages[-1].call())
    launch += passthrough_lines(fused_op, outputs, buffers)
    if entry is not None:
        entry = scratch.scratch_lines(buffers.scratch) + entry
        entry += entry_passthrough(fused_op, outputs, buffers.reads)

    uses = any("reduce_rows(" in line for line in launch)
    imports = [abi.import_line("reduce_rows")] if uses else []
    source = assemble(
        fused_op, gen, stages, scratch_lines(buffers) + launch, imports=imports, entry_body=entry
    )
    inputs, outs = io_specs(fused_op)
    plan = ScratchPlan(full_bytes=4 * sum(n for _, n in buffers.scratch) + view_bytes)
    compiled_entry = CompiledEntry(fixed_floats=scratch.floats) if entry is not None else None
    return KernelSource(
        name, kind, "cpu", source, inputs, outs, scratch=plan, compiled_entry=compiled_entry
    )


def reduce_core(op: Operation, out: str, buffers: Buffers) -> list[str]:
    """The reduction of ``op`` into ``out``: ``reduce_rows`` when it reduces trailing
    axes (a max: rows of at most ``SHORT_ROWS`` elements), else numpy's. Long sums and
    means run in ``reduce_rows`` too: vectorised float64 sums, compiled (so inside the
    compiled launcher), where numpy's float32 ``np.mean`` is a Python call; a 96 x 4096
    global pool, 1 thread, us (least CPU time): np.mean ~74, reduce_rows' float64 chain
    143-212 before it was vectorised."""
    assert isinstance(op, ai.ReduceOp)
    x = buffers.reads[op.operands[0]]
    axes = tuple(int(a) for a in op.reduced_axes())
    keep = shape_of(op.input)
    kept = tuple(1 if d in axes else n for d, n in enumerate(keep))
    inner = math.prod(keep[len(keep) - len(axes) :]) if axes else 0
    trailing = axes == tuple(range(len(keep) - len(axes), len(keep)))
    if axes and trailing and (0 < inner <= SHORT_ROWS or (inner > 0 and op.KIND != "max")):
        rows = math.prod(keep) // max(1, inner)
        return [f"reduce_rows({x}, {out}, {rows}, {inner}, {_KINDS[op.KIND]})"]
    return [
        f"{_NUMPY[op.KIND]}({x}.reshape({keep!r}), axis={axes!r}, keepdims=True, "
        f"out={out}.reshape({kept!r}))"
    ]
