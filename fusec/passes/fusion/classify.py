"""How each op may fuse: the pattern lattice of TVM's FuseOps.

``elementwise < broadcast < injective < reduction < anchor < opaque``. The
lower an op sits, the more freely it joins a neighbour's kernel: an
elementwise op can be computed wherever its inputs are, a reduction needs a
whole row, an *anchor* (TVM's "out-elementwise-fusable": conv2d, matmul) owns
its own loop nest and only lets elementwise work ride on its output, and an
opaque op (anything we do not know) fuses with nothing.

The pattern is a fact of the op (``AiOp.fusion_pattern``, see
``fusec.dialect.facts``) and belongs to an op *instance*: ``ai.add`` of two
equal shapes is elementwise, with numpy broadcasting it is broadcast.
"""

from __future__ import annotations

from xdsl.ir import Operation

from fusec.dialect import ops as ai
from fusec.dialect.facts import Pattern
from fusec.dialect.ops import spec_of

__all__ = ["Pattern", "fmt_shape", "pattern_of", "result_shape", "short_name"]


def pattern_of(op: Operation) -> Pattern:
    """The fusion pattern of one op instance: the op's own fact, opaque for non-ai ops."""
    if isinstance(op, ai.AiOp):
        return op.fusion_pattern()
    return Pattern.OPAQUE


def short_name(op: Operation) -> str:
    """``relu`` for ``ai.relu``: the name the rules file uses."""
    return op.name.removeprefix("ai.")


def result_shape(op: Operation) -> tuple[int, ...]:
    """The static shape of the op's (single) result."""
    return tuple(spec_of(op.results[0].type).shape)


def fmt_shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"
