"""ONNX operators that pick elements by index, as ai ops: ``GatherElements``,
``GatherND``, ``Hardmax``, ``TopK``, ``ReverseSequence`` and ``OneHot``.

* ``GatherElements`` with constant indices (what exporters and the conformance suite
  give) is one ``ai.gather`` of the flattened data at the flat positions, computed at
  import, reshaped to the indices' shape. With indices computed at run time it is a
  one-hot select: ``indices == iota`` along a new axis next to ``axis``, ``ai.where``
  of the data there (else 0) and a sum over the new axis (float data; a select, so a
  non-finite element that is not picked stays out; elementwise ops and a reduction,
  which fuse with their neighbours). Other data (integers, bool) is looked up as
  ``torch.gather``'s is (``index_lookup.lookup``: iotas along the other dims, the
  indices along ``axis``, one ``ai.take`` of the flattened data, which takes every
  element type), where an index outside the axis fails as onnxruntime's does:
  RoBERTa's position ids, computed from ``input_ids``, index its int64
  ``token_type_ids`` buffer so.
* ``GatherND`` picks slices of the data's leading ``batch_dims + k`` dims (``k`` the
  indices' last dim): the data flattened over them, one ``ai.gather`` at the flat
  positions computed at import (constant indices: what the dynamo exporter writes for
  ``mask[batch_idx, kv_idx]`` once the shapes are known; the identity gather is a
  reshape), or one ``ai.take`` at positions computed with integer ops at run time (an
  index outside its dim made to fail the lookup): ``index_lookup.lookup``, which
  PyTorch's advanced indexing lowers to as well.
* ``Hardmax``: 1 at the first maximum along the axis, else 0: ``ai.argmax`` (keepdims)
  compared with the axis' iota, cast to the input's type.
* ``TopK`` (constant K): K selection rounds along the axis, each the maximum of the
  elements not taken yet (``ai.reduce_max``; the smallest: of the negated values) and
  the first untaken position holding it (``ai.argmax`` of the hits), which joins the
  taken ones: sorted, ties to the lower index as ONNX says, exact for infinities; a NaN
  counts as the largest value. About ten elementwise ops and two reductions per round,
  so K is at most ``TOPK_ROUNDS``.
* ``ReverseSequence`` (constant ``sequence_lens``): each batch's slice with its first
  ``sequence_lens[b]`` steps reversed (one ``ai.gather`` along the time axis, or a slice
  when nothing moves), the slices concatenated along the batch axis.
* ``OneHot``: the indices (negative ones wrapped) compared with the iota of a new axis
  of the constant ``depth``, selecting ``on`` or ``off``.
* ``ScatterElements``/``ScatterND`` with constant indices: the flat element each update
  lands on is computed at import; then, in rounds (the first update of each element, the
  second, ...), one ``ai.gather`` of the updates and one ``ai.where`` of a constant mask
  writes or combines them (``reduction`` none, add, mul, max, min) in ONNX's order.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.index_lookup import Item, lookup
from fusec.frontend.onnx_core import _normalised, _reshape_to, converter
from fusec.frontend.onnx_layout import _pick, _slice_of
from fusec.frontend.onnx_reduce import _softmax_axis
from fusec.ir.dtypes import FLOAT_TYPES
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node


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
    flat = _flat_positions(imp, data, indices, axis)
    flat_data = _reshape_to(imp, data, (int(np.prod(shape_of(data))),))
    picked = imp.emit(ai.GatherOp, flat_data, axis=0, indices=[int(i) for i in flat])
    return _reshape_to(imp, picked, indices.shape)


def _flat_positions(imp: Importer, data: SSAValue, indices: np.ndarray, axis: int) -> np.ndarray:
    """The flat positions in ``data`` of the elements ``indices`` names along ``axis``
    (each index's other coordinates its own; a negative index counts from the end); a
    located error for an index out of range."""
    shape = shape_of(data)
    dim = shape[axis]
    if ((indices < -dim) | (indices >= dim)).any():
        raise imp.error(f"an index is out of range for axis {axis} of {data.type}")
    positions: list[np.ndarray] = list(np.indices(indices.shape))
    positions[axis] = np.where(indices < 0, indices + dim, indices)
    return np.ravel_multi_index(tuple(positions), shape).reshape(-1)


def _gather_at_run_time(imp: Importer, data: SSAValue, indices: SSAValue, axis: int) -> SSAValue:
    """Float data: the one-hot select along a new dim after ``axis``, summed over it.
    Other data: one ``ai.take`` (``_take_at_run_time``)."""
    if dtype_of(indices) not in ("i64", "i32"):
        raise imp.error(f"the indices must be integers, got {indices.type}", "dtype")
    if dtype_of(data) not in FLOAT_TYPES:
        return _take_at_run_time(imp, data, indices, axis)
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


def _take_at_run_time(imp: Importer, data: SSAValue, indices: SSAValue, axis: int) -> SSAValue:
    """``data`` at ``indices`` along ``axis``, each element's other coordinates its own:
    the lookup in the flattened data (torch.gather's) of the iotas along the other dims
    and the indices (negative ones counting from the end) along ``axis``."""
    shape, index_shape = shape_of(data), shape_of(indices)
    items: list[Item] = [
        indices if k == axis else np.arange(n).reshape((n,) + (1,) * (len(shape) - k - 1))
        for k, n in enumerate(index_shape)
    ]
    flat = _reshape_to(imp, data, (math.prod(shape),))
    return _reshape_to(imp, lookup(imp, flat, 0, shape, items), index_shape)


@converter("GatherND", attrs=("batch_dims",))
def _gather_nd(imp: Importer, node: Node) -> list[SSAValue]:
    """The data flattened over its leading ``batch_dims + k`` dims, looked up at the
    index tuples (the batch coordinates, then the indices' ``k`` columns): the lookup
    of PyTorch's advanced indexing too (``index_lookup``)."""
    data = imp.input(node, 0)
    shape = shape_of(data)
    batch = int(node.attrs.get("batch_dims", 0))
    known = imp.array(node, 1)
    index_shape = tuple(known.shape) if known is not None else shape_of(imp.input(node, 1))
    depth = _check_nd_shapes(imp, shape, index_shape, batch)
    lead = shape[: batch + depth]
    flat_data = _reshape_to(imp, data, (int(np.prod(lead)),) + shape[batch + depth :])
    out_shape = index_shape[:-1] + shape[batch + depth :]
    extra = (1,) * (len(index_shape) - 1 - batch)
    items: list[Item] = [g.reshape(g.shape + extra) for g in np.indices(index_shape[:batch])]
    if known is not None:
        columns = np.asarray(known, dtype=np.int64)
        items += [columns[..., j] for j in range(depth)]
    else:
        items += _nd_columns(imp, imp.input(node, 1))
    dims = list(lead[batch:])
    picked = lookup(
        imp, flat_data, 0, lead, items,
        out_of_range=lambda k: f"an index is out of range for the data's dims {dims}",
    )  # fmt: skip
    return [_reshape_to(imp, picked, out_shape)]


def _check_nd_shapes(
    imp: Importer, shape: tuple[int, ...], index_shape: tuple[int, ...], batch: int
) -> int:
    """The indices' last dim ``k`` after checking GatherND's shape rules."""
    if not index_shape or not 0 <= batch < min(len(shape), len(index_shape)):
        raise imp.error(
            f"batch_dims {batch} must be below the ranks of the data ({len(shape)}) and "
            f"the indices ({len(index_shape)})"
        )
    depth = index_shape[-1]
    if not 1 <= depth <= len(shape) - batch:
        raise imp.error(f"the indices' last dim {depth} must be in [1, {len(shape) - batch}]")
    if index_shape[:batch] != shape[:batch]:
        raise imp.error(
            f"the first {batch} dims of the indices {list(index_shape)} and the data "
            f"{list(shape)} differ"
        )
    return depth


def _nd_columns(imp: Importer, indices: SSAValue) -> list[Item]:
    """The run-time indices' last dim as ``k`` integer columns."""
    if dtype_of(indices) not in ("i64", "i32"):
        raise imp.error(f"the indices must be integers, got {indices.type}", "dtype")
    index_shape = shape_of(indices)
    columns: list[Item] = []
    for j in range(index_shape[-1]):
        column = imp.emit(
            ai.SliceOp,
            indices,
            offsets=[0] * (len(index_shape) - 1) + [j],
            sizes=list(index_shape[:-1]) + [1],
            strides=[1] * len(index_shape),
        )
        columns.append(_reshape_to(imp, column, index_shape[:-1]))
    return columns


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


@converter("ReverseSequence", attrs=("batch_axis", "time_axis"))
def _reverse_sequence(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    batch_axis, time_axis = (int(node.attrs.get(a, d)) for a, d in (("batch_axis", 1),
                                                                     ("time_axis", 0)))  # fmt: skip
    if len(shape) < 2 or {batch_axis, time_axis} != {0, 1}:
        raise imp.error(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1")
    known = imp.array(node, 1)
    if known is None:
        raise imp.error(
            "sequence_lens is computed at run time: fusec needs it constant", "attribute"
        )
    lengths = [int(n) for n in np.asarray(known).reshape(-1)]
    steps = shape[time_axis]
    if len(lengths) != shape[batch_axis] or not all(0 <= n <= steps for n in lengths):
        raise imp.error(
            f"sequence_lens {lengths} must be {shape[batch_axis]} lengths in [0, {steps}]"
        )
    parts = []
    for b, n in enumerate(lengths):
        row = _slice_of(imp, x, [b], [b + 1], [batch_axis], [1])
        order = [*range(n - 1, -1, -1), *range(n, steps)]
        parts.append(_pick(imp, row, time_axis, order))
    return [parts[0] if len(parts) == 1 else imp.emit(ai.ConcatOp, *parts, axis=batch_axis)]


#: The largest K ``TopK`` unrolls into selection rounds.
TOPK_ROUNDS = 64


@converter("TopK", attrs=("axis", "k", "largest", "sorted"))
def _top_k(imp: Importer, node: Node) -> list[SSAValue]:
    """The K largest (or smallest) values along the axis and their int64 indices, in
    order (``sorted=0`` allows any order; this one is sorted too)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    axis = _normalised(imp, [int(node.attrs.get("axis", -1))], len(shape))[0]
    k = node.attrs.get("k") if imp.opset < 10 else imp.array(node, 1)
    if k is None:
        raise imp.error("K is computed at run time: fusec needs it constant", "attribute")
    count = int(np.asarray(k).reshape(-1)[0])
    if not 1 <= count <= shape[axis]:
        raise imp.error(f"K={count} must be in [1, {shape[axis]}] (the axis' size)")
    if count > TOPK_ROUNDS:
        raise imp.error(f"K={count}: fusec unrolls TopK up to K={TOPK_ROUNDS}", "attribute")
    largest = bool(node.attrs.get("largest", 1))
    work = x if largest else imp.emit(ai.NegOp, x)
    iota_shape = [1] * len(shape)
    iota_shape[axis] = shape[axis]
    iota = imp.constant(np.arange(shape[axis]).reshape(iota_shape), "i64")
    is_nan = imp.emit(ai.NotOp, imp.emit(ai.EqualOp, work, work))
    taken, values, indices = None, [], []
    for round_ in range(count):
        left = work if taken is None else imp.emit(
            ai.WhereOp, taken, imp.scalar(-np.inf, work), work
        )  # fmt: skip
        best = imp.emit(ai.ReduceMaxOp, left, axes=(axis,), keepdims=True)
        hit = imp.emit(ai.OrOp, imp.emit(ai.EqualOp, work, best), is_nan)
        if taken is not None:
            hit = imp.emit(ai.AndOp, hit, imp.emit(ai.NotOp, taken))
        first = imp.emit(ai.ArgMaxOp, imp.emit(ai.CastOp, hit, "i32"), axis=axis, keepdims=True)
        if round_ < count - 1:
            chosen = imp.emit(ai.EqualOp, iota, first)
            taken = chosen if taken is None else imp.emit(ai.OrOp, taken, chosen)
        values.append(best if largest else imp.emit(ai.NegOp, best))
        indices.append(first)
    if count == 1:
        return [values[0], indices[0]]
    return [imp.emit(ai.ConcatOp, *values, axis=axis), imp.emit(ai.ConcatOp, *indices, axis=axis)]


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


_SCATTER_OPS = {
    "none": None,
    "add": ai.AddOp,
    "mul": ai.MulOp,
    "max": ai.MaximumOp,
    "min": ai.MinimumOp,
}


@converter("ScatterElements", "Scatter", attrs=("axis", "reduction"))
def _scatter_elements(imp: Importer, node: Node) -> list[SSAValue]:
    """Each update element written to (or combined with) the data element its index
    names along the axis; the indices must be constants."""
    data, updates = imp.input(node, 0), imp.input(node, 2)
    shape = shape_of(data)
    axis = _normalised(imp, [int(node.attrs.get("axis", 0))], len(shape))[0]
    indices = _scatter_indices(imp, node)
    if indices.shape != shape_of(updates):
        raise imp.error(
            f"the indices' shape {list(indices.shape)} is not the updates' {updates.type}"
        )
    _check_index_shape(imp, shape, indices.shape, axis)
    targets = _flat_positions(imp, data, indices, axis)
    return [_scatter(imp, node, data, updates, targets)]


@converter("ScatterND", attrs=("reduction",))
def _scatter_nd(imp: Importer, node: Node) -> list[SSAValue]:
    """Each update slice written to (or combined with) the data slice its index tuple
    names; the indices must be constants."""
    data, updates = imp.input(node, 0), imp.input(node, 2)
    shape = shape_of(data)
    indices = _scatter_indices(imp, node)
    depth = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or not 1 <= depth <= len(shape):
        raise imp.error(f"the indices' last dim ({depth}) must index 1 to {len(shape)} dims")
    if shape_of(updates) != indices.shape[:-1] + shape[depth:]:
        raise imp.error(f"the updates {updates.type} do not match the indices and the data")
    tuples = indices.reshape(-1, depth)
    lead = np.asarray(shape[:depth])
    if ((tuples < -lead) | (tuples >= lead)).any():
        raise imp.error(f"an index is out of range for {data.type}")
    tuples = np.where(tuples < 0, tuples + lead, tuples)
    inner = math.prod(shape[depth:])
    bases = np.ravel_multi_index(tuple(tuples.T), shape[:depth]) * inner
    targets = (bases[:, None] + np.arange(inner)[None, :]).reshape(-1)
    return [_scatter(imp, node, data, updates, targets)]


def _scatter_indices(imp: Importer, node: Node) -> np.ndarray:
    known = imp.array(node, 1)
    if known is None:
        raise imp.error(
            "the indices are computed at run time: fusec needs them constant", "attribute"
        )
    return np.asarray(known, dtype=np.int64)


def _scatter(
    imp: Importer, node: Node, data: SSAValue, updates: SSAValue, targets: np.ndarray
) -> SSAValue:
    """``data`` with update ``i`` (flat) combined into flat element ``targets[i]``, in
    order: one select per round, round ``r`` holding each element's ``r``-th update
    (so the last write wins without a reduction, and repeated ones combine)."""
    reduction = node.attrs.get("reduction", "none")
    if reduction not in _SCATTER_OPS:
        raise imp.error(f"reduction '{reduction}' is not one of {', '.join(_SCATTER_OPS)}")
    combine = _SCATTER_OPS[reduction]
    shape = shape_of(data)
    size = math.prod(shape)
    flat_updates = _reshape_to(imp, updates, (math.prod(shape_of(updates)),))
    y = _reshape_to(imp, data, (size,))
    for hit, source in _rounds(targets, size):
        picked = imp.emit(ai.GatherOp, flat_updates, axis=0, indices=[int(i) for i in source])
        value = picked if combine is None else imp.emit(combine, y, picked)
        y = imp.emit(ai.WhereOp, imp.constant(hit, "i1"), value, y)
    return _reshape_to(imp, y, shape)


def _rounds(targets: np.ndarray, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(elements hit, the update each takes) per round, in update order."""
    rounds: list[tuple[np.ndarray, np.ndarray]] = []
    seen = np.zeros(size, dtype=np.int64)
    for update, target in enumerate(targets):
        r = seen[target]
        seen[target] += 1
        if r == len(rounds):
            rounds.append((np.zeros(size, dtype=bool), np.zeros(size, dtype=np.int64)))
        rounds[r][0][target] = True
        rounds[r][1][target] = update
    return rounds
