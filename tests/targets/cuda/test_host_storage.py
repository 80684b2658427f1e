"""How numpy arguments reach the kernels (``adapters.host_storage``): every element type
as its storage, in its shape, whatever its itemsize. Graph capture (``CudaProgram.capture``)
uploads numpy arguments through it; before, it viewed every non-f32 array as int16, so an
int32 argument arrived as twice as many columns and an int8 one as half."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusec.ir.dtypes import ELEMENT_TYPES, numpy_dtype
from fusec.targets.cuda.adapters import host_storage


@pytest.mark.parametrize("dtype", sorted(ELEMENT_TYPES))
def test_every_element_type_keeps_its_shape_and_storage(dtype: str) -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(-3, 4, size=(3, 5)) if dtype != "ui4" else rng.integers(0, 8, (3, 5))
    array = np.asarray(values).astype(numpy_dtype(dtype))[:, ::-1]  # not contiguous
    stored = host_storage(array, dtype)
    assert stored.shape == (3, 5) and stored.flags.c_contiguous
    assert stored.dtype == np.dtype(ELEMENT_TYPES[dtype].storage)
    back = stored.astype(array.dtype) if dtype in ("i4", "ui4") else stored.view(array.dtype)
    np.testing.assert_array_equal(back.astype(np.float64), array.astype(np.float64))


def test_four_bit_codes_are_stored_by_value_and_floats_by_their_bits() -> None:
    codes = np.array([-8, -1, 0, 7], dtype=ml_dtypes.int4)
    np.testing.assert_array_equal(host_storage(codes, "i4"), [-8, -1, 0, 7])
    halves = np.array([1.0, -2.0], dtype=ml_dtypes.bfloat16)
    np.testing.assert_array_equal(host_storage(halves, "bf16"), [0x3F80, -0x4000])
    e4m3 = np.array([1.0, -448.0], dtype=ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(host_storage(e4m3, "f8E4M3FN"), [0x38, 0xFE])
