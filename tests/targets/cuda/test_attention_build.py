"""Attention on cuda without a GPU: recognition, routing (flash kernel or PyTorch, and
why), the online-softmax model of the kernel, its SASS.

One concept: ``recognize-patterns`` makes ``ai.attention`` of the chain
matmul -> scale -> [mask] -> softmax -> matmul (written in .mlir, traced or exported),
the planner groups it as kind ``attention`` like any anchor, and the cuda
template runs it as the flash kernel when it can, else through PyTorch.
"""

from __future__ import annotations

import re

import attention_model as model
import numpy as np
import pytest
from attention_cases import (
    attention_graph,
    exported_attention_graph,
    scattered_heads_graph,
    sequence_first_mha_graph,
    strided_attention_graph,
)
from test_gemm_build import needs_toolchain, needs_toolchain_in_the_default_lane, sass_of

import fusec
from fusec.dialect import ops as ai
from fusec.targets.cuda.attention.cpp import AttentionSpec


def _groups(text: str, target: str = "cuda") -> list[ai.FusedOp]:
    compiled = fusec.compile(text, target=target, executable=False)
    return [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]


def _source(text: str) -> str:
    compiled = fusec.compile(text, target="cuda", executable=False)
    (kernel,) = compiled.kernels
    compile(kernel.source, kernel.name, "exec")
    return kernel.source


def _header(text: str) -> str:
    return _source(text).split("\n\n")[0]


# ------------------------------------------------------------ one attention op, one group


@pytest.mark.parametrize("target", ["cuda", "cpu", "reference"])
def test_the_chain_is_one_attention_group_on_every_target(target: str) -> None:
    (group,) = _groups(attention_graph((2, 3), 64, 80, 64, 64), target)
    assert group.kind_name == "attention"
    (op,) = [op for op in group.block.ops if not isinstance(op, ai.YieldOp)]
    assert isinstance(op, ai.AttentionOp) and op.attr("scale") == 0.125


def test_a_division_is_a_scale_and_the_causal_constant_is_the_kernels_mask() -> None:
    text = attention_graph((2,), 9, 9, 64, 64, scale="div", causal=True)
    (group,) = _groups(text)
    (op,) = [op for op in group.block.ops if isinstance(op, ai.AttentionOp)]
    assert op.attr("scale") == 0.125
    assert "causal" in _header(text) and "fused flash-style attention" in _header(text)


def test_shared_scores_are_no_attention() -> None:
    shared = (
        attention_graph((2,), 16, 16, 64, 64)
        .replace(
            "return %o : tensor<2x16x64xf16>",
            "return %o, %t : tensor<2x16x64xf16>, tensor<2x16x16xf16>",
        )
        .replace("-> tensor<2x16x64xf16> {", "-> (tensor<2x16x64xf16>, tensor<2x16x16xf16>) {")
    )
    assert "attention" not in {g.kind_name for g in _groups(shared)}


@pytest.mark.parametrize(
    "text, expected",
    [
        (attention_graph((4,), 100, 77, 64, 128), "scale 0.125;"),
        (attention_graph((2,), 64, 64, 128, 128, "bf16", scale="div"), "bf16 -> bf16"),
        (attention_graph((2,), 64, 5, 64, 64, scale="none"), "scale 1.0;"),
        # a causal mask of -1e4 reads -9984 in bf16: still masked (it fell back on the H200)
        (attention_graph((1,), 40, 40, 128, 128, "bf16", causal=True), "causal"),
        # row 0 masks its own key: no causal mask, read from memory (FUSEC_ATTENTION_MASKS=
        # index sends it to PyTorch: test_attention_mask.py)
        (
            attention_graph((2,), 9, 9, 64, 64, causal=True).replace(
                "[0.0, -1.0e4", "[-1.0e4, -1.0e4", 1
            ),
            "the mask read from memory",
        ),
    ],
)
def test_the_flash_kernel_takes_f16_and_bf16_with_heads_64_and_128(text, expected) -> None:
    header = _header(text)
    assert "fused flash-style attention" in header and expected in header


@pytest.mark.parametrize(
    "text, why",
    [
        (attention_graph((2,), 64, 64, 32, 32), "head sizes 32/32: the kernel takes 64 or 128"),
        (attention_graph((2,), 64, 64, 64, 64, "f32"), "f32 attention: the kernel takes f16"),
    ],
    ids=["head-32", "f32"],
)
def test_what_the_kernel_cannot_take_runs_through_pytorch_and_says_why(text, why) -> None:
    (group,) = _groups(text)
    assert group.kind_name == "attention"  # still one ai.attention, one launch
    header = _header(text)
    assert "FALLBACK" in header and why in header
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert any(why in str(r) and "ai.attention" in str(r) for r in compiled.remarks())


def test_the_example_is_one_attention_kernel_through_pytorch_in_f32() -> None:
    from pathlib import Path

    example = Path(__file__).parents[3] / "examples" / "attention.mlir"
    (group,) = _groups(example.read_text())
    assert group.kind_name == "attention"  # f32 and head size 32: the PyTorch path
    assert "FALLBACK" in _header(example.read_text())


# ------------------------------------------------------------ online softmax model


@pytest.mark.parametrize(
    "spec",
    [
        AttentionSpec(2, 200, 300, 64, 128, scale=0.125),  # ragged queries and keys
        AttentionSpec(1, 257, 257, 128, 64, scale=0.125, causal=True),
        AttentionSpec(2, 64, 5, 64, 64),  # fewer keys than one block, scale 1
    ],
    ids=["ragged", "causal", "short-keys"],
)
def test_online_softmax_model_matches_attention(spec: AttentionSpec) -> None:
    rng = np.random.default_rng(2)
    q = rng.standard_normal((spec.batch, spec.sq, spec.d)).astype(np.float16)
    k = rng.standard_normal((spec.batch, spec.sk, spec.d)).astype(np.float16)
    v = rng.standard_normal((spec.batch, spec.sk, spec.dv)).astype(np.float16)
    out, writes = model.run(spec, q, k, v)
    assert (writes == 1).all()
    ref = model.reference(q, k, v, spec.scale, spec.causal)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-3
    np.testing.assert_allclose(out, ref, atol=2e-3)


# ------------------------------------------------------------ operands read in place (issue 28)

STRIDED = {
    # GPT-2's fused QKV projection sliced, 8 query heads on 2 K/V heads, causal, odd length
    "packed-gqa-4-causal": strided_attention_graph(2, 37, 8, 2, 64, packed=True, causal=True),
    "mqa-d128": strided_attention_graph(1, 19, 4, 1, 128),  # one K/V head for all: stride 0
    "head-split": strided_attention_graph(2, 20, 4, 4, 64),
    "gqa-2-d128-bf16": strided_attention_graph(3, 9, 4, 2, 128, "bf16"),
    "exported-gpt2": exported_attention_graph(2, 24, 3, 64),  # the key transposed to (B,H,D,S)
    "batch-of-three-strides": scattered_heads_graph(2, 10, 3, 2, 64),  # 5-D tensor maps
}


def _one_attention_kernel(text: str):
    """The compiled graph's one kernel (no copy: the layout ops are in the attention group),
    its launcher (``ATTENTION`` of the generated module) and its group."""
    compiled = fusec.compile(text, target="cuda", executable=False)
    kinds = [k.kind for k in compiled.kernels]
    assert kinds == ["attention"], f"kernels {kinds}: the head split or merge left the kernel"
    (kernel,) = compiled.kernels
    assert "fused flash-style attention" in kernel.source.split("\n\n")[0]
    namespace: dict = {}
    exec(compile(kernel.source, kernel.name, "exec"), namespace)
    (group,) = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    return compiled, namespace["ATTENTION"], group


@pytest.mark.parametrize("name", list(STRIDED))
def test_the_kernel_reads_the_heads_and_writes_the_merge_in_place(name: str) -> None:
    """No copy kernel: the kernel's tensor maps (geometry and the batch coordinates of the
    generated C++) read q, k and v from the projections and ``out_offset`` writes the
    ``[B, S, H*D]`` result; their emulation on fresh inputs matches the reference, and each
    output element is written once."""
    from xdsl.ir import BlockArgument

    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    compiled, launch, group = _one_attention_kernel(STRIDED[name])
    spec = launch.spec
    assert spec.views, "a head split is not the contiguous layout"
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        buffers = [
            np.asarray(args[v.index], dtype=np.float64) if isinstance(v, BlockArgument) else None
            for v in group.operands
        ]
        ops = model.operands_as_addressed(spec, launch.inputs, buffers)
        result = model.reference(ops["q"], ops["k"], ops["v"], spec.scale, spec.causal)
        (ref,) = run_reference(compiled.module, args)
        got, writes = model.scatter_output(spec, result, ref.size)
        assert (writes == 1).all(), "every output element written once"
        ref = np.asarray(ref, dtype=np.float64).reshape(-1)
        assert np.isfinite(got).all()
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2, f"{name}, seed {seed}"


def test_views_reduce_a_head_repeat_to_stride_zero() -> None:
    """The GQA repeat K[b, h // group] as a layout: the repeat's digit of bh has stride 0,
    so the tensor map spans the K/V heads only (h // group is the map coordinate)."""
    from fusec.targets.cuda.attention.views import Layout, operand_view

    b, s, hk, g, d = 2, 5, 3, 4, 64
    layout = Layout.contiguous((b, s, hk * d)).reshape((b, s, hk, d))
    layout = layout.transpose((0, 2, 1, 3)).reshape((b, hk, 1, s, d))
    layout = layout.expand((b, hk, 1, s, d), (b, hk, g, s, d)).reshape((b, hk * g, s, d))
    view = operand_view(layout, s, d, broadcast=True, what="k")
    assert view.batch == ((b, s * hk * d), (hk, d), (g, 0)) and view.row_stride == hk * d
    assert view.map_atoms == ((b, s * hk * d, hk * g), (hk, d, g))
    assert "repeats" in operand_view(layout, s, d, broadcast=False, what="out")
    # a head dimension that is not contiguous, a misaligned slice: refused with the reason
    swapped = Layout.contiguous((b, hk, d, s)).transpose((0, 1, 3, 2))
    assert "not contiguous" in operand_view(swapped, s, d, broadcast=True, what="k")
    backwards = Layout.contiguous((b, s, 64)).slice((0, s - 1, 0), (b, s, 64), (1, -1, 1))
    assert "negative stride" in operand_view(backwards, s, 64, broadcast=True, what="q")
    sliced = Layout.contiguous((b, s, 200)).slice((0, 0, 4), (b, s, 64), (1, 1, 1))
    assert "aligned" in operand_view(
        sliced.reshape((b, s, 1, 64)).transpose((0, 2, 1, 3)), s, 64, broadcast=True, what="q"
    )


def test_an_operand_the_kernel_cannot_address_keeps_its_copy() -> None:
    """A head split whose head dimension is not contiguous (the heads interleaved along
    it) stays a copy kernel, and the attention group says nothing of it: the plan refused
    the layout op, so fusion left it out."""
    text = strided_attention_graph(1, 16, 2, 2, 64).replace(
        "%qs = ai.reshape %xq {shape = array<i64: 1, 16, 2, 64>} : tensor<1x16x128xf16>",
        "%qw = ai.reshape %xq {shape = array<i64: 1, 16, 64, 2>} : tensor<1x16x128xf16>\n"
        "  %qs = ai.transpose %qw {perm = array<i64: 0, 1, 3, 2>} : tensor<1x16x64x2xf16>",
    )
    assert "%qw" in text
    compiled = fusec.compile(text, target="cuda", executable=False)
    kinds = sorted(k.kind for k in compiled.kernels)
    assert kinds == ["attention", "copy"], kinds


@pytest.mark.parametrize(
    "args", [(2, 17, 2, 64, "f16"), (3, 9, 1, 128, "bf16")], ids=["b2-f16", "b3-d128-bf16"]
)
def test_sequence_first_attention_moves_its_transposes_into_the_kernel(args) -> None:
    """``attention-layout``: nn.MultiheadAttention's [B,S,E] <-> [S,B,E] transposes move
    across the projections (row-wise GEMMs) into the attention's head split and merge, so
    the layer is two GEMMs (the residual add in the second's epilogue) and the attention,
    no copy; the rewrite keeps the results (the reference before and after it)."""
    from numerics import assert_close

    from fusec.api import parse, run_pipeline
    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference
    from fusec.tools.runner import random_inputs

    text = sequence_first_mha_graph(*args)
    before, after = parse(text), parse(text)
    run_pipeline(before, "infer-shapes")
    run_pipeline(after, "infer-shapes,recognize-patterns,canonicalize,cse,attention-layout")
    ops = [op.name for op in entry_function(after).body.block.ops]
    matmuls = [i for i, name in enumerate(ops) if name == "ai.matmul"]
    assert ops[matmuls[0] - 1] != "ai.transpose", "the input projection reads the tokens"
    assert ops[matmuls[-1] - 1] == "ai.transpose", "the output projection reads merged rows"
    for seed in (0, 1):
        inputs = random_inputs(entry_function(before), seed=seed)
        (want,) = run_reference(before, inputs, rounding="groups")
        (got,) = run_reference(after, inputs, rounding="groups")
        assert_close(got, want, args[-1], what=f"seed {seed}")
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["matmul", "attention", "matmul"]
    (attention,) = [k for k in compiled.kernels if k.kind == "attention"]
    assert "read and written in place" in attention.source.split("\n\n")[0]
    assert "ai.add" in compiled.kernels[-1].source.split("\n\n")[0]  # the residual


def test_a_transpose_before_a_gemm_that_feeds_no_attention_stays() -> None:
    from fusec.api import parse, run_pipeline
    from fusec.ir.module import entry_function

    t, w, s = "tensor<2x8x64xf16>", "tensor<64x32xf16>", "tensor<8x2x64xf16>"
    text = (
        f"func.func @f(%x: {t}, %w: {w}) -> tensor<8x2x32xf16> {{\n"
        f"  %t = ai.transpose %x {{perm = array<i64: 1, 0, 2>}} : {t}\n"
        f"  %p = ai.matmul %t, %w : {s} * {w}\n"
        f"  %r = ai.relu %p : tensor<8x2x32xf16>\n"
        f"  return %r : tensor<8x2x32xf16>\n}}\n"
    )
    module = parse(text)
    run_pipeline(module, "infer-shapes,attention-layout")
    ops = [op.name for op in entry_function(module).body.block.ops]
    assert ops[:2] == ["ai.transpose", "ai.matmul"], ops


# ------------------------------------------------------------ generated C++


def test_tma_innermost_coordinates_are_16_byte_aligned() -> None:
    from test_conv_build import tma_innermost_coordinates

    source = AttentionSpec(2, 100, 70, 128, 64).cpp_source()
    # Config's load_q/k/v pass their column c0 on as the innermost coordinate ...
    coords = tma_innermost_coordinates(source)
    assert len(coords) == 3 and all(c == "c0" for c in coords), coords
    # ... which the kernel gives as whole 64-element (128-byte) chunks: one loop
    # (attention_load_tile) loads the Q, K and V tiles
    assert len(re.findall(r"attention_load_tile<[^>]*, C::load_[qkv]>\(", source)) == 3
    calls = re.findall(r"\bLOAD\(([^;]*)\);", source)
    columns = [re.split(r",\s*", call)[3].strip() for call in calls]
    assert columns == ["c * 64"], columns


SPECS = [
    AttentionSpec(32, 1024, 1024, 64, 64),
    AttentionSpec(16, 4096, 4096, 128, 128, "bf16", "bf16", scale=0.08838834764831845, causal=True),
]


@needs_toolchain
@pytest.mark.parametrize("spec", SPECS, ids=["d64-f16", "d128-bf16-causal"])
def test_attention_cubin(spec: AttentionSpec, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    built = build.build(spec, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert "setmaxnreg' ignored" not in built.log
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    qk = re.findall(r"HGMMA\.64x128x16\.F32\S* R\d+, gdesc", sass)
    pv = re.findall(rf"HGMMA\.64x{spec.dv}x16\.F32\S* R\d+, R\d+, gdesc\[UR\d+\]\.tnspB", sass)
    assert len(qk) == spec.d // 16, "Q K^T from shared memory"
    assert len(pv) == 128 // 16, "P V with P from registers"
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    assert "CALL" not in sass and "UTMALDG" in sass


@needs_toolchain
@pytest.mark.parametrize(
    "name", ["packed-gqa-4-causal", "gqa-2-d128-bf16", "mqa-d128", "batch-of-three-strides"]
)
def test_strided_attention_cubin(name: str, tmp_path) -> None:
    """The kernel reading the heads in place builds for sm_90a like the contiguous one (no
    spills, no local memory, TMA loads of the maps' rank: 5-D for a batch of three strides)."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    _, launch, _ = _one_attention_kernel(STRIDED[name])
    spec = launch.spec
    built = build.build(spec, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    rank = 2 + max(1, max(len(spec.view(r).map_atoms) for r in "qkv"))
    ptx = build.linked_ptx(spec)
    assert f"cp.async.bulk.tensor.{rank}d" in ptx
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    assert "CALL" not in sass and "UTMALDG" in sass


@needs_toolchain_in_the_default_lane
def test_nan_to_zero_specialises_the_kernel(tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    plain = AttentionSpec(2, 64, 64, 64, 64)
    guarded = AttentionSpec(2, 64, 64, 64, 64, nan_to_zero=True)
    assert "NAN_TO_ZERO = 0," in plain.cpp_source()
    assert "NAN_TO_ZERO = 1," in guarded.cpp_source()
    assert plain.key != guarded.key
    # PyTorch's export guards the probabilities against NaN: its flash kernel zeroes NaN rows
    text = exported_attention_graph(2, 64, 3, 64)
    compiled = fusec.compile(text, target="cuda", executable=False)
    (kernel,) = [k for k in compiled.kernels if k.kind == "attention"]
    assert "causal, NaN rows to 0;" in kernel.source.split("\n\n")[0]
    built = build.build(guarded, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)


def _mask_constant(values: np.ndarray):
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32

    attr = DenseIntOrFPElementsAttr.from_list(
        TensorType(f32, values.shape), values.astype(np.float32).reshape(-1).tolist()
    )
    return arith.ConstantOp(attr).result


def test_a_causal_mask_expanded_over_the_batch_is_the_kernels_causal_mask() -> None:
    """GPT-2 exported at batch > 1 writes its causal mask as (batch, 1, S, S): the same
    grid in every slice is the kernel's index-computed mask; one differing slice is not."""
    from fusec.targets.cuda.attention.template import mask_kind

    s = 6
    causal = np.where(np.triu(np.ones((s, s), dtype=bool), k=1), np.finfo(np.float32).min, 0.0)
    stacked = np.broadcast_to(causal, (3, 1, s, s)).copy()
    assert mask_kind(_mask_constant(stacked), s, s) == "causal"
    assert mask_kind(_mask_constant(np.zeros((3, 1, s, s))), s, s) == "none"
    stacked[1, 0, 2, 5] = 0.0  # one batch sees a future key: not the kernel's mask
    assert mask_kind(_mask_constant(stacked), s, s) is None
