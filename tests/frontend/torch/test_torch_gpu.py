"""``torch.compile(model, backend="fusec")`` on an NVIDIA GPU in fp16, against the fp32
module: a CNN (conv + BN + residual + pools) and a transformer block (causal attention
with head size 64, written out and as SDPA; LayerNorm, GELU). Needs torch with CUDA
(the ``gpu`` lane)."""

from __future__ import annotations

import copy

import pytest
from numerics import assert_close
from torch_cases import quiet_torch_trace

torch = pytest.importorskip("torch")

from test_torch_backend import Block, LlamaBlock, SmallCNN  # noqa: E402
from test_torch_sdpa_variants import MaskedBlock, MHABlock  # noqa: E402

import fusec.torch as fusec_torch  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    yield from quiet_torch_trace()


def _activations() -> torch.nn.Module:
    """Conv epilogues with the activations kept whole (MobileNetV3's hardswish and
    hardsigmoid, EfficientNet's SiLU, Mish): one ai op each, in f16."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.Hardswish(),
        nn.Conv2d(16, 16, 1), nn.Hardsigmoid(), nn.Conv2d(16, 16, 3, padding=1), nn.SiLU(),
        nn.Conv2d(16, 8, 1), nn.Mish(),
    )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make, shape",
    [
        (SmallCNN, (8, 3, 32, 32)),
        (lambda: Block(dim=128, heads=2), (4, 64, 128)),
        (lambda: Block(dim=128, heads=2, sdpa=True), (4, 64, 128)),
        (_activations, (4, 3, 32, 32)),
    ],
    ids=["cnn", "transformer_block", "sdpa_block", "kept_activations"],
)
def test_fp16_model_through_the_backend_matches_the_fp32_module(make, shape) -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch has no usable CUDA device")
    torch.manual_seed(0)
    torch._dynamo.reset()
    fusec_torch.reset_stats()
    reference = make().eval().cuda()
    half = copy.deepcopy(reference).half()
    compiled = torch.compile(half, backend="fusec")
    with torch.no_grad():
        for _ in range(2):  # fresh inputs each call
            x = torch.randn(*shape, device="cuda")
            got = compiled(x.half())
            want = reference(x)
            torch.cuda.synchronize()
            assert got.dtype == torch.float16 and got.device.type == "cuda"
            assert not torch.isnan(got).any()
            assert_close(got.float().cpu().numpy(), want.cpu().numpy(), dtype="f16")
    stats = fusec_torch.stats()
    assert stats["partitions"] >= 1, stats
    assert stats["eager_partitions"] == 0 and stats["eager_nodes"] == 0, stats["remarks"]


@pytest.mark.gpu
def test_fp16_llama_style_block_matches_the_fp32_module() -> None:
    """RoPE at run-time positions (int64 on the device), grouped KV heads, head size 64."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no usable CUDA device")
    torch.manual_seed(0)
    torch._dynamo.reset()
    fusec_torch.reset_stats()
    reference = LlamaBlock(dim=256, heads=4, kv_heads=2, seq=64).eval().cuda()
    half = copy.deepcopy(reference).half()
    compiled = torch.compile(half, backend="fusec")
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 64, 256, device="cuda")
            positions = torch.randint(0, 64, (2, 64), device="cuda")
            got = compiled(x.half(), positions)
            want = reference(x, positions)
            torch.cuda.synchronize()
            assert not torch.isnan(got).any()
            assert_close(got.float().cpu().numpy(), want.cpu().numpy(), dtype="f16")
    stats = fusec_torch.stats()
    assert stats["targets"] == {"cuda": 1}, stats
    assert stats["eager_partitions"] == 0 and stats["eager_nodes"] == 0, stats["remarks"]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make",
    [
        lambda: MaskedBlock(dim=128, heads=2, causal=True),
        lambda: MaskedBlock(dim=128, heads=2, causal=False),
        lambda: MHABlock(dim=128, heads=2),
    ],
    ids=["hf_causal_mask", "hf_padding_mask", "multihead_attention"],
)
def test_backend_calls_are_cuda_graph_replays(make) -> None:
    """Issue 32: a call through the backend is one replay of the partition program's
    CUDA graph (first call launch by launch, second recorded, the rest replayed), as a
    call of the ONNX path's program is. HF's attention mask of an all-ones
    ``attention_mask`` (constants) must reach the flash kernel (before: the PyTorch
    fallback, which turns the graphs off); ``nn.MultiheadAttention``'s SDPA reaches
    AOTAutograd whole and becomes the cuDNN, flash or efficient ATen kernel, which must
    lower (before: ViT's 12 eager nodes)."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no usable CUDA device")
    torch.manual_seed(0)
    torch._dynamo.reset()
    fusec_torch.reset_stats()
    reference = make().eval().cuda()
    half = copy.deepcopy(reference).half()
    compiled = torch.compile(half, backend="fusec")
    with torch.no_grad():
        for _ in range(5):  # fresh inputs each call
            x = torch.randn(2, 64, 128, device="cuda")
            got = compiled(x.half())
            want = reference(x)
            torch.cuda.synchronize()
            assert not torch.isnan(got).any()
            assert_close(got.float().cpu().numpy(), want.cpu().numpy(), dtype="f16")
    stats = fusec_torch.stats()
    assert stats["targets"] == {"cuda": 1}, stats
    assert stats["eager_partitions"] == 0 and stats["eager_nodes"] == 0, stats["remarks"]
    (partition,) = fusec_torch.compiled_partitions()
    program = partition.program
    fallbacks = [k.kind for k in partition.kernels if k.runs_op_by_op]
    assert not fallbacks and not program._torch_groups, fallbacks
    assert program.graphs is not None and not program.graphs.failed, program.graphs.failed
    recorded = list(program.graphs.recorded.values())
    assert len(recorded) == 1 and recorded[0].replays == 4, recorded


class ConstantIndices(torch.nn.Module):
    """``x[:, rows, cols]`` at index buffers (on the device once the model is moved) and a
    parameter flipped by an op fusec lacks: constants on the GPU, where the lookup reads
    its constant indices (before: ``np.asarray`` of a CUDA tensor, a TypeError that left
    the whole partition to eager) and the backend folds the flip once."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("rows", torch.tensor([[0, 3], [5, 1]]))
        self.register_buffer("cols", torch.tensor([[2, 2], [7, 0]]))
        self.w = torch.nn.Parameter(torch.randn(64, 64))

    def forward(self, x):
        picked = x[:, self.rows, self.cols]  # [B, 2, 2, 64]
        w = torch.flip(self.w, dims=(0,)) * 0.5
        return torch.relu(picked @ w.t())


@pytest.mark.gpu
def test_fp16_constants_on_the_device_are_read_and_folded() -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch has no usable CUDA device")
    torch.manual_seed(0)
    torch._dynamo.reset()
    fusec_torch.reset_stats()
    reference = ConstantIndices().eval().cuda()
    half = copy.deepcopy(reference).half()
    compiled = torch.compile(half, backend="fusec")
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3, 8, 8, 64, device="cuda")
            got = compiled(x.half())
            want = reference(x)
            torch.cuda.synchronize()
            assert not torch.isnan(got).any()
            assert_close(got.float().cpu().numpy(), want.cpu().numpy(), dtype="f16")
    stats = fusec_torch.stats()
    assert stats["targets"] == {"cuda": 1}, stats
    assert stats["eager_partitions"] == 0 and stats["eager_nodes"] == 0, stats["remarks"]
    assert stats["folded_nodes"] >= 3, stats  # flip, mul, t
