"""The token-id exports of ``tests/frontend/onnx/models`` (``bert.ids``, ``gpt2.ids``,
``llama.ids``; both exporters) and their inputs, shared by the cpu tests
(``test_token_exports.py``) and the GPU ones (``tests/targets/cuda/test_token_exports_gpu.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

MODELS = Path(__file__).parent / "models"
MANIFEST = json.loads((MODELS / "manifest.json").read_text())
TOKEN_MODELS = MANIFEST.get("token_models", {})
LAYERS = 2  # every token-id model has 2 layers

#: (file, vocabulary size) of every token-id export
FILES = [
    (variant["file"], entry["vocab"])
    for entry in TOKEN_MODELS.values()
    for variant in entry["files"].values()
]
SHAPES = [(3, 9), (2, 16)]  # (batch, sequence): two specializations


def token_feeds(rng: np.random.Generator, vocab: int, batch: int, seq: int) -> dict:
    """Fresh random ids; a mask whose rows have different valid lengths: row 0 is
    whole, the others end in padding, except row 2, padded at the start."""
    ids = rng.integers(0, vocab, size=(batch, seq)).astype(np.int64)
    lengths = rng.permutation(np.arange(1, seq))[:batch]
    lengths[0] = seq
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    if batch > 2:
        mask[2] = mask[2][::-1]  # left padding: the valid tokens at the end
    return {"input_ids": ids, "attention_mask": mask}


def run_onnxruntime(path: Path, feeds: dict) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def model_path(file: str) -> Path:
    path = MODELS / file
    if not path.exists():
        pytest.skip(f"{path} is missing (regenerate: tests/frontend/onnx/models/export_models.py)")
    return path
