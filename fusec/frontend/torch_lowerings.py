"""Core ATen op -> ai ops: one short lowering per overload (``torch_fx.LOWERINGS``).

A lowering gets the translator, the FX node and its arguments bound by schema name
(``a["input"]``), and returns the node's ai value, or a tuple for a multi-result op
(None for a result fusec does not compute: ``native_layer_norm``'s statistics). Result
shapes that are plain facts of PyTorch's (a ``view``'s size, an ``expand``'s) are
read from the node's recorded value rather than recomputed. Elementwise operands are
cast to the result dtype PyTorch recorded, which is its type promotion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import fx
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.index_lookup import Item, lookup
from fusec.frontend.torch_translator import (
    Translator,
    dtype_name,
    dtype_of,
    lowering,
    reshape,
    shape_of,
    to_numpy,
)

Args = dict[str, Any]


def _dims(value: Any, count: int = 2) -> tuple[int, ...]:
    """A size-like argument (an int or a list, a 1-list repeated) as ``count`` ints."""
    values = [value] if isinstance(value, int) else list(value)
    if len(values) == 1:
        values = values * count
    return tuple(int(v) for v in values)


def _axis(t: Translator, axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise t.error(f"dim {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _axes(t: Translator, dims: Any, rank: int) -> list[int]:
    if dims is None:
        return []
    values = [dims] if isinstance(dims, int) else list(dims)
    return sorted(_axis(t, int(d), rank) for d in values)


# ------------------------------------------------------------------ elementwise

_BINARY: dict[str, type[ai.AiOp]] = {
    "add": ai.AddOp,
    "sub": ai.SubOp,
    "mul": ai.MulOp,
    "div": ai.DivOp,
    "maximum": ai.MaximumOp,
    "minimum": ai.MinimumOp,
    "pow": ai.PowOp,
}


def _binary(t: Translator, kind: str, a: Any, b: Any, alpha: Any = 1) -> SSAValue:
    dtype = t.out_dtype()
    lhs = t.tensor(a, dtype)
    if alpha not in (None, 1):  # add/sub's alpha scales the second operand
        b = t.emit(ai.MulOp, t.tensor(b, dtype), t.scalar(alpha, dtype))
    return t.emit(_BINARY[kind], lhs, t.tensor(b, dtype))


@lowering("add.Tensor", "add.Scalar")
def _add(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _binary(t, "add", a["self"], a["other"], a.get("alpha"))


@lowering("sub.Tensor", "sub.Scalar")
def _sub(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _binary(t, "sub", a["self"], a["other"], a.get("alpha"))


@lowering("rsub.Scalar", "rsub.Tensor")
def _rsub(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """other - alpha * self."""
    dtype = t.out_dtype()
    x = t.tensor(a["self"], dtype)
    if a.get("alpha") not in (None, 1):
        x = t.emit(ai.MulOp, x, t.scalar(a["alpha"], dtype))
    return t.emit(ai.SubOp, t.tensor(a["other"], dtype), x)


@lowering("mul.Tensor", "mul.Scalar")
def _mul(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _binary(t, "mul", a["self"], a["other"])


@lowering("div.Tensor", "div.Scalar")
def _div(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _binary(t, "div", a["self"], a["other"])


@lowering("div.Tensor_mode")
def _div_mode(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    mode = a.get("rounding_mode")
    if mode is None:
        return _binary(t, "div", a["self"], a["other"])
    if t.out_dtype() in ("f32", "f16", "bf16"):
        quotient = _binary(t, "div", a["self"], a["other"])
        if mode == "floor":
            return t.emit(ai.FloorOp, quotient)
        # trunc(q) = sign(q) * floor(|q|)
        floor = t.emit(ai.FloorOp, t.emit(ai.AbsOp, quotient))
        return t.emit(ai.MulOp, t.emit(ai.SignOp, quotient), floor)
    if mode == "trunc":  # ai.div of integers truncates toward zero
        return _binary(t, "div", a["self"], a["other"])
    raise t.error(f"integer division with rounding_mode='{mode}' is not supported")


@lowering("maximum.default")
def _maximum(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _binary(t, "maximum", a["self"], a["other"])


@lowering("minimum.default")
def _minimum(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _binary(t, "minimum", a["self"], a["other"])


@lowering("pow.Tensor_Tensor", "pow.Tensor_Scalar")
def _pow(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    exponent = a["exponent"]
    if isinstance(exponent, int | float) and not isinstance(exponent, bool):
        x = t.tensor(a["self"], t.out_dtype())
        if exponent == 2:
            return t.emit(ai.MulOp, x, x)
        if exponent == 1:
            return x
        if exponent == 0.5:
            return t.emit(ai.SqrtOp, x)
        if exponent == -1:
            return t.emit(ai.ReciprocalOp, x)
    return _binary(t, "pow", a["self"], exponent)


@lowering("pow.Scalar")
def _pow_scalar(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _binary(t, "pow", a["self"], a["exponent"])


_UNARY: dict[str, type[ai.AiOp]] = {
    "relu.default": ai.ReluOp,
    "sigmoid.default": ai.SigmoidOp,
    "tanh.default": ai.TanhOp,
    "exp.default": ai.ExpOp,
    "log.default": ai.LogOp,
    "sqrt.default": ai.SqrtOp,
    "neg.default": ai.NegOp,
    "abs.default": ai.AbsOp,
    "erf.default": ai.ErfOp,
    "reciprocal.default": ai.ReciprocalOp,
    "silu.default": ai.SiluOp,
    "hardswish.default": ai.HardSwishOp,
    "sin.default": ai.SinOp,
    "cos.default": ai.CosOp,
    "floor.default": ai.FloorOp,
    "ceil.default": ai.CeilOp,
    "sign.default": ai.SignOp,
    "mish.default": ai.MishOp,
}


@lowering(*_UNARY)
def _unary(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    op = _UNARY[node.target.__name__]
    return t.emit(op, t.tensor(a["self"], t.out_dtype()))


@lowering("rsqrt.default")
def _rsqrt(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return t.emit(ai.ReciprocalOp, t.emit(ai.SqrtOp, t.tensor(a["self"], t.out_dtype())))


@lowering("gelu.default")
def _gelu(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return t.emit(ai.GeluOp, t.tensor(a["self"]), approximate=a.get("approximate") or "none")


@lowering("hardsigmoid.default")
def _hardsigmoid(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """relu6(x + 3) / 6."""
    return t.emit(ai.HardSigmoidOp, t.tensor(a["self"]), alpha=1.0 / 6.0, beta=0.5)


@lowering("leaky_relu.default")
def _leaky_relu(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return t.emit(ai.LeakyReluOp, t.tensor(a["self"]), alpha=float(a["negative_slope"]))


@lowering("elu.default")
def _elu(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    if a.get("scale", 1) != 1 or a.get("input_scale", 1) != 1:
        raise t.error("elu with scale or input_scale other than 1 is not supported")
    return t.emit(ai.EluOp, t.tensor(a["self"]), alpha=float(a["alpha"]))


@lowering("clamp.default", "hardtanh.default")
def _clamp(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    low = a.get("min", a.get("min_val"))
    high = a.get("max", a.get("max_val"))
    x = t.tensor(a["self"], t.out_dtype())
    if dtype_of(x) not in ("f32", "f16", "bf16"):
        raise t.error("clamp of integers is not supported")
    bounds = {"min": low, "max": high}
    return t.emit(ai.ClipOp, x, **{k: float(v) for k, v in bounds.items() if v is not None})


@lowering("clamp.Tensor")
def _clamp_tensor(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    dtype = t.out_dtype()
    x = t.tensor(a["self"], dtype)
    if a.get("min") is not None:
        x = t.emit(ai.MaximumOp, x, t.tensor(a["min"], dtype))
    if a.get("max") is not None:
        x = t.emit(ai.MinimumOp, x, t.tensor(a["max"], dtype))
    return x


# ------------------------------------------------------------ comparisons, where

_COMPARE: dict[str, type[ai.AiOp]] = {
    "eq": ai.EqualOp,
    "lt": ai.LessOp,
    "gt": ai.GreaterOp,
    "le": ai.LessEqualOp,
    "ge": ai.GreaterEqualOp,
}


def _common_dtype(t: Translator, args: Sequence[Any]) -> str:
    """The element type two compared operands meet in (PyTorch's promotion, for the
    cases of inference graphs: a float wins over an integer, f32 over 16-bit floats)."""
    names = [dtype_of(t.tensor(x)) for x in args if isinstance(x, fx.Node)]
    floats = [n for n in names if n in ("f32", "f16", "bf16")]
    if any(isinstance(x, float) for x in args) and not floats:
        return "f32"
    if floats:
        return floats[0] if len(set(floats)) == 1 else "f32"
    for name in ("i64", "i32", "i1"):
        if name in names:
            return name
    raise t.error("a comparison of two constants")


@lowering(*(f"{k}.{o}" for k in (*_COMPARE, "ne") for o in ("Tensor", "Scalar")))
def _compare(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    kind = node.target.__name__.split(".")[0]
    dtype = _common_dtype(t, [a["self"], a["other"]])
    lhs, rhs = t.tensor(a["self"], dtype), t.tensor(a["other"], dtype)
    if kind == "ne":
        return t.emit(ai.NotOp, t.emit(ai.EqualOp, lhs, rhs))
    return t.emit(_COMPARE[kind], lhs, rhs)


@lowering("logical_not.default", "bitwise_not.default")
def _logical_not(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    if t.out_dtype() != "i1":
        raise t.error("bitwise_not of integers is not supported")
    return t.emit(ai.NotOp, t.tensor(a["self"], "i1"))


_LOGIC = {"and": ai.AndOp, "or": ai.OrOp, "xor": ai.XorOp}


@lowering(
    *(f"{p}_{k}.{o}" for p in ("logical", "bitwise") for k in _LOGIC for o in ("default", "Tensor"))
)
def _logic(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    name = node.target.__name__
    if name.startswith("bitwise") and t.out_dtype() != "i1":
        raise t.error("bitwise operations on integers are not supported")
    kind = name.split(".")[0].split("_")[1]
    return t.emit(_LOGIC[kind], t.tensor(a["self"], "i1"), t.tensor(a["other"], "i1"))


@lowering("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def _where(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    dtype = t.out_dtype()
    condition = t.tensor(a["condition"])
    return t.emit(ai.WhereOp, condition, t.tensor(a["self"], dtype), t.tensor(a["other"], dtype))


@lowering("_to_copy.default")
def _to_copy(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return t.tensor(a["self"], t.out_dtype())


@lowering("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default")
def _identity(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return t.tensor(a["self"])


# ------------------------------------------------------------------ GEMM, conv


@lowering("mm.default", "bmm.default", "matmul.default")
def _matmul(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    dtype = t.out_dtype()
    return t.emit(
        ai.MatmulOp,
        t.tensor(a["self"], dtype),
        t.tensor(a["mat2" if "mat2" in a else "other"], dtype),
    )


@lowering("addmm.default")
def _addmm(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """beta * bias + alpha * (mat1 @ mat2): a 1-D bias becomes ai.bias_add."""
    dtype = t.out_dtype()
    y = t.emit(ai.MatmulOp, t.tensor(a["mat1"], dtype), t.tensor(a["mat2"], dtype))
    if a.get("alpha", 1) != 1:
        y = t.emit(ai.MulOp, y, t.scalar(a["alpha"], dtype))
    beta = a.get("beta", 1)
    if beta == 0:
        return y
    bias = t.tensor(a["self"], dtype)
    if beta != 1:
        bias = t.emit(ai.MulOp, bias, t.scalar(beta, dtype))
    if shape_of(bias) == (shape_of(y)[1],):
        return t.emit(ai.BiasAddOp, y, bias, axis=1)
    return t.emit(ai.AddOp, y, bias)


@lowering("convolution.default")
def _convolution(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x, w = t.tensor(a["input"]), t.tensor(a["weight"])
    if a["transposed"]:
        raise t.error("transposed convolution is not supported")
    if len(shape_of(x)) != 4 or len(shape_of(w)) != 4:
        raise t.error("only 2-D convolution (4-D input and weight) is supported")
    y = t.emit(
        ai.Conv2DOp,
        x,
        w,
        strides=_dims(a["stride"]),
        padding=_dims(a["padding"]),
        dilations=_dims(a["dilation"]),
        groups=int(a["groups"]),
    )
    bias = t.optional(a["bias"])
    return y if bias is None else t.emit(ai.BiasAddOp, y, bias, axis=1)


# ------------------------------------------------------------ normalisation


@lowering("_softmax.default")
def _softmax(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"], t.out_dtype())
    axis = _axis(t, int(a["dim"]), len(shape_of(x)))
    return t.emit(ai.SoftmaxOp, x, axis=axis - len(shape_of(x)))


@lowering("_log_softmax.default")
def _log_softmax(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """x - m - log(sum(exp(x - m))), m the row maximum."""
    x = t.tensor(a["self"], t.out_dtype())
    axis = _axis(t, int(a["dim"]), len(shape_of(x)))
    shifted = t.emit(ai.SubOp, x, t.emit(ai.ReduceMaxOp, x, axes=[axis], keepdims=True))
    total = t.emit(ai.ReduceSumOp, t.emit(ai.ExpOp, shifted), axes=[axis], keepdims=True)
    return t.emit(ai.SubOp, shifted, t.emit(ai.LogOp, total))


@lowering("native_layer_norm.default")
def _layer_norm(t: Translator, node: fx.Node, a: Args) -> tuple[SSAValue, None, None]:
    """ai.layernorm over the flattened normalised dims; mean and rstd are not computed
    (inference graphs do not use them)."""
    x = t.tensor(a["input"])
    shape = shape_of(x)
    normalised = tuple(int(d) for d in a["normalized_shape"])
    if shape[len(shape) - len(normalised) :] != normalised:
        raise t.error(f"normalized_shape {list(normalised)} is not the end of {list(shape)}")
    d = math.prod(normalised)
    rows = reshape(t, x, shape[: len(shape) - len(normalised)] + (d,))
    dtype = dtype_of(x)
    gamma, beta = (
        reshape(t, t.tensor(p, dtype), (d,)) if p is not None else t.constant(np.full(d, v), dtype)
        for p, v in ((a["weight"], 1.0), (a["bias"], 0.0))
    )
    y = t.emit(ai.LayerNormOp, rows, gamma, beta, epsilon=float(a["eps"]))
    return reshape(t, y, shape), None, None


@lowering("_native_batch_norm_legit_no_training.default")
def _batch_norm(t: Translator, node: fx.Node, a: Args) -> tuple[SSAValue, None, None]:
    x = t.tensor(a["input"])
    c = shape_of(x)[1]
    dtype = dtype_of(x)
    params = [
        t.tensor(a[k], dtype) if a[k] is not None else t.constant(np.full(c, v), dtype)
        for k, v in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0))
    ]
    return t.emit(ai.BatchNormOp, x, *params, epsilon=float(a["eps"])), None, None


# ------------------------------------------------------------------ pooling


def _pool_attrs(t: Translator, a: Args) -> dict[str, Any]:
    kernel = _dims(a["kernel_size"])
    stride = _dims(a["stride"]) if a.get("stride") else kernel
    return {
        "kernel": kernel,
        "strides": stride,
        "padding": _dims(a.get("padding", 0)),
        "ceil_mode": bool(a.get("ceil_mode", False)),
    }


@lowering("max_pool2d_with_indices.default", "max_pool2d.default")
def _max_pool(t: Translator, node: fx.Node, a: Args) -> Any:
    x = t.tensor(a["self"])
    if len(shape_of(x)) != 4:
        raise t.error("only 4-D (N x C x H x W) pooling is supported")
    y = t.emit(ai.MaxPool2DOp, x, dilations=_dims(a.get("dilation", 1)), **_pool_attrs(t, a))
    return (y, None) if "with_indices" in node.target.__name__ else y


@lowering("avg_pool2d.default")
def _avg_pool(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    if len(shape_of(x)) != 4:
        raise t.error("only 4-D (N x C x H x W) pooling is supported")
    if a.get("divisor_override") is not None:
        raise t.error("divisor_override is not supported")
    attrs = _pool_attrs(t, a)
    if attrs["ceil_mode"] and a["count_include_pad"] and any(attrs["padding"]):
        raise t.error("ceil_mode with count_include_pad and padding is not supported")
    return t.emit(ai.AvgPool2DOp, x, count_include_pad=bool(a["count_include_pad"]), **attrs)


@lowering("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default")
def _adaptive_avg_pool(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """Output sizes that divide the input's: an average pool of the quotient."""
    x = t.tensor(a["self"])
    shape = shape_of(x)
    if len(shape) != 4:
        raise t.error("only 4-D (N x C x H x W) pooling is supported")
    out = _dims(a["output_size"])
    if out == (1, 1):
        return t.emit(ai.ReduceMeanOp, x, axes=(2, 3), keepdims=True)
    if shape[2] % out[0] or shape[3] % out[1]:
        raise t.error(f"output size {list(out)} does not divide the input's {list(shape[2:])}")
    kernel = (shape[2] // out[0], shape[3] // out[1])
    return t.emit(ai.AvgPool2DOp, x, kernel=kernel, strides=kernel)


# ---------------------------------------------------------------- reductions


def _reduce(t: Translator, op: type[ai.AiOp], a: Args, dims_key: str = "dim") -> SSAValue:
    x = t.tensor(a["self"], t.out_dtype())
    axes = _axes(t, a.get(dims_key), len(shape_of(x)))
    keep = bool(a.get("keepdim", False))
    return t.emit(op, x, axes=axes, keepdims=keep)


@lowering("mean.dim", "mean.default")
def _mean(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _reduce(t, ai.ReduceMeanOp, a)


@lowering("sum.dim_IntList", "sum.default")
def _sum(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _reduce(t, ai.ReduceSumOp, a)


@lowering("amax.default")
def _amax(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    return _reduce(t, ai.ReduceMaxOp, a)


@lowering("amin.default")
def _amin(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"], t.out_dtype())
    axes = _axes(t, a.get("dim"), len(shape_of(x)))
    largest = t.emit(ai.ReduceMaxOp, t.emit(ai.NegOp, x), axes=axes, keepdims=bool(a["keepdim"]))
    return t.emit(ai.NegOp, largest)


@lowering("any.dim", "any.dims", "any.default")
def _any(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """The maximum of the values as 0/1 floats, back to i1."""
    x = t.tensor(a["self"], "i1")
    axes = _axes(t, a.get("dim"), len(shape_of(x)))
    ones = t.cast(x, "f32")
    top = t.emit(ai.ReduceMaxOp, ones, axes=axes, keepdims=bool(a.get("keepdim", False)))
    return t.cast(top, "i1")


@lowering("var.correction")
def _var(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """sum((x - mean)^2) / (N - correction)."""
    x = t.tensor(a["self"], t.out_dtype())
    shape = shape_of(x)
    axes = _axes(t, a.get("dim"), len(shape))
    count = math.prod(shape[i] for i in (axes or range(len(shape))))
    correction = 1 if a.get("correction") is None else a["correction"]
    centred = t.emit(ai.SubOp, x, t.emit(ai.ReduceMeanOp, x, axes=axes, keepdims=True))
    total = t.emit(
        ai.ReduceSumOp,
        t.emit(ai.MulOp, centred, centred),
        axes=axes,
        keepdims=bool(a.get("keepdim", False)),
    )
    return t.emit(ai.DivOp, total, t.scalar(max(count - correction, 0), dtype_of(x)))


@lowering("argmax.default", "argmin.default")
def _argmax(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    if a.get("dim") is None:
        x = reshape(t, x, (math.prod(shape_of(x)),))
        dim = 0
    else:
        dim = _axis(t, int(a["dim"]), len(shape_of(x)))
    op = ai.ArgMaxOp if node.target.__name__.startswith("argmax") else ai.ArgMinOp
    y = t.emit(op, x, axis=dim, keepdims=bool(a.get("keepdim", False)))
    return reshape(t, y, t.out_shape())


@lowering("cumsum.default")
def _cumsum(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"], t.out_dtype())
    return t.emit(ai.CumSumOp, x, axis=_axis(t, int(a["dim"]), len(shape_of(x))))


# -------------------------------------------------------------------- layout


@lowering(
    "view.default", "_unsafe_view.default", "reshape.default", "unsqueeze.default",
    "squeeze.dim", "squeeze.dims", "squeeze.default", "flatten.using_ints",
    "view_copy.default",
)  # fmt: skip
def _view(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """The same elements under the shape PyTorch recorded."""
    return reshape(t, t.tensor(a["self"]), t.out_shape())


@lowering("expand.default", "expand_copy.default")
def _expand(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    shape = t.out_shape()
    return x if shape == shape_of(x) else t.emit(ai.ExpandOp, x, shape=shape)


@lowering("permute.default", "permute_copy.default")
def _permute(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    rank = len(shape_of(x))
    perm = tuple(_axis(t, int(d), rank) for d in a["dims"])
    return x if perm == tuple(range(rank)) else t.emit(ai.TransposeOp, x, perm=perm)


@lowering("transpose.int")
def _transpose(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    rank = len(shape_of(x))
    perm = list(range(rank))
    d0, d1 = _axis(t, int(a["dim0"]), rank), _axis(t, int(a["dim1"]), rank)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return x if d0 == d1 else t.emit(ai.TransposeOp, x, perm=perm)


@lowering("t.default")
def _t(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    return x if len(shape_of(x)) < 2 else t.emit(ai.TransposeOp, x, perm=(1, 0))


def _slice(t: Translator, x: SSAValue, dim: int, start: Any, end: Any, step: int) -> SSAValue:
    """Python slicing of one dim (clamped; negative bounds from the end) as ai.slice."""
    shape = shape_of(x)
    axis = _axis(t, dim, len(shape))
    if step < 1:
        raise t.error(f"slice step {step} is not supported")
    picked = range(shape[axis])[slice(start, end, step)]
    if len(picked) == 0:
        raise t.error("the slice is empty: fusec does not support empty tensors")
    if len(picked) == shape[axis] and step == 1:
        return x
    offsets, sizes, strides = [0] * len(shape), list(shape), [1] * len(shape)
    offsets[axis], sizes[axis], strides[axis] = picked.start, len(picked), step
    return t.emit(ai.SliceOp, x, offsets=offsets, sizes=sizes, strides=strides)


@lowering("slice.Tensor", "slice_copy.Tensor")
def _slice_tensor(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    start, end = a.get("start"), a.get("end")
    big = 2**62  # INT64_MAX means "to the end"
    end = None if end is None else max(min(int(end), big), -big)
    return _slice(t, t.tensor(a["self"]), int(a["dim"]), start, end, int(a.get("step") or 1))


@lowering("select.int", "select_copy.int")
def _select(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    axis = _axis(t, int(a["dim"]), len(shape_of(x)))
    index = int(a["index"])
    size = shape_of(x)[axis]
    if not -size <= index < size:
        raise t.error(f"index {index} is out of range for dim {axis} of size {size}")
    index %= size
    return reshape(t, _slice(t, x, axis, index, index + 1, 1), t.out_shape())


@lowering("split_with_sizes.default", "split.Tensor", "split_with_sizes_copy.default")
def _split(t: Translator, node: fx.Node, a: Args) -> tuple[SSAValue, ...]:
    x = t.tensor(a["self"])
    axis = _axis(t, int(a.get("dim", 0)), len(shape_of(x)))
    total = shape_of(x)[axis]
    if "split_sizes" in a:
        sizes = [int(s) for s in a["split_sizes"]]
    else:
        chunk = int(a["split_size"])
        sizes = [min(chunk, total - i) for i in range(0, total, chunk)]
    parts, start = [], 0
    for size in sizes:
        parts.append(_slice(t, x, axis, start, start + size, 1))
        start += size
    return tuple(parts)


@lowering("cat.default", "concat.default")
def _cat(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    dtype = t.out_dtype()
    values = [t.tensor(v, dtype) for v in a["tensors"]]
    values = [v for v in values if 0 not in shape_of(v)]
    rank = len(t.out_shape())
    axis = _axis(t, int(a.get("dim", 0)), rank)
    if len(values) == 1:
        return values[0]
    return t.emit(ai.ConcatOp, *values, axis=axis)


@lowering("embedding.default")
def _embedding(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """Rows of the table at the run-time token ids (ai.take)."""
    return t.emit(ai.TakeOp, t.tensor(a["weight"]), t.tensor(a["indices"]), axis=0)


@lowering("index_select.default")
def _index_select(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    x = t.tensor(a["self"])
    axis = _axis(t, int(a["dim"]), len(shape_of(x)))
    return t.emit(ai.TakeOp, x, t.tensor(a["index"]), axis=axis)


@lowering("full_like.default", "zeros_like.default", "ones_like.default", "full.default")
def _full_like(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """One value broadcast to the recorded shape (no buffer of that size)."""
    name = node.target.__name__
    value = {"zeros_like.default": 0, "ones_like.default": 1}.get(name, a.get("fill_value"))
    if not isinstance(value, int | float):
        raise t.error(f"fill value {value!r} is not a number")
    scalar = t.scalar(value, t.out_dtype())
    shape = t.out_shape()
    return t.emit(ai.ExpandOp, scalar, shape=shape) if shape else scalar


@lowering("repeat.default")
def _repeat(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """Tiles: each dim d viewed as (1, d), broadcast to (r, d), then merged to r * d."""
    x = t.tensor(a["self"])
    repeats = [int(r) for r in a["repeats"]]
    shape = (1,) * (len(repeats) - len(shape_of(x))) + shape_of(x)
    interleaved = [d for size in shape for d in (1, size)]
    tiled = [d for r, size in zip(repeats, shape, strict=True) for d in (r, size)]
    y = t.emit(ai.ExpandOp, reshape(t, x, interleaved), shape=tiled)
    return reshape(t, y, t.out_shape())


@lowering("_assert_tensor_metadata.default", "_assert_scalar.default", "_assert_async.msg")
def _assertion(t: Translator, node: fx.Node, a: Args) -> None:
    """PyTorch's checks of facts the import has already checked (static types)."""
    return None


@lowering("scaled_dot_product_attention.default", "fusec.sdpa.default")
def _sdpa(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """ai.attention: the mask a boolean one (0 / -inf), a float one, a causal one
    (keys after the query's position: -inf) or none (a zero)."""
    return _attention(t, a, a.get("attn_mask"))


#: The fused SDPA kernels ATen picks for ``scaled_dot_product_attention`` on a device
#: (cuDNN, flash, memory-efficient on CUDA; flash on CPU; a backend's overrideable one).
#: Their extra results (log-sum-exp, sequence offsets, RNG state, debug mask) exist for
#: the backward pass and dropout: fusec computes the output alone, and a graph using
#: another result leaves the node to eager PyTorch (``unsupported_reason``).
SDPA_VARIANTS = (
    "_scaled_dot_product_cudnn_attention.default",
    "_scaled_dot_product_flash_attention.default",
    "_scaled_dot_product_efficient_attention.default",
    "_scaled_dot_product_flash_attention_for_cpu.default",
    "_scaled_dot_product_fused_attention_overrideable.default",
)


@lowering(*SDPA_VARIANTS)
def _sdpa_variant(t: Translator, node: fx.Node, a: Args) -> tuple[SSAValue | None, ...]:
    """ai.attention for the output (the mask is ``attn_bias``, an additive float bias,
    or ``attn_mask`` for the CPU kernel); None for every other result."""
    if a.get("return_debug_mask"):
        raise t.error("the debug attention mask is not supported (inference only)")
    mask = a.get("attn_bias", a.get("attn_mask"))
    out = _attention(t, a, mask)
    val = t.val()
    extra = len(val) - 1 if isinstance(val, tuple | list) else 0
    return (out, *([None] * extra))


def _attention(t: Translator, a: Args, mask: Any) -> SSAValue:
    """ai.attention of ``a``'s query, key, value, dropout_p, is_causal and scale with
    ``mask`` (a bool or float tensor, or None). A mask known at import (HF's mask of an
    all-ones attention_mask, folded) becomes the constant bias itself, so that a target
    can see it is zero or causal (the cuda flash kernel's condition)."""
    dtype = t.out_dtype()
    q, k, v = (t.tensor(a[name], dtype) for name in ("query", "key", "value"))
    if a.get("dropout_p"):
        raise t.error("dropout in attention is not supported (inference only)")
    if shape_of(q)[:-2] != shape_of(k)[:-2]:
        raise t.error("query and key/value with different head counts (GQA) are not supported")
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(shape_of(q)[-1]) if scale is None else float(scale)
    s, length = shape_of(q)[-2], shape_of(k)[-2]
    if a.get("is_causal"):
        if mask is not None:
            raise t.error("attn_mask and is_causal together")
        causal = np.where(np.tril(np.ones((s, length), dtype=bool)), 0.0, -np.inf)
        bias = t.constant(causal, dtype)
    elif mask is None:
        bias = t.scalar(0.0, dtype)
    elif (known := t.const_of(mask)) is not None:
        values = np.asarray(to_numpy(known))
        if values.dtype == np.bool_:
            values = np.where(values, 0.0, -np.inf)
        bias = t.constant(values, dtype)
    elif dtype_of(t.tensor(mask)) == "i1":
        bias = t.emit(ai.WhereOp, t.tensor(mask), t.scalar(0.0, dtype), t.scalar(-np.inf, dtype))
    else:
        bias = t.tensor(mask, dtype)
    masked = mask is not None  # a row of -inf only gives 0, as PyTorch's maths does
    return t.emit(ai.AttentionOp, q, k, v, bias, scale=scale, nan_to_zero=masked)


@lowering("index.Tensor")
def _index(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """Advanced indexing ``x[..., i, j, ...]`` with integer index tensors (``None``: a
    whole dim). One index tensor is one ``ai.take`` on its dim. Several broadcast
    together (shape ``B``): the indexed dims (moved to the front first when they are not
    adjacent, where PyTorch puts ``B`` first) merge into one dim, looked up at the flat
    positions: computed at import when the index tensors are constants (one
    ``ai.gather``, or a reshape when they name every element in order: the attention
    mask's ``mask[batch_idx, kv_idx]``), else with integer ops at run time for one
    ``ai.take``, where an index outside its own dim becomes a position outside the
    merged dim, so that the lookup fails as PyTorch's does."""
    x = t.tensor(a["self"])
    given = [(axis, i) for axis, i in enumerate(a["indices"]) if i is not None]
    if not given:
        raise t.error("indexing without an index tensor")
    for _, index in given:
        known = t.const_of(index)
        kind = dtype_name(known.dtype) if known is not None else dtype_of(t.tensor(index))
        if kind not in ("i64", "i32"):
            raise t.error(f"indexing with {kind} indices (a mask) is not supported")
    if len(given) == 1:
        axis, index = given[0]
        return t.emit(ai.TakeOp, x, t.tensor(index), axis=axis)
    axes = [axis for axis, _ in given]
    if axes != list(range(axes[0], axes[0] + len(axes))):  # not adjacent: to the front
        rest = [d for d in range(len(shape_of(x))) if d not in axes]
        x = t.emit(ai.TransposeOp, x, perm=(*axes, *rest))
        axes = list(range(len(axes)))
    shape, first, last = shape_of(x), axes[0], axes[-1]
    sizes = shape[first : last + 1]
    merged = reshape(t, x, (*shape[:first], math.prod(sizes), *shape[last + 1 :]))
    y = _lookup(t, merged, first, sizes, [index for _, index in given])
    return reshape(t, y, t.out_shape())


@lowering("gather.default")
def _gather(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """``torch.gather``: ``out[p] = self[p with p[dim] = index[p]]``: the advanced
    indexing of the whole input by iotas along the other dims and ``index`` along
    ``dim``, one lookup in the flattened input."""
    x = t.tensor(a["self"])
    shape = shape_of(x)
    if not shape:
        raise t.error("gather of a rank-0 tensor is not supported")
    dim = _axis(t, int(a["dim"]), len(shape))
    index = a["index"]
    known = t.const_of(index)
    index_shape = tuple(known.shape) if known is not None else shape_of(t.tensor(index))
    if len(index_shape) != len(shape) or any(
        i > d for k, (i, d) in enumerate(zip(index_shape, shape, strict=True)) if k != dim
    ):
        raise t.error(f"index of shape {list(index_shape)} for an input of {list(shape)}")
    items: list[Any] = []
    for k, count in enumerate(index_shape):
        if k == dim:
            items.append(index)
        else:
            items.append(np.arange(count).reshape((count,) + (1,) * (len(shape) - k - 1)))
    flat = reshape(t, x, (math.prod(shape),))
    return reshape(t, _lookup(t, flat, 0, shape, items, negative=False), index_shape)


def _lookup(
    t: Translator,
    merged: SSAValue,
    axis: int,
    sizes: Sequence[int],
    items: Sequence[Any],
    negative: bool = True,
) -> SSAValue:
    """``index_lookup.lookup`` (ONNX GatherND's too) of the index ``items``: numpy arrays,
    or FX nodes of index tensors (their values when known at import, on any device, else
    ai values)."""
    resolved: list[Item] = []
    for item in items:
        if isinstance(item, np.ndarray):
            resolved.append(item)
            continue
        const = t.const_of(item)
        resolved.append(t.tensor(item) if const is None else to_numpy(const))
    return lookup(
        t, merged, axis, sizes, resolved, negative=negative,
        out_of_range=lambda k: f"index tensor #{k} has an index out of range for a dim of "
        f"{sizes[k]}",
    )  # fmt: skip


@lowering("constant_pad_nd.default")
def _constant_pad(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """Per padded dim (pairs from the last dim back): blocks of the value concatenated
    before and after; a negative pad slices instead."""
    y = t.tensor(a["self"])
    rank = len(shape_of(y))
    pads = [int(p) for p in a["pad"]]
    value = float(a.get("value") or 0.0)
    for pair in range(len(pads) // 2):
        axis = rank - 1 - pair
        begin, end = pads[2 * pair], pads[2 * pair + 1]
        size = shape_of(y)[axis]
        y = _slice(t, y, axis, max(-begin, 0), size - max(-end, 0), 1)
        parts: list[SSAValue | None] = []
        for count in (begin, end):
            if count > 0:
                block = list(shape_of(y))
                block[axis] = count
                fill = t.emit(ai.ExpandOp, t.scalar(value, dtype_of(y)), shape=block)
                parts.append(fill)
            else:
                parts.append(None)
        pieces = [p for p in (parts[0], y, parts[1]) if p is not None]
        y = pieces[0] if len(pieces) == 1 else t.emit(ai.ConcatOp, *pieces, axis=axis)
    return y
