"""``fp8-constant-weights``: a constant weight that holds float8 values, read as its codes.

An fp8 linear layer as ONNX writes it (``QuantizeLinear``/``DequantizeLinear`` on the
activations, a ``DequantizeLinear`` of the weight's float8 initializer) reaches the cuda
pipeline as

    matmul(dequantize(qa, 1, 0), W) * sa * sw

once ``recognize-patterns`` has moved the scales after the product and ``canonicalize``
has folded the weight's dequantize of constants into ``W``: a float constant whose every
value is a float8 value (the codes, less a zero point of 0). The Tensor Core GEMM reads
float8 codes only as ``dequantize(codes, 1, 0)`` operands stored N x K (wgmma reads float8
K-major only), so this pass, run before fusion, gives ``W`` back that form::

    matmul(dequantize(qa, 1, 0), dequantize(codes, 1, 0), transpose_b)

with ``codes`` the float8 constant of ``W`` (transposed to N x K when ``W`` is stored
K x N): exactly the same values, so the same products. A weight with any value that is no
value of A's float8 type (NaN, or a value the type rounds) stays as it is, and so does a
batched one, or one whose A is stored K x M (``transpose_a``: no float8 GEMM either).
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.constants import constant_value, dense_constant, is_constant
from fusec.targets.cuda.gemm.fp8_plan import fp8_operand_problem


def _float8_codes(weight, dtype: str, transposed: bool):
    """The float8 array (N x K) holding exactly the 2-D constant ``weight``'s values, or
    None when one of them is no ``dtype`` value."""
    import numpy as np

    from fusec.ir.dtypes import numpy_dtype

    values = np.asarray(weight, dtype=np.float32)
    codes = values.astype(numpy_dtype(dtype))
    if np.isnan(values).any() or not np.array_equal(codes.astype(np.float32), values):
        return None
    return np.ascontiguousarray(codes if transposed else codes.T)


class ConstantWeightAsFloat8Codes(RewritePattern):
    """``matmul(dequantize(qa, 1, 0), W)`` with ``W`` a 2-D constant of A's float8 values
    -> ``matmul(dequantize(qa, 1, 0), dequantize(codes, 1, 0), transpose_b)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ai.MatmulOp, rewriter: PatternRewriter) -> None:
        dq, weight = op.lhs.owner, op.rhs.owner
        if not isinstance(dq, ai.DequantizeOp) or fp8_operand_problem(dq, None) is not None:
            return
        if op.attr("transpose_a") or not is_constant(weight):
            return  # (an A stored K x M: the GEMM reads float8 codes K-major only)
        if len(spec_of(op.rhs.type).shape) != 2:
            return
        dtype = spec_of(dq.input.type).dtype
        transposed = bool(op.attr("transpose_b"))
        codes = _float8_codes(constant_value(weight), dtype, transposed)
        if codes is None:
            return
        import numpy as np

        scale_dtype = spec_of(dq.scale.type).dtype
        new = [
            coded := dense_constant(codes, dtype),
            one := dense_constant(np.ones(()), scale_dtype),
            zero := dense_constant(np.zeros((), np.float32), dtype),
            plain := ai.DequantizeOp(coded.result, one.result, zero.result),
            ai.MatmulOp(
                op.lhs,
                plain.results[0],
                transpose_a=bool(op.attr("transpose_a")),
                transpose_b=True,
            ),
        ]
        rewriter.replace(op, new, [new[-1].results[0]])


class Fp8ConstantWeightsPass(ModulePass):
    """Read constant weights of float8 values as float8 codes (see the module docstring)."""

    name = "fp8-constant-weights"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ConstantWeightAsFloat8Codes()).rewrite_module(op)
