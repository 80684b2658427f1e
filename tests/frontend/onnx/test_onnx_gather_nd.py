"""ONNX ``GatherND`` imported as ai ops (``fusec/frontend/onnx_indexing.py``), against
onnxruntime on fresh random data: constant indices (one ai.gather of the data flattened
over the indexed dims, or a reshape when they pick every slice in order, as the dynamo
exporter's ``mask[batch_idx, kv_idx]`` does) and indices given at run time (ai.take at
positions computed with integer ops); batch_dims, negative indices, float, integer and
bool data; the refusals are located."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_nets import node_model, run_onnxruntime

import fusec
from fusec.errors import FusecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(43)

CASES = [  # data shape, indices shape, batch_dims
    ((4, 5), (3, 2), 0),  # whole elements
    ((4, 5, 3), (2, 2, 1), 0),  # rows of the last dims
    ((2, 3, 4), (2, 5, 2), 1),  # per batch
    ((2, 3, 4, 2), (2, 3, 1), 2),
]


def _indices(data_shape, index_shape, batch):
    dims = np.asarray(data_shape[batch : batch + index_shape[-1]])
    return RNG.integers(-dims, dims, size=index_shape).astype(np.int64)


def _data(shape, dtype):
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype == np.int64:
        return RNG.integers(-1000, 1000, shape).astype(np.int64)
    return RNG.standard_normal(shape).astype(dtype)


def _check(model, feeds, target="reference"):
    got = fusec.compile(fusec.from_onnx(model), target=target)(*feeds.values())
    (want,) = run_onnxruntime(model, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # a pick: exact


def _op_names(model) -> list[str]:
    return [op.name for op in fusec.from_onnx(model).walk()]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize(("data_shape", "index_shape", "batch"), CASES)
def test_gather_nd_at_constant_indices_is_one_gather(data_shape, index_shape, batch, dtype):
    data = _data(data_shape, dtype)
    indices = _indices(data_shape, index_shape, batch)
    model = node_model("GatherND", {"data": data}, weights={"indices": indices}, batch_dims=batch)
    assert _op_names(model).count("ai.gather") == 1
    _check(model, {"data": data})


@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
@pytest.mark.parametrize(("data_shape", "index_shape", "batch"), CASES)
def test_gather_nd_at_run_time_indices(data_shape, index_shape, batch, dtype):
    data = _data(data_shape, dtype)
    indices = _indices(data_shape, index_shape, batch)
    model = node_model("GatherND", {"data": data, "indices": indices}, batch_dims=batch)
    assert _op_names(model).count("ai.take") == 1
    _check(model, {"data": data, "indices": indices})


def test_every_slice_in_order_is_a_reshape():
    """The dynamo exporter's padding mask ``mask[batch_idx, kv_idx]``: indices that pick
    each [batch, kv] element once, in order, broadcast to [B, 1, 1, S, 2]."""
    batch, seq = 3, 5
    b = np.broadcast_to(np.arange(batch).reshape(batch, 1, 1, 1), (batch, 1, 1, seq))
    s = np.broadcast_to(np.arange(seq).reshape(1, 1, 1, seq), (batch, 1, 1, seq))
    indices = np.stack([b, s], axis=-1).astype(np.int64)
    mask = RNG.random((batch, seq)) < 0.7
    model = node_model("GatherND", {"mask": mask}, weights={"indices": indices})
    names = _op_names(model)
    assert "ai.gather" not in names and "ai.reshape" in names
    _check(model, {"mask": mask})


@pytest.mark.parametrize(
    ("index_shape", "batch", "message"),
    [
        ((3, 3), 0, r"the indices' last dim 3 must be in \[1, 2\]"),
        ((3, 1), 2, "batch_dims 2 must be below the ranks"),
        ((3, 1), 1, r"the first 1 dims of the indices \[3, 1\] and the data \[4, 5\] differ"),
    ],
)
def test_shapes_gather_nd_cannot_take_are_located_errors(index_shape, batch, message):
    indices = np.zeros(index_shape, np.int64)
    data = _data((4, 5), np.float32)
    model = node_model("GatherND", {"data": data}, weights={"indices": indices}, batch_dims=batch)
    with pytest.raises(FusecError, match=message) as info:
        fusec.from_onnx(model)
    assert info.value.format().startswith('<onnx>: node "node0": error: GatherND: ')


def test_an_index_out_of_range_is_a_located_error():
    indices = np.array([[0, 5]], np.int64)
    model = node_model(
        "GatherND", {"data": _data((4, 5), np.float32)}, weights={"indices": indices}
    )
    with pytest.raises(FusecError, match=r"out of range for the data's dims \[4, 5\]"):
        fusec.from_onnx(model)


@pytest.mark.slow  # JIT of the kernels
def test_gather_nd_on_the_cpu_target():
    data_shape, index_shape, batch = CASES[2]
    data = _data(data_shape, np.float32)
    indices = _indices(data_shape, index_shape, batch)
    constant = node_model("GatherND", {"data": data}, weights={"indices": indices}, batch_dims=1)
    _check(constant, {"data": data}, target="cpu")
    at_run_time = node_model("GatherND", {"data": data, "indices": indices}, batch_dims=1)
    _check(at_run_time, {"data": data, "indices": indices}, target="cpu")


def test_a_run_time_index_outside_its_dim_fails_though_its_flat_position_is_inside():
    """[0, 5] on 4x5 data: 5 is outside dim 1, though 0 * 5 + 5 is inside the merged 20
    elements (before the shared lookup it read element [1, 0]); onnxruntime refuses it,
    and the lookup fails (``index_lookup``, PyTorch's x[i, j] too). From the end: fine."""
    data = _data((4, 5), np.float32)
    indices = np.array([[0, 5], [1, 2]], np.int64)
    model = node_model("GatherND", {"data": data, "indices": indices})
    run = fusec.compile(fusec.from_onnx(model), target="reference")
    with pytest.raises(FusecError, match="out of range"):
        run(data, indices)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error type
        run_onnxruntime(model, {"data": data, "indices": indices})
    _check(model, {"data": data, "indices": np.array([[0, -1], [-4, 2]], np.int64)})
