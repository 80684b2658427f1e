"""ONNX normalisations as ai ops.

* ``LayerNormalization``: ``ai.layernorm`` over the last axis of a view whose last dim is
  the flattened normalised dims; ``RMSNormalization``, ``InstanceNormalization`` and
  ``GroupNormalization`` likewise over rows of a view; ``BatchNormalization`` as
  ``ai.batch_norm``; ``LpNormalization`` as a reduction and a division.
* ``MeanVarianceNormalization``: ``(x - mean) / (sqrt(mean((x - mean)^2)) + 1e-9)`` over
  ``axes`` (default N, H, W), the epsilon of ONNX's function body.
* ``LRN``: ``x / (bias + alpha / size * s)^beta`` with ``s`` the sum of squares over the
  ``size`` channels around each one (``floor((size - 1) / 2)`` before, the rest after,
  clipped to the channels): the channels become the height of an ``ai.avg_pool2d``
  window of ``size x 1`` (padding counted as zeros, so mean times size is the sum).
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import Importer, Node, _normalised, _reshape_to, converter
from fusec.frontend.onnx_reduce import _reduce_with, _square
from fusec.ir.dtypes import is_float
from fusec.ir.tensors import dtype_of, shape_of


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(imp: Importer, node: Node) -> list[SSAValue | None]:
    """Normalisation over dims [axis:] (ONNX flattens them into one): ai.layernorm over
    the last axis of a reshaped view when there are several. Scale and bias of another
    float type than the input (the TorchScript exporter's f16 parameters after an f32
    attention, issue 28) are taken in the input's type: a constant converted, a value
    cast."""
    x, scale = imp.input(node, 0), imp.input(node, 1)
    bias = imp.optional_input(node, 2)
    shape = shape_of(x)
    rank = len(shape)
    axis = node.attrs.get("axis", -1)
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if node.attrs.get("stash_type", 1) != 1:
        raise imp.error(f"stash_type={node.attrs['stash_type']} is not supported", "attribute")
    normalised = shape[axis:]
    d = math.prod(normalised)
    rows = imp.emit(ai.ReshapeOp, x, shape=shape[:axis] + (d,)) if axis < rank - 1 else x
    scale = _as_type_of(imp, scale, x)
    bias = None if bias is None else _as_type_of(imp, bias, x)
    gamma = _flat_parameter(imp, node, 1, scale, normalised)
    beta = None if bias is None else _flat_parameter(imp, node, 2, bias, normalised)
    if gamma is not None and (bias is None or beta is not None):
        y = _normalise_last_axis(imp, rows, gamma, beta, epsilon)
        y = imp.emit(ai.ReshapeOp, y, shape=shape) if rows is not x else y
    else:  # parameters that broadcast over part of the normalised dims: applied after
        plain = _normalise_last_axis(imp, rows, None, None, epsilon)
        y = imp.emit(ai.ReshapeOp, plain, shape=shape) if rows is not x else plain
        y = _broadcast_into(imp, ai.MulOp, y, scale)
        y = _broadcast_into(imp, ai.AddOp, y, bias) if bias is not None else y
    outputs: list[SSAValue | None] = [y]
    wanted = [i for i in (1, 2) if i < len(node.proto.output) and node.proto.output[i]]
    if wanted:
        outputs += _layer_norm_stats(imp, x, axis, epsilon)[: max(wanted)]
    return outputs


def _as_type_of(imp: Importer, value: SSAValue, x: SSAValue) -> SSAValue:
    """``value`` in ``x``'s element type: itself, or cast when both are float types."""
    have, want = dtype_of(value), dtype_of(x)
    if have == want or not (is_float(have) and is_float(want)):
        return value
    return imp.emit(ai.CastOp, value, want)


def _flat_parameter(
    imp: Importer, node: Node, index: int, value: SSAValue, normalised: tuple[int, ...]
) -> SSAValue | None:
    """Scale or bias as a 1-D vector over the flattened normalised dims: a constant
    broadcast to them, or a value of exactly their shape; None when neither."""
    d = math.prod(normalised)
    known = imp.array(node, index)
    if known is not None:
        try:
            full = np.broadcast_to(known, normalised)
        except ValueError:
            raise imp.error(
                f"input #{index} of shape {known.shape} does not broadcast to the normalised "
                f"dims {list(normalised)}"
            ) from None
        if full.shape == normalised:
            return imp.constant(full.reshape(d), dtype_of(value))
    if shape_of(value) == normalised:
        return value if len(normalised) == 1 else imp.emit(ai.ReshapeOp, value, shape=(d,))
    return None


def _normalise_last_axis(
    imp: Importer, x: SSAValue, gamma: SSAValue | None, beta: SSAValue | None, epsilon: float
) -> SSAValue:
    """ai.layernorm over the last axis with 1-D gamma/beta (ones/zeros when absent)."""
    d = shape_of(x)[-1]
    dtype = dtype_of(x)
    gamma = gamma if gamma is not None else imp.constant(np.ones(d), dtype)
    beta = beta if beta is not None else imp.constant(np.zeros(d), dtype)
    return imp.emit(ai.LayerNormOp, x, gamma, beta, epsilon=epsilon)


def _broadcast_into(imp: Importer, op: type[ai.AiOp], x: SSAValue, other: SSAValue) -> SSAValue:
    result = imp.emit(op, x, other)
    if shape_of(result) != shape_of(x):
        raise imp.error(f"{other.type} does not broadcast to the input's shape {x.type}")
    return result


def _layer_norm_stats(imp: Importer, x: SSAValue, axis: int, epsilon: float) -> list[SSAValue]:
    """Mean and InvStdDev over dims [axis:] (in f32, the stash type), kept as size-1 dims."""
    xs = x if dtype_of(x) == "f32" else imp.emit(ai.CastOp, x, "f32")
    axes = tuple(range(axis, len(shape_of(x))))
    mean = imp.emit(ai.ReduceMeanOp, xs, axes=axes, keepdims=True)
    centred = imp.emit(ai.SubOp, xs, mean)
    square = imp.emit(ai.MulOp, centred, centred)
    var = imp.emit(ai.ReduceMeanOp, square, axes=axes, keepdims=True)
    std = imp.emit(ai.SqrtOp, imp.emit(ai.AddOp, var, imp.scalar(epsilon, var)))
    return [mean, imp.emit(ai.DivOp, imp.scalar(1.0, std), std)]


@converter("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def _rms_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """x / sqrt(mean(x^2 over dims [axis:]) + epsilon) * scale, the statistics in f32
    (the stash type) as LayerNormalization's: over the last axis with a scale of D values
    of x's type one ``ai.rms_norm`` (one row kernel), else the ops it stands for."""
    x, scale = imp.input(node, 0), imp.input(node, 1)
    rank = len(shape_of(x))
    axis = int(node.attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    if node.attrs.get("stash_type", 1) != 1:
        raise imp.error(f"stash_type={node.attrs['stash_type']} is not supported", "attribute")
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    d = shape_of(x)[-1]
    s = shape_of(scale)
    if axis % rank == rank - 1 and s and s[-1] == d and math.prod(s) == d and epsilon >= 0:
        if dtype_of(scale) == dtype_of(x) and is_float(dtype_of(x)):  # one row op
            gamma = scale if s == (d,) else _reshape_to(imp, scale, (d,))
            return [imp.emit(ai.RMSNormOp, x, gamma, epsilon=epsilon)]
    xs = x if dtype_of(x) == "f32" else imp.emit(ai.CastOp, x, "f32")
    axes = tuple(range(axis % rank, rank))
    mean_square = imp.emit(ai.ReduceMeanOp, _square(imp, xs), axes=axes, keepdims=True)
    rms = imp.emit(ai.SqrtOp, imp.emit(ai.AddOp, mean_square, imp.scalar(epsilon, mean_square)))
    y = imp.emit(ai.DivOp, xs, rms)
    y = y if dtype_of(x) == "f32" else imp.emit(ai.CastOp, y, dtype_of(x))
    return [_broadcast_into(imp, ai.MulOp, y, scale)]


def _normalise_rows(imp: Importer, x: SSAValue, rows: tuple[int, ...], epsilon: float) -> SSAValue:
    """``x`` viewed as ``rows`` (its last dim the normalised elements), each row
    normalised by ai.layernorm (scale 1, bias 0)."""
    return _normalise_last_axis(imp, _reshape_to(imp, x, rows), None, None, epsilon)


def _per_channel(imp: Importer, node: Node, index: int, channels: int, rank: int) -> SSAValue:
    """Input ``index`` (C values) shaped (C, 1, ..., 1) to broadcast over an N x C x ...
    tensor of ``rank``."""
    value = imp.input(node, index)
    if math.prod(shape_of(value)) != channels:
        raise imp.error(f"input #{index} must have {channels} values, got {value.type}")
    return _reshape_to(imp, value, (channels,) + (1,) * (rank - 2))


@converter("InstanceNormalization", attrs=("epsilon",))
def _instance_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """Each (n, c) plane normalised (ai.layernorm over its elements), then scale and bias
    per channel."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) < 3:
        raise imp.error(f"input must be N x C x spatial dims, got {x.type}")
    n, c, rank = shape[0], shape[1], len(shape)
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    planes = _normalise_rows(imp, x, (n, c, math.prod(shape[2:])), epsilon)
    y = _reshape_to(imp, planes, shape)
    y = imp.emit(ai.MulOp, y, _per_channel(imp, node, 1, c, rank))
    return [imp.emit(ai.AddOp, y, _per_channel(imp, node, 2, c, rank))]


@converter("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def _group_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """The channels split into ``num_groups`` groups, each (n, group) normalised over its
    channels and spatial elements (ai.layernorm), then scale and bias: per channel
    (opset 21), or per group (opset 18, parameters of G values)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) < 3:
        raise imp.error(f"input must be N x C x spatial dims, got {x.type}")
    if node.attrs.get("stash_type", 1) != 1:
        raise imp.error(f"stash_type={node.attrs['stash_type']} is not supported", "attribute")
    if "num_groups" not in node.attrs:
        raise imp.error("attribute 'num_groups' is required")
    groups = int(node.attrs["num_groups"])
    n, c, rank = shape[0], shape[1], len(shape)
    if groups <= 0 or c % groups:
        raise imp.error(f"num_groups={groups} does not divide the {c} channels")
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    grouped = _normalise_rows(imp, x, (n, groups, math.prod(shape[1:]) // groups), epsilon)
    params = [imp.input(node, i) for i in (1, 2)]
    if all(math.prod(shape_of(p)) == c for p in params):
        y = _reshape_to(imp, grouped, shape)
        y = imp.emit(ai.MulOp, y, _per_channel(imp, node, 1, c, rank))
        return [imp.emit(ai.AddOp, y, _per_channel(imp, node, 2, c, rank))]
    if all(math.prod(shape_of(p)) == groups for p in params):
        scale, bias = (_reshape_to(imp, p, (groups, 1)) for p in params)
        y = imp.emit(ai.AddOp, imp.emit(ai.MulOp, grouped, scale), bias)
        return [_reshape_to(imp, y, shape)]
    raise imp.error(f"scale and bias must have {c} (or {groups}) values each")


_BN_ATTRS = ("epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs")


@converter("BatchNormalization", attrs=_BN_ATTRS)
def _batch_norm(imp: Importer, node: Node) -> list[SSAValue]:
    """``ai.batch_norm``: canonicalize folds it into a conv2d feeding it or decomposes it
    (the importer builds IR and stops; ``.mlir`` and traced graphs get the same)."""
    if node.attrs.get("training_mode", 0):
        raise imp.error("training_mode=1 is not supported (inference only)", "attribute")
    if node.attrs.get("spatial", 1) != 1:
        raise imp.error("spatial=0 (opset < 9) is not supported", "attribute")
    x = imp.input(node, 0)
    params = [imp.input(node, i) for i in range(1, 5)]
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    return [imp.emit(ai.BatchNormOp, x, *params, epsilon=epsilon)]


@converter("LpNormalization", attrs=("axis", "p"))
def _lp_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """x / ||x||_p along the axis, p 1 or 2."""
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    axis = int(node.attrs.get("axis", -1))
    p = int(node.attrs.get("p", 2))
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    if p not in (1, 2):
        raise imp.error(f"p={p} is not supported (1 or 2)", "attribute")
    summand = imp.emit(ai.AbsOp, x) if p == 1 else _square(imp, x)
    norm = _reduce_with(imp, ai.ReduceSumOp, summand, [axis % rank], True)
    norm = norm if p == 1 else imp.emit(ai.SqrtOp, norm)
    # ONNX gives 0 for a zero vector: divided by the smallest positive value instead
    # of 0/0; any other norm is at least that value, and NaN propagates
    divisor = imp.emit(ai.MaximumOp, norm, imp.scalar(_SMALLEST_SUBNORMAL[dtype_of(x)], norm))
    return [imp.emit(ai.DivOp, x, divisor)]


_SMALLEST_SUBNORMAL = {"f32": 2.0**-149, "f16": 2.0**-24, "bf16": 2.0**-133}


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
