"""``sink-transposes`` (issue 28): Llama's head split moves below RoPE to the attention.

The rewrite must keep the meaning (the float64 reference gives the same results before
and after on random inputs) and leave no transpose inside the elementwise chain; the cpu
kernels of the whole pipeline must match the reference (poisoned outputs: NaN never
passes); cases that must not move are pinned."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from numerics import assert_close

import fusec
from fusec.api import run_pipeline
from fusec.dialect import ops as ai
from fusec.dialect.ops.elementwise import BinaryOp, UnaryOp
from fusec.runtime.reference import entry_function, run_reference
from fusec.tools import runner

#: Q and K of a GQA layer (4 query heads, 2 KV heads, head size 16, 8 tokens) after their
#: projections, split into heads before RoPE as HF's Llama writes it, cos/sin [1, 1, S, D]
ROPE_GQA = """
func.func @f(%xq: tensor<2x8x64xf32>, %xk: tensor<2x8x32xf32>, %v: tensor<2x4x8x16xf32>,
             %cos: tensor<1x1x8x16xf32>, %sin: tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %q0 = ai.reshape %xq {shape = array<i64: 2, 8, 4, 16>} : tensor<2x8x64xf32>
  %q = ai.transpose %q0 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32>
  %k0 = ai.reshape %xk {shape = array<i64: 2, 8, 2, 16>} : tensor<2x8x32xf32>
  %k = ai.transpose %k0 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x2x16xf32>
  %qa = ai.mul %q, %cos : tensor<2x4x8x16xf32> * tensor<1x1x8x16xf32>
  %qr = ai.rotate_half %q : tensor<2x4x8x16xf32>
  %qb = ai.mul %qr, %sin : tensor<2x4x8x16xf32> * tensor<1x1x8x16xf32>
  %qe = ai.add %qa, %qb : tensor<2x4x8x16xf32> * tensor<2x4x8x16xf32>
  %ka = ai.mul %cos, %k : tensor<1x1x8x16xf32> * tensor<2x2x8x16xf32>
  %kr = ai.rotate_half %k : tensor<2x2x8x16xf32>
  %kb = ai.mul %kr, %sin : tensor<2x2x8x16xf32> * tensor<1x1x8x16xf32>
  %ke = ai.add %ka, %kb : tensor<2x2x8x16xf32> * tensor<2x2x8x16xf32>
  %k1 = ai.reshape %ke {shape = array<i64: 2, 2, 1, 8, 16>} : tensor<2x2x8x16xf32>
  %k2 = ai.expand %k1 {shape = array<i64: 2, 2, 2, 8, 16>} : tensor<2x2x1x8x16xf32>
  %k3 = ai.reshape %k2 {shape = array<i64: 2, 4, 8, 16>} : tensor<2x2x2x8x16xf32>
  %z = arith.constant dense<0.000000e+00> : tensor<f32>
  %r = ai.attention %qe, %k3, %v, %z {scale = 2.500000e-01 : f32}
       : tensor<2x4x8x16xf32> * tensor<2x4x8x16xf32> * tensor<2x4x8x16xf32> * tensor<f32>
  return %r : tensor<2x4x8x16xf32>
}
"""


def _sunk(text: str):
    module = fusec.parse(text)
    return run_pipeline(module, "sink-transposes")


def _elementwise_reads_transpose(module) -> list[str]:
    found = []
    for op in module.walk():
        if isinstance(op, BinaryOp | UnaryOp | ai.RotateHalfOp):
            for operand in op.operands:
                if isinstance(operand.owner, ai.TransposeOp):
                    found.append(op.name)
    return found


def test_rope_runs_on_rows_and_keeps_its_meaning():
    before = fusec.parse(ROPE_GQA)
    after = _sunk(ROPE_GQA)
    assert not _elementwise_reads_transpose(after), str(after)
    ops = Counter(op.name for op in after.walk() if isinstance(op, ai.AiOp))
    assert ops["ai.transpose"] == 2, str(after)  # one per rotated operand, at the attention
    fn = entry_function(before)
    inputs = runner.random_inputs(fn, seed=5)
    want = run_reference(before, inputs, precision="float64")
    got = run_reference(after, inputs, precision="float64")
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, tol=1e-12)


@pytest.mark.slow  # cpu kernels compiled: ~11 s with an empty kernel cache
def test_cpu_kernels_match_the_reference_with_one_head_split_copy_fewer():
    """Q's head split joins the cpu attention group; K's stays a copy before the GQA head
    repeat (an ``ai.expand`` kernel on cpu), as it was."""
    module = fusec.parse(ROPE_GQA)
    compiled = fusec.compile(module, target="cpu")
    kinds = Counter(kernel.kind for kernel in compiled.kernels)
    unsunk = fusec.compile(
        fusec.parse(ROPE_GQA),
        target="cpu",
        pipeline="infer-shapes,recognize-patterns,canonicalize,cse,fuse,cpu-channels-last",
        executable=False,
    )
    assert Counter(kernel.kind for kernel in unsunk.kernels)["copy"] == 2
    assert kinds["copy"] == 1, kinds
    fn = entry_function(module)
    inputs = runner.random_inputs(fn, seed=7)
    want = run_reference(module, inputs, precision="float64")[0]
    got = np.asarray(compiled(*inputs))
    assert not np.isnan(got).any()
    assert_close(got, want, tol=1e-4)


@pytest.mark.parametrize(
    "body",
    [
        # the transposed value is also a result: moving would duplicate the transpose
        "%m = ai.mul %q, %q : T4 * T4\n  %o = ai.attention %m, %k, %k, %z {scale = 5.0e-01 : f32}"
        " : T4 * T4 * T4 * tensor<f32>\n  return %o, %q : T4, T4",
        # the chain ends in a result, not an attention
        "%m = ai.relu %q : T4\n  return %m, %k : T4, T4",
    ],
    ids=["other-reader", "no-attention"],
)
def test_not_moved(body: str):
    t4 = "tensor<1x2x3x4xf32>"
    text = (
        f"func.func @f(%x: tensor<1x3x2x4xf32>, %k: {t4}) -> ({t4}, {t4}) {{\n"
        "  %q = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x3x2x4xf32>\n"
        "  %z = arith.constant dense<0.0> : tensor<f32>\n  " + body.replace("T4", t4) + "\n}"
    )
    after = _sunk(text)
    assert _elementwise_reads_transpose(after), str(after)
