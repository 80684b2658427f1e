"""GPU tests of the float8 Tensor Core GEMM (issue 31): ``dequantize`` of e4m3 / e5m2 codes on
both operands -> matmul -> scales (per tensor, per column) -> tail, one wgmma k32 kernel.

Each case draws fresh codes (normal values of a few units, rounded to the float8 type on
the GPU), runs the compiled graph with its output poisoned (NaN) first on a side torch
stream, and compares with the float64 reference executor on the same codes: within 1e-2
(rel L2), the bound of every 8- and 16-bit kernel here. The products of float8 values are
exact, but Hopper's fp8 wgmma adds them with fewer bits than f32 (H100, 2026-12-05: 2e-4
to 8.5e-4 with an f32 output at K = 256..4096; benchmarks/results/gemm-fp8.md), so an f32
output is no tighter than that.
"""

from __future__ import annotations

import numpy as np
import pytest
from fp8_cases import fp8_gemm_ir

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

_TORCH_FP8 = {"f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2"}


def _run(text: str, seed: int) -> tuple[float, object]:
    """(rel L2 error against the float64 reference, the compiled module)."""
    import fusec
    from fusec.dialect.ops import spec_of
    from fusec.ir.dtypes import numpy_dtype
    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(text, target="cuda")
    fn = entry_function(compiled.module)
    specs = [spec_of(t) for t in fn.function_type.inputs.data]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        tensors, inputs = [], []
        for spec in specs:
            x = torch.randn(spec.shape, generator=gen, device="cuda", dtype=torch.float32) * 3
            if spec.dtype in _TORCH_FP8:
                x = x.to(getattr(torch, _TORCH_FP8[spec.dtype]))
                host = x.view(torch.uint8).cpu().numpy().view(numpy_dtype(spec.dtype))
            else:
                host = x.cpu().numpy()
            tensors.append(x)
            inputs.append(host)
        (out,) = compiled._runner(tensors, poison=True)  # queued on `side`, NaN first
        got = out.float().cpu().numpy().astype(np.float64)
    ref = run_reference(compiled.module, inputs)[0].astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements never written"
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), compiled


def _gemm_source(compiled) -> str:
    (source,) = [k.source for k in compiled.kernels if k.kind == "matmul"]
    return source


@pytest.mark.parametrize(
    "m, n, k, dtype, tail, per_column",
    [
        (1000, 1000, 1024, "f8E4M3FN", "", True),  # f32 out
        (4097, 511, 80, "f8E4M3FN", "bf16", True),  # ragged M, N; K = 80 < one k-block
        (256, 384, 520, "f8E4M3FN", "bias_relu_f16", False),  # K % 16 = 8: rows padded
        (2048, 2048, 2048, "f8E5M2", "bf16", True),
        (64, 64, 4096, "f8E4M3FN", "", False),  # split-K territory
    ],
)
def test_fp8_gemm_matches_the_reference(m, n, k, dtype, tail, per_column) -> None:
    text = fp8_gemm_ir(m, n, k, dtype=dtype, tail=tail, per_column=per_column)
    rel, compiled = _run(text, seed=m + n + k)
    source = _gemm_source(compiled)
    assert "GemmLaunch" in source and f"dtype='{dtype}'" in source and "bk=128" in source
    assert rel < 1e-2, f"rel L2 {rel:.2e}"


@pytest.mark.parametrize("a_dtype, b_dtype", [("f8E4M3FN", "f8E5M2"), ("f8E5M2", "f8E4M3FN")])
def test_mixed_fp8_gemm_matches_the_reference(a_dtype, b_dtype) -> None:
    """e4m3 x e5m2 codes: one wgmma of the two types."""
    text = fp8_gemm_ir(1000, 768, 1024, dtype=a_dtype, b_dtype=b_dtype, tail="bf16")
    rel, compiled = _run(text, seed=11)
    source = _gemm_source(compiled)
    assert f"dtype='{a_dtype}'" in source and f"b_dtype='{b_dtype}'" in source
    assert rel < 1e-2, f"rel L2 {rel:.2e}"


def test_fp8_gemm_of_a_b_stored_k_by_n_matches_the_reference() -> None:
    """A run-time B stored K x N: copied N x K (``TransposeCodes``) first, then the GEMM."""
    text = fp8_gemm_ir(1000, 768, 1040, transpose_b=False, tail="bf16")
    rel, compiled = _run(text, seed=17)
    assert "TransposeCodes()" in _gemm_source(compiled)
    assert rel < 1e-2, f"rel L2 {rel:.2e}"


@pytest.mark.parametrize("out", ["f8E4M3FN", "f8E5M2"])
def test_fp8_gemm_with_float8_output_matches_the_reference(out) -> None:
    """bias -> relu -> quantize to float8 codes in the epilogue: the decoded codes against
    the reference's (a code may differ where the fp8 wgmma's sum lands by a rounding
    boundary; rel L2 of the values < 1e-2, as every 8-bit kernel here)."""
    rel, compiled = _run(fp8_gemm_ir(1000, 768, 1024, tail=f"bias_relu_{out}"), seed=13)
    assert f"out_dtype='{out}'" in _gemm_source(compiled)
    assert rel < 1e-2, f"rel L2 {rel:.2e}"


def test_fp8_gemm_batched_a() -> None:
    """A with a batch dimension folded into M (B shared)."""
    rel, _ = _run(fp8_gemm_ir(300, 200, 256, batch=(3,), tail=""), seed=7)
    assert rel < 1e-2, f"rel L2 {rel:.2e}"


@pytest.mark.parametrize("dtype, saturate", [("f8E4M3FN", True), ("f8E5M2", False), ("i8", True)])
def test_quantize_dequantize_on_the_gpu_equal_the_reference(dtype, saturate) -> None:
    """The pointwise quantize -> dequantize kernel (the intrinsics of the cpu helpers):
    codes bit for bit the reference's, NaN/inf/huge inputs among them; the values
    ``(q - z) * s + x`` to a rounding (the GPU contracts the multiply and add into one FMA:
    H100, 2026-12-05, the only difference the run showed)."""
    from quant_sim import qdq_ir

    import fusec

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((37, 53)) * 200).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, 1e30, -0.0, 300.0]
    text = qdq_ir(dtype, saturate)
    compiled = fusec.compile(text, target="cuda")
    got = compiled._runner([x], poison=True)
    want = fusec.compile(text, target="reference")(x)
    assert np.array_equal(np.asarray(got[0]).view(np.uint8), np.asarray(want[0]).view(np.uint8))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=0)  # NaN, inf in place


def test_onnx_fp8_layer_with_quantized_output_matches_the_reference() -> None:
    """The layer's output quantized to e4m3 in the GEMM's store: the decoded codes against
    the reference executor's (a code may differ where the fp8 wgmma's sum lands by a
    rounding boundary; rel L2 of the values < 1e-2)."""
    pytest.importorskip("onnx")
    from fp8_cases import fp8_qdq_onnx

    import fusec

    model, x = fp8_qdq_onnx(1024, 2048, 768, quantized_output=True)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    assert compiled.kernels[1].specs[-1].out_dtype == "f8E4M3FN"
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (out,) = compiled._runner([torch.from_numpy(x).cuda()], poison=True)
        got = out.float().cpu().numpy().astype(np.float64)
    want = fusec.compile(fusec.from_onnx(model), target="reference")(x).astype(np.float64)
    assert not np.isnan(got).any()
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert rel < 1e-2, f"rel L2 {rel:.2e}"


def test_onnx_fp8_qdq_linear_runs_on_the_float8_gemm() -> None:
    """The ONNX fp8 QDQ linear layer (issue 31's done-when graph): the activations'
    quantize kernel, then the float8 GEMM on the weight's codes; against the reference
    executor on the same input (f32 out: the codes bit-exact; the fp8 wgmma's sums,
    H100 2026-12-05: 8.5e-4)."""
    pytest.importorskip("onnx")
    from fp8_cases import fp8_qdq_onnx

    import fusec

    model, x = fp8_qdq_onnx(1024, 2048, 768)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    assert compiled.kernels[1].specs[0].dtype == "f8E4M3FN"
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (out,) = compiled._runner([torch.from_numpy(x).cuda()], poison=True)
        got = out.cpu().numpy().astype(np.float64)
    want = fusec.compile(fusec.from_onnx(model), target="reference")(x).astype(np.float64)
    assert not np.isnan(got).any()
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert rel < 1e-2, f"rel L2 {rel:.2e}"
