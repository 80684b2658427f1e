"""How the attention kernel addresses q, key, v and its output in place (issue 28): the
layout ops between a group input and an operand of ``ai.attention`` (the head split
``[B,S,H*D] -> [B,H,S,D]``, the slice of a fused QKV projection, a GQA/MQA head repeat by
``ai.expand``) and between its result and the group output (the head merge
``[B,H,S,D] -> [B,S,H*D]``) as *strides*, so that no copy kernel moves the heads.

Each operand's ``Layout`` (``fusec.codegen.strided``: per dimension, atoms ``(size,
stride)`` and an offset) follows its chain of layout ops from the group input.

``operand_view`` reduces an operand's layout to what the kernel takes (``OperandView``):
the head dimension contiguous, one stride along the sequence, and the flattened batch
index (``bh``: batch dims x heads) as up to three atoms of nonzero stride (the tensor
map's outer dimensions) besides atoms of stride 0 (a repeated K/V head: its digit of
``bh`` is not read, which is the ``h // group`` of GQA).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.codegen.expr import merged_runs
from fusec.codegen.strided import Atom, Layout

#: Elements of 16 bytes (f16/bf16): TMA's alignment of a base address and of each stride.
ALIGN_ELEMENTS = 8
#: A tensor map has at most 5 dimensions: head size, sequence, and 3 of the batch.
MAX_BATCH_ATOMS = 3


@dataclass(frozen=True)
class OperandView:
    """How the kernel addresses an operand ``[batch..., rows, cols]``: element (bh, r, c)
    is at ``offset + digits(bh) . batch + r * row_stride + c`` (elements), ``batch`` the
    atoms ``(size, stride)`` of the flattened batch index, outer first (their sizes
    multiply to the batch; stride 0: a digit the address does not depend on)."""

    offset: int
    row_stride: int
    batch: tuple[Atom, ...]

    @staticmethod
    def contiguous(batch: int, rows: int, cols: int) -> OperandView:
        return OperandView(0, cols, ((batch, rows * cols),) if batch != 1 else ())

    @property
    def map_atoms(self) -> tuple[tuple[int, int, int], ...]:
        """(size, stride, divisor of bh) of the atoms a tensor map spans (nonzero stride)."""
        out, div = [], 1
        for n, s in reversed(self.batch):
            if s != 0:
                out.append((n, s, div))
            div *= n
        return tuple(reversed(out))

    def as_tuple(self) -> tuple:
        return (self.offset, self.row_stride, self.batch)


def operand_view(
    layout: Layout, rows: int, cols: int, *, broadcast: bool, what: str
) -> OperandView | str:
    """``layout`` of an operand ``[batch..., rows, cols]`` as the kernel reads or writes
    it, or why it cannot: ``cols`` contiguous, one stride along ``rows``, the batch in at
    most ``MAX_BATCH_ATOMS`` atoms of nonzero stride (stride-0 atoms only where
    ``broadcast``: an input read again, never an output), 16-byte aligned."""
    *batch_dims, row_dim, col_dim = layout.dims
    if col_dim != ((cols, 1),):
        return f"{what}'s head dimension is not contiguous in memory"
    if len(row_dim) > 1:
        return f"{what}'s sequence dimension is not one stride in memory"
    row_stride = row_dim[0][1] if row_dim else cols
    if row_stride == 0:
        return f"{what} repeats one row along the sequence"
    batch = tuple(merged_runs(a for dim in batch_dims for a in dim))
    if not broadcast and any(s == 0 for _, s in batch):
        return f"{what} repeats elements"
    view = OperandView(layout.offset, row_stride, batch)
    if len(view.map_atoms) > MAX_BATCH_ATOMS:
        return f"{what}'s batch needs {len(view.map_atoms)} strides (a tensor map has 3)"
    strides = (view.offset, view.row_stride, *(s for _, s, _ in view.map_atoms))
    if any(s < 0 for s in strides):
        return f"{what} is read backwards (a negative stride: a tensor map's are positive)"
    if any(s % ALIGN_ELEMENTS for s in strides):
        return f"{what}'s offset or strides {list(strides)} are not 16-byte aligned"
    return view


@dataclass(frozen=True)
class MaskView:
    """How the kernel reads an additive mask broadcast to the scores ``[batch..., rows,
    cols]``: score (bh, r, c) adds the element at ``offset + digits(bh) . batch + r *
    row_stride + c * col_stride`` (elements; stride 0 where the mask broadcasts, e.g. a
    padding mask ``[B, 1, 1, T]`` over heads and queries). Read element by element, so
    any strides serve."""

    dtype: str
    offset: int
    row_stride: int
    col_stride: int
    batch: tuple[Atom, ...]

    def as_tuple(self) -> tuple:
        return (self.dtype, self.offset, self.row_stride, self.col_stride, self.batch)

    @staticmethod
    def from_tuple(value: tuple) -> MaskView:
        dtype, offset, row_stride, col_stride, batch = value
        return MaskView(dtype, offset, row_stride, col_stride, tuple(batch))


def mask_view(
    layout: Layout, shape: tuple[int, ...], scores: tuple[int, ...], dtype: str
) -> MaskView | str:
    """The mask of ``shape`` at ``layout`` (its group input's elements) broadcast to the
    ``scores`` shape ``[batch..., rows, cols]`` (numpy's rules, as ``ai.attention`` adds
    it), or why the kernel cannot address it: one stride along rows and along columns."""
    if len(shape) > len(scores):
        return f"a mask of rank {len(shape)} for scores of rank {len(scores)}"
    lead = len(scores) - len(shape)
    dims: list[tuple[Atom, ...]] = []
    for axis, size in enumerate(scores):
        own = axis - lead
        if own < 0 or shape[own] == 1:  # broadcast: the digit is not read
            dims.append(((size, 0),) if size != 1 else ())
        elif shape[own] == size:
            dims.append(tuple(a for a in layout.dims[own] if a[0] != 1))
        else:
            return f"a mask of shape {list(shape)} does not broadcast to the scores {list(scores)}"
    *batch_dims, row_dim, col_dim = dims
    strides = []
    for what, dim in (("rows", row_dim), ("keys", col_dim)):
        if len(dim) > 1:
            return f"the mask is not one stride along its {what}"
        strides.append(dim[0][1] if dim else 0)
    batch = tuple(merged_runs(a for dim in batch_dims for a in dim))
    return MaskView(dtype, layout.offset, strides[0], strides[1], batch)
