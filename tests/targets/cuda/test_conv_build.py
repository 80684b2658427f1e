"""The conv templates on a machine without a GPU: routing, tile model, generated C++, SASS.

The kernels are built exactly as on the GPU (Numba LTO-IR + NVRTC LTO-IR linked
by nvJitLink for sm_90a), so the cubins checked here are the ones that run.
The numpy model replays the implicit GEMM's index arithmetic (strips, taps,
channel chunks, TMA zero fill, fragment stores) against the reference conv.
"""

from __future__ import annotations

import re
from dataclasses import replace

import conv_model as model
import numpy as np
import pytest
from conv_cases import resnet_basic
from lanes import sampled
from test_gemm_build import (
    needs_toolchain,
    needs_toolchain_in_the_default_lane,
    sass_of,
    spill_free_sass,
)

import fusec
from fusec.dialect.numpy_ops import conv2d as reference_conv2d
from fusec.errors import FusecError
from fusec.targets.cuda.conv.config import ConvGeometry, ConvTile, choose_tile
from fusec.targets.cuda.conv.cpp import ConvSpec, DirectConvSpec
from fusec.targets.cuda.conv.im2col import Im2col, im2col_problem
from fusec.targets.cuda.conv.transpose import TransposeTiling
from fusec.targets.cuda.gemm.cpp import Epilogue

BENCH = ConvGeometry(32, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1)
#: ResNet-50's stem at batch 32: 3 channels, 7x7/2, padding 3
STEM = ConvGeometry(32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, 3, 3)
BIAS_RELU = Epilogue(
    "const float b = fs_ld_f16(e0, i1);\nconst float t = acc + b;\ny = t < 0.0f ? 0.0f : t;",
    ("f16",),
    "bias_relu",
)

# ------------------------------------------------------------------ configs


def test_tile_text_round_trips() -> None:
    tile = ConvTile(64, 256, 4, 2, "n")
    assert tile.text == "64x256 s4 c2n"
    assert ConvTile.parse(tile.text) == tile
    assert (tile.wm, tile.wn, tile.acc_registers, tile.threads) == (64, 128, 64, 384)
    split = ConvTile.parse("128x64 s8 c2m sk=4")
    assert (split.split_k, split.acc_registers, split.text) == (4, 32, "128x64 s8 c2m sk=4")


@pytest.mark.parametrize(
    "text, problem",
    [
        ("64x320 s4 c2n", "bn is 64"),
        ("128x256 s6 c2m", "shared memory"),
        ("64x64 s4 c2n", "multiple of 64 x consumers"),
        ("128x256 s2 c1m", "accumulator registers"),
        ("128x256 s4 c2m sk=2", "at most 64 accumulators"),
        ("128x64 s8 c2m sk=17", "split_k must be 1 to 16"),
    ],
)
def test_bad_tiles_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ConvTile.parse(text)


def test_choose_tile() -> None:
    assert choose_tile(BENCH).text == "64x256 s4 c2n"
    assert choose_tile(ConvGeometry(8, 256, 28, 28, 256, 3, 3)).split == "m"


def test_under_filled_convs_take_the_narrow_tile_and_split_k(monkeypatch) -> None:
    """ResNet-50 at batch 1: its 128 x 256 tiles left most of the 132 SMs idle (2 to 8 tiles
    for the 14x14 and 7x7 stages, whose 14- or 7-pixel rows fill a 64-pixel strip barely):
    the narrow tile (one strip) with the reduction split, at least 3 steps a split. The
    default (``$FUSEC_SPLIT_K`` unset or "conv"); "off" keeps the wide tile."""
    pad = (1, 1, 1, 1, 1, 1)
    monkeypatch.setenv("FUSEC_SPLIT_K", "off")
    assert choose_tile(ConvGeometry(1, 512, 7, 7, 512, 3, 3, *pad)).text == "128x256 s4 c2m"
    monkeypatch.delenv("FUSEC_SPLIT_K")
    expect = {
        # one 8x8 strip (7x7), four 16x4 strips (14x14): fewer tiles, more splits
        ConvGeometry(1, 512, 7, 7, 512, 3, 3, *pad): "128x64 s8 c2m sk=8",  # 72 steps
        ConvGeometry(1, 256, 14, 14, 256, 3, 3, *pad): "128x64 s8 c2m sk=8",
        ConvGeometry(1, 1024, 14, 14, 256, 1, 1): "128x64 s8 c2m sk=5",  # 16 steps
        ConvGeometry(1, 64, 56, 56, 64, 3, 3, *pad): "64x128 s6 c2n sk=3",  # 9 steps
        ConvGeometry(1, 64, 56, 56, 256, 1, 1): "128x64 s8 c2m",  # 1 step: no split
        # batch 32: 32 strips of 8x8 pixels, the narrow tile's 128 tiles fill the SMs
        ConvGeometry(32, 512, 7, 7, 512, 3, 3, *pad): "128x64 s8 c2m",
    }
    for geo, text in expect.items():
        assert choose_tile(geo).text == text, geo
    # grouped convs split only with FUSEC_SPLIT_K=on: the GPU tests of the split are ungrouped
    grouped = ConvGeometry(1, 1024, 7, 7, 1024, 3, 3, *pad, groups=2)
    assert "sk=" not in choose_tile(grouped).text
    monkeypatch.setenv("FUSEC_SPLIT_K", "on")
    assert "sk=" in choose_tile(grouped).text


# -------------------------------------------------------------- tile model

GEOMETRIES = [
    # (geometry, tile, grid): odd sizes, a second strip per row, ragged channels and rows
    (ConvGeometry(2, 8, 9, 11, 6, 3, 3, 1, 1, 1, 1, 1, 1), ConvTile(64, 128, 2, 2, "n"), 3),
    # stride 2 along H, asymmetric padding, dilation along H, 2 strips per row, 3 row blocks
    (ConvGeometry(1, 70, 5, 70, 130, 3, 2, 2, 1, 2, 0, 1, 3, 2, 1),
     ConvTile(128, 128, 2, 2, "m"), 2),
    # groups 4 (16 channels each), dilation along W, padding only at the start
    (ConvGeometry(2, 64, 6, 7, 8, 3, 3, 1, 1, 2, 1, 0, 0, 1, 2, 4), ConvTile(64, 64, 2, 1, "n"), 5),
    # 1x1, more strips than the grid covers at once
    (ConvGeometry(3, 16, 4, 5, 24, 1, 1), ConvTile(64, 256, 2, 2, "n"), 1),
    # stride 4 along W (the most a box's 256 pixels allow) with dilation 2 and padding
    (ConvGeometry(1, 8, 5, 70, 8, 2, 3, 1, 4, 0, 2, 0, 1, 1, 2), ConvTile(64, 64, 2, 1, "n"), 2),
    # 3x3 stride 3 both ways, padding 1, ragged rows
    (ConvGeometry(2, 16, 10, 29, 24, 3, 3, 3, 3, 1, 1, 1, 1), ConvTile(64, 64, 2, 1, "n"), 3),
    # a stem through the implicit GEMM ($FUSEC_CONV_FEW_CHANNELS=implicit): 3 channels
    # (CGP 8, the 64-channel chunk zero-filled by TMA), 7x7 stride 2, padding 3
    (ConvGeometry(1, 3, 21, 70, 16, 7, 7, 2, 2, 3, 3, 3, 3), ConvTile(64, 64, 2, 1, "n"), 2),
]  # fmt: skip

#: Strided along W (each strip's box traverses every stride_w-th input pixel): the ResNet
#: 3x3/2 and the 1x1/2 downsample, a second strip per row (q0 = 64 reads from pixel 128).
STRIDED_W = [
    (ConvGeometry(2, 16, 7, 13, 24, 3, 3, 2, 2, 1, 1, 1, 1), ConvTile(64, 64, 2, 1, "n"), 3),
    (ConvGeometry(1, 16, 3, 150, 8, 1, 1, 2, 2), ConvTile(64, 64, 2, 1, "n"), 2),
]  # fmt: skip


#: Short rows of stride-1 convs share a strip (``ConvGeometry.strip_width``): ResNet's 7x7
#: stage (8 rows of 8, 15 of 64 columns past the image), its 14x14 stage (4 rows of 16, the
#: last band half outside), 28 columns (2 rows of 32).
ROW_STRIPS = [
    (ConvGeometry(2, 64, 7, 7, 72, 3, 3, 1, 1, 1, 1, 1, 1), ConvTile(128, 128, 2, 2, "m"), 3),
    (ConvGeometry(1, 16, 14, 14, 24, 3, 3, 1, 1, 1, 1, 1, 1), ConvTile(64, 128, 2, 2, "n"), 2),
    (ConvGeometry(1, 16, 5, 28, 8, 3, 3, 1, 1, 1, 1, 1, 1), ConvTile(64, 64, 2, 1, "n"), 2),
    # strided: the box steps 2 input rows (and pixels); ResNet's 3x3/2 and 1x1/2 to 7x7
    (ConvGeometry(2, 64, 14, 14, 40, 3, 3, 2, 2, 1, 1, 1, 1), ConvTile(64, 64, 2, 1, "n"), 2),
    (ConvGeometry(2, 16, 14, 14, 24, 1, 1, 2, 2), ConvTile(64, 128, 2, 2, "n"), 1),
]  # fmt: skip


#: A tile-model test over many geometries runs the first in the default lane (a
#: Python model of every thread's loads: seconds apiece), the others in the slow lane.
def _first(index: int, _value: object) -> bool:
    return index == 0


@pytest.mark.parametrize(
    "geo, tile, grid", [*sampled(GEOMETRIES, _first, unpack=True), *STRIDED_W, *ROW_STRIPS]
)
def test_tile_model_matches_the_reference_conv(
    geo: ConvGeometry, tile: ConvTile, grid: int
) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float32)
    w = rng.standard_normal((geo.k, geo.cg, geo.r, geo.s)).astype(np.float32)
    bias = rng.standard_normal(geo.k).astype(np.float32)

    def bias_relu(acc: float, n: int, k: int, p: int, q: int) -> float:
        return max(acc + bias[k], 0.0)

    out, writes = model.run(geo, tile, x, w, grid=grid, epilogue=bias_relu)
    assert geo.strip_width * geo.strip_rows == 64
    assert (writes == 1).all(), "an output element was written twice or never"
    ref = reference_conv2d(
        x,
        w,
        strides=(geo.stride_h, geo.stride_w),
        padding=(geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right),
        dilations=(geo.dil_h, geo.dil_w),
        groups=geo.groups,
    )
    ref = np.maximum(ref + bias[None, :, None, None], 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def _im2col_value(x: np.ndarray, src: ConvGeometry, pixel: np.ndarray, j: np.ndarray):
    """``fusec::im2col_value`` at flat pixels ``pixel`` and columns ``j`` (arrays)."""
    q, rest = pixel % src.q, pixel // src.q
    p, n = rest % src.p, rest // src.p
    c, rs = j // (src.r * src.s), j % (src.r * src.s)
    h = p * src.stride_h - src.pad_top + rs // src.s * src.dil_h
    w = q * src.stride_w - src.pad_left + rs % src.s * src.dil_w
    live = (j < src.c * src.r * src.s) & (h >= 0) & (h < src.h) & (w >= 0) & (w < src.w)
    clip = (np.minimum(c, src.c - 1), np.clip(h, 0, src.h - 1), np.clip(w, 0, src.w - 1))
    return np.where(live, x[(n, *clip)], 0.0)


def im2col_model(x: np.ndarray, im: Im2col) -> np.ndarray:
    """The matrix ``fusec::im2col`` (im2col.cuh) writes, replayed from its index arithmetic
    (every thread of a step at once); NaN where nothing was written."""
    src, gemm = im.source, im.gemm
    per_pixel = gemm.cgp // 8
    out = np.full((im.groups * 8,), np.nan, np.float32)
    i = np.arange(im.groups)
    pixel, j0 = i // per_pixel, (i % per_pixel) * 8
    for k in range(8):
        out[i * 8 + k] = _im2col_value(x, src, pixel, j0 + k)
    return out.reshape(src.n, src.p, src.q, gemm.cgp)


#: few-channel convs: ResNet's 7x7/2 stem, MobileNet's 3x3/2, a stride of 5 along W (past
#: the tap-wise GEMM's 4), dilation with asymmetric padding, a 1x1/2 on 3 channels
IM2COL_STEMS = [
    ConvGeometry(2, 3, 23, 21, 16, 7, 7, 2, 2, 3, 3, 3, 3),
    ConvGeometry(1, 3, 17, 18, 8, 3, 3, 2, 2, 1, 1, 1, 1),
    ConvGeometry(1, 3, 9, 31, 8, 3, 3, 1, 5, 0, 2, 1, 0),
    ConvGeometry(1, 5, 11, 12, 8, 3, 2, 1, 1, 2, 1, 0, 2, 2, 3),
    ConvGeometry(2, 3, 8, 9, 8, 1, 1, 2, 2),
]


@pytest.mark.parametrize("geo", IM2COL_STEMS)
def test_im2col_matrix_times_the_weights_is_the_conv(geo: ConvGeometry) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float32)
    w = rng.standard_normal((geo.k, geo.c, geo.r, geo.s)).astype(np.float32)
    im = Im2col(geo)
    matrix = im2col_model(x, im)
    ck = geo.c * geo.r * geo.s
    assert not np.isnan(matrix).any(), "a column no thread wrote"
    assert (matrix[..., ck:] == 0).all() and im.gemm.c == ck
    # the KCRS weights in their own order are the 1x1 conv's [K][C*R*S]
    got = np.einsum("npqj,kj->nkpq", matrix[..., :ck], w.reshape(geo.k, ck))
    ref = reference_conv2d(
        x,
        w,
        strides=(geo.stride_h, geo.stride_w),
        padding=(geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right),
        dilations=(geo.dil_h, geo.dil_w),
    )
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_im2col_feeds_the_implicit_gemm_tile_model() -> None:
    """The GEMM half: the tile model of the 1x1 conv ``im2col()`` over the matrix (read as
    the NCHW input ``[N][CK][P][Q]``) with the weights ``[K][CK][1][1]`` is the conv."""
    geo = IM2COL_STEMS[1]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float32)
    w = rng.standard_normal((geo.k, geo.c, geo.r, geo.s)).astype(np.float32)
    im = Im2col(geo)
    ck = im.gemm.c
    matrix = im2col_model(x, im)[..., :ck].transpose(0, 3, 1, 2)
    tile = ConvTile(64, 64, 2, 1, "n")
    out, writes = model.run(im.gemm, tile, matrix, w.reshape(-1, ck, 1, 1), grid=2)
    assert (writes == 1).all()
    ref = reference_conv2d(x, w, strides=2, padding=1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_im2col_is_refused_where_it_is_no_gain() -> None:
    assert "groups" in (im2col_problem(ConvGeometry(1, 8, 5, 5, 8, 3, 3, groups=8)) or "")
    assert "its own im2col" in (im2col_problem(ConvGeometry(1, 3, 5, 5, 8, 1, 1)) or "")
    with pytest.raises(ValueError, match="im2col"):
        ConvSpec(BENCH, choose_tile(BENCH), input="im2col")  # no source


def test_tma_box_zero_fills_outside() -> None:
    t = np.arange(12, dtype=np.float32).reshape(3, 4)
    box = model.tma_box(t, (-1, 2), (3, 2))  # columns -1..1 of rows 2..3
    np.testing.assert_array_equal(box, [[0, 8, 9], [0, 0, 0]])
    assert not model.tma_box(t, (5, -4), (2, 2)).any()  # entirely outside


def test_tma_box_element_strides_load_every_nth_element_packed() -> None:
    """A traversal stride loads ceil(box / stride) elements from the box's start, packed,
    with zero fill where a traversed coordinate is outside."""
    t = np.arange(30, dtype=np.float32).reshape(3, 10)
    box = model.tma_box(t, (-1, 1), (7, 2), (2, 1))  # columns -1, 1, 3, 5 of rows 1..2
    np.testing.assert_array_equal(box, [[0, 11, 13, 15], [0, 21, 23, 25]])
    box = model.tma_box(t, (5, 0), (8, 1), (3, 1))  # columns 5, 8, 11 (outside) of row 0
    np.testing.assert_array_equal(box, [[5, 8, 0]])


def test_relayout_is_krsc() -> None:
    geo = ConvGeometry(1, 6, 4, 4, 2, 2, 3, groups=2)
    w = np.arange(2 * 3 * 2 * 3, dtype=np.float32).reshape(2, 3, 2, 3)
    wp = model.relayout(geo, w)
    assert wp.shape == (2, 6, 8)
    np.testing.assert_array_equal(wp[1, 4, :3], w[1, :, 1, 1])
    assert not wp[:, :, 3:].any()


# ------------------------------------------------- channels-last copy (convx)

TRANSPOSES = [
    # (geometry, vector): the bench layer (one 64 x 128 block column, ragged last block);
    # CG 20 -> CGP 24 (zero channels inside a lane's 8); groups 2 of 18 (CGP 24, 48 padded
    # channels: lanes past them idle); 136 channels (a ragged third channel block); H*W
    # odd (7 x 7), 99 and 54 (scalar, ragged pixels inside a lane's 8)
    (ConvGeometry(1, 64, 56, 56, 64, 3, 3), True),
    (ConvGeometry(1, 64, 56, 56, 64, 3, 3), False),
    (ConvGeometry(2, 20, 8, 16, 64, 3, 3), True),
    (ConvGeometry(2, 36, 7, 7, 32, 3, 3, groups=2), False),
    (ConvGeometry(1, 136, 5, 8, 64, 1, 1), True),
    (ConvGeometry(2, 136, 9, 11, 64, 1, 1), False),
    (ConvGeometry(1, 16, 6, 9, 64, 1, 1), False),
]  # fmt: skip


@pytest.mark.parametrize("geo, vector", TRANSPOSES)
def test_channels_last_copy_threads_write_every_element_once(
    geo: ConvGeometry, vector: bool
) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float32)
    out, writes = model.transpose_threads(geo, x, vector)
    assert (writes == 1).all(), "a channels-last element was written twice or never"
    expected = model.channels_last(geo, x).reshape(out.shape)
    np.testing.assert_array_equal(out, expected)  # the CGP padding included: zeros


def test_channels_last_copy_tiling() -> None:
    bench = TransposeTiling(BENCH)
    assert (bench.lc, bench.block_channels, bench.block_pixels) == (8, 64, 128)
    assert bench.vectorizable and bench.grid == (25, 1, 32)
    few = TransposeTiling(ConvGeometry(1, 20, 7, 7, 8, 1, 1))  # 24 padded channels
    assert (few.lc, few.block_pixels, few.vectorizable) == (4, 256, False)
    with pytest.raises(ValueError, match="H\\*W % 8"):
        model.transpose_threads(few.geo, np.zeros((1, 20, 7, 7), np.float32), True)


def _entry(ptx: str, name: str) -> str:
    body = ptx[ptx.index(f".entry {name}(") :]
    return body[: body.index("\n}\n")]


@needs_toolchain
def test_channels_last_copy_ptx_moves_16_bytes_per_access() -> None:
    """The vector copy reads and writes 16 bytes per access (8 of each per thread); its
    scalar twin (a misaligned input) and the copy of an odd H*W still store 16 bytes."""
    from fusec.targets.cuda import build

    spec = SPECS[0]  # the bench layer: H*W = 3136
    ptx = build.ptx(spec)
    vector = _entry(ptx, spec.transpose_name)
    assert len(re.findall(r"ld\.global\.nc\.v4\.u32", vector)) == 8
    assert len(re.findall(r"st\.global\.v4\.b32", vector)) == 8
    assert not re.search(r"(ld|st)\.global(\.nc)?\.(u16|b16|u32|b32)\b", vector)
    scalar = _entry(ptx, spec.transpose_scalar_name)
    assert len(re.findall(r"ld\.global\.nc\.u16", scalar)) == 64
    assert len(re.findall(r"st\.global\.v4\.b32", scalar)) == 8
    odd = ConvSpec(ConvGeometry(2, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1))
    assert odd.transpose_scalar_name is None
    ptx = build.ptx(odd)
    assert ".entry fusec_convxs_" not in ptx
    body = _entry(ptx, odd.transpose_name)
    assert "ld.global.nc.v4" not in body
    assert len(re.findall(r"st\.global\.v4\.b32", body)) == 8


# ------------------------------------------------------------------ routing

CONV = """func.func @f(%x: tensor<{n}x{c}x{h}x{w}x{t}>, %k: tensor<{k}x{cg}x3x3x{t}>,
                  %b: tensor<{k}x{t}>) -> tensor<{n}x{k}x{p}x{q}x{t}> {{
  %c = ai.conv2d %x, %k {{strides = array<i64: {sh}, {sw}>, padding = array<i64: 1, 1>,
                         groups = {g} : i64}}
       : tensor<{n}x{c}x{h}x{w}x{t}> * tensor<{k}x{cg}x3x3x{t}>
  %y = ai.bias_add %c, %b : tensor<{n}x{k}x{p}x{q}x{t}> * tensor<{k}x{t}>
  %r = ai.relu %y : tensor<{n}x{k}x{p}x{q}x{t}>
  return %r : tensor<{n}x{k}x{p}x{q}x{t}>
}}"""


def conv_text(t="f16", c=64, k=64, g=1, sh=1, sw=1, n=2, h=9, w=10) -> str:
    p, q = (h - 1) // sh + 1, (w - 1) // sw + 1
    return CONV.format(t=t, c=c, k=k, g=g, cg=c // g, sh=sh, sw=sw, n=n, h=h, w=w, p=p, q=q)


def _kernel_source(text: str) -> str:
    compiled = fusec.compile(text, target="cuda", executable=False)
    (kernel,) = [k for k in compiled.kernels if k.kind == "conv"]
    compile(kernel.source, kernel.name, "exec")  # valid Python
    return kernel.source


@pytest.mark.parametrize(
    "text, expected",
    [
        (conv_text(), "implicit-GEMM conv2d on the Hopper Tensor Cores"),
        (conv_text(t="bf16", sh=2), "implicit-GEMM conv2d"),
        (conv_text(g=64), "direct conv2d"),
        (conv_text(c=32, k=64, g=8), "direct conv2d"),
        (conv_text(sw=2), "implicit-GEMM conv2d on the Hopper Tensor Cores"),
        (conv_text(c=3, sw=2), "gathered per call into its im2col matrix"),
        # few channels: the im2col matrix's 1x1 conv takes any stride
        (conv_text(c=3, sw=5, w=300), "the GEMM a 1x1 conv over its 27 channels"),
        (conv_text(sh=2, sw=4, w=300), "implicit-GEMM conv2d on the Hopper Tensor Cores"),
        (
            conv_text(sw=5, w=300),
            "FALLBACK: the Tensor Core template cannot serve it: stride along W of 5 > 4",
        ),
        (conv_text(t="f32"), "FALLBACK: the Tensor Core template cannot serve it: f32 conv"),
    ],
)
def test_routing_names_the_template_or_the_reason(text: str, expected: str) -> None:
    assert expected in _kernel_source(text)


def test_conv_tile_env_overrides_the_choice(monkeypatch) -> None:
    """$FUSEC_CONV_TILE (the benchmarks' A/B switch) replaces ``choose_tile``'s tile."""
    assert "tile 64x192 s4 c1n" not in _kernel_source(conv_text())
    monkeypatch.setenv("FUSEC_CONV_TILE", "64x192 s4 c1n")
    assert "tile 64x192 s4 c1n" in _kernel_source(conv_text())
    monkeypatch.setenv("FUSEC_CONV_TILE", "64x96 s6 c2n")  # a clean error, not a traceback
    with pytest.raises(FusecError, match=r"tile-gemm: \$FUSEC_CONV_TILE: bad conv tile"):
        _kernel_source(conv_text())


def test_epilogue_is_generated_from_the_ops() -> None:
    source = _kernel_source(conv_text().replace("@f(", "@user_marker_fn("))
    # the bias along channels: loaded by the kernel, passed to the body as ev0
    assert "const float t0 = (acc + ev0)" in source and "channel_args=(0,)" in source
    assert "ai.bias_add -> ai.relu" in source
    assert "user_marker" not in source


# ------------------------------------------------------------ generated C++


SPECS = [
    ConvSpec(BENCH, choose_tile(BENCH), "f16", "f16", BIAS_RELU),
    # the A/B alternatives of benchmarks/conv_attn_device.sh ($FUSEC_CONV_TILE)
    ConvSpec(BENCH, ConvTile.parse("64x128 s6 c2n"), "f16", "f16", BIAS_RELU),
    ConvSpec(BENCH, ConvTile.parse("64x192 s4 c1n"), "f16", "f16", BIAS_RELU),
    ConvSpec(
        ConvGeometry(4, 256, 15, 15, 256, 3, 3, 2, 1, 1, 1, 1, 1),
        ConvTile(128, 256, 4, 2, "m"),
        "bf16",
        "f32",
    ),
    # ResNet-50's stem through the implicit GEMM: 3 channels, 7x7/2
    ConvSpec(
        STEM,
        ConvTile.parse("64x128 s4 c2n"),
        "f16",
        "f16",
        BIAS_RELU,
    ),
    # ... and as the 1x1 conv over its im2col matrix (147 channels)
    ConvSpec(
        STEM.im2col(),
        choose_tile(STEM.im2col()),
        "f16",
        "f16",
        BIAS_RELU,
        input="im2col",
        source=STEM,
    ),
    # ResNet-50's stride-2 3x3 (layer 2, batch 32): strided boxes along W
    ConvSpec(
        ConvGeometry(32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1, 1, 1),
        ConvTile.parse("64x128 s4 c2n"),
        "f16",
        "f16",
        BIAS_RELU,
    ),
    # ResNet-50's 7x7 stage at batch 1: the narrow tile, its 72 steps split 4 ways
    ConvSpec(
        ConvGeometry(1, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1, 1, 1),
        ConvTile.parse("128x64 s8 c2m sk=4"),
        "f16",
        "f16",
        BIAS_RELU,
    ),
]


def tma_innermost_coordinates(source: str) -> list[str]:
    """The first (innermost) coordinate of every TMA load in generated C++."""
    calls = re.findall(r"fs_tma_load\(([^;]*)\);", source)
    return [re.split(r",\s*", call)[3].strip() for call in calls]


def test_tma_innermost_coordinates_are_16_byte_aligned() -> None:
    """TMA requires the innermost coordinate of a box to be 16-byte aligned (an NCHW box
    shifted along W was an illegal instruction on the H200): the conv kernel's boxes
    (conv.cuh) start at chunk multiples, but for the NCHW in-place read, which only inputs
    that pass ``nchw_input_problem`` take; these specs take the channels-last read."""
    from fusec.targets.cuda.headers import INCLUDE_DIR

    header = (INCLUDE_DIR / "fusec" / "conv.cuh").read_text()
    nchw = header.split("if constexpr (C::INPUT == CONV_INPUT_NCHW) {")[1].split("} else")[0]
    assert tma_innermost_coordinates(nchw) == ["q0 + s * C::DW - C::PL"]
    coords = tma_innermost_coordinates(header.replace(nchw, ""))
    assert len(coords) == 5 and all(re.fullmatch(r"\w+ \* 64", c) for c in coords), coords
    for spec in SPECS:
        assert "INPUT = fusec::CONV_INPUT_NHWC," in spec.cpp_source()


@needs_toolchain
@pytest.mark.parametrize(
    "spec",
    SPECS,
    ids=[
        "bench-64x256n-f16",
        "bench-64x128n",
        "bench-64x192-1c",
        "128x256m-bf16-f32",
        "stem-7x7s2-c3",
        "stem-im2col-7x7s2-c3",
        "stride2-64x128n",
        "resnet-7x7-b1-128x64m-sk4",
    ],
)
def test_conv_cubin_is_one_inlined_wgmma_kernel(spec: ConvSpec, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    ptx = build.ptx(spec)
    assert f"wgmma.mma_async.sync.aligned.m64n{spec.tile.wn}k16" in ptx
    assert "cp.async.bulk.tensor.5d" in ptx and "cp.async.bulk.tensor.4d" in ptx
    built = build.build(spec, KernelCache(tmp_path))
    assert f"Function properties for {spec.function_name}" not in built.log
    # the conv kernel and the re-layout kernels, none spilling
    spills = re.findall(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert len(spills) == 1 + len(spec.named_kernels)
    assert not re.search(r"\b[1-9]\d* bytes spill", built.log)
    assert "setmaxnreg' ignored" not in built.log
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    hgmma = re.findall(r"HGMMA\.64x(\d+)x16\.F32", sass)
    # one reduction step's wgmmas in the main loop, or every step's where ptxas unrolls a
    # loop of a few (the im2col stem's 3 chunks)
    step = 4 * (spec.tile.wm // 64)
    assert len(hgmma) in (step, step * spec.geo.kblocks) and set(hgmma) == {str(spec.tile.wn)}
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    assert "CALL" not in sass
    loads = len(re.findall(r"UTMALDG\.5D", sass))
    assert loads in (spec.tile.bn // 64, spec.tile.bn // 64 * spec.geo.kblocks)
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass  # one wgmma group kept in flight


@needs_toolchain_in_the_default_lane
def test_direct_cubin_has_no_local_memory(tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    geo = ConvGeometry(32, 64, 56, 56, 64, 3, 3, 2, 2, 1, 1, 1, 1, groups=64)
    built = build.build(DirectConvSpec(geo, "bf16", "bf16", BIAS_RELU), KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert "CALL" not in sass


# ------------------------------------- the NCHW input read in place ($FUSEC_CONV_INPUT=nchw)


def _im2col(geo: ConvGeometry, x: np.ndarray) -> np.ndarray:
    """The reference conv's im2col (``numpy_ops.conv2d``'s window view), independently:
    ``[G][(tap, channel)][N*P*Q]``, channels padded to CC chunks of 64 with zeros."""
    xp = np.pad(x, ((0, 0), (0, 0), (geo.pad_top, geo.pad_bottom), (geo.pad_left, geo.pad_right)))
    cols = np.zeros((geo.groups, geo.r * geo.s, geo.chunks * 64, geo.n, geo.p, geo.q))
    for r, s in np.ndindex(geo.r, geo.s):
        rows = np.arange(geo.p) * geo.stride_h + r * geo.dil_h
        columns = np.arange(geo.q) * geo.stride_w + s * geo.dil_w
        window = xp[:, :, rows][:, :, :, columns]  # N, C, P, Q
        grouped = window.reshape(geo.n, geo.groups, geo.cg, geo.p, geo.q).transpose(1, 2, 0, 3, 4)
        cols[:, r * geo.s + s, : geo.cg] = grouped
    return cols.reshape(geo.groups, -1, geo.n * geo.p * geo.q)


IM2COL_SHAPES = {
    # name: geometry (n, c, h, w, k, r, s, sh, sw, pt, pl, pb, pr, dh, dw, groups)
    "3x3-pad1": ConvGeometry(2, 8, 6, 10, 4, 3, 3, 1, 1, 1, 1, 1, 1),
    "1x1": ConvGeometry(2, 8, 5, 16, 4, 1, 1),
    "5x5-pad2": ConvGeometry(1, 8, 9, 11, 4, 5, 5, 1, 1, 2, 2, 2, 2),
    "7x7-odd": ConvGeometry(2, 8, 7, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1),
    "13x9-ragged-70ch": ConvGeometry(1, 70, 13, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1),
    "dilation2": ConvGeometry(1, 8, 11, 12, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2),
    "stride2h-groups2": ConvGeometry(2, 16, 9, 8, 4, 3, 1, 2, 1, 1, 0, 1, 0, 1, 1, 2),
    "1x3-dil8-pad8": ConvGeometry(1, 8, 3, 24, 4, 1, 3, 1, 1, 0, 8, 0, 8, 1, 8),
    "2-strips-per-row": ConvGeometry(1, 8, 2, 72, 4, 1, 1),
}
#: (read in place: strips of one row, ``ConvGeometry.max_strip_rows``)
IM2COL_SHAPES = {name: replace(g, max_strip_rows=1) for name, g in IM2COL_SHAPES.items()}


@pytest.mark.parametrize("geo", IM2COL_SHAPES.values(), ids=IM2COL_SHAPES)
def test_nchw_boxes_reproduce_the_reference_im2col(geo: ConvGeometry) -> None:
    """The in-place boxes (coordinates and zero fill) give exactly the im2col matrix, for
    every shape; TMA can issue them only where every W coordinate is 16-byte aligned
    (the tap shifts multiples of 8 pixels), and ``nchw_input_problem`` refuses the rest."""
    from fusec.targets.cuda.conv.cpp import nchw_input_problem

    x = np.random.default_rng(3).standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float32)
    cols, w_coords = model.nchw_columns(geo, x)
    np.testing.assert_array_equal(cols, _im2col(geo, x))
    aligned = all(c % 8 == 0 for c in w_coords)
    assert aligned == all((s * geo.dil_w - geo.pad_left) % 8 == 0 for s in range(geo.s))
    assert aligned or nchw_input_problem(geo), "unaligned TMA reads admitted"


@pytest.mark.parametrize(
    "geo, problem",
    [
        (BENCH, r"tap shifts along W of \[-1, 1\] pixels: a TMA read must start 16-byte"),
        (ConvGeometry(2, 96, 13, 9, 40, 1, 1), "W = 9: the NCHW row pitch"),
        (ConvGeometry(2, 64, 8, 8, 64, 1, 1, 1, 2), "stride along W"),
        (ConvGeometry(1, 64, 8, 16, 64, 5, 5, 1, 1, 2, 2, 2, 2), r"\[-2, -1, 1, 2\]"),
    ],
)
def test_nchw_input_is_refused_where_tma_cannot_read_it(geo: ConvGeometry, problem: str) -> None:
    from fusec.targets.cuda.conv.cpp import nchw_input_problem

    assert re.search(problem, nchw_input_problem(geo) or "")
    with pytest.raises(ValueError, match=problem):
        ConvSpec(geo, choose_tile(geo), input="nchw")


NCHW_GEOMETRIES = [
    # (geometry, tile, grid): 1x1 with a ragged channel chunk and row block, 2 strips a row
    (ConvGeometry(2, 70, 3, 72, 130, 1, 1), ConvTile(128, 128, 2, 2, "m"), 3),
    # 3x1: stride 2 and dilation 2 along H, padding along H only
    (ConvGeometry(2, 16, 9, 16, 24, 3, 1, 2, 1, 2, 0, 1, 0, 2, 1), ConvTile(64, 128, 2, 2, "n"), 2),
    # groups 2 of 16 channels (the box's channels past CG are zero fill), odd H
    (ConvGeometry(3, 32, 7, 8, 32, 1, 1, groups=2), ConvTile(64, 64, 2, 1, "n"), 5),
    # 1x3 with shifts -8, 0, 8 (negative W coordinates zero-filled)
    (ConvGeometry(1, 16, 3, 24, 8, 1, 3, 1, 1, 0, 8, 0, 8, 1, 8), ConvTile(64, 256, 2, 2, "n"), 1),
]  # fmt: skip
NCHW_GEOMETRIES = [(replace(g, max_strip_rows=1), t, n) for g, t, n in NCHW_GEOMETRIES]


@pytest.mark.parametrize("geo, tile, grid", sampled(NCHW_GEOMETRIES, _first, unpack=True))
def test_nchw_tile_model_matches_the_reference_conv(
    geo: ConvGeometry, tile: ConvTile, grid: int
) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float32)
    w = rng.standard_normal((geo.k, geo.cg, geo.r, geo.s)).astype(np.float32)
    ConvSpec(geo, tile, input="nchw")  # accepted
    out, writes = model.run(geo, tile, x, w, grid=grid, input="nchw")
    assert (writes == 1).all(), "an output element was written twice or never"
    ref = reference_conv2d(
        x,
        w,
        strides=(geo.stride_h, geo.stride_w),
        padding=(geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right),
        dilations=(geo.dil_h, geo.dil_w),
        groups=geo.groups,
    )
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_nchw_tile_model_refuses_unaligned_boxes() -> None:
    geo = ConvGeometry(1, 16, 4, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1)
    x = np.ones((1, 16, 4, 8), dtype=np.float32)
    w = np.ones((8, 16, 3, 3), dtype=np.float32)
    with pytest.raises(AssertionError, match="16-byte aligned"):
        model.run(geo, ConvTile(64, 64, 2, 1, "n"), x, w, grid=1, input="nchw")


def _conv_1x1_text(t: str = "f16", w: int = 56) -> str:
    from test_conv_gpu import conv_graph

    return conv_graph(2, 64, 8, w, 64, 1, 1, t=t)


def test_conv_input_env_selects_the_in_place_read(monkeypatch) -> None:
    """$FUSEC_CONV_INPUT=nchw (off by default) drops the channels-last copy where the shape
    allows it and says why where it does not."""
    default = _kernel_source(_conv_1x1_text())
    # conv-layout relays the input (a copy group in front): the conv takes it channels-last
    assert "input given channels-last" in default and "input='nchw'" not in default
    monkeypatch.setenv("FUSEC_CONV_INPUT", "nchw")
    source = _kernel_source(_conv_1x1_text())
    assert "NCHW input read in place" in source and "input='nchw'" in source
    namespace: dict = {}
    exec(compile(source, "conv", "exec"), namespace)
    (spec,) = namespace["CONV_SPECS"]
    assert spec.input == "nchw" and spec.weight == "krsc" and spec.named_kernels == ()
    refused = _kernel_source(conv_text())  # 3x3 pad 1: shifts -1 and 1
    assert "input given channels-last" in refused
    assert "$FUSEC_CONV_INPUT=nchw not applied: tap shifts along W of [-1, 1]" in refused
    assert "W = 9: the NCHW row pitch" in _kernel_source(_conv_1x1_text(w=9))
    monkeypatch.setenv("FUSEC_CONV_INPUT", "nhwc")
    assert _kernel_source(_conv_1x1_text()) == default
    monkeypatch.setenv("FUSEC_CONV_INPUT", "chw")
    with pytest.raises(ValueError, match="FUSEC_CONV_INPUT: 'chw'"):
        _kernel_source(_conv_1x1_text())


NCHW_SPECS = [
    ConvSpec(ConvGeometry(32, 64, 56, 56, 64, 1, 1), choose_tile(BENCH), "f16", "f16", BIAS_RELU,
             "nchw"),
    ConvSpec(ConvGeometry(4, 256, 15, 16, 256, 3, 1, 2, 1, 1, 0, 1, 0, max_strip_rows=1),
             ConvTile(128, 256, 4, 2, "m"), "bf16", "f32", input="nchw"),
]  # fmt: skip


def test_nchw_tma_innermost_coordinates_are_the_w_shifts() -> None:
    """The in-place read's innermost coordinate is the strip's column plus the tap shift,
    legal only because ``nchw_input_problem`` admitted the shape (shifts of 8 pixels)."""
    for spec in NCHW_SPECS:
        source = spec.cpp_source()
        assert "INPUT = fusec::CONV_INPUT_NCHW," in source  # conv.cuh: "q0 + s * C::DW - C::PL"
        assert "fusec_convx" not in source


@needs_toolchain
@pytest.mark.parametrize("spec", NCHW_SPECS, ids=["1x1-64x256n-f16", "3x1-128x256m-bf16-f32"])
def test_nchw_cubin_reads_the_input_by_tma_into_transposed_wgmma(spec: ConvSpec, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    ptx = build.ptx(spec)
    assert "cp.async.bulk.tensor.5d" in ptx and "cp.async.bulk.tensor.4d" in ptx
    # wgmma ... desc_a, desc_b, p, scale-a, scale-b, tnspA 0, tnspB 1 (MN-major B)
    wgmma = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{spec.tile.wn}k16[^;]*;", ptx)
    assert wgmma and all(re.search(r"p, 1, 1, 0, 1;$", w) for w in wgmma)
    assert re.findall(r"\.entry (\w+)", ptx) == [spec.relayout_name]  # no fusec_convx_*
    built = build.build(spec, KernelCache(tmp_path))
    spills = re.findall(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert len(spills) == 2 and not re.search(r"\b[1-9]\d* bytes spill", built.log)
    assert "setmaxnreg' ignored" not in built.log
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    hgmma = re.findall(r"HGMMA\.64x(\d+)x16\.F32", sass)
    assert len(hgmma) == 4 * (spec.tile.wm // 64) and set(hgmma) == {str(spec.tile.wn)}
    assert len(re.findall(r"UTMALDG\.5D", sass)) == spec.tile.bn // 64
    assert not re.search(r"\b(LDL|STL)\b", sass) and "CALL" not in sass


# ----------------------- $FUSEC_CONV_INPUT=nchw-ld: the producer warpgroup loads NCHW itself


#: (the producer's loads read a strip as one row: ``max_strip_rows=1``)
LD_IM2COL_SHAPES = {
    name: replace(g, max_strip_rows=1)
    for name, g in (
        {name: g for name, g in IM2COL_SHAPES.items() if g.w % 8 == 0}
        | {
            "3x3-pad1-w16": ConvGeometry(2, 8, 6, 16, 4, 3, 3, 1, 1, 1, 1, 1, 1),
            "5x5-pad2-w8-odd-h": ConvGeometry(1, 8, 7, 8, 4, 5, 5, 1, 1, 2, 2, 2, 2),
            "dilation2-w16": ConvGeometry(1, 8, 11, 16, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2),
            "13x16-ragged-70ch": ConvGeometry(1, 70, 13, 16, 4, 3, 3, 1, 1, 1, 1, 1, 1),
        }
    ).items()
}


@pytest.mark.parametrize("geo", LD_IM2COL_SHAPES.values(), ids=LD_IM2COL_SHAPES)
def test_producer_loads_reproduce_the_reference_im2col(geo: ConvGeometry) -> None:
    """The producer threads' 16-byte loads, word and half-word shifts and zeroing give the
    im2col matrix bit for bit (f16), for every tap shift (-2 .. 8 pixels here)."""
    x = np.random.default_rng(4).standard_normal((geo.n, geo.c, geo.h, geo.w))
    x = x.astype(np.float16).astype(np.float32)
    cols, _ = model.nchw_columns(geo, x, input="nchw-ld")
    np.testing.assert_array_equal(cols, _im2col(geo, x))


def test_producer_row_shifts_every_sub_vector_offset() -> None:
    """``ld_row`` at every start pixel -9 .. 9: the 64 pixels from there, zeros outside."""
    geo = ConvGeometry(1, 1, 1, 24, 1, 1, 1)
    pixels = np.arange(1, 25, dtype=np.uint16).reshape(1, 1, 1, 24)
    for ws in range(-9, 10):
        words = model.ld_row(geo, pixels, 0, 0, 0, 0, ws)
        got = np.empty(64, dtype=np.uint64)
        got[0::2], got[1::2] = words & 0xFFFF, words >> 16
        want = [w + 1 if 0 <= w < 24 else 0 for w in range(ws, ws + 64)]
        assert got.tolist() == want, ws


LD_GEOMETRIES = [
    # (geometry, tile, grid): the bench layer's shape in small, ragged channels and rows
    (ConvGeometry(2, 70, 5, 16, 40, 3, 3, 1, 1, 1, 1, 1, 1, max_strip_rows=1),
     ConvTile(64, 128, 2, 2, "n"), 3),
    # 5x5 pad 2, 2 strips per row (W 72), row split
    (ConvGeometry(1, 16, 4, 72, 130, 5, 5, 1, 1, 2, 2, 2, 2), ConvTile(128, 128, 2, 2, "m"), 2),
    # dilation 2, groups 2, stride 2 along H, asymmetric padding
    (ConvGeometry(2, 32, 9, 8, 16, 3, 3, 2, 1, 2, 1, 0, 3, 2, 2, 2, max_strip_rows=1),
     ConvTile(64, 64, 2, 1, "n"), 5),
]  # fmt: skip


@pytest.mark.parametrize("geo, tile, grid", sampled(LD_GEOMETRIES, _first, unpack=True))
def test_producer_loads_tile_model_matches_the_reference_conv(
    geo: ConvGeometry, tile: ConvTile, grid: int
) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float16).astype(np.float32)
    w = rng.standard_normal((geo.k, geo.cg, geo.r, geo.s)).astype(np.float32)
    ConvSpec(geo, tile, input="nchw-ld")  # accepted
    out, writes = model.run(geo, tile, x, w, grid=grid, input="nchw-ld")
    assert (writes == 1).all(), "an output element was written twice or never"
    ref = reference_conv2d(
        x,
        w,
        strides=(geo.stride_h, geo.stride_w),
        padding=(geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right),
        dilations=(geo.dil_h, geo.dil_w),
        groups=geo.groups,
    )
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_conv_input_env_selects_the_producer_loads(monkeypatch) -> None:
    monkeypatch.setenv("FUSEC_CONV_INPUT", "nchw-ld")
    source = _kernel_source(conv_text(w=16))  # 3x3 pad 1
    assert "NCHW input loaded in place by the producer" in source
    assert "input='nchw-ld'" in source
    refused = _kernel_source(conv_text(w=10))
    assert "$FUSEC_CONV_INPUT=nchw-ld not applied: W = 10: the NCHW row pitch" in refused
    assert "input given channels-last" in refused


LD_SPECS = [
    ConvSpec(BENCH, choose_tile(BENCH), "f16", "f16", BIAS_RELU, "nchw-ld"),
    ConvSpec(ConvGeometry(4, 256, 15, 16, 256, 3, 3, 2, 1, 1, 1, 1, 1, max_strip_rows=1),
             ConvTile(128, 256, 4, 2, "m"), "bf16", "f32", input="nchw-ld"),
]  # fmt: skip


@needs_toolchain
@pytest.mark.parametrize("spec", LD_SPECS, ids=["bench-3x3-64x256n-f16", "128x256m-bf16-f32"])
def test_producer_loads_cubin(spec: ConvSpec, tmp_path) -> None:
    """16-byte non-coherent loads and 16-byte shared stores by the producer warpgroup,
    the proxy fence before its arrival, TMA only for the weights, transposed-B wgmma,
    no fusec_convx_*, no spills and no local memory under setmaxnreg."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    assert spec.kernel_params()[:2] == ["map_w", "x"]
    ptx = build.ptx(spec)
    assert "ld.global.nc.v4.u32" in ptx and "st.shared.v4.b32" in ptx
    assert "fence.proxy.async.shared::cta" in ptx
    assert "cp.async.bulk.tensor.4d" in ptx and "cp.async.bulk.tensor.5d" not in ptx
    wgmma = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{spec.tile.wn}k16[^;]*;", ptx)
    assert wgmma and all(re.search(r"p, 1, 1, 0, 1;$", w) for w in wgmma)
    assert re.findall(r"\.entry (\w+)", ptx) == [spec.relayout_name]
    assert "setmaxnreg.dec.sync.aligned.u32 72" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 216" in ptx
    built = build.build(spec, KernelCache(tmp_path))
    spills = re.findall(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert len(spills) == 2 and not re.search(r"\b[1-9]\d* bytes spill", built.log)
    assert "setmaxnreg' ignored" not in built.log
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass) and "CALL" not in sass
    assert re.search(r"LDG\.E\.128", sass) and "STS.128" in sass
    assert len(re.findall(r"UTMALDG\.4D", sass)) == 1 and "UTMALDG.5D" not in sass


# ------------------- the epilogue's inputs loaded ahead of use ($FUSEC_CONV_EPILOGUE=early)

RESNET_TAIL = Epilogue(
    "const float t0 = acc * ev0 + ev1;\nconst float t1 = t0 + ev2;\ny = t1 < 0.0f ? 0.0f : t1;",
    ("f16", "f16", "f16"),
    "resnet_tail",
    channel_args=(0, 1),
    pixel_args=(2,),
)
BF16_F32_TAIL = Epilogue(
    "y = acc + ev0 + ev1;", ("bf16", "f32"), "bias_residual", channel_args=(0,), pixel_args=(1,)
)
EARLY_SPECS = {
    # the ResNet block's second conv at bench size: a word per pixel pair, at the tile head
    "bench-resnet-tile": ConvSpec(BENCH, choose_tile(BENCH), "f16", "f16", RESNET_TAIL,
                                  epilogue_loads="early"),
    # odd Q (13 x 9): two 2-byte loads per pair, 32 words at the tile head
    "odd-q-bf16": ConvSpec(ConvGeometry(2, 64, 13, 9, 64, 3, 3, 1, 1, 1, 1, 1, 1),
                           ConvTile.parse("64x128 s6 c2n"), "bf16", "bf16",
                           Epilogue("y = acc + ev0;", ("bf16",), "residual", pixel_args=(0,)),
                           epilogue_loads="early"),
    # 128 accumulators a thread and an f32 residual: loaded at the head of each output row
    # (rows of 64: its 16x4 strips spill 56 bytes, benchmarks/results/gpu-notes.md)
    "split-m-f32-row": ConvSpec(ConvGeometry(4, 256, 15, 15, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
                                             1, max_strip_rows=1),
                                ConvTile(128, 256, 4, 2, "m"), "bf16", "f32", BF16_F32_TAIL,
                                epilogue_loads="early"),
}  # fmt: skip


def test_early_loads_placement() -> None:
    from fusec.targets.cuda.conv.cpp import _early_placement

    places = {name: _early_placement(spec) for name, spec in EARLY_SPECS.items()}
    assert places == {
        "bench-resnet-tile": "tile",
        "odd-q-bf16": "tile",
        "split-m-f32-row": "row",
    }


def test_epilogue_loads_are_validated() -> None:
    with pytest.raises(ValueError, match="conv epilogue loads"):
        ConvSpec(BENCH, epilogue_loads="smem")


def test_inline_loads_read_at_the_element() -> None:
    """The default reads every loaded argument at its element, behind the bounds check."""
    source = ConvSpec(BENCH, choose_tile(BENCH), "f16", "f16", RESNET_TAIL).cpp_source()
    assert "fs_ld_f16((const void*)e0, ko), fs_ld_f16((const void*)e1, ko)" in source
    assert "fs_ld_f16((const void*)e2, o + 1)" in source
    assert "fs_ldg_" not in source.split("struct Epilogue")[1]  # no early loads


RESNET_TEXT = resnet_basic(2, 64, 9, 10)


def _conv_specs(text: str) -> list[ConvSpec]:
    compiled = fusec.compile(text, target="cuda", executable=False)
    specs = []
    for kernel in compiled.kernels:
        if kernel.kind == "conv":
            namespace: dict = {}
            exec(compile(kernel.source, kernel.name, "exec"), namespace)
            specs.append((kernel.source, namespace["CONV"].spec))
    return specs


def test_epilogue_inputs_are_classified(monkeypatch) -> None:
    """The folded BatchNorm's scale and shift are channel arguments, the block's input
    (the residual) a pixel argument; $FUSEC_CONV_EPILOGUE picks when they are loaded."""
    (_, first), (_, second) = _conv_specs(RESNET_TEXT)
    assert (first.epilogue.channel_args, first.epilogue.pixel_args) == ((0, 1), ())
    assert (second.epilogue.channel_args, second.epilogue.pixel_args) == ((0, 1), (2,))
    assert "ev2" in second.epilogue.body and "fs_ld" not in second.epilogue.body
    assert second.epilogue_loads == "early"  # the default
    for source, spec in _conv_specs(RESNET_TEXT):
        assert spec.epilogue_loads == "early"
        assert "loaded ahead of use ($FUSEC_CONV_EPILOGUE=early)" in source.split("\n\n")[0]
    monkeypatch.setenv("FUSEC_CONV_EPILOGUE", "inline")
    for _, spec in _conv_specs(RESNET_TEXT):
        assert spec.epilogue_loads == "inline"
    monkeypatch.setenv("FUSEC_CONV_EPILOGUE", "later")
    with pytest.raises(ValueError, match="FUSEC_CONV_EPILOGUE"):
        _conv_specs(RESNET_TEXT)


def _sass_lines(sass: str, function: str) -> list[str]:
    """The instructions of the Numba kernel that inlines ``function``."""
    start = sass.index("Function : _ZN")
    return [line for line in sass[start:].splitlines() if "/*" in line and ";" in line]


@needs_toolchain
@pytest.mark.parametrize("name", list(EARLY_SPECS))
def test_early_loads_cubin(name: str, tmp_path) -> None:
    """Every load of the epilogue's inputs is a plain (branch-free) ``ld.global.nc`` issued
    before the first use: at the tile head, before the main loop's wgmma (or at the row
    head); no spills, no local memory."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build
    from fusec.targets.cuda.conv.cpp import _early_placement

    spec = EARLY_SPECS[name]
    ptx = build.ptx(spec)
    wide = spec.geo.q % 2 == 0 and "f16" in spec.epilogue.extras
    assert ("ld.global.nc.b32" in ptx) == (wide or "f32" in spec.epilogue.extras)
    built = build.build(spec, KernelCache(tmp_path))
    assert not re.search(r"\b[1-9]\d* bytes spill", built.log)
    assert "setmaxnreg' ignored" not in built.log
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    lines = _sass_lines(sass, spec.function_name)
    text = "\n".join(lines)
    assert not re.search(r"\b(LDL|STL)\b", text), "local-memory traffic in the kernel"
    first_mma = next(i for i, line in enumerate(lines) if "HGMMA" in line)
    last_mma = max(i for i, line in enumerate(lines) if "HGMMA" in line)
    loads = [i for i, line in enumerate(lines) if re.search(r"\bLDG\.E", line)]
    if _early_placement(spec) == "tile":
        # all of them before the main loop, none in the epilogue
        assert loads and max(loads) < first_mma, (loads, first_mma)
        words = sum(len(re.findall(r"\bLDG\.E\.CONSTANT\b", line)) for line in lines)
        assert words >= (16 * spec.tile.wn // 64 if wide else 0)
    else:
        assert loads and min(loads) > last_mma  # in the epilogue, one row at a time


# ------------- the conv -> conv hand-off in channels-last (conv-layout, $FUSEC_CONV_HANDOFF)

HANDED = "output stored channels-last [N][P][Q][K] for the next conv group"
GIVEN = "input given channels-last by the previous conv group or a layout conversion"


def _heads(text: str) -> list[str]:
    """The headers of the conv kernels and of the channels-last copies, in launch order."""
    compiled = fusec.compile(text, target="cuda", executable=False)
    return [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind in ("conv", "copy")]


def _convs(heads: list[str]) -> list[str]:
    return [h for h in heads if '"conv" group' in h]


def _copies(heads: list[str]) -> list[str]:
    """What each copy kernel transposes (``[A][B][P]``)."""
    return [re.search(r"channels-last transpose (\S+)", h)[1] for h in heads if '"copy" group' in h]


def test_handoff_is_the_default_and_can_be_turned_off(monkeypatch) -> None:
    heads = _heads(RESNET_TEXT)
    first, second = _convs(heads)
    assert HANDED in first and GIVEN in first  # the block's input x: NCHW, copied in front
    assert GIVEN in second and HANDED not in second  # the block's output: NCHW
    # x and the two graph-input weights: three copies; conv1's result is not copied
    assert _copies(heads) == ["[2][64][90]", "[64][64][9]", "[64][64][9]"]
    monkeypatch.setenv("FUSEC_CONV_HANDOFF", "nhwc")
    assert _heads(RESNET_TEXT) == heads
    monkeypatch.setenv("FUSEC_CONV_HANDOFF", "off")
    off = _heads(RESNET_TEXT)
    assert not any(HANDED in h for h in _convs(off)) and all(GIVEN in h for h in _convs(off))
    assert _copies(off) == ["[2][64][90]", "[64][64][9]", "[2][64][90]", "[64][64][9]"]
    monkeypatch.setenv("FUSEC_CONV_HANDOFF", "yes")
    with pytest.raises(fusec.FusecError, match="FUSEC_CONV_HANDOFF"):
        _heads(RESNET_TEXT)


TWO_CONVS = """func.func @f(%x: {X}, %w1: {W1}, %w2: {W2}) -> ({RET}) {{
  %c1 = ai.conv2d %x, %w1 {{padding = array<i64: 1, 1>}} : {X} * {W1}
  %r1 = ai.relu %c1 : {X}
  %c2 = ai.conv2d %r1, %w2 {{padding = array<i64: 1, 1>, groups = {G} : i64}} : {X} * {W2}
  return {VALUES} : {RET}
}}"""


@pytest.mark.parametrize(
    "groups, returned, handed",
    [(1, False, True), (2, False, False), (1, True, False)],
    ids=["hands-off", "consumer-groups-2", "result-also-returned"],
)
def test_handoff_only_to_the_only_reader(groups: int, returned: bool, handed: bool, monkeypatch):
    """No hand-off when the result is also a graph output or the next conv has groups
    (which conv-layout leaves NCHW/KCRS: it copies its input and weights itself)."""
    monkeypatch.setenv("FUSEC_CONV_HANDOFF", "nhwc")
    x = "tensor<2x64x9x16xf16>"
    values, ret = ("%c2, %r1", f"{x}, {x}") if returned else ("%c2", x)
    text = TWO_CONVS.format(
        X=x, W1="tensor<64x64x3x3xf16>", W2=f"tensor<64x{64 // groups}x3x3xf16>", G=groups,
        VALUES=values, RET=ret,
    )  # fmt: skip
    heads = _heads(text)
    first, second = _convs(heads)
    assert (HANDED in first) == handed and (GIVEN in second) == (groups == 1)
    assert ("input made channels-last" in second) == (groups != 1)
    # a returned result stays NCHW and is copied for the next conv like any NCHW input
    assert _copies(heads).count("[2][64][144]") == (2 if returned else 1)


def test_handoff_stores_channels_last() -> None:
    geo = ConvGeometry(2, 64, 13, 9, 64, 3, 3, 1, 1, 1, 1, 1, 1)
    spec = ConvSpec(geo, choose_tile(geo), out_layout="nhwc")
    source = spec.cpp_source()
    assert "OUT_NHWC = 1," in source  # conv.cuh: (((n * P + p) * Q + q) * KOUT + ko
    assert "OUT_NHWC = 0," in ConvSpec(geo, choose_tile(geo)).cpp_source()
    given = ConvSpec(geo, choose_tile(geo), input="given")
    assert given.named_kernels == (given.relayout_name,)  # no channels-last copy
    with pytest.raises(ValueError, match="one group"):
        ConvSpec(ConvGeometry(2, 40, 9, 9, 40, 3, 3, groups=2), input="given")


@needs_toolchain
def test_handoff_cubins(tmp_path) -> None:
    for spec in (
        ConvSpec(BENCH, choose_tile(BENCH), "f16", "f16", RESNET_TAIL, out_layout="nhwc"),
        ConvSpec(BENCH, choose_tile(BENCH), "f16", "f16", RESNET_TAIL, "given", "early"),
    ):
        sass = spill_free_sass(spec, tmp_path)
        assert ("convx" in sass) == (spec.input == "nhwc")
