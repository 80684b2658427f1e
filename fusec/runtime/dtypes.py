"""Element-type names of the IR and their numpy dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

_NUMPY = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
}


def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype of an IR element type name (f16, bf16, f32)."""
    return _NUMPY[name]


def element_type_of(dtype: np.dtype) -> str | None:
    """IR element type name of a numpy dtype, or None when it has none."""
    for name, candidate in _NUMPY.items():
        if np.dtype(dtype) == candidate:
            return name
    return None
