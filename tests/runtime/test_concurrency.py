"""Concurrency and faults: threads sharing compiled modules, processes sharing a cache folder,
processes killed while writing it, and entries from other versions.

* A call (after the first, which loads libraries) leaves the process as it
  found it (numpy's error state, Numba's and the BLAS pools' thread counts, the
  environment, the caller's CPU mask): no global state is toggled per call and
  left behind.
* Compiled modules called from many Python threads at once give the right
  results (cpu; the cuda test is marked ``gpu``), also under Numba's
  ``workqueue`` threading layer, which aborts the process on concurrent
  parallel launches unless fusec serialises them.
* Several processes compiling the same and different graphs into one cache
  folder at once all succeed, and leave a cache from which a fresh process
  loads everything without compiling and without rejecting anything.
* A process killed (SIGKILL) at random moments while compiling leaves no entry
  that a later process loads and finds broken.
* Entries of another format or version are ignored and rebuilt.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec import ops
from fusec.runtime.cache import KernelCache
from fusec.targets.cpu import affinity

HERE = Path(__file__).parent


def _graph(rows: int, cols: int, act: str = "gelu") -> str:
    """layernorm -> matmul -> activation, and a softmax of the input: three kernel kinds."""
    x, v, w = f"tensor<{rows}x{cols}xf32>", f"tensor<{cols}xf32>", f"tensor<{cols}x16xf32>"
    o = f"tensor<{rows}x16xf32>"
    return textwrap.dedent(f"""\
        func.func @f(%x: {x}, %g: {v}, %b: {v}, %w: {w}) -> ({o}, {x}) {{
          %l = ai.layernorm %x, %g, %b : {x} * {v} * {v}
          %m = ai.matmul %l, %w : {x} * {w}
          %r = ai.{act} %m : {o}
          %s = ai.softmax %x : {x}
          return %r, %s : {o}, {x}
        }}
        """)


def _inputs(text: str, seed: int) -> list[np.ndarray]:
    from fusec.ir.module import entry_function
    from fusec.tools.runner import random_inputs

    return random_inputs(entry_function(fusec.parse(text)), seed)


def _check(compiled, reference, seed: int) -> None:
    args = _inputs(reference, seed)
    outs = compiled(*args)
    refs = fusec.reference(reference)(*args)
    for out, ref in zip(outs, refs, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------- threads


def _hammer(call, threads: int = 8, rounds: int = 10) -> None:
    """Run ``call(thread, round)`` from ``threads`` threads at once; re-raise any failure."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for r in range(rounds):
                call(t, r)
        except BaseException as err:  # reported below, with the thread's failure
            errors.append(err)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]


def test_one_compiled_module_called_from_many_threads():
    text = _graph(32, 48)
    compiled = fusec.compile(text, target="cpu")
    _hammer(lambda t, r: _check(compiled, text, seed=100 * t + r))


def _process_state() -> dict:
    """What a call could toggle for the whole process: numpy's error handling, Numba's
    and the BLAS pools' thread counts, the environment, the calling thread's CPU mask."""
    import numba
    from threadpoolctl import threadpool_info

    pools = {(p["internal_api"], p["filepath"]): p["num_threads"] for p in threadpool_info()}
    return {
        "errstate": np.geterr(),
        "numba_threads": numba.get_num_threads(),
        "pools": pools,
        "environ": dict(os.environ),
        "affinity": os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None,
    }


def test_calls_leave_no_process_state_changed():
    text = _graph(64, 96)  # layernorm, a BLAS matmul with an epilogue, a softmax
    compiled = fusec.compile(text, target="cpu")
    _check(compiled, text, 0)  # the first call loads libraries (Numba's OpenMP pool)
    before = _process_state()
    for seed in range(1, 4):
        _check(compiled, text, seed)
    after = _process_state()
    loaded = set(after["pools"]) - set(before["pools"])  # a library loaded later: no toggle
    after["pools"] = {k: n for k, n in after["pools"].items() if k not in loaded}
    assert after == before


def test_first_calls_from_many_threads_compile_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    text = _graph(8, 24, act="silu")
    compiled = fusec.compile(text, target="cpu")  # its kernels compile on the first call
    _hammer(lambda t, r: _check(compiled, text, seed=t), rounds=1)
    files = [p for p in tmp_path.rglob("k_*.py") if p.read_text() != affinity.PROBE_SOURCE]
    # each kernel once, and the compiled launcher's one segment module once
    segments = [p for p in files if "\ndef segment" in p.read_text()]
    assert len(files) - len(segments) == len(compiled.kernels) and len(segments) == 1


def test_a_fused_function_traced_from_many_threads(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))

    @fusec.fuse(target="cpu")
    def block(x, w):
        return ops.softmax(ops.relu(x @ w) * 2.0)

    def call(t: int, r: int) -> None:
        rng = np.random.default_rng(t * 10 + r)
        x = rng.standard_normal((2 + t % 3, 8)).astype(np.float32)  # three signatures
        w = rng.standard_normal((8, 5)).astype(np.float32)
        e = np.exp(np.maximum(x @ w, 0) * 2 - np.max(np.maximum(x @ w, 0) * 2, -1, keepdims=True))
        np.testing.assert_allclose(block(x, w), e / e.sum(-1, keepdims=True), rtol=1e-4)

    _hammer(call, rounds=3)
    assert block.trace_count == 3


THREADS_CHILD = r"""
import sys, threading
import numpy as np
import fusec
text, errors = sys.argv[1], []
compiled = fusec.compile(text, target="cpu")
reference = fusec.reference(text)
def work(t):
    rng = np.random.default_rng(t)
    for _ in range(10):
        args = [rng.standard_normal(a.shape).astype(np.float32) for a in (
            np.empty((256, 128)), np.empty(128), np.empty(128), np.empty((128, 16)))]
        for o, r in zip(compiled(*args), reference(*args)):
            if not np.allclose(o, r, rtol=1e-4, atol=1e-4):
                errors.append(t)
pool = [threading.Thread(target=work, args=(t,)) for t in range(6)]
[p.start() for p in pool]; [p.join() for p in pool]
import numba
print(numba.threading_layer(), "errors", len(errors))
"""


def test_threads_under_numbas_workqueue_layer(tmp_path):
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", FUSEC_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        # big enough for parallel stages (small ones run on one thread)
        [sys.executable, "-c", THREADS_CHILD, _graph(256, 128)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["workqueue", "errors", "0"], done.stdout + done.stderr


@pytest.mark.gpu
def test_one_cuda_module_called_from_many_threads():
    text = _graph(64, 128).replace("f32", "f16")
    compiled = fusec.compile(text, target="cuda")
    reference = fusec.reference(text)

    def call(t: int, r: int) -> None:
        args = _inputs(text, 100 * t + r)
        for out, ref in zip(compiled(*args), reference(*args), strict=True):
            np.testing.assert_allclose(
                np.asarray(out, np.float32), np.asarray(ref, np.float32), rtol=2e-2, atol=2e-2
            )

    _hammer(call)


# ----------------------------------------------------------------- processes

CHILD = r"""
import json, sys
import numpy as np
import fusec
from fusec.runtime.cache import default_cache
from fusec.ir.module import entry_function
from fusec.tools.runner import random_inputs

for path in sys.argv[1:]:
    compiled = fusec.compile(path, target="cpu")
    args = random_inputs(entry_function(compiled.module), 0)
    outs = compiled(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for o, r in zip(outs, fusec.reference(path)(*args)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4)
cache = default_cache()
dispatchers = [getattr(m, n) for m in cache._modules.values() for n in dir(m)
               if hasattr(getattr(m, n), "stats")]
print(json.dumps({
    "misses": sum(sum(d.stats.cache_misses.values()) for d in dispatchers),
    "written": cache.stats["module_files_written"],
    "corrupt": cache.stats["corrupt_entries"],
}))
"""


def _spawn(cache: Path, graphs: list[Path], **popen) -> subprocess.Popen:
    env = dict(os.environ, FUSEC_CACHE_DIR=str(cache))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *map(str, graphs)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _write_graphs(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"g{i}.mlir"
        path.write_text(_graph(4 + i, 8 + 8 * (i % 2), act=("gelu", "relu", "tanh")[i % 3]))
        paths.append(path)
    return paths


def _cache_is_complete(cache: Path, graphs: list[Path]) -> None:
    """A fresh process loads every graph from ``cache``: nothing compiled, nothing rejected."""
    fresh = _result(_spawn(cache, graphs))
    assert fresh == {"misses": 0, "written": 0, "corrupt": 0}, fresh


@pytest.mark.slow  # processes of their own
def test_processes_compiling_into_one_folder_at_once(tmp_path):
    graphs = _write_graphs(tmp_path / "graphs", 3)
    cache = tmp_path / "cache"
    orders = [graphs, graphs[::-1], graphs[1:] + graphs[:1]]
    procs = [_spawn(cache, order) for order in orders]
    results = [_result(p) for p in procs]
    assert all(r["corrupt"] == 0 for r in results), results
    _cache_is_complete(cache, graphs)


@pytest.mark.slow  # processes of their own
def test_a_process_killed_while_writing_leaves_no_broken_entry(tmp_path):
    graphs = _write_graphs(tmp_path / "graphs", 4)
    cache = tmp_path / "cache"
    rng = np.random.default_rng(0)
    for round_ in range(4):  # kill at different moments of compiling and writing
        proc = _spawn(cache, graphs[round_ % 2 :], start_new_session=True)
        time.sleep(float(rng.uniform(1.0, 4.0)))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    _result(_spawn(cache, graphs))  # completes the cache: must find nothing broken
    _cache_is_complete(cache, graphs)


BLOB_CHILD = r"""
import sys, time
from fusec.runtime.cache import KernelCache
from fusec.targets.cpu import affinity

def build():
    time.sleep(float(sys.argv[2]))
    return b"x" * 1000000

KernelCache(sys.argv[1]).get_or_build("slow", build)
"""


@pytest.mark.slow  # processes of their own
def test_a_process_killed_while_building_a_blob(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", BLOB_CHILD, str(tmp_path), "30"])
    time.sleep(3.0)  # holding the per-key lock, building
    proc.kill()
    proc.wait()
    started = time.monotonic()
    cache = KernelCache(tmp_path)
    assert cache.get_or_build("slow", lambda: b"rebuilt") == b"rebuilt"
    assert time.monotonic() - started < 20  # the dead process's lock is gone
    assert cache.stats["corrupt_entries"] == 0


# ------------------------------------------------------------------ versions


def test_a_numba_index_of_another_numba_version_is_rebuilt(tmp_path):
    text = _graph(4, 8, act="relu")
    first = KernelCache(tmp_path)
    _check_with(first, text)
    for index in tmp_path.rglob("*.nbi"):
        body = first.signer.open(index.name, index.read_bytes())
        _, stamp, overloads = pickle.loads(body)
        index.write_bytes(first.signer.seal(index.name, pickle.dumps(("0.1.0", stamp, overloads))))
    again = KernelCache(tmp_path)
    _check_with(again, text)  # compiled again, not an error
    assert again.stats["corrupt_entries"] == 0
    import numba

    for index in tmp_path.rglob("*.nbi"):  # rewritten for this Numba
        assert pickle.loads(again.signer.open(index.name, index.read_bytes()))[0] == (
            numba.__version__
        )


def _check_with(cache: KernelCache, text: str) -> None:
    from fusec.api import run_pipeline
    from fusec.runtime.launch import Program

    module = run_pipeline(fusec.parse(text))
    program = Program(module, target="cpu", cache=cache)
    args = _inputs(text, 0)
    for out, ref in zip(program(args), fusec.reference(text)(*args), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_a_blob_in_the_old_format_is_rebuilt(tmp_path):
    old = b"FUSEC-BLOB-1\n" + b"0" * 64 + b" 3\nabc"  # the unauthenticated format before
    (tmp_path / "blobs").mkdir(parents=True)
    (tmp_path / "blobs" / "k.bin").write_bytes(old)
    cache = KernelCache(tmp_path)
    assert cache.get_or_build("k", lambda: b"new") == b"new"
    assert cache.stats["corrupt_entries"] == 1


@pytest.mark.parametrize("field", ["format", "fusec"])
def test_a_trace_of_another_version_is_retraced(tmp_path, monkeypatch, field):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    x = np.ones((2, 3), np.float32)

    def double(x):
        return x * 2.0

    fusec.fuse(double, target="reference")(x)
    (entry,) = (tmp_path / "traces").glob("*.json")
    signer, name = KernelCache(tmp_path).signer, f"traces/{entry.name}"
    record = json.loads(signer.open(name, entry.read_bytes()))
    record[field] = 0 if field == "format" else "0.0.0+old"
    entry.write_bytes(signer.seal(name, json.dumps(record).encode()))
    again = fusec.fuse(double, target="reference")
    np.testing.assert_array_equal(again(x), x * 2)
    assert again.trace_count == 1
    assert json.loads(signer.open(name, entry.read_bytes()))[field] != record[field]
