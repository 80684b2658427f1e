"""ONNX reductions as ai ops: ReduceMean/Sum/Max directly, the other Reduce* written
with them and elementwise ops, Softmax and a stable LogSoftmax, ArgMax/ArgMin, CumSum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _axes, _constant_ints, _normalised, _reshape_to, converter
from fusec.frontend.onnx_layout import _slice_of
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from fusec.frontend.onnx_core import Importer, Node


@converter("Softmax", attrs=("axis",))
def _softmax(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    return [imp.emit(ai.SoftmaxOp, x, axis=_softmax_axis(imp, node, x) - len(shape_of(x)))]


def _softmax_axis(imp: Importer, node: Node, x: SSAValue) -> int:
    """The one axis a Softmax or LogSoftmax normalises over (in [0, rank))."""
    shape = shape_of(x)
    rank = len(shape)
    axis = node.attrs.get("axis", -1 if imp.opset >= 13 else 1)
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if imp.opset < 13:
        # Before opset 13, Softmax flattens dims [axis:] into one: that is a
        # softmax over one dim only when the others are all 1.
        big = [d for d in range(axis, rank) if shape[d] != 1]
        if len(big) > 1:
            raise imp.error(
                f"opset {imp.opset} {node.op_type} with axis={axis} normalises over the flattened "
                f"dims {list(shape[axis:])}, which ai.softmax cannot express (opset >= 13 "
                "normalises over one axis)",
                "attribute",
            )
        axis = big[0] if big else rank - 1
    return axis


@converter("CumSum", attrs=("exclusive", "reverse"))
def _cumsum(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.cumsum along the constant axis input (position ids from a mask)."""
    x = imp.input(node, 0)
    axis = _constant_ints(imp, node, 1, "input 'axis'")
    if axis is None or len(axis) != 1:
        raise imp.error("input 'axis' must be one integer")
    attrs = {k: bool(node.attrs.get(k, 0)) for k in ("exclusive", "reverse")}
    axis = _normalised(imp, axis, len(shape_of(x)))
    return [imp.emit(ai.CumSumOp, x, axis=axis[0], **attrs)]


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def _arg_reduce(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    op = ai.ArgMaxOp if node.op_type == "ArgMax" else ai.ArgMinOp
    axis = _normalised(imp, [int(node.attrs.get("axis", 0))], len(shape_of(x)))[0]
    flags = {k: bool(node.attrs.get(k, d)) for k, d in (("keepdims", 1), ("select_last_index", 0))}
    return [imp.emit(op, x, axis=axis, **flags)]


_REDUCTIONS = {
    "ReduceMean": ai.ReduceMeanOp,
    "ReduceSum": ai.ReduceSumOp,
    "ReduceMax": ai.ReduceMaxOp,
}


@converter(*_REDUCTIONS, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def _reduce(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    axes = _axes(imp, node, 1) or []
    keep = bool(node.attrs.get("keepdims", 1))
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        return [x]
    axes = sorted(_normalised(imp, axes, len(shape_of(x)))) if axes else []
    return [imp.emit(_REDUCTIONS[node.op_type], x, axes=axes, keepdims=keep)]


def _reduction_axes(imp: Importer, node: Node, x: SSAValue) -> list[int] | None:
    """The sorted axes a Reduce* node reduces (all of them: []), or None when it is the
    identity (no axes and ``noop_with_empty_axes``)."""
    axes = _axes(imp, node, 1) or []
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        return None
    return sorted(_normalised(imp, axes, len(shape_of(x)))) if axes else []


def _reduce_with(
    imp: Importer, op: type[ai.AiOp], x: SSAValue, axes: Sequence[int], keep: bool
) -> SSAValue:
    return imp.emit(op, x, axes=axes, keepdims=keep)


def _log_sum_exp(imp: Importer, x: SSAValue, axes: Sequence[int], keep: bool) -> SSAValue:
    """log(sum(exp(x - m))) + m with m the maximum clipped to the type's finite range: no
    overflow, and an infinite maximum still gives +-inf (not inf - inf = NaN)."""
    m = _finite_max(imp, x, axes)
    shifted = imp.emit(ai.SubOp, x, m)
    total = _reduce_with(imp, ai.ReduceSumOp, imp.emit(ai.ExpOp, shifted), axes, True)
    y = imp.emit(ai.AddOp, imp.emit(ai.LogOp, total), m)
    return y if keep else _reshape_to(imp, y, _reduced_shape(shape_of(x), axes))


def _finite_max(imp: Importer, x: SSAValue, axes: Sequence[int]) -> SSAValue:
    """The maximum over ``axes`` (kept as size-1 dims), clipped to the largest finite
    value of x's element type."""
    largest = float(np.finfo(np.float16).max) if dtype_of(x) == "f16" else 3.3e38
    m = _reduce_with(imp, ai.ReduceMaxOp, x, axes, True)
    return imp.emit(ai.ClipOp, m, min=-largest, max=largest)


def _product(imp: Importer, x: SSAValue, axes: Sequence[int], keep: bool) -> SSAValue:
    """The product over ``axes`` (all when empty) as ``ai.mul`` of slices: each axis
    halved until it has one element, its first half times its second (an odd middle
    element carried over), so ceil(log2 n) multiplies per axis of n, and every target
    computes it with the ops it has (pairwise, as accurate as a sequential product)."""
    shape = shape_of(x)
    y = x
    for axis in axes or range(len(shape)):
        while (size := shape_of(y)[axis]) > 1:
            half = size // 2
            first, second = (
                _slice_of(imp, y, [start], [start + half], [axis], [1]) for start in (0, half)
            )
            product = imp.emit(ai.MulOp, first, second)
            if size % 2:  # the last element, not multiplied yet, joins the next round
                last = _slice_of(imp, y, [size - 1], [size], [axis], [1])
                product = imp.emit(ai.ConcatOp, product, last, axis=axis)
            y = product
    return y if keep else _reshape_to(imp, y, _reduced_shape(shape, axes))


def _reduced_shape(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    every = set(axes) if axes else set(range(len(shape)))
    return tuple(d for i, d in enumerate(shape) if i not in every)


def _square(imp: Importer, x: SSAValue) -> SSAValue:
    return imp.emit(ai.MulOp, x, x)


@converter(
    "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", attrs=("axes", "keepdims", "noop_with_empty_axes"),
)  # fmt: skip
def _composite_reduce(imp: Importer, node: Node) -> list[SSAValue]:
    """The other reductions, written with ReduceMax/ReduceSum and elementwise ops:
    min = -max(-x), L1 = sum |x|, L2 = sqrt(sum x^2), log-sum and a stable log-sum-exp;
    the product as halves multiplied pairwise (``_product``).
    With no axes and ``noop_with_empty_axes`` each is its elementwise part alone, as the
    ONNX reference computes it."""
    x = imp.input(node, 0)
    keep = bool(node.attrs.get("keepdims", 1))
    axes = _reduction_axes(imp, node, x)
    kind = node.op_type
    if axes is None:
        elementwise: dict[str, Callable[[], SSAValue]] = {
            "ReduceMin": lambda: x,
            "ReduceL1": lambda: imp.emit(ai.AbsOp, x),
            "ReduceL2": lambda: imp.emit(ai.AbsOp, x),
            "ReduceSumSquare": lambda: _square(imp, x),
            "ReduceLogSum": lambda: imp.emit(ai.LogOp, x),
            "ReduceLogSumExp": lambda: x,
            "ReduceProd": lambda: x,
        }
        return [elementwise[kind]()]
    if kind == "ReduceProd":
        return [_product(imp, x, axes, keep)]
    if kind == "ReduceMin":
        largest = _reduce_with(imp, ai.ReduceMaxOp, imp.emit(ai.NegOp, x), axes, keep)
        return [imp.emit(ai.NegOp, largest)]
    if kind == "ReduceLogSumExp":
        return [_log_sum_exp(imp, x, axes, keep)]
    summand = {
        "ReduceL1": lambda: imp.emit(ai.AbsOp, x),
        "ReduceL2": lambda: _square(imp, x),
        "ReduceSumSquare": lambda: _square(imp, x),
        "ReduceLogSum": lambda: x,
    }[kind]()
    total = _reduce_with(imp, ai.ReduceSumOp, summand, axes, keep)
    if kind == "ReduceL2":
        return [imp.emit(ai.SqrtOp, total)]
    if kind == "ReduceLogSum":
        return [imp.emit(ai.LogOp, total)]
    return [total]


@converter("LogSoftmax", attrs=("axis",))
def _log_softmax(imp: Importer, node: Node) -> list[SSAValue]:
    """x - m - log(sum(exp(x - m))) over the axis (m its clipped maximum): no overflow,
    and no log of an underflowed probability."""
    x = imp.input(node, 0)
    return [log_softmax(imp, x, _softmax_axis(imp, node, x))]


def log_softmax(imp: Importer, x: SSAValue, axis: int) -> SSAValue:
    """``x - m - log(sum(exp(x - m)))`` over ``axis`` (in [0, rank); m the clipped
    maximum), as ai ops: LogSoftmax, and SoftmaxCrossEntropyLoss's log-probabilities."""
    shifted = imp.emit(ai.SubOp, x, _finite_max(imp, x, [axis]))
    total = _reduce_with(imp, ai.ReduceSumOp, imp.emit(ai.ExpOp, shifted), [axis], True)
    return imp.emit(ai.SubOp, shifted, imp.emit(ai.LogOp, total))
