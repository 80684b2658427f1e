"""The program cache (``fusec.targets.cpu.program_cache``, ``fusec.compile_onnx``).

* A hit gives the miss's outputs bit for bit (and the reference's), with no ONNX
  import, no pass and no code generation: a ``CachedCompiledModule``.
* Another model (weights), input shape or option misses; so does another fusec (its
  entry replaces the stale one); ``FUSEC_PROGRAM_CACHE=0`` neither reads nor writes.
* A corrupt entry (its constants or its sealed plan) is ignored, compiled again and
  rewritten: never a wrong program.
* A new process that hits does not import onnx at all.

One small ONNX model (a matmul against constant weights wide enough for the cpu
target to pack them into its GEMM strips: a laid-out constant; bias, relu, a
reshape); the kernels compile once for the module, in one cache folder.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec.api import CachedCompiledModule
from fusec.errors import FusecError
from fusec.runtime.cache import default_cache
from fusec.targets.cpu import program_cache

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SHAPE = [1, 8, 192]


def write_model(path: Path, seed: int = 0) -> Path:
    """The test model, its constants drawn from ``seed``; a dynamic batch dimension."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((192, 192)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(192).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([-1, 1536], np.int64), "s"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Reshape", ["r", "s"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, 192])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fusec-cache")


@pytest.fixture
def model(cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The model's file; the module's cache folder with no program entry in it."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(cache_dir))
    monkeypatch.delenv(program_cache.ENV_VAR, raising=False)
    for entry in (cache_dir / program_cache.FOLDER).glob("*"):
        entry.unlink()
    return write_model(tmp_path / "m.onnx")


def entries(model: Path) -> list[str]:
    """The program cache's files (``model`` names the test's folder setting)."""
    return sorted(p.name for p in (default_cache().root / program_cache.FOLDER).glob("*"))


def run(compiled: fusec.CompiledModule, x: np.ndarray) -> np.ndarray:
    """One call into NaN-filled outputs (a value nothing wrote stays NaN)."""

    def poisoned(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.full(shape, np.nan, dtype)

    (y,) = compiled.program([x], alloc=poisoned)
    return y


def compile_model(path: Path, shape: list[int] = SHAPE, **options) -> fusec.CompiledModule:
    compiled = fusec.compile_onnx(path, input_shapes={"x": shape}, target="cpu", **options)
    assert isinstance(compiled, fusec.CompiledModule)
    return compiled


def test_hit_is_bit_identical_to_miss_and_reference(model: Path) -> None:
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    miss = compile_model(model)
    assert not isinstance(miss, CachedCompiledModule)
    assert [name for name in entries(model) if name.endswith(".plan")]
    hit = compile_model(model)
    assert isinstance(hit, CachedCompiledModule)
    assert [k.source for k in hit.kernels] == [k.source for k in miss.kernels]
    assert any(k.prepared_inputs for k in hit.kernels)  # a laid-out constant was stored
    y_miss, y_hit = run(miss, x), run(hit, x)
    assert not np.isnan(y_hit).any()
    np.testing.assert_array_equal(y_hit, y_miss)
    ref = fusec.reference(fusec.from_onnx(model, input_shapes={"x": SHAPE}))(x)
    assert np.linalg.norm(y_hit - ref) / np.linalg.norm(ref) < 1e-4
    assert "ai.fused" in hit.ir  # the IR is compiled again when asked


def test_other_model_shape_or_option_misses(model: Path, tmp_path: Path) -> None:
    compile_model(model)
    other = write_model(tmp_path / "other.onnx", seed=5)
    assert not isinstance(compile_model(other), CachedCompiledModule)
    assert not isinstance(compile_model(model, [2, 8, 192]), CachedCompiledModule)
    assert not isinstance(compile_model(model, pipeline="fusec-default"), CachedCompiledModule)
    assert len([n for n in entries(model) if n.endswith(".plan")]) == 4
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    ref = fusec.reference(fusec.from_onnx(other, input_shapes={"x": SHAPE}))(x)
    hit = compile_model(other)
    assert isinstance(hit, CachedCompiledModule)
    y = run(hit, x)
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-4


def test_turned_off(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(program_cache.ENV_VAR, "0")
    compile_model(model)
    assert not isinstance(compile_model(model), CachedCompiledModule)
    assert entries(model) == []


def test_other_fusec_misses_and_replaces_the_stale_entry(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compile_model(model)
    before = entries(model)
    monkeypatch.setattr(program_cache, "tree_digest", lambda: "an edited fusec")
    assert not isinstance(compile_model(model), CachedCompiledModule)
    after = entries(model)
    assert len(after) == 2 and not set(after) & set(before)  # one copy of the constants
    assert isinstance(compile_model(model), CachedCompiledModule)


@pytest.mark.parametrize("part", [".npy", ".plan"])
def test_corrupt_entry_is_rebuilt(model: Path, part: str) -> None:
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    expected = run(compile_model(model), x)
    (name,) = [n for n in entries(model) if n.endswith(part)]
    path = default_cache().root / program_cache.FOLDER / name
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # one bit of a constant, or of the sealed record
    path.write_bytes(bytes(data))
    rebuilt = compile_model(model)
    assert not isinstance(rebuilt, CachedCompiledModule)
    np.testing.assert_array_equal(run(rebuilt, x), expected)
    again = compile_model(model)
    assert isinstance(again, CachedCompiledModule)  # rewritten by the rebuild
    np.testing.assert_array_equal(run(again, x), expected)


def test_hit_refuses_wrong_arguments(model: Path) -> None:
    compile_model(model)
    hit = compile_model(model)
    with pytest.raises(FusecError, match=r"argument 0: expected a float32 array of shape"):
        hit(np.zeros(SHAPE, np.float64))


def test_missing_file_is_a_diagnostic(tmp_path: Path) -> None:
    with pytest.raises(FusecError, match=r"nope\.onnx: error: no such file"):
        fusec.compile_onnx(tmp_path / "nope.onnx", target="cpu")


@pytest.mark.slow
def test_new_process_hit_imports_no_onnx(model: Path, cache_dir: Path) -> None:
    compile_model(model)
    script = textwrap.dedent(f"""\
        import sys
        import numpy as np
        import fusec
        compiled = fusec.compile_onnx({str(model)!r}, input_shapes={{"x": {SHAPE}}},
                                      target="cpu")
        x = np.random.default_rng(4).standard_normal({SHAPE}).astype(np.float32)
        y = compiled(x)
        print(type(compiled).__name__, "onnx" in sys.modules, np.isnan(y).any())
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split() == ["CachedCompiledModule", "False", "False"]
