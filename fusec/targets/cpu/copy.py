"""cpu template for "copy" groups: transpose, slice, concat or gather into a new buffer,
or a gather at run-time indices (``ai.take``) or running sum (``ai.cumsum``).

No loop is generated: the op is numpy's own view or gather
(``codegen.layout``), and one assignment into the output's shaped view does
the copy at memory speed.
"""

from __future__ import annotations

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import error_at, header, shape_of
from fusec.codegen.layout import is_copy, numpy_expression
from fusec.dialect import ops as ai
from fusec.targets.cpu.abi import import_line
from fusec.targets.cpu.common import body_ops, input_names, outputs_of


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    ops = body_ops(fused_op)
    names = {v: f"{n}.reshape({shape_of(v)!r})" for v, n in input_names(fused_op).items()}
    lines = []
    for index, op in enumerate(ops):
        if not is_copy(op):
            raise error_at(op, 'cannot be part of a "copy" group (layout and data ops only)')
        lines.append(f"v{index} = {numpy_expression(op, [names[v] for v in op.operands])}")
        names[op.results[0]] = f"v{index}"
    for value, array in outputs_of(fused_op):
        lines.append(f"{array}.reshape({shape_of(value)!r})[...] = {names[value]}")
    params = [f"in{i}" for i in range(len(fused_op.inputs))]
    params += [f"out{i}" for i in range(len(fused_op.results))]
    source = "\n".join(
        [
            header(fused_op, notes=["target: cpu; numpy views and one copy into the output"]),
            "import numpy as np",
            "",
            import_line("numpy_ops as K"),
            "",
            "",
            f"def launch({', '.join(params)}):",
            '    """Run the group: every output element is written."""',
            *(f"    {line}" for line in lines),
            "",
        ]
    )
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, "copy", "cpu", source, inputs, outputs)
