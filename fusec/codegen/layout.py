"""Layout ops (reshape, transpose, slice, concat, gather) as numpy or PyTorch expressions.

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

LAYOUT_OPS: tuple[type[ai.AiOp], ...] = (
    ai.ReshapeOp,
    ai.TransposeOp,
    ai.SliceOp,
    ai.ConcatOp,
    ai.GatherOp,
)


def is_layout(op: Operation) -> bool:
    return isinstance(op, LAYOUT_OPS)


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
    raise ValueError(f"{op.name} is not a layout op")
