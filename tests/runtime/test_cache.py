"""The kernel cache: cross-process reuse, corrupt entries, concurrent writers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cpu_check import poison, wrap_group

from fusec.runtime.cache import KernelCache, cache_root
from fusec.runtime.launch import Program

EXAMPLE = Path(__file__).parents[2] / "examples" / "elementwise_chain.mlir"

# Compile and run the example on the cpu in a fresh process; print what was compiled.
CHILD = r"""
import json, sys
import numpy as np
import fusec
from fusec.runtime.cache import default_cache
from fusec.ir.module import entry_function
from fusec.tools.runner import check, random_inputs

compiled = fusec.compile(sys.argv[1], target="cpu")
fn = entry_function(compiled.module, compiled.entry)
inputs = random_inputs(fn, 0)
out = compiled(*inputs)
ok = all(c.passed for c in check(fusec.parse(sys.argv[1]), compiled, inputs, [out]))
cache = default_cache()
dispatchers = [getattr(m, n) for m in cache._modules.values() for n in dir(m)
               if hasattr(getattr(m, n), "stats")]
print(json.dumps({
    "ok": ok,
    "hits": sum(sum(d.stats.cache_hits.values()) for d in dispatchers),
    "misses": sum(sum(d.stats.cache_misses.values()) for d in dispatchers),
    "written": cache.stats["module_files_written"],
    "root": str(cache.root),
}))
"""


def _spawn(cache_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, FUSEC_CACHE_DIR=str(cache_dir))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(EXAMPLE)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # processes of their own
def test_second_process_compiles_nothing(tmp_path):
    first = _result(_spawn(tmp_path))
    assert first["ok"] and first["root"] == str(tmp_path)
    assert first["misses"] > 0 and first["written"] > 0
    second = _result(_spawn(tmp_path))
    assert second["ok"]
    assert second["misses"] == 0 and second["hits"] >= 1
    assert second["written"] == 0


@pytest.mark.slow  # processes of their own
def test_two_processes_compiling_at_once(tmp_path):
    procs = [_spawn(tmp_path), _spawn(tmp_path)]
    results = [_result(p) for p in procs]
    assert all(r["ok"] for r in results)
    modules = list((tmp_path / "cpu").glob("k_*.py"))  # the kernel's, affinity's probe
    assert sum(r["written"] for r in results) == len(modules)  # each published once
    third = _result(_spawn(tmp_path))
    assert third["ok"] and third["misses"] == 0


def test_cache_root_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "a"))
    assert cache_root() == tmp_path / "a"
    monkeypatch.delenv("FUSEC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "fusec"


# ----------------------------------------------------------- corrupt entries

TEXT = """
func.func @f(%x: tensor<8x16xf32>, %y: tensor<16xf32>) -> tensor<8x16xf32> {
  %a = ai.mul %x, %y : tensor<8x16xf32> * tensor<16xf32>
  %b = ai.sigmoid %a : tensor<8x16xf32>
  return %b : tensor<8x16xf32>
}"""


def _run(cache: KernelCache) -> np.ndarray:
    program = Program(wrap_group(TEXT, "pointwise"), target="cpu", cache=cache)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.standard_normal(16).astype(np.float32)
    (out,) = program([x, y], alloc=poison)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-(x * y))), rtol=1e-5)
    return out


def _files(root: Path, pattern: str) -> list[Path]:
    found = sorted(root.rglob(pattern))
    assert found, f"no {pattern} under {root}"
    return found


def test_corrupt_module_file_is_rebuilt(tmp_path):
    _run(KernelCache(tmp_path))
    for path in _files(tmp_path, "k_*.py"):
        path.write_text("this is not the kernel\n")
    cache = KernelCache(tmp_path)
    _run(cache)
    assert cache.stats["corrupt_entries"] == 1 and cache.stats["module_files_written"] == 1


@pytest.mark.skipif(
    bool(os.environ.get("NUMBA_CACHE_DIR")),
    reason="NUMBA_CACHE_DIR sends Numba's index/data files outside the kernel cache folder",
)
@pytest.mark.parametrize("suffix", ["nbi", "nbc"])
def test_corrupt_numba_cache_entry_is_rebuilt(tmp_path, suffix):
    _run(KernelCache(tmp_path))
    for path in _files(tmp_path, f"*.{suffix}"):
        path.write_bytes(path.read_bytes()[:40])
    cache = KernelCache(tmp_path)
    _run(cache)
    assert cache.stats["corrupt_entries"] >= 1  # noticed (each time it is read) and rewritten
    again = KernelCache(tmp_path)
    _run(again)
    assert again.stats["corrupt_entries"] == 0


def test_blob_roundtrip_and_memory_hit(tmp_path):
    calls = []
    cache = KernelCache(tmp_path)
    assert cache.get_or_build("ptx-1", lambda: calls.append(1) or b"payload") == b"payload"
    assert cache.get_or_build("ptx-1", lambda: calls.append(1) or b"other") == b"payload"
    fresh = KernelCache(tmp_path)
    assert fresh.get_or_build("ptx-1", lambda: calls.append(1) or b"other") == b"payload"
    assert len(calls) == 1 and fresh.stats["blob_hits"] == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-3],  # truncated
        lambda b: b[:-1] + bytes([b[-1] ^ 1]),  # one bit flipped
        lambda b: b"garbage",  # not ours at all
        lambda b: b"",  # empty
    ],
)
def test_corrupt_blob_is_detected_deleted_and_rebuilt(tmp_path, damage):
    KernelCache(tmp_path).get_or_build("k", lambda: b"\x00compiled cubin\xff" * 10)
    (path,) = _files(tmp_path, "k.bin")
    path.write_bytes(damage(path.read_bytes()))
    cache = KernelCache(tmp_path)
    assert cache.get_or_build("k", lambda: b"rebuilt") == b"rebuilt"
    assert cache.stats["corrupt_entries"] == 1 and cache.stats["blob_builds"] == 1
    assert cache.signer.open("blobs/k.bin", path.read_bytes()) == b"rebuilt"


def test_a_seal_checks_the_body_the_name_and_the_key(tmp_path):
    signer = KernelCache(tmp_path).signer
    data = signer.seal("blobs/a.bin", b"abc")
    assert signer.open("blobs/a.bin", data) == b"abc"
    assert signer.open("blobs/a.bin", data + b"x") is None  # longer
    assert signer.open("blobs/a.bin", data[:-1] + b"d") is None  # changed
    assert signer.open("blobs/b.bin", data) is None  # another entry's file
    other = KernelCache(tmp_path / "other").signer  # another user's key
    assert other.open("blobs/a.bin", data) is None


BLOB_CHILD = r"""
import sys, time
from pathlib import Path
from fusec.runtime.cache import KernelCache

def build():
    with open(sys.argv[2], "a") as log:
        log.write("built\n")
    time.sleep(1.0)
    return b"x" * 100000

sys.stdout.write(str(len(KernelCache(sys.argv[1]).get_or_build("shared", build))))
"""


@pytest.mark.slow  # processes of their own
def test_two_processes_build_a_blob_once(tmp_path):
    log = tmp_path / "builds.log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BLOB_CHILD, str(tmp_path / "c"), str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out == "100000"
    assert log.read_text() == "built\n"
