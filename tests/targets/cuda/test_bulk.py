"""``fusec.targets.cuda.bulk``: bulk copies into shared memory on mbarriers. The simulator's
helpers (the semantics the W4A16 kernel's simulator tests rely on) and, without a GPU, the
PTX of the GPU helpers for sm_90. On the GPU: the W4A16 Tensor Core kernel's tests."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fusec.targets.cuda import bulk
from fusec.targets.cuda.env import simulator_enabled

pytestmark = pytest.mark.requires_target("cuda")


def test_a_simulated_copy_completes_its_barriers_phase_and_wakes_the_waiter() -> None:
    sim = bulk._make_sim()
    ring, src = np.full(16, -1, np.int32), np.arange(40, dtype=np.int32)
    bars = np.zeros(2, np.int64)
    sim["mbar_init"](bars, 1, 1)
    waiter = threading.Thread(target=sim["mbar_wait"], args=(bars, 1, 0))
    waiter.start()
    waiter.join(0.05)
    assert waiter.is_alive()  # phase 0 has not completed: no bytes yet
    sim["bulk_load"](ring, 4, src, 8, 32, bars, 1)
    waiter.join(5)
    assert not waiter.is_alive()
    assert ring.tolist() == [-1] * 4 + list(range(8, 16)) + [-1] * 4
    sim["mbar_wait"](bars, 1, 0)  # a completed phase does not block
    assert bulk._sim_fields(bars[1])[0] == 1  # phase 1 (parity 1) is the next to complete


def test_a_simulated_barrier_completes_a_phase_with_its_last_arrival() -> None:
    """``mbar_arrive``: a barrier of 3 arrivals completes phase 0 with the third, phase 1
    with the sixth; a copy (``bulk_load``) and a thread's async copies (``cp_async_arrive``)
    are an arrival each."""
    sim = bulk._make_sim()
    bars = np.zeros(1, np.int64)
    sim["mbar_init"](bars, 0, 3)
    for arrival in range(6):
        assert bulk._sim_fields(bars[0])[:2] == (arrival // 3, arrival % 3)
        sim["mbar_arrive"](bars, 0)
    assert bulk._sim_fields(bars[0]) == (2, 0, 3)
    sim["mbar_wait"](bars, 0, 1)  # phase 1 completed: no wait
    ring, src = np.zeros(8, np.int32), np.arange(16, dtype=np.int16)
    sim["bulk_load"](ring, 0, np.arange(4, dtype=np.int32), 0, 16, bars, 0)
    sim["cp_async16"](ring, 4, src, 8)  # 16 bytes of int16 into 4 words
    sim["cp_async_arrive"](bars, 0)
    assert bulk._sim_fields(bars[0]) == (2, 2, 3)
    assert ring[:4].tolist() == [0, 1, 2, 3]
    assert ring[4:].view(np.int16).tolist() == list(range(8, 16))
    with pytest.raises(AssertionError, match="not 16-byte aligned"):
        sim["cp_async16"](ring, 4, src, 3)


@pytest.mark.parametrize("de, se, nbytes", [(1, 0, 16), (0, 2, 16), (0, 0, 24), (12, 0, 32)])
def test_a_simulated_copy_refuses_what_the_copy_engine_would(de: int, se: int, nbytes: int):
    """Destinations and sources 16-byte aligned, whole 16-byte units, inside the arrays."""
    sim = bulk._make_sim()
    ring, src, bars = np.zeros(16, np.int32), np.zeros(40, np.int32), np.zeros(1, np.int64)
    with pytest.raises(AssertionError):
        sim["bulk_load"](ring, de, src, se, nbytes, bars, 0)


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
def test_the_gpu_helpers_compile_to_bulk_copies_on_mbarriers_for_sm_90() -> None:
    from numba.cuda import compile_ptx, types

    from fusec.targets.cuda.abi import (
        align16,
        bulk_load,
        cp_async16,
        cp_async_arrive,
        cuda,
        lds_words4,
        mbar_arrive,
        mbar_init,
        mbar_wait,
    )

    def kernel(out, src):
        ring = cuda.shared.array(36, types.int32)
        bars = cuda.shared.array(1, types.int64)
        words = cuda.local.array(4, types.int32)
        r0 = align16(ring)
        if cuda.threadIdx.x == 0:
            mbar_init(bars, 0, 1)
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            bulk_load(ring, r0, src, 0, 128, bars, 0)
        mbar_wait(bars, 0, 0)
        lds_words4(ring, r0 + 4 * (cuda.threadIdx.x % 8), words, 0)
        out[cuda.threadIdx.x] = words[0] + words[3]
        mbar_arrive(bars, 0)
        cp_async16(ring, r0, src, 4)
        cp_async_arrive(bars, 0)

    ptx, _ = compile_ptx(kernel, (types.int32[::1], types.int32[::1]), cc=(9, 0))
    assert "mbarrier.init.shared::cta.b64" in ptx
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx
    assert "mbarrier.arrive.shared::cta.b64" in ptx  # (a reader's release)
    assert "cp.async.cg.shared.global" in ptx
    assert "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in ptx
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "fence.proxy.async.shared::cta" in ptx  # the stage's reads before the refill
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx
    assert "ld.shared.v4.u32" in ptx and ".local" not in ptx


def test_simulated_bit_fields_are_32_bit_fields() -> None:
    """``ufield32``/``sfield32`` under the simulator: a field zero- or sign-extended, and a
    field past bit 31 refused as the GPU's 32-bit shifts could not give it."""
    from fusec.targets.cuda import rawmove

    sim = rawmove._make_sim_moves()
    word = 0x80F0_1234
    assert sim["ufield32"](word, 16, 8) == 0xF0 and sim["sfield32"](word, 16, 8) == -16
    assert sim["ufield32"](word, 0, 16) == 0x1234 and sim["sfield32"](word, 24, 8) == -128
    for pos, length in ((-1, 8), (28, 8), (0, 0)):
        with pytest.raises(AssertionError, match="ufield32"):
            sim["ufield32"](word, pos, length)
