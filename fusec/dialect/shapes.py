"""Shape functions of the ``ai`` ops: one per op, in plain Python.

They take and return ``TensorSpec`` (a static shape and an element-type name)
so that every place that needs an op's result type (the parser, the builders,
the verifiers, the Python tracer, the ONNX importer) calls the same function.
A bad combination raises ``ShapeError`` whose message names the operand and
shows the expected versus the actual shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusec.ir import dtypes
from fusec.ir.tensors import MAX_ELEMENTS as MAX_ELEMENTS
from fusec.ir.tensors import MAX_RANK as MAX_RANK
from fusec.ir.tensors import ShapeError as ShapeError
from fusec.ir.tensors import TensorSpec as TensorSpec
from fusec.ir.tensors import shape_problem as shape_problem

ELEMENT_TYPES = tuple(dtypes.ELEMENT_TYPES)


class DtypeError(ShapeError):
    """An operand of an element type the op does not take (an integer to a float op)."""


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _same_dtype(op: str, specs: Sequence[tuple[str, TensorSpec]]) -> str:
    first_name, first = specs[0]
    for name, spec in specs[1:]:
        if spec.dtype != first.dtype:
            raise ShapeError(
                f"{op}: operand '{name}' has element type {spec.dtype}, expected "
                f"{first.dtype} (the element type of '{first_name}')"
            )
    return first.dtype


def _rank(op: str, name: str, spec: TensorSpec, rank: int) -> None:
    if spec.rank != rank:
        raise ShapeError(
            f"{op}: operand '{name}' must have rank {rank}, got {spec} (rank {spec.rank})"
        )


def _normalise_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def conv2d_padding(padding: Sequence[int]) -> tuple[int, int, int, int]:
    """(h_begin, w_begin, h_end, w_end) from 2 symmetric or 4 explicit values."""
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    if len(padding) == 4:
        return (padding[0], padding[1], padding[2], padding[3])
    raise ShapeError(f"ai.conv2d: padding must have 2 or 4 values, got {len(padding)}")


def conv2d(
    x: TensorSpec,
    w: TensorSpec,
    *,
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0),
    dilations: Sequence[int] = (1, 1),
    groups: int = 1,
) -> TensorSpec:
    """NCHW input * KCRS weight -> N x K x OH x OW."""
    op = "ai.conv2d"
    _rank(op, "input", x, 4)
    _rank(op, "weight", w, 4)
    dtype = _same_dtype(op, [("input", x), ("weight", w)])
    for name, vals in (("strides", strides), ("dilations", dilations)):
        if len(vals) != 2 or any(v < 1 for v in vals):
            raise ShapeError(f"{op}: {name} must be 2 positive values, got {list(vals)}")
    pads = conv2d_padding(padding)
    if any(p < 0 for p in pads):
        raise ShapeError(f"{op}: padding must be non-negative, got {list(padding)}")
    if groups < 1:
        raise ShapeError(f"{op}: groups must be positive, got {groups}")
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    if c % groups or k % groups:
        raise ShapeError(
            f"{op}: groups = {groups} must divide input channels ({c}) and output channels ({k})"
        )
    if cg != c // groups:
        raise ShapeError(
            f"{op}: operand 'weight' has {cg} input channels (shape {_fmt(w.shape)}), "
            f"expected {c // groups} to match operand 'input' (shape {_fmt(x.shape)}, "
            f"{c} channels, groups = {groups})"
        )
    out = []
    for size, kern, s, d, pb, pe, axis in (
        (h, kh, strides[0], dilations[0], pads[0], pads[2], "height"),
        (wd, kw, strides[1], dilations[1], pads[1], pads[3], "width"),
    ):
        span = d * (kern - 1) + 1
        if size + pb + pe < span:
            raise ShapeError(
                f"{op}: kernel {axis} {kern} (dilated to {span}) exceeds padded input "
                f"{axis} {size + pb + pe}"
            )
        out.append((size + pb + pe - span) // s + 1)
    return TensorSpec((n, k, out[0], out[1]), dtype)


def bias_add(x: TensorSpec, b: TensorSpec, *, axis: int = 1) -> TensorSpec:
    """x + b broadcast along ``axis``; b is 1-D of length x.shape[axis]."""
    op = "ai.bias_add"
    dtype = _same_dtype(op, [("input", x), ("bias", b)])
    _rank(op, "bias", b, 1)
    ax = _normalise_axis(op, axis, x.rank)
    if b.shape[0] != x.shape[ax]:
        raise ShapeError(
            f"{op}: operand 'bias' has length {b.shape[0]}, expected {x.shape[ax]} "
            f"(dim {axis} of operand 'input', shape {_fmt(x.shape)})"
        )
    return TensorSpec(x.shape, dtype)


def broadcast_shapes(op: str, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """numpy broadcasting of two shapes."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for da, db in zip(pa, pb, strict=True):
        if da != db and 1 not in (da, db):
            raise ShapeError(
                f"{op}: operands 'lhs' (shape {_fmt(a)}) and 'rhs' (shape {_fmt(b)}) "
                f"do not broadcast: {da} vs {db}"
            )
        out.append(max(da, db) if 1 in (da, db) else da)
    return tuple(out)


def elementwise_binary(op: str, a: TensorSpec, b: TensorSpec) -> TensorSpec:
    dtype = _same_dtype(op, [("lhs", a), ("rhs", b)])
    return TensorSpec(broadcast_shapes(op, a.shape, b.shape), dtype)


def compare(op: str, a: TensorSpec, b: TensorSpec) -> TensorSpec:
    """A comparison: operands of one element type, broadcast; the result is i1 (bool)."""
    _same_dtype(op, [("lhs", a), ("rhs", b)])
    return TensorSpec(broadcast_shapes(op, a.shape, b.shape), "i1")


def where(condition: TensorSpec, a: TensorSpec, b: TensorSpec) -> TensorSpec:
    """ai.where: the three operands broadcast together; the values of one element type,
    the condition i1 (bool) or of the values' type (non-zero is true)."""
    op = "ai.where"
    dtype = _same_dtype(op, [("lhs", a), ("rhs", b)])
    if condition.dtype != "i1":
        _same_dtype(op, [("lhs", a), ("condition", condition)])
    shape = broadcast_shapes(op, a.shape, b.shape)
    try:
        shape = broadcast_shapes(op, condition.shape, shape)
    except ShapeError:
        raise ShapeError(
            f"{op}: operand 'condition' (shape {_fmt(condition.shape)}) does not broadcast "
            f"with the values (shape {_fmt(shape)})"
        ) from None
    return TensorSpec(shape, dtype)


def elementwise_unary(x: TensorSpec) -> TensorSpec:
    return x


def matmul(
    a: TensorSpec, b: TensorSpec, *, transpose_a: bool = False, transpose_b: bool = False
) -> TensorSpec:
    """(..., M, K) @ (..., K, N) -> (..., M, N); leading dims broadcast.

    A 1-D operand follows numpy (and ONNX MatMul): ``lhs`` (K) acts as (1, K) and
    ``rhs`` (K) as (K, 1), and that unit dimension is dropped from the result.
    """
    op = "ai.matmul"
    dtype = _same_dtype(op, [("lhs", a), ("rhs", b)])
    for name, s, transposed in (("lhs", a, transpose_a), ("rhs", b, transpose_b)):
        if s.rank < 1:
            raise ShapeError(f"{op}: operand '{name}' must have rank >= 1, got {s}")
        if s.rank == 1 and transposed:
            raise ShapeError(f"{op}: operand '{name}' is 1-D ({s}) and cannot be transposed")
    a_2d = a.shape if a.rank > 1 else (1, a.shape[0])
    b_2d = b.shape if b.rank > 1 else (b.shape[0], 1)
    m, ka = (a_2d[-1], a_2d[-2]) if transpose_a else (a_2d[-2], a_2d[-1])
    kb, n = (b_2d[-1], b_2d[-2]) if transpose_b else (b_2d[-2], b_2d[-1])
    if ka != kb:
        raise ShapeError(
            f"{op}: inner dimensions do not match: operand 'lhs' (shape {_fmt(a.shape)}"
            f"{', transposed' if transpose_a else ''}) has K = {ka}, operand 'rhs' "
            f"(shape {_fmt(b.shape)}{', transposed' if transpose_b else ''}) has K = {kb}"
        )
    try:
        batch = broadcast_shapes(op, a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError(
            f"{op}: batch dimensions of 'lhs' ({_fmt(a.shape[:-2])}) and 'rhs' "
            f"({_fmt(b.shape[:-2])}) do not broadcast"
        ) from None
    rows = (m,) if a.rank > 1 else ()
    cols = (n,) if b.rank > 1 else ()
    return TensorSpec((*batch, *rows, *cols), dtype)


def batch_norm(
    x: TensorSpec,
    scale: TensorSpec,
    bias: TensorSpec,
    mean: TensorSpec,
    var: TensorSpec,
    *,
    epsilon: float,
) -> TensorSpec:
    """Inference batch normalisation: x is N x C x ..., every parameter 1-D of length C."""
    op = "ai.batch_norm"
    params = [("scale", scale), ("bias", bias), ("mean", mean), ("var", var)]
    dtype = _same_dtype(op, [("input", x), *params])
    if x.rank < 2:
        raise ShapeError(f"{op}: operand 'input' must have rank >= 2 (N x C x ...), got {x}")
    for name, spec in params:
        _rank(op, name, spec, 1)
        if spec.shape[0] != x.shape[1]:
            raise ShapeError(
                f"{op}: operand '{name}' has length {spec.shape[0]}, expected the "
                f"{x.shape[1]} channels of operand 'input' (dim 1 of {_fmt(x.shape)})"
            )
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ShapeError(f"{op}: epsilon must be a finite number >= 0, got {epsilon}")
    return TensorSpec(x.shape, dtype)


def layernorm(
    x: TensorSpec, gamma: TensorSpec, beta: TensorSpec, *, epsilon: float = 1e-5
) -> TensorSpec:
    """Normalise over the last axis; gamma and beta are 1-D of that length."""
    op = "ai.layernorm"
    if not math.isfinite(epsilon) or epsilon < 0:
        # a negative or NaN epsilon makes sqrt(var + eps) NaN for some rows
        raise ShapeError(f"{op}: epsilon must be a finite number >= 0, got {epsilon}")
    dtype = _same_dtype(op, [("input", x), ("gamma", gamma), ("beta", beta)])
    if x.rank < 1:
        raise ShapeError(f"{op}: operand 'input' must have rank >= 1")
    for name, s in (("gamma", gamma), ("beta", beta)):
        if s.shape != (x.shape[-1],):
            raise ShapeError(
                f"{op}: operand '{name}' has shape {_fmt(s.shape)}, expected "
                f"{x.shape[-1]} (the last dim of operand 'input', shape {_fmt(x.shape)})"
            )
    return TensorSpec(x.shape, dtype)


def rms_norm(x: TensorSpec, gamma: TensorSpec, *, epsilon: float = 1e-6) -> TensorSpec:
    """Normalise over the last axis by the root mean square; gamma is 1-D of that length."""
    op = "ai.rms_norm"
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ShapeError(f"{op}: epsilon must be a finite number >= 0, got {epsilon}")
    dtype = _same_dtype(op, [("input", x), ("gamma", gamma)])
    if x.rank < 1:
        raise ShapeError(f"{op}: operand 'input' must have rank >= 1")
    if gamma.shape != (x.shape[-1],):
        raise ShapeError(
            f"{op}: operand 'gamma' has shape {_fmt(gamma.shape)}, expected "
            f"{x.shape[-1]} (the last dim of operand 'input', shape {_fmt(x.shape)})"
        )
    return TensorSpec(x.shape, dtype)


def softmax(x: TensorSpec, *, axis: int = -1) -> TensorSpec:
    if x.rank < 1:
        raise ShapeError("ai.softmax: operand 'input' must have rank >= 1")
    _normalise_axis("ai.softmax", axis, x.rank)
    return x


def cast(x: TensorSpec, to_dtype: str) -> TensorSpec:
    # The quantized types are reached through ai.quantize, which says how (scale,
    # zero point, saturation), not through a cast.
    if to_dtype not in dtypes.ALL_TYPES:
        raise DtypeError(f"ai.cast: target element type must be one of {dtypes.ALL_TYPES}")
    return TensorSpec(x.shape, to_dtype)


# ------------------------------------------------------------------ quantization


def quantization_scale(
    op: str, x: TensorSpec, scale: TensorSpec, *, axis: int, block_size: int
) -> str:
    """Check the scale's shape against ``x`` as ONNX QuantizeLinear/DequantizeLinear
    (opset 21) do; return the granularity: "tensor" (a scalar or one-element 1-D
    scale), "axis" (1-D, one scale per index of ``axis``) or "block" (``x``'s rank,
    ``ceil(n / block_size)`` scales along ``axis``, one per block of ``block_size``)."""
    if block_size < 0:
        raise ShapeError(f"{op}: block_size must be >= 0, got {block_size}")
    if block_size == 0 and (scale.rank == 0 or scale.shape == (1,)):
        return "tensor"
    if x.rank == 0:
        raise ShapeError(f"{op}: a scalar input takes a scalar scale, got {scale}")
    k = _normalise_axis(op, axis, x.rank)
    if block_size == 0:
        if scale.shape != (x.shape[k],):
            raise ShapeError(
                f"{op}: operand 'scale' must be a scalar, or 1-D of {x.shape[k]} values "
                f"(one per index of axis {axis} of {x}), got {scale}"
            )
        return "axis"
    blocks = -(-x.shape[k] // block_size)
    expected = x.shape[:k] + (blocks,) + x.shape[k + 1 :]
    if scale.shape != expected:
        raise ShapeError(
            f"{op}: operand 'scale' must have shape {_fmt(expected)} for blocks of "
            f"{block_size} along axis {axis} of {x}, got {scale}"
        )
    return "block"


def _takes(op: str, name: str, spec: TensorSpec, allowed: Sequence[str]) -> None:
    if spec.dtype not in allowed:
        raise DtypeError(
            f"{op}: operand '{name}' has element type {spec.dtype}; {op} takes {', '.join(allowed)}"
        )


def _scale_layout(
    op: str, x: TensorSpec, scale: TensorSpec, zero_point: TensorSpec, axis: int, block_size: int
) -> None:
    """The scale's shape against ``x``, and the zero point's against the scale's."""
    granularity = quantization_scale(op, x, scale, axis=axis, block_size=block_size)
    # Per tensor, a scalar and a one-element 1-D value are alike (ONNX mixes them).
    per_tensor = granularity == "tensor" and zero_point.shape in ((), (1,))
    if not per_tensor and zero_point.shape != scale.shape:
        raise ShapeError(
            f"{op}: operand 'zero_point' must have the shape of 'scale' "
            f"({_fmt(scale.shape)}), got {zero_point}"
        )


def quantize(
    x: TensorSpec, scale: TensorSpec, zero_point: TensorSpec, *, axis: int, block_size: int
) -> TensorSpec:
    """``x`` (a float) quantized to the zero point's element type (a quantized type)."""
    op = "ai.quantize"
    _takes(op, "input", x, dtypes.FLOAT_TYPES)
    _same_dtype(op, [("input", x), ("scale", scale)])
    _takes(op, "zero_point", zero_point, dtypes.QUANTIZED_TYPES)
    _scale_layout(op, x, scale, zero_point, axis, block_size)
    return TensorSpec(x.shape, zero_point.dtype)


def dequantize(
    x: TensorSpec, scale: TensorSpec, zero_point: TensorSpec, *, axis: int, block_size: int
) -> TensorSpec:
    """``x`` (a quantized type) as the scale's float element type."""
    op = "ai.dequantize"
    _takes(op, "input", x, dtypes.QUANTIZED_TYPES)
    _takes(op, "scale", scale, dtypes.FLOAT_TYPES)
    _same_dtype(op, [("input", x), ("zero_point", zero_point)])
    _scale_layout(op, x, scale, zero_point, axis, block_size)
    return TensorSpec(x.shape, scale.dtype)


# ------------------------------------------------------------------ layout ops


def reshape(x: TensorSpec, *, shape: Sequence[int]) -> TensorSpec:
    """The same elements in row-major order under another static shape."""
    op = "ai.reshape"
    if any(d < 1 for d in shape):
        raise ShapeError(f"{op}: shape must have positive dimensions, got {list(shape)}")
    if math.prod(shape) != math.prod(x.shape):
        raise ShapeError(
            f"{op}: shape {_fmt(shape)} has {math.prod(shape)} elements, the input "
            f"{_fmt(x.shape)} has {math.prod(x.shape)}"
        )
    return TensorSpec(tuple(shape), x.dtype)


def transpose(x: TensorSpec, *, perm: Sequence[int]) -> TensorSpec:
    """Result dim i is input dim perm[i]."""
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(
            f"ai.transpose: perm {list(perm)} is not a permutation of the {x.rank} dims of "
            f"the input {_fmt(x.shape)}"
        )
    return TensorSpec(tuple(x.shape[p] for p in perm), x.dtype)


def slice_(
    x: TensorSpec, *, offsets: Sequence[int], sizes: Sequence[int], strides: Sequence[int]
) -> TensorSpec:
    """Elements offset + i * stride (i < size) along every dim; strides may be negative."""
    op = "ai.slice"
    for name, values in (("offsets", offsets), ("sizes", sizes), ("strides", strides)):
        if len(values) != x.rank:
            raise ShapeError(
                f"{op}: {name} has {len(values)} values, expected one per dim of the input "
                f"{_fmt(x.shape)}"
            )
    for axis, (dim, start, size, step) in enumerate(
        zip(x.shape, offsets, sizes, strides, strict=True)
    ):
        last = start + (size - 1) * step
        if size < 1 or step == 0 or not (0 <= start < dim and 0 <= last < dim):
            raise ShapeError(
                f"{op}: dim {axis} (size {dim}): offset {start}, size {size}, stride {step} "
                f"reach elements {start}..{last}, outside 0..{dim - 1}"
                if size >= 1 and step != 0
                else f"{op}: dim {axis}: size must be positive and stride non-zero, got "
                f"size {size}, stride {step}"
            )
    return TensorSpec(tuple(sizes), x.dtype)


def concat(operands: Sequence[TensorSpec], *, axis: int) -> TensorSpec:
    """Operands joined along ``axis``; every other dim must agree."""
    op = "ai.concat"
    if not operands:
        raise ShapeError(f"{op}: needs at least one operand")
    first = operands[0]
    dtype = _same_dtype(op, [(f"#{i}", s) for i, s in enumerate(operands)])
    axis = _normalise_axis(op, axis, first.rank)
    total = 0
    for index, spec in enumerate(operands):
        same = spec.rank == first.rank and all(
            a == b
            for d, (a, b) in enumerate(zip(spec.shape, first.shape, strict=False))
            if d != axis
        )
        if not same:
            raise ShapeError(
                f"{op}: operand #{index} (shape {_fmt(spec.shape)}) differs from operand #0 "
                f"(shape {_fmt(first.shape)}) outside axis {axis}"
            )
        total += spec.shape[axis]
    return TensorSpec(first.shape[:axis] + (total,) + first.shape[axis + 1 :], dtype)


def gather(x: TensorSpec, *, axis: int, indices: Sequence[int]) -> TensorSpec:
    """The slices ``indices`` (constants, 0 <= i < dim) of ``axis``, in that order."""
    op = "ai.gather"
    axis = _normalise_axis(op, axis, x.rank)
    if not indices:
        raise ShapeError(f"{op}: needs at least one index")
    bad = [i for i in indices if not 0 <= i < x.shape[axis]]
    if bad:
        raise ShapeError(
            f"{op}: index {bad[0]} is out of range for dim {axis} of size {x.shape[axis]}"
        )
    return TensorSpec(x.shape[:axis] + (len(indices),) + x.shape[axis + 1 :], x.dtype)


def take(table: TensorSpec, indices: TensorSpec, *, axis: int) -> TensorSpec:
    """ai.take: the slices of ``table`` along ``axis`` that run-time ``indices`` (i64 or
    i32, any shape) name: ``table.shape[:axis] + indices.shape + table.shape[axis + 1:]``."""
    op = "ai.take"
    axis = _normalise_axis(op, axis, table.rank)
    if dtypes.ELEMENT_TYPES[indices.dtype].kind != "int":
        raise ShapeError(
            f"{op}: operand 'indices' has element type {indices.dtype}, expected i64 or i32"
        )
    shape = table.shape[:axis] + indices.shape + table.shape[axis + 1 :]
    return TensorSpec(shape, table.dtype)


def cumsum(x: TensorSpec, *, axis: int, exclusive: bool, reverse: bool) -> TensorSpec:
    """ai.cumsum: running sums along ``axis``; the shape and type of ``x``."""
    if x.rank < 1:
        raise ShapeError("ai.cumsum: operand 'input' must have rank >= 1")
    _normalise_axis("ai.cumsum", axis, x.rank)
    return x


def rotate_half(x: TensorSpec) -> TensorSpec:
    """ai.rotate_half: RoPE's rotate-half along the last axis; the shape and type of
    ``x``, whose last dim must be even."""
    if x.rank < 1:
        raise ShapeError("ai.rotate_half: operand 'input' must have rank >= 1")
    if x.shape[-1] % 2:
        raise ShapeError(
            f"ai.rotate_half: the last dim of operand 'input' ({_fmt(x.shape)}) must be even"
        )
    return x


def expand(x: TensorSpec, *, shape: Sequence[int]) -> TensorSpec:
    """ai.expand: ``x`` broadcast to ``shape``, which the result has exactly (x's dims
    are 1 or equal, right-aligned; ``shape`` is the broadcast result, as ONNX's Expand
    computes it at import)."""
    op = "ai.expand"
    if len(shape) < x.rank:
        raise ShapeError(
            f"{op}: shape {_fmt(shape)} has fewer dims than operand 'input' ({_fmt(x.shape)})"
        )
    for have, want in zip(reversed(x.shape), reversed(tuple(shape)), strict=False):
        if have not in (1, want):
            raise ShapeError(
                f"{op}: operand 'input' (shape {_fmt(x.shape)}) does not broadcast to {_fmt(shape)}"
            )
    return TensorSpec(tuple(shape), x.dtype)


def arg_reduce(op: str, x: TensorSpec, *, axis: int, keepdims: bool) -> TensorSpec:
    """ai.argmax / ai.argmin: the i64 index of the extreme along ``axis``."""
    if x.rank < 1:
        raise ShapeError(f"{op}: operand 'input' must have rank >= 1")
    axis = _normalise_axis(op, axis, x.rank)
    shape = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    if not keepdims:
        shape = shape[:axis] + shape[axis + 1 :]
    return TensorSpec(shape, "i64")


# ------------------------------------------------------------------ reductions and pooling


def reduce_axes(op: str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes; empty means all."""
    if not axes:
        return tuple(range(rank))
    normalised = sorted({_normalise_axis(op, a, rank) for a in axes})
    if len(normalised) != len(axes):
        raise ShapeError(f"{op}: axes {list(axes)} repeat a dim")
    return tuple(normalised)


def reduce(op: str, x: TensorSpec, *, axes: Sequence[int], keepdims: bool) -> TensorSpec:
    """``x`` reduced over ``axes`` (all when empty); kept as size-1 dims with ``keepdims``."""
    chosen = reduce_axes(op, axes, x.rank)
    if keepdims:
        shape = tuple(1 if d in chosen else n for d, n in enumerate(x.shape))
    else:
        shape = tuple(n for d, n in enumerate(x.shape) if d not in chosen)
    return TensorSpec(shape, x.dtype)


def pool_output_size(
    size: int, kernel: int, stride: int, dilation: int, begin: int, end: int, ceil_mode: bool
) -> int:
    """Output length of one pooled dim (ONNX/PyTorch: with ``ceil_mode`` the last window
    must start inside the input or its leading padding)."""
    span = dilation * (kernel - 1) + 1
    room = size + begin + end - span
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + begin:
        out -= 1
    return out


def pool2d(
    op: str,
    x: TensorSpec,
    *,
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool,
) -> TensorSpec:
    """NCHW input -> N x C x OH x OW, each output the max/mean of one window."""
    _rank(op, "input", x, 4)
    for name, vals in (("kernel", kernel), ("strides", strides), ("dilations", dilations)):
        if len(vals) != 2 or any(v < 1 for v in vals):
            raise ShapeError(f"{op}: {name} must be 2 positive values, got {list(vals)}")
    if len(padding) not in (2, 4):
        raise ShapeError(f"{op}: padding must have 2 or 4 values, got {len(padding)}")
    pads = conv2d_padding(padding)
    if any(p < 0 for p in pads):
        raise ShapeError(f"{op}: padding must be non-negative, got {list(padding)}")
    out = []
    for axis, name in ((0, "height"), (1, "width")):
        span = dilations[axis] * (kernel[axis] - 1) + 1
        size = x.shape[2 + axis]
        if pads[axis] >= span or pads[axis + 2] >= span:
            raise ShapeError(
                f"{op}: {name} padding {pads[axis]}, {pads[axis + 2]} must be smaller than the "
                f"window ({span}): a window of padding alone has no value"
            )
        if size + pads[axis] + pads[axis + 2] < span:
            raise ShapeError(
                f"{op}: window {name} {span} exceeds padded input {name} "
                f"{size + pads[axis] + pads[axis + 2]}"
            )
        out.append(
            pool_output_size(
                size,
                kernel[axis],
                strides[axis],
                dilations[axis],
                pads[axis],
                pads[axis + 2],
                ceil_mode,
            )
        )
    return TensorSpec((x.shape[0], x.shape[1], out[0], out[1]), x.dtype)


def moe_experts(
    x: TensorSpec,
    weights: TensorSpec,
    experts: TensorSpec,
    gate_up: TensorSpec,
    down: TensorSpec,
) -> TensorSpec:
    """ai.moe_experts: tokens x (T, D), each routed to the k experts ``experts`` (T, k;
    i64 or i32) with ``weights`` (T, k, float); ``gate_up`` (E, 2F, D) and ``down``
    (E, D, F) in nn.Linear's (out, in) layout -> (T, D), x's type."""
    op = "ai.moe_experts"
    for name, spec, rank in (
        ("input", x, 2),
        ("weights", weights, 2),
        ("experts", experts, 2),
        ("gate_up", gate_up, 3),
        ("down", down, 3),
    ):
        _rank(op, name, spec, rank)
    dtype = _same_dtype(op, [("input", x), ("gate_up", gate_up), ("down", down)])
    if dtypes.ELEMENT_TYPES[experts.dtype].kind != "int":
        raise ShapeError(
            f"{op}: operand 'experts' has element type {experts.dtype}, expected i64 or i32"
        )
    if not dtypes.is_float(weights.dtype):
        raise ShapeError(
            f"{op}: operand 'weights' has element type {weights.dtype}, expected a float type"
        )
    tokens, width = x.shape
    if weights.shape != experts.shape or weights.shape[0] != tokens:
        raise ShapeError(
            f"{op}: operands 'weights' (shape {_fmt(weights.shape)}) and 'experts' (shape "
            f"{_fmt(experts.shape)}) must both be ({tokens}, k), a row per token of 'input'"
        )
    count, gate_rows, gate_width = gate_up.shape
    if gate_width != width or gate_rows % 2:
        raise ShapeError(
            f"{op}: operand 'gate_up' (shape {_fmt(gate_up.shape)}) must be (E, 2F, {width}): "
            "the gate and up projections of each expert stacked, nn.Linear's layout"
        )
    if down.shape != (count, width, gate_rows // 2):
        raise ShapeError(
            f"{op}: operand 'down' has shape {_fmt(down.shape)}, expected "
            f"{_fmt((count, width, gate_rows // 2))} (E, D, F) for 'gate_up' of shape "
            f"{_fmt(gate_up.shape)}"
        )
    return TensorSpec(x.shape, dtype)


def attention(
    q: TensorSpec, key: TensorSpec, v: TensorSpec, mask: TensorSpec, softcap: float = 0.0
) -> TensorSpec:
    """softmax(q @ key^T * scale + mask) @ v: q (..., S, D), key (..., T, D), v (..., T, E),
    mask broadcasting to the scores (..., S, T) -> (..., S, E); ``softcap`` 0 (none) or a
    positive finite number (a negative one has no meaning, an infinite one would be
    inf * tanh(0) = NaN rather than no cap)."""
    op = "ai.attention"
    if not (softcap == 0.0 or 0.0 < softcap < math.inf):
        raise ShapeError(
            f"{op}: softcap must be 0 (none) or a positive finite number, got {softcap}"
        )
    dtype = _same_dtype(op, [("query", q), ("key", key), ("value", v), ("mask", mask)])
    for name, spec in (("query", q), ("key", key), ("value", v)):
        if spec.rank < 2:
            raise ShapeError(f"{op}: operand '{name}' must have rank >= 2, got {spec}")
    scores = matmul(
        TensorSpec(q.shape, dtype), TensorSpec(key.shape, dtype), transpose_b=True
    ).shape
    if broadcast_shapes(op, scores, mask.shape) != scores:
        raise ShapeError(
            f"{op}: operand 'mask' (shape {_fmt(mask.shape)}) does not broadcast to the "
            f"scores (shape {_fmt(scores)})"
        )
    if v.shape[-2] != scores[-1]:
        raise ShapeError(
            f"{op}: operand 'value' has {v.shape[-2]} rows (shape {_fmt(v.shape)}), expected "
            f"{scores[-1]}, the key length"
        )
    return matmul(TensorSpec(scores, dtype), TensorSpec(v.shape, dtype))
