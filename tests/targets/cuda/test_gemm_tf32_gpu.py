"""GPU tests of ``precision="tf32"`` (issue 28): f32 matmul on the Hopper GEMM with tf32
operands, f32 conv on cuDNN's tf32 kernels; f32 attention stays IEEE.

Each case runs the same graph twice on fresh random inputs, output poisoned (NaN) first:
compiled with ``precision="tf32"`` and with the default ("ieee"), both against the float64
reference executor. tf32 must be within 1e-2 (rel L2) and really tf32: its error above
1e-5 and ten times the IEEE run's (tf32 keeps 10 mantissa bits: ~1e-4..1e-3 off; IEEE f32
~1e-7..1e-6). Inputs are made and results read on a side torch stream.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _t(*dims: int) -> str:
    return f"tensor<{'x'.join(str(d) for d in dims)}xf32>"


def matmul_ir(m: int, n: int, k: int, *, tb: bool, batch=(), batch_b=False, tail="") -> str:
    """[batch] A (M x K) @ B (N x K with ``tb``, else K x N; batched with ``batch_b``), then
    ``tail``: "relu", "bias_relu" (2-D only) or "softmax"."""
    a = _t(*batch, m, k)
    b_dims = ((*batch,) if batch_b else ()) + ((n, k) if tb else (k, n))
    b, o = _t(*b_dims), _t(*batch, m, n)
    attr = " {transpose_b = true}" if tb else ""
    params = [f"%a: {a}", f"%b: {b}"]
    lines = [f"%v = ai.matmul %a, %b{attr} : {a} * {b}"]
    if tail == "bias_relu":
        params.append(f"%c: {_t(n)}")
        lines += [f"%w = ai.bias_add %v, %c : {o} * {_t(n)}", f"%y = ai.relu %w : {o}"]
    elif tail == "relu":
        lines.append(f"%y = ai.relu %v : {o}")
    elif tail == "softmax":
        lines.append(f"%y = ai.softmax %v : {o}")
    else:
        lines.append(f"%y = ai.relu %v : {o}")
    body = "\n  ".join(lines)
    return f"func.func @g({', '.join(params)}) -> {o} {{\n  {body}\n  return %y : {o}\n}}\n"


def conv_ir(n: int, c: int, hw: int, k: int, r: int) -> str:
    x, w = _t(n, c, hw, hw), _t(k, c, r, r)
    o = _t(n, k, hw - r + 1, hw - r + 1)
    return f"""func.func @g(%x: {x}, %w: {w}) -> {o} {{
  %y = ai.conv2d %x, %w : {x} * {w}
  return %y : {o}
}}
"""


ROOT = Path(__file__).resolve().parents[3]


def _run(text: str, precision: str, seed: int) -> tuple[float, object]:
    """(rel L2 error against the float64 reference, the compiled module)."""
    import fusec
    from fusec.dialect.ops import spec_of
    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(text, target="cuda", precision=precision)
    fn = entry_function(compiled.module)
    shapes = [spec_of(t).shape for t in fn.function_type.inputs.data]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        tensors = []
        for index, shape in enumerate(shapes):
            x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
            tensors.append(x / shape[-1] ** 0.5 if index == 1 else x)  # O(1) results
        (out,) = compiled._runner(tensors, poison=True)  # queued on `side`, NaN first
        got = out.float().cpu().numpy().astype(np.float64)
        inputs = [t.cpu().numpy() for t in tensors]
    ref = run_reference(compiled.module, inputs)[0].astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements never written"
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), compiled


def _check_tf32(text: str, seed: int = 0) -> object:
    rel, compiled = _run(text, "tf32", seed)
    ieee, _ = _run(text, "ieee", seed)
    assert rel < 1e-2, f"tf32 rel L2 {rel:.2e}"
    assert ieee < 1e-5, f"IEEE rel L2 {ieee:.2e}"
    assert rel > max(10 * ieee, 1e-5), f"tf32 {rel:.2e} vs IEEE {ieee:.2e}: tf32 did not run"
    return compiled


def _gemm_kernel(compiled) -> str:
    (source,) = [k.source for k in compiled.kernels if k.kind == "matmul"]
    return source


@pytest.mark.parametrize("m, n, k", [(1000, 1000, 1000), (4097, 511, 77), (128, 64, 8)])
def test_tf32_matmul_b_k_major(m: int, n: int, k: int) -> None:
    """B stored N x K (read in place; K = 77: rows padded for TMA), bias + relu epilogue."""
    compiled = _check_tf32(matmul_ir(m, n, k, tb=True, tail="bias_relu"))
    source = _gemm_kernel(compiled)
    assert "GemmLaunch" in source and "# precision: tf32" in source
    assert "Transpose(" not in source


@pytest.mark.parametrize(
    "m, n, k, batch, batch_b",
    [(1000, 768, 520, (), False), (300, 200, 136, (3,), False), (300, 200, 136, (3,), True)],
)
def test_tf32_matmul_b_n_major_is_copied_k_major(m, n, k, batch, batch_b) -> None:
    """The plain a @ b (B stored K x N, batched or not): B's K-major copy, then the GEMM."""
    text = matmul_ir(m, n, k, tb=False, batch=batch, batch_b=batch_b, tail="relu")
    source = _gemm_kernel(_check_tf32(text))
    assert "GemmLaunch" in source and "'bt')" in source


def test_tf32_matmul_transposed_a_is_copied_k_major() -> None:
    """An A stored K x M (transpose_a) and a B stored K x N: both copied K-major first."""
    a, b, o = _t(2, 136, 300), _t(2, 136, 200), _t(2, 300, 200)
    text = f"""func.func @g(%a: {a}, %b: {b}) -> {o} {{
  %v = ai.matmul %a, %b {{transpose_a = true}} : {a} * {b}
  return %v : {o}
}}
"""
    source = _gemm_kernel(_check_tf32(text))
    assert "'at')" in source and "'bt')" in source


def test_tf32_matmul_constant_weight_transposed_at_compile_time() -> None:
    """x @ W with W a constant stored K x N: tile-gemm stores it N x K (no transpose launch)."""
    w = np.random.default_rng(6).standard_normal((264, 200)).astype(np.float32) / 264**0.5
    rows = ", ".join("[" + ", ".join(f"{v!r}" for v in row.tolist()) + "]" for row in w)
    a, o = _t(1000, 264), _t(1000, 200)
    text = f"""func.func @g(%a: {a}) -> {o} {{
  %w = arith.constant dense<[{rows}]> : {_t(264, 200)}
  %v = ai.matmul %a, %w : {a} * {_t(264, 200)}
  %y = ai.relu %v : {o}
  return %y : {o}
}}
"""
    source = _gemm_kernel(_check_tf32(text))
    assert "GemmLaunch" in source and "Transpose" not in source


def test_tf32_matmul_row_softmax_epilogue() -> None:
    rel, compiled = _run(matmul_ir(2000, 200, 256, tb=True, tail="softmax"), "tf32", 3)
    assert "GemmLaunch" in _gemm_kernel(compiled)
    assert rel < 1e-2, f"tf32 rel L2 {rel:.2e}"


def test_tf32_second_call_reads_new_inputs() -> None:
    """The prepared launch (transpose + GEMM) on the same buffers with new contents."""
    import fusec

    compiled = fusec.compile(matmul_ir(256, 192, 64, tb=False), target="cuda", precision="tf32")
    a = torch.randn(256, 64, device="cuda")
    b = torch.randn(64, 192, device="cuda")
    first = compiled(a, b).clone()
    b.mul_(-1.0)
    second = compiled(a, b)
    want = torch.relu(a.double() @ b.double()).float()
    assert float((second - want).norm() / want.norm()) < 1e-2
    assert not torch.allclose(first, second)


def test_tf32_conv_runs_on_cudnn_tf32() -> None:
    compiled = _check_tf32(conv_ir(8, 64, 30, 128, 3))
    (source,) = [k.source for k in compiled.kernels if k.kind == "conv"]
    assert "tf32_conv2d(torch," in source


def test_tf32_leaves_f32_attention_ieee() -> None:
    """Not done yet (issue 28): f32 attention stays IEEE f32 under precision="tf32"."""
    rel, compiled = _run((ROOT / "examples" / "attention.mlir").read_text(), "tf32", 5)
    assert [k.kind for k in compiled.kernels] == ["attention"]
    assert rel < 1e-5, f"rel L2 {rel:.2e}"
