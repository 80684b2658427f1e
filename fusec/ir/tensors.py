"""Tensor types as fusec sees them: ``TensorSpec`` (a static shape and an element-type
name), ``spec_of`` an xDSL tensor type (``shape_of`` / ``dtype_of`` a value's, for the
front ends and code generators), the limits of a tensor (``shape_problem``) and
``ShapeError``. Below the ``ai`` dialect (``fusec.dialect.shapes`` and ``ops`` re-export
these names), so that ``fusec.ir.module`` checks an entry function's tensors without
importing the dialect (issue 27: no import circle between ``fusec.ir`` and the dialect).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import NoneAttr, TensorType
from xdsl.ir import Attribute, SSAValue

from fusec.ir.dtypes import ELEMENT_TYPES, XdslElement, element_type_of_xdsl


class ShapeError(ValueError):
    """Operands whose shapes or element types do not fit the op."""


@dataclass(frozen=True)
class TensorSpec:
    """A static tensor type: ``shape`` and element type name (f16, bf16, f32, i64, i32, i1)."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.dtype}>"


#: Limits of a tensor type: numpy's rank limit, and element counts whose byte
#: offsets fit the 64-bit index arithmetic of the generated kernels.
MAX_RANK = 32
MAX_ELEMENTS = 2**60


def shape_problem(shape: Sequence[int]) -> str | None:
    """Why fusec cannot run a tensor of ``shape`` (None when it can): negative or
    zero-size dims, rank > MAX_RANK, or more than MAX_ELEMENTS elements.

    Empty tensors are refused once, here, rather than half-supported by some
    kernel templates (a row reduction over zero rows has no tiling).
    """
    if len(shape) > MAX_RANK:
        return f"has rank {len(shape)}; fusec supports rank <= {MAX_RANK}"
    if any(d < 0 for d in shape):  # e.g. an ONNX dim_value, which nothing else checks
        return "has a negative dimension"
    if 0 in shape:
        return "has a zero-size dimension: empty tensors are not supported"
    count = 1
    for d in shape:
        count *= d
    if count > MAX_ELEMENTS:
        return f"has {count} elements; fusec supports at most 2^60 elements per tensor"
    return None


def element_type_name(t: Attribute) -> str:
    """'f16' | 'bf16' | 'f32' | 'i64' | 'i32' | 'i1' for a supported element type, else
    raise ShapeError."""
    name = element_type_of_xdsl(t)
    if name is None:
        expected = ", ".join(ELEMENT_TYPES)
        raise ShapeError(f"unsupported element type {t}: expected one of {expected}")
    return name


def spec_of(t: Attribute) -> TensorSpec:
    """The TensorSpec of a static ranked tensor type of f16/bf16/f32/i64/i32/i1."""
    if isinstance(t, TensorType):
        return _tensor_spec(t)
    raise ShapeError(f"expected a tensor type, got {t}")


def shape_of(value: SSAValue) -> tuple[int, ...]:
    """The static shape of a tensor-typed SSA value (its ``spec_of``)."""
    return spec_of(value.type).shape


def dtype_of(value: SSAValue) -> str:
    """The element type name of a tensor-typed SSA value (its ``spec_of``)."""
    return spec_of(value.type).dtype


@functools.lru_cache(maxsize=4096)
def _tensor_spec(t: TensorType) -> TensorSpec:
    # Memoised: passes ask for the same few types hundreds of thousands of times
    # on large graphs; attributes are immutable and hashable. Errors are not cached.
    if not isinstance(t, TensorType):
        raise ShapeError(f"expected a tensor type, got {t}")
    shape = tuple(t.get_shape())
    if any(d < 0 for d in shape):
        raise ShapeError(f"dynamic shapes are not supported: {t}")
    if not isinstance(t.encoding, NoneAttr):
        raise ShapeError(f"tensor encodings are not supported: {t}")
    if (problem := shape_problem(shape)) is not None:
        raise ShapeError(f"{t} {problem}")
    return TensorSpec(shape, element_type_name(t.get_element_type()))


def tensor_type(spec: TensorSpec) -> TensorType[XdslElement]:
    return TensorType(ELEMENT_TYPES[spec.dtype].xdsl, spec.shape)
