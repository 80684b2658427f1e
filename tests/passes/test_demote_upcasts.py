"""The TorchScript exporter's upcast attention of an f16 model (issue 28): recognised as
the f16 attention cast to f32 (``recognize_attention``), its f32 tail computed in f16
again (``demote-upcasts``). The program keeps its meaning to f16 precision (reference
before and after, cpu kernels against the reference: rel L2 < 1e-2, NaN never passes);
what must stay f32 stays f32."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from numerics import assert_close

import fusec
from fusec.api import run_pipeline
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.runtime.reference import entry_function, run_reference
from fusec.tools import runner

#: the exporter's chain, as the FileCheck test states its facts
SDPA = (Path(__file__).parent / "filecheck" / "recognize" / "upcast_attention.mlir").read_text()
PIPELINE = "infer-shapes,recognize-patterns,canonicalize,cse,demote-upcasts"


def _dtypes(module) -> Counter:
    """(op name, result element type) of every ai op."""
    return Counter(
        (op.name, spec_of(op.results[0].type).dtype)
        for op in module.walk()
        if isinstance(op, ai.AiOp) and op.results
    )


def _inputs(module, seed: int) -> list[np.ndarray]:
    return runner.random_inputs(entry_function(module), seed=seed)


@pytest.mark.parametrize("half", ["f16", "bf16"])
def test_the_tail_computes_in_half_precision_and_keeps_its_meaning(half: str):
    text = SDPA.replace("f16", half)
    before = fusec.parse(text)
    after = run_pipeline(fusec.parse(text), PIPELINE)
    found = _dtypes(after)
    assert found[("ai.attention", half)] == 1, found
    assert found[("ai.matmul", half)] == 1 and found[("ai.layernorm", half)] == 1, found
    assert not [key for key in found if key[1] == "f32" and key[0] != "ai.cast"], found
    assert found[("ai.cast", "f32")] == 1, found  # the program's f32 result only
    for seed in (1, 2):
        inputs = _inputs(before, seed)
        want = run_reference(before, inputs)[0]
        got = run_reference(after, inputs)[0]
        assert not np.isnan(got).any()
        assert_close(got, want, tol=1e-2 if half == "f16" else 3e-2)


@pytest.mark.slow  # cpu kernels compiled: ~11 s with an empty kernel cache
def test_cpu_kernels_match_the_reference():
    module = fusec.parse(SDPA)
    compiled = fusec.compile(module, target="cpu")
    inputs = _inputs(module, 3)
    want = run_reference(module, inputs, precision="float64")[0]
    got = np.asarray(compiled(*inputs))
    assert not np.isnan(got).any()
    assert_close(got, want, tol=1e-2)


def test_weights_f16_does_not_hold_keep_the_projection_in_f32():
    """0.1 is no f16 number: the projection (and what follows it) stays f32; the
    attention is the f16 one all the same."""
    text = SDPA.replace(
        "dense<2.500000e-01> : tensor<128x128xf32>", "dense<0.1> : tensor<128x128xf32>"
    )
    found = _dtypes(run_pipeline(fusec.parse(text), PIPELINE))
    assert found[("ai.attention", "f16")] == 1, found
    assert found[("ai.matmul", "f32")] == 1 and found[("ai.layernorm", "f32")] == 1, found


def test_a_layernorm_whose_beta_f16_does_not_hold_stays_f32_and_leaves_no_constant():
    text = SDPA.replace("dense<0.000000e+00> : tensor<128xf32>", "dense<0.1> : tensor<128xf32>")
    after = run_pipeline(fusec.parse(text), PIPELINE)
    found = _dtypes(after)
    assert found[("ai.matmul", "f16")] == 1 and found[("ai.layernorm", "f32")] == 1, found
    dead = [op for op in after.walk() if op.name == "arith.constant" and not op.results[0].uses]
    assert not dead, dead


def test_f32_maths_not_after_an_attention_stays_f32():
    """An f32 product of an upcast f16 value the model wrote on purpose is left alone."""
    text = """
func.func @f(%x: tensor<4x8xf16>) -> tensor<4x8xf32> {
  %x32 = ai.cast %x : tensor<4x8xf16> to tensor<4x8xf32>
  %w = arith.constant dense<5.000000e-01> : tensor<8x8xf32>
  %y = ai.matmul %x32, %w : tensor<4x8xf32> * tensor<8x8xf32>
  return %y : tensor<4x8xf32>
}"""
    found = _dtypes(run_pipeline(fusec.parse(text), PIPELINE))
    assert found[("ai.matmul", "f32")] == 1, found


def test_softmax_upcast_and_back_is_the_half_attention():
    """HF's eager attention (probabilities cast back to f16): one f16 ai.attention, the
    same results to f16 precision."""
    path = Path(__file__).parent / "filecheck" / "recognize" / "softmax_upcast_and_back.mlir"
    text = path.read_text().split("// -----")[0]
    before = fusec.parse(text)
    after = run_pipeline(fusec.parse(text), "infer-shapes,recognize-patterns,canonicalize,cse")
    found = _dtypes(after)
    assert found == Counter({("ai.attention", "f16"): 1}), found
    for seed in (1, 2):
        inputs = _inputs(before, seed)
        want = run_reference(before, inputs)[0]
        got = run_reference(after, inputs)[0]
        assert not np.isnan(got).any()
        assert_close(got, want, tol=1e-2)
