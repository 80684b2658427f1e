"""The element types of the IR and every fact about them, in one table.

``f16``, ``bf16`` and ``f32`` are the dialect's element types; each has its
xDSL type, numpy dtype, PyTorch dtype name, byte size, the Numba array type a
CUDA kernel stores it as (16-bit floats travel as their raw ``int16`` bits)
and the bits of a quiet NaN (to poison outputs in tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import AnyFloat, bf16, f16, f32
from xdsl.ir import Attribute


@dataclass(frozen=True)
class ElementType:
    """One element type of the IR and its names elsewhere."""

    name: str
    xdsl: AnyFloat
    numpy: np.dtype
    torch: str
    itemsize: int
    storage: str
    nan_bits: int


ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t
    for t in (
        ElementType("f16", f16, np.dtype(np.float16), "float16", 2, "int16", 0x7E00),
        ElementType("bf16", bf16, np.dtype(ml_dtypes.bfloat16), "bfloat16", 2, "int16", 0x7FC0),
        ElementType("f32", f32, np.dtype(np.float32), "float32", 4, "float32", 0x7FC00000),
    )
}


def element_type(name: str) -> ElementType:
    """The element type named ``name`` (f16, bf16, f32); KeyError for any other."""
    return ELEMENT_TYPES[name]


def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype of an IR element type name (f16, bf16, f32)."""
    return ELEMENT_TYPES[name].numpy


def element_type_of(dtype: np.dtype) -> str | None:
    """IR element type name of a numpy dtype, or None when it has none."""
    for name, candidate in ELEMENT_TYPES.items():
        if np.dtype(dtype) == candidate.numpy:
            return name
    return None


def element_type_of_xdsl(t: Attribute) -> str | None:
    """IR element type name of an xDSL float type, or None when it is not one of ours."""
    return next((name for name, e in ELEMENT_TYPES.items() if e.xdsl == t), None)


def element_type_of_torch(dtype: object) -> str | None:
    """IR element type name of a torch dtype (``torch.float16``...), or None."""
    text = str(dtype).removeprefix("torch.")
    return next((name for name, e in ELEMENT_TYPES.items() if e.torch == text), None)
