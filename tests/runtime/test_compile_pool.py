"""Kernels compiled at once in worker processes (``fusec.runtime.compile_pool``).

* A program compiled with workers gives the results of a serial compile (bit for
  bit: the same kernels) and of the reference; every module is compiled once, those
  that several launches share too.
* What workers compile, the program loads from the cache without compiling: kernels,
  their njit entries and the compiled launcher's segments (Numba's cache hit for
  every function, none missed).
* A job that fails in a worker fails in the program exactly as in a serial compile:
  the same exception, the same message (a ``FusecError`` raised by a module and a
  Numba typing error).
* Where no worker process starts, one ``FusecWarning`` says why and the kernels
  compile in this process.

Pools here are one or two processes, on graphs of a few small kernels.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import replace

import numpy as np
import pytest

import fusec
from fusec.errors import FusecWarning
from fusec.runtime import compile_pool, progress
from fusec.runtime.cache import KernelCache
from fusec.targets.cpu.program import CpuProgram, compile_jobs

# two softmaxes and two matmul + relu groups (identical sources), a layernorm
TEXT = textwrap.dedent("""\
    func.func @f(%x: tensor<8x32xf32>, %y: tensor<8x32xf32>, %w: tensor<32x16xf32>,
                 %g: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x16xf32>,
                                         tensor<8x16xf32>, tensor<8x32xf32>) {
      %a = ai.softmax %x : tensor<8x32xf32>
      %b = ai.softmax %y : tensor<8x32xf32>
      %m = ai.matmul %a, %w : tensor<8x32xf32> * tensor<32x16xf32>
      %r = ai.relu %m : tensor<8x16xf32>
      %n = ai.matmul %b, %w : tensor<8x32xf32> * tensor<32x16xf32>
      %q = ai.relu %n : tensor<8x16xf32>
      %l = ai.layernorm %x, %g, %g : tensor<8x32xf32> * tensor<32xf32> * tensor<32xf32>
      return %a, %b, %r, %q, %l : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x16xf32>,
                                  tensor<8x16xf32>, tensor<8x32xf32>
    }
    """)


def _program(cache: KernelCache, text: str = TEXT) -> CpuProgram:
    from fusec.api import run_pipeline

    return CpuProgram(run_pipeline(fusec.parse(text)), target="cpu", cache=cache)


def _inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(8, 32), (8, 32), (32, 16), (32,)]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _modules(cache: KernelCache) -> list[str]:
    from fusec.targets.cpu import affinity

    paths = (cache.root / "cpu").glob("k_*.py")
    return sorted(p.read_text() for p in paths if p.read_text() != affinity.PROBE_SOURCE)


def _own_functions(cache: KernelCache) -> list:
    """The Numba functions the cache's modules define: kernels, entries, segments.

    Not the helpers of fusec's own that a module imports (``sealed_njit``:
    ``tasks.next_block``, ``microkernel.gemm_nn``, ...): those are process-wide
    dispatchers whose counts hold every compile of this process so far (in the whole
    slow lane: an earlier test's on a cold default kernel cache, or under another
    ``FUSEC_CACHE_DIR``), and one imported by three modules counted three times, so
    counting them made this file's tests depend on what ran before (3 misses in CI)."""
    return [
        fn
        for module in cache._modules.values()
        for fn in vars(module).values()
        if hasattr(fn, "stats") and getattr(fn.py_func, "__module__", None) == module.__name__
    ]


def _misses(cache: KernelCache) -> int:
    """Functions of the cache's modules that Numba compiled in this process."""
    return sum(sum(fn.stats.cache_misses.values()) for fn in _own_functions(cache))


def _hits(cache: KernelCache) -> int:
    """Functions of the cache's modules that Numba loaded from its disk cache."""
    return sum(sum(fn.stats.cache_hits.values()) for fn in _own_functions(cache))


@pytest.fixture
def pool(monkeypatch):
    """A pool of two processes (this one and a worker) for graphs of any size."""
    monkeypatch.setenv(compile_pool.ENV_VAR, "2")
    monkeypatch.setattr(compile_pool, "MIN_JOBS", 1)


def test_identical_kernels_are_one_job():
    program = _program(KernelCache())
    jobs, names = compile_jobs(program)
    # softmax (k0, k1), matmul + relu (k2, k3), layernorm (k4), the program module
    assert names == [["k0", "k1"], ["k2", "k3"], ["k4"], []]
    assert len({job.source for job in jobs}) == 4
    entries = [job.signatures for job in jobs[:3]]
    assert all(len(sigs) == 1 and sigs[0][0] == "entry" for sigs in entries)
    assert [name for name, _ in jobs[3].signatures] == ["segment0"]


SMALL = """\
import numba
from fusec.targets.cpu.abi import cached_njit


@cached_njit(numba.float32(numba.float32[::1]))
def total(a):
    s = numba.float32(0)
    for v in a:
        s += v
    return s


@cached_njit()
def scaled(a, k):
    return a * k
"""


def test_a_worker_compiles_a_module_that_then_loads_without_compiling(tmp_path, monkeypatch):
    """The default lane's worker test: one process, one small module. The worker imports
    this process's fusec, not one in the folder it runs in."""
    from numba import types

    monkeypatch.setenv(compile_pool.ENV_VAR, "1")
    monkeypatch.setattr(compile_pool, "MIN_JOBS", 1)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "fusec").mkdir(parents=True)
    (elsewhere / "fusec" / "__init__.py").write_text("raise ImportError('another fusec')\n")
    monkeypatch.chdir(elsewhere)
    cache = KernelCache(tmp_path / "cache")
    signature = (types.Array(types.float32, 1, "C"), types.float32)
    job = compile_pool.Job(SMALL, "cpu", (("scaled", signature),))
    assert compile_pool.compile_ahead(cache, [job], lambda k, s: None, local=False) == {0}
    assert cache.has_module(SMALL) and cache.stats["module_files_written"] == 0
    module = cache.load_module(SMALL)
    a = np.random.default_rng(4).standard_normal(100).astype(np.float32)
    np.testing.assert_allclose(module.total(a), a.sum(dtype=np.float64), rtol=1e-5)
    np.testing.assert_array_equal(module.scaled(a, np.float32(3)), a * np.float32(3))
    assert _misses(cache) == 0 and _hits(cache) == 2  # both loaded from what the worker stored


@pytest.mark.slow  # a worker process compiling a program's kernels
def test_workers_compile_what_the_program_loads_without_compiling(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_pool.ENV_VAR, "1")  # one worker process, none here
    monkeypatch.setattr(compile_pool, "MIN_JOBS", 1)
    cache = KernelCache(tmp_path / "cache")
    program = _program(cache)
    jobs, _ = compile_jobs(program)
    finished: list[int] = []
    done = compile_pool.compile_ahead(cache, jobs, lambda k, s: finished.append(k), local=False)
    assert done == set(range(len(jobs))) and sorted(finished) == sorted(done)
    assert cache.stats["module_files_written"] == 0  # the worker wrote them
    args = _inputs(0)
    outs = program(args)
    assert _misses(cache) == 0 and cache.stats["module_files_written"] == 0
    # every function the call needed (kernels, entries, the segment) came from the cache
    overloads = sum(len(fn.overloads) for fn in _own_functions(cache))
    assert overloads >= len(jobs) and _hits(cache) == overloads
    for out, ref in zip(outs, fusec.reference(TEXT)(*args), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # compiles a program's kernels twice
def test_parallel_compile_gives_the_serial_results(tmp_path, monkeypatch, pool):
    steps: list[progress.Step] = []
    parallel = _program(KernelCache(tmp_path / "parallel"))
    args = _inputs(1)
    with progress.listening(steps.append):
        got = parallel(args)
    compiling = [s for s in steps if s.task == progress.COMPILING]
    assert [s.done for s in compiling] == list(range(6))  # 5 kernels, each reported once
    assert sorted(s.name for s in compiling[1:]) == ["k0", "k1", "k2", "k3", "k4"]
    monkeypatch.setenv(compile_pool.ENV_VAR, "1")
    serial = _program(KernelCache(tmp_path / "serial"))
    want = serial(args)
    for out, ref in zip(got, want, strict=True):
        np.testing.assert_array_equal(out, ref)
    for out, ref in zip(got, fusec.reference(TEXT)(*args), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    # each distinct module once: 3 kernels and the program module
    assert _modules(parallel.backend.cache) == _modules(serial.backend.cache)
    assert len(_modules(serial.backend.cache)) == 4


BROKEN = {
    "fusec": "from fusec.errors import FusecError\nraise FusecError('kernel k2 refused')\n",
    "numba": (
        "@cached_njit(numba.void(numba.float32[::1]))\n"
        "def broken(a):\n    a[0] = a.no_such_attribute\n"
    ),
}


def _without_folder(text: str, folder) -> str:
    """``text`` with the cache folder written ``<c>``, absolute or relative to the
    working directory (Numba's error locations take the shorter: a checkout beside
    /tmp gives ``../pytest-of-.../1/cpu/k_...py``)."""
    for form in (str(folder), os.path.relpath(folder)):
        text = text.replace(form, "<c>")
    return text


@pytest.mark.slow  # compiles a program's kernels twice
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_worker_error_is_the_serial_error(tmp_path, monkeypatch, pool, kind):
    """A module that fails to compile (appended to kernel k2's source) fails the
    program with the same exception with workers as without."""
    errors = []
    for jobs in ("2", "1"):
        monkeypatch.setenv(compile_pool.ENV_VAR, jobs)
        program = _program(KernelCache(tmp_path / jobs))
        launch = program.launches[2]
        source = launch.kernel.source + "\n" + BROKEN[kind]
        launch.kernel = replace(launch.kernel, source=source)
        with pytest.raises(Exception) as caught:
            program(_inputs(2))
        errors.append((caught.value, _without_folder(str(caught.value), tmp_path / jobs)))
    (first, text), (second, serial_text) = errors
    assert type(first) is type(second) and text == serial_text
    assert ("kernel k2 refused" if kind == "fusec" else "no_such_attribute") in text
    assert isinstance(first, fusec.FusecError) == (kind == "fusec")


@pytest.mark.slow  # compiles a program's kernels
def test_without_worker_processes_the_kernels_compile_here(tmp_path, monkeypatch, pool):
    monkeypatch.setattr(compile_pool.sys, "executable", str(tmp_path / "no-python"))
    monkeypatch.setattr(compile_pool, "_warned", False)
    monkeypatch.setattr(compile_pool, "_unavailable", None)
    cache = KernelCache(tmp_path / "cache")
    program = _program(cache)
    args = _inputs(3)
    with pytest.warns(FusecWarning, match="kernels compile in this process only.*no-python"):
        outs = program(args)
    assert cache.stats["module_files_written"] == 4  # all here
    for out, ref in zip(outs, fusec.reference(TEXT)(*args), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value", ["two", "-"])
def test_a_bad_process_count_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv(compile_pool.ENV_VAR, value)
    with pytest.raises(fusec.FusecError, match="FUSEC_COMPILE_JOBS=.*number of processes"):
        compile_pool.workers(10)


def test_the_process_count_follows_the_setting_and_the_jobs(monkeypatch):
    monkeypatch.setenv(compile_pool.ENV_VAR, "3")
    assert [compile_pool.workers(n) for n in (1, 2, 3, 9)] == [1, 2, 3, 3]
    monkeypatch.setenv(compile_pool.ENV_VAR, "0")
    assert compile_pool.workers(9) == 1
    monkeypatch.delenv(compile_pool.ENV_VAR)  # the CPUs it may use, up to MAX_DEFAULT
    monkeypatch.setattr(compile_pool.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert compile_pool.workers(100) == compile_pool.MAX_DEFAULT == 8
    assert compile_pool.workers(3) == 3
    monkeypatch.setattr(compile_pool.os, "sched_getaffinity", lambda pid: {5})
    assert compile_pool.workers(100) == 1
