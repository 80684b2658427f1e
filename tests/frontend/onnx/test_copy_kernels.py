"""Copy kernels of the exported transformers on the cuda target (issue 28).

The tiny BERT and GPT-2 exports of ``tests/frontend/onnx/models`` (2 layers each) compiled for
cuda without a GPU (``executable=False``: the kernels are generated, nothing runs).
Per layer, attention needs one copy per head tensor (Q, K, V split into heads, the
slice of a fused QKV projection in the same kernel) and one for the head merge: 4.
Before the injective fusion stage and the view canonicalisation, GPT-2 had 7 (the
slices apart from their head splits) and the dynamo exports 2 more (K transposed for
``k.transpose(-1, -2)`` and back). Each copy must be a vectorised Numba copy kernel,
never a PyTorch fallback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fusec
from fusec.api import import_onnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MODELS = Path(__file__).parent / "models"
LAYERS = 2

#: Copy kernels per model file: 4 per layer; BERT's pooler adds its class-token slice.
COPIES = {
    "bert.torchscript.onnx": 4 * LAYERS + 1,
    "bert.dynamo.onnx": 4 * LAYERS + 1,
    "bert.torchscript-opset14.onnx": 4 * LAYERS + 1,
    "bert.dynamo-opset18.onnx": 4 * LAYERS + 1,
    "gpt2.torchscript.onnx": 4 * LAYERS,
    "gpt2.dynamo.onnx": 4 * LAYERS,
    "gpt2.torchscript-opset14.onnx": 4 * LAYERS,
}

#: The files the default lane compiles (one of each family, the dynamo exports: they
#: carry the K round trip); the others run in the slow lane.
DEFAULT_LANE = {"bert.dynamo.onnx", "gpt2.dynamo.onnx"}


@pytest.mark.parametrize(
    "file",
    [pytest.param(f, marks=() if f in DEFAULT_LANE else pytest.mark.slow) for f in COPIES],
    ids=lambda f: f.removesuffix(".onnx"),
)
def test_copy_kernels_per_layer(file: str) -> None:
    path = MODELS / file
    if not path.exists():
        pytest.skip(f"{path} is missing (regenerate: tests/frontend/onnx/models/export_models.py)")
    module = import_onnx(path, input_shapes={"inputs_embeds": (2, 16, 64)}).module
    kernels = fusec.compile(module, target="cuda", executable=False).kernels
    copies = [k for k in kernels if k.kind == "copy"]
    assert len(copies) == COPIES[file], [k.kind for k in kernels]
    for kernel in copies:
        assert "FALLBACK" not in kernel.source, kernel.source[:600]
        path_line = re.search(r"path: (.*?) \(", kernel.source)
        assert path_line and path_line.group(1).startswith("vectorised"), kernel.source[:600]
