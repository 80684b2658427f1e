"""The ``ai`` dialect: ops, shape functions and the xDSL context that knows them."""

from fusec.dialect.ops import AI, TENSOR_OPS, AiOp, FusedOp, YieldOp, spec_of, tensor_type
from fusec.dialect.shapes import ShapeError, TensorSpec

__all__ = [
    "AI",
    "TENSOR_OPS",
    "AiOp",
    "FusedOp",
    "ShapeError",
    "TensorSpec",
    "YieldOp",
    "make_context",
    "spec_of",
    "tensor_type",
]


def make_context():
    """An xDSL Context with builtin, func, arith and ai loaded."""
    from xdsl.context import Context
    from xdsl.dialects.arith import Arith
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx = Context()
    for dialect in (Builtin, Func, Arith, AI):
        ctx.load_dialect(dialect)
    return ctx
