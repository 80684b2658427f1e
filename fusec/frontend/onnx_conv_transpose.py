"""ONNX ``ConvTranspose`` (1-D and 2-D) as an ``ai.conv2d`` of a zero-inserted input.

A transposed convolution with stride s scatters each input element, times the kernel, to
the outputs ``i * s + j * d``. That is exactly a stride-1 convolution of the input with
s - 1 zeros inserted after every element, padded by ``(k - 1) * d`` less the ONNX pads
(plus ``output_padding`` at the end), with the kernel flipped and its in and out channels
swapped per group. So the node becomes ai ops every target has:

* per strided axis, the zeros inserted: the input viewed with a unit axis after the
  spatial one, concatenated with a broadcast zero block of s - 1, viewed back (n * s
  long, its last s - 1 zeros counted against the end padding);
* a padding below zero crops the zero-inserted input (a slice);
* the weight ``[C, M / g, k...]`` viewed as ``[g, C / g, M / g, k...]``, its two channel
  axes swapped, viewed as ``[M, C / g, k...]`` and reversed along each spatial axis (a
  constant weight is transformed at import instead);
* one ``ai.conv2d`` (stride 1, the dilations, the groups), then the bias.

The result is exact (every product and sum the direct form computes, plus products with
the inserted zeros); its cost is a convolution over the zero-inserted input: about s_h *
s_w times the multiply-adds of the direct form (4x for stride 2 in 2-D), and a
zero-inserted copy of the input. A 1-D node is the 2-D one of height-1 views, as for
``Conv``. Refused with the reason: 3-D (volumetric) transposed convolution.

``Col2Im`` (its columns summed back onto the image) is built the same way: per kernel
position, the zero-inserted columns padded to their offset, the canvases added.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_conv import Window, conv2d_padding, conv_operands, split_pads
from fusec.frontend.onnx_core import _constant_ints, _reshape_to, converter
from fusec.frontend.onnx_layout import _pad_axis, _slice_of
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node

_ATTRS = (
    "auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape",
    "pads", "strides",
)  # fmt: skip


@converter("ConvTranspose", attrs=_ATTRS)
def _conv_transpose(imp: Importer, node: Node) -> list[SSAValue]:
    x, w, kernel = conv_operands(imp, node, "ConvTranspose")
    groups = int(node.attrs.get("group", 1))
    channels = shape_of(x)[1]
    if groups < 1 or channels % groups or shape_of(w)[0] != channels:
        raise imp.error(f"the weight {w.type} needs {channels} input channels in {groups} groups")
    dims = len(kernel)
    strides, dilations, extra = (
        _ints(imp, node, name, dims, 1 if name != "output_padding" else 0)
        for name in ("strides", "dilations", "output_padding")
    )
    begin, end = _pads(imp, node, Window(shape_of(x)[2:], kernel, strides, dilations), extra)
    flat = dims == 1
    if flat:  # a 1-D node is the 2-D one of height-1 views
        x = _reshape_to(imp, x, (*shape_of(x)[:2], 1, shape_of(x)[2]))
        kernel, strides, dilations, extra, begin, end = (
            (v0, *v) for v0, v in zip((1, 1, 1, 0, 0, 0), (kernel, strides, dilations, extra,
                                                         begin, end), strict=True)
        )  # fmt: skip
    low, high = [], []
    for axis in (2, 3):
        i = axis - 2
        x = _zeros_inserted(imp, x, axis, strides[i])
        reach = (kernel[i] - 1) * dilations[i]
        lo, hi = reach - begin[i], reach - end[i] + extra[i] - (strides[i] - 1)
        size = shape_of(x)[axis]
        if max(-lo, 0) + max(-hi, 0) >= size:
            raise imp.error(f"the pads leave no output along spatial axis {i}")
        x = _slice_of(imp, x, [max(-lo, 0)], [size - max(-hi, 0)], [axis], [1])
        low.append(max(lo, 0))
        high.append(max(hi, 0))
    weight = _flipped_weight(imp, node, w, groups, flat)
    padding = (*low, *high)
    y = imp.emit(
        ai.Conv2DOp,
        x,
        weight,
        strides=(1, 1),
        padding=conv2d_padding(padding),
        dilations=tuple(dilations),
        groups=groups,
    )
    bias = imp.optional_input(node, 2)
    if bias is not None:
        y = imp.emit(ai.BiasAddOp, y, bias, axis=1)
    return [_reshape_to(imp, y, shape_of(y)[:2] + shape_of(y)[3:]) if flat else y]


def _ints(imp: Importer, node: Node, name: str, dims: int, default: int) -> tuple[int, ...]:
    values = tuple(int(v) for v in node.attrs.get(name, (default,) * dims))
    if len(values) != dims or min(values) < (0 if name == "output_padding" else 1):
        raise imp.error(f"{name} {list(values)} must be {dims} values of at least {default}")
    return values


def _pads(
    imp: Importer, node: Node, window: Window, extra: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begin, end) pads per spatial axis: given, or derived from ``output_shape`` (or,
    with SAME_UPPER/SAME_LOWER, from input size times stride) as ONNX's operator spec
    says: the total split in halves, the odd one at the end for SAME_UPPER, else at
    the beginning."""
    size, kernel, strides, dilations = window
    dims = len(size)
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise imp.error(f"auto_pad='{auto_pad}' is not supported", "attribute")
    wanted = node.attrs.get("output_shape")
    same = auto_pad in ("SAME_UPPER", "SAME_LOWER")
    if wanted is None and not same:
        pads = tuple(int(p) for p in node.attrs.get("pads", (0,) * 2 * dims))
        if auto_pad == "VALID":
            pads = (0,) * 2 * dims
        if len(pads) != 2 * dims:
            raise imp.error(f"pads must have {2 * dims} values, got {list(pads)}")
        return pads[:dims], pads[dims:]
    out = [int(v) for v in wanted][-dims:] if wanted is not None else [
        n * s for n, s in zip(size, strides, strict=True)
    ]  # fmt: skip
    if len(out) != dims:
        raise imp.error(f"output_shape {list(wanted or [])} needs {dims} spatial sizes")
    totals = [
        s * (n - 1) + e + (k - 1) * d + 1 - o
        for n, k, s, d, e, o in zip(size, kernel, strides, dilations, extra, out, strict=True)
    ]
    return split_pads(totals, odd_at_end=auto_pad == "SAME_UPPER")


def _zeros_inserted(imp: Importer, x: SSAValue, axis: int, stride: int) -> SSAValue:
    """``x`` with ``stride - 1`` zeros after every element along ``axis`` (n * stride
    long): a unit axis after it, a broadcast zero block concatenated there, viewed back."""
    if stride == 1:
        return x
    shape = shape_of(x)
    unit = (*shape[: axis + 1], 1, *shape[axis + 1 :])
    block = (*shape[: axis + 1], stride - 1, *shape[axis + 1 :])
    zeros = imp.emit(ai.ExpandOp, imp.scalar(0.0, x), shape=block)
    spread = imp.emit(ai.ConcatOp, _reshape_to(imp, x, unit), zeros, axis=axis + 1)
    return _reshape_to(imp, spread, (*shape[:axis], shape[axis] * stride, *shape[axis + 1 :]))


def _flipped_weight(imp: Importer, node: Node, w: SSAValue, groups: int, flat: bool) -> SSAValue:
    """The ai.conv2d weight ``[M, C / g, kh, kw]`` of the ConvTranspose weight ``[C, M / g,
    k...]``: channels swapped within each group, the kernel reversed spatially."""
    c, m, *kernel = shape_of(w)
    grouped = (groups, c // groups, m, *kernel)
    swapped = (0, 2, 1, *range(3, 3 + len(kernel)))
    target = (groups * m, c // groups, *([1] if flat else []), *kernel)
    known = imp.array(node, 1)
    if known is not None:  # a constant weight: transformed at import
        array = np.asarray(known).reshape(grouped).transpose(swapped).reshape(target)
        return imp.constant(np.ascontiguousarray(array[..., ::-1, ::-1]), dtype_of(w))
    v = imp.emit(ai.TransposeOp, _reshape_to(imp, w, grouped), perm=swapped)
    v = _reshape_to(imp, v, target)
    axes = [2, 3] if not flat else [3]
    ends = [-shape_of(v)[axis] - 1 for axis in axes]
    return _slice_of(imp, v, [-1] * len(axes), ends, axes, [-1] * len(axes))


@converter("Col2Im", attrs=("dilations", "pads", "strides"))
def _col2im(imp: Importer, node: Node) -> list[SSAValue]:
    """``Col2Im`` (2-D, constant image and block shapes): the sum of the blocks' columns
    put back at their places. Per kernel position (kh, kw): its ``[N, C, Lh, Lw]``
    columns (a strided channel slice) with the strides' zeros inserted, padded to their
    offset ``(kh * dh, kw * dw)`` on the padded canvas; the canvases added, the pads
    cropped."""
    x = imp.input(node, 0)
    image = _constant_ints(imp, node, 1, "input 'image_shape'")
    block = _constant_ints(imp, node, 2, "input 'block_shape'")
    if image is None or block is None or len(image) != len(block):
        raise imp.error("image_shape and block_shape must be constants of one length")
    if len(image) != 2:
        raise imp.error(f"only 2-D Col2Im is supported, got image_shape {image}", "attribute")
    n, rows, length = shape_of(x)
    kernel = math.prod(block)
    if rows % kernel:
        raise imp.error(f"{rows} rows are not a multiple of the block's {kernel} elements")
    channels = rows // kernel
    strides, dilations = (_ints(imp, node, name, 2, 1) for name in ("strides", "dilations"))
    pads = tuple(int(p) for p in node.attrs.get("pads", (0, 0, 0, 0)))
    canvas = [image[d] + pads[d] + pads[d + 2] for d in range(2)]
    blocks = [(canvas[d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(2)]
    if len(pads) != 4 or min(blocks) < 1 or math.prod(blocks) != length:
        raise imp.error(
            f"{length} columns do not fit image {image}, block {block}, pads {list(pads)}, "
            f"strides {list(strides)}, dilations {list(dilations)}"
        )
    total = None
    for k, (kh, kw) in enumerate(itertools.product(range(block[0]), range(block[1]))):
        y = _slice_of(imp, x, [k], [rows], [1], [kernel])
        y = _reshape_to(imp, y, (n, channels, *blocks))
        for axis, offset in ((2, kh), (3, kw)):
            d = axis - 2
            y = _zeros_inserted(imp, y, axis, strides[d])
            begin = offset * dilations[d]
            y = _pad_axis(imp, y, axis, begin, canvas[d] - begin - shape_of(y)[axis],
                          "constant", 0.0)  # fmt: skip
        total = y if total is None else imp.emit(ai.AddOp, total, y)
    assert total is not None
    return [_slice_of(imp, total, pads[:2], [pads[0] + image[0], pads[1] + image[1]], [2, 3],
                      [1, 1])]  # fmt: skip
