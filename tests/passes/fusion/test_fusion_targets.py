"""Fusion plans for the target they run on: the target's templates judge every group.

The same graph fuses differently on cpu (every kind really fuses) and on cuda
(the Tensor Core conv and GEMM take f16/bf16 with an elementwise tail; what
they cannot take runs through PyTorch alone), and ``--remarks`` give the
target's reason. Planning needs no GPU: the targets' capabilities are facts.
"""

from __future__ import annotations

import fusec
from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai
from fusec.passes.fusion.driver import pipeline_rules
from fusec.passes.fusion.remarks import fusion_remarks


def _groups(text: str, target: str | None) -> list[tuple[str, list[str]]]:
    module = parse(text)
    run_pipeline(module, target=target)
    return [
        (op.kind_name, [inner.name for inner in op.block.ops if isinstance(inner, ai.AiOp)])
        for op in module.walk()
        if isinstance(op, ai.FusedOp)
    ]


CONV = """
func.func @f(%x: tensor<1x8x10x10xf16>, %w: tensor<16x8x3x3xf16>, %b: tensor<16xf16>)
    -> tensor<1x16x8x8xf16> {
  %c = ai.conv2d %x, %w : tensor<1x8x10x10xf16> * tensor<16x8x3x3xf16>
  %y = ai.bias_add %c, %b : tensor<1x16x8x8xf16> * tensor<16xf16>
  %r = ai.relu %y : tensor<1x16x8x8xf16>
  return %r : tensor<1x16x8x8xf16>
}
"""

CONV_F32 = CONV.replace("xf16>", "xf32>")


def _matmul(dtype: str, tail: str = "relu") -> str:
    t = f"tensor<64x64x{dtype}>"
    return f"""
func.func @f(%a: {t}, %b: {t}) -> {t} {{
  %m = ai.matmul %a, %b : {t} * {t}
  %r = ai.{tail} %m : {t}
  return %r : {t}
}}
"""


LN_MATMUL_SOFTMAX = """
func.func @f(%x: tensor<32x128xf16>, %g: tensor<128xf16>, %b: tensor<128xf16>,
             %w: tensor<128x256xf16>) -> tensor<32x256xf16> {
  %n = ai.layernorm %x, %g, %b : tensor<32x128xf16> * tensor<128xf16> * tensor<128xf16>
  %h = ai.matmul %n, %w : tensor<32x128xf16> * tensor<128x256xf16>
  %p = ai.softmax %h : tensor<32x256xf16>
  return %p : tensor<32x256xf16>
}
"""


def test_conv_epilogue_fuses_on_cpu_and_into_the_cuda_conv_templates():
    fused = [("conv", ["ai.conv2d", "ai.bias_add", "ai.relu"])]
    assert _groups(CONV, "cpu") == fused
    assert _groups(CONV, None) == fused
    assert _groups(CONV, "cuda") == fused  # the direct template (8 channels)


def test_conv_epilogue_not_fused_into_the_cuda_fallback():
    assert _groups(CONV_F32, "cpu") == [("conv", ["ai.conv2d", "ai.bias_add", "ai.relu"])]
    # an f32 conv runs alone through PyTorch on cuda: its epilogue is one fused kernel
    assert _groups(CONV_F32, "cuda") == [
        ("conv", ["ai.conv2d"]),
        ("pointwise", ["ai.bias_add", "ai.relu"]),
    ]


def test_cuda_gemm_takes_a_16_bit_matmul_with_its_elementwise_tail():
    assert _groups(_matmul("f16"), "cuda") == [("matmul", ["ai.matmul", "ai.relu"])]
    assert _groups(_matmul("bf16"), "cuda") == [("matmul", ["ai.matmul", "ai.relu"])]
    # f32 matmuls run through PyTorch (IEEE f32): the tail is a kernel of its own
    assert _groups(_matmul("f32"), "cuda") == [
        ("matmul", ["ai.matmul"]),
        ("pointwise", ["ai.relu"]),
    ]
    assert _groups(_matmul("f32"), "cpu") == [("matmul", ["ai.matmul", "ai.relu"])]


def test_cuda_matmul_takes_a_layernorm_prologue_and_a_softmax_epilogue():
    # the Tensor Core GEMM: LayerNorm pre-pass + rewrite, row softmax in the epilogue
    one_group = [("matmul", ["ai.layernorm", "ai.matmul", "ai.softmax"])]
    assert _groups(LN_MATMUL_SOFTMAX, "cuda") == one_group
    assert _groups(LN_MATMUL_SOFTMAX, "cpu") == one_group
    # in f32 the matmul runs through PyTorch (IEEE f32): nothing is fused into it
    assert _groups(LN_MATMUL_SOFTMAX.replace("f16", "f32"), "cuda") == [
        ("row_reduce", ["ai.layernorm"]),
        ("matmul", ["ai.matmul"]),
        ("row_reduce", ["ai.softmax"]),
    ]


def test_remarks_give_the_targets_reason():
    module = parse(CONV_F32)
    run_pipeline(module, target="cuda")
    (remark,) = fusion_remarks(module, pipeline_rules(None, target="cuda"))
    assert remark.producer == "ai.conv2d" and remark.consumer == "ai.bias_add"
    assert "the cuda conv templates cannot take the group (f32 conv: f32 graphs keep" in (
        remark.reason
    )


def test_compile_plans_for_the_resolved_target():
    compiled = fusec.compile(CONV_F32, target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["conv", "pointwise"]
    cpu = fusec.compile(CONV_F32, target="cpu", executable=False)
    assert [k.kind for k in cpu.kernels] == ["conv"]


def test_a_pass_option_names_the_target():
    module = parse(CONV_F32)
    stages = ("fuse-epilogue", "fuse-elementwise", "fuse-singletons")
    run_pipeline(module, ",".join(["infer-shapes", *(f"{s}{{target=cuda}}" for s in stages)]))
    kinds = [op.kind_name for op in module.walk() if isinstance(op, ai.FusedOp)]
    assert kinds == ["conv", "pointwise"]
