"""cpu template for "pointwise" groups: elementwise ops in one parallel loop nest
(``fusec.targets.cpu.loops``).
"""

from __future__ import annotations

from fusec.codegen import CompiledEntry, KernelSource, io_specs
from fusec.codegen.expr import ExprGenerator
from fusec.dialect import ops as ai
from fusec.targets.cpu.common import (
    assemble,
    body_ops,
    check_elementwise,
    input_names,
    outputs_of,
)
from fusec.targets.cpu.loops import pointwise_stage


def generate(fused_op, name: str) -> KernelSource:
    ops = body_ops(fused_op)
    check_elementwise(ops, (ai.RotateHalfOp,))
    gen = ExprGenerator(fast_exp=True)  # exp, erfc: loop-vectorising helpers
    outputs = outputs_of(fused_op)
    stage = pointwise_stage(f"{name}_pointwise", gen, ops, input_names(fused_op), outputs)
    source = assemble(fused_op, gen, [stage], [stage.call()], entry_body=[stage.call()])
    inputs, outs = io_specs(fused_op)
    return KernelSource(
        name, "pointwise", "cpu", source, inputs, outs, compiled_entry=CompiledEntry()
    )
