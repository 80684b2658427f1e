"""``torch.compile(model, backend="fusec")`` end to end: small models against eager
PyTorch on fresh random inputs, partitions and eager fallbacks counted.

The ``reference`` target (the numpy executor) checks the backend's machinery quickly;
the ``cpu`` target's runs (Numba kernels, compiled on first use) are in the slow lane.
Only where torch is installed (the ``torch`` extra; README "PyTorch").
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numerics import assert_close
from torch_cases import quiet_torch_trace

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import fusec.torch as fusec_torch  # noqa: E402


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.ReLU())

    def forward(self, x):
        return self.net(x).softmax(-1)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)
        for bn in (self.bn1, self.bn2):  # statistics that are not the identity
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.max_pool2d(y, 2)
        y = F.relu6(self.bn2(self.conv2(y)) + y)
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


class Block(nn.Module):
    """A pre-norm transformer block: attention (causal) + MLP with GELU."""

    def __init__(self, dim: int = 16, heads: int = 2, sdpa: bool = False) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:  # one op (fusec::sdpa -> ai.attention), not its decomposed maths
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=scores.device).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x * torch.rsqrt(variance + 1e-6)).to(x.dtype) * self.weight


def _rotate(x):
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)


class LlamaBlock(nn.Module):
    """A Llama-style decoder layer: RMSNorm, RoPE at run-time positions (a table lookup),
    grouped KV heads repeated, causal SDPA, a SiLU-gated MLP, no biases."""

    def __init__(self, dim: int = 64, heads: int = 4, kv_heads: int = 2, seq: int = 8) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.head, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.head, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, 2 * dim, bias=False)
        self.up = nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)
        inv = 1 / (10000 ** (torch.arange(0, self.head, 2).float() / self.head))
        angles = torch.outer(torch.arange(seq).float(), inv).repeat(1, 2)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def heads_of(self, x, count):
        b, t, _ = x.shape
        return x.view(b, t, count, self.head).transpose(1, 2)

    def forward(self, x, positions):
        b, t, d = x.shape
        y = self.norm1(x)
        q = self.heads_of(self.q(y), self.heads)
        k, v = self.heads_of(self.k(y), self.kv_heads), self.heads_of(self.v(y), self.kv_heads)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        q, k = q * cos + _rotate(q) * sin, k * cos + _rotate(k) * sin
        repeat = (b, self.kv_heads, self.heads // self.kv_heads, t, self.head)
        k, v = (z[:, :, None].expand(repeat).reshape(b, self.heads, t, self.head) for z in (k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Branchy(nn.Module):
    """A Python branch on data (a graph break) and an op fusec lacks (eager)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        y = torch.relu(self.a(x))
        if y.sum() > 0:  # data-dependent: Dynamo breaks the graph here
            y = y * 2
        y = torch.special.bessel_j0(y)  # no lowering: runs in eager
        return torch.tanh(self.b(y))


def _run(model: nn.Module, target: str, *shapes: tuple[int, ...], calls: int = 2) -> None:
    """Compile ``model`` with the fusec backend and compare each call with eager."""
    torch._dynamo.reset()
    model = model.eval()
    compiled = torch.compile(model, backend="fusec", options={"target": target})
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(calls):  # fresh inputs each call: no result is cached by accident
            args = [torch.randn(*s, generator=generator) for s in shapes]
            got = compiled(*args)
            want = model(*args)
            assert not torch.isnan(got).any()
            assert_close(got.numpy(), want.numpy())


@pytest.fixture(autouse=True)
def fresh_stats():
    fusec_torch.reset_stats()
    yield from quiet_torch_trace()


@pytest.mark.parametrize(
    "model, shapes",
    [
        (MLP, [(4, 16)]),
        (SmallCNN, [(2, 3, 8, 8)]),
        (Block, [(2, 5, 16)]),
        (lambda: Block(sdpa=True), [(2, 5, 16)]),
    ],
    ids=["mlp", "cnn", "transformer_block", "sdpa_block"],
)
def test_models_match_eager_on_the_reference_target(model, shapes) -> None:
    torch.manual_seed(0)
    _run(model(), "reference", *shapes)
    stats = fusec_torch.stats()
    assert stats["partitions"] == 1 and stats["targets"] == {"reference": 1}, stats
    assert stats["eager_nodes"] == 0 and stats["eager_partitions"] == 0, stats["remarks"]


def test_a_branch_and_an_unsupported_op_run_with_the_rest_compiled() -> None:
    torch.manual_seed(0)
    _run(Branchy(), "reference", (3, 8))
    stats = fusec_torch.stats()
    assert stats["graphs"] >= 2, stats  # the graph break
    assert stats["partitions"] >= 2 and stats["eager_nodes"] >= 1, stats
    assert any("special_bessel_j0" in r for r in stats["remarks"]), stats["remarks"]


def test_a_training_graph_runs_in_eager_with_a_remark() -> None:
    model = MLP()
    compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
    torch._dynamo.reset()
    x = torch.randn(4, 16)
    got = compiled(x)  # grad mode on and parameters that require grad
    got.sum().backward()  # eager autograd still works
    assert_close(got.detach().numpy(), model(x).detach().numpy())
    stats = fusec_torch.stats()
    assert stats["eager_graphs"] == 1 and stats["partitions"] == 0, stats
    assert "needs gradients" in stats["remarks"][0]


def test_changed_weights_compile_again() -> None:
    torch._dynamo.reset()
    model = MLP().eval()
    compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
    x = torch.randn(4, 16)
    with torch.no_grad():
        compiled(x)
        model.net[0].weight.mul_(-1.5)  # in place: the version counter moves
        assert_close(compiled(x).numpy(), model(x).numpy())
    assert fusec_torch.stats()["refreezes"] == 1


def test_dynamic_sizes_compile_once_per_shape() -> None:
    torch._dynamo.reset()
    model = MLP().eval()
    compiled = torch.compile(model, backend="fusec", dynamic=True, options={"target": "reference"})
    with torch.no_grad():
        for batch in (3, 5, 3):
            x = torch.randn(batch, 16)
            assert_close(compiled(x).numpy(), model(x).numpy())
    assert fusec_torch.stats()["specializations"] == 2


def test_bf16_and_f16_inputs_cross_as_numpy_views() -> None:
    torch._dynamo.reset()
    for dtype in (torch.float16, torch.bfloat16):
        model = MLP().to(dtype).eval()
        compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
        x = torch.randn(4, 16).to(dtype)
        with torch.no_grad():
            got, want = compiled(x), model(x)
        assert got.dtype == dtype
        assert_close(got.float().numpy(), want.float().numpy(), dtype="f16")


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, shapes",
    [
        (MLP, [(4, 16)]),
        (SmallCNN, [(2, 3, 8, 8)]),
        (Block, [(2, 5, 16)]),
        (lambda: Block(sdpa=True), [(2, 5, 16)]),
        (Branchy, [(3, 8)]),
    ],
    ids=["mlp", "cnn", "transformer_block", "sdpa_block", "branchy"],
)
def test_models_match_eager_on_the_cpu_target(model, shapes) -> None:
    torch.manual_seed(0)
    _run(model(), "cpu", *shapes)
    stats = fusec_torch.stats()
    assert stats["partitions"] >= 1 and stats["eager_partitions"] == 0, stats["remarks"]
    assert set(stats["targets"]) == {"cpu"}, stats


def test_outputs_are_torch_tensors_without_a_copy_on_cpu() -> None:
    """A partition's cpu result is a view of the numpy array the kernel wrote."""
    from fusec.torch import _from_numpy

    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = _from_numpy(array, torch.device("cpu"))
    tensor[0, 0] = 42.0
    assert array[0, 0] == 42.0


def test_a_result_fusec_lacks_leaves_its_node_to_eager() -> None:
    """max_pool2d's indices: the pool runs in eager, the rest is compiled."""

    class PoolIndices(nn.Module):
        def forward(self, x):
            y, indices = F.max_pool2d(x, 2, return_indices=True)
            return torch.relu(y) * 2, indices

    torch._dynamo.reset()
    compiled = torch.compile(PoolIndices(), backend="fusec", options={"target": "reference"})
    x = torch.randn(1, 2, 4, 4)
    with torch.no_grad():
        (y, indices), (want_y, want_indices) = compiled(x), PoolIndices()(x)
    assert_close(y.numpy(), want_y.numpy())
    assert torch.equal(indices, want_indices)
    stats = fusec_torch.stats()
    assert stats["eager_nodes"] == 1 and stats["eager_partitions"] == 0, stats
    assert "max_pool2d_with_indices" in stats["remarks"][0]
    assert "result #1 is used" in stats["remarks"][0]


def test_inference_mode_tensors_have_no_version_counter_to_check() -> None:
    torch._dynamo.reset()
    with torch.inference_mode():
        model = MLP().eval()  # parameters made in inference mode: inference tensors
        compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
        for _ in range(2):
            x = torch.randn(4, 16)
            assert_close(compiled(x).numpy(), model(x).numpy())
    assert fusec_torch.stats()["refreezes"] == 0


def test_an_unknown_option_is_refused_by_name() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(MLP(), backend="fusec", options={"tagret": "cpu"})
    with torch.no_grad(), pytest.raises(Exception, match="unknown option.*tagret"):
        compiled(torch.randn(4, 16))


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])
def test_a_llama_style_block_compiles_whole(target) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = LlamaBlock().eval()
    compiled = torch.compile(model, backend="fusec", options={"target": target})
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 8, 64)
            positions = torch.randint(0, 8, (2, 8))  # run-time positions: a table lookup
            assert_close(compiled(x, positions).numpy(), model(x, positions).numpy())
    stats = fusec_torch.stats()
    assert stats["partitions"] == 1 and stats["eager_nodes"] == 0, stats["remarks"]


def test_instances_of_one_model_class_keep_their_own_compilations() -> None:
    """Dynamo gives both instances one graph (their parameters are its inputs): each
    set of parameters has its compiled variant, none compiled again call after call."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    first, second = MLP().eval(), MLP().eval()  # different weights
    a = torch.compile(first, backend="fusec", options={"target": "reference"})
    b = torch.compile(second, backend="fusec", options={"target": "reference"})
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(3):
            assert_close(a(x).numpy(), first(x).numpy())
            assert_close(b(x).numpy(), second(x).numpy())
    stats = fusec_torch.stats()
    assert stats["partitions"] == 2, stats  # one compilation per instance, not per call
    assert stats["refreezes"] <= 1, stats  # the second set, if Dynamo shares the graph


@pytest.mark.slow
def test_a_partition_compiled_before_comes_from_the_program_cache(tmp_path, monkeypatch) -> None:
    """The cpu target's program cache (compile_onnx's): the same partition and weights
    after torch._dynamo.reset() are a hit, other weights a miss; all match eager."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSEC_PROGRAM_CACHE", raising=False)
    torch.manual_seed(0)
    model = SmallCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    for hits, scale in ((0, 1.0), (1, 1.0), (0, 2.0)):
        with torch.no_grad():
            model.fc.weight.mul_(scale)
        torch._dynamo.reset()
        fusec_torch.reset_stats()
        compiled = torch.compile(model, backend="fusec", options={"target": "cpu"})
        with torch.no_grad():
            assert_close(compiled(x).numpy(), model(x).numpy())
        stats = fusec_torch.stats()
        assert stats["partitions"] == 1 and stats["cached_partitions"] == hits, stats


THREADS_SCRIPT = """
import torch
torch.set_num_threads(1)
import fusec.torch
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).eval()
compiled = torch.compile(model, backend="fusec", options={"target": "cpu"})
with torch.no_grad():
    for _ in range(3):
        compiled(torch.randn(4, 16))
print(torch.get_num_threads(), fusec.torch.stats()["graphs"])
"""


@pytest.mark.slow
def test_the_first_kernel_leaves_torch_thread_count_alone() -> None:
    """Numba's OpenMP pool, started by the first cpu kernel of a fresh process, sets the
    OpenMP thread count PyTorch reads: the backend restores the caller's, so eager ops
    keep their speed and Dynamo's guard on it does not recompile the graph."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", THREADS_SCRIPT], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["1", "1"], done.stdout  # 1 thread, 1 Dynamo graph


def test_torch_backend_takes_precision() -> None:
    """``torch.compile(..., backend="fusec", options={"precision": "tf32"})``: passed to
    ``fusec.compile`` (the reference target computes IEEE f32 all the same); a bad value is
    refused by name before any compile."""
    torch._dynamo.reset()
    fusec_torch.reset_stats()
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    x = torch.randn(4, 16)
    options = {"target": "reference", "precision": "tf32"}
    with torch.no_grad():
        got = torch.compile(model, backend="fusec", options=options)(x)
        want = model(x)
    assert fusec_torch.stats()["partitions"] == 1
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()
    bad = torch.compile(model, backend="fusec", options={"precision": "high"})
    with torch.no_grad(), pytest.raises(Exception, match="precision='high' is not a precision"):
        bad(x)


class ManyParameters(nn.Module):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(count)])

    def forward(self, x):
        for w in self.weights:
            x = x * 0.5 + w
        return x


def _backend_frames_per_call(count: int) -> int:
    """Python frames of ``fusec/torch.py`` in one steady call of a model of ``count``
    parameters through the backend (reference target)."""
    import sys

    torch._dynamo.reset()
    model = ManyParameters(count).eval()
    compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
    x = torch.randn(3, 4)
    frames = 0

    def profile(frame, event, arg) -> None:
        nonlocal frames
        if event == "call" and frame.f_code.co_filename == fusec_torch.__file__:
            frames += 1

    with torch.no_grad():
        for _ in range(2):
            compiled(x)
        sys.setprofile(profile)
        try:
            got = compiled(x)
        finally:
            sys.setprofile(None)
        assert_close(got.numpy(), model(x).numpy())
    return frames


@pytest.mark.slow  # two Dynamo compilations: ~10 s on 2 cores
def test_the_parameter_check_of_a_call_costs_no_frame_per_parameter() -> None:
    """Issue 32: every call checks that the frozen parameters are the same tensors,
    unmodified; a transformer has hundreds, so that check is C-level work (one
    ``itemgetter``, ``map`` over ids and version counters): the backend's Python frames
    per call do not grow with the parameter count (before: two frames a parameter)."""
    few, many = _backend_frames_per_call(2), _backend_frames_per_call(16)
    assert many == few, (few, many)
    assert fusec_torch.stats()["refreezes"] == 0


def test_compiled_partitions_are_the_programs_the_calls_run() -> None:
    torch._dynamo.reset()
    model = MLP().eval()
    compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
    with torch.no_grad():
        compiled(torch.randn(4, 16))
    partitions = fusec_torch.compiled_partitions()
    assert [p.target for p in partitions] == ["reference"]
    assert "ai.matmul" in partitions[0].ir
    fusec_torch.reset_stats()
    assert fusec_torch.compiled_partitions() == []


class ConstantWork(nn.Module):
    """Work on the parameters alone: an op fusec lacks (``flip``), a scale and a mask of
    an ``arange``; and a result of the parameters alone that the caller gets."""

    def __init__(self) -> None:
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(12, 12)), nn.Parameter(torch.randn(12))

    def forward(self, x):
        w = torch.flip(self.w, dims=(0,)) * 0.5  # flip has no lowering
        keep = torch.arange(12) < 7
        return torch.relu(x @ w.t() + torch.where(keep, self.b, 0.0)), self.b * 2


def test_nodes_of_constants_alone_are_evaluated_once_at_compile_time() -> None:
    """Issue 32: before the partitioner splits the graph, every node whose inputs are
    all frozen parameters (or folded nodes) is evaluated once by PyTorch, as the ONNX
    importer folds constant subgraphs: the parameter's flip, which fusec cannot lower,
    ran in eager on every call (an eager node, a partition input) and now runs never."""
    torch.manual_seed(0)
    model = ConstantWork()
    _run_pairs(model, (5, 12))
    stats = fusec_torch.stats()
    assert stats["eager_nodes"] == 0 and stats["partitions"] == 1, stats["remarks"]
    assert stats["folded_nodes"] >= 5, stats  # flip, mul, t, arange, lt, where (then mul)
    with torch.no_grad():  # a changed parameter: folded again
        model.w.mul_(-2.0)
    _run_pairs(model, (5, 12), reset=False)
    assert fusec_torch.stats()["refreezes"] == 1


def test_a_folded_result_the_caller_gets_is_a_new_tensor_each_call() -> None:
    """The graph's outputs are never folded: a caller that writes into a result must
    not change the next call's (eager makes a new tensor every call)."""
    torch.manual_seed(0)
    model = ConstantWork()
    _run_pairs(model, (5, 12))
    compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
    with torch.no_grad():
        first = compiled(torch.randn(5, 12))[1]
        first.add_(100.0)
        assert_close(compiled(torch.randn(5, 12))[1].numpy(), (model.b * 2).numpy())


def test_random_numbers_are_not_folded() -> None:
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.rand(4)  # no input, but not a constant

    torch._dynamo.reset()
    compiled = torch.compile(Noisy(), backend="fusec", options={"target": "reference"})
    with torch.no_grad():
        x = torch.zeros(4)
        assert not torch.equal(compiled(x), compiled(x))


def _run_pairs(model: nn.Module, shape: tuple[int, ...], reset: bool = True) -> None:
    """``_run`` for a model with two results."""
    if reset:
        torch._dynamo.reset()
    compiled = torch.compile(model.eval(), backend="fusec", options={"target": "reference"})
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(*shape, generator=generator)
            for got, want in zip(compiled(x), model(x), strict=True):
                assert not torch.isnan(got).any()
                assert_close(got.numpy(), want.numpy())


def test_a_partition_that_fails_when_run_runs_in_eager_from_then_on(monkeypatch) -> None:
    """A graph that is one partition is called without the partitioned module's frame
    (``_direct_call``); a partition whose program fails when run still never fails the
    model: that call and every later one run in eager, with a remark saying why."""
    torch._dynamo.reset()
    model = MLP().eval()
    compiled = torch.compile(model, backend="fusec", options={"target": "reference"})
    runs = []
    with torch.no_grad():
        compiled(torch.randn(4, 16))

        def broken(self, tensors):
            runs.append(len(tensors))
            raise RuntimeError("launch failed")

        monkeypatch.setattr(fusec_torch._FusecCall, "run", broken)
        for seed in range(2):
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed))
            assert_close(compiled(x).numpy(), model(x).numpy())
    stats = fusec_torch.stats()
    assert runs == [1] and stats["eager_partitions"] == 1, (runs, stats)
    assert any("failed when run: RuntimeError: launch failed" in r for r in stats["remarks"])
