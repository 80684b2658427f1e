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


def _assert_same_meaning(before, after, tol: float) -> None:
    """The reference runs of ``before`` and ``after`` agree to ``tol`` on fresh inputs,
    with no NaN."""
    for seed in (1, 2):
        inputs = _inputs(before, seed)
        want = run_reference(before, inputs)[0]
        got = run_reference(after, inputs)[0]
        assert not np.isnan(got).any()
        assert_close(got, want, tol=tol)


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
    _assert_same_meaning(before, after, tol=1e-2 if half == "f16" else 3e-2)


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


def test_a_norm_f16_does_not_hold_computes_in_f32_and_its_readers_in_f16():
    """Gemma's RMSNorm scale ``1 + w`` folded in f32 is no f16 number: the norm computes in
    f32 as written, its result is rounded to f16 (the f16 model's norm ends in
    ``type_as(x)``, which the f32 tail made a no-op), and the projection reading it is an
    f16 GEMM again (before: it and everything after stayed f32, on cuda the PyTorch
    fallback: Gemma's TorchScript export, 9 fallbacks)."""
    scale = "dense<1.000000e+00> : tensor<128xf32>"
    text = SDPA.replace(scale, "dense<1.1> : tensor<128xf32>").replace(
        "  return %y : tensor<1x8x128xf32>",
        "  %w2 = arith.constant dense<1.250000e-01> : tensor<128x128xf32>\n"
        "  %z = ai.matmul %y, %w2 : tensor<1x8x128xf32> * tensor<128x128xf32>\n"
        "  return %z : tensor<1x8x128xf32>",
    )
    before = fusec.parse(text)
    after = run_pipeline(fusec.parse(text), PIPELINE)
    found = _dtypes(after)
    assert found[("ai.layernorm", "f32")] == 1 and found[("ai.matmul", "f16")] == 2, found
    norm = next(op for op in after.walk() if isinstance(op, ai.LayerNormOp))
    (use,) = norm.results[0].uses  # the rounding to f16, which the matmul reads
    assert isinstance(use.operation, ai.CastOp) and _dtype_of(use.operation) == "f16"
    _assert_same_meaning(before, after, tol=1e-2)


def _dtype_of(op) -> str:
    return spec_of(op.results[0].type).dtype


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
    _assert_same_meaning(before, after, tol=1e-2)


#: GPT-NeoX's second layer behind an upcast attention, its partial RoPE (rotate_half and
#: the concat of the rotated and passed-through head dims) f32, as the FileCheck test
#: states its facts
ROPE = (
    Path(__file__).parent / "filecheck" / "recognize" / "upcast_attention_rope.mlir"
).read_text()


def _f16_weights(text: str, seed: int) -> str:
    """``text`` with its splat projection weights random ones f16 holds exactly (f32
    constants, as the exporter folds f16 weights), so the numerics see a real mixing."""
    rng = np.random.default_rng(seed)
    for splat, shape in (
        ("dense<1.250000e-01> : tensor<128x128xf32>", (128, 128)),  # layer 0's output projection
        ("dense<6.250000e-02> : tensor<128x384xf32>", (128, 384)),
        ("dense<1.250000e-01> : tensor<128x128xf32>", (128, 128)),  # layer 1's
    ):
        values = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float16)
        raw = values.astype(np.float32).tobytes().hex().upper()
        assert splat in text
        text = text.replace(splat, f'dense<"0x{raw}"> : tensor<{shape[0]}x{shape[1]}xf32>', 1)
    return text


def test_a_later_layers_rope_and_attention_compute_in_f16_and_keep_their_meaning():
    """rotate_half (a move and a negation) and concat (a move) are exact in f16: the tail
    goes on through them, so layer 1's RoPE, attention and projections are f16 again.
    The reference before and after: the same maths (float64, no rounding), and, each op's
    result rounded to its type as PyTorch's f16 model rounds them, f16 precision."""
    text = _f16_weights(ROPE, seed=5)
    before = fusec.parse(text)
    after = run_pipeline(fusec.parse(text), PIPELINE)
    found = _dtypes(after)
    assert found[("ai.rotate_half", "f16")] == 2 and found[("ai.concat", "f16")] == 2, found
    assert found[("ai.attention", "f16")] == 2 and found[("ai.matmul", "f16")] == 3, found
    assert [key for key in found if key[1] == "f32"] == [("ai.cast", "f32")], found
    assert found[("ai.cast", "f32")] == 1, found  # the program's f32 result only
    for seed in (1, 2):
        inputs = _inputs(before, seed)
        want = run_reference(before, inputs)[0]
        assert_close(run_reference(after, inputs)[0], want, tol=1e-9)
        want = run_reference(before, inputs, rounding="every-op")[0]
        got = run_reference(after, inputs, rounding="every-op")[0]
        assert not np.isnan(got).any()
        assert_close(got, want, "f16")


def test_a_rope_table_f16_does_not_hold_keeps_rope_and_the_attention_in_f32():
    """A sin table of f32 values that are no f16 numbers (0.1; Gemma's folded (1 + w)
    norm scale is such a constant) is no upcast f16 weight: its product stays f32, and
    with it the concat and the attention; the rotate_half before it is f16 all the same."""
    table = "dense<1.000000e-01> : tensor<1x1x8x16xf32>"
    start = ROPE.index("%sin = arith.constant ") + len("%sin = arith.constant ")
    end = ROPE.index("tensor<1x1x8x16xf32>", start) + len("tensor<1x1x8x16xf32>")
    found = _dtypes(run_pipeline(fusec.parse(ROPE[:start] + table + ROPE[end:]), PIPELINE))
    assert found[("ai.rotate_half", "f16")] == 2, found
    assert found[("ai.mul", "f32")] == 2 and found[("ai.concat", "f32")] == 2, found
    assert found[("ai.attention", "f16")] == 1 and found[("ai.attention", "f32")] == 1, found


def test_cuda_runs_the_rope_tail_without_the_pytorch_fallback():
    """Compiled for cuda (kernels generated, nothing run): no group falls back to PyTorch
    (before the rotate_half and concat were demoted: the f32 attention and the f32 GEMMs
    after it did, 'the Tensor Core kernel takes f16 or bf16')."""
    program = fusec.compile(fusec.parse(_f16_weights(ROPE, 5)), target="cuda", executable=False)
    fallbacks = [
        next((line for line in k.source.splitlines() if "FALLBACK" in line), k.kind)
        for k in program.kernels
        if k.runs_op_by_op or "FALLBACK:" in k.source
    ]
    assert not fallbacks, fallbacks
    assert [k.kind for k in program.kernels].count("attention") == 2, program.kernels


#: layer 1 of a TorchScript export fed an ``attention_mask``: its f32 attention reads the
#: additive mask the graph computes at run time (here an input), not a constant
RUNTIME_MASK = (
    Path(__file__).parent / "filecheck" / "recognize" / "upcast_attention_runtime_mask.mlir"
).read_text()


def test_a_later_attention_with_a_mask_computed_at_run_time_computes_in_f16():
    """The f32 mask (the TorchScript exporter's ``where(keep, 0, -inf)`` of an
    ``attention_mask``; BERT's and GPT-2's later layers) is cast to f16 for the demoted
    attention, as ``recognize_attention`` casts layer 0's: before, the attention and every
    GEMM after it stayed f32 (on cuda the PyTorch fallback)."""
    before = fusec.parse(RUNTIME_MASK)
    after = run_pipeline(fusec.parse(RUNTIME_MASK), PIPELINE)
    found = _dtypes(after)
    assert found[("ai.attention", "f16")] == 2 and found[("ai.matmul", "f16")] == 1, found
    assert [key for key in found if key[1] == "f32"] == [("ai.cast", "f32")], found
    mask_casts = [
        op
        for op in after.walk()
        if isinstance(op, ai.CastOp) and op.input is entry_function(after).args[3]
    ]
    assert len(mask_casts) == 1 and spec_of(mask_casts[0].output.type).dtype == "f16"
    for seed in (1, 2):
        inputs = _inputs(before, seed)
        inputs[3][..., 5:] = -np.inf  # padded keys, as the exporter's mask has them
        want = run_reference(before, inputs)[0]
        got = run_reference(after, inputs)[0]
        assert not np.isnan(got).any()
        assert_close(got, want, tol=1e-2)
