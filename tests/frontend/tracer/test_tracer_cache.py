"""The signature cache of ``@fusec.fuse``: in memory per signature, and on disk.

Tracing is counted by ``trace_count``; these tests run on the reference
target so that they measure tracing, not kernel compilation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec import ops
from fusec.runtime.cache import default_cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def arr(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)


def relu_mul(x, y):
    return ops.relu(x * y)


def test_same_shapes_reuse_the_trace():
    f = fusec.fuse(relu_mul, target="reference", disk_cache=False)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, y = rng.random((2, 3), np.float32) - 0.5, rng.random(3, np.float32) - 0.5
        np.testing.assert_array_equal(f(x, y), np.maximum(x * y, 0))
    assert f.trace_count == 1


def test_new_shapes_and_dtypes_retrace_old_ones_do_not():
    f = fusec.fuse(relu_mul, target="reference", disk_cache=False)
    f(arr(2, 3), arr(3))
    f(arr(4, 3), arr(3))
    assert f.trace_count == 2
    f(arr(4, 3, dtype=np.float16), arr(3, dtype=np.float16))
    assert f.trace_count == 3
    f(arr(2, 3), arr(3))
    f(arr(4, 3, dtype=np.float16), arr(3, dtype=np.float16))
    assert f.trace_count == 3


def test_positional_and_keyword_calls_share_a_trace():
    f = fusec.fuse(relu_mul, target="reference", disk_cache=False)
    x, y = arr(2, 3), arr(2, 3)
    expected = np.maximum(x * y, 0)
    for result in (f(x, y), f(x, y=y), f(y=y, x=x), f(x=x, y=y)):
        np.testing.assert_array_equal(result, expected)
    assert f.trace_count == 1


def test_python_values_are_part_of_the_signature():
    f = fusec.fuse(lambda x, k: x * k, target="reference", disk_cache=False)
    x = arr(3)
    np.testing.assert_allclose(f(x, 2.0), x * 2)
    np.testing.assert_allclose(f(x, 2.0), x * 2)
    np.testing.assert_allclose(f(x, 3.0), x * 3)
    assert f.trace_count == 2


def test_ir_kernels_and_calls_share_the_cache():
    f = fusec.fuse(relu_mul, target="reference", disk_cache=False)
    x, y = arr(2, 3), arr(3)
    f.ir(x, y)
    f.fused_ir(x, y)
    f.kernels(x, y)
    f(x, y)
    assert f.trace_count == 1


def test_a_new_wrapper_reads_the_trace_from_disk(cache_dir):
    x, y = arr(2, 3), arr(3)
    first = fusec.fuse(relu_mul, target="reference")
    expected = first(x, y)
    assert first.trace_count == 1
    assert len(list((cache_dir / "traces").glob("*.json"))) == 1
    second = fusec.fuse(relu_mul, target="reference")
    np.testing.assert_array_equal(second(x, y), expected)
    assert second.trace_count == 0
    assert second.ir(x, y) == first.ir(x, y)


def test_disk_cache_can_be_turned_off(cache_dir):
    fusec.fuse(relu_mul, target="reference", disk_cache=False)(arr(2), arr(2))
    assert not (cache_dir / "traces").exists()


def test_a_corrupt_cache_entry_is_retraced(cache_dir):
    x, y = arr(2, 3), arr(3)
    fusec.fuse(relu_mul, target="reference")(x, y)
    (entry,) = (cache_dir / "traces").glob("*.json")
    entry.write_text('{"format": 1, "fusec": "x", "ir": "garbage')
    again = fusec.fuse(relu_mul, target="reference")
    np.testing.assert_array_equal(again(x, y), np.maximum(x * y, 0))
    assert again.trace_count == 1
    record = default_cache().read_entry(f"traces/{entry.name}")  # rewritten, sealed
    assert record is not None and json.loads(record)["ir"].startswith("builtin.module")


def test_functions_that_cannot_be_fingerprinted_stay_in_memory(cache_dir):
    class Config:  # a user object: its identity means nothing to another process
        scale = 2.0

    config = Config()
    f = fusec.fuse(lambda x: x * config.scale, target="reference")
    np.testing.assert_allclose(f(arr(3)), arr(3) * 2)
    assert f.trace_count == 1
    assert not (cache_dir / "traces").exists()


SCRIPT = """
import numpy as np
import fusec
from fusec import ops

W = np.linspace(-1.0, 1.0, 12).reshape(4, 3) * {scale}


def act(v):
    return ops.{act}(v)


@fusec.fuse(target="reference")
def layer(x, b):
    return act(x @ W + b)


x = np.linspace(-2.0, 2.0, 8, dtype=np.float32).reshape(2, 4)
b = np.linspace(0.5, 1.5, 3, dtype=np.float32)
y = layer(x, b)
z = x.astype(np.float64) @ W + b
expected = np.tanh(z) if "{act}" == "tanh" else 1 / (1 + np.exp(-z))
assert np.linalg.norm(y - expected) / np.linalg.norm(expected) < 1e-4
print(layer.trace_count)
"""


def run_script(path: Path, cache_dir: Path, scale: float, act: str = "tanh") -> int:
    path.write_text(textwrap.dedent(SCRIPT.format(scale=scale, act=act)))
    env = dict(os.environ, FUSEC_CACHE_DIR=str(cache_dir))
    done = subprocess.run(
        [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_no_retrace_across_processes_with_a_warm_disk_cache(tmp_path, cache_dir):
    script = tmp_path / "user_model.py"
    assert run_script(script, cache_dir, 1.0) == 1
    assert run_script(script, cache_dir, 1.0) == 0
    # a changed captured constant changes the fingerprint: traced again, not reused
    assert run_script(script, cache_dir, 0.5) == 1
    assert run_script(script, cache_dir, 0.5) == 0
    # so does a changed helper function that the traced function calls
    assert run_script(script, cache_dir, 0.5, act="sigmoid") == 1
    assert run_script(script, cache_dir, 0.5, act="sigmoid") == 0
    assert len(list((cache_dir / "traces").glob("*.json"))) == 3
