"""Where each element of a view of a buffer lies: ``Layout``, the strides of a chain of layout
ops (reshape, transpose, slice, expand, gather of a progression) applied to a contiguous
tensor, exact where the chain keeps every dimension a mixed radix of strided runs.

A dimension is a tuple of *atoms* ``(size, stride)`` (outer first, the dimension's index
written in their mixed radix), plus an offset. A contiguous tensor has one atom a
dimension; a reshape regroups the atoms (splitting one where a new dimension ends inside
it), so that a merge of two dimensions that are not one run in memory (a K/V head and the
GQA repeat of stride 0) stays exact where numpy's view reshape gives up; a transpose
permutes the dimensions, a slice moves the offset and scales a stride, an expand gives a
broadcast dimension stride 0. Used by the cuda attention kernel (its operands' tensor
maps, ``targets/cuda/attention/views.py``). The cuda copy and pointwise kernels derive one
stride a dimension instead (``targets/cuda/strided.py``: ``view_of``, ``view_after``); the
two are candidates for one module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fusec.codegen.expr import merged_runs

Atom = tuple[int, int]  # (size, stride in elements)


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
