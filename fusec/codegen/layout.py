"""Layout ops (reshape, transpose, slice, concat, gather) as numpy or PyTorch expressions.

The data ops a copy group also holds (``ai.take`` at run-time indices, ``ai.cumsum``)
are written the same way: numpy's via ``fusec.dialect.numpy_ops`` (imported as ``K``
by the module), PyTorch's through its own functions.

A layout op moves data without arithmetic, so the templates do not generate
loops for it: they write it as the array library's own view or copy
(``x.transpose(...)``, ``x[a:b:c]``), which the library runs at copy speed
and which a BLAS call can read without a copy when the view is strided
(a matmul operand read through a transpose). Everything spliced into the
text is an integer from the op's attributes or a generated name.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import Operation

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of

LAYOUT_OPS: tuple[type[ai.AiOp], ...] = (
    ai.ReshapeOp,
    ai.TransposeOp,
    ai.SliceOp,
    ai.ConcatOp,
    ai.GatherOp,
)


#: Data ops a copy group computes with the array library too, but that no kernel reads
#: through as a view: a gather at run-time indices and a running sum.
DATA_OPS: tuple[type[ai.AiOp], ...] = (ai.TakeOp, ai.CumSumOp, ai.ArgMaxOp, ai.ArgMinOp)


def is_layout(op: Operation) -> bool:
    return isinstance(op, LAYOUT_OPS)


def is_copy(op: Operation) -> bool:
    """Whether a copy group may hold ``op``: a layout op or a data op."""
    return isinstance(op, LAYOUT_OPS + DATA_OPS)


def _ints(values: Sequence[int]) -> str:
    """A tuple literal of ints (always with a trailing comma for one element)."""
    return "(" + "".join(f"{int(v)}, " for v in values).rstrip(" ") + ")"


def _slice_text(op: ai.SliceOp) -> str:
    parts = []
    for item in op.index():
        stop = "" if item.stop is None else str(int(item.stop))
        parts.append(f"{int(item.start)}:{stop}:{int(item.step)}")
    return ", ".join(parts)


def numpy_expression(op: Operation, args: Sequence[str]) -> str:
    """numpy expression of a layout op on shaped arrays ``args`` (a view when it can be)."""
    if isinstance(op, ai.ReshapeOp):
        return f"{args[0]}.reshape({_ints(op.attr('shape'))})"
    if isinstance(op, ai.TransposeOp):
        return f"{args[0]}.transpose({_ints(op.attr('perm'))})"
    if isinstance(op, ai.SliceOp):
        return f"{args[0]}[{_slice_text(op)}]"
    if isinstance(op, ai.ConcatOp):
        return f"np.concatenate(({', '.join(args)},), axis={int(op.attr('axis'))})"
    if isinstance(op, ai.GatherOp):
        indices = [int(i) for i in op.attr("indices")]
        return f"np.take({args[0]}, {indices!r}, axis={int(op.attr('axis'))})"
    if isinstance(op, ai.TakeOp):
        # numpy_ops.take: negative indices from the end, a clear error out of range
        return f"K.take({args[0]}, {args[1]}, axis={int(op.attr('axis'))})"
    if isinstance(op, ai.CumSumOp):
        flags = ", ".join(f"{k}={bool(op.attr(k))}" for k in ("exclusive", "reverse"))
        return f"K.cumsum({args[0]}, axis={int(op.attr('axis'))}, {flags})"
    if isinstance(op, ai.ArgReduceOp):
        flags = ", ".join(f"{k}={bool(op.attr(k))}" for k in ("keepdims", "select_last_index"))
        return f"K.arg_reduce({args[0]}, {op.KIND!r}, axis={int(op.attr('axis'))}, {flags})"
    raise ValueError(f"{op.name} is not a layout op")


def torch_expression(op: Operation, args: Sequence[str]) -> str:
    """PyTorch expression of a layout op on shaped tensors ``args``."""
    if isinstance(op, ai.ReshapeOp):
        return f"{args[0]}.reshape({_ints(op.attr('shape'))})"
    if isinstance(op, ai.TransposeOp):
        return f"{args[0]}.permute({_ints(op.attr('perm'))})"
    if isinstance(op, ai.SliceOp):
        # torch has no negative steps: take the same elements forwards, then flip
        index, flips = [], []
        attrs = zip(op.attr("offsets"), op.attr("sizes"), op.attr("strides"), strict=True)
        for axis, (start, size, step) in enumerate(attrs):
            first = start if step > 0 else start + (size - 1) * step
            index.append(f"{int(first)}:{int(first + (size - 1) * abs(step) + 1)}:{abs(step)}")
            if step < 0:
                flips.append(axis)
        text = f"{args[0]}[{', '.join(index)}]"
        return f"torch.flip({text}, dims={_ints(flips)})" if flips else text
    if isinstance(op, ai.ConcatOp):
        return f"torch.cat(({', '.join(args)},), dim={int(op.attr('axis'))})"
    if isinstance(op, ai.GatherOp):
        indices = [int(i) for i in op.attr("indices")]
        return (
            f"torch.index_select({args[0]}, {int(op.attr('axis'))}, "
            f"torch.tensor({indices!r}, device={args[0]}.device))"
        )
    if isinstance(op, ai.TakeOp):
        return _torch_take(op, args)
    if isinstance(op, ai.CumSumOp):
        return _torch_cumsum(op, args)
    if isinstance(op, ai.ArgReduceOp):
        return _torch_arg_reduce(op, args)
    raise ValueError(f"{op.name} is not a layout op")


def _torch_arg_reduce(op: ai.ArgReduceOp, args: Sequence[str]) -> str:
    """``torch.argmax``/``argmin`` (the last of equal extremes through a flip)."""
    axis = int(op.attr("axis")) % len(spec_of(op.input.type).shape)
    keep = bool(op.attr("keepdims"))
    function = f"torch.arg{op.KIND}"
    if not op.attr("select_last_index"):
        return f"{function}({args[0]}, dim={axis}, keepdim={keep})"
    n = spec_of(op.input.type).shape[axis]
    flipped = f"torch.flip({args[0]}, dims=({axis},))"
    return f"({n - 1} - {function}({flipped}, dim={axis}, keepdim={keep}))"


def _torch_take(op: ai.TakeOp, args: Sequence[str]) -> str:
    """``torch.index_select`` of the flattened indices (negative ones from the end; an
    index out of range is torch's device-side error), reshaped to the result."""
    table, indices = args
    table_shape = spec_of(op.table.type).shape
    axis = int(op.attr("axis")) % len(table_shape)
    n = table_shape[axis]
    shape = _ints(spec_of(op.output.type).shape)
    flat = f"{indices}.reshape(-1).long()"
    wrapped = f"torch.where({flat} < 0, {flat} + {n}, {flat})"
    return f"torch.index_select({table}, {axis}, {wrapped}).reshape({shape})"


def _torch_cumsum(op: ai.CumSumOp, args: Sequence[str]) -> str:
    """``torch.cumsum`` in the operand's dtype; ``reverse`` through flips, ``exclusive``
    by subtracting the element itself."""
    axis = int(op.attr("axis"))
    x = f"torch.flip({args[0]}, dims=({axis},))" if op.attr("reverse") else args[0]
    text = f"torch.cumsum({x}, dim={axis}, dtype={x}.dtype)"
    if op.attr("exclusive"):
        text = f"({text} - {x})"
    return f"torch.flip({text}, dims=({axis},))" if op.attr("reverse") else text
