"""Integer and bool values on the cuda target (issue 29), without a GPU: where they run.

The Tensor Core GEMM and conv epilogues and the Numba row kernels hold floats only, so
their ``accepts`` refuse a group with an integer or bool value and the planner leaves
those ops to groups of their own; a pointwise group with integer or bool values (a mask
computed from ``attention_mask``) is a Numba kernel computing them as themselves
(tests/targets/cuda/test_integer_sim.py runs it), and a lookup at run-time ids runs through
PyTorch, the kernel header saying why.
"""

from __future__ import annotations

import pytest

import fusec
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import integer_values

pytestmark = pytest.mark.requires_target("cuda")

MATMUL_THEN_MASK = """
func.func @f(%a: tensor<64x64xf16>, %b: tensor<64x64xf16>, %m: tensor<64x64xi1>)
    -> tensor<64x64xf16> {
  %c = ai.matmul %a, %b : tensor<64x64xf16> * tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<f16>
  %r = ai.where %m, %zero, %c : tensor<64x64xi1> * tensor<f16> * tensor<64x64xf16>
  %s = ai.relu %r : tensor<64x64xf16>
  return %s : tensor<64x64xf16>
}
"""

CONV_THEN_COMPARE = """
func.func @f(%x: tensor<1x8x10x10xf16>, %w: tensor<16x8x3x3xf16>) -> tensor<1x16x8x8xi1> {
  %c = ai.conv2d %x, %w : tensor<1x8x10x10xf16> * tensor<16x8x3x3xf16>
  %z = arith.constant dense<0.0> : tensor<f16>
  %g = ai.greater %c, %z : tensor<1x16x8x8xf16> * tensor<f16>
  return %g : tensor<1x16x8x8xi1>
}
"""

LAYERNORM_THEN_COMPARE = """
func.func @f(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<8x64xi1> {
  %n = ai.layernorm %x, %g, %b : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
  %z = arith.constant dense<0.0> : tensor<f32>
  %p = ai.greater %n, %z : tensor<8x64xf32> * tensor<f32>
  return %p : tensor<8x64xi1>
}
"""


def _groups(text: str):
    compiled = fusec.compile(text, target="cuda", executable=False)
    groups = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    return compiled, groups


def _dtypes(group: ai.FusedOp) -> set[str]:
    values = [*group.block.args, *(r for op in group.body.walk() for r in op.results)]
    return {spec_of(v.type).dtype for v in values}


@pytest.mark.parametrize(
    ("text", "anchored"),
    [
        (MATMUL_THEN_MASK, "matmul"),
        (CONV_THEN_COMPARE, "conv"),
        (LAYERNORM_THEN_COMPARE, "row_reduce"),
    ],
    ids=["gemm", "conv", "row"],
)
def test_float_only_kernels_take_no_integer_value(text, anchored):
    compiled, groups = _groups(text)
    kinds = [g.kind_name for g in groups]
    assert anchored in kinds
    for group in groups:
        if group.kind_name == anchored:
            assert _dtypes(group) <= {"f16", "bf16", "f32"}, group
    pointwise = [k for k in compiled.kernels if k.kind == "pointwise"]
    assert pointwise and not any(k.runs_op_by_op for k in pointwise)
    assert "integer and bool values loaded, computed and stored" in pointwise[0].source


def test_the_refusal_names_the_op_and_its_type():
    module = fusec.parse(MATMUL_THEN_MASK)
    ops = [op for op in module.walk() if isinstance(op, ai.AiOp)]
    reason = integer_values(ops, "the cuda Tensor Core GEMM")
    assert reason == "the cuda Tensor Core GEMM computes floats: ai.where has i1 values"
    floats = [op for op in ops if not isinstance(op, ai.WhereOp)]
    assert integer_values(floats, "the cuda Tensor Core GEMM") is None


def test_a_lookup_runs_through_pytorch_and_an_integer_chain_as_a_numba_kernel():
    text = """
func.func @f(%ids: tensor<2x6xi64>, %t: tensor<50x16xf16>)
    -> (tensor<2x6x16xf16>, tensor<2x6xi64>) {
  %e = ai.take %t, %ids : tensor<50x16xf16> * tensor<2x6xi64>
  %three = arith.constant dense<3> : tensor<i64>
  %q = ai.div %ids, %three : tensor<2x6xi64> * tensor<i64>
  return %e, %q : tensor<2x6x16xf16>, tensor<2x6xi64>
}
"""
    compiled, _ = _groups(text)
    sources = {k.kind: k.source for k in compiled.kernels}
    assert "torch.index_select(" in sources["copy"]
    assert "TORCH_FALLBACK" not in sources["pointwise"]
    assert " // " in sources["pointwise"]  # an integer division, truncated inline
