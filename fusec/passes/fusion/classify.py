"""How each op may fuse: the pattern lattice of TVM's FuseOps.

``elementwise < broadcast < injective < reduction < anchor < opaque``. The
lower an op sits, the more freely it joins a neighbour's kernel: an
elementwise op can be computed wherever its inputs are, a reduction needs a
whole row, an *anchor* (TVM's "out-elementwise-fusable": conv2d, matmul) owns
its own loop nest and only lets elementwise work ride on its output, and an
opaque op (anything we do not know) fuses with nothing.

The pattern belongs to an op *instance*: ``ai.add`` of two equal shapes is
elementwise, with numpy broadcasting it is broadcast.
"""

from __future__ import annotations

from enum import IntEnum

from xdsl.ir import Operation

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of


class Pattern(IntEnum):
    """TVM's fusion lattice; a larger value fuses less freely."""

    ELEMENTWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    ANCHOR = 4
    OPAQUE = 5

    @property
    def label(self) -> str:
        return self.name.lower()


_UNARY = (ai.ReluOp, ai.SigmoidOp, ai.TanhOp, ai.ExpOp, ai.SqrtOp, ai.SiluOp, ai.GeluOp, ai.CastOp)
_BINARY = (ai.AddOp, ai.SubOp, ai.MulOp, ai.DivOp, ai.MaximumOp)
_REDUCTIONS = (ai.LayerNormOp, ai.SoftmaxOp)
_ANCHORS = (ai.Conv2DOp, ai.MatmulOp)


def pattern_of(op: Operation) -> Pattern:
    """The fusion pattern of one op instance."""
    if isinstance(op, _UNARY):
        return Pattern.ELEMENTWISE
    if isinstance(op, _BINARY):
        shapes = {tuple(spec_of(v.type).shape) for v in op.operands}
        return Pattern.ELEMENTWISE if len(shapes) == 1 else Pattern.BROADCAST
    if isinstance(op, ai.BiasAddOp):
        return Pattern.BROADCAST
    if isinstance(op, _REDUCTIONS):
        return Pattern.REDUCTION
    if isinstance(op, _ANCHORS):
        return Pattern.ANCHOR
    return Pattern.OPAQUE


def short_name(op: Operation) -> str:
    """``relu`` for ``ai.relu``: the name the rules file uses."""
    return op.name.removeprefix("ai.")


def is_tensor_op(op: Operation) -> bool:
    """True for the ai ops that must end up inside exactly one ``ai.fused``."""
    return isinstance(op, ai.AiOp)


def result_shape(op: Operation) -> tuple[int, ...]:
    """The static shape of the op's (single) result."""
    return tuple(spec_of(op.results[0].type).shape)


def fmt_shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"
