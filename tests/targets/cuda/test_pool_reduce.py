"""The cuda pool and reduce templates without a GPU or simulator: zoo shape, plans, PTX.

A ResNet-style block's pooling and means are Numba kernels (no PyTorch FALLBACK
header); the reduce plan's row and column cases; a group the kernels cannot serve
falls back with its reason; the kernels compile to PTX for sm_90 with NVVM.
(Numerics: test_pool_reduce_sim.py under the simulator, test_pool_reduce_gpu.py on a
GPU.)
"""

from __future__ import annotations

import re

import pytest
from pool_reduce_cases import channels_last_group, pool_program, reduce_program

from fusec.targets.cuda.env import simulator_enabled

pytestmark = pytest.mark.requires_target("cuda")


# --------------------------------------------------------------- ResNet / SE shape

RESNET_STEM = """
func.func @stem(%x: tensor<1x16x32x32xf16>, %w: tensor<64x16x3x3xf16>, %b: tensor<64xf16>,
                %w2: tensor<64x64x1x1xf16>, %w3: tensor<64x64x1x1xf16>) -> tensor<1x64xf16> {{
  %c = ai.conv2d %x, %w {{{pad}, {stride}}} : tensor<1x16x32x32xf16> * tensor<64x16x3x3xf16>
  %y = ai.bias_add %c, %b : tensor<1x64x16x16xf16> * tensor<64xf16>
  %r = ai.relu %y : tensor<1x64x16x16xf16>
  %p = ai.max_pool2d %r {{{kernel}, {stride}, {pad}}} : tensor<1x64x16x16xf16>
  %m = ai.reduce_mean %p {{axes = array<i64: 2, 3>, keepdims = true}} : tensor<1x64x8x8xf16>
  %s1 = ai.conv2d %m, %w2 : tensor<1x64x1x1xf16> * tensor<64x64x1x1xf16>
  %s2 = ai.relu %s1 : tensor<1x64x1x1xf16>
  %s3 = ai.conv2d %s2, %w3 : tensor<1x64x1x1xf16> * tensor<64x64x1x1xf16>
  %g = ai.hard_sigmoid %s3 : tensor<1x64x1x1xf16>
  %se = ai.mul %p, %g : tensor<1x64x8x8xf16> * tensor<1x64x1x1xf16>
  %gm = ai.reduce_mean %se {{axes = array<i64: 2, 3>}} : tensor<1x64x8x8xf16>
  return %gm : tensor<1x64xf16>
}}
""".format(
    pad="padding = array<i64: 1, 1>",
    stride="strides = array<i64: 2, 2>",
    kernel="kernel = array<i64: 3, 3>",
)


def test_resnet_style_block_has_no_pool_or_reduce_fallback() -> None:
    """The cuda target's kernels of a ResNet stem with a squeeze-and-excitation gate and
    the global mean before the classifier: the max pool and both means are Numba
    kernels, no PyTorch FALLBACK header among them."""
    import fusec

    compiled = fusec.compile(RESNET_STEM, target="cuda", executable=False)
    kinds = [k.kind for k in compiled.kernels]
    assert kinds.count("pool") == 1 and kinds.count("reduce") == 2, kinds
    for kernel in compiled.kernels:
        if kernel.kind in ("pool", "reduce"):
            assert "FALLBACK" not in kernel.source, kernel.source[:600]
            assert "@cuda.jit" in kernel.source


def test_emit_kernels_of_the_block_has_no_pool_or_reduce_fallback(tmp_path, capsys) -> None:
    """The same through ``fusec compile --emit kernels --target cuda``: every pool and
    reduce kernel's header names its Numba template, none says FALLBACK."""
    from fusec import cli

    path = tmp_path / "stem.mlir"
    path.write_text(RESNET_STEM)
    assert cli.main(["compile", str(path), "--emit", "kernels", "--target", "cuda"]) == 0
    text = capsys.readouterr().out
    headers = re.findall(
        r'# fusec kernel for one ai.fused "(pool|reduce)".*?\n# target: ([^\n]*)', text, re.S
    )
    assert sorted(kind for kind, _ in headers) == ["pool", "reduce", "reduce"], headers
    for kind, target in headers:
        assert target.startswith(f"cuda (Numba CUDA), template: {kind}"), target


CHAIN = """
func.func @chain(%x: tensor<2x64x16x16xf16>, %w1: tensor<64x64x3x3xf16>, %b1: tensor<64xf16>,
                 %w2: tensor<64x64x1x1xf16>) -> ({OUT}) {{
  %c1 = ai.conv2d %x, %w1 {{padding = array<i64: 1, 1>}} : {T16} * tensor<64x64x3x3xf16>
  %y1 = ai.bias_add %c1, %b1 : {T16} * tensor<64xf16>
  %r1 = ai.relu %y1 : {T16}
  %p = ai.max_pool2d %r1 {{{POOL}}} : {T16}
  %c2 = ai.conv2d %p, %w2 : tensor<2x64x8x8xf16> * tensor<64x64x1x1xf16>
  %r2 = ai.relu %c2 : tensor<2x64x8x8xf16>
  %m = ai.reduce_mean %r2 {{axes = array<i64: {AXES}>, keepdims = true}} : tensor<2x64x8x8xf16>
  %o = ai.sigmoid %m : {M}
  return {RET} : {OUT}
}}
"""


def _chain(axes: str = "2, 3", also_return_relu: bool = False) -> str:
    m = "tensor<2x64x1x1xf16>" if axes == "2, 3" else "tensor<2x64x1x8xf16>"
    out = m + (", tensor<2x64x16x16xf16>" if also_return_relu else "")
    return CHAIN.format(
        T16="tensor<2x64x16x16xf16>",
        POOL="kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>",
        AXES=axes,
        M=m,
        OUT=out,
        RET="%o, %r1" if also_return_relu else "%o",
    )


def _layouts(module, kind: str) -> list:
    from fusec.dialect import ops as ai
    from fusec.targets.cuda.conv.layouts import LAYOUT_ATTR

    out = []
    for op in module.walk():
        if isinstance(op, ai.FusedOp) and op.kind_name == kind:
            attr = op.attributes.get(LAYOUT_ATTR)
            out.append(None if attr is None else {k: v.data for k, v in attr.data.items()})
    return out


def _same_values(text: str, compiled) -> None:
    """The IR after the passes computes the source's values (transposes are exact)."""
    import numpy as np

    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    source = fusec.parse(text)
    args = random_inputs(entry_function(source), seed=3)
    for got, expected in zip(
        run_reference(compiled.module, args), run_reference(source, args), strict=True
    ):
        np.testing.assert_array_equal(got, expected)


def test_conv_layout_keeps_a_pool_and_a_mean_between_convs_channels_last() -> None:
    """conv -> max pool -> conv -> mean: the pool reads and stores NHWC, the mean reads
    NHWC (the column case), so no conversion is left but the graph inputs' and weights'."""
    import fusec
    from fusec.dialect import ops as ai

    text = _chain()
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert _layouts(compiled.module, "pool") == [{"input": "nhwc", "output": "nhwc"}]
    assert _layouts(compiled.module, "reduce") == [{"input": "nhwc", "output": "nchw"}]
    function_args = set(next(iter(compiled.module.ops)).body.block.args)
    copies = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    assert all(set(op.inputs) <= function_args for op in copies if op.kind_name == "copy")
    for kernel in compiled.kernels:
        if kernel.kind in ("pool", "reduce"):
            assert "FALLBACK" not in kernel.source
    (reduce_kernel,) = [k for k in compiled.kernels if k.kind == "reduce"]
    assert "the column case, of a transposed input" in reduce_kernel.source
    _same_values(text, compiled)


def test_conv_layout_leaves_nchw_readers_alone() -> None:
    """A conv result the function also returns stays NCHW (the pool reads it so, no
    conversion added, and stores NHWC for the next conv); a mean over H alone, which the
    transpose would reorder, is no channels-last reader (the conv before it stores
    NCHW)."""
    import fusec
    from fusec.dialect import ops as ai

    text = _chain(also_return_relu=True)
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert _layouts(compiled.module, "pool") == [{"input": "nchw", "output": "nhwc"}]
    function_args = set(next(iter(compiled.module.ops)).body.block.args)
    copies = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    assert all(set(op.inputs) <= function_args for op in copies if op.kind_name == "copy")
    _same_values(text, compiled)
    text = _chain(axes="2")
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert _layouts(compiled.module, "reduce") == [None]
    _same_values(text, compiled)


def test_resnet18_from_onnx_has_no_pool_or_reduce_fallback() -> None:
    """The exported ResNet-18 of tests/frontend/onnx/models on the cuda target: its max pool and
    its global average pool (a reduce_mean) are Numba kernels."""
    pytest.importorskip("onnx")
    from pathlib import Path

    import fusec
    from fusec.api import import_onnx

    path = Path(__file__).parents[2] / "frontend" / "onnx" / "models" / "resnet18.dynamo.onnx"
    if not path.exists():
        pytest.skip(f"{path} is missing (tests/frontend/onnx/models/export_models.py)")
    module = import_onnx(path, input_shapes={"x": (2, 3, 64, 64)}).module
    kernels = fusec.compile(module, target="cuda", executable=False).kernels
    ours = [k for k in kernels if k.kind in ("pool", "reduce")]
    assert sorted(k.kind for k in ours) == ["pool", "reduce"]
    assert not [k.name for k in ours if "FALLBACK" in k.source]


# ------------------------------------------------------------------ plans


def test_reduce_plan_row_and_column_cases() -> None:
    from fusec.targets.cuda.reduce import make_plan

    row = make_plan((32, 2048, 7, 7), {2, 3})  # NCHW global mean: rows of 49
    assert (row.outer, row.inner, row.length, row.tx) == (32 * 2048, 1, 49, 1)
    assert row.ty * row.z == 256 and row.ty == 8
    col = make_plan((32, 7, 7, 2048), {1, 2})  # NHWC global mean: columns over C
    assert (col.outer, col.inner, col.length, col.tx) == (32, 2048, 49, 32)
    assert col.tx * col.ty * col.z == 256
    long_row = make_plan((1, 3, 200, 200), {2, 3})
    assert (long_row.ty, long_row.z) == (256, 1)  # one block per row
    # size-1 dims drop out, neighbours alike merge: axes 0 and 2 of (4, 1, 5, 6) -> rows
    split = make_plan((4, 1, 5, 6), {0, 2})
    assert split.groups == ((20, True), (6, False))
    assert (split.outer, split.inner, split.length) == (1, 6, 20)


def test_a_channels_last_mean_of_few_tiles_splits_into_short_lanes() -> None:
    """EfficientNet-B0 b1's squeeze-excite means: 3 tiles of 8 lanes x 392 elements ran
    25.5 us in one pass on an H100 (lanes split only past 512 elements); now parts of at
    most PART_LANE elements a lane, and the short reductions stay one pass."""
    from fusec.targets.cuda.reduce import PART_LANE, make_plan

    se = make_plan((1, 56, 56, 96), {1, 2})
    assert (se.outer, se.inner, se.length, se.ty, se.blocks) == (1, 96, 3136, 8, 3)
    assert se.split == 13 and -(-se.chunk // se.ty) <= PART_LANE
    assert make_plan((1, 28, 28, 240), {1, 2}).split == 4  # 98 elements a lane
    assert make_plan((1, 14, 14, 480), {1, 2}).split == 1  # 25 a lane: one pass
    assert make_plan((1, 32, 112, 112), {2, 3}).split == 1  # rows: 49 a lane of 256
    assert make_plan((32, 7, 7, 2048), {1, 2}).split == 1  # many tiles


def test_collapse_keeps_runs_alike() -> None:
    from fusec.targets.cuda.reduce import collapse_axes

    assert collapse_axes((2, 3, 1, 4, 5), {1, 3}) == [(2, False), (12, True), (5, False)]
    assert collapse_axes((2, 3, 4), {0, 2}) == [(2, True), (3, False), (4, True)]


def _group_source(text: str, pipeline: str = "infer-shapes") -> list:
    import fusec

    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    return compiled.kernels


def test_a_group_with_a_prologue_falls_back_with_its_reason() -> None:
    text = """
func.func @f(%x: tensor<2x3x4xf32>) -> tensor<2x3x1xf32> {
  %r = ai.fused "reduce" (%x) : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32> {
  ^bb0(%x1: tensor<2x3x4xf32>):
    %e = ai.exp %x1 : tensor<2x3x4xf32>
    %s = ai.reduce_sum %e {axes = array<i64: 2>, keepdims = true} : tensor<2x3x4xf32>
    ai.yield %s : tensor<2x3x1xf32>
  }
  return %r : tensor<2x3x1xf32>
}
"""
    (kernel,) = _group_source(text)
    assert "FALLBACK" in kernel.source
    assert "the reduce kernel: the input of ai.reduce_sum is computed inside the group" in (
        kernel.source
    )


def test_a_group_with_an_integer_value_falls_back() -> None:
    """The kernels compute in float32: an integer inside the epilogue (a truncation
    through i32) is PyTorch's, with the reason."""
    text = """
func.func @f(%x: tensor<2x3x4xf32>) -> tensor<2x3x1xf32> {
  %r = ai.fused "reduce" (%x) : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32> {
  ^bb0(%x1: tensor<2x3x4xf32>):
    %s = ai.reduce_sum %x1 {axes = array<i64: 2>, keepdims = true} : tensor<2x3x4xf32>
    %i = ai.cast %s : tensor<2x3x1xf32> to tensor<2x3x1xi32>
    %f = ai.cast %i : tensor<2x3x1xi32> to tensor<2x3x1xf32>
    ai.yield %f : tensor<2x3x1xf32>
  }
  return %r : tensor<2x3x1xf32>
}
"""
    (kernel,) = _group_source(text)
    assert (
        "FALLBACK" in kernel.source
        and "i32 values (the kernel moves f16, bf16, f32)" in kernel.source
    )


def test_pool_header_names_its_attributes_and_epilogue_runs_before_the_store() -> None:
    (kernel,) = _group_source(
        pool_program((1, 4, 9, 9), "f16", "avg", (3, 3), (2, 2), (1, 1), epilogue=True),
        pipeline="fusec-cuda",
    )
    assert kernel.kind == "pool" and "FALLBACK" not in kernel.source
    assert "template: pool (avg pooling, kernel [3, 3], strides [2, 2]" in kernel.source
    body = kernel.source[kernel.source.index("@cuda.jit") :]
    assert body.index("val = acc / f32(ch * cw)") < body.index("st_f16(out0, e,")


# ---------------------------------------------------------------------- PTX


def _ptx(text: str, pipeline: str | None = None) -> list[str]:
    import fusec

    options = {"pipeline": pipeline} if pipeline else {}
    compiled = fusec.compile(text, target="cuda", executable=False, **options)
    return [ptx for k, ptx in compiled.assembly("sm_90") if k.kind in ("pool", "reduce")]


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX")
@pytest.mark.parametrize(
    "text",
    [
        pool_program((32, 64, 112, 112), "f16", "max", (3, 3), (2, 2), (1, 1)),
        pool_program((2, 8, 9, 9), "bf16", "avg", (3, 3), (2, 2), (1, 1), (1, 1), True, True, True),
        reduce_program((32, 2048, 7, 7), "f16", "mean", (2, 3), True, True),
        reduce_program((4, 7, 7, 960), "f32", "max", (1, 2), False, True),
        reduce_program((2, 3, 512, 512), "bf16", "max", (2, 3), True, True),
    ],
    ids=["maxpool-f16", "avgpool-epilogue-bf16", "mean-rows-f16", "max-columns-f32", "split"],
)
def test_ptx_for_sm_90(text: str) -> None:
    (ptx,) = _ptx(text)
    assert ".target sm_90" in ptx and ".entry" in ptx
    assert ptx.count(".entry") == (2 if "512x512" in text else 1)
    assert ".local" not in ptx, "a register array went to local memory"
    f64 = {  # the instructions on float64 values (not the register declarations)
        line.split()[0]
        for line in ptx.splitlines()
        if re.search(r"\.f64\b", line) and not line.strip().startswith(".reg")
    }
    if ("avg" in text or "mean" in text) and ("xbf16" in text or "xf32" in text):
        # an average of f32/bf16 values sums in float64 (issue #26): adds, converts, the
        # division and the moves of the partials; nothing else (the epilogue is float32)
        kinds = {op.split(".")[0] for op in f64}
        assert f64 and kinds <= {"add", "cvt", "div", "mov", "ld", "st"}, sorted(f64)
    else:
        assert not f64, f"float64 arithmetic in a float32 kernel: {sorted(f64)}"


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX")
@pytest.mark.parametrize("kind", ["max_pool2d", "reduce_mean"])
def test_channels_last_ptx_for_sm_90(kind: str) -> None:
    """The kernels of conv-layout's NHWC groups (transposed views) compile as well."""
    if kind == "max_pool2d":
        attrs = "kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>"
        text = channels_last_group(
            kind, (32, 64, 112, 112), "f16", attrs, (32, 64, 56, 56), True, True
        )
    else:
        attrs = "axes = array<i64: 2, 3>, keepdims = true"
        text = channels_last_group(
            kind, (32, 2048, 7, 7), "f16", attrs, (32, 2048, 1, 1), False, True
        )
    (ptx,) = _ptx(text, pipeline="infer-shapes")
    assert ptx.count(".entry") == 1 and ".local" not in ptx
    assert not re.search(r"\.f64\b", ptx)
