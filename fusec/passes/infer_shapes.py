"""``infer-shapes``: recompute every ai op's result type from its shape function.

Front ends and rewrites may build ops whose result types are placeholders or
stale; this pass walks each block in order (so producers are updated before
their users) and gives every result the type its shape function infers. A
shape error becomes a located diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from fusec.dialect.ops import AiOp, spec_of, tensor_type
from fusec.dialect.shapes import ShapeError


@dataclass(frozen=True)
class InferShapesPass(ModulePass):
    """Give each ai op the result type its shape function computes."""

    name = "infer-shapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from fusec.ir.diagnostics import error_at

        for inner in op.walk():
            if not isinstance(inner, AiOp):
                continue
            try:
                specs = [spec_of(v.type) for v in inner.operands]
                to_spec = spec_of(inner.results[0].type) if inner.HAS_TO_TYPE else None
                inferred = tensor_type(inner.infer_spec(specs, inner.properties, to_spec))
            except ShapeError as err:
                raise error_at(inner, str(err).removeprefix(f"{inner.name}: ")) from None
            if inferred != inner.results[0].type:
                Rewriter.replace_value_with_new_type(inner.results[0], inferred)
        for fn in op.walk():
            if isinstance(fn, func.FuncOp):
                _sync_signature(fn)


def _sync_signature(fn: func.FuncOp) -> None:
    """Make the function's result types those its ``func.return`` returns."""
    returns = [o for o in fn.walk() if isinstance(o, func.ReturnOp) and o.parent_op() is fn]
    if len(returns) != 1:
        return
    returned = [v.type for v in returns[0].operands]
    if list(fn.function_type.outputs.data) != returned:
        fn.function_type = FunctionType.from_lists(fn.function_type.inputs.data, returned)
