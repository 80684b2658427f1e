"""Token-id exports of BERT, GPT-2 and a Llama-style decoder on the GPU (issue 29): each
file of ``tests/frontend/onnx/models/*.ids.*.onnx`` (both exporters; float32 weights) imported once
with its dynamic batch and sequence, compiled once for cuda and run at two shapes on torch
tensors (int64 ids and a padded int64 mask on the GPU); every output must match
onnxruntime on the CPU at float32 tolerance (``tests/numerics.py``), the padded positions
included, and the same specialization run again with NaN-poisoned outputs (numpy in and
out) must match too. The embedding lookup and the run-time mask arithmetic run in their
own integer and bool types; the attention with a padding mask is one ``ai.attention`` per
layer (through PyTorch: the flash kernel takes no mask but a causal one)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from numerics import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "frontend" / "onnx"))
from token_exports import (  # noqa: E402
    FILES,
    LAYERS,
    SHAPES,
    model_path,
    run_onnxruntime,
    token_feeds,
)

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def device():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    return torch.device("cuda")


def _check(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    assert len(got) == len(want), what
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}, output {index}"
        result = compare(g, w)
        assert result.passed, f"{what}, output {index}: {result}"


@pytest.mark.parametrize(("file", "vocab"), FILES, ids=[f.removesuffix(".onnx") for f, _ in FILES])
def test_token_export_on_cuda_matches_onnxruntime(device, file, vocab) -> None:
    import fusec

    path = model_path(file)
    compiled = fusec.compile(fusec.from_onnx(path), target="cuda")
    rng = np.random.default_rng(31)
    for batch, seq in SHAPES:
        feeds = token_feeds(rng, vocab, batch, seq)
        want = run_onnxruntime(path, feeds)
        args = [torch.from_numpy(a).to(device) for a in feeds.values()]
        out = compiled(*args)
        torch.cuda.synchronize()
        outs = list(out) if isinstance(out, tuple | list) else [out]
        assert all(isinstance(t, torch.Tensor) and t.is_cuda for t in outs)
        got = [t.cpu().numpy() for t in outs]
        _check(got, want, f"{file} on cuda, {batch}x{seq} (torch tensors)")
        spec = compiled.specialize((batch, seq), (batch, seq))
        poisoned = spec.program(list(feeds.values()), poison=True)  # numpy in and out
        _check(list(poisoned), want, f"{file} on cuda, {batch}x{seq} (poisoned)")
        kinds = Counter(k.kind for k in spec.kernels)
        assert kinds["attention"] == LAYERS, kinds
    assert len(compiled.specializations) == len(SHAPES)
