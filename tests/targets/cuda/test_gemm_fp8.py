"""The float8 Tensor Core GEMM without a GPU (issue 31): plans, tiles, kernel text, PTX and
SASS, and the located refusals.

A matmul whose operands are ``dequantize`` of float8 codes (scale 1, zero point 0: the
scales are moved after the product by ``recognize-patterns``) is the Hopper GEMM on the
codes: wgmma k32 with e4m3 or e5m2 operands, f32 accumulation, a BK = 128 tile. The GPU
tests are in ``test_gemm_fp8_gpu.py``.
"""

from __future__ import annotations

import re

import pytest
from fp8_cases import fp8_gemm_ir
from test_gemm_build import clean_sass, needs_toolchain, needs_toolchain_in_the_default_lane

import fusec
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.gemm import aux, cpp
from fusec.targets.cuda.gemm import template as gemm_template
from fusec.targets.cuda.gemm.config import TileConfig, as_fp8

pytestmark = pytest.mark.requires_target("cuda")


def _compile(text: str):
    return fusec.compile(text, target="cuda", executable=False, sms=132)


def _fused(compiled) -> ai.FusedOp:
    (group,) = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    return group


def _gemm(compiled):
    (kernel,) = [k for k in compiled.kernels if k.kind == "matmul"]
    return kernel


@pytest.mark.parametrize("dtype", ["f8E4M3FN", "f8E5M2"])
@pytest.mark.parametrize("tail", ["", "bf16", "bias_relu_f16"])
def test_dequantized_operands_are_one_float8_gemm(dtype: str, tail: str) -> None:
    """One group, no fallback: both dequantizes inside, the codes read by the kernel, the
    scales (and bias, relu, cast) in its epilogue."""
    compiled = _compile(fp8_gemm_ir(256, 384, 520, dtype=dtype, tail=tail))
    assert len(compiled.kernels) == 1
    kernel = _gemm(compiled)
    assert kernel.remark is None and "GemmLaunch" in kernel.source
    p = gemm_template.plan(_fused(compiled))
    assert not isinstance(p, str) and p.fp8 == dtype
    group = _fused(compiled)
    codes = [spec_of(group.inputs[i].type) for i in (p.a[0], p.b[0])]
    assert [(c.shape, c.dtype) for c in codes] == [((256, 520), dtype), ((384, 520), dtype)]
    (spec,) = kernel.specs
    assert spec.dtype == dtype and spec.config.bk == 128 and spec.config.mma_k == 32
    assert f"float8 codes: wgmma k32 reads the dequantized operands' {dtype} codes" in kernel.source
    assert "ai.mul -> ai.mul" in spec.epilogue.name


def test_per_tensor_and_per_column_scales_are_epilogue_inputs() -> None:
    """B's scale per column is an epilogue input read at the column; two per-tensor scales
    are one (``canonicalize`` folds their product)."""
    kernel = _gemm(_compile(fp8_gemm_ir(128, 384, 256, per_column=True, tail="")))
    (spec,) = kernel.specs
    assert spec.epilogue.extras == ("f32", "f32") and "fs_ld_f32(e1, i1)" in spec.epilogue.body
    kernel = _gemm(_compile(fp8_gemm_ir(128, 384, 256, per_column=False, tail="")))
    (spec,) = kernel.specs
    assert spec.epilogue.extras == ("f32",) and "fs_ld_f32(e0, 0)" in spec.epilogue.body


@pytest.mark.parametrize("a_dtype, b_dtype", [("f8E4M3FN", "f8E5M2"), ("f8E5M2", "f8E4M3FN")])
def test_mixed_float8_operands_are_one_gemm(a_dtype: str, b_dtype: str) -> None:
    """e4m3 by e5m2 (gradients' and activations' types meet so): one GEMM whose wgmma reads
    A's type and B's, said by its header."""
    compiled = _compile(fp8_gemm_ir(256, 384, 512, dtype=a_dtype, b_dtype=b_dtype))
    kernel = _gemm(compiled)
    assert len(compiled.kernels) == 1 and kernel.remark is None
    p = gemm_template.plan(_fused(compiled))
    assert not isinstance(p, str) and (p.fp8, p.fp8_b) == (a_dtype, b_dtype)
    (spec,) = kernel.specs
    assert (spec.dtype, spec.b_dtype) == (a_dtype, b_dtype)
    assert f"reads the dequantized operands' {a_dtype} x {b_dtype} codes" in kernel.source


@pytest.mark.parametrize("out", ["f8E4M3FN", "f8E5M2"])
def test_a_float8_quantize_of_the_result_is_the_gemms_store(out: str) -> None:
    """bias -> relu -> quantize to float8 (per-tensor scale, zero point 0, saturating): one
    GEMM whose epilogue divides by the scale and whose store converts (cvt.rn.satfinite),
    the direct epilogue, float8 codes out."""
    compiled = _compile(fp8_gemm_ir(256, 384, 512, tail=f"bias_relu_{out}"))
    kernel = _gemm(compiled)
    assert len(compiled.kernels) == 1 and kernel.remark is None
    (spec,) = kernel.specs
    assert spec.out_dtype == out and spec.config.epilogue == "direct"
    assert spec.epilogue.name.endswith(f"ai.quantize (stored as {out} codes)")
    assert re.search(r"y = \(t\d+ / fs_ld_f32\(e\d+, 0\)\);$", spec.epilogue.body)
    kind = "e4m3" if out == "f8E4M3FN" else "e5m2"
    assert f"cvt.rn.satfinite.{kind}x2.f32" in build_ptx(spec)


def test_a_float8_quantize_per_column_reads_its_scale_at_the_column() -> None:
    text = fp8_gemm_ir(128, 256, 256, tail="bias_relu_f8E4M3FN")
    text = text.replace(
        "%so = arith.constant dense<0.5> : tensor<f32>",
        "%so = arith.constant dense<0.5> : tensor<256xf32>",
    ).replace(
        "%zo = arith.constant dense<0.0> : tensor<f8E4M3FN>",
        # -0.0: not B's zero points after cse (one input under two broadcasts)
        "%zo = arith.constant dense<-0.0> : tensor<256xf8E4M3FN>",
    )
    text = text.replace(
        "%q = ai.quantize %yr, %so, %zo : tensor<128x256xf32> * tensor<f32> * tensor<f8E4M3FN>",
        "%q = ai.quantize %yr, %so, %zo {axis = 1 : i64} : tensor<128x256xf32> * "
        "tensor<256xf32> * tensor<256xf8E4M3FN>",
    )
    compiled = _compile(text)
    assert len(compiled.kernels) == 1
    (spec,) = _gemm(compiled).specs
    assert spec.out_dtype == "f8E4M3FN"
    assert re.search(r"y = \(t\d+ / fs_ld_f32\(e\d+, col\)\);$", spec.epilogue.body)


def test_an_onnx_fp8_layer_with_a_quantized_output_stores_codes() -> None:
    """ONNX's fp8 linear layer whose output is quantized again (Relu -> QuantizeLinear to
    e4m3, the next layer's input): the activations' quantize kernel and one GEMM storing
    the codes; the cpu target gives onnx's reference evaluator's codes bit for bit."""
    pytest.importorskip("onnx")
    import numpy as np
    from fp8_cases import fp8_qdq_onnx
    from onnx.reference import ReferenceEvaluator

    model, x = fp8_qdq_onnx(64, 128, 96, quantized_output=True)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    (spec,) = _gemm(compiled).specs
    assert spec.dtype == spec.out_dtype == "f8E4M3FN"
    assert spec.epilogue.name.endswith("ai.relu -> ai.quantize (stored as f8E4M3FN codes)")
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(x)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize(
    "change, reason",
    [
        ("saturate = false", "without saturation"),
        ("zero", "a zero point other than a constant 0"),
    ],
)
def test_a_float8_quantize_the_store_cannot_do_is_a_kernel_of_its_own(change, reason) -> None:
    text = fp8_gemm_ir(128, 256, 256, tail="bias_relu_f8E4M3FN")
    if change == "zero":
        text = text.replace("%zo = arith.constant dense<0.0>", "%zo = arith.constant dense<2.0>")
    else:
        text = text.replace(
            "%q = ai.quantize %yr, %so, %zo :",
            "%q = ai.quantize %yr, %so, %zo {saturate = false} :",
        )
    compiled = _compile(text)
    assert [k.kind for k in compiled.kernels] == ["matmul", "pointwise"]
    assert reason in str(compiled.remarks())


def test_a_b_stored_k_by_n_is_copied_k_major_first() -> None:
    """wgmma reads float8 codes K-major only: a run-time B stored K x N is copied N x K by
    one light launch (``aux.TransposeCodes``, the tf32 copy's kernel for bytes) into a
    scratch buffer the GEMM reads, said by the header."""
    compiled = _compile(fp8_gemm_ir(256, 384, 512, transpose_b=False, tail="bf16"))
    kernel = _gemm(compiled)
    assert len(compiled.kernels) == 1 and kernel.remark is None
    copier, spec = kernel.specs
    assert isinstance(copier, aux.TransposeCodes) and (spec.a_major, spec.b_major) == ("k", "k")
    copies = r"transposes=\(Transpose\(TransposeCodes\(\), \d+, 'bt'\),\)"
    assert re.search(copies, kernel.source)
    assert "b=('bt', 384, 512, 1)" in kernel.source  # the GEMM reads the N x K copy
    assert "float8 B stored K x N: copied K-major first" in kernel.source
    assert "transpose_elements<unsigned char" in copier.cpp_source()


@needs_toolchain_in_the_default_lane
def test_the_code_transpose_compiles_to_byte_moves() -> None:
    from fusec.targets.cuda import build

    ptx = build.ptx(aux.TransposeCodes())
    assert re.search(r"\bld\.\S*u8\b", ptx) and re.search(r"\bst\.\S*u8\b", ptx)
    assert ".local" not in ptx


def test_a_float8_operand_beside_a_float_one_runs_dequantized() -> None:
    """One operand float8 codes, the other bf16 values: no float8 GEMM (both operands are
    read as codes or neither); the dequantize runs as its own kernel and the GEMM on the
    bf16 values."""
    text = """func.func @g(%a: tensor<64x48xf8E4M3FN>, %b: tensor<32x48xbf16>) -> tensor<64x32xbf16> {
  %s = arith.constant dense<0.5> : tensor<bf16>
  %z = arith.constant dense<0.0> : tensor<f8E4M3FN>
  %x = ai.dequantize %a, %s, %z : tensor<64x48xf8E4M3FN> * tensor<bf16> * tensor<f8E4M3FN>
  %y = ai.matmul %x, %b {transpose_b = true} : tensor<64x48xbf16> * tensor<32x48xbf16>
  return %y : tensor<64x32xbf16>
}"""  # noqa: E501
    compiled = _compile(text)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    kernel = _gemm(compiled)
    assert kernel.remark is None and kernel.specs[-1].dtype == "bf16"


def test_plan_reasons() -> None:
    """The plan's own reasons, asked of the members fusion would pack."""
    ir = fp8_gemm_ir(64, 32, 48, tail="bias_relu_f8E4M3FN").replace(
        "%q = ai.quantize %yr, %so, %zo :", "%q = ai.quantize %yr, %so, %zo {saturate = false} :"
    )
    compiled = fusec.compile(ir, target="reference", pipeline="infer-shapes,recognize-patterns")
    ops = [op for op in compiled.module.walk() if isinstance(op, ai.AiOp)]
    reason = gemm_template.plan_members(ops)
    assert reason == "a float8 quantize without saturation, or per block (the store saturates)"
    # one dequantize joined, the other still outside: the state fusion passes through
    ir = fp8_gemm_ir(64, 32, 48)
    compiled = fusec.compile(ir, target="reference", pipeline="infer-shapes,recognize-patterns")
    ops = [op for op in compiled.module.walk() if isinstance(op, ai.AiOp)]
    dq_a = next(op for op in ops if isinstance(op, ai.DequantizeOp))
    matmul = next(op for op in ops if isinstance(op, ai.MatmulOp))
    p = gemm_template.plan_members([dq_a, matmul])
    assert not isinstance(p, str) and p.fp8 == "f8E4M3FN"


def test_float8_tile_configs() -> None:
    config = as_fp8(TileConfig())
    assert config.bk == 128 and config.fp8 and not config.tf32 and config.problems() == []
    assert config.a_stage_bytes == TileConfig().a_stage_bytes  # 128 bytes a row either way
    with pytest.raises(ValueError, match="float8 operands and a float8 tile"):
        cpp.GemmSpec(TileConfig(), "f8E4M3FN", "bf16", "k", "k")
    with pytest.raises(ValueError, match="float8 operands are K-major"):
        cpp.GemmSpec(config, "f8E4M3FN", "bf16", "k", "n")
    with pytest.raises(ValueError, match="ln=tile normalises 16-bit A tiles"):
        TileConfig(bk=128, ln="tile")


def test_reference_target_computes_the_graph() -> None:
    """The same graph on the reference executor (what the GPU tests compare with) is finite
    and scaled: the codes' product times 0.0625 x 0.125."""
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(3)
    a = (rng.standard_normal((16, 32)) * 3).astype(ml_dtypes.float8_e4m3fn)
    b = (rng.standard_normal((8, 32)) * 3).astype(ml_dtypes.float8_e4m3fn)
    out = fusec.compile(fp8_gemm_ir(16, 8, 32, tail="", per_column=False), target="reference")(a, b)
    want = a.astype(np.float32) @ b.astype(np.float32).T * (0.0625 * 0.125)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def build_ptx(spec) -> str:
    from fusec.targets.cuda import build

    return build.ptx(spec)


@needs_toolchain_in_the_default_lane
def test_float8_gemm_ptx_has_the_k32_wgmma() -> None:
    from fusec.targets.cuda import build

    kinds = {"f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}
    for a, b in (("f8E4M3FN",) * 2, ("f8E5M2",) * 2, ("f8E4M3FN", "f8E5M2")):
        (spec,) = _gemm(_compile(fp8_gemm_ir(2048, 2048, 2048, dtype=a, b_dtype=b))).specs
        ptx = build.ptx(spec)
        found = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k\d+\.\S+", ptx))
        wgmma = f"wgmma.mma_async.sync.aligned.m64n{spec.config.bn}k32.f32"
        assert found == {f"{wgmma}.{kinds[a]}.{kinds[b]}"}


@needs_toolchain
def test_float8_cubin_is_clean(tmp_path) -> None:
    """QGMMA (Hopper's float8 wgmma) ...x32 on e4m3 from TMA loads, no spills, no local
    memory."""
    (spec,) = _gemm(_compile(fp8_gemm_ir(4096, 4096, 4096, tail="bf16"))).specs
    sass = clean_sass(spec, tmp_path)
    hgmma = re.findall(r"QGMMA\.64x(\d+)x(\d+)\.F32\.E4M3\.E4M3", sass)
    assert hgmma and set(hgmma) == {(str(spec.config.bn), "32")}
    assert "UTMALDG" in sass


def _constant_weight_ir(values, tb: bool) -> str:
    """A (16 x 32 e4m3 codes) dequantized per tensor @ W, a 2-D f32 constant (32 x 8, or
    8 x 32 read ``transpose_b``), the f32 product."""
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in values)
    w = "tensor<8x32xf32>" if tb else "tensor<32x8xf32>"
    return f"""func.func @g(%a: tensor<16x32xf8E4M3FN>) -> tensor<16x8xf32> {{
  %s = arith.constant dense<0.5> : tensor<f32>
  %z = arith.constant dense<0.0> : tensor<f8E4M3FN>
  %w = arith.constant dense<[{rows}]> : {w}
  %x = ai.dequantize %a, %s, %z : tensor<16x32xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %y = ai.matmul %x, %w{" {transpose_b = true}" if tb else ""} : tensor<16x32xf32> * {w}
  return %y : tensor<16x8xf32>
}}
"""


@pytest.mark.parametrize("tb", [False, True], ids=["w-k-by-n", "w-n-by-k"])
def test_a_constant_weight_of_float8_values_is_read_as_codes(tb: bool) -> None:
    """``fp8-constant-weights``: a constant weight whose values are all e4m3 values becomes
    the float8 GEMM's B codes, stored N x K whichever way W was stored; the compiled
    module computes what the source does (the reference executor runs both)."""
    import ml_dtypes
    import numpy as np

    from fusec.runtime.reference import run_reference

    rng = np.random.default_rng(4)
    shape = (8, 32) if tb else (32, 8)
    values = (rng.standard_normal(shape) * 4).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    text = _constant_weight_ir(values, tb)
    compiled = _compile(text)
    assert [k.kind for k in compiled.kernels] == ["matmul"]
    kernel = _gemm(compiled)
    assert kernel.remark is None and kernel.specs[0].dtype == "f8E4M3FN"
    a = (rng.standard_normal((16, 32)) * 3).astype(ml_dtypes.float8_e4m3fn)
    want = fusec.compile(text, target="reference")(a)
    (got,) = run_reference(compiled.module, [a])
    np.testing.assert_array_equal(got, want)


def test_a_constant_weight_of_other_values_stays() -> None:
    """A weight with a value e4m3 rounds (0.1) is no float8 operand: the dequantize runs as
    a pointwise kernel and the product on the IEEE fallback."""
    import numpy as np

    values = np.full((32, 8), 0.1, np.float32)
    compiled = _compile(_constant_weight_ir(values, tb=False))
    kinds = [k.kind for k in compiled.kernels]
    assert kinds[:2] == ["pointwise", "matmul"] and set(kinds) == {"pointwise", "matmul"}
    assert "f32 x f32" in _gemm(compiled).remark.reason
