"""The cpu "experts" template (issue 31): ``ai.moe_experts`` against the reference and
the definition, poisoned outputs, every routing case (experts with no token, negative
indices, tiles split inside an expert, k = 1..3, i32 indices, f16), its error, and the
Mixtral block exported by both exporters against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cpu_check import poison
from experts_cases import dense_moe, moe_inputs, moe_text
from numerics import assert_close

import fusec
from fusec.api import import_onnx, parse, run_pipeline
from fusec.errors import FusecError
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import Program
from fusec.runtime.reference import run_reference
from fusec.targets.cpu import experts

MODELS = Path(__file__).parents[2] / "frontend" / "onnx" / "models"


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def _run(text: str, args, cache) -> tuple[np.ndarray, Program]:
    module = parse(text)
    run_pipeline(module)
    program = Program(module, target="cpu", cache=cache)
    (out,) = program(args, alloc=poison)
    assert [k.kind for k in program.kernels] == ["experts"]
    return out, program


@pytest.mark.parametrize(
    ("tokens", "width", "hidden", "count", "k", "dtype", "index"),
    [
        (9, 16, 12, 5, 2, "f32", "i64"),
        (1, 8, 4, 3, 1, "f32", "i32"),
        (40, 24, 20, 4, 3, "f32", "i64"),
        (17, 32, 16, 8, 2, "f16", "i64"),
    ],
)
def test_experts_match_the_reference(tokens, width, hidden, count, k, dtype, index, kernel_cache):
    text = moe_text(tokens, width, hidden, count, k, dtype, index)
    args = moe_inputs(tokens, width, hidden, count, k, dtype, index, seed=tokens)
    out, _ = _run(text, args, kernel_cache)
    (ref,) = run_reference(parse(text), args, precision="float64")
    assert_close(out, ref, what="moe_experts")
    want = dense_moe(*args)
    bound = 1e-2 if dtype == "f16" else 1e-4
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < bound


def test_tiles_split_an_expert_with_many_tokens(kernel_cache, monkeypatch):
    """More pairs of one expert than a tile holds: several tiles of that expert."""
    monkeypatch.setattr(experts, "MIN_ROWS", 8)
    monkeypatch.setattr(experts, "MAX_ROWS", 8)
    tokens, width, hidden, count, k = 50, 16, 8, 3, 2
    text = moe_text(tokens, width, hidden, count, k)
    args = moe_inputs(tokens, width, hidden, count, k, seed=4)
    out, program = _run(text, args, kernel_cache)
    assert "tiles of <= 8 pairs" in program.kernels[0].source
    want = dense_moe(*args)
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 1e-4


def test_a_tile_holds_a_busy_experts_pairs():
    # twice the average share (4096 pairs over 8 experts: 1024), within the bounds
    assert experts.tile_rows(4096, 8, 1024, 2816) == 1024
    assert experts.tile_rows(16, 8, 1024, 2816) == experts.MIN_ROWS
    assert experts.tile_rows(1 << 20, 8, 64, 64) == experts.MAX_ROWS
    # and no more rows than the workspace holds (Mixtral's D 4096, F 14336)
    rows = experts.tile_rows(8192, 8, 4096, 14336)
    assert rows * (2 * 4096 + 2 * 14336) <= experts.WORKSPACE_FLOATS and rows % 8 == 0


@pytest.mark.parametrize("hidden", [12, 40])
def test_constant_weights_are_packed_once(hidden, kernel_cache):
    """A model's expert weights (constants) reach the kernel packed for gemm_packed, each
    expert's B^T in strips (F and 2F not whole strips here: the window strip)."""
    import fusec.ops as fo

    tokens, width, count, k = 21, 24, 5, 2
    x, weights, picks, gate_up, down = moe_inputs(tokens, width, hidden, count, k, seed=hidden)

    @fusec.fuse(target="cpu")
    def layer(x, weights, picks):
        return fo.moe_experts(x, weights, picks, gate_up, down)

    got = layer(x, weights, picks)
    (kernel,) = [k for k in layer.compiled(x, weights, picks).kernels if k.kind == "experts"]
    assert "gemm_packed" in kernel.source
    assert [layout for _, layout in kernel.prepared_inputs] == ["expert_strips_t"] * 2
    want = dense_moe(x, weights, picks, gate_up, down)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5


def test_an_expert_index_out_of_range_stops_the_launch(kernel_cache):
    text = moe_text(4, 8, 4, 3, 2)
    args = moe_inputs(4, 8, 4, 3, 2)
    args[2][2, 1] = 3
    with pytest.raises(FusecError, match="expert index 3 is out of range for 3 experts"):
        _run(text, args, kernel_cache)


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_mixtral_block_is_one_experts_kernel_and_matches_onnxruntime(exporter):
    """transformers' batched_mm experts: every expert's weights gathered per (token,
    slot) in the graph; after recognition one experts kernel reads each once."""
    onnxruntime = pytest.importorskip("onnxruntime")
    path = MODELS / f"mixtral_moe.{exporter}.onnx"
    shape = (3, 5, 32)
    result = import_onnx(path, input_shapes={"hidden_states": shape})
    assert result.recognized["moe_experts"] == 1
    compiled = fusec.compile(result.module, target="cpu")
    (kernel,) = [k for k in compiled.kernels if k.kind == "experts"]
    assert "gemm_packed" in kernel.source  # the model's weights, packed once
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    (got,) = compiled._runner([x], alloc=poison)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"hidden_states": x})
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
