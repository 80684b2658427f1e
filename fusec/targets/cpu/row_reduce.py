"""cpu template for "row_reduce" groups: one ``ai.layernorm`` or ``ai.softmax`` with
elementwise producers (its prologue) and consumers (its epilogue), in the row loop of
``fusec.targets.cpu.rows`` (a pointwise loop when nothing uses the reduction).
"""

from __future__ import annotations

from fusec.codegen import KernelSource
from fusec.codegen.expr import ExprGenerator
from fusec.targets.cpu.common import (
    REDUCE_OPS,
    body_ops,
    input_names,
    one_stage_kernel,
    outputs_of,
)
from fusec.targets.cpu.loops import elementwise_stage
from fusec.targets.cpu.rows import row_reduce_stage, the_reduction


def generate(fused_op, name: str) -> KernelSource:
    ops = body_ops(fused_op)
    gen = ExprGenerator(fast_exp=True)
    if not any(isinstance(op, REDUCE_OPS) for op in ops):  # the reduction's result is unused
        stage = elementwise_stage(fused_op, name, gen)
    else:
        reduce_op = the_reduction(fused_op, ops)
        stage = row_reduce_stage(
            f"{name}_row_reduce", gen, ops, reduce_op, input_names(fused_op), outputs_of(fused_op)
        )
    return one_stage_kernel(fused_op, name, "row_reduce", gen, stage)
