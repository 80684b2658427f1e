"""The "view" kind on every target: a reshape is no kernel at all.

Every buffer between kernels is contiguous, so a reshape is the same buffer
under another shape. The runtime makes the result an alias of the operand
(``numpy.reshape``, a device view); this template only checks the group and
says so in the (empty) module's header.
"""

from __future__ import annotations

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import error_at, header
from fusec.dialect import ops as ai

#: The kernel kind the runtime runs as an alias instead of a launch.
VIEW_KIND = "view"


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    for op in fused_op.block.ops:
        if isinstance(op, ai.YieldOp):
            continue
        if not isinstance(op, ai.ReshapeOp):
            raise error_at(op, 'is not a reshape: a "view" group holds reshapes only')
    if len(fused_op.inputs) != 1 or len(fused_op.results) != 1:
        raise error_at(fused_op, 'a "view" group has one input and one result')
    notes = ["no kernel: the result is the input's buffer under another shape (an alias)"]
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, VIEW_KIND, "any", header(fused_op, notes=notes), inputs, outputs)
