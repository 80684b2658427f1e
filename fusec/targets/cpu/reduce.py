"""cpu template for "reduce" groups: numpy's reduction over the axes, then the epilogue.

The core is ``np.mean``/``np.sum``/``np.max`` over the shaped input (float32
with numpy's pairwise summation), written straight into the output or a
scratch buffer, followed by the fused elementwise epilogue as one pointwise
stage (``cpu_matmul``'s prologue/core/epilogue split).
"""

from __future__ import annotations

from xdsl.ir import Operation

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu.common import Buffers, Stage
from fusec.targets.cpu.matmul import generate_core_group

_NUMPY = {"mean": "np.mean", "sum": "np.sum", "max": "np.max"}


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "reduce", ai.ReduceOp, reduce_core)


def reduce_core(
    op: Operation, out: str, buffers: Buffers, name: str
) -> tuple[list[Stage], list[str]]:
    assert isinstance(op, ai.ReduceOp)
    x = buffers.reads[op.operands[0]]
    axes = tuple(int(a) for a in op.reduced_axes())
    keep = shape_of(op.input)
    kept = tuple(1 if d in axes else n for d, n in enumerate(keep))
    return [], [
        f"{_NUMPY[op.KIND]}({x}.reshape({keep!r}), axis={axes!r}, keepdims=True, "
        f"out={out}.reshape({kept!r}))"
    ]
