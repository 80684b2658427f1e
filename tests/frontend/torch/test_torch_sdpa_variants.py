"""The fused SDPA kernels ATen picks for ``scaled_dot_product_attention`` (issue 32):
``_scaled_dot_product_cudnn_attention``, ``_flash_attention``, ``_efficient_attention``
(CUDA), ``_flash_attention_for_cpu`` and ``_fused_attention_overrideable``, each lowered
to one ``ai.attention``, their extra results (log-sum-exp, offsets, RNG state) unused.

Each case calls the ATen op itself in a module exported with ``torch.export`` (fake
tensors: the CUDA kernels need no GPU to be traced) and imported with
``fusec.from_torch``: its IR must hold the attention with the case's scale and bias, and
the numpy reference executor must give ``F.scaled_dot_product_attention``'s result (the
maths PyTorch's kernels compute) on fresh random inputs. Then the backend's way in:
``nn.MultiheadAttention`` (torchvision ViT's attention), whose SDPA Dynamo leaves inside
``F.multi_head_attention_forward``, reaches AOTAutograd whole and must compile to
``ai.attention`` with no node left to eager; and a mask that PyTorch computes from
constants (HF's all-ones ``attention_mask``) must reach ``ai.attention`` as a constant,
which the cuda target needs to run the flash kernel rather than the PyTorch fallback
(which also turns the program's CUDA graphs off).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from numerics import assert_close
from torch_cases import filecheck, numpy_of, quiet_torch_trace

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import fusec  # noqa: E402
import fusec.torch as fusec_torch  # noqa: E402
from fusec.frontend import torch_fx  # noqa: E402

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _quiet():
    fusec_torch.reset_stats()
    yield from quiet_torch_trace()


class Call(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


@dataclass(frozen=True)
class Variant:
    name: str
    #: (q, k, v, bias or None) -> the ATen op's output (its result #0)
    call: Callable[..., Any]
    #: (q, k, v, bias or None) -> what PyTorch's maths gives
    want: Callable[..., Any]
    bias: bool
    checks: str


SCALE = 0.3
VARIANTS = [
    Variant(
        "cudnn_bias",
        lambda q, k, v, b: aten._scaled_dot_product_cudnn_attention(
            q, k, v, b, False, 0.0, False, False, scale=SCALE
        )[0],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b, scale=SCALE),
        True,
        "CHECK: ai.attention %args, %args_1, %args_2, %args_3 "
        "{scale = 3.000000e-01 : f32, nan_to_zero = true}",
    ),
    Variant(
        "cudnn_causal",
        lambda q, k, v, b: aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True)[
            0
        ],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        False,
        "CHECK: arith.constant dense<{{.*}}0xff800000{{.*}}> : tensor<6x6xf32>\n"
        "CHECK: ai.attention {{.*}}scale = 0.353553",
    ),
    Variant(
        "flash",
        lambda q, k, v, b: aten._scaled_dot_product_flash_attention(q, k, v, scale=SCALE)[0],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, scale=SCALE),
        False,
        "CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<f32>\n"
        "CHECK: ai.attention %args, %args_1, %args_2, %[[ZERO]] {scale = 3.000000e-01 : f32}",
    ),
    Variant(
        "flash_causal",
        lambda q, k, v, b: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        False,
        "CHECK: arith.constant dense<{{.*}}0xff800000{{.*}}> : tensor<6x6xf32>\n"
        "CHECK: ai.attention",
    ),
    Variant(
        "efficient_bias",
        lambda q, k, v, b: aten._scaled_dot_product_efficient_attention(
            q, k, v, b, True, scale=SCALE
        )[0],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b, scale=SCALE),
        True,
        "CHECK: ai.attention %args, %args_1, %args_2, %args_3 {scale = 3.000000e-01",
    ),
    Variant(
        "efficient_no_bias",
        lambda q, k, v, b: aten._scaled_dot_product_efficient_attention(q, k, v, None, False)[0],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v),
        False,
        "CHECK: ai.attention {{.*}}scale = 0.353553",
    ),
    Variant(
        "flash_for_cpu_mask",
        lambda q, k, v, b: aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, attn_mask=b, scale=SCALE
        )[0],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b, scale=SCALE),
        True,
        "CHECK: ai.attention %args, %args_1, %args_2, %args_3 {scale = 3.000000e-01",
    ),
    Variant(
        "overrideable_bias",
        lambda q, k, v, b: aten._scaled_dot_product_fused_attention_overrideable(
            q, k, v, b, scale=SCALE
        )[0],
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b, scale=SCALE),
        True,
        "CHECK: ai.attention %args, %args_1, %args_2, %args_3 {scale = 3.000000e-01",
    ),
]


def _inputs(seed: int, bias: bool) -> tuple:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    if bias:  # a float bias broadcast over the heads, some keys masked out
        b = torch.randn(2, 1, 6, 6, generator=g)
        b = b.masked_fill(torch.rand(2, 1, 6, 6, generator=g) < 0.2, float("-inf"))
        return q, k, v, b
    return q, k, v


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_sdpa_variant_lowers_to_one_attention(variant: Variant, tmp_path) -> None:
    def call(q, k, v, b=None):
        return variant.call(q, k, v, b)

    module = Call(call).eval()
    ir_module = fusec.from_torch(module, _inputs(1, variant.bias))
    ir = str(ir_module)
    filecheck(ir, variant.checks, tmp_path)
    assert ir.count("ai.attention") == 1 and "ai.softmax" not in ir, ir
    fresh = _inputs(2, variant.bias)  # not the exported ones
    with torch.no_grad():
        want = variant.want(*fresh, *([] if variant.bias else [None]))
    got = fusec.reference(ir_module)(*[numpy_of(a) for a in fresh])
    assert not np.isnan(np.asarray(got)).any()
    assert_close(np.asarray(got), numpy_of(want), what=variant.name)


def test_a_used_extra_result_is_refused_by_name() -> None:
    """The log-sum-exp is for the backward pass: a graph that reads it is refused, and the
    backend's partitioner (``unsupported_reason``) leaves such a node to eager PyTorch."""
    module = Call(lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[1])
    with pytest.raises(fusec.FusecError, match=r"result #1 of aten\._scaled_dot_product_flash"):
        fusec.from_torch(module, _inputs(1, False))
    graph = torch.export.export(module, _inputs(1, False)).graph
    (node,) = [n for n in graph.nodes if "attention" in str(n.target)]
    assert "its result #1 is used, and fusec lacks it" in str(torch_fx.unsupported_reason(node))


def test_dropout_in_a_variant_is_refused_by_name() -> None:
    module = Call(
        lambda q, k, v: aten._scaled_dot_product_efficient_attention(q, k, v, None, False, 0.1)[0]
    )
    with pytest.raises(fusec.FusecError, match="dropout in attention is not supported"):
        fusec.from_torch(module, _inputs(1, False))


class MHABlock(nn.Module):
    """torchvision ViT's encoder attention: ``nn.MultiheadAttention`` (batch first), whose
    SDPA call sits inside ``F.multi_head_attention_forward``."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        y = self.norm(x)
        a, _ = self.attn(y, y, y, need_weights=False)
        return x + a


class MaskedBlock(nn.Module):
    """HF's way: the attention mask built from an all-ones ``attention_mask`` of the
    input's shape (a padding mask and a causal one, combined), passed to SDPA."""

    def __init__(self, dim: int = 32, heads: int = 2, causal: bool = True) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        padding = torch.ones(b, s, dtype=torch.long, device=x.device)
        mask = padding[:, None, None, :].bool().expand(b, 1, s, s)
        if self.causal:
            mask = mask & torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        q, k, v = (
            t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
            for t in self.qkv(x).chunk(3, -1)
        )
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + self.out(a.transpose(1, 2).reshape(b, s, d))


def _through_the_backend(model: nn.Module, shape: tuple[int, ...], monkeypatch) -> list[str]:
    """Run ``model`` through ``torch.compile(backend="fusec")`` on the reference target
    against eager on fresh inputs; the IR of each partition it translated."""
    modules: list[str] = []
    translate = torch_fx.translate

    def recording(*args: Any, **kwargs: Any) -> Any:
        module = translate(*args, **kwargs)
        modules.append(str(module))
        return module

    monkeypatch.setattr(torch_fx, "translate", recording)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = model.eval()
    compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(*shape, generator=generator)
            got, want = compiled(x), model(x)
            assert not torch.isnan(got).any()
            assert_close(got.numpy(), want.numpy())
    stats = fusec_torch.stats()
    assert stats["eager_nodes"] == 0 and stats["eager_partitions"] == 0, stats["remarks"]
    return modules


def test_multihead_attention_reaches_ai_attention_through_the_backend(monkeypatch) -> None:
    (ir,) = _through_the_backend(MHABlock(), (2, 5, 32), monkeypatch)
    assert ir.count("ai.attention") == 1 and "ai.softmax" not in ir, ir


@pytest.mark.parametrize("causal", [False, True], ids=["padding", "padding_causal"])
def test_a_mask_of_constants_reaches_attention_as_a_constant(
    causal: bool, monkeypatch, tmp_path
) -> None:
    (ir,) = _through_the_backend(MaskedBlock(causal=causal), (2, 6, 32), monkeypatch)
    filecheck(
        ir,
        "CHECK: %[[MASK:.*]] = arith.constant dense<"
        + ("{{.*}}0xff800000{{.*}}" if causal else "0.000000e+00")
        + "> : tensor<2x1x6x6xf32>\n"
        "CHECK-NOT: ai.where\n"
        "CHECK: ai.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[MASK]]",
        tmp_path,
    )


@pytest.mark.parametrize("causal", [False, True], ids=["padding", "padding_causal"])
def test_a_mask_of_constants_runs_as_the_cuda_flash_kernel(causal: bool, monkeypatch) -> None:
    """What the cuda target makes of the backend's f16 partition (code generation only, no
    GPU: the program is compiled without a runtime, so its call falls back to eager): the
    flash kernel and no group on the PyTorch fallback, whose presence turns the program's
    whole-program CUDA graphs off (``CudaProgram._graphed``): every call of HF's
    transformers through the backend ran launch by launch before (issue 32)."""
    import fusec.api

    programs: list[Any] = []
    compile_module = fusec.api.compile

    def without_runtime(*args: Any, **kwargs: Any) -> Any:
        programs.append(compile_module(*args, **{**kwargs, "executable": False}))
        return programs[-1]

    monkeypatch.setattr(fusec.api, "compile", without_runtime)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = MaskedBlock(dim=128, heads=2, causal=causal).eval().half()
    compiled = torch.compile(model, backend="fusec", options={"target": "cuda"})
    with torch.no_grad():
        compiled(torch.randn(1, 16, 128).half())
    (program,) = programs
    fallbacks = [k.kind for k in program.kernels if k.runs_op_by_op]
    assert not fallbacks, f"groups on the PyTorch fallback: {fallbacks}\n{program.ir}"
    flash = [k for k in program.kernels if k.kind == "attention"]
    assert len(flash) == 1 and "flash-style attention" in flash[0].source[:4000], program.ir
