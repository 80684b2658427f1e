"""Run-time indices, scans and broadcasts: take, cumsum, expand, argmax/argmin."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from xdsl.irdl import irdl_op_definition

from fusec.dialect import shapes
from fusec.dialect.facts import Pattern, ScalarBuilder
from fusec.dialect.ops.base import (
    AiOp,
    OneInputOp,
    bool_prop,
    int_array_prop,
    int_prop,
    operand,
    result,
)
from fusec.ir.dtypes import ALL_TYPES, NUMERIC_TYPES
from fusec.ir.tensors import spec_of

if TYPE_CHECKING:
    import numpy as np


@irdl_op_definition
class TakeOp(AiOp):
    """The slices of ``table`` along ``axis`` that the run-time ``indices`` (i64/i32, any
    shape; negative ones count from the end) name: an embedding lookup
    (``numpy.take``, ONNX ``Gather``). An index out of range is an error."""

    name = "ai.take"
    table = operand()
    indices = operand()
    output = result()
    axis = int_prop(0)

    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE

    SHAPE_FUNCTION = shapes.take

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        table, indices = self.typed(args)
        return K.take(table, indices, axis=self.attr("axis"))


@irdl_op_definition
class CumSumOp(OneInputOp):
    """Running sums along ``axis`` (ONNX ``CumSum``): ``exclusive`` leaves each element
    out of its own sum, ``reverse`` sums from the end."""

    name = "ai.cumsum"
    axis = int_prop(0)
    exclusive = bool_prop(False)
    reverse = bool_prop(False)

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE

    SHAPE_FUNCTION = shapes.cumsum

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        (x,) = self.typed(args)
        return K.cumsum(x, **self.attr_values())


@irdl_op_definition
class ExpandOp(OneInputOp):
    """``input`` broadcast to the static ``shape`` (ONNX ``Expand``, ``numpy.broadcast_to``):
    a broadcast op that kernels read through, no copy of its own."""

    name = "ai.expand"
    shape = int_array_prop()

    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.BROADCAST

    SHAPE_FUNCTION = shapes.expand

    def fusion_pattern(self) -> Pattern:
        """Elementwise when the shape does not change, else broadcast."""
        same = spec_of(self.input.type).shape == spec_of(self.output.type).shape
        return Pattern.ELEMENTWISE if same else Pattern.BROADCAST

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return args[0]  # the template indexes the operand broadcast to the result

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.ascontiguousarray(np.broadcast_to(args[0], self.attr("shape")))


class ArgReduceOp(OneInputOp):
    """The i64 index of the extreme of ``input`` along ``axis`` (kept as a size-1 dim with
    ``keepdims``); the first one of equal extremes, or the last with
    ``select_last_index`` (ONNX ``ArgMax``/``ArgMin``); NaN counts as the extreme."""

    axis = int_prop(0)
    keepdims = bool_prop(True)
    select_last_index = bool_prop(False)

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    KIND: ClassVar[str] = "max"

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.arg_reduce(
            cls.name, operands[0], axis=attrs["axis"], keepdims=attrs["keepdims"]
        )

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        (x,) = self.typed(args)
        return K.arg_reduce(x, self.KIND, **self.attr_values())


@irdl_op_definition
class ArgMaxOp(ArgReduceOp):
    """The i64 index of the maximum along ``axis`` (ONNX ``ArgMax``, ``numpy.argmax``)."""

    name = "ai.argmax"
    KIND: ClassVar[str] = "max"


@irdl_op_definition
class ArgMinOp(ArgReduceOp):
    """The i64 index of the minimum along ``axis`` (ONNX ``ArgMin``, ``numpy.argmin``)."""

    name = "ai.argmin"
    KIND: ClassVar[str] = "min"
