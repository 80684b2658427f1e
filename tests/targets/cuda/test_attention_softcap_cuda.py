"""Soft-capped ``ai.attention`` (Gemma-2) on the cuda target, without a GPU: the flash
kernel caps the scores itself (``test_flash_softcap.py``); where it refuses the attention
for another reason (a head size of 32) the group runs on the PyTorch fallback, whose
``ieee_attention`` caps the scores before the mask. Where
PyTorch is installed (any build), ``ieee_attention`` and the generated fallback run on
CPU tensors against the float64 reference."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cuda_cases import one_group, random_inputs
from cuda_cases import tensor_type as t
from numerics import assert_close

import fusec
from fusec.dialect import numpy_ops as K
from fusec.dialect import ops as ai
from fusec.runtime.reference import run_reference
from fusec.targets.cuda import torch_fallback as cuda_torch

S = 64  # a causal f16 attention the flash kernel takes without the cap


def _model(softcap: float, head: int = 64) -> str:
    q = f"tensor<1x2x{S}x{head}xf16>"
    mask = np.triu(np.full((S, S), -np.inf), 1)
    rows = ", ".join("[" + ", ".join("0xFC00" if x else "0.0" for x in r) + "]" for r in mask)
    cap = f", softcap = {softcap} : f32" if softcap else ""
    return f"""func.func @f(%q: {q}, %k: {q}, %v: {q}) -> {q} {{
  %m = arith.constant dense<[{rows}]> : tensor<{S}x{S}xf16>
  %a = ai.attention %q, %k, %v, %m {{scale = 1.250000e-01 : f32{cap}}} : {q} * {q} * {q} * tensor<{S}x{S}xf16>
  return %a : {q}
}}"""  # noqa: E501


def _attention_kernel(softcap: float, head: int = 64):
    program = fusec.compile(_model(softcap, head), target="cuda", executable=False)
    (kernel,) = [k for k in program.kernels if k.kind == "attention"]
    return kernel


def test_the_flash_kernel_takes_a_softcap() -> None:
    kernel = _attention_kernel(50.0)
    assert not kernel.runs_op_by_op
    assert "scores soft-capped at 50.0 (tanh)" in kernel.source


def test_the_fallback_passes_the_softcap() -> None:
    kernel = _attention_kernel(50.0, head=32)  # a head size the flash kernel refuses
    assert kernel.runs_op_by_op and "head sizes 32/32" in kernel.source
    source = kernel.source
    (call,) = [line for line in source.splitlines() if "= ieee_attention(" in line]
    assert re.search(r"0\.125, False, (softcap=)?50\.0\)$", call), call


# ------------------------------------------------------------- run on CPU torch


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_ieee_attention_soft_caps_before_the_mask(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    from fusec.targets.cuda.torch_runtime import ieee_attention

    rng = np.random.default_rng(4)
    np_dtype = np.float32 if dtype == "f32" else np.float16
    q, k, v = ((3 * rng.standard_normal((2, 5, 8))).astype(np_dtype) for _ in range(3))
    mask = np.triu(np.full((5, 5), -np.inf), 1).astype(np_dtype)
    got = ieee_attention(
        torch, *(torch.from_numpy(a) for a in (q, k, v, mask)), 0.5, False, softcap=1.5
    )
    want = K.attention(*(a.astype(np.float64) for a in (q, k, v, mask)), scale=0.5, softcap=1.5)
    assert_close(got.numpy(), want.astype(np_dtype))
    plain = ieee_attention(torch, *(torch.from_numpy(a) for a in (q, k, v, mask)), 0.5, False)
    assert not np.allclose(plain.numpy(), got.numpy(), rtol=1e-2)  # the cap matters here


def test_the_generated_fallback_matches_the_reference() -> None:
    torch = pytest.importorskip("torch")
    q, m, o = t((2, 5, 8), "f32"), t((5, 5), "f32"), t((2, 5, 8), "f32")
    body = [
        f"%o = ai.attention %q1, %k1, %v1, %m1 {{scale = 0.5 : f32, softcap = 1.5 : f32}} : "
        f"{q} * {q} * {q} * {m}",
        f"ai.yield %o : {o}",
    ]
    params = [("q", q), ("k", q), ("v", q), ("m", m)]
    module = fusec.parse(one_group("g", params, [o], "attention", body))
    group = next(op for op in module.walk() if isinstance(op, ai.FusedOp))
    namespace: dict = {}
    exec(compile(cuda_torch.generate(group, "k0").source, "<kernel>", "exec"), namespace)
    args = [3 * a for a in random_inputs(module, seed=11)]
    (got,) = namespace["run"](torch, *(torch.from_numpy(a.copy()) for a in args))
    (want,) = run_reference(module, args, precision="float64")
    assert_close(got.numpy(), want)


@pytest.mark.parametrize("head", [64, 256])
def test_the_cuda_pipeline_recognises_soft_capped_attention_for_the_flash_kernels_heads(
    head: int,
) -> None:
    """``recognize-patterns{softcap_heads=64,128}`` in the cuda pipelines: Gemma-2's capped
    scores with heads of 64 are one ``ai.attention`` on the flash kernel, which caps them;
    with heads of 256 (real Gemma-2's, which the flash kernel refuses) the chain stays a
    GEMM group with the cap and the softmax in its epilogue and a second GEMM (the Tensor
    Core kernels), not an attention on the PyTorch fallback."""
    from pathlib import Path

    here = Path(__file__).parents[2] / "passes/filecheck/recognize/softcap_attention.mlir"
    text = here.read_text().split("// -----")[0]
    text = text.replace("x64x", f"x{head}x").replace("x64xf16", f"x{head}xf16")
    program = fusec.compile(text, target="cuda", executable=False)
    assert not any(k.runs_op_by_op for k in program.kernels)
    if head == 64:
        (kernel,) = program.kernels
        assert kernel.kind == "attention" and "soft-capped at 50.0" in kernel.source
        return
    assert [k.kind for k in program.kernels] == ["copy", "matmul", "matmul"]
    assert "ai.tanh" in program.kernels[1].source.split("\n\n")[0]


def test_the_pipelines_recognise_softcap_for_the_flash_kernels_head_sizes() -> None:
    """The head sizes ``softcap_heads`` names in every cuda pipeline are the flash
    kernel's (``attention.cpp.HEAD_DIMS``): a size it refused would send Gemma-2's
    attention to PyTorch; one it takes but not named would keep it off the kernel."""
    from fusec.targets.cuda.attention.cpp import HEAD_DIMS
    from fusec.targets.cuda.target import CudaTarget

    heads = ",".join(map(str, HEAD_DIMS))
    for name, spec in CudaTarget.pipelines.items():
        assert f"recognize-patterns{{softcap_heads={heads}}}" in spec, name
