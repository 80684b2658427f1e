"""The cpu back end's pool of output blocks (``fusec.targets.cpu.buffers``)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import fusec
from fusec.targets.cpu.buffers import MIN_BYTES, BufferPool

F32 = np.dtype(np.float32)
SHAPE = (256, MIN_BYTES // 4 // 256 * 2)  # two MiB of float32: pooled


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_a_dropped_array_gives_its_block_back_and_the_next_one_reuses_it():
    pool = BufferPool()
    first = pool.empty(SHAPE, F32)
    address = _address(first)
    assert first.shape == SHAPE and first.dtype == F32 and first.flags.c_contiguous
    del first
    assert pool.free_bytes == 4 * SHAPE[0] * SHAPE[1]
    second = pool.empty(SHAPE, F32)
    assert _address(second) == address and pool.free_bytes == 0


def test_a_block_stays_lent_while_any_view_of_it_lives():
    pool = BufferPool()
    first = pool.empty(SHAPE, F32)
    first[...] = 7.0
    tail = first.reshape(-1)[5:][::3]  # views of views keep the lease as their base
    address = _address(first)
    del first
    gc.collect()
    second = pool.empty(SHAPE, F32)
    second[...] = -1.0
    assert _address(second) != address
    assert np.all(tail == 7.0)
    del tail
    third = pool.empty(SHAPE, F32)
    assert _address(third) == address


def test_the_free_lists_are_bounded_and_small_arrays_are_not_pooled():
    nbytes = 4 * SHAPE[0] * SHAPE[1]
    pool = BufferPool(max_free_bytes=nbytes)
    arrays = [pool.empty(SHAPE, F32) for _ in range(3)]
    del arrays
    assert pool.free_bytes == nbytes  # one block kept, two dropped
    small = pool.empty((8, 8), F32)
    assert small.flags.owndata and pool.free_bytes == nbytes


def test_an_output_held_by_the_caller_is_never_reused_by_the_next_call():
    text = """
func.func @f(%x: tensor<512x1024xf32>) -> tensor<512x1024xf32> {
  %y = ai.softmax %x : tensor<512x1024xf32>
  return %y : tensor<512x1024xf32>
}"""
    compiled = fusec.compile(text, target="cpu")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((512, 1024)).astype(np.float32) for _ in range(3)]
    held = [compiled(x) for x in xs]  # each call while the earlier results are held
    for _ in range(2):
        compiled(xs[0])  # results dropped at once: their blocks go round
    for x, y in zip(xs, held, strict=True):
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert len({_address(y) for y in held}) == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pooled_arrays_are_ordinary_numpy_arrays(dtype):
    pool = BufferPool()
    a = pool.empty(SHAPE, np.dtype(dtype))
    a[...] = 1.5
    assert a.dtype == dtype and a.sum() == 1.5 * a.size
    assert np.array_equal(a.copy(), a) and a.flags.writeable


def test_what_a_caller_does_to_a_result_does_not_reach_the_next_one():
    """The pool hands out a fresh view each time: a result reshaped in place or made
    read-only, then dropped, leaves the next result with its own shape, writeable."""
    pool = BufferPool()
    first = pool.empty(SHAPE, F32)
    address = _address(first)
    first.shape = (-1,)
    first.flags.writeable = False
    del first
    second = pool.empty(SHAPE, F32)
    assert _address(second) == address  # the same block
    assert second.shape == SHAPE and second.flags.writeable and second.flags.c_contiguous
    second[...] = 2.0


def test_launch_workspaces_are_reused_per_thread():
    """``workspace``: one array per calling thread, grown on demand, views of it handed
    out (no new mapping per launch); another thread gets its own."""
    from fusec.targets.cpu.buffers import release_workspace, workspace

    release_workspace()
    first = workspace(1000)
    assert first.dtype == np.float32 and first.shape == (1000,)
    again = workspace(500)
    assert again.base is first.base and again.size == 500  # the same array
    bigger = workspace(5000)
    assert bigger.size == 5000 and bigger.base is not first.base
    seen = []
    worker = threading.Thread(target=lambda: seen.append(workspace(100)))
    worker.start()
    worker.join()
    assert seen[0].base is not bigger.base
    release_workspace()
    assert workspace(10).base is not bigger.base
