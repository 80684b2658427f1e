"""GPU tests of weight-only int4 layers (W4A16, issue 31) on the cuda target.

A layer as ONNX writes it (``DequantizeLinear`` of an INT4 weight with per-block scales
and zero points along K -> ``MatMul``, activations f16 or bf16) keeps its weight as
codes: one pointwise kernel dequantizes them each call (scales per block of K), the
Tensor Core GEMM multiplies with a bias and GELU in its epilogue. Each case draws fresh
codes, scales and activations, runs with its output poisoned (NaN) first on a side torch
stream and compares with the float64 reference executor on the same inputs: rel L2 <
1e-2, the bound of every 16-bit kernel here.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

_TORCH = {"f16": "float16", "bf16": "bfloat16"}


def w4a16_ir(m: int, k: int, n: int, block: int, dtype: str, zero: bool) -> str:
    """x (M x K) @ dequantize(codes K x N, scales and zero points per ``block`` rows) +
    bias -> gelu; codes, scales and zero points are arguments (fresh each case)."""
    x, w, y = f"tensor<{m}x{k}x{dtype}>", f"tensor<{k}x{n}x{dtype}>", f"tensor<{m}x{n}x{dtype}>"
    q, b = f"tensor<{k}x{n}xi4>", k // block
    s, z, bias = f"tensor<{b}x{n}x{dtype}>", f"tensor<{b}x{n}xi4>", f"tensor<{n}x{dtype}>"
    zp = "%zp" if zero else "%z0"
    args = f"%x: {x}, %q: {q}, %s: {s}, %bias: {bias}" + (f", %zp: {z}" if zero else "")
    return f"""func.func @w4a16({args}) -> {y} {{
  %z0 = arith.constant dense<0> : {z}
  %w = ai.dequantize %q, %s, {zp} {{axis = 0 : i64, block_size = {block} : i64}} : {q} * {s} * {z}
  %p = ai.matmul %x, %w : {x} * {w}
  %a = ai.bias_add %p, %bias {{axis = 1 : i64}} : {y} * {bias}
  %g = ai.gelu %a : {y}
  return %g : {y}
}}
"""


def _inputs(m, k, n, block, dtype, zero, seed):
    """Host arrays (reference) and device tensors of the case's arguments."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    q = rng.integers(-8, 8, (k, n)).astype(np.int8)
    s = rng.uniform(0.01, 0.05, (k // block, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    z = rng.integers(-2, 3, (k // block, n)).astype(np.int8)
    host_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else np.float16
    floats = [a.astype(host_dtype) for a in (x, s, bias)]
    host = [floats[0], q.astype(ml_dtypes.int4), floats[1], floats[2]]
    host += [z.astype(ml_dtypes.int4)] if zero else []
    tdt = getattr(torch, _TORCH[dtype])
    dev = [
        torch.from_numpy(x).to("cuda", tdt),
        torch.from_numpy(q).to("cuda"),
        torch.from_numpy(s).to("cuda", tdt),
        torch.from_numpy(bias).to("cuda", tdt),
    ] + ([torch.from_numpy(z).to("cuda")] if zero else [])
    return host, dev


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize(
    "m, k, n, block, zero",
    [(1, 256, 128, 32, True), (16, 512, 192, 128, False), (200, 384, 256, 64, True)],
)
def test_w4a16_layer_matches_the_reference(m, k, n, block, zero, dtype):
    import fusec
    from fusec.runtime.reference import run_reference

    text = w4a16_ir(m, k, n, block, dtype, zero)
    compiled = fusec.compile(text, target="cuda")
    assert [kernel.kind for kernel in compiled.kernels] == ["pointwise", "matmul"]
    assert compiled.kernels[1].remark is None  # the Tensor Core GEMM, no fallback
    host, dev = _inputs(m, k, n, block, dtype, zero, seed=m * 7 + k)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (out,) = compiled._runner(dev, poison=True)  # queued on `side`, NaN first
        got = out.float().cpu().numpy().astype(np.float64)
    ref = run_reference(compiled.module, host)[0].astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements never written"
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2
