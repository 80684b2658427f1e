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


@pytest.mark.parametrize("dtype", sorted(ELEMENT_TYPES))
def test_constant_value_in_its_own_type_is_the_stored_array(dtype):
    """What the runtime asks for (``plan_launches``): the elements in the constant's own
    type, exactly as stored, in a new writable array."""
    array = _random(dtype, (4, 6), np.random.default_rng(8))
    stored = np.asarray(array, dtype=ELEMENT_TYPES[dtype].numpy)
    got = constant_value(dense_constant(array, dtype), stored.dtype)
    assert got.dtype == stored.dtype and got.flags.writeable
    np.testing.assert_array_equal(got.view(np.uint8), stored.view(np.uint8))


def test_a_splat_fills_its_shape():
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32

    ttype = TensorType(f32, [2, 3])
    op = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(ttype, [1.5]), ttype)
    np.testing.assert_array_equal(constant_value(op), np.full((2, 3), 1.5))
    got = constant_value(op, np.dtype(np.float32))
    assert got.dtype == np.float32 and got.shape == (2, 3) and (got == 1.5).all()
