"""Numba's workers on CPUs of their own during a cpu launch (``fusec.targets.cpu.affinity``).

After a launch each worker of the calling thread's pool is allowed one CPU,
distinct ones inside the caller's mask; a caller on a worker's CPU is confined
to the other CPUs only while its kernel runs (also when the kernel raises), one
already on a CPU of its own is left alone; a changed thread count or mask is
placed afresh, the mask read at most every ``MASK_CHECK_S``; ``FUSEC_CPU_PIN=0``
and a mask with fewer CPUs than threads leave everything unpinned; results are
the reference's either way.
No timing is asserted: ``benchmarks/cpu_threads.py --pause 0.02`` run with
``FUSEC_CPU_PIN=0`` and ``=1`` measures the effect (the A/B script that measured it,
benchmarks/cpu_pin_ab.py, is in git history, 831df23).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numba
import numpy as np
import pytest

import fusec
from fusec.targets.cpu import affinity
from tests.numerics import assert_close

T = "tensor<256x256xf32>"  # 64K elements: a parallel row kernel (a serial one is a bare call)
GRAPH = f"""
func.func @f(%x: {T}) -> {T} {{
  %s = ai.softmax %x : {T}
  return %s : {T}
}}
"""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs Linux and at least 2 allowed CPUs",
)


@pytest.fixture(scope="module")
def compiled():
    return fusec.compile(GRAPH, target="cpu")


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    """Every test starts with 2 Numba threads, pinning on (whatever the environment
    says) and no kernel known as short, and leaves the thread count as it was.

    ``affinity._short`` is keyed by ``id(kernel)``: a test's fresh kernel often gets
    the address of a kernel freed earlier (another test's, or the previous test's),
    and would inherit its "short" guess and run unconfined at its first call. Which
    address a closure gets depends on what ran before, so a test relying on a fresh
    kernel starting long needs a table of its own.
    """
    monkeypatch.delenv(affinity.ENV_VAR, raising=False)
    monkeypatch.setattr(affinity, "_short", {})
    threads = numba.get_num_threads()
    numba.set_num_threads(2)
    yield
    numba.set_num_threads(threads)


def _check(compiled, seed: int = 0) -> None:
    x = np.random.default_rng(seed).standard_normal((256, 256)).astype(np.float32)
    assert_close(compiled(x)[0], fusec.reference(GRAPH)(x)[0])


def _allowed(tid: int) -> set[int]:
    """A thread's CPU mask as /proc shows it (Cpus_allowed_list: '0-3,6')."""
    with open(f"/proc/self/task/{tid}/status") as f:
        text = next(line for line in f if line.startswith("Cpus_allowed_list:"))
    cpus: set[int] = set()
    for part in text.split(":", 1)[1].strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _pinned(placement: affinity.Placement | None) -> affinity.Placement:
    assert placement is not None
    if placement.reason is not None and "threading layer" in placement.reason:
        pytest.skip(placement.reason)  # e.g. Numba's TBB layer: nothing to pin
    assert placement.reason is None, placement.reason
    return placement


def test_workers_get_one_cpu_each_and_the_caller_keeps_its_mask(compiled):
    mask = os.sched_getaffinity(0)
    _check(compiled)
    placement = _pinned(affinity.current())
    assert len(placement.workers) == 1 == len(set(placement.workers))
    cpus = [_allowed(tid) for tid in placement.workers]
    assert all(len(c) == 1 for c in cpus)
    assert len(set().union(*cpus)) == len(cpus)  # distinct
    assert set().union(*cpus) <= mask
    assert os.sched_getaffinity(0) == mask == _allowed(threading.get_native_id())
    assert placement.caller_cpus == mask - set().union(*cpus)


def _on_cpu(monkeypatch, cpu: int) -> None:
    """The caller reads as running on ``cpu`` from now on (``sched_getcpu``)."""
    monkeypatch.setattr(affinity, "_current_cpu", lambda: cpu)


def test_the_caller_is_confined_only_during_the_kernel_also_when_it_raises(compiled, monkeypatch):
    _check(compiled)  # placed
    mask = os.sched_getaffinity(0)
    _on_cpu(monkeypatch, _pinned(affinity.current()).worker_cpus[0])
    seen: list[set[int]] = []

    def kernel() -> None:
        seen.append(os.sched_getaffinity(0))
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        affinity.run(kernel, [])
    placement = _pinned(affinity.current())
    assert seen == [set(placement.caller_cpus)]
    assert not seen[0] & set(placement.worker_cpus)
    assert os.sched_getaffinity(0) == mask


def test_a_short_kernel_runs_unconfined_after_its_first_call(compiled, monkeypatch):
    _check(compiled)
    mask = os.sched_getaffinity(0)
    caller = set(_pinned(affinity.current()).caller_cpus)
    seen: list[set[int]] = []

    def kernel() -> None:
        seen.append(os.sched_getaffinity(0))

    _on_cpu(monkeypatch, _pinned(affinity.current()).worker_cpus[0])
    monkeypatch.setattr(affinity, "LONG_S", 1e3)  # every call is short
    for _ in range(3):
        affinity.run(kernel, [])
    monkeypatch.setattr(affinity, "LONG_S", 0.0)  # every call is long
    for _ in range(2):
        affinity.run(kernel, [])
    assert seen == [caller, mask, mask, mask, caller]  # the 4th call showed it long


def _counting(monkeypatch, name: str) -> list[object]:
    """Records each call of ``os.<name>`` (which the test's thread makes) and makes it."""
    calls: list[object] = []
    real = getattr(os, name)

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(affinity.os, name, counted)
    return calls


def test_a_caller_on_a_cpu_of_its_own_is_left_alone(compiled, monkeypatch):
    _check(compiled)
    mask = os.sched_getaffinity(0)
    placement = _pinned(affinity.current())
    _on_cpu(monkeypatch, min(placement.caller_cpus))
    monkeypatch.setattr(affinity, "LONG_S", 0.0)  # a long kernel: confined if it must be
    sets = _counting(monkeypatch, "sched_setaffinity")
    seen: list[set[int]] = []
    affinity.run(lambda: seen.append(os.sched_getaffinity(0)), [])
    assert seen == [mask] and sets == []
    assert affinity.current() is placement


def test_the_mask_is_read_at_most_every_mask_check_s(compiled, monkeypatch):
    _check(compiled)
    placement = _pinned(affinity.current())
    _on_cpu(monkeypatch, min(placement.caller_cpus))
    reads = _counting(monkeypatch, "sched_getaffinity")
    monkeypatch.setattr(affinity, "MASK_CHECK_S", 1e3)
    for _ in range(3):
        affinity.run(lambda: None, [])
    assert reads == []
    monkeypatch.setattr(affinity, "MASK_CHECK_S", 0.0)
    for _ in range(2):
        affinity.run(lambda: None, [])
    assert len(reads) == 2
    assert affinity.current() is placement  # the same mask: the same placement


def test_a_caller_outside_its_placements_mask_has_the_mask_read_at_once(compiled, monkeypatch):
    _check(compiled)
    placement = _pinned(affinity.current())
    monkeypatch.setattr(affinity, "MASK_CHECK_S", 1e3)
    reads = _counting(monkeypatch, "sched_getaffinity")
    _on_cpu(monkeypatch, max(placement.allowed) + 1)  # as if the mask had moved it
    affinity.run(lambda: None, [])
    assert len(reads) == 1


def test_opting_out_unpins_the_workers(compiled, monkeypatch):
    mask = os.sched_getaffinity(0)
    _check(compiled)
    workers = _pinned(affinity.current()).workers
    monkeypatch.setenv("FUSEC_CPU_PIN", "0")
    _check(compiled, seed=1)
    placement = affinity.current()
    assert placement.reason == "FUSEC_CPU_PIN=0" and placement.caller_cpus is None
    assert all(_allowed(tid) == mask for tid in workers)
    monkeypatch.delenv("FUSEC_CPU_PIN")
    _check(compiled, seed=2)
    assert _pinned(affinity.current()).workers == workers


def test_a_changed_thread_count_is_placed_afresh(compiled):
    mask = os.sched_getaffinity(0)
    _check(compiled)
    workers = _pinned(affinity.current()).workers
    numba.set_num_threads(1)
    _check(compiled, seed=1)
    assert affinity.current().reason == "one thread"
    assert all(_allowed(tid) == mask for tid in workers)
    numba.set_num_threads(2)
    _check(compiled, seed=2)
    assert len(_pinned(affinity.current()).workers) == 1


def _in_thread(fn):
    """``fn()``'s result, run in a new thread (its own Numba pool and CPU mask)."""
    out: list = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            numba.set_num_threads(2)  # Numba's count is per thread: not inherited
            out.append(fn())
        except BaseException as err:  # re-raised in the test's thread
            errors.append(err)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def test_a_mask_the_user_narrows_is_respected(compiled, monkeypatch):
    one = {min(os.sched_getaffinity(0))}
    monkeypatch.setattr(affinity, "MASK_CHECK_S", 0.0)  # read at every launch

    def narrowed():
        _check(compiled)
        workers = _pinned(affinity.current()).workers
        os.sched_setaffinity(0, one)  # now fewer CPUs than threads
        _check(compiled, seed=1)
        return affinity.current(), [_allowed(tid) for tid in workers], os.sched_getaffinity(0)

    placement, worker_masks, caller_mask = _in_thread(narrowed)
    assert placement.reason == "1 allowed CPUs < 2 threads"
    assert worker_masks == [one] and caller_mask == one


def test_concurrent_callers_are_each_pinned_and_restored(compiled):
    mask = os.sched_getaffinity(0)
    start = threading.Barrier(2)

    def calls():
        start.wait()
        for seed in range(20):
            _check(compiled, seed)
        placement = _pinned(affinity.current())
        return placement, [_allowed(tid) for tid in placement.workers], os.sched_getaffinity(0)

    results: list = [None, None]
    threads = [
        threading.Thread(target=lambda k=k: results.__setitem__(k, _in_thread(calls)))
        for k in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert None not in results
    (a, a_masks, a_caller), (b, b_masks, b_caller) = results
    assert set(a.workers).isdisjoint(b.workers)  # a pool of its own each
    assert all(len(m) == 1 for m in a_masks + b_masks)
    assert a_caller == b_caller == mask
    if len(mask) >= 4:  # room for a block of CPUs per caller
        assert set(a.worker_cpus).isdisjoint(b.worker_cpus)


def test_one_allowed_cpu_skips_pinning():
    """A process started on one CPU with 2 Numba threads (which Numba would otherwise
    size to the mask): nothing is pinned, the results are right."""
    script = textwrap.dedent(f"""
        import os
        os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
        import numba, numpy as np, fusec
        from fusec.targets.cpu import affinity
        numba.set_num_threads(2)
        graph = {GRAPH!r}
        x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
        got, want = fusec.compile(graph, target="cpu")(x)[0], fusec.reference(graph)(x)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        print(affinity.current().reason, sorted(os.sched_getaffinity(0)))
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={k: v for k, v in os.environ.items() if k != affinity.ENV_VAR}
        | {"NUMBA_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    cpu = min(os.sched_getaffinity(0))
    assert out.stdout.strip().splitlines()[-1] == f"1 allowed CPUs < 2 threads [{cpu}]"


def test_a_scope_checks_the_placement_once_for_its_launches(compiled, monkeypatch):
    _check(compiled)  # placed
    # The placement must still be current when the scope opens: on a loaded machine
    # MASK_CHECK_S (0.5 s) can pass between the launch above and the scope, and then
    # the scope rightly leaves the check to the launches.
    monkeypatch.setattr(affinity, "MASK_CHECK_S", 1e3)
    _on_cpu(monkeypatch, min(_pinned(affinity.current()).caller_cpus))
    calls: list[int] = []
    real = affinity._placement
    monkeypatch.setattr(affinity, "_placement", lambda cpu: calls.append(cpu) or real(cpu))
    with affinity.Scope():
        for _ in range(3):
            affinity.run(lambda: None, [])
    assert calls == []
    affinity.run(lambda: None, [])  # outside a scope: checked at the launch
    assert len(calls) == 1


def test_a_scope_leaves_the_first_placement_to_the_launch(compiled):
    """A thread's first placement runs a probe kernel: a scope does not make it (the
    launch does, under the backend's lock where Numba's threading layer needs one)."""

    def first_call():
        with affinity.Scope():
            before = affinity.current()
            affinity.run(lambda: None, [])
        return before, affinity.current()

    before, after = _in_thread(first_call)
    assert before is None and after is not None
