"""Quantization: ``ai.quantize`` and ``ai.dequantize`` (issue 31)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from xdsl.irdl import irdl_op_definition, traits_def
from xdsl.traits import Pure

from fusec.dialect import shapes
from fusec.dialect.facts import Pattern, ScalarBuilder
from fusec.dialect.ops.base import AiOp, Canonicalized, bool_prop, int_prop, operand, result
from fusec.dialect.shapes import TensorSpec
from fusec.ir.tensors import spec_of

if TYPE_CHECKING:
    import numpy as np


class QuantizationOp(AiOp):
    """What ``ai.quantize`` and ``ai.dequantize`` share: operands, attributes, checks."""

    input = operand()
    scale = operand()
    zero_point = operand()
    output = result()
    #: The quantized dimension (per-axis and per-block scales); ignored per tensor.
    axis = int_prop(1)
    #: Elements per block along ``axis`` (per-block scales); 0: per tensor or axis.
    block_size = int_prop(0)
    traits = traits_def(Pure(), Canonicalized())

    #: Computed per element (``scalar``): the scale and zero point are broadcast
    #: operands (per tensor, per index of ``axis``; per block of ``block_size`` indices,
    #: which only the cpu pointwise template indexes: ``codegen.expr.operand_shape``).
    PATTERN: ClassVar[Pattern] = Pattern.BROADCAST

    @classmethod
    def infer(cls, operands, attrs):
        # the shape functions read the scale's layout; ``saturate`` leaves the type as it is
        return super().infer(operands, {key: attrs[key] for key in ("axis", "block_size")})

    @classmethod
    def check_dtypes(cls, operands: Sequence[TensorSpec]) -> None:
        """Each operand has its own element types: the shape function checks them."""

    def blocks(self) -> tuple[int, int, int] | None:
        """(axis, block size, blocks) when the scale is per block with more than one
        block of more than one index (not a broadcast of numpy's rules), else None."""
        x = spec_of(self.input.type)
        block = self.attr("block_size")
        if block <= 1 or x.rank == 0:
            return None
        axis = self.attr("axis") % x.rank
        count = -(-x.shape[axis] // block)
        return (axis, block, count) if count > 1 else None

    def broadcast(self, array: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The scale or zero point ``array`` shaped to broadcast against ``x``."""
        from fusec.dialect import numpy_ops

        axis, block = self.attr("axis"), self.attr("block_size")
        extent = x.shape[axis % x.ndim] if x.ndim else 1
        return numpy_ops.quantization_broadcast(
            array, x.ndim, axis=axis, block_size=block, extent=extent
        )

    def reference_operands(
        self, args: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The reference's operands: each in its declared dtype, the scale and zero point
        broadcast against the input."""
        x, scale, zero_point = self.typed(args)
        return x, self.broadcast(scale, x), self.broadcast(zero_point, x)


@irdl_op_definition
class QuantizeOp(QuantizationOp):
    """``ai.quantize %x, %scale, %zero_point``: ``x / scale`` rounded half to even plus
    the zero point, saturated to the zero point's element type (i8, ui8) or converted
    to it (f8E4M3FN, f8E5M2; clamped to its largest finite value with ``saturate``)."""

    name = "ai.quantize"
    #: float8 results: values beyond the type's range become its largest finite value
    #: (ONNX's default), else NaN (e4m3fn) or inf (e5m2).
    saturate = bool_prop(True)

    SHAPE_FUNCTION = shapes.quantize

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        x, scale, zero_point = args
        dtype = spec_of(self.zero_point.type).dtype
        return s.quantize_code(dtype, s.arith(x, "/", scale), zero_point, self.attr("saturate"))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops

        operands = self.reference_operands(args)
        return numpy_ops.quantize_linear(*operands, saturate=self.attr("saturate"))


@irdl_op_definition
class DequantizeOp(QuantizationOp):
    """``ai.dequantize %q, %scale, %zero_point``: ``(q - zero_point) * scale`` in the
    scale's element type."""

    name = "ai.dequantize"

    SHAPE_FUNCTION = shapes.dequantize

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        code, scale, zero_point = args
        dtype = spec_of(self.input.type).dtype
        shifted = s.arith(s.quantized_value(dtype, code), "-", s.quantized_value(dtype, zero_point))
        return s.round_to(self.result_dtype(), s.arith(shifted, "*", scale))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops

        return numpy_ops.dequantize_linear(*self.reference_operands(args))
