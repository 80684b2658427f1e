"""``fusec.ops``: the ``ai`` dialect's ops as functions on traced tensors.

Use them inside a ``@fusec.fuse`` function. Keyword arguments follow numpy and
PyTorch conventions (``conv2d(x, w, padding=1, stride=2)``, ``softmax(x,
axis=-1)``, ``layernorm(x, gamma, beta, eps=1e-5)``); operands may also be
Python numbers or numpy arrays, which become constants of the tensor's
element type. Each function emits one op (``conv2d`` with ``bias`` emits two),
whose result type the dialect's shape function infers; a bad shape is
reported at the calling line.

The functions of unary and binary ops without attributes (``relu``, ``add``,
...) are made from the op classes' facts (``function_name()``), so a new
such op needs nothing here; ops with attributes have a function below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusec.dialect import ops as ai
from fusec.frontend.tracer import Trace, Traced, current_trace, dtype_name, user_error
from fusec.ir.dtypes import QUANTIZED_TYPES


def _trace(name: str, *operands: Any) -> Trace:
    """The trace the operands belong to (or the running one, for constant operands)."""
    for x in operands:
        if isinstance(x, Traced):
            return x.trace
    trace = current_trace()
    if trace is None:
        raise user_error(
            f"fusec.ops.{name} works on traced tensors: call it inside a @fusec.fuse function"
        )
    return trace


def _ints(name: str, key: str, value: Any, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """An int or a sequence of ints of one of ``sizes`` (an int means the same value twice)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) in sizes:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
    counts = " or ".join(str(n) for n in sizes)
    raise user_error(f"fusec.ops.{name}: {key} must be an int or {counts} ints, got {value!r}")


# ----------------------------------------------------------------- elementwise


def _elementwise_function(op_cls: type[ai.AiOp], name: str) -> Callable[..., Traced]:
    """``fusec.ops.<name>`` for a unary or binary op without attributes."""
    if issubclass(op_cls, ai.BinaryOp):

        def binary(x: Any, y: Any) -> Traced:
            return _trace(name, x, y).binary(op_cls, x, y)

        function: Callable[..., Traced] = binary
    else:

        def unary(x: Any) -> Traced:
            return _trace(name, x).emit(op_cls, (x,))

        function = unary
    function.__name__ = function.__qualname__ = name
    function.__doc__ = op_cls.__doc__
    function.__module__ = __name__
    return function


def _simple_ops() -> dict[str, type[ai.AiOp]]:
    """The ops whose ``fusec.ops`` function follows from their facts alone."""
    return {
        op.function_name(): op
        for op in ai.TENSOR_OPS
        if issubclass(op, (ai.UnaryOp, ai.BinaryOp)) and not op.declared_properties()
    }


for _name, _op in _simple_ops().items():
    globals()[_name] = _elementwise_function(_op, _name)


def gelu(x: Any, approximate: str = "none") -> Traced:
    """GELU: exact (erf) with ``approximate="none"``, or the ``"tanh"`` approximation."""
    if approximate not in ("none", "tanh"):
        message = f'approximate must be "none" or "tanh", got {approximate!r}'
        raise user_error(f"fusec.ops.gelu: {message}")
    return _trace("gelu", x).emit(ai.GeluOp, (x,), approximate=approximate)


def clip(x: Any, min: float | None = None, max: float | None = None) -> Traced:  # noqa: A002
    """``x`` clipped to [min, max] as ``numpy.clip`` (``None``: no bound); NaN propagates."""
    bounds = {}
    for key, value in (("min", min), ("max", max)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise user_error(f"fusec.ops.clip: {key} must be a number or None, got {value!r}")
        bounds[key] = float(value)
    return _trace("clip", x).emit(ai.ClipOp, (x,), **bounds)


def _float_attr(name: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise user_error(f"fusec.ops.{name}: {key} must be a number, got {value!r}")
    return float(value)


def _activation(op_cls: type[ai.AiOp], name: str) -> Callable[..., Traced]:
    """``fusec.ops.<name>`` for a unary op whose attributes are floats (alpha, beta,
    gamma), taken as keywords with the op's defaults."""

    def activation(x: Any, **attrs: Any) -> Traced:
        declared = op_cls.declared_properties()
        for key in attrs:
            if key not in declared:
                known = ", ".join(declared)
                raise user_error(f"fusec.ops.{name}: unknown keyword {key!r} (takes {known})")
        values = {key: _float_attr(name, key, value) for key, value in attrs.items()}
        return _trace(name, x).emit(op_cls, (x,), **values)

    defaults = ", ".join(
        f"{key}={ai.python_value(prop.default_value)}"
        for key, prop in op_cls.declared_properties().items()
        if prop.default_value is not None
    )
    activation.__name__ = activation.__qualname__ = name
    activation.__doc__ = f"{op_cls.__doc__} (keywords: {defaults})"
    activation.__module__ = __name__
    return activation


leaky_relu = _activation(ai.LeakyReluOp, "leaky_relu")
elu = _activation(ai.EluOp, "elu")
selu = _activation(ai.SeluOp, "selu")
celu = _activation(ai.CeluOp, "celu")
hard_sigmoid = _activation(ai.HardSigmoidOp, "hard_sigmoid")
thresholded_relu = _activation(ai.ThresholdedReluOp, "thresholded_relu")


def isnan(x: Any) -> Traced:
    """1 where x is NaN, else 0 (in x's element type): a condition for ``where``."""
    return _trace("isnan", x).emit(ai.IsNanOp, (x,))


def where(condition: Any, a: Any, b: Any) -> Traced:
    """``a`` where ``condition`` is non-zero, else ``b`` (all three broadcast)."""
    return _trace("where", condition, a, b).emit(ai.WhereOp, (condition, a, b))


def cast(x: Any, dtype: Any) -> Traced:
    """Convert the elements to ``dtype`` ("f16", "bf16", "f32" or a numpy/torch dtype)."""
    return _trace("cast", x).emit(ai.CastOp, (x,), to=dtype_name(dtype))


def quantize(
    x: Any,
    scale: Any,
    dtype: str,
    zero_point: Any = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    saturate: bool = True,
) -> Traced:
    """``x / scale`` quantized to ``dtype`` ("i8", "ui8", "i4", "ui4", "f8E4M3FN", "f8E5M2") as ONNX
    QuantizeLinear: per tensor, per ``axis`` or per block of ``block_size`` along it."""
    trace = _trace("quantize", x)
    zp = trace.constant(_zeros_like(scale, zero_point), _quantized("quantize", dtype))
    attrs = {"axis": _int("quantize", axis), "block_size": block_size, "saturate": saturate}
    return trace.emit(ai.QuantizeOp, (x, scale, zp), **attrs)


def dequantize(
    q: Any, scale: Any, zero_point: Any = None, *, axis: int = 1, block_size: int = 0
) -> Traced:
    """``(q - zero_point) * scale`` in the scale's element type, as ONNX DequantizeLinear."""
    trace = _trace("dequantize", q)
    scale = trace.constant(scale, None) if not isinstance(scale, Traced) else scale
    zp = trace.constant(_zeros_like(scale, zero_point), q.dtype_name)
    attrs = {"axis": _int("dequantize", axis), "block_size": block_size}
    return trace.emit(ai.DequantizeOp, (q, scale, zp), **attrs)


def _quantized(name: str, dtype: str) -> str:
    if dtype not in QUANTIZED_TYPES:
        raise user_error(f"fusec.ops.{name}: dtype must be one of {QUANTIZED_TYPES}, got {dtype!r}")
    return dtype


def _zeros_like(scale: Any, zero_point: Any) -> Any:
    """The zero point as a float64 array (exact for every quantized type), zeros in the
    scale's shape when there is none."""
    import numpy as np

    if zero_point is not None:
        return np.asarray(zero_point, dtype=np.float64)
    return np.zeros(scale.shape if hasattr(scale, "shape") else np.shape(scale))


def bias_add(x: Any, bias: Any, axis: int = 1) -> Traced:
    """x + bias, the 1-D ``bias`` broadcast along dimension ``axis`` of x."""
    return _trace("bias_add", x, bias).emit(ai.BiasAddOp, (x, bias), axis=_int("bias_add", axis))


def batch_norm(x: Any, scale: Any, bias: Any, mean: Any, var: Any, *, eps: float = 1e-5) -> Traced:
    """Inference batch normalisation over dim 1 (channels):
    (x - mean) / sqrt(var + eps) * scale + bias (folded into a conv2d feeding it)."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise user_error(f"fusec.ops.batch_norm: eps must be a non-negative number, got {eps!r}")
    trace = _trace("batch_norm", x, scale, bias, mean, var)
    return trace.emit(ai.BatchNormOp, (x, scale, bias, mean, var), epsilon=float(eps))


def _int(name: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise user_error(f"fusec.ops.{name}: axis must be an int, got {value!r}")


# ------------------------------------------------------------------ the others


def conv2d(
    x: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, ...] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
) -> Traced:
    """2-D convolution of an NCHW ``x`` with a KCRS ``weight`` (PyTorch's layout).

    ``padding`` is an int, an (h, w) pair, or (h_begin, w_begin, h_end, w_end);
    a ``bias`` of length K is added per output channel (``ai.bias_add``).
    """
    trace = _trace("conv2d", x, weight, bias)
    if not isinstance(groups, int) or isinstance(groups, bool):
        raise user_error(f"fusec.ops.conv2d: groups must be an int, got {groups!r}")
    out = trace.emit(
        ai.Conv2DOp,
        (x, weight),
        strides=_ints("conv2d", "stride", stride, (2,)),
        padding=_ints("conv2d", "padding", padding, (2, 4)),
        dilations=_ints("conv2d", "dilation", dilation, (2,)),
        groups=groups,
    )
    if bias is not None:
        out = trace.emit(ai.BiasAddOp, (out, bias), axis=1)
    return out


def matmul(a: Any, b: Any, *, transpose_a: bool = False, transpose_b: bool = False) -> Traced:
    """a @ b over the last two dims, leading dims broadcast; ``transpose_*`` swap an
    operand's last two dims first (as do ``.T``/``.mT`` operands)."""
    trace = _trace("matmul", a, b)
    return trace.matmul(a, b, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def layernorm(x: Any, gamma: Any, beta: Any, *, eps: float = 1e-5) -> Traced:
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise user_error(f"fusec.ops.layernorm: eps must be a non-negative number, got {eps!r}")
    trace = _trace("layernorm", x, gamma, beta)
    return trace.emit(ai.LayerNormOp, (x, gamma, beta), epsilon=float(eps))


def rms_norm(x: Any, gamma: Any, *, eps: float = 1e-6) -> Traced:
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis (Llama's RMSNorm)."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise user_error(f"fusec.ops.rms_norm: eps must be a non-negative number, got {eps!r}")
    trace = _trace("rms_norm", x, gamma)
    return trace.emit(ai.RMSNormOp, (x, gamma), epsilon=float(eps))


def attention(
    q: Any, key: Any, v: Any, mask: Any = 0.0, *, scale: float = 1.0, nan_to_zero: bool = False
) -> Traced:
    """softmax(q @ key^T * scale + mask) @ v over the last axis, as PyTorch's
    ``scaled_dot_product_attention`` takes them: q (..., S, D), key (..., T, D),
    v (..., T, E); ``mask`` (added to the scores) broadcasts to (..., S, T)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise user_error(f"fusec.ops.attention: scale must be a number, got {scale!r}")
    trace = _trace("attention", q, key, v, mask)
    attrs = {"scale": float(scale), "nan_to_zero": bool(nan_to_zero)}
    return trace.emit(ai.AttentionOp, (q, key, v, mask), **attrs)


def moe_experts(x: Any, weights: Any, experts: Any, gate_up: Any, down: Any) -> Traced:
    """The experts of a mixture-of-experts layer, the routing given (what transformers'
    ``MixtralExperts`` computes): token t of x (T, D) goes to experts ``experts[t]`` (k
    indices, i64/i32) with ``weights[t]``; expert e computes ``down[e] @ (silu(g) * u)``,
    ``g, u`` the halves of ``gate_up[e] @ x[t]``; ``gate_up`` (E, 2F, D), ``down``
    (E, D, F). The routing itself is ordinary ops (``softmax``, a top-k, a sum)."""
    trace = _trace("moe_experts", x, weights, experts, gate_up, down)
    return trace.emit(ai.MoEExpertsOp, (x, weights, experts, gate_up, down))


def softmax(x: Any, axis: int = -1) -> Traced:
    """exp(x) / sum(exp(x)) along ``axis``."""
    return _trace("softmax", x).emit(ai.SoftmaxOp, (x,), axis=_int("softmax", axis))


# ------------------------------------------------------------- layout ops


def _int_list(name: str, key: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value)
    raise user_error(f"fusec.ops.{name}: {key} must be a sequence of ints, got {value!r}")


def reshape(x: Any, shape: Any) -> Traced:
    """The same elements in row-major order under a static ``shape`` (free: a view)."""
    return _trace("reshape", x).emit(ai.ReshapeOp, (x,), shape=_int_list("reshape", "shape", shape))


def transpose(x: Any, perm: Any) -> Traced:
    """Permuted dims (``numpy.transpose`` with ``axes=perm``)."""
    return _trace("transpose", x).emit(
        ai.TransposeOp, (x,), perm=_int_list("transpose", "perm", perm)
    )


def slice(x: Any, offsets: Any, sizes: Any, strides: Any = None) -> Traced:  # noqa: A001
    """Per dim, ``sizes[d]`` elements from ``offsets[d]`` every ``strides[d]`` (default 1)."""
    offsets = _int_list("slice", "offsets", offsets)
    sizes = _int_list("slice", "sizes", sizes)
    strides = (1,) * len(sizes) if strides is None else _int_list("slice", "strides", strides)
    return _trace("slice", x).emit(ai.SliceOp, (x,), offsets=offsets, sizes=sizes, strides=strides)


def concat(tensors: Any, axis: int = 0) -> Traced:
    """The tensors joined along ``axis``."""
    if not isinstance(tensors, (tuple, list)) or not tensors:
        raise user_error("fusec.ops.concat: expects a non-empty sequence of tensors")
    return _trace("concat", *tensors).emit(ai.ConcatOp, tuple(tensors), axis=_int("concat", axis))


def gather(x: Any, indices: Any, axis: int = 0) -> Traced:
    """The slices ``indices`` (constant ints) of dim ``axis``, in that order."""
    chosen = _int_list("gather", "indices", indices)
    return _trace("gather", x).emit(ai.GatherOp, (x,), axis=_int("gather", axis), indices=chosen)


def mod(x: Any, y: Any, fmod: bool = False) -> Traced:
    """Integer remainder: the sign of ``y`` (Python's ``%``), or of ``x`` with ``fmod``."""
    return _trace("mod", x, y).emit(ai.ModOp, (x, y), fmod=bool(fmod))


def take(table: Any, indices: Any, axis: int = 0) -> Traced:
    """The slices of ``table`` along ``axis`` at the run-time integer ``indices``
    (``numpy.take``; an embedding lookup)."""
    trace = _trace("take", table, indices)
    return trace.emit(ai.TakeOp, (table, indices), axis=_int("take", axis))


def cumsum(x: Any, axis: int = 0, *, exclusive: bool = False, reverse: bool = False) -> Traced:
    """Running sums along ``axis`` (ONNX CumSum's ``exclusive`` and ``reverse``)."""
    attrs = {"axis": _int("cumsum", axis), "exclusive": bool(exclusive), "reverse": bool(reverse)}
    return _trace("cumsum", x).emit(ai.CumSumOp, (x,), **attrs)


def _arg_reduce(op_cls: type[ai.ArgReduceOp], name: str) -> Callable[..., Traced]:
    def arg_reduce(
        x: Any, axis: int = 0, keepdims: bool = True, select_last_index: bool = False
    ) -> Traced:
        attrs = {"keepdims": bool(keepdims), "select_last_index": bool(select_last_index)}
        return _trace(name, x).emit(op_cls, (x,), axis=_int(name, axis), **attrs)

    arg_reduce.__name__ = arg_reduce.__qualname__ = name
    arg_reduce.__doc__ = op_cls.__doc__
    return arg_reduce


argmax = _arg_reduce(ai.ArgMaxOp, "argmax")
argmin = _arg_reduce(ai.ArgMinOp, "argmin")


def expand(x: Any, shape: Any) -> Traced:
    """``x`` broadcast to ``shape`` (``numpy.broadcast_to``)."""
    return _trace("expand", x).emit(ai.ExpandOp, (x,), shape=_int_list("expand", "shape", shape))


def rotate_half(x: Any) -> Traced:
    """RoPE's rotate-half: ``concat(-x[..., n/2:], x[..., :n/2])`` along the last axis."""
    return _trace("rotate_half", x).emit(ai.RotateHalfOp, (x,))


# ------------------------------------------------------- reductions, pooling


def _reduction(op_cls: type[ai.ReduceOp], name: str) -> Callable[..., Traced]:
    def reduction(x: Any, axes: Any = (), keepdims: bool = False) -> Traced:
        chosen = (axes,) if isinstance(axes, int) else _int_list(name, "axes", axes)
        return _trace(name, x).emit(op_cls, (x,), axes=chosen, keepdims=bool(keepdims))

    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = f"{op_cls.__doc__} (an int or ints; all dims when empty)"
    return reduction


reduce_mean = _reduction(ai.ReduceMeanOp, "reduce_mean")
reduce_sum = _reduction(ai.ReduceSumOp, "reduce_sum")
reduce_max = _reduction(ai.ReduceMaxOp, "reduce_max")


def _pool(op_cls: type[ai.Pool2DOp], name: str) -> Callable[..., Traced]:
    def pool(
        x: Any,
        kernel: int | tuple[int, int],
        *,
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, ...] = 0,
        dilation: int | tuple[int, int] = 1,
        ceil_mode: bool = False,
        **extra: Any,
    ) -> Traced:
        kernel_hw = _ints(name, "kernel", kernel, (2,))
        attrs = {
            "kernel": kernel_hw,
            "strides": kernel_hw if stride is None else _ints(name, "stride", stride, (2,)),
            "padding": _ints(name, "padding", padding, (2, 4)),
            "dilations": _ints(name, "dilation", dilation, (2,)),
            "ceil_mode": bool(ceil_mode),
        }
        if extra:
            if set(extra) != {"count_include_pad"} or op_cls is not ai.AvgPool2DOp:
                raise user_error(f"fusec.ops.{name}: unknown argument(s) {', '.join(extra)}")
            attrs["count_include_pad"] = bool(extra["count_include_pad"])
        return _trace(name, x).emit(op_cls, (x,), **attrs)

    pool.__name__ = pool.__qualname__ = name
    pool.__doc__ = f"{op_cls.__doc__} (stride defaults to the kernel, as in PyTorch)"
    return pool


max_pool2d = _pool(ai.MaxPool2DOp, "max_pool2d")
avg_pool2d = _pool(ai.AvgPool2DOp, "avg_pool2d")


__all__ = sorted(
    [
        *_simple_ops(),
        "rotate_half",
        "batch_norm",
        "attention",
        "moe_experts",
        "bias_add",
        "cast",
        "clip",
        "quantize",
        "dequantize",
        "leaky_relu",
        "elu",
        "selu",
        "celu",
        "hard_sigmoid",
        "thresholded_relu",
        "conv2d",
        "gelu",
        "isnan",
        "layernorm",
        "rms_norm",
        "matmul",
        "softmax",
        "where",
        "reshape",
        "transpose",
        "slice",
        "concat",
        "gather",
        "mod",
        "take",
        "cumsum",
        "expand",
        "argmax",
        "argmin",
        "reduce_mean",
        "reduce_sum",
        "reduce_max",
        "max_pool2d",
        "avg_pool2d",
    ]
)
