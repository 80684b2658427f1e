"""ONNX ``Resize`` (opset >= 11), ``Upsample`` and ``AffineGrid`` as ai ops. A resize
is one resized axis at a time (ONNX defines it as separable: each axis in turn, in
``axes`` order); AffineGrid is one ai.matmul of the constant homogeneous coordinates of
the output positions with theta.

Everything that depends on positions only is computed at import, from ONNX's
definition: each output position's source coordinate (``coordinate_transformation_mode``:
half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric,
tf_half_pixel_for_nn, tf_crop_and_resize with its ``roi``), and then

* ``nearest``: the source index (``nearest_mode``), so the axis is one ``ai.gather``
  (or a slice, or nothing);
* ``linear`` and ``cubic`` (``cubic_coeff_a``, ``exclude_outside``, ``antialias``): the
  weights of the neighbouring source elements, edge-clamped, as a constant
  ``out x in`` matrix, so the axis is one ``ai.matmul`` with it (in float32 for 16-bit
  data); tf_crop_and_resize's positions outside the input take ``extrapolation_value``
  (an ``ai.where`` of a constant mask).

``sizes`` with ``keep_aspect_ratio_policy`` not_larger / not_smaller use one scale for
every resized axis, as ONNX says. Refused with a reason: scales or sizes computed at run
time, Resize before opset 11 (its coordinates were not specified), antialias in nearest
mode, Upsample in a mode other than nearest or with scales that are not whole numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _normalised, _reshape_to, converter
from fusec.frontend.onnx_layout import _pick
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node

_RESIZE_ATTRS = (
    "mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
    "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy",
)  # fmt: skip
_TRANSFORMS = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize",
)  # fmt: skip


@converter("Resize", "Upsample", attrs=(*_RESIZE_ATTRS, "scales", "height_scale", "width_scale"))
def _resize(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    mode = node.attrs.get("mode", "nearest")
    transform = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Upsample":
        if mode != "nearest":
            raise imp.error(f"Upsample in mode '{mode}' is not supported", "attribute")
        transform = "asymmetric"  # each element repeated scale times
    elif imp.opset < 11:  # its coordinates are not specified: runtimes differ
        raise imp.error(f"Resize of opset {imp.opset} (< 11) is not supported", "attribute")
    if mode not in ("nearest", "linear", "cubic"):
        raise imp.error(f"mode '{mode}' is not nearest, linear or cubic")
    if transform not in _TRANSFORMS:
        raise imp.error(
            f"coordinate_transformation_mode '{transform}' is not supported", "attribute"
        )
    axes = _normalised(imp, [int(a) for a in node.attrs.get("axes", range(len(shape)))], len(shape))
    targets = _axis_targets(imp, node, shape, axes)
    roi = _roi(imp, node, len(axes)) if transform == "tf_crop_and_resize" else None
    y = x
    for k, axis in enumerate(axes):
        scale, out = targets[k]
        window = None if roi is None else (roi[k], roi[len(axes) + k])
        if _is_identity(scale, out, shape[axis], window):
            continue
        coordinates = [
            _source_coordinate(transform, i, scale, shape[axis], out, window) for i in range(out)
        ]
        if mode == "nearest":
            y = _nearest_axis(imp, node, y, axis, coordinates)
        else:
            y = _interpolated_axis(imp, node, y, axis, coordinates, scale)
    return [y]


def _is_identity(scale: float, out: int, length: int, window: tuple[float, float] | None) -> bool:
    """ONNX skips an axis of scale 1 that keeps its length (and its whole roi)."""
    if not math.isclose(scale, 1.0) or out != length:
        return False
    return window is None or (math.isclose(window[0], 0.0) and math.isclose(window[1], 1.0))


def _axis_targets(
    imp: Importer, node: Node, shape: Sequence[int], axes: Sequence[int]
) -> list[tuple[float, int]]:
    """(scale, output length) of each resized axis."""
    scales, sizes = _resize_targets(imp, node, len(axes))
    policy = node.attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise imp.error(f"keep_aspect_ratio_policy '{policy}' is not supported", "attribute")
    if sizes is not None:
        ratios = [sizes[k] / shape[a] for k, a in enumerate(axes)]
        if policy == "stretch":
            targets = list(zip(ratios, sizes, strict=True))
        else:
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            targets = [(scale, int(scale * shape[a] + 0.5)) for a in axes]
    else:
        assert scales is not None
        targets = [(s, int(math.floor(shape[a] * s))) for s, a in zip(scales, axes, strict=True)]
    for axis, (_, out) in zip(axes, targets, strict=True):
        if out <= 0:
            raise imp.error(f"axis {axis} would have {out} elements", "shape")
    return targets


def _resize_targets(
    imp: Importer, node: Node, count: int
) -> tuple[list[float] | None, list[int] | None]:
    """(scales, sizes) of a Resize or Upsample node, one value per resized axis."""
    if node.op_type == "Upsample":
        scales = node.attrs.get("scales")
        if scales is None and imp.optional_input_name(node, 1) is not None:
            known = imp.array(node, 1)
            if known is None:
                raise imp.error("the scales are computed at run time", "attribute")
            scales = np.asarray(known).reshape(-1).tolist()
        if scales is None:
            raise imp.error("the scales are required")
        if any(float(v) != int(v) for v in scales):
            raise imp.error(f"scales {list(scales)} are not whole numbers", "attribute")
        return [float(v) for v in scales], None
    for index in (2, 3):
        name = imp.optional_input_name(node, index)
        if name is None or index >= len(node.proto.input):
            continue
        known = imp.array(node, index)
        if known is None:
            raise imp.error(f"input #{index} is computed at run time", "attribute")
        if known.size == 0:
            continue
        values = np.asarray(known).reshape(-1)
        if len(values) != count:
            raise imp.error(f"input #{index} has {len(values)} values for {count} axes")
        if index == 3:
            return None, [int(v) for v in values]
        return [float(v) for v in values], None
    raise imp.error("one of scales and sizes is required")


def _roi(imp: Importer, node: Node, count: int) -> list[float]:
    """tf_crop_and_resize's region: the starts of the resized axes, then their ends (as
    fractions of ``length - 1``)."""
    if imp.optional_input_name(node, 1) is None:
        raise imp.error("tf_crop_and_resize needs the roi input")
    known = imp.array(node, 1)
    if known is None:
        raise imp.error("the roi is computed at run time", "attribute")
    values = [float(v) for v in np.asarray(known).reshape(-1)]
    if len(values) != 2 * count:
        raise imp.error(f"the roi has {len(values)} values for {count} axes (two per axis)")
    return values


def _source_coordinate(
    transform: str,
    i: int,
    scale: float,
    length: int,
    out: int,
    window: tuple[float, float] | None,
) -> float:
    """The input coordinate output position ``i`` maps to (ONNX's formulas; the
    "output width" some use is ``scale * length``, not rounded)."""
    width = scale * length
    if transform == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if transform == "half_pixel_symmetric":
        offset = length / 2 * (1 - out / width)
        return offset + (i + 0.5) / scale - 0.5
    if transform == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if width != 1 else -0.5
    if transform == "align_corners":
        return i * (length - 1) / (width - 1) if width != 1 else 0.0
    if transform == "asymmetric":
        return i / scale
    if transform == "tf_half_pixel_for_nn":
        return (i + 0.5) / scale
    assert window is not None  # tf_crop_and_resize
    start, end = window
    if width == 1:
        return (end - start) * (length - 1) / 2 + start * (length - 1)
    return i * (end - start) * (length - 1) / (width - 1) + start * (length - 1)


# ------------------------------------------------------------------ nearest


def _nearest_axis(
    imp: Importer, node: Node, x: SSAValue, axis: int, coordinates: Sequence[float]
) -> SSAValue:
    """The source index each position rounds to: one gather (or slice) of the axis."""
    if node.attrs.get("antialias", 0):
        raise imp.error("antialias is not supported in nearest mode", "attribute")
    rounding = node.attrs.get("nearest_mode", "round_prefer_floor")
    if node.op_type == "Upsample":
        rounding = "floor"
    if node.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        raise imp.error("tf_crop_and_resize is not supported in nearest mode", "attribute")
    length = shape_of(x)[axis]
    picks = [_rounded(imp, c, rounding, length) for c in coordinates]
    return _pick(imp, x, axis, picks)


def _rounded(imp: Importer, x: float, rounding: str, length: int) -> int:
    if rounding == "round_prefer_floor":
        index = math.ceil(x - 0.5)
    elif rounding == "round_prefer_ceil":
        index = math.floor(x + 0.5)
    elif rounding == "floor":
        index = math.floor(x)
    elif rounding == "ceil":
        index = math.ceil(x)
    else:
        raise imp.error(f"nearest_mode '{rounding}' is not supported", "attribute")
    return min(max(int(index), 0), length - 1)


# ------------------------------------------------------------------ linear and cubic


def _interpolated_axis(
    imp: Importer,
    node: Node,
    x: SSAValue,
    axis: int,
    coordinates: Sequence[float],
    scale: float,
) -> SSAValue:
    """The axis as a product with the constant interpolation matrix; positions outside
    tf_crop_and_resize's input take extrapolation_value."""
    length = shape_of(x)[axis]
    outside = [
        node.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
        and not 0 <= c <= length - 1
        for c in coordinates
    ]
    matrix = np.zeros((len(coordinates), length))
    for row, (c, out_of_range) in enumerate(zip(coordinates, outside, strict=True)):
        if not out_of_range:
            for index, weight in _neighbours(node, c, scale, length):
                matrix[row, index] += weight
    y = _along_axis(imp, x, axis, matrix)
    if any(outside):
        mask_shape = [1] * len(shape_of(y))
        mask_shape[axis] = len(coordinates)
        mask = imp.constant(np.asarray(outside).reshape(mask_shape), "i1")
        value = float(node.attrs.get("extrapolation_value", 0.0))
        y = imp.emit(ai.WhereOp, mask, imp.scalar(value, y), y)
    return y


def _neighbours(node: Node, x: float, scale: float, length: int) -> list[tuple[int, float]]:
    """(source index, weight) pairs of coordinate ``x``: the kernel's neighbours (the
    nearest ones, ties to the smaller index), clamped to the input's edge."""
    base = math.floor(x)
    ratio = 1.0 if x == base else x - base  # a whole coordinate takes its left neighbour's
    weights = _kernel_weights(node, ratio, scale)
    n = len(weights)
    fraction = x - base
    if n % 2 == 0:
        start = base - n // 2 + (0 if fraction == 0 else 1)
    else:
        start = base - (n - 1) // 2 + (0 if fraction <= 0.5 else 1)
    indices = np.arange(start, start + n)
    if node.attrs.get("exclude_outside", 0):
        weights = np.where((indices < 0) | (indices >= length), 0.0, weights)
        total = weights.sum()
        weights = weights / (total if total != 0 else 1.0)
    clamped = np.clip(indices, 0, length - 1)
    return [(int(i), float(w)) for i, w in zip(clamped, weights, strict=True)]


def _kernel_weights(node: Node, ratio: float, scale: float) -> np.ndarray:
    """The weights of the neighbours of a coordinate ``ratio`` past its left one."""
    antialias = bool(node.attrs.get("antialias", 0))
    if node.attrs.get("mode") == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)  # antialiasing widens the kernel when downsampling
        start = math.floor(-1 / s) + 1
        args = (np.arange(start, 2 - start) - ratio) * s
        weights = np.clip(1 - np.abs(args), 0, 1)
        return weights / weights.sum()
    a = float(node.attrs.get("cubic_coeff_a", -0.75))
    if not antialias:
        return np.array(
            [_cubic(a, ratio + 1), _cubic(a, ratio), _cubic(a, 1 - ratio), _cubic(a, 2 - ratio)]
        )
    s = min(scale, 1.0)
    start = math.floor(-2 / s) + 1
    weights = np.array([_cubic(a, s * (i - ratio)) for i in range(start, 2 - start)])
    return weights / weights.sum()


def _cubic(a: float, x: float) -> float:
    """Keys' cubic convolution kernel with parameter ``a`` at distance ``x``."""
    x = abs(x)
    if x <= 1:
        return (a + 2) * x**3 - (a + 3) * x**2 + 1
    if x < 2:
        return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
    return 0.0


def _along_axis(imp: Importer, x: SSAValue, axis: int, matrix: np.ndarray) -> SSAValue:
    """``matrix`` (out x in) applied along ``axis``: one ai.matmul, in float32."""
    dtype = dtype_of(x)
    wide = x if dtype == "f32" else imp.emit(ai.CastOp, x, "f32")
    shape = shape_of(x)
    if axis == len(shape) - 1:
        y = imp.emit(ai.MatmulOp, wide, imp.constant(matrix.T, "f32"))
    else:
        before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
        rows = _reshape_to(imp, wide, (before, shape[axis], after))
        y = imp.emit(ai.MatmulOp, imp.constant(matrix, "f32"), rows)
        y = _reshape_to(imp, y, (*shape[:axis], matrix.shape[0], *shape[axis + 1 :]))
    return y if dtype == "f32" else imp.emit(ai.CastOp, y, dtype)


# ------------------------------------------------------------------ AffineGrid


@converter("AffineGrid", attrs=("align_corners",))
def _affine_grid(imp: Importer, node: Node) -> list[SSAValue]:
    """The sampling grid of an affine ``theta`` (``N x 2 x 3`` or ``N x 3 x 4``): the
    constant homogeneous coordinates ``[x, y, (z,) 1]`` of every output position, in
    [-1, 1], times ``theta`` transposed (one ai.matmul), viewed as ``N x (D x) H x W x 2|3``."""
    theta = imp.input(node, 0)
    size = _constant_ints_of(imp, node)
    spatial = size[2:]
    dims = len(spatial)
    if dims not in (2, 3) or shape_of(theta) != (size[0], dims, dims + 1):
        raise imp.error(f"theta {theta.type} does not match the size {size}")
    n = size[0]
    aligned = bool(node.attrs.get("align_corners", 0))
    axes = [_grid_coordinates(d, aligned) for d in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # (z,) y, x over the output positions
    points = [m.reshape(-1) for m in reversed(mesh)]  # x, y, (z)
    base = np.stack([*points, np.ones_like(points[0])], axis=1)  # positions x (dims + 1)
    grid = imp.emit(ai.MatmulOp, imp.constant(base, dtype_of(theta)), theta, transpose_b=True)
    return [_reshape_to(imp, grid, (n, *spatial, len(spatial)))]


def _constant_ints_of(imp: Importer, node: Node) -> list[int]:
    known = imp.array(node, 1)
    if known is None:
        raise imp.error("the size is computed at run time: fusec needs it constant", "attribute")
    return [int(v) for v in np.asarray(known).reshape(-1)]


def _grid_coordinates(length: int, aligned: bool) -> np.ndarray:
    """The normalised coordinates of ``length`` positions: corner centres at -1 and 1
    with ``align_corners``, else pixel centres ``(2i + 1) / length - 1``."""
    if aligned:
        return np.linspace(-1.0, 1.0, length) if length > 1 else np.array([-1.0])
    return (2 * np.arange(length) + 1) / length - 1
