"""Which float8 operands and outputs the Tensor Core GEMM takes (``template.plan_ops``):
``dequantize`` operands of float8 codes with a unit scale and a zero zero point (the scales
moved after the product by ``ScalesAfterQuantizedMatmul``), and a saturating ``quantize``
of the epilogue's result to float8 with a scale per tensor or per column."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from xdsl.ir import Operation, SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of


def fp8_operands(
    dequantized: Sequence[ai.DequantizeOp], ops: Sequence[Operation], args: Mapping[SSAValue, int]
) -> tuple[dict[SSAValue, str], dict[SSAValue, SSAValue]] | str:
    """(matmul operand -> its float8 type, matmul operand -> its codes) when each dequantize
    of the group (``fp8_operand_problem``) feeds the group's matmul only; else why the
    kernel cannot take them. The two operands may be of the two float8 types (wgmma
    multiplies e4m3 by e5m2).

    Fusion grows a group one op at a time, so it asks about [dequantize A, matmul] before
    the dequantize of B joins: a matmul operand that is an input of the group made by such a
    dequantize outside it counts as dequantized too. It always joins next (its rule clause
    is ``duplicate``: cloned in, which closes no cycle), so the packed group, whose operand
    is then a block argument made by nothing, has both dequantizes inside when code
    generation asks."""
    matmul = next(op for op in ops if not isinstance(op, ai.DequantizeOp))
    types: dict[SSAValue, str] = {}
    codes: dict[SSAValue, SSAValue] = {}
    for dq in dequantized:
        if (problem := fp8_operand_problem(dq, args)) is not None:
            return problem
        if any(use.operation in ops and use.operation is not matmul for use in dq.output.uses):
            return "a dequantized operand is read by other ops of the group than its matmul"
        types[dq.output] = spec_of(dq.input.type).dtype
        codes[dq.output] = dq.input
    for operand in matmul.operands if isinstance(matmul, ai.MatmulOp) else ():
        joining = operand.owner
        if operand not in codes and isinstance(joining, ai.DequantizeOp) and operand in args:
            if fp8_operand_problem(joining, None) is None:  # the dequantize that joins next
                types[operand] = spec_of(joining.input.type).dtype
                codes[operand] = operand
    return types, codes


def fp8_operand_problem(dq: ai.DequantizeOp, args: Mapping[SSAValue, int] | None) -> str | None:
    """Why the GEMM cannot read ``dq``'s codes as an operand, or None: they are float8 codes
    (an input of the group: in ``args``, unless None), per tensor or per axis, with a scale
    of 1 and a zero point of 0 (the scales moved after the product by
    ``ScalesAfterQuantizedMatmul``)."""
    from fusec.codegen import outer_constant
    from fusec.targets.cuda.gemm.cpp import FP8_DTYPES

    dtype = spec_of(dq.input.type).dtype
    if dtype not in FP8_DTYPES or (args is not None and dq.input not in args):
        return f"a dequantize of {dtype} values: the Tensor Core GEMM reads float8 codes"
    scale, zero_point = outer_constant(dq.scale), outer_constant(dq.zero_point)
    unit = scale is not None and bool((scale.astype("float32") == 1).all())
    if dq.attr("block_size") or not unit or zero_point is None:
        return "a dequantize of a scale other than 1 (per block, or not after the product)"
    if bool((zero_point.astype("float32") != 0).any()):
        return "a dequantize of a zero point other than 0"
    return None


def float8_output_problem(q: ai.QuantizeOp, ops: Sequence[Operation]) -> str | None:
    """Why the GEMM cannot store the group's result as ``q``'s float8 codes, or None: a
    saturating quantize to a float8 type of the value the chain before it makes (the
    product's shape), with a scale per tensor or per column and a zero point of 0, and no
    softmax."""
    from fusec.codegen import outer_constant
    from fusec.targets.cuda.gemm.cpp import FP8_DTYPES

    dtype = spec_of(q.output.type).dtype
    if dtype not in FP8_DTYPES:
        return f"a quantize to {dtype} (the GEMM stores float8 codes only)"
    if not q.attr("saturate") or q.attr("block_size"):
        return "a float8 quantize without saturation, or per block (the store saturates)"
    if float8_output_scale_index(q) is None:
        return (
            "a float8 quantize of a scale per axis other than the columns (the GEMM's store "
            "takes one per tensor or per column)"
        )
    zero = outer_constant(q.zero_point)
    if zero is None or bool((zero.astype("float32") != 0).any()):
        return "a float8 quantize with a zero point other than a constant 0"
    if any(isinstance(op, ai.SoftmaxOp) for op in ops):
        return "a float8 quantize after a softmax"
    if len(ops) < 2 or q.input is not ops[-2].results[0]:
        return "a quantize of a value the epilogue does not end with"
    return None


def float8_output_scale_index(q: ai.QuantizeOp) -> str | None:
    """Where the epilogue reads the scale of a float8 quantize of the product: ``0`` (per
    tensor), ``col`` (per column: along the output's last axis), else None."""
    shape = spec_of(q.scale.type).shape
    if math.prod(shape) == 1 and len(shape) <= 1:
        return "0"
    rank = len(spec_of(q.input.type).shape)
    if len(shape) == 1 and int(q.attr("axis")) % rank == rank - 1:
        return "col"
    return None
