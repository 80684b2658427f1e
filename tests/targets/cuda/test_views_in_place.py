"""``read-views-in-place`` (issue 28): a slice (and reshape) that only a pointwise group
reads moves into that group, whose kernel reads the slice's elements where they lie; a
chain the kernel cannot address, or that another group reads too, stays a copy. No GPU:
the kernels fusec plans (the numerics: ``test_cuda_sim.py``'s ``rope_slice`` cases)."""

from __future__ import annotations

import pytest
from cuda_cases import interleaved_rope, random_view_graph, slice_square, sliced_rope
from projection_cases import projections_graph

import fusec

pytestmark = pytest.mark.requires_target("cuda")

PIPELINE = "fusec-cuda"


def _kinds(text: str, pipeline: str = PIPELINE) -> list[str]:
    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    return [k.kind for k in compiled.kernels]


def test_a_sliced_rope_is_one_pointwise_kernel_reading_the_slice() -> None:
    text = sliced_rope(16, 4, 64, 512, 128, "f16")
    assert _kinds(text, "fusec-cuda-separate-rope") == ["copy", "pointwise"]
    compiled = fusec.compile(text, target="cuda", pipeline=PIPELINE, executable=False)
    (kernel,) = compiled.kernels
    assert "ai.slice -> ai.reshape -> ai.mul -> ai.rotate_half" in kernel.source
    # the slice's rows 512 apart, from column 128; the rotated half 32 columns away
    assert "b_in0 = 128 + i0 * 512 + i1 * 64 + i2" in kernel.source
    assert "load_f16x8(in0, b_in0 + rstep, v_in0_r, 0)" in kernel.source


def test_a_strided_last_dim_stays_a_copy() -> None:
    """Every second column: a vector would not be one access, so the copy stays."""
    text = sliced_rope(8, 2, 16, 128, 0, "f16").replace(
        "strides = array<i64: 1, 1, 1>", "strides = array<i64: 1, 1, 2>"
    )
    assert _kinds(text) == ["copy", "pointwise"]


def test_a_slice_whose_last_dim_is_one_element_stays_a_copy() -> None:
    """A column of one element: a vector would run down the rows, 8 apart."""
    assert _kinds(slice_square((4, 8), (0, 4), (4, 1), (1, 1), "f32")) == ["copy", "pointwise"]


def test_a_group_reading_one_input_through_two_views_is_refused() -> None:
    """Written by hand (the pass gives each chain its own group input): a clear error."""
    from fusec.errors import FusecError

    x, half = "tensor<4x32xf32>", "tensor<4x16xf32>"
    text = f"""func.func @f(%x: {x}) -> {half} {{
  %r = ai.fused "pointwise" (%x) : ({x}) -> ({half}) {{
  ^bb0(%x1: {x}):
    %a = ai.slice %x1 {{offsets = array<i64: 0, 0>, sizes = array<i64: 4, 16>, strides = array<i64: 1, 1>}} : {x}
    %b = ai.slice %x1 {{offsets = array<i64: 0, 16>, sizes = array<i64: 4, 16>, strides = array<i64: 1, 1>}} : {x}
    %m = ai.mul %a, %b : {half} * {half}
    ai.yield %m : {half}
  }}
  return %r : {half}
}}
"""  # noqa: E501
    with pytest.raises(FusecError, match="through two views"):
        fusec.compile(text, target="cuda", pipeline="infer-shapes", executable=False)


@pytest.mark.parametrize(
    "text",
    [
        sliced_rope(16, 4, 64, 512, 128, "f16"),
        slice_square((6, 20), (5, 4), (3, 16), (-2, 1), "f16"),
        slice_square((4, 8), (2, 3), (1, 1), (1, 1), "f32"),
        interleaved_rope(7, 3, 32, 1, "f16"),
    ],
    ids=["rope", "rows-back", "one-element", "interleaved-rope"],
)
def test_the_pass_keeps_the_values(text: str) -> None:
    """The reference executor on the pipeline's IR gives the input graph's values."""
    _assert_same_values(text)


#: the seeds whose draw is a graph (one that ends on a dim of one element is none)
DRAWN = [seed for seed in range(60) if random_view_graph(seed) is not None]


@pytest.mark.parametrize("seed", DRAWN)
def test_random_view_chains_keep_their_values(seed: int) -> None:
    """``random_view_graph`` (slices with outer steps 2 and -1, dims split, merged, added
    and dropped, broadcast operands, rotate_half, a second result): whether the chain moves
    in or stays a copy, the pipeline's IR gives the graph's values (under the simulator:
    ``test_cuda_sim.py``'s ``views_<seed>`` cases)."""
    text = random_view_graph(seed)
    assert text is not None
    _assert_same_values(text)


#: ... with a random transpose in the chain (the draws that hold one)
DRAWN_TRANSPOSED = [
    seed for seed in range(60) if "transpose" in (random_view_graph(seed, transposes=True) or "")
]


@pytest.mark.parametrize("seed", DRAWN_TRANSPOSED)
def test_random_view_chains_with_a_transpose_keep_their_values(seed: int) -> None:
    """A transpose in the chain: one keeping the last dim in place is a strided view the
    kernel reads in place, one moving it keeps the copy; the values either way."""
    text = random_view_graph(seed, transposes=True)
    assert text is not None
    _assert_same_values(text)


@pytest.mark.parametrize("part", [0, 1, 2])
def test_gpt_neox_rope_reads_the_interleaved_projection_in_place(part: int) -> None:
    """GPT-NeoX's q, k or v: the head split, the heads moved before the sequence and the
    part's slice are the pointwise kernel's strides (the survey of 2026-12-06: two copy
    kernels a layer before), heads 3 * D apart, the sequence H * 3 * D."""
    text = interleaved_rope(7, 3, 32, part, "f16")
    (kernel,) = fusec.compile(text, target="cuda", executable=False).kernels
    assert kernel.kind == "pointwise"
    offset = f"{32 * part} + " if part else ""
    assert f"b_in0 = {offset}i0 * 96 + i1 * 288 + i2" in kernel.source


def test_a_transpose_moving_the_last_dim_stays_a_copy() -> None:
    """A vector along the view's last dim would run down the input's rows."""
    text = """func.func @f(%x: tensor<4x8x16xf16>) -> tensor<4x16x8xf16> {
  %t = ai.transpose %x {perm = array<i64: 0, 2, 1>} : tensor<4x8x16xf16>
  %g = ai.sigmoid %t : tensor<4x16x8xf16>
  %y = ai.mul %t, %g : tensor<4x16x8xf16> * tensor<4x16x8xf16>
  return %y : tensor<4x16x8xf16>
}
"""
    assert _kinds(text) == ["copy", "pointwise"]


def test_a_slice_read_twice_stays_a_copy() -> None:
    """The slice is also a result of the function: its copy is needed anyway."""
    text = sliced_rope(8, 2, 16, 128, 32, "f16")
    split = "tensor<1x8x2x16xf16>"
    text = text.replace(f"-> {split} {{", f"-> ({split}, tensor<1x8x32xf16>) {{")
    text = text.replace(f"return %y : {split}", f"return %y, %p : {split}, tensor<1x8x32xf16>")
    assert sorted(_kinds(text)) == ["copy", "pointwise"]


def test_the_cuda_pipeline_computes_what_the_graph_does() -> None:
    """A Llama-style layer (GQA, RoPE on q and k) through ``fusec-cuda``:
    the reference executor on the pipeline's IR (one GEMM, the RoPE groups reading its
    slices through their own slice and reshape ops) gives the input graph's values."""
    text = projections_graph(rope=True, bias=False, heads=4, kv_heads=2)
    compiled = _assert_same_values(text)
    assert [k.kind for k in compiled.kernels] == ["matmul", "pointwise", "attention"]


def _assert_same_values(text: str):
    """``text`` through the pipeline: its IR on the reference executor gives the values of
    the input graph, bit for bit (two seeds); the compiled program."""
    import numpy as np

    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference
    from fusec.tools.runner import random_inputs

    compiled = fusec.compile(text, target="cuda", pipeline=PIPELINE, executable=False)
    original = fusec.compile(text, target="reference")
    for seed in (0, 1):
        inputs = random_inputs(entry_function(compiled.module), seed=seed)
        got, want = run_reference(compiled.module, inputs), run_reference(original.module, inputs)
        for g, w in zip(got, want, strict=True):
            assert np.isfinite(g).all() and np.array_equal(g, w)
    return compiled
