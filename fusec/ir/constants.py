"""Dense tensor constants: their values as numpy arrays, and new ones from arrays.

xDSL's arith dialect, whose import takes ~0.1 s (it defines ~50 ops), is imported
only where a constant is made: a graph without constants never needs it, and
``is_constant`` tells a constant without it (issue #26).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, TensorType

from fusec.errors import FusecError
from fusec.ir.dtypes import ELEMENT_TYPES
from fusec.ir.memory import check_bytes, tensor_bytes

if TYPE_CHECKING:
    import numpy as np
    from xdsl.dialects import arith


def is_constant(op: object) -> TypeGuard[arith.ConstantOp]:
    """Whether ``op`` is an ``arith.constant`` (none is while arith is not imported)."""
    arith = sys.modules.get("xdsl.dialects.arith")
    return arith is not None and isinstance(op, arith.ConstantOp)


def constant_value(op: arith.ConstantOp, dtype: np.dtype | None = None) -> np.ndarray:
    """The value of a dense tensor ``arith.constant`` as a new numpy array of ``dtype``
    (default float64; the runtime asks for its own type, and a model's weights are then
    converted once, not through float64)."""
    import numpy as np

    value = op.value
    if not isinstance(value, DenseIntOrFPElementsAttr) or not isinstance(value.type, TensorType):
        raise FusecError(f"arith.constant: only dense tensor constants are supported, got {value}")
    shape = tuple(value.type.get_shape())
    dtype = np.dtype(np.float64 if dtype is None else dtype)
    check_bytes(tensor_bytes([shape], max(dtype.itemsize, 8)), f"the constant {value.type}")
    data = _stored_values(value).astype(dtype)  # a copy: xDSL's bytes stay immutable
    if data.size == 1:  # a splat, 0-d scalars included
        return np.full(shape, data[0], dtype=dtype)
    return data.reshape(shape)


def _stored_values(value: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The elements as stored, read in place by numpy for fusec's element types: xDSL's
    ``get_values`` unpacks them into a tuple of Python numbers, ~0.1 us an element
    (BERT-base's 110 M weights took 11 s of its compile from a warm cache)."""
    import numpy as np

    element = value.get_element_type()
    data = value.data.data
    for known in ELEMENT_TYPES.values():
        if known.xdsl == element and len(data) % known.numpy.itemsize == 0:
            if known.name in ("i4", "ui4"):  # whole bytes (``stored_bytes``) to ml_dtypes'
                whole = np.frombuffer(data, np.int8 if known.name == "i4" else np.uint8)
                return whole.astype(known.numpy)
            return np.frombuffer(data, known.numpy)
    return np.asarray(value.get_values(), dtype=np.float64)


def dense_constant(array: np.ndarray, dtype: str) -> arith.ConstantOp:
    """An ``arith.constant`` holding ``array`` rounded to the element type ``dtype``."""
    import numpy as np
    from xdsl.dialects import arith

    element = ELEMENT_TYPES[dtype]
    data = np.array(array, dtype=element.numpy, order="C")  # (0-d stays 0-d)
    ttype = TensorType(element.xdsl, data.shape)
    return arith.ConstantOp(DenseIntOrFPElementsAttr(ttype, BytesAttr(stored_bytes(data))), ttype)


def stored_bytes(data: np.ndarray) -> bytes:
    """The bytes of a dense constant holding ``data`` (of its element type's numpy dtype):
    as numpy has them, but a 4-bit integer (ml_dtypes int4 / uint4, which keep the value
    in a byte's low nibble) as the whole, sign-extended byte xDSL stores and prints."""
    import numpy as np

    if data.dtype.name in ("int4", "uint4"):
        data = data.astype(np.int8 if data.dtype.name == "int4" else np.uint8)
    return data.tobytes()
