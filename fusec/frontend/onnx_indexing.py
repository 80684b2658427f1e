"""ONNX operators that pick elements by index, as ai ops: ``GatherElements``,
``Hardmax`` and ``OneHot``.

* ``GatherElements`` with constant indices (what exporters and the conformance suite
  give) is one ``ai.gather`` of the flattened data at the flat positions, computed at
  import, reshaped to the indices' shape. With indices computed at run time it is a
  one-hot select: ``indices == iota`` along a new axis next to ``axis``, ``ai.where``
  of the data there (else 0) and a sum over the new axis (float data; a select, so a
  non-finite element that is not picked stays out).
* ``Hardmax``: 1 at the first maximum along the axis, else 0: ``ai.argmax`` (keepdims)
  compared with the axis' iota, cast to the input's type.
* ``OneHot``: the indices (negative ones wrapped) compared with the iota of a new axis
  of the constant ``depth``, selecting ``on`` or ``off``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_import import (
    _normalised,
    _reshape_to,
    _slice_of,
    _softmax_axis,
    converter,
    dtype_of,
    shape_of,
)
from fusec.ir.dtypes import FLOAT_TYPES

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_import import Importer, Node


def one_hot(imp: Importer, indices: SSAValue, axis: int, depth: int) -> SSAValue:
    """i1 of ``indices``' shape with a new dim of ``depth`` inserted at ``axis``: true
    where the index equals the position along the new dim."""
    shape = shape_of(indices)
    column = _reshape_to(imp, indices, shape[:axis] + (1,) + shape[axis:])
    iota = np.arange(depth).reshape((1,) * axis + (depth,) + (1,) * (len(shape) - axis))
    return imp.emit(ai.EqualOp, column, imp.constant(iota, dtype_of(indices)))


@converter("GatherElements", attrs=("axis",))
def _gather_elements(imp: Importer, node: Node) -> list[SSAValue]:
    data = imp.input(node, 0)
    shape = shape_of(data)
    axis = _normalised(imp, [int(node.attrs.get("axis", 0))], len(shape))[0]
    known = imp.array(node, 1)
    index_shape = tuple(known.shape) if known is not None else shape_of(imp.input(node, 1))
    _check_index_shape(imp, shape, index_shape, axis)
    if known is not None:
        return [_gather_constant(imp, data, np.asarray(known, dtype=np.int64), axis)]
    return [_gather_at_run_time(imp, data, imp.input(node, 1), axis)]


def _check_index_shape(
    imp: Importer, shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int
) -> None:
    if len(index_shape) != len(shape):
        raise imp.error(f"the indices have rank {len(index_shape)}, the data {len(shape)}")
    if any(i > d for k, (i, d) in enumerate(zip(index_shape, shape, strict=True)) if k != axis):
        raise imp.error(f"the indices' shape {list(index_shape)} exceeds the data's {list(shape)}")


def _gather_constant(imp: Importer, data: SSAValue, indices: np.ndarray, axis: int) -> SSAValue:
    """One ai.gather of the flattened data at the flat positions the indices name."""
    shape = shape_of(data)
    dim = shape[axis]
    if ((indices < -dim) | (indices >= dim)).any():
        raise imp.error(f"an index is out of range for axis {axis} of {data.type}")
    positions: list[np.ndarray] = list(np.indices(indices.shape))
    positions[axis] = np.where(indices < 0, indices + dim, indices)
    flat = np.ravel_multi_index(tuple(positions), shape).reshape(-1)
    flat_data = _reshape_to(imp, data, (int(np.prod(shape)),))
    picked = imp.emit(ai.GatherOp, flat_data, axis=0, indices=[int(i) for i in flat])
    return _reshape_to(imp, picked, indices.shape)


def _gather_at_run_time(imp: Importer, data: SSAValue, indices: SSAValue, axis: int) -> SSAValue:
    """The one-hot select along a new dim after ``axis``, summed over it."""
    if dtype_of(data) not in FLOAT_TYPES or dtype_of(indices) not in ("i64", "i32"):
        raise imp.error(
            f"indices computed at run time need float data and integer indices, got "
            f"{data.type} and {indices.type}",
            "dtype",
        )
    shape, index_shape = shape_of(data), shape_of(indices)
    dim = shape[axis]
    sizes = [dim if k == axis else i for k, i in enumerate(index_shape)]
    data = _slice_of(imp, data, [0] * len(shape), sizes, list(range(len(shape))), None)
    below = imp.emit(ai.LessOp, indices, imp.constant(np.asarray(0), dtype_of(indices)))
    wrapped = imp.emit(ai.AddOp, indices, imp.constant(np.asarray(dim), dtype_of(indices)))
    indices = imp.emit(ai.WhereOp, below, wrapped, indices)
    hot = one_hot(imp, indices, axis + 1, dim)
    spread = _reshape_to(imp, data, tuple(sizes[:axis]) + (1, dim) + tuple(sizes[axis + 1 :]))
    chosen = imp.emit(ai.WhereOp, hot, spread, imp.scalar(0.0, data))
    return imp.emit(ai.ReduceSumOp, chosen, axes=(axis + 1,), keepdims=False)


@converter("Hardmax", attrs=("axis",))
def _hardmax(imp: Importer, node: Node) -> list[SSAValue]:
    """1 at the first maximum along the axis (ai.argmax), 0 elsewhere."""
    x = imp.input(node, 0)
    axis = _softmax_axis(imp, node, x)
    first = imp.emit(ai.ArgMaxOp, x, axis=axis, keepdims=True)
    iota_shape = [1] * len(shape_of(x))
    iota_shape[axis] = shape_of(x)[axis]
    iota = imp.constant(np.arange(shape_of(x)[axis]).reshape(iota_shape), "i64")
    return [imp.emit(ai.CastOp, imp.emit(ai.EqualOp, first, iota), dtype_of(x))]


@converter("OneHot", attrs=("axis",))
def _one_hot_node(imp: Importer, node: Node) -> list[SSAValue]:
    """``on`` where an index (negative ones from the end; cast to int64 when they are
    floats, as ONNX says) names the position along the new axis, else ``off``; an index
    outside [-depth, depth) names none. ``depth`` must be a constant."""
    indices = imp.input(node, 0)
    depth = imp.array(node, 1)
    if depth is None:
        raise imp.error("depth is computed at run time: fusec needs it constant", "attribute")
    if depth.size != 1 or float(depth.reshape(-1)[0]) < 1:
        raise imp.error(f"depth must be one positive number, got {depth.reshape(-1).tolist()}")
    count = int(depth.reshape(-1)[0])
    rank = len(shape_of(indices)) + 1
    axis = _normalised(imp, [int(node.attrs.get("axis", -1))], rank)[0]
    if dtype_of(indices) not in ("i64", "i32"):
        indices = imp.emit(ai.CastOp, indices, "i64")
    kind = dtype_of(indices)
    below = imp.emit(ai.LessOp, indices, imp.constant(np.asarray(0), kind))
    wrapped = imp.emit(ai.AddOp, indices, imp.constant(np.asarray(count), kind))
    hot = one_hot(imp, imp.emit(ai.WhereOp, below, wrapped, indices), axis, count)
    off, on = _off_on(imp, node)
    return [imp.emit(ai.WhereOp, hot, on, off)]


def _off_on(imp: Importer, node: Node) -> tuple[SSAValue, SSAValue]:
    """OneHot's ``values`` input ``[off, on]`` as two rank-0 values."""
    known = imp.array(node, 2)
    if known is not None:
        if known.shape != (2,):
            raise imp.error(f"values must be [off, on], got shape {list(known.shape)}")
        dtype = imp.dtype_of_array(node.proto.input[2], known)
        return imp.constant(known[0], dtype), imp.constant(known[1], dtype)
    values = imp.input(node, 2)
    if shape_of(values) != (2,):
        raise imp.error(f"values must be [off, on], got {values.type}")
    picks = (imp.emit(ai.SliceOp, values, offsets=[k], sizes=[1], strides=[1]) for k in (0, 1))
    off, on = (_reshape_to(imp, v, ()) for v in picks)
    return off, on
