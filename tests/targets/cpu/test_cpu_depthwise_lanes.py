"""Depthwise convolutions with output rows of at most ``LANES_MAX_OW`` pixels: the block's
channels in the vector lanes (``fusec.targets.cpu.depthwise``), issue #30.

Each numerics check runs poisoned outputs on fresh random inputs against the float64
reference (``cpu_check.check``); the lanes sum the taps in the planar loop's order with
fused multiply-adds, so the two forms agree to a few ulps, NaN and Inf at the same places."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_check import check, poison

from fusec.api import parse, run_pipeline
from fusec.ir.module import entry_function
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import Program
from fusec.runtime.reference import run_reference
from fusec.targets.cpu import depthwise
from fusec.targets.cpu.conv import choice as conv_choice
from fusec.targets.cpu.conv import gemm as conv_gemm
from fusec.targets.cpu.conv import planes as conv_planes
from fusec.tools.runner import random_inputs

LANES = "the channels in vector lanes"
SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(autouse=True)
def four_blocks_at_least(monkeypatch):
    """Block counts as on a 4-thread pool: several blocks, a ragged last one."""
    for module in (conv_choice, conv_gemm, conv_planes):
        monkeypatch.setattr(module, "MIN_BLOCKS", 4)


def _t(shape, dtype="f32"):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


def _out(size: int, pad: int, k: int, stride: int, dil: int) -> int:
    return (size + pad - dil * (k - 1) - 1) // stride + 1


def _dw_text(x_shape, kernel, strides, padding, dilations, epilogue: str = "relu") -> str:
    """A depthwise conv (groups = C) + bias + ``epilogue``; ``padding`` (top, left,
    bottom, right)."""
    n, c, h, w = x_shape
    oh = _out(h, padding[0] + padding[2], kernel[0], strides[0], dilations[0])
    ow = _out(w, padding[1] + padding[3], kernel[1], strides[1], dilations[1])
    x, wt, b, y = _t(x_shape), _t((c, 1, *kernel)), _t((c,)), _t((n, c, oh, ow))

    def arr(v):
        return ", ".join(map(str, v))

    return f"""
func.func @f(%x: {x}, %w: {wt}, %b: {b}) -> {y} {{
  %c = ai.conv2d %x, %w {{strides = array<i64: {arr(strides)}>,
                          padding = array<i64: {arr(padding)}>,
                          dilations = array<i64: {arr(dilations)}>, groups = {c}}} : {x} * {wt}
  %a = ai.bias_add %c, %b : {y} * {b}
  %o = ai.{epilogue} %a : {y}
  return %o : {y}
}}"""


CASES = [
    # x shape, kernel, strides, padding (t, l, b, r), dilations
    ((1, 40, 4, 4), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # 32 + 8 channels: ragged lanes
    ((2, 20, 9, 7), (3, 3), (2, 2), (0, 1, 1, 2), (1, 1)),  # stride 2, uneven padding
    # 16-pixel input rows and a 64-pixel output plane: the copies in 16x16 (AVX-512) or 8x8
    # tiles (depthwise_transpose), 32 + 18 channels: whole tiles, then the rest one by one
    ((1, 50, 16, 16), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 24, 8, 8), (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),  # ConvNeXt's 7x7
    ((1, 9, 11, 10), (3, 3), (1, 2), (2, 2, 2, 2), (2, 2)),  # dilated, strided along W
    ((3, 5, 6, 4), (1, 3), (1, 1), (0, 3, 0, 3), (1, 1)),  # padding wider than a tap reaches
    ((1, 70, 3, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 3x3 output, 3 blocks of lanes
    ((2, 33, 5, 8), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # a 1x1 kernel
    ((1, 20, 12, 12), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 12-pixel rows: ragged vectors
    ((1, 8, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # 14-pixel rows, 5x5
]


@pytest.mark.parametrize("case", [*CASES[:3], *(pytest.param(c, marks=SLOW) for c in CASES[3:])])
def test_depthwise_lanes_against_the_reference(cache, case):
    program = check(_dw_text(*case), cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "(depthwise) in " in source and LANES in source, source[:2000]


@pytest.mark.parametrize(
    "w, k, lanes",
    [(8, 3, True), (12, 3, True), (14, 5, True), (16, 3, False), (16, 7, False), (24, 7, False)],
)
def test_depthwise_lanes_rule(w, k, lanes):
    """Output rows of at most LANES_MAX_OW pixels take the lanes, and rows of at most
    LANES_RAGGED_OW that are not whole vectors; others the rows."""
    assert depthwise.takes_lanes(w, k * k) == lanes
    if w in (8, 16):
        text = _dw_text((1, 16, 4, w), (k, k), (1, 1), (k // 2,) * 4, (1, 1))
        module = parse(text)
        run_pipeline(module)
        program = Program(module, target="cpu", cache=None)
        source = "\n".join(kernel.source for kernel in program.kernels)
        assert (LANES in source) == lanes


@pytest.mark.parametrize("yield_conv", [False, True])
def test_depthwise_lanes_epilogue_by_rows_and_the_conv_yielded(cache, yield_conv):
    """An epilogue operand varying along H (whole output rows), the conv also a result
    (then written straight into it from the lanes)."""
    x, w, y, r = _t((2, 6, 10, 9)), _t((6, 1, 3, 3)), _t((2, 6, 8, 4)), _t((6, 8, 1))
    results = f"%o, %c : {y}, {y}" if yield_conv else f"%o : {y}"
    types = f"{y}, {y}" if yield_conv else y
    text = f"""
func.func @f(%x: {x}, %w: {w}, %r: {r}) -> ({types}) {{
  %c = ai.conv2d %x, %w {{strides = array<i64: 1, 2>, groups = 6}} : {x} * {w}
  %o = ai.mul %c, %r : {y} * {r}
  return {results}
}}"""
    program = check(text, cache=cache, kind="conv")
    source = program.kernels[0].source
    assert LANES in source and ("cbuf = ws[" in source) != yield_conv


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the reference
def test_depthwise_lanes_match_the_rows_non_finite_included(cache, monkeypatch):
    """The lanes and the planar rows sum the same products in the same order, the lanes
    with fused multiply-adds (``depthwise_tiles``): float32 results a few ulps apart,
    NaN where the reference has NaN, equal infinities."""
    text = _dw_text((1, 40, 6, 6), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    module = parse(text)
    run_pipeline(module)
    inputs = random_inputs(entry_function(module), 3)
    x = inputs[0]
    x[0, 0, 2, 2] = np.inf  # one +Inf: Inf in the outputs it reaches
    x[0, 1, 0, 0] = np.nan  # NaN at a corner (its window hangs over the padding)
    x[0, 2, 3, 3], x[0, 2, 3, 4] = np.inf, -np.inf  # Inf - Inf = NaN in a shared window
    results = []
    for lanes in (True, False):
        if not lanes:
            monkeypatch.setattr(depthwise, "takes_lanes", lambda ow, taps: False)
        program = Program(module, target="cpu", cache=cache)
        assert (LANES in program.kernels[0].source) == lanes
        (out,) = program(inputs, alloc=poison)
        results.append(out)
    lanes, rows = results
    assert np.array_equal(np.isnan(lanes), np.isnan(rows))
    assert np.array_equal(lanes[np.isinf(rows)], rows[np.isinf(rows)])
    assert not np.array_equal(lanes, rows, equal_nan=True)  # FMAs: not the rows' roundings
    np.testing.assert_allclose(lanes, rows, rtol=2e-6, atol=1e-6)  # NaN == NaN here
    (ref,) = run_reference(module, inputs, precision="float64")
    assert np.isnan(ref).any() and np.isinf(ref).any()
    assert np.array_equal(np.isnan(lanes), np.isnan(ref))
    assert np.array_equal(lanes[np.isinf(ref)], ref[np.isinf(ref)])
    finite = np.isfinite(ref)
    np.testing.assert_allclose(lanes[finite], ref[finite], rtol=1e-4, atol=1e-5)


PLANE = "depthwise_taps_plane("


@pytest.mark.parametrize(
    "case",
    [
        ((1, 6, 20, 21), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # 21 columns: a vector + 5
        pytest.param(((2, 5, 19, 18), (7, 7), (2, 1), (3, 3, 3, 3), (1, 1)), marks=SLOW),
        pytest.param(((1, 4, 22, 24), (3, 5), (1, 1), (2, 4, 2, 4), (2, 2)), marks=SLOW),
        # EfficientNet's 3x3: rows of 32, two vectors
        pytest.param(((1, 3, 12, 32), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), marks=SLOW),
    ],
)
def test_planar_rows_in_register_tiles(cache, case):
    """Output rows of at least a vector, stride 1 along them, more than one tap: the
    planar form's sums in ``depthwise_tiles.taps_plane`` (row strides and dilations as
    offsets); against the reference with poisoned outputs."""
    program = check(_dw_text(*case), cache=cache, kind="conv")
    source = program.kernels[0].source
    assert PLANE in source and LANES not in source, source[:2000]


def test_planar_register_tiles_rule():
    """Strides along the row, rows shorter than a vector and 1x1 kernels keep the loop;
    3x3 kernels take the tiles (EfficientNet's, measured faster: conv/planes.py)."""
    from fusec.targets.cpu.host import W

    # rows of more than a vector and longer than the lanes form takes (any ISA's W)
    wide = max(W, depthwise.LANES_RAGGED_OW) + 4
    assert not depthwise.takes_lanes(wide, 9)
    for case, tiles in [
        (((1, 4, 20, wide), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)), True),
        (((1, 4, 20, wide), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), True),
        (((1, 4, 20, wide), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)), False),
        (((1, 4, 40, 2 * wide), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)), False),
    ]:
        module = parse(_dw_text(*case))
        run_pipeline(module)
        source = Program(module, target="cpu", cache=None).kernels[0].source
        assert (PLANE in source) == tiles and LANES not in source


@pytest.mark.parametrize("channels", [40, 96])  # a ragged last block; blocks of fewer than 32
def test_lanes_with_a_constant_weight_packed_once(channels):
    """A constant weight: packed once per program tap-major per block of channels
    (layout "depthwise_lanes:<block>", ``depthwise.pack_lanes``), read in place; against
    the float64 reference on fresh random inputs, outputs poisoned."""
    rng = np.random.default_rng(channels)
    weight = rng.standard_normal((channels, 1, 5, 5)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    x, wt, y = _t((1, channels, 4, 4)), _t(weight.shape), _t((1, channels, 4, 4))

    def dense(a):
        return f"dense<{a.astype(np.float64).tolist()}> : {_t(a.shape)}"

    text = f"""
func.func @f(%x: {x}) -> {y} {{
  %w = arith.constant {dense(weight)}
  %b = arith.constant {dense(bias)}
  %c = ai.conv2d %x, %w {{padding = array<i64: 2, 2, 2, 2>, groups = {channels}}} : {x} * {wt}
  %a = ai.bias_add %c, %b : {y} * {_t((channels,))}
  return %a : {y}
}}"""
    module = parse(text)
    run_pipeline(module)
    program = Program(module, target="cpu", cache=None)
    (kernel,) = [k for k in program.kernels if k.kind == "conv"]
    assert LANES in kernel.source and "wt = in1[g // " in kernel.source
    assert any(layout.startswith("depthwise_lanes:") for _, layout in kernel.prepared_inputs)
    inputs = random_inputs(entry_function(module), 5)
    (got,) = program(inputs, alloc=poison)
    (want,) = run_reference(module, inputs, precision="float64")
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6


def _blocked_llvm(program, cache: KernelCache) -> str:
    """The LLVM IR of the program's (single) conv kernel's blocked stage."""
    from fusec.runtime.launch import SOURCE_NAME

    (kernel,) = [k for k in program.kernels if k.kind == "conv"]
    fn = getattr(cache.load_module(kernel.source), f"{SOURCE_NAME}_blocked")
    return "\n".join(fn.inspect_llvm().values())


@pytest.mark.parametrize(("hw", "opaque"), [(4, True), (8, False)])
def test_short_epilogue_rows_loop_over_an_opaque_count(cache, hw, opaque):
    """A 4x4 plane's epilogue rows (16 elements, rows.SHORT_ROWS) loop over
    ``opaque_count(pw)``: LLVM would unroll ``range(16)`` into scalar code (Numba leaves
    the SLP vectoriser off) where the opaque count keeps its loop vectorised; an 8x8
    plane's rows (64) keep their constant count."""
    text = _dw_text((2, 40, hw, hw), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "hard_swish")
    program = check(text, cache=cache, kind="conv")
    (kernel,) = program.kernels
    assert LANES in kernel.source
    assert ("range(opaque_count(pw))" in kernel.source) is opaque
    if opaque:  # the HardSwish's clamps as vector compares and selects
        llvm = _blocked_llvm(program, cache)
        assert re.search(r"fcmp \w+ <(8|16) x float>", llvm), "the epilogue ran scalar"
