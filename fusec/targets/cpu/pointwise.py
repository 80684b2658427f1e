"""cpu template for "pointwise" groups: elementwise ops in one parallel loop nest
(``fusec.targets.cpu.loops``).
"""

from __future__ import annotations

from fusec.codegen import KernelSource
from fusec.codegen.expr import ExprGenerator
from fusec.dialect import ops as ai
from fusec.targets.cpu.common import one_stage_kernel
from fusec.targets.cpu.loops import elementwise_stage


def generate(fused_op, name: str) -> KernelSource:
    gen = ExprGenerator(fast_exp=True)  # exp, erfc: loop-vectorising helpers
    stage = elementwise_stage(fused_op, name, gen, (ai.RotateHalfOp,))
    return one_stage_kernel(fused_op, name, "pointwise", gen, stage)
