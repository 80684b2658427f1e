"""Elements picked by index tuples, for both front ends: ONNX ``GatherND``
(``onnx_indexing``) and PyTorch's advanced indexing ``x[i, j]`` and ``torch.gather``
(``torch_lowerings``) are one lookup with the same semantics (issue 32: the front ends
share a lowering where the semantics are the same).

The indexed dims ``sizes`` of a tensor are merged into one dim ``axis`` (the caller's
reshape); ``lookup`` takes one index item per merged dim, broadcast together (numpy
arrays known at import, or integer ai values computed at run time), and builds:

* all known: the flat positions ``sum(index_k * stride_k)`` computed at import, one
  ``ai.gather`` of them (a constant tensor read by ``ai.take`` past ``GATHER_LIMIT``),
  or nothing at all when they name every element in order (the attention mask's
  ``mask[batch_idx, kv_idx]`` of the dynamo exporter and of HF's FX graphs); an index
  outside its dim is a located error;
* else integer ops for the positions and one ``ai.take``: negative indices wrapped, and
  a position past the merged dim wherever an index is outside its own dim, so that the
  lookup fails as PyTorch's and onnxruntime's do instead of reading another element.

A builder is the importer of either front end: ``emit``, ``constant`` and ``error``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from xdsl.ir import Operation, SSAValue

from fusec.dialect import ops as ai
from fusec.ir.tensors import dtype_of

#: The most constant positions a lookup holds as ``ai.gather``'s attribute (more: a
#: constant tensor of them, read by ``ai.take``).
GATHER_LIMIT = 1 << 14

#: An index item: known at import (a numpy array) or computed at run time (an ai value).
Item = np.ndarray | SSAValue


class Builder(Protocol):
    """What ``lookup`` builds with: the ONNX ``Importer`` and the torch ``Translator``."""

    def emit(self, op_type: type[Operation], *args: Any, **attrs: Any) -> SSAValue: ...

    def constant(self, array: np.ndarray, dtype: str) -> SSAValue: ...

    def error(self, message: str) -> Exception: ...


def lookup(
    b: Builder,
    merged: SSAValue,
    axis: int,
    sizes: Sequence[int],
    items: Sequence[Item],
    *,
    negative: bool = True,
    out_of_range: Callable[[int], str] | None = None,
) -> SSAValue:
    """Dim ``axis`` of ``merged`` (the dims ``sizes`` merged) at the positions the
    index ``items`` name (one per merged dim, broadcast together). ``negative``: an
    index in ``[-size, 0)`` counts from the end (else it is outside, as ``torch.gather``
    says). ``out_of_range(k)``: the message of a known index outside dim ``k``. The
    result's axis ``axis`` holds the broadcast items' elements, flattened when they are
    all known, in their broadcast shape otherwise: the caller reshapes."""
    known: list[np.ndarray | None] = []
    for k, (item, size) in enumerate(zip(items, sizes, strict=True)):
        if isinstance(item, SSAValue):
            known.append(None)
            continue
        array = np.asarray(item, dtype=np.int64)
        low = -size if negative else 0
        if ((array < low) | (array >= size)).any():
            message = out_of_range(k) if out_of_range is not None else None
            raise b.error(message or f"index #{k} is out of range for a dim of {size}")
        known.append(np.where(array < 0, array + size, array))
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    if all(array is not None for array in known):
        return _gather_known(b, merged, axis, sizes, known, strides)
    total: SSAValue | None = None
    valid: SSAValue | None = None
    for item, value, size, stride in zip(items, known, sizes, strides, strict=True):
        if value is not None:  # checked above
            term = b.constant(value * stride, "i64")
        else:
            assert isinstance(item, SSAValue)
            ids = item if dtype_of(item) == "i64" else b.emit(ai.CastOp, item, "i64")
            if negative:
                wrapped = b.emit(ai.AddOp, ids, _i64(b, size))
                ids = b.emit(ai.WhereOp, b.emit(ai.LessOp, ids, _i64(b, 0)), wrapped, ids)
            inside = b.emit(
                ai.AndOp,
                b.emit(ai.GreaterEqualOp, ids, _i64(b, 0)),
                b.emit(ai.LessOp, ids, _i64(b, size)),
            )
            valid = inside if valid is None else b.emit(ai.AndOp, valid, inside)
            term = ids if stride == 1 else b.emit(ai.MulOp, ids, _i64(b, stride))
        total = term if total is None else b.emit(ai.AddOp, total, term)
    assert total is not None and valid is not None
    positions = b.emit(ai.WhereOp, valid, total, _i64(b, math.prod(sizes)))
    return b.emit(ai.TakeOp, merged, positions, axis=axis)


def _gather_known(
    b: Builder,
    merged: SSAValue,
    axis: int,
    sizes: Sequence[int],
    known: Sequence[np.ndarray | None],
    strides: Sequence[int],
) -> SSAValue:
    """One ``ai.gather`` (or ``ai.take`` of a constant, or nothing) at the positions of
    index arrays all known at import."""
    try:
        flat = sum(
            (a * s for a, s in zip(known, strides, strict=True) if a is not None),
            np.zeros((), dtype=np.int64),
        )
    except ValueError:
        raise b.error("the index tensors do not broadcast together") from None
    flat = np.asarray(flat).reshape(-1)
    if flat.size == math.prod(sizes) and (flat == np.arange(flat.size)).all():
        return merged  # every element in order: a reshape
    if flat.size > GATHER_LIMIT:  # not as an attribute: a constant tensor of them
        return b.emit(ai.TakeOp, merged, b.constant(flat, "i64"), axis=axis)
    return b.emit(ai.GatherOp, merged, axis=axis, indices=[int(i) for i in flat])


def _i64(b: Builder, number: int) -> SSAValue:
    return b.constant(np.asarray(number, dtype=np.int64), "i64")
