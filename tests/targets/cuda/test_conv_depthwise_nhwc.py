"""ConvNeXt's blocks channels-last on the cuda target (issue 28), without a GPU.

``conv-layout`` runs the target-independent ``channels-last`` pass first (f16/bf16): a
ConvNeXt stage's depthwise convs and residual adds read and write NHWC, so the permutes
around each block's LayerNorm and MLP go; the relaid depthwise group runs the NHWC
direct kernel (``conv_depthwise_nhwc.cuh``, ``cpp.DirectConvSpec`` layout "nhwc").

Here: the pass's decisions (which groups, how many copies are left, the A/B switch),
the IR after the pipeline through the numpy reference (exact: transposes only move
values), and the kernel's C++ run on the host (``host_cuda``: g++, a thread per CUDA
thread, a barrier per block) on fresh random inputs with poisoned outputs against a
float64 depthwise conv. ``test_conv_depthwise_nhwc_gpu.py`` runs the same on the H200.
"""

from __future__ import annotations

import host_cuda
import numpy as np
import pytest

import fusec
from fusec.dialect import ops as ai
from fusec.runtime.reference import entry_function, run_reference
from fusec.targets.cuda.conv.config import ConvGeometry
from fusec.targets.cuda.conv.cpp import DirectConvSpec, depthwise_tile, generate_direct
from fusec.targets.cuda.epilogue import Epilogue
from fusec.tools.runner import random_inputs


def _t(shape, dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def convnext_stage(
    blocks: int, c: int, hw: int, t: str = "f16", n: int = 1, k: int = 7, head: bool = True
) -> str:
    """A ConvNeXt stage: a 2x2/2 downsample conv (an implicit-GEMM conv from ``c``
    channels), ``blocks`` blocks (depthwise ``k`` x ``k`` + bias in NCHW, permute to NHWC,
    LayerNorm, Linear, GELU, Linear, permute back, a constant layer scale, the residual
    add) and, with ``head``, the global mean over H and W."""
    x = _t((n, c, 2 * hw, 2 * hw), t)
    y, yl, yh, vc = (
        _t((n, c, hw, hw), t),
        _t((n, hw, hw, c), t),
        _t((n, hw, hw, 2 * c), t),
        _t((c,), t),
    )
    scale = ", ".join(f"[[{0.25 + i / (2 * c)}]]" for i in range(c))
    args = [f"%x: {x}", f"%wd: {_t((c, c, 2, 2), t)}", f"%lw: {vc}", f"%lb: {vc}"]
    lines = [
        f"%s = arith.constant dense<[{scale}]> : {_t((c, 1, 1), t)}",
        f"%d = ai.conv2d %x, %wd {{strides = array<i64: 2, 2>}} : {x} * {_t((c, c, 2, 2), t)}",
    ]
    cur = "%d"
    tw = _t((c, 1, k, k), t)
    for i in range(blocks):
        args += [f"%w{i}: {tw}", f"%b{i}: {vc}", f"%wa{i}: {_t((c, 2 * c), t)}"]
        args += [f"%wb{i}: {_t((2 * c, c), t)}"]
        lines += [
            f"%c{i} = ai.conv2d {cur}, %w{i} {{padding = array<i64: {k // 2}, {k // 2}>, "
            f"groups = {c} : i64}} : {y} * {tw}",
            f"%cb{i} = ai.bias_add %c{i}, %b{i} : {y} * {vc}",
            f"%p{i} = ai.transpose %cb{i} {{perm = array<i64: 0, 2, 3, 1>}} : {y}",
            f"%l{i} = ai.layernorm %p{i}, %lw, %lb {{epsilon = 1.0e-06 : f32}} : "
            f"{yl} * {vc} * {vc}",
            f"%m{i} = ai.matmul %l{i}, %wa{i} : {yl} * {_t((c, 2 * c), t)}",
            f"%g{i} = ai.gelu %m{i} : {yh}",
            f"%o{i} = ai.matmul %g{i}, %wb{i} : {yh} * {_t((2 * c, c), t)}",
            f"%q{i} = ai.transpose %o{i} {{perm = array<i64: 0, 3, 1, 2>}} : {yl}",
            f"%sq{i} = ai.mul %s, %q{i} : {_t((c, 1, 1), t)} * {y}",
            f"%r{i} = ai.add %sq{i}, {cur} : {y} * {y}",
        ]
        cur = f"%r{i}"
    result = y
    if head:
        result = _t((n, c, 1, 1), t)
        lines.append(
            f"%h = ai.reduce_mean {cur} {{axes = array<i64: 2, 3>, keepdims = true}} : {y}"
        )
        cur = "%h"
    body = "\n  ".join(lines)
    return (
        f"func.func @stage({', '.join(args)}) -> {result} {{\n  {body}\n"
        f"  return {cur} : {result}\n}}\n"
    )


def _groups(module) -> list[ai.FusedOp]:
    return [op for op in module.walk() if isinstance(op, ai.FusedOp)]


def _kinds(module) -> list[str]:
    return [g.kind_name for g in _groups(module)]


# ------------------------------------------------------------------ the pass's decisions


def test_stage_runs_channels_last_with_no_copies() -> None:
    """Three blocks between a downsample conv and a global mean: every depthwise conv
    relaid, the conv stores NHWC, the mean reads NHWC, and each block's layer scale and
    residual add (relaid, then reading the second Linear's result directly) are that
    GEMM's epilogue: the only copies left are the graph input's and the downsample
    weights' conversions (six permutes, the conv's result's conversion and three
    pointwise kernels more before)."""
    compiled = fusec.compile(convnext_stage(3, 32, 8), target="cuda", executable=False)
    groups = _groups(compiled.module)
    convs = [g for g in groups if g.kind_name == "conv" and "fusec.layout" in g.attributes]
    assert len(convs) == 4 and "pointwise" not in _kinds(compiled.module)
    residuals = [g for g in groups if g.kind_name == "matmul" and "ai.add" in str(g)]
    assert len(residuals) == 3 and all("ai.mul" in str(g) for g in residuals)
    copies = [g for g in groups if g.kind_name == "copy"]
    function = entry_function(compiled.module)
    assert sorted(g.inputs[0].name_hint for g in copies) == ["wd", "x"]
    assert all(g.inputs[0] in function.args for g in copies)
    (down,) = [g for g in convs if "weight" in g.attributes["fusec.layout"].data]
    assert down.attributes["fusec.layout"].data["output"].data == "nhwc"
    depthwise = [k for k in compiled.kernels if k.kind == "conv" and "depthwise" in k.source]
    assert len(depthwise) == 3
    assert all("direct conv2d channels-last" in k.source for k in depthwise)


def test_depthwise_switch_keeps_the_old_layout(monkeypatch) -> None:
    """``$FUSEC_CONV_DEPTHWISE=nchw``: the depthwise convs stay NCHW (an A/B switch), with
    a copy on each side of every block's LayerNorm/MLP as before."""
    monkeypatch.setenv("FUSEC_CONV_DEPTHWISE", "nchw")
    compiled = fusec.compile(convnext_stage(3, 32, 8), target="cuda", executable=False)
    assert _kinds(compiled.module).count("copy") == 2 + 6
    assert _kinds(compiled.module).count("pointwise") == 3
    assert not any(
        "fusec.layout" in g.attributes for g in _groups(compiled.module) if g.kind_name != "conv"
    )


def test_depthwise_switch_is_validated(monkeypatch) -> None:
    monkeypatch.setenv("FUSEC_CONV_DEPTHWISE", "sideways")
    with pytest.raises(fusec.FusecError, match="FUSEC_CONV_DEPTHWISE"):
        fusec.compile(convnext_stage(1, 32, 8), target="cuda", executable=False)


def test_f32_stage_is_left_as_it_is() -> None:
    """f32 depthwise convs run on the PyTorch fallback (IEEE f32): not relaid."""
    text = convnext_stage(2, 32, 8, t="f32")
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert not any(
        "fusec.layout" in g.attributes
        for g in _groups(compiled.module)
        if g.kind_name in ("pointwise",)
    )


@pytest.mark.parametrize("t", ["f16", pytest.param("bf16", marks=pytest.mark.slow)])
def test_ir_after_the_pipeline_computes_the_graph(t: str) -> None:
    """The relaid IR (views, NHWC groups, relaid constants) through the reference: equal
    to the source graph in float64, and close when rounded where the kernels round."""
    text = convnext_stage(2, 16, 6, t=t, n=2)
    source = fusec.parse(text)
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert _kinds(compiled.module).count("copy") == 2  # the graph input's, the weights'
    for seed in (0, 1):
        args = random_inputs(entry_function(source), seed=seed)
        (expected,) = run_reference(source, args)
        (got,) = run_reference(compiled.module, args)
        assert not np.isnan(got).any()
        np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------ the kernel's C++ on the host


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _to_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return values.astype(np.float16).view(np.uint16)
    return _bf16_bits(values)


def depthwise_reference(x, w, b, stride, pad, dil) -> np.ndarray:
    """float64 depthwise conv2d + bias, NHWC in and out (x [N,H,W,C], w [C,1,R,S])."""
    n, h, wd, c = x.shape
    r, s = w.shape[2:]
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, pad, dil
    p = (h + pt + pb - dh * (r - 1) - 1) // sh + 1
    q = (wd + pl + pr - dw * (s - 1) - 1) // sw + 1
    xp = np.zeros((n, h + pt + pb, wd + pl + pr, c))
    xp[:, pt : pt + h, pl : pl + wd] = x
    out = np.zeros((n, p, q, c)) + b
    for i in range(r):
        for j in range(s):
            window = xp[
                :, i * dh : i * dh + sh * (p - 1) + 1 : sh, j * dw : j * dw + sw * (q - 1) + 1 : sw
            ]
            out += window * w[:, 0, i, j]
    return out


def _geometry(n, c, h, w, r, s, stride, pad, dil) -> ConvGeometry:
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, pad, dil
    return ConvGeometry(n, c, h, w, c, r, s, sh, sw, pt, pl, pb, pr, dh, dw, c)


#: (n, c, h, w, r, s, stride, padding (t, l, b, r), dilation, in, out type, grid)
HOST_CASES = {
    "convnext-7x7-f16": (2, 24, 9, 10, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1), "f16", "f16", 3),
    "odd-channels-strided-dilated-bf16-f32": (
        2, 5, 11, 9, 3, 5, (2, 2), (1, 2, 0, 1), (2, 1), "bf16", "f32", 1,
    ),
    "two-channel-tiles-stride2-bf16": (
        1, 96, 9, 9, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), "bf16", "bf16", 2,
    ),
}  # fmt: skip


@pytest.mark.skipif(not host_cuda.available(), reason="no g++ for the host run")
@pytest.mark.parametrize(
    "name",
    [
        "convnext-7x7-f16",
        pytest.param("odd-channels-strided-dilated-bf16-f32", marks=pytest.mark.slow),
        pytest.param("two-channel-tiles-stride2-bf16", marks=pytest.mark.slow),
    ],
)
def test_nhwc_kernel_cpp_on_the_host(name: str, tmp_path) -> None:
    n, c, h, w, r, s, stride, pad, dil, t, out_t, grid = HOST_CASES[name]
    geo = _geometry(n, c, h, w, r, s, stride, pad, dil)
    epi = Epilogue(f"y = acc + fs_ld_{t}(e0, i1);", (t,), "bias_add")
    spec = DirectConvSpec(geo, t, out_t, epi, "nhwc")
    tile = spec.tile
    assert tile is not None and tile.tiles(geo) > grid  # the block-stride loop runs
    rng = np.random.default_rng(sum(map(ord, name)))
    xb = _to_bits(rng.standard_normal((n, h, w, c)), t)
    wb = _to_bits(rng.standard_normal((c, 1, r, s)) / (r * s) ** 0.5, t)
    bb = _to_bits(rng.standard_normal(c), t)
    shape = (n, geo.p, geo.q, c)  # poisoned: NaN (its 16-bit patterns)
    nan16 = 0x7E00 if out_t == "f16" else 0x7FC0
    out = np.full(shape, np.nan, np.float32) if out_t == "f32" else np.full(shape, nan16, np.uint16)
    _, _, got, _ = host_cuda.run(
        generate_direct(spec),
        spec.function_name,
        "conv_depthwise_nhwc",
        [xb, wb, out, bb],
        grid,
        spec.threads,
        spec.smem_bytes,
        tmp_path,
    )
    expected = depthwise_reference(
        _from_bits(xb, t), _from_bits(wb, t), _from_bits(bb, t), stride, pad, dil
    )
    value = got.astype(np.float64) if out_t == "f32" else _from_bits(got, out_t)
    assert not np.isnan(value).any(), f"{np.isnan(value).sum()} outputs unwritten"
    err = np.linalg.norm(value - expected) / np.linalg.norm(expected)
    assert err < (1e-5 if out_t == "f32" else 1e-2), err


def test_tiles() -> None:
    """The tile choice: channel pairs for even channels, 32 channels for ConvNeXt's 96,
    strips that cover the rows without waste, and the shared memory bound."""
    g = _geometry(32, 96, 56, 56, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1))
    assert depthwise_tile(g) == depthwise_tile(g).__class__(8, 8, 8, 32, 2)
    g = _geometry(32, 384, 14, 14, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1))
    tile = depthwise_tile(g)
    assert (tile.tp, tile.qt, tile.cb, tile.cv) == (7, 7, 64, 2)
    g = _geometry(1, 5, 9, 11, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1))
    assert depthwise_tile(g).cv == 1
    big = _geometry(1, 64, 64, 64, 11, 11, (2, 2), (5, 5, 5, 5), (2, 2))
    tile = depthwise_tile(big)
    assert tile.smem_bytes(big) <= 48 * 1024


def mobilenet_block(c: int = 32, hw: int = 8, t: str = "f16", n: int = 1) -> str:
    """MobileNet's inverted residual without squeeze-excite: a 1x1 conv + ReLU, a depthwise
    3x3 + bias + ReLU, a 1x1 conv (the implicit GEMM on both sides of the depthwise)."""
    x, w1, wd, b = _t((n, c, hw, hw), t), _t((c, c, 1, 1), t), _t((c, 1, 3, 3), t), _t((c,), t)
    return f"""func.func @mb(%x: {x}, %a: {w1}, %w: {wd}, %b: {b}, %e: {w1}) -> {x} {{
  %0 = ai.conv2d %x, %a : {x} * {w1}
  %1 = ai.relu %0 : {x}
  %2 = ai.conv2d %1, %w {{padding = array<i64: 1, 1>, groups = {c} : i64}} : {x} * {wd}
  %3 = ai.bias_add %2, %b : {x} * {b}
  %4 = ai.relu %3 : {x}
  %5 = ai.conv2d %4, %e : {x} * {w1}
  return %5 : {x}
}}
"""


def test_mobilenet_depthwise_between_implicit_gemm_convs_runs_nhwc(monkeypatch) -> None:
    """On cuda the 1x1 convs around a depthwise conv read and write NHWC anyway, so the
    depthwise group (its ReLU epilogue included) is relaid: the conversion of its result
    for the next conv goes (the cpu, whose convs stay NCHW, leaves it: cpu tests)."""
    text = mobilenet_block()
    compiled = fusec.compile(text, target="cuda", executable=False)
    (dw,) = [g for g in _groups(compiled.module) if g.kind_name == "conv" and "groups" in str(g)]
    assert dw.attributes["fusec.layout"].data["input"].data == "nhwc"
    assert "ai.relu" in str(dw)
    copies = _kinds(compiled.module).count("copy")
    monkeypatch.setenv("FUSEC_CONV_DEPTHWISE", "nchw")
    before = fusec.compile(text, target="cuda", executable=False)
    assert _kinds(before.module).count("copy") == copies + 1
    source = fusec.parse(text)
    args = random_inputs(entry_function(source), seed=4)
    (expected,) = run_reference(source, args)
    (got,) = run_reference(compiled.module, args)
    np.testing.assert_array_equal(got, expected)


def squeeze_excite_head(n: int = 2, c: int = 32, hw: int = 8, t: str = "f16") -> str:
    """A 1x1 conv, the global mean, a 1x1 conv on the pooled [N, C, 1, 1] value and the
    graph's own permute of its result: every NCHW <-> NHWC conversion of a pooled value
    (or of 1x1 weights) keeps the elements' order."""
    x, w, pooled = _t((n, c, hw, hw), t), _t((c, c, 1, 1), t), _t((n, c, 1, 1), t)
    return f"""func.func @se(%x: {x}, %a: {w}, %b: {w}) -> {_t((n, 1, 1, c), t)} {{
  %0 = ai.conv2d %x, %a : {x} * {w}
  %1 = ai.reduce_mean %0 {{axes = array<i64: 2, 3>, keepdims = true}} : {x}
  %2 = ai.conv2d %1, %b : {pooled} * {w}
  %3 = ai.transpose %2 {{perm = array<i64: 0, 2, 3, 1>}} : {pooled}
  return %3 : {_t((n, 1, 1, c), t)}
}}
"""


def test_order_keeping_conversions_are_views() -> None:
    """Of the six conversions (the input, two 1x1 weights, the pooled value, the second
    conv's result and the graph's permute of it cancel) only the image's is a copy kernel:
    the pooled value's and the 1x1 weights' are views (no kernel, an alias)."""
    text = squeeze_excite_head()
    compiled = fusec.compile(text, target="cuda", executable=False)
    kinds = _kinds(compiled.module)
    assert kinds.count("copy") == 1 and kinds.count("view") == 3
    assert [k.kind for k in compiled.kernels].count("copy") == 1
    source = fusec.parse(text)
    args = random_inputs(entry_function(source), seed=6)
    (expected,) = run_reference(source, args)
    (got,) = run_reference(compiled.module, args)
    np.testing.assert_array_equal(got, expected)
