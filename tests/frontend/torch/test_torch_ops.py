"""Each core-ATen lowering of the PyTorch front end against PyTorch itself.

Every case is a tiny module exported with ``torch.export`` and imported with
``fusec.from_torch``: its IR must hold the ops a FileCheck line names, and the numpy
reference executor must give PyTorch's result on fresh random inputs. These run only
where torch is installed (the ``torch`` extra; README "PyTorch").
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
import fusec.frontend.torch_attention  # noqa: E402,F401  (registers fusec::sdpa)


class Fn(nn.Module):
    """A module running one function (with optional parameters as submodules)."""

    def __init__(self, fn: Callable[..., Any], **modules: nn.Module) -> None:
        super().__init__()
        self.fn = fn
        for name, module in modules.items():
            self.add_module(name, module)

    def forward(self, *args: Any) -> Any:
        return self.fn(self, *args)


@dataclass(frozen=True)
class Case:
    name: str
    module: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple]
    checks: str


def randn(*shape: int, dtype=None) -> Callable:
    return lambda g: torch.randn(*shape, generator=g, dtype=dtype or torch.float32)


def inputs(*makers: Callable) -> Callable:
    return lambda g: tuple(m(g) for m in makers)


def ids(high: int, *shape: int) -> Callable:
    return lambda g: torch.randint(0, high, shape, generator=g)


def signed_ids(high: int, *shape: int) -> Callable:
    """Indices in [-high, high): negative ones count from the end."""
    return lambda g: torch.randint(-high, high, shape, generator=g)


def fn(body: Callable[..., Any], **modules: nn.Module) -> Callable[[], nn.Module]:
    return lambda: Fn(lambda self, *a: body(self, *a), **modules)


def _bn() -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(4)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-1, 1)
    return bn


CASES = [
    Case(
        "conv_bias",
        fn(lambda s, x: s.c(x), c=nn.Conv2d(3, 4, 3, padding=1, stride=2)),
        inputs(randn(2, 3, 9, 9)),
        "CHECK: ai.conv2d {{.*}}strides = array<i64: 2, 2>\nCHECK: ai.bias_add",
    ),
    Case(
        "conv_grouped_dilated",
        fn(lambda s, x: s.c(x), c=nn.Conv2d(4, 4, 3, groups=2, dilation=2, bias=False)),
        inputs(randn(1, 4, 10, 10)),
        "CHECK: ai.conv2d {{.*}}groups = 2",
    ),
    Case(
        "linear_addmm",
        fn(lambda s, x: s.l(x), l=nn.Linear(5, 3)),
        inputs(randn(4, 5)),
        "CHECK: ai.matmul\nCHECK: ai.bias_add",
    ),
    Case(
        "linear_3d",
        fn(lambda s, x: s.l(x), l=nn.Linear(5, 3)),
        inputs(randn(2, 4, 5)),
        "CHECK: ai.matmul\nCHECK: ai.reshape",
    ),
    Case(
        "bmm_matmul",
        fn(lambda s, a, b: a @ b),
        inputs(randn(2, 3, 4), randn(2, 4, 5)),
        "CHECK: ai.matmul {{.*}}tensor<2x3x4xf32> * tensor<2x4x5xf32>",
    ),
    Case(
        "binary_tensor_scalar",
        fn(lambda s, a, b: (a + b) * 2.0 - b / 3 + (1 - a)),
        inputs(randn(3, 4), randn(4)),
        "CHECK: ai.add\nCHECK: ai.mul\nCHECK: ai.div\nCHECK: ai.sub",
    ),
    Case(
        "add_alpha",
        fn(lambda s, a, b: torch.add(a, b, alpha=0.5)),
        inputs(randn(3, 4), randn(3, 4)),
        "CHECK: ai.mul\nCHECK: ai.add",
    ),
    Case(
        "activations",
        fn(lambda s, x: F.relu(x) + F.gelu(x) + F.silu(x) + torch.sigmoid(x) + torch.tanh(x)),
        inputs(randn(3, 8)),
        "CHECK: ai.relu\nCHECK: ai.gelu\nCHECK: ai.silu\nCHECK: ai.sigmoid\nCHECK: ai.tanh",
    ),
    Case(
        "gelu_tanh",
        fn(lambda s, x: F.gelu(x, approximate="tanh")),
        inputs(randn(3, 8)),
        'CHECK: ai.gelu %{{.*}} {approximate = "tanh"}',
    ),
    Case(
        "hard_activations",
        fn(lambda s, x: F.hardswish(x) * F.hardsigmoid(x)),
        inputs(lambda g: 4 * torch.randn(3, 8, generator=g)),
        "CHECK: ai.hard_swish\nCHECK: ai.hard_sigmoid\nCHECK: ai.mul",
    ),
    Case(
        "leaky_elu_clamp",
        fn(lambda s, x: F.leaky_relu(x, 0.2) + F.elu(x) + x.clamp(-0.5, 0.7)),
        inputs(randn(3, 8)),
        "CHECK: ai.leaky_relu\nCHECK: ai.elu\nCHECK: ai.clip",
    ),
    Case(
        "math",
        fn(
            lambda s, x: (
                torch.rsqrt(x.abs() + 1) + torch.sqrt(x.abs()) + x.pow(3) + x**2 + torch.exp(-x)
            )
        ),
        inputs(randn(3, 8)),
        "CHECK: ai.reciprocal\nCHECK: ai.sqrt\nCHECK: ai.pow",
    ),
    Case(
        "softmax",
        fn(lambda s, x: x.softmax(-1) + F.log_softmax(x, 1)),
        inputs(randn(2, 3, 5)),
        "CHECK: ai.softmax\nCHECK: ai.reduce_max",
    ),
    Case(
        "layer_norm",
        fn(lambda s, x: s.ln(x), ln=nn.LayerNorm(6)),
        inputs(randn(2, 3, 6)),
        "CHECK: ai.layernorm {{.*}}tensor<2x3x6xf32>",
    ),
    Case(
        "layer_norm_2d",
        fn(lambda s, x: s.ln(x), ln=nn.LayerNorm((3, 4))),
        inputs(randn(2, 3, 4)),
        "CHECK: ai.reshape\nCHECK: ai.layernorm {{.*}}tensor<2x12xf32>",
    ),
    Case(
        "batch_norm",
        fn(lambda s, x: s.bn(x), bn=_bn()),
        inputs(randn(2, 4, 5, 5)),
        "CHECK: ai.batch_norm",
    ),
    Case(
        "max_pool",
        fn(lambda s, x: F.max_pool2d(x, 3, 2, 1)),
        inputs(randn(1, 2, 9, 9)),
        "CHECK: ai.max_pool2d {{.*}}kernel = array<i64: 3, 3>",
    ),
    Case(
        "max_pool_ceil",
        fn(lambda s, x: F.max_pool2d(x, 2, ceil_mode=True)),
        inputs(randn(1, 2, 7, 7)),
        "CHECK: ai.max_pool2d {{.*}}ceil_mode = true",
    ),
    Case(
        "avg_pool",
        fn(
            lambda s, x: (
                F.avg_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)
            )
        ),
        inputs(randn(1, 2, 9, 9)),
        "CHECK: ai.avg_pool2d\nCHECK: ai.avg_pool2d",
    ),
    Case(
        "adaptive_avg_pool",
        fn(
            lambda s, x: (
                F.adaptive_avg_pool2d(x, 2).flatten(1)
                + F.adaptive_avg_pool2d(x, 1).flatten(1).repeat(1, 4)
            )
        ),
        inputs(randn(2, 3, 6, 6)),
        "CHECK: ai.avg_pool2d\nCHECK: ai.reduce_mean",
    ),
    Case(
        "reductions",
        fn(
            lambda s, x: (
                x.mean((1,), keepdim=True).sum(-1)
                + x.sum((0, 2)).mean()
                + x.amax(1).sum(1)
                + x.var(2).sum(1)
            )
        ),
        inputs(randn(2, 3, 4)),
        "CHECK: ai.reduce_mean\nCHECK: ai.reduce_sum",
    ),
    Case(
        "views",
        fn(
            lambda s, x: (
                x.view(2, 12)
                .t()
                .reshape(3, 8)
                .unsqueeze(0)
                .squeeze(0)
                .permute(1, 0)
                .transpose(0, 1)
            )
        ),
        inputs(randn(2, 3, 4)),
        "CHECK: ai.reshape\nCHECK: ai.transpose",
    ),
    Case(
        "expand",
        fn(lambda s, x: x[:, None].expand(3, 4, 5).contiguous()),
        inputs(randn(3, 5)),
        "CHECK: ai.expand {{.*}}shape = array<i64: 3, 4, 5>",
    ),
    Case(
        "slice_select",
        fn(lambda s, x: x[1:, ::2, 1] + x[0, 1:4, -1]),
        inputs(randn(3, 6, 4)),
        "CHECK: ai.slice {{.*}}strides = array<i64: 1, 2, 1>",
    ),
    Case(
        "cat_split",
        fn(lambda s, a, b: torch.cat(torch.cat([a, b], 1).split([2, 5], 1)[::-1], 1)),
        inputs(randn(2, 3), randn(2, 4)),
        "CHECK: ai.concat\nCHECK: ai.slice",
    ),
    Case(
        "chunk",
        fn(lambda s, x: x.chunk(3, -1)[1] * x.chunk(3, -1)[2]),
        inputs(randn(2, 9)),
        "CHECK: ai.slice",
    ),
    Case(
        "embedding",
        fn(lambda s, i: s.e(i), e=nn.Embedding(11, 6)),
        inputs(ids(11, 2, 5)),
        "CHECK: ai.take %{{.*}} : tensor<11x6xf32> * tensor<2x5xi64>",
    ),
    Case(
        "where_compare",
        fn(lambda s, a, b: torch.where(a > b, a, b * 2) + (a <= 0.5).float() + (a != b).float()),
        inputs(randn(3, 4), randn(3, 4)),
        "CHECK: ai.greater\nCHECK: ai.where",
    ),
    Case(
        "masked_fill",
        fn(lambda s, x: x.masked_fill(torch.ones(4, 4).tril() == 0, float("-inf")).softmax(-1)),
        inputs(randn(2, 4, 4)),
        "CHECK: ai.where\nCHECK: ai.softmax",
    ),
    Case(
        "arange_full",
        fn(lambda s, x: x + torch.arange(5, dtype=torch.float32) + torch.full((5,), 2.0)),
        inputs(randn(3, 5)),
        "CHECK: arith.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00",
    ),
    Case(
        "to_dtype",
        fn(lambda s, x: (x.half() * 2).float() + x.to(torch.bfloat16).float()),
        inputs(randn(3, 5)),
        "CHECK: ai.cast {{.*}} to tensor<3x5xf16>",
    ),
    Case(
        "sdpa",
        fn(lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v)),
        inputs(randn(1, 2, 4, 8), randn(1, 2, 6, 8), randn(1, 2, 6, 8)),
        "CHECK: ai.attention {{.*}}scale = 0.353553",
    ),
    Case(
        "sdpa_causal",
        fn(lambda s, q: F.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.5)),
        inputs(randn(1, 2, 4, 8)),
        "CHECK: arith.constant dense<{{.*}}0xff800000{{.*}}> : tensor<4x4xf32>\n"
        "CHECK: ai.attention {{.*}}scale = 5.000000e-01",
    ),
    Case(
        "sdpa_bool_mask",
        fn(lambda s, q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m > 0)),
        inputs(randn(2, 2, 4, 8), randn(2, 1, 1, 4)),
        "CHECK: ai.where\nCHECK: ai.attention {{.*}}nan_to_zero = true",
    ),
    Case(
        "sdpa_float_mask",
        fn(lambda s, q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m)),
        inputs(randn(1, 2, 4, 8), randn(4, 4)),
        "CHECK: ai.attention {{.*}} * tensor<4x4xf32>",
    ),
    Case(
        "fusec_sdpa",  # what the backend rewrites Dynamo's SDPA calls into
        fn(lambda s, q, k: torch.ops.fusec.sdpa(q, k, k, None, 0.0, True)),
        inputs(randn(1, 2, 4, 8), randn(1, 2, 4, 8)),
        "CHECK: ai.attention {{.*}}scale = 0.353553",
    ),
    Case(
        "index_ids",
        fn(lambda s, x, i: x[i] + x[:, i].sum(1, keepdim=True).mean(1)),
        inputs(randn(5, 5), ids(5, 3)),
        "CHECK: ai.take",
    ),
    Case(
        "mask_logic",  # HF's attention-mask arithmetic and ViT's any()
        fn(
            lambda s, a, b: (
                (((a >= 0) & (b <= a)).float() + torch.logical_not(a > b).float()),
                torch.logical_not(a < 0.5).any(-1).float(),
            )
        ),
        inputs(randn(4, 5), randn(4, 5)),
        "CHECK: ai.greater_equal\nCHECK: ai.less_equal\nCHECK: ai.and\nCHECK: ai.not\n"
        "CHECK: ai.reduce_max",
    ),
    Case(
        "sin_cos",  # rotary embeddings' tables
        fn(lambda s, x: torch.sin(x) * 2 + torch.cos(x)),
        inputs(randn(3, 8)),
        "CHECK: ai.sin\nCHECK: ai.cos",
    ),
    Case(
        "linear_no_bias_mm",
        fn(lambda s, x: s.l(x), l=nn.Linear(5, 3, bias=False)),
        inputs(randn(4, 5)),
        "CHECK: ai.matmul %{{.*}} : tensor<4x5xf32> * tensor<5x3xf32>\nCHECK-NOT: ai.bias_add",
    ),
    Case(
        "full_like_mul_scalar",
        fn(lambda s, x: torch.full_like(x, 2.0) * torch.ops.aten.mul.Scalar(x, 0.5)),
        inputs(randn(3, 4)),
        "CHECK: ai.mul\nCHECK: ai.mul",
    ),
    Case(
        "index_broadcast_ids",
        fn(lambda s, x, i, j: x[:, i, j] * 2),
        inputs(randn(2, 4, 5, 3), signed_ids(4, 3, 1), signed_ids(5, 1, 2)),
        "CHECK: ai.reshape {{.*}}shape = array<i64: 2, 20, 3>\n"
        "CHECK: ai.where\nCHECK: ai.take {{.*}}axis = 1",
    ),
    Case(
        "index_not_adjacent",
        fn(lambda s, x, i, j: x[i, :, j]),
        inputs(randn(4, 5, 6), signed_ids(4, 2, 3), signed_ids(6, 3)),
        "CHECK: ai.transpose {{.*}}perm = array<i64: 0, 2, 1>\nCHECK: ai.take",
    ),
    Case(
        "index_mask_positions",  # HF's padding mask: mask[batch_idx, kv_idx], aranges
        fn(
            lambda s, m: m[
                torch.arange(3).view(-1, 1, 1, 1), torch.arange(7).view(1, 1, 1, -1)
            ].float()
        ),
        inputs(lambda g: torch.rand(3, 7, generator=g) > 0.5),
        "CHECK: ai.reshape {{.*}}shape = array<i64: 3, 1, 1, 7>\nCHECK-NOT: ai.take\n"
        "CHECK-NOT: ai.gather",
    ),
    Case(
        "index_constant_positions",
        fn(lambda s, x: x[torch.tensor([[2, 0]]), torch.tensor([1, -1])]),
        inputs(randn(3, 4)),
        "CHECK: ai.gather {{.*}}indices = array<i64: 9, 3>",
    ),
    Case(
        "gather",
        fn(lambda s, x, i: torch.gather(x, 1, i) + torch.gather(x, 2, torch.tensor([[[1, 0]]]))),
        inputs(randn(2, 5, 3), ids(5, 2, 4, 2)),
        "CHECK: ai.take %{{.*}} : tensor<30xf32> * tensor<2x4x2xi64>\nCHECK: ai.gather",
    ),
    Case(
        "as_strided_transpose",
        fn(lambda s, x: torch.as_strided(x + 1, (5, 4), (1, 5))),
        inputs(randn(4, 5)),
        "CHECK: ai.transpose {{.*}}perm = array<i64: 1, 0>",
    ),
    Case(
        "as_strided_slices",
        fn(lambda s, x: torch.as_strided(x * 2, (2, 2, 2), (1, 24, 4), 1)),
        inputs(randn(4, 6, 2)),
        "CHECK: ai.reshape {{.*}}shape = array<i64: 2, 6, 4, 1>\n"
        "CHECK: ai.slice {{.*}}offsets = array<i64: 0, 0, 1, 0>\n"
        "CHECK: ai.transpose {{.*}}perm = array<i64: 2, 0, 1>",
    ),
    Case(
        "as_strided_step",
        fn(lambda s, x: torch.as_strided(x * 2, (3, 2), (5, 2), 6)),
        inputs(randn(4, 5)),
        "CHECK: ai.slice {{.*}}strides = array<i64: 1, 2, 1>",
    ),
    Case(
        "as_strided_identity",  # ConvNeXt's head: the pooled map restrided, same elements
        fn(
            lambda s, x: (
                torch.as_strided(x.mean((-1, -2), keepdim=True), (2, 6, 1, 1), (6, 1, 6, 6)) + 1
            )
        ),
        inputs(randn(2, 6, 3, 3)),
        "CHECK: ai.reduce_mean\nCHECK-NOT: ai.slice\nCHECK-NOT: ai.transpose",
    ),
    Case(
        "constant_pad",
        fn(
            lambda s, x: (
                F.pad(x, (1, 2, 0, 1), value=0.5) + 1 + F.pad(x, (-1, 1, 1, -1))[..., :1, :1]
            )
        ),
        inputs(randn(2, 3, 4)),
        "CHECK: ai.concat",
    ),
    Case(
        "argmax_cumsum",
        fn(lambda s, x: x.argmax(-1).float() + x.cumsum(0).sum(-1)),
        inputs(randn(3, 5)),
        "CHECK: ai.argmax\nCHECK: ai.cumsum",
    ),
    Case(
        "f16_linear",
        fn(lambda s, x: F.relu(s.l(x)), l=nn.Linear(8, 4).half()),
        inputs(randn(3, 8, dtype=torch.float16)),
        "CHECK: ai.matmul {{.*}}f16",
    ),
]


@pytest.fixture(autouse=True)
def _quiet():
    yield from quiet_torch_trace()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lowering_matches_pytorch(case: Case, tmp_path) -> None:
    torch.manual_seed(0)
    module = case.module().eval()
    args = case.inputs(torch.Generator().manual_seed(1))
    ir_module = fusec.from_torch(module, args)
    filecheck(str(ir_module), case.checks, tmp_path)
    fresh = case.inputs(torch.Generator().manual_seed(2))  # not the exported ones
    with torch.no_grad():
        expected = module(*fresh)
    got = fusec.reference(ir_module)(*[numpy_of(a) for a in fresh])
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert_close(np.asarray(ours), numpy_of(theirs), what=case.name)
