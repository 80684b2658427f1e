"""The element types of the IR and every fact about them, in one table.

``f16``, ``bf16`` and ``f32`` are the dialect's float element types, ``i64``,
``i32`` and ``i1`` (bool) its integer ones (issue 29: token ids, attention
masks, position ids on the data path). ``f8E4M3FN``, ``f8E5M2`` (MLIR's float8
types), ``i8``, ``ui8``, ``i4`` and ``ui4`` are the quantized types (issue 31): values that
``ai.quantize`` makes and ``ai.dequantize`` reads, that constants, arguments
and results may hold, and that no other op computes with (they are not in
``ALL_TYPES``), so a target meets them only in those two ops. Each has its xDSL type, numpy dtype,
PyTorch dtype name, byte size, the Numba array type a CUDA kernel stores it
as (16-bit floats travel as their raw ``int16`` bits), its kind (float, int
or bool) and the bits tests poison outputs with (a quiet NaN for floats; for
integers a value no test computes, as they have no NaN).

numpy's bfloat16 comes from ``ml_dtypes``, whose import takes ~0.5 s: it is
imported when a bf16 numpy dtype is first needed, not by every command that
only reads IR (``fusec compile`` of an f16 graph never needs it). numpy itself
(~0.3 s) is imported the same way, by the functions that return or take a dtype
(issue #26: ``fusec compile`` reads and writes IR and imports neither).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import (
    AnyFloat,
    IntegerType,
    Signedness,
    bf16,
    f8E4M3FN,
    f8E5M2,
    f16,
    f32,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute

if TYPE_CHECKING:
    import numpy as np

#: The xDSL element types of the IR: floats and signless integers.
XdslElement = AnyFloat | IntegerType


@dataclass(frozen=True)
class ElementType:
    """One element type of the IR and its names elsewhere."""

    name: str
    xdsl: XdslElement
    #: The numpy dtype's name, in numpy or (bfloat16) in ml_dtypes.
    numpy_name: str
    torch: str
    itemsize: int
    storage: str
    nan_bits: int
    #: "float", "int", "bool" or "quantized" (held and converted, never computed with).
    kind: str = "float"

    @property
    def numpy(self) -> np.dtype:
        return _numpy_dtype(self.numpy_name)


@functools.cache
def _numpy_dtype(name: str) -> np.dtype:
    import numpy as np

    if hasattr(np, name):
        return np.dtype(getattr(np, name))
    import ml_dtypes  # bfloat16: imported on first use (see the module docstring)

    return np.dtype(getattr(ml_dtypes, name))


#: The kind of the quantized element types, and MLIR's unsigned 8-bit integer type.
Q = "quantized"
UI8 = IntegerType(8, Signedness.UNSIGNED)
#: MLIR's 4-bit integer types (ONNX INT4 / UINT4, issue 31).
I4 = IntegerType(4)
UI4 = IntegerType(4, Signedness.UNSIGNED)

ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t
    for t in (
        ElementType("f16", f16, "float16", "float16", 2, "int16", 0x7E00),
        ElementType("bf16", bf16, "bfloat16", "bfloat16", 2, "int16", 0x7FC0),
        ElementType("f32", f32, "float32", "float32", 4, "float32", 0x7FC00000),
        ElementType("i64", i64, "int64", "int64", 8, "int64", 0x5A5A5A5A5A5A5A5A, "int"),
        ElementType("i32", i32, "int32", "int32", 4, "int32", 0x5A5A5A5A, "int"),
        ElementType("i1", i1, "bool", "bool", 1, "uint8", 0x5A, "bool"),
        # Poison bits: float8's NaN (e4m3fn has no inf; 0x7F is its only NaN pattern
        # with sign 0, 0x7E a quiet NaN of e5m2), an unlikely value for the integers.
        ElementType("f8E4M3FN", f8E4M3FN, "float8_e4m3fn", "float8_e4m3fn", 1, "uint8", 0x7F, Q),
        ElementType("f8E5M2", f8E5M2, "float8_e5m2", "float8_e5m2", 1, "uint8", 0x7E, Q),
        ElementType("i8", i8, "int8", "int8", 1, "int8", 0x5A, Q),
        ElementType("ui8", UI8, "uint8", "uint8", 1, "uint8", 0x5A, Q),
        # 4-bit integers (ONNX INT4 / UINT4): one element a numpy value (ml_dtypes int4,
        # a byte each; MLIR's dense constants store them a byte each too); ONNX packs two
        # a byte, which its numpy_helper undoes at import. cpu kernels hold them as int8 /
        # uint8 values.
        ElementType("i4", I4, "int4", "int4", 1, "int8", 0x5, Q),
        ElementType("ui4", UI4, "uint4", "uint4", 1, "uint8", 0x5, Q),
    )
}

#: The float element types (what ``element_type_of`` maps numpy dtypes to).
FLOAT_TYPES: tuple[str, ...] = tuple(n for n, t in ELEMENT_TYPES.items() if t.kind == "float")
#: The integer element types, bool excluded.
INT_TYPES: tuple[str, ...] = tuple(n for n, t in ELEMENT_TYPES.items() if t.kind == "int")
#: Every element type that holds numbers: floats and integers (not bool).
NUMERIC_TYPES: tuple[str, ...] = FLOAT_TYPES + INT_TYPES
#: Every element type the ops compute with (the quantized ones left out).
ALL_TYPES: tuple[str, ...] = tuple(n for n, t in ELEMENT_TYPES.items() if t.kind != Q)
#: The element types of quantized values: ``ai.quantize`` results, ``ai.dequantize`` inputs.
QUANTIZED_TYPES: tuple[str, ...] = tuple(n for n, t in ELEMENT_TYPES.items() if t.kind == Q)
#: The float8 types among them.
FLOAT8_TYPES: tuple[str, ...] = ("f8E4M3FN", "f8E5M2")
#: The 4-bit integer types among them (a numpy element each: ml_dtypes int4 / uint4).
INT4_TYPES: tuple[str, ...] = ("i4", "ui4")


def is_float(name: str) -> bool:
    """Whether the element type ``name`` is a float type (f16, bf16, f32)."""
    return ELEMENT_TYPES[name].kind == "float"


def element_type(name: str) -> ElementType:
    """The element type named ``name`` (f16, bf16, f32, i64, i32, i1); KeyError for any other."""
    return ELEMENT_TYPES[name]


def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype of an IR element type name (f16, bf16, f32, i64, i32, i1)."""
    return ELEMENT_TYPES[name].numpy


def element_type_of(dtype: np.dtype, *, floats_only: bool = True) -> str | None:
    """IR element type name of a numpy dtype, or None when it has none.

    Only float types unless ``floats_only`` is False: the Python front ends turn
    integer arrays into constants of the tensor they meet, not integer tensors.
    """
    import numpy as np

    dtype = np.dtype(dtype)
    for name, candidate in ELEMENT_TYPES.items():
        if floats_only and candidate.kind != "float":
            continue
        if not hasattr(np, candidate.numpy_name) and "ml_dtypes" not in sys.modules:
            continue  # no array can have the dtype before ml_dtypes defines it
        if dtype == candidate.numpy:
            return name
    return None


def element_type_of_xdsl(t: Attribute) -> str | None:
    """IR element type name of an xDSL element type, or None when it is not one of ours."""
    return next((name for name, e in ELEMENT_TYPES.items() if e.xdsl == t), None)


def element_type_of_torch(dtype: object) -> str | None:
    """IR element type name of a torch dtype (``torch.float16``, ``torch.int64``...), or None."""
    text = str(dtype).removeprefix("torch.")
    return next((name for name, e in ELEMENT_TYPES.items() if e.torch == text), None)
