"""The ``conv-layout`` pass: channels-last conv groups and their conversions, explicit in IR.

FileCheck tests of the IR are ``filecheck/conv_layout_*.mlir`` (run by
``test_tile_gemm.py``). Here: the numerics of the IR after the pass through the
numpy reference executor, the rewrite patterns one by one, the conv template
reading ``fusec.layout``, and the channels-last copy kernel (thread model, PTX,
cubin) that runs the conversions.
"""

from __future__ import annotations

import re
from pathlib import Path

import conv_model as model
import numpy as np
import pytest
from test_gemm_build import needs_toolchain, spill_free_sass
from xdsl.dialects.builtin import DictionaryAttr, StringAttr

import fusec
from fusec.dialect import ops as ai
from fusec.runtime.reference import entry_function, run_reference
from fusec.targets.cuda.conv.config import ConvGeometry, choose_tile
from fusec.targets.cuda.conv.cpp import ConvSpec
from fusec.targets.cuda.conv.layout import RESIDUAL_ENV
from fusec.targets.cuda.conv.layouts import LAYOUT_ATTR
from fusec.targets.cuda.conv.transpose import RelayoutSpec
from fusec.tools.runner import random_inputs

HERE = Path(__file__).parent / "filecheck"
RESNET = HERE / "conv_layout_resnet.mlir"
CONSTANTS = HERE / "conv_layout_constants.mlir"
POINTWISE = HERE / "conv_layout_pointwise.mlir"
TWO_RESULT_POOL = HERE / "conv_layout_two_result_pool.mlir"


def _groups(module, kind: str) -> list[ai.FusedOp]:
    return [op for op in module.walk() if isinstance(op, ai.FusedOp) and op.kind_name == kind]


# ------------------------------------------------------------- numerics of the IR


@pytest.mark.parametrize(
    "path",
    [RESNET, CONSTANTS, POINTWISE, TWO_RESULT_POOL],
    ids=["resnet-inputs", "constants", "pointwise", "two-result-pool"],
)
@pytest.mark.parametrize("pipeline", ["fusec-cuda", "fusec-default,conv-layout{handoff=off}"])
def test_ir_after_the_pass_computes_the_graph(path: Path, pipeline: str) -> None:
    """The reference executor runs the relaid IR (conversion groups, transposed bodies) to
    the same values as the source graph: transposes are exact, so in float64 equal."""
    source = fusec.parse(path)
    compiled = fusec.compile(path, target="cuda", pipeline=pipeline, executable=False)
    assert _groups(compiled.module, "conv")[0].attributes.get(LAYOUT_ATTR) is not None
    for seed in (0, 1):
        args = random_inputs(entry_function(source), seed=seed)
        assert all(np.abs(a).max() > 0 for a in args)  # fresh random inputs, not zeros
        expected = run_reference(source, args)
        got = run_reference(compiled.module, args)
        for e, g in zip(expected, got, strict=True):
            assert g.shape == e.shape and not np.isnan(g).any()
            np.testing.assert_array_equal(g, e)
        # rounding where the compiled program rounds (16-bit values between groups)
        rounded = run_reference(compiled.module, args, rounding="groups")
        for e, g in zip(expected, rounded, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-2, atol=1e-2 * np.sqrt(np.mean(e**2)))


def test_conversions_are_shared_and_constants_folded() -> None:
    compiled = fusec.compile(CONSTANTS, target="cuda", executable=False)
    copies = _groups(compiled.module, "copy")
    assert len(copies) == 1  # %x, read by two relaid convs, converted once
    convs = [g for g in _groups(compiled.module, "conv") if LAYOUT_ATTR in g.attributes]
    assert len(convs) == 2 and all(c.inputs[0] is copies[0].results[0] for c in convs)
    weight = convs[0].inputs[1].owner
    assert weight.name == "arith.constant" and convs[1].inputs[1].owner is weight


EDGE = """func.func @f(%x: {T}, %y: {T}, %w1: {W}, %w2: {W}) -> {T} {{
  %a = ai.conv2d %x, %w1 {{padding = array<i64: 1, 1>}} : {T} * {W}
  %c = ai.conv2d %a, %w2 {{padding = array<i64: 1, 1>}} : {T} * {W}
  %s = ai.{OP} %a, %y : {T} * {T}
  %b = ai.conv2d %s, %w2 {{padding = array<i64: 1, 1>}} : {T} * {W}
  %o = ai.add %b, %c : {T} * {T}
  return %o : {T}
}}"""


def test_an_elementwise_group_with_an_nchw_input_stays_at_the_edge() -> None:
    """``%a + %y`` between convs, %y a graph input: relaying it would move the conversion
    of its result onto %y, no gain, so it stays NCHW: %a is stored NCHW (one reader reads
    it NCHW) and the sum is converted for the next conv."""
    text = EDGE.format(T="tensor<2x32x8x8xf16>", W="tensor<32x32x3x3xf16>", OP="add")
    compiled = fusec.compile(text, target="cuda", executable=False)
    (pointwise,) = _groups(compiled.module, "pointwise")
    assert LAYOUT_ATTR not in pointwise.attributes
    outputs = [
        g.attributes[LAYOUT_ATTR].data["output"].data for g in _groups(compiled.module, "conv")
    ]
    # %c is read only as %b's residual, channels-last (FUSEC_CONV_RESIDUAL's default)
    assert outputs == ["nchw", "nhwc", "nchw"]
    converted = [g.inputs[0] for g in _groups(compiled.module, "copy")]
    assert pointwise.results[0] in converted
    source = fusec.parse(text)
    args = random_inputs(entry_function(source), seed=2)
    np.testing.assert_array_equal(run_reference(compiled.module, args), run_reference(source, args))


# ------------------------------------------------------------------ the patterns

PAIR = """func.func @f(%x: tensor<2x8x3x5xf16>) -> tensor<2x8x3x5xf16> {
  %a = ai.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<2x8x3x5xf16>
  %b = ai.transpose %a {perm = array<i64: 0, 3, 1, 2>} : tensor<2x3x5x8xf16>
  return %b : tensor<2x8x3x5xf16>
}"""

CHAIN = """func.func @f(%x: tensor<2x8x3x5xf16>) -> tensor<5x2x8x3xf16> {
  %a = ai.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<2x8x3x5xf16>
  %b = ai.transpose %a {perm = array<i64: 2, 0, 3, 1>} : tensor<2x3x5x8xf16>
  return %b : tensor<5x2x8x3xf16>
}"""

CONSTANT = """func.func @f() -> tensor<3x4x2xf32> {
  %c = arith.constant dense<[[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]],
      [[9.0, 10.0, 11.0, 12.0], [13.0, 14.0, 15.0, 16.0]],
      [[17.0, 18.0, 19.0, 20.0], [21.0, 22.0, 23.0, 24.0]]]> : tensor<3x2x4xf32>
  %t = ai.transpose %c {perm = array<i64: 0, 2, 1>} : tensor<3x2x4xf32>
  return %t : tensor<3x4x2xf32>
}"""


def _rewrite(text: str):
    from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker

    from fusec.targets.cuda.conv.layout import ComposeTransposes, FoldConstantTranspose

    module = fusec.parse(text)
    PatternRewriteWalker(
        GreedyRewritePatternApplier([ComposeTransposes(), FoldConstantTranspose()])
    ).rewrite_module(module)
    module.verify()
    return module


def test_inverse_conversions_cancel() -> None:
    module = _rewrite(PAIR)
    assert not [op for op in module.walk() if isinstance(op, ai.TransposeOp)]
    ret = entry_function(module).body.block.last_op
    assert ret.operands[0] is entry_function(module).args[0]


def test_conversions_compose() -> None:
    module = _rewrite(CHAIN)
    (op,) = [op for op in module.walk() if isinstance(op, ai.TransposeOp)]
    assert op.attr("perm") == (3, 0, 1, 2)  # x dims: (0 2 3 1) then (2 0 3 1)
    x = np.random.default_rng(0).standard_normal((2, 8, 3, 5))
    (got,) = run_reference(module, [x])
    np.testing.assert_array_equal(got, x.transpose(0, 2, 3, 1).transpose(2, 0, 3, 1))


def test_constant_transpose_folds() -> None:
    module = _rewrite(CONSTANT)
    assert not [op for op in module.walk() if isinstance(op, ai.TransposeOp)]
    (got,) = run_reference(module, [])
    expected = np.arange(1, 25, dtype=np.float64).reshape(3, 2, 4).transpose(0, 2, 1)
    np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------- the conv template reads it


def _conv_kernels(compiled) -> list:
    out = []
    for kernel in compiled.kernels:
        if kernel.kind == "conv":
            namespace: dict = {}
            exec(compile(kernel.source, kernel.name, "exec"), namespace)
            out.append(namespace["CONV"].spec)
    return out


def test_the_conv_template_takes_the_layout_from_the_ir() -> None:
    compiled = fusec.compile(RESNET, target="cuda", executable=False)
    first, second = _conv_kernels(compiled)
    assert (first.input, first.weight, first.out_layout) == ("given", "krsc", "nhwc")
    assert (second.input, second.weight, second.out_layout) == ("given", "krsc", "nchw")
    assert first.named_kernels == () and second.named_kernels == ()  # no convx, no convw
    # the same graph without the pass: NCHW/KCRS, the template copies privately
    plain = fusec.compile(RESNET, target="cuda", pipeline="fusec-default", executable=False)
    for spec in _conv_kernels(plain):
        assert (spec.input, spec.weight, spec.out_layout) == ("nhwc", "kcrs", "nchw")
        assert spec.named_kernels[0] == spec.relayout_name and spec.copies_input
    # launches: copy x, copy w1, conv1, copy w2, conv2 (as many as before the pass: conv1's
    # module launched convw + convx + conv, conv2's convw + conv)
    assert [k.kind for k in compiled.kernels] == ["copy", "copy", "conv", "copy", "conv"]


def test_a_layout_the_body_does_not_have_is_refused() -> None:
    """A ``fusec.layout`` that its body does not implement falls back, never misreads."""
    from fusec.targets.cuda.conv import template

    compiled = fusec.compile(RESNET, target="cuda", pipeline="fusec-default", executable=False)
    group = _groups(compiled.module, "conv")[0]
    group.attributes[LAYOUT_ATTR] = DictionaryAttr({"input": StringAttr("nhwc")})
    assert "lacks their transposes" in template.plan(group)
    group.attributes[LAYOUT_ATTR] = DictionaryAttr({"input": StringAttr("chwn")})
    assert 'input must be "nchw" or "nhwc"' in template.plan(group)
    compiled = fusec.compile(RESNET, target="cuda", executable=False)
    group = _groups(compiled.module, "conv")[1]
    group.attributes[LAYOUT_ATTR] = DictionaryAttr(
        {"input": StringAttr("nhwc"), "weight": StringAttr("krsc"), "output": StringAttr("nhwc")}
    )
    assert "does not end in that transpose" in template.plan(group)


def test_handoff_option_and_environment(monkeypatch) -> None:
    def outputs(pipeline: str) -> list[str]:
        compiled = fusec.compile(RESNET, target="cuda", pipeline=pipeline, executable=False)
        groups = _groups(compiled.module, "conv")
        return [g.attributes[LAYOUT_ATTR].data["output"].data for g in groups]

    assert outputs("fusec-cuda") == ["nhwc", "nchw"]
    monkeypatch.setenv("FUSEC_CONV_HANDOFF", "off")
    assert outputs("fusec-cuda") == ["nchw", "nchw"]
    assert outputs("fusec-default,conv-layout{handoff=nhwc}") == ["nhwc", "nchw"]  # option wins
    with pytest.raises(fusec.FusecError, match="handoff='sideways'"):
        outputs("fusec-default,conv-layout{handoff=sideways}")


def test_krsc_weights_spec() -> None:
    geo = ConvGeometry(2, 64, 13, 9, 64, 3, 3, 1, 1, 1, 1, 1, 1)
    spec = ConvSpec(geo, choose_tile(geo), input="given", weight="krsc")
    assert spec.named_kernels == () and not spec.relayouts_weights
    assert "fusec_convw_" not in spec.cpp_source()
    relayout = ConvSpec(geo, choose_tile(geo))
    assert relayout.relayout_name in relayout.cpp_source()
    with pytest.raises(ValueError, match="one group, C % 8 == 0"):
        ConvSpec(ConvGeometry(2, 40, 9, 9, 40, 3, 3, groups=2), weight="krsc")
    with pytest.raises(ValueError, match="conv weight layout"):
        ConvSpec(geo, weight="rsck")


# ------------------------------------------------- the channels-last copy kernel

RELAYOUTS = [
    RelayoutSpec(2, 64, 90),  # the ResNet test block's input: 16-byte loads possible
    RelayoutSpec(64, 64, 9),  # 3x3 weights: a thread per 8 channels of a pixel
    RelayoutSpec(3, 136, 11),  # channels past one block, few pixels
    RelayoutSpec(16, 16, 1),  # 1x1 weights
    RelayoutSpec(3, 136, 21),  # channels past one block, ragged pixels: 8 x 8 blocks
]


def test_few_pixels_is_the_weights_copy() -> None:
    assert RelayoutSpec(64, 64, 9).few_pixels and RelayoutSpec(64, 64, 1).few_pixels
    assert not RelayoutSpec(2, 64, 90).few_pixels and not RelayoutSpec(8, 64, 7 * 7).few_pixels
    assert RelayoutSpec(64, 64, 9).grid == (-(-64 * 9 * 8 // 128), 1, 1)


@pytest.mark.parametrize("spec", RELAYOUTS, ids=lambda s: f"{s.outer}x{s.channels}x{s.pixels}")
def test_relayout_threads_write_every_element_once(spec: RelayoutSpec) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((spec.outer, spec.channels, spec.pixels)).astype(np.float32)
    if spec.few_pixels:  # a thread per 8 channels of one pixel, writing xt[8 i: 8 i + 8]
        out = np.full(x.size, np.nan, np.float32)
        writes = np.zeros(x.size, int)
        for i in range(spec.grid[0] * 128):
            if i >= spec.groups:
                continue
            a, p, b0 = spec.thread_group(i)
            out[8 * i : 8 * i + 8] = x[a, b0 : b0 + 8, p]
            writes[8 * i : 8 * i + 8] += 1
        assert (writes == 1).all(), "an element was written twice or never"
        np.testing.assert_array_equal(out.reshape(x.shape[0], x.shape[2], x.shape[1]),
                                      x.transpose(0, 2, 1))  # fmt: skip
        return
    geo = spec.tiling.geo
    for vector in (False, True) if spec.tiling.vectorizable else (False,):
        out, writes = model.transpose_threads(geo, x.reshape(geo.n, geo.c, geo.h, geo.w), vector)
        assert (writes == 1).all(), "an element was written twice or never"
        np.testing.assert_array_equal(out, x.transpose(0, 2, 1))


def test_relayout_spec_refuses_unpadded_channels() -> None:
    with pytest.raises(ValueError, match="relayout"):
        RelayoutSpec(2, 12, 9)


def test_copy_template_serves_the_conversions_only() -> None:
    from fusec.targets.cuda.copy import relayout_plan

    compiled = fusec.compile(RESNET, target="cuda", executable=False)
    specs = [relayout_plan(g) for g in _groups(compiled.module, "copy")]
    assert specs == [RelayoutSpec(2, 64, 90), RelayoutSpec(64, 64, 9), RelayoutSpec(64, 64, 9)]
    other = """func.func @f(%x: tensor<2x12x3x5xf16>, %y: tensor<2x8x3x5xf32>)
        -> (tensor<2x3x5x12xf16>, tensor<2x3x5x8xf32>, tensor<2x5x3x12xf16>) {
      %a = ai.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<2x12x3x5xf16>
      %b = ai.transpose %y {perm = array<i64: 0, 2, 3, 1>} : tensor<2x8x3x5xf32>
      %c = ai.transpose %x {perm = array<i64: 0, 3, 2, 1>} : tensor<2x12x3x5xf16>
      return %a, %b, %c : tensor<2x3x5x12xf16>, tensor<2x3x5x8xf32>, tensor<2x5x3x12xf16>
    }"""
    compiled = fusec.compile(other, target="cuda", executable=False)
    reasons = [relayout_plan(g) for g in _groups(compiled.module, "copy")]
    assert "a multiple of 8" in reasons[0] and "16-bit" in reasons[1]
    assert "[0, 2, 3, 1]" in reasons[2]
    # not the channels-last kernel's: the gather kernel of index-map copies takes them
    assert all("template: gather" in k.source for k in compiled.kernels)


@needs_toolchain
@pytest.mark.parametrize("spec", RELAYOUTS[:2], ids=["input-2x64x90", "weights-64x64x9"])
def test_relayout_cubin(spec: RelayoutSpec, tmp_path) -> None:
    """The copy compiles for sm_90a: 16-byte stores (and 16-byte loads where the shape
    allows them), no shared memory, no spills, no local memory."""
    from fusec.targets.cuda import build

    ptx = build.ptx(spec)
    assert "st.global.v4.b32" in ptx
    assert ("ld.global.nc.v4" in ptx) == spec.tiling.vectorizable
    assert "STG.E.128" in spill_free_sass(spec, tmp_path)


@needs_toolchain
def test_emit_ptx_of_a_copy_group() -> None:
    """``fusec compile --emit ptx`` reaches the copy module's linked kernel."""
    from fusec.target import get_target

    compiled = fusec.compile(RESNET, target="cuda", executable=False)
    copy = next(k for k in compiled.kernels if k.kind == "copy")
    ptx = get_target("cuda").assembly(copy, "sm_90a")
    assert "st.global.v4.b32" in ptx


# --------------------------------------------------- the cpu target on this IR


def _poison(shape: tuple, dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def test_cpu_target_runs_the_ir_without_the_handoff() -> None:
    """The pass is in the cuda pipeline only; the cpu target still runs its IR with
    ``handoff=off`` (its conv template takes the transposes in front of the conv as
    layout ops) and refuses an NHWC-stored group with a located error."""
    pipeline = "fusec-default,conv-layout{handoff=off}"
    for path in (RESNET, CONSTANTS):
        compiled = fusec.compile(path, target="cpu", pipeline=pipeline)
        args = random_inputs(entry_function(compiled.module), seed=4)
        outs = compiled._runner(args, alloc=_poison)
        for out, ref in zip(outs, run_reference(fusec.parse(path), args), strict=True):
            assert not np.isnan(out).any()
            scale = np.sqrt(np.mean(ref**2))
            np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2 * scale)
    with pytest.raises(fusec.FusecError, match=r"conv_layout_resnet.mlir:\d+:\d+: .*ai.transpose"):
        fusec.compile(RESNET, target="cpu", pipeline="fusec-cuda")


def test_an_input_the_epilogue_also_reads_stays_nchw() -> None:
    """``conv(x) + x`` in one group: the body reads x beyond the conv, so the group keeps
    NCHW/KCRS (and the implicit GEMM, not the fallback, still serves it)."""
    t, w = "tensor<2x64x8x8xf16>", "tensor<64x64x1x1xf16>"
    text = f"""func.func @f(%x: {t}, %w: {w}) -> {t} {{
      %c = ai.conv2d %x, %w : {t} * {w}
      %s = ai.add %c, %x : {t} * {t}
      return %s : {t}
    }}"""
    compiled = fusec.compile(text, target="cuda", executable=False)
    (group,) = _groups(compiled.module, "conv")
    assert LAYOUT_ATTR not in group.attributes and not _groups(compiled.module, "copy")
    (spec,) = _conv_kernels(compiled)
    assert spec.copies_input and spec.weight == "kcrs"


@needs_toolchain
def test_krsc_given_conv_cubin(tmp_path) -> None:
    """The implicit GEMM taking both operands relaid links to one kernel (no fusec_convw_*,
    no fusec_convx_*), whose weight tensor map reads the KRSC buffer: no spills, no local
    memory."""
    from fusec.targets.cuda import build

    geo = ConvGeometry(32, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1)
    spec = ConvSpec(geo, choose_tile(geo), input="given", out_layout="nhwc", weight="krsc")
    ptx = build.ptx(spec)
    assert re.findall(r"\.entry (\w+)", ptx) == []  # only the device function: no relayouts
    sass = spill_free_sass(spec, tmp_path)
    assert "convw" not in sass and "convx" not in sass


# ------------------------------------------------------- random conv graphs


def _random_conv_graph(rng: np.random.Generator) -> str:
    """A random chain of f16 3x3 convs over one activation shape (8 channels: the direct
    conv, left NCHW; 16 or 24: relaid), each reading the input or an earlier value, with
    relus (the conv's result readable besides) and residual adds, intermediates returned
    at random; weights graph inputs or constants."""
    c, h, w = int(rng.choice([8, 16, 24])), int(rng.integers(3, 7)), int(rng.integers(3, 9))
    t, wt = f"tensor<2x{c}x{h}x{w}xf16>", f"tensor<{c}x{c}x3x3xf16>"
    params, lines, values = [f"%x: {t}"], [], ["%x"]
    for k in range(int(rng.integers(2, 6))):
        if rng.random() < 0.5:
            params.append(f"%w{k}: {wt}")
        else:
            data = (rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float16)
            lines.append(f'%w{k} = arith.constant dense<"0x{data.tobytes().hex()}"> : {wt}')
        src = values[-1 - int(rng.integers(0, min(3, len(values))))]  # a recent value
        lines.append(f"%c{k} = ai.conv2d {src}, %w{k} {{padding = array<i64: 1, 1>}} : {t} * {wt}")
        last, r = f"%c{k}", rng.random()
        if r < 0.3:  # the conv's result stays readable too: the relu is then a group
            lines.append(f"%r{k} = ai.relu {last} : {t}")
            values.append(last)
            last = f"%r{k}"
        elif r < 0.5:
            other = values[int(rng.integers(0, len(values)))]
            lines.append(f"%a{k} = ai.add {last}, {other} : {t} * {t}")
            last = f"%a{k}"
        values.append(last)
    outs = sorted({values[-1], *(v for v in values[1:-1] if rng.random() < 0.3)})
    types = ", ".join([t] * len(outs))
    body = "\n  ".join(lines)
    return f"func.func @g({', '.join(params)}) -> ({types}) {{\n  {body}\n  return " + (
        f"{', '.join(outs)} : {types}\n}}\n"
    )


@pytest.mark.slow  # random graphs through the whole pipeline: seconds
@pytest.mark.parametrize("residual", ["nchw", "nhwc"])
def test_random_conv_graphs_keep_their_values(residual: str, monkeypatch) -> None:
    """On 40 random conv graphs, both hand-off settings: the IR after the pass verifies and
    computes exactly the source graph's values (float64 reference); across them the pass
    relays groups, hands results off and folds constant weights (elementwise groups
    relaid: ``conv_layout_pointwise.mlir``)."""
    monkeypatch.setenv(RESIDUAL_ENV, residual)
    rng = np.random.default_rng(0)
    seen = {"relaid": 0, "handed": 0, "pointwise": 0, "folded": 0}
    for index in range(40):
        text = _random_conv_graph(rng)
        source = fusec.parse(text)
        args = random_inputs(entry_function(source), seed=index)
        expected = run_reference(source, args)
        for pipeline in ("fusec-cuda", "fusec-default,conv-layout{handoff=off}"):
            compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
            compiled.module.verify()
            for e, g in zip(expected, run_reference(compiled.module, args), strict=True):
                np.testing.assert_array_equal(g, e, err_msg=f"graph {index}, {pipeline}")
            for group in _groups(compiled.module, "conv") + _groups(compiled.module, "pointwise"):
                layout = group.attributes.get(LAYOUT_ATTR)
                if layout is None:
                    continue
                out = layout.data["output"].data
                seen["pointwise" if group.kind_name == "pointwise" else "relaid"] += 1
                seen["handed"] += out == "nhwc" and group.kind_name == "conv"
                weight = group.inputs[1].owner if group.kind_name == "conv" else None
                seen["folded"] += getattr(weight, "name", "") == "arith.constant"
    assert all(seen[key] > 0 for key in ("relaid", "handed", "folded")), seen


def _f16_weight(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> str:
    """``%name = arith.constant`` of random f16 conv weights (scaled by the fan-in)."""
    data = (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float16)
    ty = f"tensor<{'x'.join(map(str, shape))}xf16>"
    return f'  %{name} = arith.constant dense<"0x{data.tobytes().hex().upper()}"> : {ty}'


def _squeeze_excite_graph(c: int = 16, e: int = 32, se: int = 8, hw: int = 8) -> str:
    """MobileNetV3's and EfficientNet's block: 1x1 expand + SiLU, depthwise 3x3 + SiLU, the
    squeeze-excite scale (mean over H and W, 1x1 reduce + SiLU, 1x1 expand + sigmoid)
    multiplying the depthwise result, 1x1 project; constant weights."""
    rng = np.random.default_rng(5)

    def weight(name: str, shape: tuple[int, ...]) -> str:
        return _f16_weight(name, shape, rng)

    def t(*shape: int) -> str:
        return f"tensor<{'x'.join(map(str, shape))}xf16>"

    x, big, pooled = t(1, c, hw, hw), t(1, e, hw, hw), t(1, e, 1, 1)
    lines = [
        weight("w1", (e, c, 1, 1)),
        weight("wd", (e, 1, 3, 3)),
        weight("wr", (se, e, 1, 1)),
        weight("wx", (e, se, 1, 1)),
        weight("wp", (c, e, 1, 1)),
        f"  %a = ai.conv2d %x, %w1 : {x} * {t(e, c, 1, 1)}",
        f"  %as = ai.silu %a : {big}",
        f"  %d = ai.conv2d %as, %wd {{padding = array<i64: 1, 1>, groups = {e} : i64}} : "
        f"{big} * {t(e, 1, 3, 3)}",
        f"  %ds = ai.silu %d : {big}",
        f"  %m = ai.reduce_mean %ds {{axes = array<i64: 2, 3>, keepdims = true}} : {big}",
        f"  %r = ai.conv2d %m, %wr : {pooled} * {t(se, e, 1, 1)}",
        f"  %rs = ai.silu %r : {t(1, se, 1, 1)}",
        f"  %g = ai.conv2d %rs, %wx : {t(1, se, 1, 1)} * {t(e, se, 1, 1)}",
        f"  %gs = ai.sigmoid %g : {pooled}",
        f"  %s = ai.mul %ds, %gs : {big} * {pooled}",
        f"  %y = ai.conv2d %s, %wp : {big} * {t(c, e, 1, 1)}",
    ]
    body = "\n".join(lines)
    return f"func.func @f(%x: {x}) -> {x} {{\n{body}\n  return %y : {x}\n}}\n"


def test_a_squeeze_excite_block_runs_channels_last_between_its_edges() -> None:
    """The squeeze-excite scale ``[1, C, 1, 1]`` multiplies the depthwise result: the
    pointwise group reads it as a ``[1, 1, 1, C]`` view, so the depthwise conv, the mean and
    the product stay channels-last and the only copy is the graph input's (before: the
    product was NCHW, with one conversion before the project conv and one of the depthwise
    input; EfficientNet-B0's 25 copies became 10, MobileNetV3-Large's 18 became 10)."""
    text = _squeeze_excite_graph()
    compiled = fusec.compile(text, target="cuda", executable=False)
    (product,) = _groups(compiled.module, "pointwise")
    assert LAYOUT_ATTR in product.attributes
    shapes = sorted(tuple(v.type.get_shape()) for v in product.inputs)
    assert shapes == [(1, 1, 1, 32), (1, 8, 8, 32)], shapes
    (scale,) = [v for v in product.inputs if tuple(v.type.get_shape()) == (1, 1, 1, 32)]
    assert scale.owner.kind_name == "view"
    copies = [tuple(g.inputs[0].type.get_shape()) for g in _groups(compiled.module, "copy")]
    assert copies == [(1, 16, 8, 8)], copies  # the graph's input; the last conv stores NCHW
    source = fusec.parse(text)
    for seed in (0, 1):
        args = random_inputs(entry_function(source), seed=seed)
        np.testing.assert_array_equal(
            run_reference(compiled.module, args), run_reference(source, args)
        )


def _residual_chain_graph(c: int = 32, hw: int = 8, blocks: int = 3) -> str:
    """Bottleneck-style blocks ``y = relu(conv1x1(relu(conv3x3(x))) + x)`` in a chain, as
    ResNet's: each block's output is the next block's conv input and its residual."""
    rng = np.random.default_rng(9)
    t = f"tensor<1x{c}x{hw}x{hw}xf16>"

    def weight(name: str, shape: tuple[int, ...]) -> str:
        return _f16_weight(name, shape, rng)

    lines, x = [], "%x"
    for b in range(blocks):
        w3, w1 = f"tensor<{c}x{c}x3x3xf16>", f"tensor<{c}x{c}x1x1xf16>"
        lines += [
            weight(f"a{b}", (c, c, 3, 3)),
            weight(f"b{b}", (c, c, 1, 1)),
            f"  %c{b} = ai.conv2d {x}, %a{b} {{padding = array<i64: 1, 1>}} : {t} * {w3}",
            f"  %r{b} = ai.relu %c{b} : {t}",
            f"  %d{b} = ai.conv2d %r{b}, %b{b} : {t} * {w1}",
            f"  %s{b} = ai.add %d{b}, {x} : {t} * {t}",
            f"  %y{b} = ai.relu %s{b} : {t}",
        ]
        x = f"%y{b}"
    body = "\n".join(lines)
    return f"func.func @f(%x: {t}) -> {t} {{\n{body}\n  return {x} : {t}\n}}\n"


#: the conv kernel's early load of a channels-last residual: its element's NHWC offset
NHWC_RESIDUAL_LOAD = "const long long on = (((long long)n * P + p) * Q + q) * KOUT + ko;"


def _cpp(kernel) -> str:
    """The C++ of a one-kernel conv group."""
    (spec,) = kernel.specs
    return spec.cpp_source()


def test_residuals_read_channels_last_remove_the_block_copies(monkeypatch) -> None:
    """By default (``$FUSEC_CONV_RESIDUAL`` unset or "nhwc") a block's output, read by the
    next block's 3x3 conv (its input) and 1x1 conv (its residual), is stored NHWC once, and
    the 1x1 conv's epilogue reads it channels-last (``residual = "nhwc"``, an NHWC-indexed
    early load in the generated C++); only the graph's input is converted (the first block
    reads it NCHW as its residual). With "nchw" every block output is
    stored NCHW and copied to NHWC (ResNet-50: 12 copies, EfficientNet-B0: 9 of its 10)."""
    text = _residual_chain_graph()
    monkeypatch.setenv(RESIDUAL_ENV, "nchw")
    before = fusec.compile(text, target="cuda", executable=False)
    assert len(_groups(before.module, "copy")) == 1 + 2  # the input, two block outputs
    monkeypatch.delenv(RESIDUAL_ENV, raising=False)
    compiled = fusec.compile(text, target="cuda", executable=False)
    copies = [tuple(g.inputs[0].type.get_shape()) for g in _groups(compiled.module, "copy")]
    assert copies == [(1, 32, 8, 8)], copies
    layouts = [g.attributes[LAYOUT_ATTR] for g in _groups(compiled.module, "conv")]
    residual = [lay.data.get("residual") for lay in layouts]
    # the first block's residual is the graph input, read NCHW in place
    assert [r.data if r else None for r in residual] == [None, None, None, "nhwc", None, "nhwc"]
    convs = [k for k in compiled.kernels if k.kind == "conv"]
    # loaded ahead of use (the early loads) at the element's NHWC index
    assert NHWC_RESIDUAL_LOAD in _cpp(convs[3])
    assert NHWC_RESIDUAL_LOAD not in _cpp(convs[1])
    # the module the runtime loads rebuilds the same spec (pixel_nhwc included: without it
    # the kernel read the residual at NCHW offsets)
    assert _conv_kernels(compiled) == [k.specs[0] for k in convs]
    assert _conv_kernels(compiled)[3].epilogue.pixel_nhwc
    source = fusec.parse(text)
    for seed in (0, 1):
        args = random_inputs(entry_function(source), seed=seed)
        np.testing.assert_array_equal(
            run_reference(compiled.module, args), run_reference(source, args)
        )


def test_a_residual_view_the_layout_does_not_name_is_refused(monkeypatch) -> None:
    """The body's residual view and ``fusec.layout`` must agree: without ``residual =
    "nhwc"`` the template refuses the group (its plan is a reason, no kernel)."""
    from fusec.targets.cuda.conv.template import plan

    monkeypatch.setenv(RESIDUAL_ENV, "nhwc")
    compiled = fusec.compile(_residual_chain_graph(blocks=2), target="cuda", executable=False)
    (group,) = [
        g for g in _groups(compiled.module, "conv") if "residual" in g.attributes[LAYOUT_ATTR].data
    ]
    assert not isinstance(plan(group), str)
    attrs = dict(group.attributes[LAYOUT_ATTR].data)
    del attrs["residual"]
    group.attributes[LAYOUT_ATTR] = DictionaryAttr(attrs)
    assert isinstance(plan(group), str)


@needs_toolchain
def test_residual_nhwc_conv_builds_to_ptx(monkeypatch) -> None:
    from fusec.targets.cuda import build

    monkeypatch.setenv(RESIDUAL_ENV, "nhwc")
    compiled = fusec.compile(_residual_chain_graph(blocks=2), target="cuda", executable=False)
    kernel = [k for k in compiled.kernels if k.kind == "conv"][3]  # the second 1x1 conv
    (spec,) = kernel.specs
    assert NHWC_RESIDUAL_LOAD in spec.cpp_source()
    assert "ld.global" in build.ptx(spec)


# ------------- a 1x1 conv's pixels as one row (pixel_row)


def _conv_specs(compiled) -> list[ConvSpec]:
    return [k.specs[0] for k in compiled.kernels if k.kind == "conv"]


@pytest.mark.parametrize("hw", [7, 14])
def test_a_1x1_conv_runs_each_image_as_one_row_of_pixels(hw: int) -> None:
    """A 1x1 conv of stride 1 (NCHW graph output) runs over ``[N][1][H*W]``: its 64-pixel
    strips span rows (a 7x7 output filled them to 7 of 64), and the kernel's model on
    that geometry (the same bytes: an image's pixels are in that order in every layout)
    computes the conv, every element written once."""
    from test_conv_gpu import conv_graph

    n, c, k = 3, 64, 96
    compiled = fusec.compile(conv_graph(n, c, hw, hw, k, 1, 1), target="cuda", executable=False)
    (spec,) = _conv_specs(compiled)
    assert (spec.geo.n, spec.geo.h, spec.geo.w) == (n, 1, hw * hw)
    assert "pixels as one row: each image's" in compiled.kernels[-1].source
    rng = np.random.default_rng(hw)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float16).astype(np.float32)
    w = rng.standard_normal((k, c, 1, 1)).astype(np.float16).astype(np.float32)
    flat = x.reshape(n, c, 1, hw * hw)
    out, writes = model.run(spec.geo, spec.tile, flat, w, grid=3)
    want = np.einsum("nchw,kc->nkhw", x, w[:, :, 0, 0])
    assert (writes == 1).all()
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-4)


def test_convs_other_than_1x1_keep_their_rows() -> None:
    from test_conv_gpu import conv_graph

    for r, stride, pad in ((3, (1, 1), (1, 1)), (1, (2, 2), (0, 0)), (1, (1, 1), (1, 1))):
        text = conv_graph(2, 64, 14, 14, 64, r, r, stride=stride, pad=pad)
        (spec,) = _conv_specs(fusec.compile(text, target="cuda", executable=False))
        assert (spec.geo.h, spec.geo.w) == (14, 14), (r, stride, pad)


def test_a_1x1_conv_between_channels_last_tensors_runs_the_batch_as_one_row(monkeypatch) -> None:
    """With its input, output and residual channels-last (``$FUSEC_CONV_RESIDUAL=nhwc``), a
    block's 1x1 conv runs over ``[1][1][N*H*W]``; the model on that geometry (the NHWC
    tensors' pixels in batch order) computes the conv; the relaid IR still equals the
    source graph."""
    monkeypatch.setenv(RESIDUAL_ENV, "nhwc")
    text = _residual_chain_graph(c=64, hw=7, blocks=3).replace("tensor<1x", "tensor<3x")
    compiled = fusec.compile(text, target="cuda", executable=False)
    # the first block's residual is the graph input (NCHW), the last one's output too
    rows = [(s.geo.n, s.geo.w) for s in _conv_specs(compiled) if s.geo.r == 1]
    assert rows == [(3, 49), (1, 3 * 49), (3, 49)], rows
    whole = [s for s in _conv_specs(compiled) if s.geo.r == 1 and s.geo.n == 1]
    assert "pixels as one row: the batch's 147" in "".join(k.source for k in compiled.kernels)
    spec = whole[0]
    rng = np.random.default_rng(5)
    n, c, k = 3, spec.geo.c, spec.geo.k
    x = rng.standard_normal((n, c, 7, 7)).astype(np.float16).astype(np.float32)
    w = rng.standard_normal((k, c, 1, 1)).astype(np.float16).astype(np.float32)
    batch_row = x.transpose(1, 0, 2, 3).reshape(1, c, 1, n * 49)  # [C][N*H*W]
    out, writes = model.run(spec.geo, spec.tile, batch_row, w, grid=2)
    want = np.einsum("nchw,kc->knhw", x, w[:, :, 0, 0]).reshape(1, k, 1, n * 49)
    assert (writes == 1).all()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    source = fusec.parse(text)
    args = random_inputs(entry_function(source), seed=0)
    np.testing.assert_array_equal(run_reference(compiled.module, args), run_reference(source, args))
