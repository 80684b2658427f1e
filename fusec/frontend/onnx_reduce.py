"""ONNX reductions as ai ops: ReduceMean/Sum/Max directly, the other Reduce* written
with them and elementwise ops, Softmax and a stable LogSoftmax, ArgMax/ArgMin, CumSum.
Integer and bool reductions whose values are bounded compute in f32, exactly
(``_integer_reduction``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation, SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _axes, _constant_ints, _normalised, _reshape_to, converter
from fusec.frontend.onnx_layout import _slice_of
from fusec.ir.constants import constant_value, is_constant
from fusec.ir.dtypes import FLOAT_TYPES, INT_TYPES
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
    keep = bool(node.attrs.get("keepdims", 1))
    axes = _reduction_axes(imp, node, x)
    if axes is None:
        return [x]
    if dtype_of(x) in _INTEGERS:
        return [_integer_reduction(imp, node.op_type, x, axes, keep)]
    return [_reduce_with(imp, _REDUCTIONS[node.op_type], x, axes, keep)]


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
    if dtype_of(x) in _INTEGERS and kind != "ReduceProd":  # (ai.mul multiplies integers)
        return [_integer_reduction(imp, kind, x, axes, keep)]
    return [_reduction(imp, kind, x, axes, keep)]


def _reduction(imp: Importer, kind: str, x: SSAValue, axes: Sequence[int], keep: bool) -> SSAValue:
    """Reduce* ``kind`` of ``x`` over ``axes`` (all when empty) in x's element type: a
    float (the ai reductions take floats), or an integer for ReduceProd (ai.mul)."""
    if kind in _REDUCTIONS:
        return _reduce_with(imp, _REDUCTIONS[kind], x, axes, keep)
    if kind == "ReduceProd":
        return _product(imp, x, axes, keep)
    if kind == "ReduceMin":
        largest = _reduce_with(imp, ai.ReduceMaxOp, imp.emit(ai.NegOp, x), axes, keep)
        return imp.emit(ai.NegOp, largest)
    if kind == "ReduceLogSumExp":
        return _log_sum_exp(imp, x, axes, keep)
    summand = {
        "ReduceL1": lambda: imp.emit(ai.AbsOp, x),
        "ReduceL2": lambda: _square(imp, x),
        "ReduceSumSquare": lambda: _square(imp, x),
        "ReduceLogSum": lambda: x,
    }[kind]()
    total = _reduce_with(imp, ai.ReduceSumOp, summand, axes, keep)
    if kind == "ReduceL2":
        return imp.emit(ai.SqrtOp, total)
    if kind == "ReduceLogSum":
        return imp.emit(ai.LogOp, total)
    return total


#: The element types ``_integer_reduction`` reduces (a quantized type is refused by the
#: ai reduction it reaches: ai.dequantize reads those).
_INTEGERS = (*INT_TYPES, "i1")

#: Every integer up to this magnitude is an f32 (2**24: its 24-bit significand).
_F32_EXACT = 2**24

#: The integer reductions computed in f32: the largest magnitude any partial result can
#: reach, from the largest input magnitude m and the count n of values reduced into one.
#: A maximum or minimum is one of the values; a sum's partial sums (in whatever order a
#: kernel adds) are sums of some of the terms, each at most m (L1) or m*m (squares).
_INTEGER_REDUCTIONS: dict[str, Callable[[int, int], int]] = {
    "ReduceMax": lambda m, n: m,
    "ReduceMin": lambda m, n: m,
    "ReduceSum": lambda m, n: m * n,
    "ReduceL1": lambda m, n: m * n,
    "ReduceSumSquare": lambda m, n: m * m * n,
}


def _integer_reduction(
    imp: Importer, kind: str, x: SSAValue, axes: Sequence[int], keep: bool
) -> SSAValue:
    """Reduce* ``kind`` of integer or bool ``x``: the ai reductions take floats, so x is
    cast to f32, reduced and cast back. That is exact when every value and every
    partial result is an integer f32 holds (magnitude <= 2**24), which the bounds of x
    (``_integer_range``) and the count reduced show at import: T5's f16 overflow guard
    ``isinf(h).any()`` exports as Cast(bool -> int64) -> ReduceMax (dynamo) or ReduceSum
    (TorchScript), 0s and 1s. Where the bound is unknown or too large, and for the
    reductions whose result is not an integer (mean, L2, logs; ONNX truncates them), a
    located error says so."""
    dtype = dtype_of(x)
    reach = _INTEGER_REDUCTIONS.get(kind)
    if reach is None:
        raise imp.error(
            f"{kind} of {dtype} values is not supported: fusec reduces integers and bools "
            f"with {', '.join(_INTEGER_REDUCTIONS)} and ReduceProd",
            "dtype",
        )
    span = _integer_range(x)
    if span is None:
        raise imp.error(
            f"{kind} of {x.type} is not supported: fusec reduces integers in f32, exact "
            "for values it can bound at import (bools, casts of bools, constants, and "
            "those moved, selected or negated), and these values are not bounded",
            "dtype",
        )
    shape = shape_of(x)
    count = math.prod(shape[a] for a in axes) if axes else math.prod(shape)
    largest = reach(max(abs(span[0]), abs(span[1])), count)
    if largest > _F32_EXACT:
        raise imp.error(
            f"{kind} of {x.type} (values in [{span[0]}, {span[1]}], {count} reduced into "
            f"each result) could reach {largest}: fusec reduces integers in f32, exact up "
            f"to {_F32_EXACT} (2**24)",
            "dtype",
        )
    y = _reduction(imp, kind, imp.emit(ai.CastOp, x, "f32"), axes, keep)
    return imp.emit(ai.CastOp, y, dtype)


#: Ops whose result holds only values of their operands (moved, repeated, chosen).
_MOVES = (
    ai.ReshapeOp,
    ai.TransposeOp,
    ai.SliceOp,
    ai.ExpandOp,
    ai.GatherOp,
    ai.ConcatOp,
    ai.MaximumOp,
    ai.MinimumOp,
)

#: How many ops back ``_integer_range`` looks.
_RANGE_DEPTH = 32


def _integer_range(value: SSAValue, depth: int = 0) -> tuple[int, int] | None:
    """Bounds (low, high) on the values of integer or bool ``value``, from the ops that
    made it: a bool is 0 or 1; a cast of an integer or a bool keeps its bounds (when
    they fit the target type); a constant has its own; moves, selections (ai.where's
    two sides, ai.take's table) and maxima have their operands' hull, a negation the
    mirror. None when nothing bounds it (an argument, integer arithmetic)."""
    if dtype_of(value) == "i1":
        return (0, 1)
    op = value.owner
    if not isinstance(op, Operation) or depth > _RANGE_DEPTH:
        return None
    if is_constant(op):
        data = constant_value(op)
        return (int(data.min()), int(data.max())) if data.size else None
    operands: Sequence[SSAValue]
    if isinstance(op, ai.CastOp):
        if dtype_of(op.input) in FLOAT_TYPES:
            return None
        span = _integer_range(op.input, depth + 1)
        info = np.iinfo(np.int32 if dtype_of(value) == "i32" else np.int64)
        return span if span is not None and info.min <= span[0] <= span[1] <= info.max else None
    if isinstance(op, ai.NegOp):
        span = _integer_range(op.input, depth + 1)
        return None if span is None else (-span[1], -span[0])
    if isinstance(op, _MOVES):
        operands = op.operands
    elif isinstance(op, ai.WhereOp):
        operands = op.operands[1:]
    elif isinstance(op, ai.TakeOp):
        operands = [op.table]
    else:
        return None
    spans = [_integer_range(v, depth + 1) for v in operands]
    known = [s for s in spans if s is not None]
    if len(known) != len(spans) or not known:
        return None
    return (min(s[0] for s in known), max(s[1] for s in known))


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
