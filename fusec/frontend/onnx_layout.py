"""ONNX layout and data movement operators as ai ops: Reshape, Flatten, (Un)Squeeze,
Transpose, Slice, Split, Concat, Gather, Expand, Tile, DepthToSpace/SpaceToDepth,
Trilu, Pad and CenterCropPad; the slice, pick and pad helpers other families use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import (
    _axes,
    _constant_ints,
    _dims_text,
    _normalised,
    _reshape_to,
    converter,
)
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from fusec.frontend.onnx_core import Importer, Node


@converter("Reshape", attrs=("allowzero",))
def _reshape(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    target = _constant_ints(imp, node, 1, "input 'shape'")
    if target is None:
        raise imp.error("input 'shape' is required")
    source = shape_of(x)
    dims = []
    for i, d in enumerate(target):
        if d == 0 and not node.attrs.get("allowzero", 0):
            if i >= len(source):
                raise imp.error(f"shape {target}: 0 at {i} copies a dim the input lacks")
            d = source[i]
        dims.append(d)
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise imp.error(f"shape {target} is not a valid target shape")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        total = math.prod(source)
        if known == 0 or total % known:
            raise imp.error(f"cannot reshape {x.type} to {target}")
        dims[dims.index(-1)] = total // known
    return [_reshape_to(imp, x, dims)]


@converter("Flatten", attrs=("axis",))
def _flatten(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    axis = node.attrs.get("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise imp.error(f"axis {axis} is out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    return [_reshape_to(imp, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))]


@converter("Squeeze", attrs=("axes",))
def _squeeze(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    axes = _axes(imp, node, 1)
    chosen = set(_normalised(imp, axes, len(shape)) if axes else range(len(shape)))
    if axes and any(shape[a] != 1 for a in chosen):
        raise imp.error(f"cannot squeeze axes {axes} of {x.type}: not all of size 1")
    kept = [d for i, d in enumerate(shape) if not (i in chosen and d == 1)]
    return [_reshape_to(imp, x, kept)]


@converter("Unsqueeze", attrs=("axes",))
def _unsqueeze(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    axes = _axes(imp, node, 1)
    if not axes:
        raise imp.error("needs axes")
    rank = len(shape_of(x)) + len(axes)
    chosen = set(_normalised(imp, axes, rank))
    dims = iter(shape_of(x))
    return [_reshape_to(imp, x, [1 if i in chosen else next(dims) for i in range(rank)])]


@converter("Transpose", attrs=("perm",))
def _transpose(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    perm = tuple(int(p) for p in node.attrs.get("perm", range(rank - 1, -1, -1)))
    if perm == tuple(range(rank)):
        return [x]
    return [imp.emit(ai.TransposeOp, x, perm=perm)]


def _slice_of(imp: Importer, x: SSAValue, starts, ends, axes, steps) -> SSAValue:
    """ONNX Slice semantics (negative indices count from the end, clamping) as ai.slice."""
    shape = shape_of(x)
    offsets, sizes, strides = _slice_window(imp, shape, starts, ends, axes, steps)
    if 0 in sizes:
        raise imp.error(
            f"slicing axis {sizes.index(0)} gives an empty tensor: fusec does not support "
            "empty tensors",
            "attribute",
        )
    if tuple(sizes) == shape and all(s == 1 for s in strides):
        return x
    return imp.emit(ai.SliceOp, x, offsets=offsets, sizes=sizes, strides=strides)


def _slice_window(
    imp: Importer, shape: tuple[int, ...], starts, ends, axes, steps
) -> tuple[list[int], list[int], list[int]]:
    """The offsets, sizes (0 where a slice is empty) and strides per dim of an ONNX
    Slice of a tensor of ``shape``."""
    rank = len(shape)
    axes = _normalised(imp, axes if axes is not None else range(len(starts)), rank)
    steps = steps if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise imp.error("starts, ends, axes and steps must have the same length")
    offsets, sizes, strides = [0] * rank, list(shape), [1] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        dim = shape[axis]
        if step == 0:
            raise imp.error("a step is 0")
        start, end = (v + dim if v < 0 else v for v in (start, end))
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        count = max(0, -(-(end - start) // step))
        offsets[axis], sizes[axis], strides[axis] = start, count, step
    return offsets, sizes, strides


@converter("Slice", attrs=("starts", "ends", "axes"))
def _slice(imp: Importer, node: Node) -> list[SSAValue | None]:
    """ai.slice; an empty slice is an empty constant (``_empty_result``): Phi-3's
    partial-rotary pass-through ``q[..., rot:]`` with rot = head_dim, which the
    TorchScript exporter keeps and concatenates."""
    x = imp.input(node, 0)
    if "starts" in node.attrs:  # opset < 10
        starts: list[int] | None = list(node.attrs["starts"])
        ends: list[int] | None = list(node.attrs.get("ends", []))
        axes, steps = node.attrs.get("axes"), None
    else:
        starts = _constant_ints(imp, node, 1, "input 'starts'")
        ends = _constant_ints(imp, node, 2, "input 'ends'")
        axes = _constant_ints(imp, node, 3, "input 'axes'")
        steps = _constant_ints(imp, node, 4, "input 'steps'")
    if starts is None or ends is None:
        raise imp.error("starts and ends are required")
    big = 2**62  # INT64_MAX and friends mean "to the end"
    clip = [max(min(v, big), -big) for v in ends]
    _, sizes, _ = _slice_window(imp, shape_of(x), list(starts), clip, axes, steps)
    if 0 in sizes:
        _empty_result(imp, node.proto.output[0], sizes, dtype_of(x))
        return [None]
    return [_slice_of(imp, x, list(starts), clip, axes, steps)]


def _empty_result(imp: Importer, name: str, shape: Sequence[int], dtype: str) -> None:
    """Record result ``name`` of zero elements as the constant it is (it has no data to
    compute): Concat leaves it out, an operator whose inputs are all constants is
    evaluated at import, and any other use is a located error (``Importer.constant``
    refuses empty tensors)."""
    imp.arrays[name] = np.empty(tuple(shape), dtype=numpy_dtype(dtype))


@converter("Split", attrs=("axis", "split", "num_outputs"))
def _split(imp: Importer, node: Node) -> list[SSAValue | None]:
    """Slices along the axis; a part of size 0 is an empty constant (``_empty_result``;
    RoPE graphs split off the values not rotated, none when all are)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    axis = _normalised(imp, [node.attrs.get("axis", 0)], len(shape))[0]
    outputs = len(node.proto.output)
    parts = node.attrs.get("split") or _constant_ints(imp, node, 1, "input 'split'")
    if not parts:
        count = node.attrs.get("num_outputs", outputs)
        chunk = -(-shape[axis] // count)
        parts = [min(chunk, shape[axis] - i * chunk) for i in range(count)]
    if sum(parts) != shape[axis] or len(parts) != outputs or min(parts) < 0:
        raise imp.error(f"split {list(parts)} does not divide axis {axis} of {x.type}")
    results: list[SSAValue | None] = []
    start = 0
    for name, size in zip(node.proto.output, parts, strict=True):
        if size == 0:
            _empty_result(imp, name, shape[:axis] + (0,) + shape[axis + 1 :], dtype_of(x))
            results.append(None)
            continue
        results.append(_slice_of(imp, x, [start], [start + size], [axis], [1]))
        start += size
    return results


@converter("Concat", attrs=("axis",))
def _concat(imp: Importer, node: Node) -> list[SSAValue]:
    names = [n for n in node.proto.input if n]
    empty = {n for n in names if n in imp.arrays and imp.arrays[n].size == 0}
    values = [imp.value(n) for n in names if n not in empty]  # empty tensors add nothing
    if not values:
        raise imp.error("all inputs are empty: fusec does not support empty tensors")
    if "axis" not in node.attrs:
        raise imp.error("attribute 'axis' is required")
    if len(values) == 1:
        return values
    return [imp.emit(ai.ConcatOp, *values, axis=int(node.attrs["axis"]))]


@converter("Gather", attrs=("axis",))
def _gather(imp: Importer, node: Node) -> list[SSAValue]:
    """Constant indices (any rank): ai.gather of the flat indices, reshaped."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    axis = _normalised(imp, [node.attrs.get("axis", 0)], len(shape))[0]
    name = node.proto.input[1]
    indices = imp.arrays.get(name)
    if indices is None:  # an embedding lookup: ai.take at the run-time indices
        return [imp.emit(ai.TakeOp, x, imp.input(node, 1), axis=axis)]
    flat = [int(i) + shape[axis] if i < 0 else int(i) for i in np.asarray(indices).reshape(-1)]
    if any(not 0 <= i < shape[axis] for i in flat):
        raise imp.error(f"an index is out of range for axis {axis} of {x.type}")
    out_shape = shape[:axis] + tuple(np.shape(indices)) + shape[axis + 1 :]
    if flat == list(range(shape[axis])):
        picked = x
    elif len(flat) == 1 or flat == list(range(flat[0], flat[0] + len(flat))):
        picked = _slice_of(imp, x, [flat[0]], [flat[0] + len(flat)], [axis], [1])
    else:
        picked = imp.emit(ai.GatherOp, x, axis=axis, indices=flat)
    return [_reshape_to(imp, picked, out_shape)]


@converter("Expand")
def _expand(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.expand to the broadcast of x's shape and the constant shape input (a GQA K/V
    head repeat, a mask over the batch)."""
    x = imp.input(node, 0)
    target = _constant_ints(imp, node, 1, "input 'shape'")
    if target is None:
        raise imp.error("input 'shape' is required")
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(shape_of(x), tuple(target)))
    except ValueError:
        raise imp.error(f"{x.type} does not broadcast to {_dims_text(target)}") from None
    return [x if shape == shape_of(x) else imp.emit(ai.ExpandOp, x, shape=shape)]


@converter("Tile")
def _tile(imp: Importer, node: Node) -> list[SSAValue]:
    """``x`` repeated ``repeats[d]`` times along each dim d: each dim split into
    (1, n), expanded to (r, n) and merged again (a reshape, an ai.expand, a reshape)."""
    x = imp.input(node, 0)
    repeats = _constant_ints(imp, node, 1, "input 'repeats'")
    shape = shape_of(x)
    if repeats is None or len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise imp.error(f"input 'repeats' must be {len(shape)} non-negative integers")
    if all(r == 1 for r in repeats):
        return [x]
    split = _reshape_to(imp, x, [d for n in shape for d in (1, n)])
    wide = tuple(d for r, n in zip(repeats, shape, strict=True) for d in (r, n))
    expanded = imp.emit(ai.ExpandOp, split, shape=wide)
    return [_reshape_to(imp, expanded, [r * n for r, n in zip(repeats, shape, strict=True)])]


def _pick(imp: Importer, x: SSAValue, axis: int, indices: Sequence[int]) -> SSAValue:
    """The slices ``indices`` of ``axis`` (in [0, dim)): x itself, a slice or ai.gather."""
    flat = [int(i) for i in indices]
    if flat == list(range(shape_of(x)[axis])):
        return x
    if flat == list(range(flat[0], flat[0] + len(flat))):
        return _slice_of(imp, x, [flat[0]], [flat[0] + len(flat)], [axis], [1])
    return imp.emit(ai.GatherOp, x, axis=axis, indices=flat)


@converter("DepthToSpace", "SpaceToDepth", attrs=("blocksize", "mode"))
def _depth_space(imp: Importer, node: Node) -> list[SSAValue]:
    """A reshape, a transpose and a reshape (DCR or CRD order of the channel blocks)."""
    x = imp.input(node, 0)
    if len(shape_of(x)) != 4:
        raise imp.error(f"input must be N x C x H x W, got {x.type}")
    n, c, h, w = shape_of(x)
    if "blocksize" not in node.attrs:
        raise imp.error("attribute 'blocksize' is required")
    b = int(node.attrs["blocksize"])
    mode = node.attrs.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise imp.error(f"mode '{mode}' is not DCR or CRD")
    if node.op_type == "SpaceToDepth":
        if b <= 0 or h % b or w % b:
            raise imp.error(f"blocksize {b} does not divide the spatial dims {h}x{w}")
        blocks = _reshape_to(imp, x, (n, c, h // b, b, w // b, b))
        perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
        moved = imp.emit(ai.TransposeOp, blocks, perm=perm)
        return [_reshape_to(imp, moved, (n, c * b * b, h // b, w // b))]
    if b <= 0 or c % (b * b):
        raise imp.error(f"blocksize {b} squared does not divide the {c} channels")
    depth = c // (b * b)
    if mode == "DCR":
        blocks = _reshape_to(imp, x, (n, b, b, depth, h, w))
        perm = (0, 3, 4, 1, 5, 2)
    else:
        blocks = _reshape_to(imp, x, (n, depth, b, b, h, w))
        perm = (0, 1, 4, 2, 5, 3)
    moved = imp.emit(ai.TransposeOp, blocks, perm=perm)
    return [_reshape_to(imp, moved, (n, depth, h * b, w * b))]


@converter("Trilu", attrs=("upper",))
def _trilu(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.where of a constant triangular mask over the last two dims (a constant input is
    evaluated at import instead)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) < 2:
        raise imp.error(f"input must have at least 2 dims, got {x.type}")
    k = _constant_ints(imp, node, 1, "input 'k'")
    offset = k[0] if k else 0
    rows, cols = shape[-2:]
    upper = bool(node.attrs.get("upper", 1))
    mask = (
        np.triu(np.ones((rows, cols)), offset) if upper else np.tril(np.ones((rows, cols)), offset)
    )
    if mask.all():
        return [x]
    zero = imp.scalar(0.0, x)
    return [imp.emit(ai.WhereOp, imp.constant(mask, dtype_of(x)), x, zero)]


@converter("Pad", attrs=("mode", "pads", "value"))
def _pad(imp: Importer, node: Node) -> list[SSAValue]:
    """Per padded axis: constant mode concatenates blocks of the value (negative pads
    slice); edge, reflect and wrap are one ai.gather of the indices they repeat."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    rank = len(shape)
    pads = node.attrs.get("pads")
    pads = (
        [int(p) for p in pads] if pads is not None else _constant_ints(imp, node, 1, "input 'pads'")
    )
    if pads is None:
        raise imp.error("the pads are required")
    axes = _constant_ints(imp, node, 3, "input 'axes'") if imp.opset >= 18 else None
    axes = _normalised(imp, axes if axes is not None else range(rank), rank)
    if len(pads) != 2 * len(axes):
        raise imp.error(f"{len(pads)} pads for {len(axes)} axes (two per axis)")
    mode = node.attrs.get("mode", "constant")
    value: float | SSAValue = float(node.attrs.get("value", 0.0))
    known = imp.array(node, 2)
    if imp.optional_input_name(node, 2) is not None:
        if known is not None:
            value = float(np.asarray(known).reshape(-1)[0]) if known.size else 0.0
        elif mode == "constant":  # computed at run time: broadcast into the pad blocks
            value = _reshape_to(imp, imp.input(node, 2), ())
    y = x
    for axis, begin, end in zip(axes, pads[: len(axes)], pads[len(axes) :], strict=True):
        if begin or end:
            y = _pad_axis(imp, y, axis, begin, end, mode, value)
    return [y]


@converter("CenterCropPad", attrs=("axes",))
def _center_crop_pad(imp: Importer, node: Node) -> list[SSAValue]:
    """Each axis cropped (a slice) or zero-padded (concatenated zero blocks) to the
    constant shape, centred (the odd element at the end)."""
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    target = _constant_ints(imp, node, 1, "input 'shape'")
    axes = _normalised(imp, [int(a) for a in node.attrs.get("axes", range(rank))], rank)
    if target is None or len(target) != len(axes) or min(target) < 1:
        raise imp.error(f"input 'shape' must be {len(axes)} positive sizes")
    y = x
    for axis, size in zip(axes, target, strict=True):
        dim = shape_of(y)[axis]
        if size < dim:
            start = (dim - size) // 2
            y = _slice_of(imp, y, [start], [start + size], [axis], [1])
        elif size > dim:
            begin = (size - dim) // 2
            y = _pad_axis(imp, y, axis, begin, size - dim - begin, "constant", 0.0)
    return [y]


def _pad_axis(
    imp: Importer,
    x: SSAValue,
    axis: int,
    begin: int,
    end: int,
    mode: str,
    value: float | SSAValue,
) -> SSAValue:
    """``x`` padded along ``axis`` (``value``: the constant, or a rank-0 value computed
    at run time, of constant mode)."""
    dim = shape_of(x)[axis]
    if mode == "constant":
        kept = _slice_of(imp, x, [max(-begin, 0)], [dim - max(-end, 0)], [axis], [1])
        parts = []
        for count in (begin, None, end):
            if count is None:
                parts.append(kept)
            elif count > 0:
                block = list(shape_of(x))
                block[axis] = count
                parts.append(
                    imp.constant(np.full(block, value), dtype_of(x))
                    if isinstance(value, float)
                    else imp.emit(ai.ExpandOp, value, shape=block)
                )
        return parts[0] if len(parts) == 1 else imp.emit(ai.ConcatOp, *parts, axis=axis)
    if min(begin, end) < 0:
        raise imp.error(f"negative pads in mode '{mode}' are not supported", "attribute")
    positions = range(-begin, dim + end)
    if mode == "edge":
        indices = [min(max(i, 0), dim - 1) for i in positions]
    elif mode == "wrap":
        indices = [i % dim for i in positions]
    elif mode == "reflect":
        if dim < 2 or max(begin, end) >= dim:
            raise imp.error(f"reflect pads of {max(begin, end)} need a dim above it, got {dim}")
        indices = [-i if i < 0 else 2 * (dim - 1) - i if i >= dim else i for i in positions]
    else:
        raise imp.error(f"mode '{mode}' is not supported", "attribute")
    return _pick(imp, x, axis, indices)
