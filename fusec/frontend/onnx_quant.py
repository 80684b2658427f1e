"""ONNX's ``QuantizeLinear`` and ``DequantizeLinear`` (opsets 10-21) as ``ai.quantize``
and ``ai.dequantize`` (issue 31), and ``DynamicQuantizeLinear`` as the reductions that
give its scale and zero point and an ``ai.quantize``.

* The scale and zero point are operands (per tensor, per axis with ``axis``, per
  block with ``block_size`` from opset 21); a missing zero point is a zero constant
  of the quantized type, as the operators define it.
* The quantized type is the zero point's element type, else ``output_dtype``
  (opset 21), else UINT8 (the operators' default).
* INT4 / UINT4 (two a byte in the model) are ``i4`` / ``ui4`` tensors of one value an
  element (onnx's numpy_helper unpacks them), so a ``DequantizeLinear`` with
  ``block_size`` of int4 weights (the standard ONNX W4A16 form) imports as it is.
* Types fusec has no tensors of (int2, int16, float4...) are refused by name.

A ``DequantizeLinear`` whose inputs are all constants (a quantized weight) is evaluated
at import, as every operator with constant inputs is (``onnx_fold``), unless its codes
are INT8 or UINT8 (``onnx_fold.kept_quantized``): that one stays an ``ai.dequantize``,
so that ``recognize-patterns`` moves its scales after the matmul reading it and the cpu
int8 GEMM gets the codes; ``canonicalize`` folds what stays constant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import QUANTIZED_TYPES, converter
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node


def _quantized_type(imp: Importer, code: int, what: str) -> str:
    if code in QUANTIZED_TYPES:
        return QUANTIZED_TYPES[code]
    name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
    raise imp.error(
        f"{what} has element type {name}: fusec quantizes to INT8, UINT8, INT4, UINT4, "
        "FLOAT8E4M3FN and FLOAT8E5M2",
        "dtype",
    )


def _zero_point(imp: Importer, node: Node, scale: SSAValue, dtype: str) -> SSAValue:
    """Input 2, or zeros of ``dtype`` in the scale's shape when the node has none."""
    given = imp.optional_input(node, 2)
    if given is not None:
        return given
    zeros = np.zeros(shape_of(scale), dtype=numpy_dtype(dtype))
    return imp.constant(zeros, dtype)


def _layout(node: Node) -> dict[str, int]:
    return {"axis": int(node.attrs.get("axis", 1)), "block_size": node.attrs.get("block_size", 0)}


@converter("QuantizeLinear", attrs=("axis", "block_size", "output_dtype", "saturate", "precision"))
def _quantize_linear(imp: Importer, node: Node) -> list[SSAValue]:
    x, scale = imp.input(node, 0), imp.input(node, 1)
    if node.attrs.get("precision", 0):
        raise imp.error("attribute 'precision' (opset 25) is not supported", "attribute")
    given = imp.optional_input(node, 2)
    code = int(node.attrs.get("output_dtype", 0)) or TensorProto.UINT8
    if given is not None:
        if node.attrs.get("output_dtype", 0) and QUANTIZED_TYPES.get(code) != dtype_of(given):
            raise imp.error(f"output_dtype {code} differs from y_zero_point's {given.type}")
        dtype = dtype_of(given)
    else:
        dtype = _quantized_type(imp, code, "the output (output_dtype)")
    zero_point = _zero_point(imp, node, scale, dtype)
    saturate = bool(node.attrs.get("saturate", 1))
    return [imp.emit(ai.QuantizeOp, x, scale, zero_point, saturate=saturate, **_layout(node))]


@converter("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"))
def _dequantize_linear(imp: Importer, node: Node) -> list[SSAValue]:
    x, scale = imp.input(node, 0), imp.input(node, 1)
    code = int(node.attrs.get("output_dtype", 0))
    if code and code != _scale_code(dtype_of(scale)):
        raise imp.error(f"output_dtype {code} differs from the scale's element type {scale.type}")
    zero_point = _zero_point(imp, node, scale, dtype_of(x))
    return [imp.emit(ai.DequantizeOp, x, scale, zero_point, **_layout(node))]


def _scale_code(dtype: str) -> int:
    codes = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
    return codes.get(dtype, 0)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(imp: Importer, node: Node) -> list[SSAValue]:
    """``x`` to uint8 with a scale and zero point from its range, both computed at run
    time (ONNX DynamicQuantizeLinear, as its reference computes them): the range
    ``max(0, max x) - min(0, min x)`` (1 where it is 0) over 255 is the scale, the zero
    point ``-min(0, min x) / scale`` rounded half to even and saturated (``ai.quantize``
    of it with a zero zero point), and ``y`` is ``ai.quantize`` of ``x`` with both."""
    x = imp.input(node, 0)
    if dtype_of(x) != "f32":
        raise imp.error(f"input 'x' has element type {dtype_of(x)}: it must be float", "dtype")
    zero, one = imp.scalar(0.0, x), imp.scalar(1.0, x)
    largest = imp.emit(ai.MaximumOp, imp.emit(ai.ReduceMaxOp, x), zero)
    least = imp.emit(ai.ReduceMaxOp, imp.emit(ai.NegOp, x))  # -min x
    negated_low = imp.emit(ai.MaximumOp, least, zero)  # -min(0, min x)
    span = imp.emit(ai.AddOp, largest, negated_low)
    span = imp.emit(ai.WhereOp, imp.emit(ai.EqualOp, span, zero), one, span)
    scale = imp.emit(ai.DivOp, span, imp.scalar(255.0, x))
    no_zero = imp.constant(np.zeros((), np.uint8), "ui8")
    zero_point = imp.emit(ai.QuantizeOp, negated_low, scale, no_zero)
    return [imp.emit(ai.QuantizeOp, x, scale, zero_point), scale, zero_point]
