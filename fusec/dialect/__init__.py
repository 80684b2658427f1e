"""The ``ai`` dialect: ops, shape functions and the xDSL context that knows them."""

from fusec.dialect.ops import AI, TENSOR_OPS, AiOp, FusedOp, YieldOp, spec_of, tensor_type
from fusec.dialect.shapes import ShapeError, TensorSpec

# the ops' canonicalisation patterns (ops.CANONICAL_PATTERNS), registered with the ops
from fusec.dialect import canonical as _canonical  # noqa: F401  # isort: skip

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
    """An xDSL Context with builtin, func, arith and ai: arith (~0.1 s to import, issue
    #26) is loaded when the IR first names one of its ops or attributes."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx = Context()
    for dialect in (Builtin, Func, AI):
        ctx.load_dialect(dialect)
    ctx.register_dialect("arith", _arith)
    return ctx


def _arith():
    from xdsl.dialects.arith import Arith

    return Arith
