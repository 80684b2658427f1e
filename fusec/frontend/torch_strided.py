"""``as_strided`` as views: the lowering that proves a strided view of a tensor's storage
is a reshape, slice and transpose of its elements (``torch_lowerings`` holds the others;
both register in ``torch_fx.LOWERINGS``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import fx
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.torch_translator import Translator, lowering, reshape, shape_of

Args = dict[str, Any]


#: The most elements of an ``as_strided`` input whose storage positions are checked.
AS_STRIDED_LIMIT = 1 << 22


@lowering("as_strided.default", "as_strided_copy.default")
def _as_strided(t: Translator, node: fx.Node, a: Args) -> SSAValue:
    """A view of the input's storage with its own sizes, strides and offset, when that
    view is a reshape, slice and transpose of the input's elements (else a refusal).

    The proof is by its positions: the storage position of each input element (from its
    strides and offset as PyTorch recorded them; they must not overlap) gives, for each
    result element, the input element it reads (each must be one). Those flat indices
    must be affine in the result's coordinates, with distinct positive steps that divide
    one another and the input's size: then the input reshaped to the radix of those
    steps, sliced at the first index's digits and transposed to the result's order is
    the view. The same steps run on an iota must give the flat indices exactly."""
    source = a["self"]
    x = t.tensor(source)
    recorded = source.meta.get("val") if isinstance(source, fx.Node) else None
    if recorded is None or not hasattr(recorded, "stride"):
        raise t.error("the input's strides are not recorded")
    shape = shape_of(x)
    n = math.prod(shape)
    numbers = [*a["size"], *a["stride"], a.get("storage_offset") or 0]
    numbers += [*recorded.stride(), recorded.storage_offset()]
    if not all(isinstance(d, int) for d in numbers):
        raise t.error("as_strided with symbolic sizes, strides or offsets is not supported")
    size = tuple(int(d) for d in a["size"])
    stride = tuple(int(d) for d in a["stride"])
    start = a.get("storage_offset")
    start = int(recorded.storage_offset()) if start is None else int(start)
    if n > AS_STRIDED_LIMIT or math.prod(size) > AS_STRIDED_LIMIT:
        raise t.error(f"as_strided of more than {AS_STRIDED_LIMIT} elements is not checked")
    flat = _strided_flat_indices(
        t, shape, tuple(int(d) for d in recorded.stride()), int(recorded.storage_offset()),
        size, stride, start,
    )  # fmt: skip
    return _view_of_flat_indices(t, x, flat)


def _positions(shape: Sequence[int], strides: Sequence[int], offset: int) -> np.ndarray:
    """The storage position of every element of a strided tensor, in logical order."""
    total = np.full(tuple(shape), offset, dtype=np.int64)
    for axis, (dim, step) in enumerate(zip(shape, strides, strict=True)):
        iota = np.arange(dim, dtype=np.int64).reshape((dim,) + (1,) * (len(shape) - axis - 1))
        total = total + iota * step
    return total


def _strided_flat_indices(
    t: Translator,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    start: int,
) -> np.ndarray:
    """For each element of the strided view, the flat (logical) index of the input
    element at its storage position."""
    held = _positions(shape, strides, offset).reshape(-1)
    order = np.argsort(held, kind="stable")
    ranked = held[order]
    if ranked.size > 1 and (np.diff(ranked) == 0).any():
        raise t.error(f"the input's strides {list(strides)} make elements overlap")
    wanted = _positions(size, stride, start)
    where = np.searchsorted(ranked, wanted)
    inside = where < ranked.size
    if not inside.all() or (ranked[np.where(inside, where, 0)] != wanted).any():
        raise t.error("the view reads storage outside its input's elements")
    return order[where]


def _view_of_flat_indices(t: Translator, x: SSAValue, flat: np.ndarray) -> SSAValue:
    """``x.reshape(-1)[flat]`` as reshape, slice and transpose, or a refusal.

    With the result's dims ordered by their steps ``a_k`` through the flat input
    (largest first), the input is reshaped to the radix of blocks ``b_k = gcd(a_k,
    b_(k-1))`` (``b_0`` its size), each dim of that radix sliced from the first index's
    digit with the step ``a_k / b_k``, and the slice transposed to the result's order."""
    shape, size = shape_of(x), tuple(flat.shape)
    n = math.prod(shape)
    if flat.size == n and (flat.reshape(-1) == np.arange(n)).all():
        return reshape(t, x, size)
    base = int(flat.reshape(-1)[0])
    moving = [d for d in range(len(size)) if size[d] > 1]
    steps = {}
    for d in moving:
        unit = [0] * len(size)
        unit[d] = 1
        steps[d] = int(flat[tuple(unit)]) - base
    moving.sort(key=lambda d: -steps[d])
    jumps = [steps[d] for d in moving]
    if any(j <= 0 for j in jumps) or len(set(jumps)) != len(jumps):
        raise t.error(
            f"the view is not a reshape, slice or transpose: its steps {jumps} through the "
            "input's elements are not distinct and positive"
        )
    blocks = [n]
    for jump in jumps:
        blocks.append(math.gcd(jump, blocks[-1]))
    radix = [p // q for p, q in zip(blocks, blocks[1:], strict=False)] + [blocks[-1]]
    digits = [int(c) for c in np.unravel_index(base, radix)]
    counts = [size[d] for d in moving] + [1]
    gaps = [j // b for j, b in zip(jumps, blocks[1:], strict=True)] + [1]
    spans = zip(digits, counts, gaps, radix, strict=True)
    if any(c + (k - 1) * g >= r for c, k, g, r in spans):
        raise t.error("the view is not a reshape, slice or transpose: it wraps around a dim")
    inverse = [moving.index(d) for d in sorted(moving)]
    window = tuple(
        slice(c, c + (k - 1) * g + 1, g) for c, k, g in zip(digits, counts, gaps, strict=True)
    )
    iota = np.arange(n).reshape(radix)[window]
    iota = iota.reshape(counts[:-1]).transpose(inverse).reshape(size)
    if not np.array_equal(iota, flat):
        raise t.error("the view is not a reshape, slice or transpose of its input")
    y = reshape(t, x, radix)
    if counts != radix:
        y = t.emit(ai.SliceOp, y, offsets=digits, sizes=counts, strides=gaps)
    if inverse != sorted(inverse):
        y = t.emit(ai.TransposeOp, reshape(t, y, counts[:-1]), perm=inverse)
    return reshape(t, y, size)
