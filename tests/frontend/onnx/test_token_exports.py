"""Token-id exports of BERT, GPT-2 and a Llama-style decoder (issue 29), as users export
them: ``input_ids`` and a padded ``attention_mask`` (int64), both PyTorch exporters, dynamic
batch and sequence (``tests/frontend/onnx/models``, ``export_models.py``). Each file is imported
once (``fusec.from_onnx``: a ``DynamicModel``) and compiled once, then run at two shapes,
each specialised once; every output onnxruntime gives, padded positions included, must
match (``tests/numerics.py``), with outputs poisoned with NaN first. The masks hold
rows of different valid lengths, right padding and one left-padded row.

The run-time mask must still reach the attention recognizer: one ``ai.attention`` per
layer in every specialization. The reference target runs in the default lane for one
file (seconds), the rest and the cpu target (JIT of every kernel) in the slow lane.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from numerics import compare
from token_exports import (
    FILES,
    LAYERS,
    SHAPES,
    TOKEN_MODELS,
    model_path,
    run_onnxruntime,
    token_feeds,
)

import fusec
from fusec.frontend.onnx_dynamic import DynamicModel
from fusec.runtime.specialize import DynamicCompiledModule

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: the file whose reference run is in the default lane (the quickest, ~5 s)
DEFAULT_LANE = {"gpt2.ids.dynamo.onnx"}


def test_the_three_models_are_exported_both_ways():
    assert sorted(TOKEN_MODELS) == ["bert.ids", "gpt2.ids", "llama.ids"]
    for name, entry in TOKEN_MODELS.items():
        assert entry["inputs"] == ["input_ids", "attention_mask"]
        assert sorted(entry["files"]) == ["dynamo", "torchscript"], name


def _poison(shape, dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def _check_at_two_shapes(path: Path, vocab: int, target: str) -> DynamicCompiledModule:
    """One import and one compile; both shapes run and match onnxruntime everywhere."""
    dynamic = fusec.from_onnx(path)
    assert isinstance(dynamic, DynamicModel) and dynamic.symbols == ["batch", "sequence"]
    compiled = fusec.compile(dynamic, target=target)
    assert isinstance(compiled, DynamicCompiledModule)
    rng = np.random.default_rng(29)
    for batch, seq in SHAPES:
        feeds = token_feeds(rng, vocab, batch, seq)
        want = run_onnxruntime(path, feeds)
        called = compiled(*feeds.values())  # the call specialises for the new shapes
        called = list(called) if isinstance(called, tuple | list) else [called]
        spec = compiled.specialize((batch, seq), (batch, seq))  # the same one, compiled
        runs = [("called", called)]
        if target != "reference":  # numpy's executor makes its own outputs
            runs.append(("poisoned", spec._runner(list(feeds.values()), alloc=_poison)))
        for what, got in runs:
            assert len(got) == len(want)
            for index, (g, w) in enumerate(zip(got, want, strict=True)):
                assert g.shape == w.shape and g.dtype == w.dtype, index
                result = compare(g, w)
                where = f"{path.name} on {target}, {batch}x{seq}, output {index} ({what})"
                assert result.passed, f"{where}: {result}"
    assert [s.dims for s in compiled.specializations] == [
        {"batch": b, "sequence": s} for b, s in SHAPES
    ]
    return compiled


def _attention_count(compiled) -> int:
    return Counter(op.name for op in compiled.module.walk())["ai.attention"]


@pytest.mark.parametrize(
    ("file", "vocab"),
    [
        pytest.param(*case, marks=() if case[0] in DEFAULT_LANE else pytest.mark.slow)
        for case in FILES
    ],
    ids=[file.removesuffix(".onnx") for file, _ in FILES],
)
def test_reference_matches_onnxruntime_at_two_shapes(file, vocab):
    compiled = _check_at_two_shapes(model_path(file), vocab, "reference")
    for spec in compiled.specializations:
        assert _attention_count(spec.compiled) == LAYERS, "the run-time mask reached attention"


@pytest.mark.slow  # every kernel JIT-compiled per shape: minutes cold
@pytest.mark.parametrize(("file", "vocab"), FILES, ids=[f.removesuffix(".onnx") for f, _ in FILES])
def test_cpu_matches_onnxruntime_at_two_shapes(file, vocab):
    compiled = _check_at_two_shapes(model_path(file), vocab, "cpu")
    for spec in compiled.specializations:
        kinds = Counter(k.kind for k in spec.compiled.kernels)
        assert kinds["attention"] == LAYERS, kinds
