"""``constant_value``: a dense constant's elements read in place (numpy) agree with xDSL's
element-by-element unpacking and with the array stored, for every element type fusec
has, splats included."""

from __future__ import annotations

import numpy as np
import pytest

from fusec.ir.constants import constant_value, dense_constant
from fusec.ir.dtypes import ELEMENT_TYPES


def _random(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype == "i1":
        return rng.integers(0, 2, shape).astype(bool)
    if ELEMENT_TYPES[dtype].kind == "int":
        return rng.integers(-(2**31), 2**31 - 1, shape)
    return rng.standard_normal(shape) * 100


@pytest.mark.parametrize("dtype", sorted(ELEMENT_TYPES))
@pytest.mark.parametrize("shape", [(3, 5), (1,), ()])
def test_constant_value_matches_xdsl_unpacking(dtype, shape):
    array = _random(dtype, shape, np.random.default_rng(7))
    op = dense_constant(array, dtype)
    got = constant_value(op)
    assert got.dtype == np.float64 and got.shape == shape
    if dtype != "bf16":  # xDSL unpacks no bf16
        unpacked = np.asarray(op.value.get_values(), dtype=np.float64)
        np.testing.assert_array_equal(got, unpacked.reshape(shape))
    # the array rounded to the element type, as stored
    rounded = np.asarray(array, dtype=ELEMENT_TYPES[dtype].numpy).astype(np.float64)
    np.testing.assert_array_equal(got, rounded)


def test_a_splat_fills_its_shape():
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32

    ttype = TensorType(f32, [2, 3])
    op = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(ttype, [1.5]), ttype)
    np.testing.assert_array_equal(constant_value(op), np.full((2, 3), 1.5))
