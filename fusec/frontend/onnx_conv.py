"""ONNX ``Conv`` and pooling (``MaxPool``, ``AveragePool``, ``LpPool``, the global
pools) as ai ops: 2-D natively, 1-D over height-1 views, 3-D pooling as two 2-D ones;
``conv_operands`` and the padding rule are shared with ``ConvTranspose``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import Importer, Node, _reshape_to, converter
from fusec.ir.tensors import dtype_of, shape_of


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(imp: Importer, node: Node) -> list[SSAValue]:
    """2-D convolution, and 1-D convolution as 2-D convolution of height-1 views."""
    x, w, kernel = conv_operands(imp, node, "convolution")
    flat = len(kernel) == 1
    dims = 1 if flat else 2
    strides = tuple(int(v) for v in node.attrs.get("strides", (1,) * dims))
    dilations = tuple(int(v) for v in node.attrs.get("dilations", (1,) * dims))
    if flat:
        x = _reshape_to(imp, x, (*shape_of(x)[:2], 1, shape_of(x)[2]))
        w = _height_one_weight(imp, node, w)
        kernel, strides, dilations = ((1, *v) for v in (kernel, strides, dilations))
    view = _height_one(imp, node) if flat else node
    padding = _conv_padding(imp, view, Window(shape_of(x)[2:], kernel, strides, dilations))
    bias = imp.optional_input(node, 2)
    y = imp.emit(
        ai.Conv2DOp,
        x,
        w,
        strides=strides,
        padding=padding,
        dilations=dilations,
        groups=int(node.attrs.get("group", 1)),
    )
    if bias is not None:
        y = imp.emit(ai.BiasAddOp, y, bias, axis=1)
    return [_reshape_to(imp, y, shape_of(y)[:2] + shape_of(y)[3:]) if flat else y]


def conv_operands(
    imp: Importer, node: Node, what: str
) -> tuple[SSAValue, SSAValue, tuple[int, ...]]:
    """(input, weight, kernel) of a 1-D or 2-D Conv or ConvTranspose node: 3-D or 4-D both,
    ``kernel_shape`` (if given) the weight's."""
    x, w = imp.input(node, 0), imp.input(node, 1)
    if (len(shape_of(x)), len(shape_of(w))) not in ((3, 3), (4, 4)):
        raise imp.error(
            f"only 1-D and 2-D {what} are supported (3-D or 4-D input and weight), got "
            f"{x.type} and {w.type}",
            "attribute",
        )
    kernel = shape_of(w)[2:]
    if "kernel_shape" in node.attrs and tuple(node.attrs["kernel_shape"]) != kernel:
        raise imp.error(
            f"kernel_shape {list(node.attrs['kernel_shape'])} does not match the weight {w.type}"
        )
    return x, w, kernel


def _height_one_weight(imp: Importer, node: Node, w: SSAValue) -> SSAValue:
    """A 1-D conv's weight ``[K, C, R]`` as ``[K, C, 1, R]``: a constant weight reshaped
    at import into a constant of its own, so that the compile-time folds of constants (the
    cuda conv layout's KCRS -> KRSC transpose) see an ``arith.constant`` and no weight is
    re-laid out at run time; a weight computed at run time viewed by ``ai.reshape``."""
    k, c, r = shape_of(w)
    known = imp.array(node, 1)
    if known is not None:
        array = np.asarray(known).reshape(k, c, 1, r)
        return imp.constant(array, dtype_of(w), node.proto.input[1])
    return _reshape_to(imp, w, (k, c, 1, r))


def _height_one(imp: Importer, node: Node) -> Node:
    """A 1-D conv or pool node seen as 2-D over a height-1 view: its 2 pads lifted to 4."""
    pads = node.attrs.get("pads")
    if pads is None:
        return node
    if len(pads) != 2:
        raise imp.error(f"pads must have 2 values, got {list(pads)}")
    return Node(node.proto, node.index, {**node.attrs, "pads": (0, pads[0], 0, pads[1])})


class Window(NamedTuple):
    """A conv's or pool's window over the spatial axes: the input's sizes, the kernel's,
    the strides and the dilations (one value an axis each)."""

    size: Sequence[int]
    kernel: Sequence[int]
    strides: Sequence[int]
    dilations: Sequence[int]


def _conv_padding(imp: Importer, node: Node, window: Window) -> tuple[int, ...]:
    """ai.conv2d padding (h_begin, w_begin, h_end, w_end), or 2 values when symmetric."""
    size, kernel, strides, dilations = window
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if len(strides) != 2 or len(dilations) != 2 or min(*strides, *dilations) < 1:
        raise imp.error(
            f"strides {list(strides)} and dilations {list(dilations)} must be 2 "
            "positive values each"
        )
    if auto_pad in ("NOTSET", ""):
        pads = tuple(node.attrs.get("pads", (0, 0, 0, 0)))
        if len(pads) != 4:
            raise imp.error(f"pads must have 4 values, got {list(pads)}")
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if "pads" in node.attrs:
            raise imp.error("pads cannot be given together with auto_pad")
        totals = [
            max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
            for n, k, s, d in zip(size, kernel, strides, dilations, strict=True)
        ]
        begin, end = split_pads(totals, odd_at_end=auto_pad == "SAME_UPPER")
        pads = (*begin, *end)
    else:
        raise imp.error(f"auto_pad='{auto_pad}' is not supported", "attribute")
    return conv2d_padding(pads)


def split_pads(
    totals: Sequence[int], *, odd_at_end: bool
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begin, end) pads of each axis's ``totals`` split in halves as ONNX's operator
    spec says: the odd one at the end (SAME_UPPER) or at the beginning."""
    small = tuple(t // 2 for t in totals)
    large = tuple(t - t // 2 for t in totals)
    return (small, large) if odd_at_end else (large, small)


def conv2d_padding(pads: tuple[int, ...]) -> tuple[int, ...]:
    """ai.conv2d's padding of (h_begin, w_begin, h_end, w_end): 2 values when symmetric."""
    return pads[:2] if pads[:2] == pads[2:] else pads


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    if rank < 3:
        raise imp.error(f"input must be N x C x spatial dims, got {x.type}")
    op = ai.ReduceMeanOp if node.op_type == "GlobalAveragePool" else ai.ReduceMaxOp
    return [imp.emit(op, x, axes=tuple(range(2, rank)), keepdims=True)]


_POOL_ATTRS = (
    "auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads",
    "storage_order", "strides",
)  # fmt: skip


@converter("MaxPool", "AveragePool", "LpPool", attrs=(*_POOL_ATTRS, "p"))
def _pool(imp: Importer, node: Node) -> list[SSAValue]:
    """2-D pooling, 1-D pooling as 2-D pooling of a height-1 view, and 3-D pooling as
    two 2-D ones (``_pool_3d``)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) not in (3, 4, 5):
        raise imp.error(
            f"only 1-D, 2-D and 3-D pooling are supported (a 3-D to 5-D input), got {x.type}",
            "attribute",
        )
    if len(node.proto.output) > 1 and node.proto.output[1]:
        raise imp.error("the Indices output is not supported", "attribute")
    if node.attrs.get("storage_order", 0):
        raise imp.error("storage_order=1 is not supported", "attribute")
    if len(shape) == 5:
        return [_pool_3d(imp, node, x)]
    flat = len(shape) == 3
    rows = _reshape_to(imp, x, (shape[0], shape[1], 1, shape[2])) if flat else x
    attrs = _pool_attributes(imp, node, shape_of(rows), flat)
    if node.op_type == "LpPool":
        y = _lp_pool(imp, node, rows, lambda v: _pool_2d(imp, node, v, attrs), attrs)
    else:
        y = _pool_2d(imp, node, rows, attrs)
    return [_reshape_to(imp, y, shape_of(y)[:2] + shape_of(y)[3:]) if flat else y]


def _pool_2d(imp: Importer, node: Node, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    """ai.max_pool2d, or ai.avg_pool2d (LpPool's: counting the padding)."""
    if node.op_type == "MaxPool":
        return imp.emit(ai.MaxPool2DOp, x, **attrs)
    include = node.op_type == "LpPool" or bool(node.attrs.get("count_include_pad", 0))
    return imp.emit(ai.AvgPool2DOp, x, count_include_pad=include, **attrs)


def _pool_3d(imp: Importer, node: Node, x: SSAValue) -> SSAValue:
    """3-D pooling as two 2-D ones: a window is a box, so its maximum is the maximum over
    depth of the (H, W) maxima, and its average (ONNX's counts, of the input or the
    padded input, are per dim, so a box's count is their product) the average over depth
    of the (H, W) averages. First (H, W) of the (N, C * D, H, W) view, then depth of the
    (N, C, D, OH * OW) view with a (kd, 1) window."""
    n, c, d, h, w = shape_of(x)
    kernel, strides, dilations, pads = (
        node.attrs.get(name) for name in ("kernel_shape", "strides", "dilations", "pads")
    )
    if kernel is None or len(kernel) != 3:
        raise imp.error(f"kernel_shape must have 3 values, got {kernel}", "attribute")
    strides, dilations = (list(v) if v is not None else [1, 1, 1] for v in (strides, dilations))
    pads = list(pads) if pads is not None else None
    if pads is not None and len(pads) != 6:
        raise imp.error(f"pads must have 6 values, got {pads}")

    def view(axes: tuple[int, ...], unit: bool) -> Node:
        pick = lambda v: [*(v[a] for a in axes), *([1] if unit else [])]  # noqa: E731
        attrs = {**node.attrs, "kernel_shape": pick(kernel), "strides": pick(strides),
                 "dilations": pick(dilations)}  # fmt: skip
        if pads is not None:
            begin, end = pads[:3], pads[3:]
            attrs["pads"] = [*pick(begin), *pick(end)] if not unit else [begin[0], 0, end[0], 0]
        return Node(node.proto, node.index, attrs)

    def pooled(v: SSAValue) -> SSAValue:
        planes = _reshape_to(imp, v, (n, c * d, h, w))
        plane = view((1, 2), False)
        y = _pool_2d(imp, plane, planes, _pool_attributes(imp, plane, (n, c * d, h, w), False))
        oh, ow = shape_of(y)[2:]
        depth = _reshape_to(imp, y, (n, c, d, oh * ow))
        column = view((0,), True)
        attrs = _pool_attributes(imp, column, shape_of(depth), False)
        z = _pool_2d(imp, column, depth, attrs)
        return _reshape_to(imp, z, (n, c, shape_of(z)[2], oh, ow))

    if node.op_type != "LpPool":
        return pooled(x)
    return _lp_pool(
        imp, node, x, pooled, {"kernel": kernel, "ceil_mode": node.attrs.get("ceil_mode", 0)}
    )


def _pool_attributes(
    imp: Importer, node: Node, shape: tuple[int, ...], flat: bool
) -> dict[str, Any]:
    """ai.max_pool2d/avg_pool2d attributes; a 1-D pool's with a height-1 window."""
    if "kernel_shape" not in node.attrs:
        raise imp.error("attribute 'kernel_shape' is required")
    dims = 1 if flat else 2
    kernel = tuple(int(k) for k in node.attrs["kernel_shape"])
    strides = tuple(int(v) for v in node.attrs.get("strides", (1,) * dims))
    dilations = tuple(int(v) for v in node.attrs.get("dilations", (1,) * dims))
    if len(kernel) != dims:
        raise imp.error(f"kernel_shape must have {dims} values, got {list(kernel)}", "attribute")
    view = node
    if flat:
        kernel, strides, dilations = ((1, *v) for v in (kernel, strides, dilations))
        view = _height_one(imp, node)
    return {
        "kernel": kernel,
        "strides": strides,
        "padding": _conv_padding(imp, view, Window(shape[2:], kernel, strides, dilations)),
        "dilations": dilations,
        "ceil_mode": bool(node.attrs.get("ceil_mode", 0)),
    }


def _lp_pool(
    imp: Importer,
    node: Node,
    x: SSAValue,
    average: Callable[[SSAValue], SSAValue],
    attrs: dict[str, Any],
) -> SSAValue:
    """(sum of |x|^p over the window)^(1/p): the window's mean of |x|^p (``average``,
    padding counted as zeros) times its size."""
    p = int(node.attrs.get("p", 2))
    if p < 1:
        raise imp.error(f"p={p} must be a positive integer")
    if attrs["ceil_mode"]:  # a window past the padding: its mean is not over the kernel
        raise imp.error("LpPool with ceil_mode=1 is not supported", "attribute")
    powered = imp.emit(ai.PowOp, imp.emit(ai.AbsOp, x), imp.scalar(p, x))
    mean = average(powered)
    total = imp.emit(ai.MulOp, mean, imp.scalar(math.prod(attrs["kernel"]), mean))
    return imp.emit(ai.PowOp, total, imp.scalar(1.0 / p, total))
