"""The fused form of each example graph: kernel counts, members, semantics.

These are the decisions the fusion issue asks for: conv/bias/relu is one conv
kernel; a ResNet block is two conv kernels, the second ending in the residual
add and relu; an MLP block is two matmul kernels (LayerNorm prologue + bias +
gelu, then bias + residual); layernorm -> matmul -> softmax is one kernel when
the row fits a tile and two otherwise; attention (recognised as ai.attention) is
one kernel; broadcast chains and values with two consumers.
"""

from __future__ import annotations

import pytest
from fusion_helpers import check_contract, count_ops, same_results, summary

import fusec
from fusec.api import run_pipeline
from fusec.runtime.reference import run_reference

LN, MM, SM = "ai.layernorm", "ai.matmul", "ai.softmax"

EXPECTED: dict[str, list[tuple[str, list[str]]]] = {
    "conv_bias_relu": [("conv", ["ai.conv2d", "ai.bias_add", "ai.relu"])],
    "resnet_block": [
        ("conv", ["ai.conv2d", "ai.bias_add", "ai.relu"]),
        ("conv", ["ai.conv2d", "ai.bias_add", "ai.add", "ai.relu"]),
    ],
    "mlp_block": [
        ("matmul", [LN, MM, "ai.bias_add", "ai.gelu"]),
        ("matmul", [MM, "ai.bias_add", "ai.add"]),
    ],
    "attention": [("attention", ["ai.attention"])],
    "ln_matmul_softmax_small": [("matmul", [LN, MM, SM])],
    "ln_matmul_softmax_large": [("matmul", [LN, MM]), ("row_reduce", [SM])],
    "elementwise_chain": [
        (
            "pointwise",
            ["ai.bias_add", "ai.mul", "ai.silu", "ai.maximum", "ai.cast"],  # m * sigmoid(m)
        )
    ],
    "two_consumers": [
        ("row_reduce", ["ai.mul", LN]),
        ("row_reduce", ["ai.mul", SM, "ai.add"]),
        ("matmul", [MM, "ai.gelu", "ai.sigmoid", "ai.mul"]),
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_fuses_as_planned(name, example):
    module = fusec.compile(example(name), target="reference").module
    assert summary(module) == EXPECTED[name]
    check_contract(module)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_semantics_preserved(name, example, random_args):
    before = example(name)
    after = fusec.compile(before, target="reference").module
    args = random_args(before)
    same_results(run_reference(before, args), run_reference(after, args))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_anchors_are_never_duplicated(name, example):
    """Fusion keeps each anchor once (recognition may make one anchor of several)."""
    before = example(name)
    run_pipeline(before, "infer-shapes,recognize-patterns")
    after = fusec.compile(before, target="reference").module
    for anchor in ("ai.conv2d", "ai.matmul", "ai.attention"):
        assert count_ops(after, anchor) == count_ops(before, anchor)


def test_two_consumers_clones_the_cheap_producer_and_keeps_h_once(example):
    after = fusec.compile(example("two_consumers"), target="reference").module
    assert count_ops(after, "ai.mul") == 3  # %t twice (one per row-reduce) + %y
    matmul_group = [f for f in after.walk() if getattr(f, "kind_name", "") == "matmul"][0]
    assert len(matmul_group.results) == 2  # %h and %y: a multi-output group


def test_softmax_tile_limit_is_a_parameter(example):
    small = example("ln_matmul_softmax_small")
    spec = "infer-shapes,fuse-prologue,fuse-epilogue{softmax_tile_limit=128},fuse-singletons"
    module = fusec.compile(small, pipeline=spec, target="reference").module
    assert [k for k, _ in summary(module)] == ["matmul", "row_reduce"]


def test_transposed_lhs_takes_no_layernorm_prologue():
    text = """
func.func @f(%x: tensor<8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %w: tensor<8x4xf32>) -> tensor<16x4xf32> {
  %n = ai.layernorm %x, %g, %b : tensor<8x16xf32> * tensor<16xf32> * tensor<16xf32>
  %h = ai.matmul %n, %w {transpose_a = true} : tensor<8x16xf32> * tensor<8x4xf32>
  return %h : tensor<16x4xf32>
}
"""  # noqa: E501
    module = fusec.compile(text, target="reference").module
    assert [k for k, _ in summary(module)] == ["row_reduce", "matmul"]
    check_contract(module)


def test_layernorm_feeding_three_matmuls_is_cloned_into_each():
    text = """
func.func @qkv(%x: tensor<8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) {
  %n = ai.layernorm %x, %g, %b : tensor<8x16xf32> * tensor<16xf32> * tensor<16xf32>
  %q = ai.matmul %n, %wq : tensor<8x16xf32> * tensor<16x16xf32>
  %k = ai.matmul %n, %wk : tensor<8x16xf32> * tensor<16x16xf32>
  %v = ai.matmul %n, %wv : tensor<8x16xf32> * tensor<16x16xf32>
  return %q, %k, %v : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}
"""  # noqa: E501
    module = fusec.compile(text, target="reference").module
    assert summary(module) == [("matmul", [LN, MM])] * 3
    check_contract(module)


def test_epilogue_that_would_close_a_cycle_is_refused():
    # %m feeds %r (joins the epilogue) and, through the second matmul, %out:
    # fusing %out into the first group would make the two groups depend on
    # each other.
    text = """
func.func @f(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %m = ai.matmul %x, %w : tensor<4x4xf32> * tensor<4x4xf32>
  %r = ai.relu %m : tensor<4x4xf32>
  %m2 = ai.matmul %r, %w : tensor<4x4xf32> * tensor<4x4xf32>
  %out = ai.add %m2, %r : tensor<4x4xf32> * tensor<4x4xf32>
  return %out : tensor<4x4xf32>
}
"""
    module = fusec.compile(text, target="reference").module
    assert summary(module) == [("matmul", [MM, "ai.relu"]), ("matmul", [MM, "ai.add"])]
    check_contract(module)


def test_a_diamond_of_cloned_producers_is_computed_once_per_kernel():
    # %t feeds both %e and %s; the row-reduce kernel clones the whole chain but
    # must hold one copy of %t, not one per path (CSE would remove the second
    # copy and a second pipeline run would then change the IR).
    text = """
func.func @f(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %t = ai.tanh %x : tensor<4x8xf32>
  %e = ai.exp %t : tensor<4x8xf32>
  %s = ai.add %e, %t : tensor<4x8xf32> * tensor<4x8xf32>
  %n = ai.layernorm %s, %g, %b : tensor<4x8xf32> * tensor<8xf32> * tensor<8xf32>
  return %n, %e : tensor<4x8xf32>, tensor<4x8xf32>
}
"""  # noqa: E501
    module = fusec.compile(text, target="reference").module
    assert summary(module) == [
        ("pointwise", ["ai.tanh", "ai.exp"]),
        ("row_reduce", ["ai.tanh", "ai.exp", "ai.add", LN]),
    ]
    check_contract(module)
    again = fusec.compile(module, target="reference").ir
    assert again == fusec.compile(text, target="reference").ir
