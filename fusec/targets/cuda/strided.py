"""Which kernel moves a cuda ``copy`` group: a strided view, and the path it allows.

``view_after`` follows one index map at a time: the pointwise kernel reads its inputs
through a slice and a reshape with it (``pointwise.input_views``). (The attention kernel's
operands follow view chains with ``fusec.codegen.strided.Layout``, atoms per dimension.)

Most copy groups of a transformer (the attention head split ``[B,S,H,D] -> [B,H,S,D]``,
the head merge, a transpose of K, a slice of a fused QKV projection) read their one
input through a *strided view*: ``out[i] = in[offset + sum(i[d] * stride[d])]`` with the
result walked in C order. ``view_of`` derives that view by pushing the input's
contiguous layout forward through the group's transposes, slices, gathers of an
arithmetic progression and reshapes (a reshape only where it is a view, as numpy's
``reshape`` without a copy). ``collapse_view`` then merges the result dimensions that
stay adjacent and in order in the source, so that a head split of any size becomes
at most three dimensions.

``copy_plan`` picks the kernel from the collapsed view:

* **vectorised**: the innermost dimension is contiguous in the source, and its length,
  the offset and every other stride are multiples of a 16-, 8- or 4-byte vector:
  each thread moves one vector per step, index arithmetic once per vector. A result
  that is a concat of strided views (``concat_pieces``) is vectorised the same way
  when each piece's rows and runs align: each vector finds its piece by its column;
* **tiled transpose**: the source's contiguous dimension is another one than the
  result's innermost (a transpose that moves the innermost dimension): 32 x 32 tiles
  (64 x 64 of 2-byte elements where both sides are that long; 4 x 256 or so where one
  side is short, as the 3 channels of an image) through shared memory, read along the
  source's contiguous dimension and written along the result's, batched over the other
  dimensions;
* **gather**: the rest (a concat inside the chain, a gather by a table of indices, a
  strided innermost dimension, an odd offset): the generic gather kernel
  (``fusec.targets.cuda.gather``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from fusec.codegen.expr import merged_runs
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import ITEMSIZE, yielded

#: Vector widths in bytes the vectorised path tries, widest first (4 bytes at least: a
#: 2-byte "vector" is the gather kernel's one element per thread).
VECTOR_WIDTHS = (16, 8, 4)
#: Side of the tiled transpose's square tile (elements): 32, or 64 for 2-byte elements
#: when both sides of the transpose are at least that long (a block then moves 8 KiB,
#: as a 32 x 32 tile of 4-byte elements does: as many bytes in flight per block).
TILE = 32
TILE_16BIT = 64
#: The most tiles of a tiled transpose: one block per tile, in a 1-D grid.
MAX_TILES = (1 << 31) - 1


@dataclass(frozen=True)
class View:
    """Element ``i`` of a tensor of ``shape`` is element ``offset + i . strides`` of input
    ``source`` (a group input, flat, in elements)."""

    source: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class CopyPlan:
    """The kernel a copy group gets: ``path`` (``"vectorised"``, ``"tiled transpose"`` or
    ``"gather"``), the collapsed ``view`` (None for the gather), the vector width in
    bytes (vectorised), the source-contiguous dimension and tile side (tiled) and why in
    words."""

    path: str
    why: str
    view: View | None = None
    vector_bytes: int = 0
    contiguous_dim: int = -1
    tile: tuple[int, int] = (0, 0)
    #: a concat (vectorised): each operand's collapsed view and its elements per result
    #: row (the result as [rows, columns], the operands side by side in each row)
    pieces: tuple[tuple[View, int], ...] = ()
    rows: int = 0

    @property
    def label(self) -> str:
        """The path as the kernel header names it."""
        if self.path == "vectorised":
            return f"vectorised {self.vector_bytes} B"
        if self.path == "tiled transpose":
            return f"tiled transpose {self.tile[0]}x{self.tile[1]}"
        return "gather"


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, run = [], 1
    for size in reversed(shape):
        strides.append(run)
        run *= size
    return tuple(strides[::-1])


def view_reshape(
    shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]
) -> tuple[int, ...] | None:
    """The strides of ``new_shape`` over the same elements, or None when the reshape
    is not a view (numpy's ``_attempt_nocopy_reshape``, C order)."""
    old = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    new = [n for n in new_shape if n != 1]
    out: list[int] = [0] * len(new)
    oi = ni = 0
    while ni < len(new) and oi < len(old):
        oj, nj = oi + 1, ni + 1
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):  # the old dims merged here must be one run
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, oi = nj, oj
    ones = iter(out)
    return tuple(0 if n == 1 else next(ones) for n in new_shape)


def _written(fused_op: ai.FusedOp) -> SSAValue:
    """The value whose elements the result holds in C order: the result, less reshapes at
    the end (a reshape keeps C order: the head merge's, after a transpose, needs no view)."""
    (value,) = yielded(fused_op)
    while isinstance(value.owner, ai.ReshapeOp):
        value = value.owner.operands[0]
    return value


def view_of(fused_op: ai.FusedOp) -> View | str:
    """The strided view the group's one result reads its input through, or why not."""
    results = yielded(fused_op)
    if len(results) != 1:
        return f"{len(results)} results"
    return _view(fused_op, _written(fused_op))


def concat_pieces(fused_op: ai.FusedOp) -> tuple[int, list[tuple[View, int]]] | str:
    """A result that is a concat (then reshapes) of strided views: its rows (the elements
    before the axis) and each operand's collapsed view with its elements per row."""
    value = _written(fused_op)
    op = value.owner
    if not isinstance(op, ai.ConcatOp):
        return "not a concat"
    shape = spec_of(value.type).shape
    axis = op.attr("axis") % len(shape)
    pieces = []
    for operand in op.operands:
        view = _view(fused_op, operand)
        if isinstance(view, str):
            return f"a concat of {view}"
        pieces.append((collapse_view(view), math.prod(spec_of(operand.type).shape[axis:])))
    return math.prod(shape[:axis]), pieces


def _view(fused_op: ai.FusedOp, value: SSAValue) -> View | str:
    if isinstance(value, BlockArgument) and value.block is fused_op.block:
        return source_view(value.index, spec_of(value.type).shape)
    op = value.owner
    if isinstance(op, ai.ConcatOp):
        return "a concat (its result reads several inputs)"
    if not isinstance(op, ai.TransposeOp | ai.ReshapeOp | ai.SliceOp | ai.GatherOp):
        return (
            "a value from outside the group"
            if isinstance(op, Block)
            else f"{op.name} is not an index map"
        )
    inner = _view(fused_op, op.operands[0])
    if isinstance(inner, str):
        return inner
    return view_after(inner, op)


def source_view(index: int, shape: Sequence[int]) -> View:
    """Group input ``index`` of ``shape`` as it lies: contiguous, from element 0."""
    return View(index, tuple(shape), _contiguous(shape), 0)


def view_after(inner: View, op: Operation) -> View | str:
    """``inner`` read through index map ``op`` (a transpose, reshape, slice or gather of
    ``inner``'s tensor), or why it is not a strided view then."""
    shape = spec_of(op.results[0].type).shape
    if isinstance(op, ai.TransposeOp):
        perm = op.attr("perm")
        return View(inner.source, shape, tuple(inner.strides[p] for p in perm), inner.offset)
    if isinstance(op, ai.ReshapeOp):
        strides = view_reshape(inner.shape, inner.strides, shape)
        if strides is None:
            return "a reshape that is not a view of its operand's layout"
        return View(inner.source, shape, strides, inner.offset)
    if isinstance(op, ai.SliceOp):
        starts, steps = op.attr("offsets"), op.attr("strides")
        offset = inner.offset + sum(o * s for o, s in zip(starts, inner.strides, strict=True))
        strides = tuple(s * k for s, k in zip(inner.strides, steps, strict=True))
        return View(inner.source, shape, strides, offset)
    if isinstance(op, ai.GatherOp):
        return _gather_view(op, inner, shape)
    return f"{op.name} is not an index map"


def _gather_view(op: ai.GatherOp, inner: View, shape: tuple[int, ...]) -> View | str:
    axis = op.attr("axis") % len(inner.shape)
    indices = [int(i) for i in op.attr("indices")]
    step = indices[1] - indices[0] if len(indices) > 1 else 0
    if any(b - a != step for a, b in zip(indices, indices[1:], strict=False)):
        return "a gather by a table of indices (not an arithmetic progression)"
    strides = list(inner.strides)
    offset = inner.offset + indices[0] * strides[axis]
    strides[axis] *= step
    return View(inner.source, shape, tuple(strides), offset)


def collapse_view(view: View) -> View:
    """Size-1 dimensions dropped, neighbours that are one run in the source merged."""
    runs = merged_runs(zip(view.shape, view.strides, strict=True)) or [(1, 1)]
    return View(view.source, tuple(n for n, _ in runs), tuple(s for _, s in runs), view.offset)


def copy_plan(fused_op: ai.FusedOp) -> CopyPlan:
    """The kernel for a copy group that the gather kernel serves (``gather_plan``)."""
    itemsize = ITEMSIZE[spec_of(yielded(fused_op)[0].type).dtype]
    if len(yielded(fused_op)) == 1 and isinstance(_written(fused_op).owner, ai.ConcatOp):
        pieces = concat_pieces(fused_op)
        if isinstance(pieces, str):
            return CopyPlan("gather", pieces)
        return _concat_plan(*pieces, itemsize)
    view = view_of(fused_op)
    if isinstance(view, str):
        return CopyPlan("gather", view)
    view = collapse_view(view)
    if view.strides[-1] == 1:
        return _vector_plan(view, itemsize)
    if 1 in view.strides:
        return _tile_plan(view, itemsize)
    return CopyPlan("gather", "no dimension of the result is contiguous in the source")


def _fits(view: View, per: int) -> bool:
    """Whether vectors of ``per`` elements tile ``view``'s contiguous runs, aligned."""
    if view.strides[-1] != 1 or view.shape[-1] % per:
        return False
    return all(s % per == 0 for s in (view.offset, *view.strides[:-1]))


def _widths(itemsize: int) -> list[tuple[int, int]]:
    """(bytes, elements) of the vectors to try, widest first."""
    return [(w, w // itemsize) for w in VECTOR_WIDTHS if w >= itemsize and w % itemsize == 0]


def _concat_plan(rows: int, pieces: list[tuple[View, int]], itemsize: int) -> CopyPlan:
    for width, per in _widths(itemsize):
        if all(columns % per == 0 and _fits(view, per) for view, columns in pieces):
            why = (
                f"a concat of {len(pieces)} strided views, {rows} row(s) of "
                f"{[c for _, c in pieces]} elements side by side, {per} per vector"
            )
            return CopyPlan("vectorised", why, vector_bytes=width, pieces=tuple(pieces), rows=rows)
    return CopyPlan(
        "gather", f"a concat whose pieces are not aligned to {VECTOR_WIDTHS[-1]}-byte vectors"
    )


def _vector_plan(view: View, itemsize: int) -> CopyPlan:
    inner = view.shape[-1]
    for width, per in _widths(itemsize):
        if _fits(view, per):
            runs = math.prod(view.shape[:-1])
            why = f"{runs} contiguous run(s) of {inner} elements, {per} per vector"
            return CopyPlan("vectorised", why, view, vector_bytes=width)
    why = (
        f"the contiguous runs ({inner} elements of {itemsize} bytes, offset {view.offset}, "
        f"strides {list(view.strides)}) are not aligned to {VECTOR_WIDTHS[-1]}-byte vectors"
    )
    return CopyPlan("gather", why)


def tile_shape(a: int, b: int, itemsize: int) -> tuple[int, int]:
    """The tile (elements along the source's contiguous side ``a``, along the result's
    ``b``): square, or for a transpose with one short side (NCHW -> NHWC of 3 channels)
    that side's power of two by up to 256 along the other, so that no thread idles."""
    if itemsize == 2 and min(a, b) >= TILE_16BIT:
        return TILE_16BIT, TILE_16BIT
    if (a < TILE) == (b < TILE):
        return TILE, TILE
    short = 1 << (min(a, b) - 1).bit_length()
    long = min(TILE * TILE // short, 256)
    return (short, long) if a < TILE else (long, short)


def _tile_plan(view: View, itemsize: int) -> CopyPlan:
    j = view.strides.index(1)
    a, b = view.shape[j], view.shape[-1]
    tile = tile_shape(a, b, itemsize)
    batch = math.prod(view.shape) // (a * b)
    tiles = batch * -(-a // tile[0]) * -(-b // tile[1])
    if tiles > MAX_TILES:
        return CopyPlan("gather", f"{tiles} tiles: more than one 1-D grid holds")
    why = (
        f"the source's contiguous dimension ({a} elements) moves to dimension {j} of the "
        f"collapsed result {list(view.shape)}: {batch} transpose(s) of {a} x {b}"
    )
    return CopyPlan("tiled transpose", why, view, contiguous_dim=j, tile=tile)
