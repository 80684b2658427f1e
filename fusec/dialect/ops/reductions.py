"""Reductions over axes (mean, sum, max) and 2-D pooling (max, average)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from xdsl.irdl import irdl_op_definition

from fusec.dialect import shapes
from fusec.dialect.facts import Pattern
from fusec.dialect.ops.base import OneInputOp, bool_prop, int_array_prop
from fusec.ir.tensors import spec_of

if TYPE_CHECKING:
    import numpy as np


class ReduceOp(OneInputOp):
    """A reduction over ``axes`` (all when empty), kept as size-1 dims with ``keepdims``."""

    axes = int_array_prop()
    keepdims = bool_prop(False)

    PATTERN: ClassVar[Pattern] = Pattern.REDUCTION
    KIND: ClassVar[str] = ""

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.reduce(cls.name, *operands, **attrs)

    def reduced_axes(self) -> tuple[int, ...]:
        rank = len(spec_of(self.input.type).shape)
        return shapes.reduce_axes(self.name, self.attr("axes"), rank)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.reduce(args[0], self.KIND, self.reduced_axes(), self.attr("keepdims"))


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """The mean over ``axes``."""

    name = "ai.reduce_mean"
    KIND: ClassVar[str] = "mean"


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """The sum over ``axes``."""

    name = "ai.reduce_sum"
    KIND: ClassVar[str] = "sum"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """The maximum over ``axes`` (NaN propagates)."""

    name = "ai.reduce_max"
    KIND: ClassVar[str] = "max"


class Pool2DOp(OneInputOp):
    """2-D pooling of an NCHW input: one value per window of ``kernel`` (h, w).

    ``padding`` has 2 values (symmetric) or 4 (h_begin, w_begin, h_end, w_end),
    as ``ai.conv2d``; with ``ceil_mode`` the output size rounds up (the last
    window may overhang the padding, as in ONNX and PyTorch).
    """

    kernel = int_array_prop(1, 1)
    strides = int_array_prop(1, 1)
    padding = int_array_prop(0, 0)
    dilations = int_array_prop(1, 1)
    ceil_mode = bool_prop(False)

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR
    KIND: ClassVar[str] = ""

    @classmethod
    def infer(cls, operands, attrs):
        window = {k: attrs[k] for k in ("kernel", "strides", "padding", "dilations", "ceil_mode")}
        return shapes.pool2d(cls.name, *operands, **window)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        attrs = self.attr_values()
        return K.pool2d(
            args[0],
            self.KIND,
            attrs["kernel"],
            attrs["strides"],
            attrs["padding"],
            attrs["dilations"],
            spec_of(self.output.type).shape[2:],
            attrs.get("count_include_pad", False),
        )


@irdl_op_definition
class MaxPool2DOp(Pool2DOp):
    """2-D max pooling (padding is -inf; NaN propagates)."""

    name = "ai.max_pool2d"
    KIND: ClassVar[str] = "max"


@irdl_op_definition
class AvgPool2DOp(Pool2DOp):
    """2-D average pooling: the window's sum over the elements it covers inside the
    input, or with ``count_include_pad`` inside the padded input."""

    name = "ai.avg_pool2d"
    count_include_pad = bool_prop(False)
    KIND: ClassVar[str] = "avg"
