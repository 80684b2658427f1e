"""ONNX ``MeanVarianceNormalization`` and ``LRN`` as ai ops.

* ``MeanVarianceNormalization``: ``(x - mean) / (sqrt(mean((x - mean)^2)) + 1e-9)`` over
  ``axes`` (default N, H, W), the epsilon of ONNX's function body.
* ``LRN``: ``x / (bias + alpha / size * s)^beta`` with ``s`` the sum of squares over the
  ``size`` channels around each one (``floor((size - 1) / 2)`` before, the rest after,
  clipped to the channels): the channels become the height of an ``ai.avg_pool2d``
  window of ``size x 1`` (padding counted as zeros, so mean times size is the sum).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusec.dialect import ops as ai
from fusec.frontend.onnx_import import _normalised, _reshape_to, converter, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_import import Importer, Node


@converter("MeanVarianceNormalization", attrs=("axes",))
def _mean_variance_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    axes = sorted(_normalised(imp, [int(a) for a in node.attrs.get("axes", (0, 2, 3))], rank))
    mean = imp.emit(ai.ReduceMeanOp, x, axes=axes, keepdims=True)
    centred = imp.emit(ai.SubOp, x, mean)
    square = imp.emit(ai.MulOp, centred, centred)
    variance = imp.emit(ai.ReduceMeanOp, square, axes=axes, keepdims=True)
    spread = imp.emit(ai.AddOp, imp.emit(ai.SqrtOp, variance), imp.scalar(1e-9, variance))
    return [imp.emit(ai.DivOp, centred, spread)]


@converter("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) != 4:
        raise imp.error(f"the input must be N x C x H x W, got {x.type}", "attribute")
    if "size" not in node.attrs or int(node.attrs["size"]) < 1:
        raise imp.error("attribute 'size' (a positive integer) is required")
    size = int(node.attrs["size"])
    alpha = float(node.attrs.get("alpha", 1e-4))
    beta = float(node.attrs.get("beta", 0.75))
    bias = float(node.attrs.get("bias", 1.0))
    n, c, h, w = shape
    before = (size - 1) // 2
    squares = _reshape_to(imp, imp.emit(ai.MulOp, x, x), (n, 1, c, h * w))
    mean = imp.emit(
        ai.AvgPool2DOp,
        squares,
        kernel=(size, 1),
        padding=(before, 0, size - 1 - before, 0),
        count_include_pad=True,
    )
    sums = _reshape_to(imp, mean, shape)  # mean * size * alpha / size = mean * alpha
    scaled = imp.emit(
        ai.AddOp, imp.emit(ai.MulOp, sums, imp.scalar(alpha, sums)), imp.scalar(bias, sums)
    )
    return [imp.emit(ai.DivOp, x, imp.emit(ai.PowOp, scaled, imp.scalar(beta, scaled)))]
