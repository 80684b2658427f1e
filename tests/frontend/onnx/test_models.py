"""Real models exported from PyTorch: import, fuse, run, match onnxruntime.

Every model of ``tests/frontend/onnx/models`` (MobileNetV2, ResNet-18, a 2-layer BERT
encoder, a 2-layer GPT-2; both PyTorch exporters, older opsets too) is
imported with fixed input shapes, compiled with the default pipeline and run
on fresh random inputs with NaN-poisoned outputs; every output must match
onnxruntime elementwise (``tests/numerics.py``: f32 rtol 1e-4, atol 1e-4 of
the output's RMS) and in relative L2 error (< 1e-4). The kernel count after fusion is pinned
(ONNX nodes -> fusec kernels, printed with ``-s``). A model file that is
missing is a skip that names it (regenerate it with ``export_models.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from numerics import compare

import fusec
from fusec.api import import_onnx
from fusec.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MODELS = Path(__file__).parent / "models"
MANIFEST = json.loads((MODELS / "manifest.json").read_text())

#: The input shape each family runs at here (batch 2: the batch dims are exercised).
SHAPES = {"x": (2, 3, 64, 64), "inputs_embeds": (2, 16, 64), "hidden_states": (2, 16, 32)}

#: Kernels launched per model file after fusion (a view is none).
KERNELS = {
    # 52 convs (ReLU6 in their epilogues; two 1x1 expansions on 32x32 and 16x16 planes in
    # the depthwise convs reading them: cpu-expand-depthwise), mean, linear
    "mobilenet_v2.torchscript.onnx": 52,
    "mobilenet_v2.dynamo.onnx": 52,
    "resnet18.torchscript.onnx": 23,  # 20 convs (BN folded; add, ReLU fused), pool, mean, fc
    "resnet18.dynamo.onnx": 23,
    # per layer: Q, K and V as one GEMM (combine-projections), attention (both products,
    # softmax), out-proj, 2 FFN matmuls, 2 LayerNorms; the embeddings' sum; the pooler
    "bert.torchscript.onnx": 17,
    "bert.dynamo.onnx": 17,
    "bert.torchscript-opset14.onnx": 17,  # GELU and LayerNorm recognised from Erf, ReduceMean
    "bert.dynamo-opset18.onnx": 17,
    # per layer: QKV, attention, out-proj, 2 FFN matmuls (LayerNorms in their prologues)
    "gpt2.torchscript.onnx": 12,
    "gpt2.dynamo.onnx": 12,
    "gpt2.torchscript-opset14.onnx": 12,
    # the router GEMM, its softmax, top-2 as selection rounds (reductions, arg-maxes, masks)
    # and the weights' normalisation; then one ai.moe_experts (recognised from the
    # per-token gathered expert weights of transformers' batched_mm experts)
    "mixtral_moe.torchscript.onnx": 14,
    "mixtral_moe.dynamo.onnx": 15,  # + the dynamo exporter's index range check
}

CASES = [
    (name, entry["input"], files["file"])
    for name, entry in MANIFEST["models"].items()
    for files in entry["files"].values()
]


def _path(file: str) -> Path:
    path = MODELS / file
    if not path.exists():
        pytest.skip(f"{path} is missing (regenerate: tests/frontend/onnx/models/export_models.py)")
    return path


def test_every_model_file_has_a_pinned_kernel_count():
    assert sorted(KERNELS) == sorted(file for _, _, file in CASES)


#: The model the default lane compiles (a transformer: 30 s on a cold kernel cache);
#: every other file's tests run in the slow lane (resnet18: 80 s).
DEFAULT_LANE = {"gpt2.torchscript.onnx"}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(case, marks=() if case[2] in DEFAULT_LANE else pytest.mark.slow)
        for case in CASES
    ],
    ids=lambda case: case[2].removesuffix(".onnx"),
)
def model(request):
    _, input_name, file = request.param
    path = _path(file)
    shape = SHAPES[input_name]
    result = import_onnx(path, input_shapes={input_name: shape})
    compiled = fusec.compile(result.module, target="cpu")
    return path, input_name, shape, result, compiled


def _poison(shape, dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def _onnxruntime(path: Path, feeds: dict) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _check(got, want) -> float:
    """Elementwise and L2 comparison of every output; the largest relative L2 error."""
    worst = 0.0
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype
        result = compare(g, w)
        assert result.passed and result.rel_l2 < 1e-4, f"output {index}: {result}"
        worst = max(worst, result.rel_l2)
    return worst


def test_cpu_matches_onnxruntime(model):
    path, input_name, shape, result, compiled = model
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    got = compiled._runner([x], alloc=_poison)
    error = _check(got, _onnxruntime(path, {input_name: x}))
    print(f"\n{path.name}: {result.nodes} nodes -> {len(compiled.kernels)} kernels, "
          f"rel err {error:.1e}")  # fmt: skip


def test_kernel_count_after_fusion(model):
    path, _, _, _, compiled = model
    assert len(compiled.kernels) == KERNELS[path.name], [k.kind for k in compiled.kernels]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda case: case[2].removesuffix(".onnx"))
def test_cuda_matches_onnxruntime(case):
    from fusec.api import resolve_target

    if resolve_target("auto") != "cuda":
        pytest.skip("needs a usable CUDA GPU")
    _, input_name, file = case
    path = _path(file)
    shape = SHAPES[input_name]
    compiled = fusec.compile(fusec.from_onnx(path, input_shapes={input_name: shape}), target="cuda")
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    got = compiled._runner([x], poison=True)
    _check(got, _onnxruntime(path, {input_name: x}))


# ------------------------------------------------------------------ the command line


def test_import_reports_what_was_folded(capsys):
    path = _path("bert.torchscript.onnx")
    assert main(["import", str(path), "--input-shape", "inputs_embeds=1x16x64"]) == 0
    captured = capsys.readouterr()
    assert "ai.layernorm" in captured.out and "ai.softmax" in captured.out
    assert captured.err.startswith(f"{path}: 311 nodes, 237 evaluated at import")
    assert "Shape 19" in captured.err and "Constant 104" in captured.err
    assert f"{path}: recognize-patterns (in fusec-default) rewrites: " in captured.err


def test_import_reports_what_is_recognised(capsys):
    path = _path("bert.torchscript-opset14.onnx")
    assert main(["import", str(path), "--input-shape", "inputs_embeds=1x16x64"]) == 0
    err = capsys.readouterr().err
    assert "rewrites: attention 2, gelu (erf) 2, " in err and "layernorm 5" in err


def test_remarks_on_an_imported_model_name_the_nodes(capsys):
    path = _path("resnet18.torchscript.onnx")
    args = ["compile", str(path), "--input-shape", "x=1x3x64x64", "--target", "reference"]
    assert main([*args, "--remarks"]) == 0
    remarks = capsys.readouterr().err.splitlines()
    assert remarks and all(line.startswith(f'{path}: node "') for line in remarks)
    first = remarks[0]
    assert 'remark: ai.max_pool2d not fused with its producer ai.relu (node "/relu/Relu")' in first
