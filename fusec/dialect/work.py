"""What an ``ai`` op computes, counted: the FLOPs the profiler sets against a device's
peak (``fusec.tools.profile``) and the cpu target weighs to decide whether a kernel is
worth a parallel region (``fusec.targets.cpu.blocked``)."""

from __future__ import annotations

import math
from typing import Any

from xdsl.ir import Operation

from fusec.dialect import ops as ai
from fusec.dialect.facts import Pattern
from fusec.dialect.ops import spec_of


def _elements(value: Any) -> int:
    return math.prod(spec_of(value.type).shape)


def op_flops(op: Operation) -> tuple[int, str | None]:
    """(FLOPs of ``op``, its operand type if they are matrix FLOPs else None)."""
    if isinstance(op, ai.MatmulOp):
        lhs = spec_of(op.lhs.type)
        k = lhs.shape[-2] if op.attr("transpose_a") else lhs.shape[-1]
        return 2 * _elements(op.output) * k, lhs.dtype
    if isinstance(op, ai.Conv2DOp):
        taps = math.prod(spec_of(op.weight.type).shape[1:])  # C/groups x R x S
        return 2 * _elements(op.output) * taps, spec_of(op.input.type).dtype
    if isinstance(op, ai.AttentionOp):
        out = spec_of(op.output.type).shape
        rows, keys = math.prod(out[:-1]), spec_of(op.key.type).shape[-2]
        depth = spec_of(op.query.type).shape[-1] + out[-1]  # q.k, then p.v
        return 2 * rows * keys * depth, spec_of(op.query.type).dtype
    if isinstance(op, ai.Pool2DOp):
        return _elements(op.output) * math.prod(op.attr("kernel")), None
    if not isinstance(op, ai.AiOp) or isinstance(op, ai.CastOp):
        return 0, None
    if op.PATTERN in (Pattern.INJECTIVE, Pattern.OPAQUE):  # layout: moves, computes nothing
        return 0, None
    if op.PATTERN == Pattern.REDUCTION:
        return _elements(op.operands[0]), None
    return max((_elements(r) for r in op.results), default=0), None
