"""The GPU zoo through ``torch.compile(model, backend="fusec")`` on the cuda target,
without a GPU (issue 32): what the backend hands the cuda target.

Each model of ``benchmarks/models_gpu.py`` at its ``--smoke`` size in f16 goes through
Dynamo, AOTAutograd and the partitioner as on the H200; each partition is compiled for
cuda without a runtime (``executable=False``: code generation only, so the call then
falls back to eager, which is not what is checked). The backend must leave no ATen node
to eager (ViT's SDPA arrives as ``_scaled_dot_product_flash_attention_for_cpu`` here and
as the cuDNN/flash/efficient kernel on CUDA: all lower to ``ai.attention``), compile one
partition, and its program must hold no group on the PyTorch fallback: such a group turns
the program's whole-program CUDA graphs off (``CudaProgram._graphed``), so every call
ran launch by launch (the transformers' 3.1-4.7 ms against the ONNX path's 0.5-1.3 ms in
``benchmarks/results/torch-backend.md``: HF's attention mask, constants, reached the
attention through an ``ai.where`` the flash kernel could not take). Every attention must
be the flash kernel (one a layer). Needs torch, torchvision and transformers, not a GPU
nor numba-cuda; slow lane (Dynamo and AOTAutograd take seconds a model on 2 cores)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from torch_cases import quiet_torch_trace

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import models_gpu as zoo  # noqa: E402

try:
    zoo.import_torchvision()
except ImportError as err:
    pytest.skip(f"torchvision: {err}", allow_module_level=True)

import fusec.api  # noqa: E402
import fusec.torch as fusec_torch  # noqa: E402

#: flash attention kernels expected: one a layer of the smoke builds
ATTENTION_LAYERS = {"vit_b_16": 1, "bert": 2, "gpt2": 2, "llama": 2, "resnet50": 0}


@pytest.fixture(autouse=True)
def _quiet():
    yield from quiet_torch_trace()


@pytest.mark.parametrize("name", sorted(ATTENTION_LAYERS))
def test_zoo_model_through_the_backend_has_no_fallback_on_cuda(name: str, monkeypatch) -> None:
    programs: list[Any] = []
    compile_module = fusec.api.compile

    def without_runtime(*args: Any, **kwargs: Any) -> Any:
        programs.append(compile_module(*args, **{**kwargs, "executable": False}))
        return programs[-1]

    monkeypatch.setattr(fusec.api, "compile", without_runtime)
    reference = zoo.build(name, True)
    model = copy.deepcopy(reference).to(torch.float16)
    x = zoo.sample(reference, name, 1, True, "embeds", torch.float16)
    torch._dynamo.reset()
    fusec_torch.reset_stats()
    compiled = torch.compile(model, backend="fusec", dynamic=False, options={"target": "cuda"})
    with torch.no_grad():
        compiled(x)
    stats = fusec_torch.stats()
    assert stats["eager_nodes"] == 0, stats["remarks"]
    assert stats["partitions"] == 1 and len(programs) == 1, stats["remarks"]
    (program,) = programs
    fallbacks = [
        f"{k.kind}: {next((line for line in k.source.splitlines() if 'FALLBACK' in line), '')}"
        for k in program.kernels
        if k.runs_op_by_op
    ]
    assert not fallbacks, f"groups on the PyTorch fallback: {fallbacks}"
    flash = [
        k for k in program.kernels if k.kind == "attention" and "flash-style" in k.source[:4000]
    ]
    assert len(flash) == ATTENTION_LAYERS[name], [k.kind for k in program.kernels]


def test_an_f16_hardswish_fuses_into_the_conv(monkeypatch) -> None:
    """hardswish stays one ATen op (kept out of the core-ATen table, as hardsigmoid, SiLU
    and Mish are): decomposed, it was float32 maths between two casts that the cuda
    target ran as a pointwise kernel after the conv (MobileNetV3: 121 kernels, the ONNX
    path 99; now 99 both), where one ai.hard_swish joins the conv's epilogue."""
    programs: list[Any] = []
    compile_module = fusec.api.compile

    def without_runtime(*args: Any, **kwargs: Any) -> Any:
        programs.append(compile_module(*args, **{**kwargs, "executable": False}))
        return programs[-1]

    monkeypatch.setattr(fusec.api, "compile", without_runtime)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.Hardswish()
    )
    model = model.eval().to(torch.float16)
    torch._dynamo.reset()
    fusec_torch.reset_stats()
    compiled = torch.compile(model, backend="fusec", dynamic=False, options={"target": "cuda"})
    with torch.no_grad():
        compiled(torch.randn(1, 16, 16, 16, dtype=torch.float16))
    (program,) = programs
    kinds = [k.kind for k in program.kernels]  # the input's layout copy, then the conv
    assert kinds.count("conv") == 1 and "pointwise" not in kinds, kinds
