"""GPU tests of every CUDA template at realistic sizes (skipped without a GPU).

Outputs are poisoned with NaN before the launch; results are compared with the
float64 reference executor on fresh random inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cuda_cases import (
    layernorm_residual,
    pointwise_bias,
    pointwise_broadcast,
    pointwise_every_unary,
    pointwise_rope,
    pointwise_tail,
    random_inputs,
    softmax_axis,
    softmax_last,
)
from numerics import assert_close

pytestmark = pytest.mark.gpu

DTYPES = ["f16", "bf16", "f32"]


def _compile(text: str):
    import fusec

    return fusec.compile(text, target="cuda", pipeline="infer-shapes")


def _check(text: str, dtype: str, seed: int = 0) -> None:
    """Poisoned outputs vs the float64 reference with the kernels' rounding points, each
    at its own element type's tolerance."""
    from fusec.runtime.reference import run_reference

    compiled = _compile(text)
    args = random_inputs(compiled.module, seed)
    outs = compiled._runner(args, poison=True)
    refs = run_reference(compiled.module, args, rounding="groups")
    for k, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        assert_close(out, ref, what=f"{dtype} output #{k}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_pointwise_broadcast(dtype: str) -> None:
    _check(pointwise_broadcast(2048, 4096, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pointwise_tail(dtype: str) -> None:
    _check(pointwise_tail((1 << 22) + 3, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pointwise_every_unary_op(dtype: str) -> None:
    _check(pointwise_every_unary((1 << 20) + 5, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 32, 128, 128), (4, 8, 64, 6)], ids=["d128", "d6"])
def test_pointwise_rope(dtype: str, shape: tuple) -> None:
    """q * cos + rotate_half(q) * sin (issue 28): q read in place at both halves (VEC 8 at
    d128, 1 at d6's odd halves)."""
    _check(pointwise_rope(list(shape), dtype), dtype)


def test_rope_as_exported_is_one_kernel_on_the_gpu() -> None:
    """The head split, slices, neg and concat of an exported Llama RoPE through the cuda
    pipeline: one pointwise kernel that reads the head split in place, right against the
    float64 reference of the IR as written (outputs poisoned)."""
    import fusec
    from fusec.api import reference_outputs

    b, s, h, d = 2, 128, 8, 64
    q, half = f"tensor<{b}x{h}x{s}x{d}xf16>", f"tensor<{b}x{h}x{s}x{d // 2}xf16>"
    cs = f"tensor<{s}x{d}xf16>"
    flat, split = f"tensor<{b}x{s}x{h * d}xf16>", f"tensor<{b}x{s}x{h}x{d}xf16>"
    sizes = f"sizes = array<i64: {b}, {h}, {s}, {d // 2}>, strides = array<i64: 1, 1, 1, 1>"
    text = f"""
func.func @rope(%x: {flat}, %cos: {cs}, %sin: {cs}) -> {q} {{
  %v = ai.reshape %x {{shape = array<i64: {b}, {s}, {h}, {d}>}} : {flat}
  %q = ai.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : {split}
  %a = ai.mul %q, %cos : {q} * {cs}
  %lo = ai.slice %q {{offsets = array<i64: 0, 0, 0, 0>, {sizes}}} : {q}
  %hi = ai.slice %q {{offsets = array<i64: 0, 0, 0, {d // 2}>, {sizes}}} : {q}
  %n = ai.neg %hi : {half}
  %r = ai.concat %n, %lo {{axis = -1 : i64}} : {half} * {half}
  %c = ai.mul %r, %sin : {q} * {cs}
  %y = ai.add %a, %c : {q} * {q}
  return %y : {q}
}}
"""
    compiled = fusec.compile(text, target="cuda")
    # the head split's transpose read in place by the RoPE kernel (read-views-in-place,
    # ab315d4): one kernel, no copy (two before it; the GPU lane found it stale, 2026-12-07)
    assert [k.kind for k in compiled.kernels] == ["pointwise"]
    args = random_inputs(compiled.module, 5)
    (out,) = compiled._runner(args, poison=True)
    (want,) = reference_outputs(text, args)
    assert_close(out, want, "f16")


def test_pointwise_bias_nchw() -> None:
    _check(pointwise_bias(16, 64, 56, 56, "f16"), "f16")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(8192, 4096), (4096, 768), (1000, 100)])
def test_layernorm_residual(dtype: str, rows: int, cols: int) -> None:
    _check(layernorm_residual(rows, cols, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(8192, 4096), (4096, 128), (64, 30000)])
def test_softmax_last(dtype: str, rows: int, cols: int) -> None:
    _check(softmax_last(rows, cols, dtype), dtype)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_softmax_other_axis(dtype: str) -> None:
    _check(softmax_axis((16, 512, 256), 1, dtype), dtype)


def test_torch_tensors_in_and_out_on_the_callers_stream() -> None:
    torch = pytest.importorskip("torch")
    from fusec.runtime.reference import run_reference

    compiled = _compile(layernorm_residual(4096, 1024, "f16"))
    args = random_inputs(compiled.module, 3)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tensors = [torch.from_numpy(a).cuda() for a in args]
        h, out = compiled(*tensors)  # queued on `side`, no synchronisation inside
        assert isinstance(out, torch.Tensor) and out.device.type == "cuda"
        assert out.dtype == torch.float16 and out.shape == (4096, 1024)
    side.synchronize()
    refs = run_reference(compiled.module, args, rounding="groups")
    assert_close(h.cpu().numpy(), refs[0])
    assert_close(out.cpu().numpy(), refs[1])


def test_bf16_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    from fusec.runtime.reference import run_reference

    compiled = _compile(softmax_last(2048, 4096, "bf16"))
    args = random_inputs(compiled.module, 4)
    tensors = [torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16) for a in args]
    out = compiled(*tensors)
    assert out.dtype == torch.bfloat16
    got = out.float().cpu().numpy()
    assert_close(got, run_reference(compiled.module, args, rounding="groups")[0], "bf16")


def test_cuda_graph_replay() -> None:
    torch = pytest.importorskip("torch")
    from fusec.runtime.reference import run_reference

    compiled = _compile(pointwise_broadcast(1024, 1024, "f16"))
    args = random_inputs(compiled.module, 5)
    tensors = [torch.from_numpy(a).cuda() for a in args]
    graph = compiled.capture(*tensors)
    fresh = random_inputs(compiled.module, 6)
    for t, a in zip(graph.inputs, fresh, strict=True):
        t.copy_(torch.from_numpy(a))
    for out in graph.outputs:
        out.fill_(float("nan"))
    outs = graph.replay()
    torch.cuda.synchronize()
    refs = run_reference(compiled.module, fresh, rounding="groups")
    for out, ref in zip(outs, refs, strict=True):
        assert_close(out.float().cpu().numpy(), ref, "f16")


def test_cupy_arrays() -> None:
    cp = pytest.importorskip("cupy")
    from fusec.runtime.reference import run_reference

    compiled = _compile(pointwise_tail(100003, "f32"))
    args = random_inputs(compiled.module, 7)
    out = compiled(*(cp.asarray(a) for a in args))
    assert isinstance(out, cp.ndarray)
    assert_close(cp.asnumpy(out), run_reference(compiled.module, args, rounding="groups")[0])


def test_examples_run_on_cuda() -> None:
    """Every example graph through the default pipeline (fallback groups included),
    outputs poisoned, vs the reference with the program's rounding points, at the
    tolerance of the lowest precision each result passed through (f32: 1e-4)."""
    from pathlib import Path

    import fusec
    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference
    from fusec.tools.runner import lowest_precisions, op_by_op_groups

    examples = sorted(Path(__file__).parents[3].joinpath("examples").glob("*.mlir"))
    for path in examples:
        compiled = fusec.compile(str(path), target="cuda")
        args = random_inputs(compiled.module, 8)
        outs = compiled._runner(args, poison=True)
        groups = op_by_op_groups(compiled)
        refs = run_reference(compiled.module, args, rounding="groups", op_by_op_groups=groups)
        dtypes = lowest_precisions(entry_function(fusec.parse(str(path))))
        for out, ref, dtype in zip(outs, refs, dtypes, strict=True):
            assert_close(out, ref, dtype, what=path.name)


def test_second_process_loads_compiled_kernels_from_disk(tmp_path) -> None:
    """Numba's disk cache beside the cached module: the second process compiles nothing."""
    import json
    import os
    import subprocess
    import sys

    script = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import cuda_cases, fusec
from fusec.target import generate
from fusec.dialect import ops as ai
from fusec.targets.cuda.kernels import load_kernel_module
c = fusec.compile(cuda_cases.softmax_last(64, 1024, "f16"), target="cuda", pipeline="infer-shapes")
group = next(op for op in c.module.walk() if isinstance(op, ai.FusedOp))
module = load_kernel_module(generate(group, "cuda", "k0"))
stats = module.KERNELS[0][0].stats
hits, misses = sum(stats.cache_hits.values()), sum(stats.cache_misses.values())
print(json.dumps({{"hits": hits, "misses": misses}}))
"""
    env = dict(os.environ, FUSEC_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["misses"] >= 1 and runs[0]["hits"] == 0, runs
    assert runs[1]["hits"] >= 1 and runs[1]["misses"] == 0, runs
