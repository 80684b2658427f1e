"""``combine-projections`` (issues 28, 30): the q, k and v projections of one input (Hugging
Face's BERT and Llama: three ``nn.Linear``) become one GEMM over the concatenated weights,
whose column slices the attention kernels read in place. No GPU: the IR, the reference
before and after the pass, and the kernels the cuda and cpu targets plan."""

from __future__ import annotations

import pytest
from numerics import assert_close
from projection_cases import projections_graph

import fusec
from fusec.api import parse, run_pipeline
from fusec.ir.module import entry_function
from fusec.runtime.reference import run_reference
from fusec.tools.runner import random_inputs


def _ops(module) -> list[str]:
    return [op.name for op in entry_function(module).body.block.ops]


def _same_results(text: str, dtype: str = "f16", combine: str = "combine-projections") -> None:
    before, after = parse(text), parse(text)
    run_pipeline(before, "infer-shapes")
    run_pipeline(after, f"infer-shapes,{combine}")
    for seed in (0, 1):
        inputs = random_inputs(entry_function(before), seed=seed)
        for got, want in zip(
            run_reference(after, inputs), run_reference(before, inputs), strict=True
        ):
            assert_close(got, want, dtype, what=f"seed {seed}")


@pytest.mark.parametrize(
    "bias, dtype", [(True, "f16"), (False, "f16"), (True, "bf16")], ids=["bias", "no-bias", "bf16"]
)
def test_qkv_projections_become_one_gemm_and_slices(bias: bool, dtype: str) -> None:
    text = projections_graph(bias=bias, dtype=dtype)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 1 and ops.count("ai.slice") == 3, ops
    assert ops.count("ai.bias_add") == (1 if bias else 0)
    (matmul,) = [op for op in entry_function(module).body.block.ops if op.name == "ai.matmul"]
    assert str(matmul.results[0].type) == f"tensor<1x16x384x{dtype}>"
    offsets = [
        tuple(op.attr("offsets"))
        for op in entry_function(module).body.block.ops
        if op.name == "ai.slice"
    ]
    assert offsets == [(0, 0, 0), (0, 0, 128), (0, 0, 256)]
    _same_results(text, dtype)


def test_gqa_projections_of_different_widths_combine() -> None:
    """Llama's grouped-query attention: q 4 heads, k and v 2 each (widths 256, 128, 128),
    k and v repeated by ``ai.expand``: combined with ``repeated_heads`` (the cuda flash
    kernel reads the repeat in place), not without (the cpu kernel copies a slice before a
    repeat)."""
    text = projections_graph(heads=4, kv_heads=2)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true}")
    offsets = [
        tuple(op.attr("offsets"))[-1]
        for op in entry_function(module).body.block.ops
        if op.name == "ai.slice"
    ]
    assert offsets == [0, 256, 384]
    before, after = parse(text), parse(text)
    run_pipeline(before, "infer-shapes")
    inputs = random_inputs(entry_function(before), seed=0)
    (want,) = run_reference(before, inputs)
    (got,) = run_reference(module, inputs)
    assert_close(got, want, "f16")
    run_pipeline(after, "infer-shapes,combine-projections")
    assert _ops(after).count("ai.matmul") == 3


def test_a_projection_read_outside_the_attention_stays_its_own_gemm() -> None:
    """k's projection also feeds a relu: its GEMM stays; q and v still combine."""
    text = projections_graph(relu_on_k=True)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 2 and ops.count("ai.slice") == 2, ops
    _same_results(text)


def test_the_rope_of_q_and_k_becomes_one_chain_over_their_heads() -> None:
    """With ``rope``: q's and k's RoPE (the same ops, the same cos and sin) run once over
    the slice of both, split into 4 + 2 heads, and q and k are slices of its result along
    the heads; the values stay the same."""
    text = projections_graph(rope=True, bias=False, heads=4, kv_heads=2)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true rope=true}")
    ops = _ops(module)
    assert ops.count("ai.rotate_half") == 1 and ops.count("ai.mul") == 2, ops
    text_ir = str(module)
    assert "sizes = array<i64: 1, 16, 384>" in text_ir  # q's 256 and k's 128 columns
    assert "shape = array<i64: 1, 16, 6, 64>" in text_ir  # 4 + 2 heads
    _same_results(text, combine="combine-projections{repeated_heads=true rope=true}")


def test_rope_chains_that_differ_stay_apart() -> None:
    """k's RoPE reads its own sin: the chains are not the same ops, so each keeps its own
    (the projections still combine)."""
    text = projections_graph(rope=True, bias=False, heads=4, kv_heads=2)
    text = text.replace("%ks = ai.mul %kh, %sin", "%ks = ai.mul %kh, %cos")
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true rope=true}")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 1 and ops.count("ai.rotate_half") == 2, ops
    _same_results(text, combine="combine-projections{repeated_heads=true rope=true}")


def test_chains_over_heads_of_different_sizes_stay_apart() -> None:
    """k's heads of 16 and v's of 8 (the attention allows it) both through a rotate_half,
    side by side in the combined GEMM: not one chain (its heads would not be one size);
    found by a review, where the pass raised a shape error."""
    from pathlib import Path

    text = (Path(__file__).parent / "combine_rope_head_dims.mlir").read_text()
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true rope=true}")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 1 and ops.count("ai.rotate_half") == 2, ops
    _same_results(text, combine="combine-projections{repeated_heads=true rope=true}")
    fusec.compile(text, target="cuda", executable=False)


def test_projections_through_rope_combine_with_the_option() -> None:
    """q and k reach the attention through RoPE's elementwise ops: without ``rope`` the
    three GEMMs stay (their slices would not be read in place), with it they are one GEMM,
    v's slice, the slice of q's and k's columns and q's and k's heads of its RoPE, the
    same results."""
    text = projections_graph(rope=True, bias=False)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true}")
    assert _ops(module).count("ai.matmul") == 3
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true rope=true}")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 1 and ops.count("ai.slice") == 4, ops
    _same_results(text, combine="combine-projections{rope=true}")


@pytest.mark.parametrize("target", ["cuda", "cpu"])
@pytest.mark.parametrize("kv_heads", [2, 1], ids=["mha", "mqa"])
def test_the_targets_run_the_layer_as_one_gemm_and_the_attention(
    kv_heads: int, target: str
) -> None:
    """In the target's pipeline: one GEMM (the biases in its epilogue) and the attention
    kernel, which reads the three slices in place: no copy kernel between them (the cpu
    target copies the head merge of an attention whose result the function returns)."""
    text = projections_graph(kv_heads=kv_heads)
    compiled = fusec.compile(text, target=target, executable=False)
    kinds = [k.kind for k in compiled.kernels]
    if target == "cpu" and kv_heads == 1:  # the repeat: the projections stay apart
        assert kinds.count("matmul") == 3 and kinds.count("copy") == 1, kinds
        return
    assert kinds[:2] == ["matmul", "attention"] and kinds.count("matmul") == 1, kinds
    assert kinds[2:] == ([] if target == "cuda" else ["copy"]), kinds
    if target == "cuda":
        (attention,) = [k for k in compiled.kernels if k.kind == "attention"]
        assert "flash-style attention" in attention.source


def test_the_cuda_pipeline_runs_one_gemm_for_a_llama_layer() -> None:
    """``fusec-cuda``: the q, k and v projections of a Llama-style layer (RoPE on q and k)
    as one GEMM, one RoPE kernel over q's and k's heads together reading its slice in
    place (``read-views-in-place``), q, k and v read in place by the attention: three
    kernels (``fusec-cuda-rope-prologue``: two, the attention applying the RoPE itself)
    where ``fusec-cuda-separate-rope`` (the default before) runs three GEMMs and two RoPE
    kernels before the attention."""
    text = projections_graph(rope=True, bias=False, heads=4, kv_heads=2)
    separate = fusec.compile(
        text, target="cuda", pipeline="fusec-cuda-separate-rope", executable=False
    )
    assert [k.kind for k in separate.kernels].count("matmul") == 3
    prologue = fusec.compile(
        text, target="cuda", pipeline="fusec-cuda-rope-prologue", executable=False
    )
    kinds = [k.kind for k in prologue.kernels]
    assert kinds == ["matmul", "attention"], kinds
    combined = fusec.compile(text, target="cuda", executable=False)
    kinds = [k.kind for k in combined.kernels]
    assert kinds == ["matmul", "pointwise", "attention"], kinds
