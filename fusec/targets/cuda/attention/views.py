"""How the attention kernel addresses q, key, v and its output in place (issue 28): the
layout ops between a group input and an operand of ``ai.attention`` (the head split
``[B,S,H*D] -> [B,H,S,D]``, the slice of a fused QKV projection, a GQA/MQA head repeat by
``ai.expand``) and between its result and the group output (the head merge
``[B,H,S,D] -> [B,S,H*D]``) as *strides*, so that no copy kernel moves the heads.

A ``Layout`` describes where each element of a tensor lies in a flat buffer: each
dimension is a list of *atoms* ``(size, stride)`` (outer first, the dimension's index
written in their mixed radix), plus an offset. A contiguous tensor has one atom a
dimension; a reshape regroups the atoms (splitting one where a new dimension ends inside
it), so that a merge of two dimensions that are not one run in memory (the K/V head and
the GQA repeat of stride 0) stays exact where numpy's view reshape gives up; a transpose
permutes the dimensions, a slice moves the offset and scales a stride, an expand gives a
broadcast dimension stride 0.

``operand_view`` reduces an operand's layout to what the kernel takes (``OperandView``):
the head dimension contiguous, one stride along the sequence, and the flattened batch
index (``bh``: batch dims x heads) as up to three atoms of nonzero stride (the tensor
map's outer dimensions) besides atoms of stride 0 (a repeated K/V head: its digit of
``bh`` is not read, which is the ``h // group`` of GQA).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fusec.codegen.expr import merged_runs

Atom = tuple[int, int]  # (size, stride in elements)

#: Elements of 16 bytes (f16/bf16): TMA's alignment of a base address and of each stride.
ALIGN_ELEMENTS = 8
#: A tensor map has at most 5 dimensions: head size, sequence, and 3 of the batch.
MAX_BATCH_ATOMS = 3


@dataclass(frozen=True)
class Layout:
    """Element ``i`` of a tensor lies at ``offset + sum over dims d and their atoms
    (size, stride) of digit * stride``, the digits of ``i[d]`` in the atoms' mixed radix."""

    dims: tuple[tuple[Atom, ...], ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: Sequence[int]) -> Layout:
        dims: list[tuple[Atom, ...]] = []
        run = 1
        for size in reversed(shape):
            dims.append(((size, run),) if size != 1 else ())
            run *= size
        return Layout(tuple(reversed(dims)))

    def transpose(self, perm: Sequence[int]) -> Layout:
        return Layout(tuple(self.dims[p] for p in perm), self.offset)

    def reshape(self, shape: Sequence[int]) -> Layout | None:
        """The same elements in C order under ``shape``, or None when a new dimension
        would need part of an atom that does not divide it."""
        atoms = [a for dim in self.dims for a in dim if a[0] != 1]
        dims: list[tuple[Atom, ...]] = []
        for size in shape:
            need, taken = size, []
            while need > 1:
                if not atoms:
                    return None
                n, s = atoms[0]
                if n <= need and need % n == 0:
                    taken.append(atoms.pop(0))
                    need //= n
                elif n > need and n % need == 0:
                    taken.append((need, s * (n // need)))
                    atoms[0] = (n // need, s)
                    need = 1
                else:
                    return None
            dims.append(tuple(merged_runs(taken)))
        return None if atoms else Layout(tuple(dims), self.offset)

    def slice(
        self, starts: Sequence[int], sizes: Sequence[int], steps: Sequence[int]
    ) -> Layout | None:
        dims, offset = [], self.offset
        for dim, start, size, step in zip(self.dims, starts, sizes, steps, strict=True):
            extent = math.prod(n for n, _ in dim)
            if start == 0 and size == extent and step == 1:
                dims.append(dim)
                continue
            if len(dim) != 1:  # only the whole of a split dimension (the head split's)
                return None
            ((_, s),) = dim
            offset += start * s
            dims.append(((size, s * step),) if size != 1 else ())
        return Layout(tuple(dims), offset)

    def expand(self, old: Sequence[int], new: Sequence[int]) -> Layout:
        """numpy's ``broadcast_to(old -> new)``: new leading dims and size-1 dims stride 0."""
        lead = len(new) - len(old)
        dims: list[tuple[Atom, ...]] = [((n, 0),) if n != 1 else () for n in new[:lead]]
        for dim, a, b in zip(self.dims, old, new[lead:], strict=True):
            dims.append(dim if a == b else ((b, 0),) if b != 1 else ())
        return Layout(tuple(dims), self.offset)

    def gather(self, axis: int, indices: Sequence[int]) -> Layout | None:
        """A gather along ``axis`` of an arithmetic progression of indices."""
        step = indices[1] - indices[0] if len(indices) > 1 else 0
        if any(b - a != step for a, b in zip(indices, indices[1:], strict=False)):
            return None
        dim = self.dims[axis]
        if len(dim) > 1:
            return None
        stride = dim[0][1] if dim else 0
        new = ((len(indices), stride * step),) if len(indices) != 1 else ()
        dims = self.dims[:axis] + (new,) + self.dims[axis + 1 :]
        return Layout(dims, self.offset + indices[0] * stride)


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
