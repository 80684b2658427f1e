"""A depthwise convolution's small planes with the channels in the vector lanes.

The depthwise method of ``fusec.targets.cpu.conv`` (``planes.DepthwiseBlocks``) computes each
channel plane on its own, vectorised along the output rows. An output row of 4 or 8
pixels (MobileNetV3's and EfficientNet's late stages, ConvNeXt's 7x7 on 8x8 and 4x4 at
128x128) fills no vector: the row loop runs scalar, and a 5x5 or 7x7 tap sum is a chain
of dependent adds per pixel. Here a block's channels go in the lanes instead:

* ``xpad``: the block's input planes transposed to channels-last with their zero padding
  (``Hp x Wp x CB``: the rows and columns the taps reach, ``CB`` channels a pixel);
* ``wt``: the block's weights tap-major (``taps x CB``);
* ``ot``: every output pixel's ``CB`` channels at once, the sum over the taps in the
  same order as the planar loop, each term a contiguous vector of ``xpad`` at a
  constant offset (strides and dilations are only offsets, no phase split), in register
  tiles of several pixels with fused multiply-adds (``depthwise_tiles.taps_row``: a
  rounding a tap, not the planar loop's two, so a few ulps from its results; NaN and
  Inf where it has them);
* then ``ot`` transposed back to the block's channel rows for the epilogue.

A block may have fewer channels (the last one, or every block when there are few
channels): the transposes move only its own, the sums run over all ``CB`` lanes (the
others hold zeros or earlier values, never written out).

Standalone kernels, one thread, us (benchmarks in the commit that added this; the
planar loop / channels in lanes): 960x4x4 5x5 81 / 24, 672x8x8 3x3 67 / 29, 672x16x16
5x5 stride 2 239 / 107, 384x8x8 7x7 306 / 58; but 240x16x16 3x3 30 / 52 and 96x32x32
7x7 215 / 275, where the planar rows are whole vectors and the transposes cost more than
they save: hence only short output rows (``takes_lanes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusec.targets.cpu.host import W

if TYPE_CHECKING:  # numpy is imported where a weight is packed: generating the text needs none
    import numpy as np

#: Output rows of at most this many pixels take the lanes form (``takes_lanes``)...
LANES_MAX_OW = 8
#: ... and rows of at most this many that are not whole 8-float vectors.
LANES_RAGGED_OW = 16
#: Channels of a lanes block: two 16-float vectors; the block's padded input (8x8 output,
#: 7x7 taps: 14 x 14 x 32 floats, 25 KiB) stays in L1.
LANES_CHANNELS = 32


def takes_lanes(ow: int, taps: int) -> bool:
    """Whether a depthwise convolution with output rows of ``ow`` pixels and ``taps``
    taps takes the lanes form. Whole calls of conv + bias + relu, one thread, us
    (minima), rows / lanes / onnxruntime: 144x14x14 5x5 170 / 73 / 32, 96x12x12 3x3
    35 / 25 / 13 (rows of ragged vectors); but 192x16x16 7x7 144 / 241 / 69 (the
    standalone kernels had shown 333 / 125) and 240x16x16 5x5 stays with the rows."""
    del taps  # no rule by the kernel's size measured yet
    return ow <= LANES_MAX_OW or (ow <= LANES_RAGGED_OW and ow % 8 != 0)


def lanes_shapes(
    oh: int, ow: int, r: int, s: int, sh: int, sw: int, dh: int, dw: int
) -> tuple[int, int]:
    """(Hp, Wp): the padded input rows and columns the taps of the output plane reach."""
    return (oh - 1) * sh + (r - 1) * dh + 1, (ow - 1) * sw + (s - 1) * dw + 1


def lanes_lines(
    *,
    x: str,
    w: str,
    out: str,
    out_row: str,
    cb: int,
    c: int,
    h: int,
    wd: int,
    oh: int,
    ow: int,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, int],
    block: int = 0,
) -> list[str]:
    """Lines computing channels ``g <= ch < g1`` of image ``n`` (names the block's decode
    binds) into ``out`` at ``out_row`` (an expression of ``ch``: the channel's first
    output pixel there), from the flat input ``x`` (N x C x H x W) and weight ``w``
    (C x 1 x R x S), through the workspace arrays ``xpad``, ``wt`` and ``ot``. With
    ``block`` (the blocks' channels), ``w`` is the constant weight packed once by
    ``pack_lanes`` and ``wt`` a view of it, not a copy made per block."""
    r, s = kernel
    sh, sw = strides
    dh, dw = dilations
    pt, pl = pads
    assert cb == LANES_CHANNELS, "the tiles' width (depthwise_tiles.CHANNELS)"
    hp, wp = lanes_shapes(oh, ow, r, s, sh, sw, dh, dw)
    taps, p = r * s, oh * ow
    rows = max(0, min(h, hp - pt))  # input rows inside the padded plane
    cols = max(0, min(wd, wp - pl))  # ... and columns
    # the channel-major <-> pixel-major copies in square tiles (``depthwise_transpose``),
    # the channels and pixels past the last whole tile one at a time
    t_in, t_out = transpose_size(cols), transpose_size(p)
    return [
        "cn = g1 - g",
        *_tiles_in(x, c, h, wd, rows, cols, wp, pt, pl, cb, t_in),
        f"for i in range({rows}):",
        f"    for j in range({cols}):",
        f"        d = ((i + {pt}) * {wp} + j + {pl}) * {cb}",
        f"        src = (n * {c} + g) * {h * wd} + i * {wd} + j",
        f"        for c in range(cfi if j < {cols - cols % t_in if t_in else 0} else 0, cn):",
        f"            xpad[U(d + c)] = {x}[U(src + c * {h * wd})]",
        *(
            [f"wt = {w}[g // {block} * {taps * cb}:]"]  # packed once (pack_lanes)
            if block
            else [
                "for c in range(cn):",
                f"    for tap in range({taps}):",
                f"        wt[U(tap * {cb} + c)] = {w}[U((g + c) * {taps} + tap)]",
            ]
        ),
        f"depthwise_taps_rows(xpad, 0, {sw * cb}, {s}, {dh * wp * cb}, {dw * cb}, {taps}, wt,"
        f" ot, 0, {ow}, {oh}, {sh * wp * cb}, {ow * cb})",
        *_tiles_out(out, out_row, p, cb, t_out),
        f"for q in range({p}):",
        f"    for c in range(cfo if q < {p - p % t_out if t_out else 0} else 0, cn):",
        "        ch = g + c",
        f"        {out}[U({out_row} + q)] = ot[U(q * {cb} + c)]",
    ]


#: The square tiles ``depthwise_transpose`` copies (``depthwise_tiles.transpose``).
TRANSPOSE_SIZES = (16, 8, 4)


def transpose_size(extent: int) -> int:
    """The square tile ``depthwise_transpose`` copies a lanes block's planes in, along an
    ``extent`` of pixels (an input row's columns, or the output plane): the largest of
    ``TRANSPOSE_SIZES`` no wider than a vector (``host.W``: 16 on AVX-512, else 8) that
    fits, else 0 (one at a time)."""
    return next((t for t in TRANSPOSE_SIZES if t <= W and t <= extent), 0)


def _tiles_in(
    x: str,
    c: int,
    h: int,
    wd: int,
    rows: int,
    cols: int,
    wp: int,
    pt: int,
    pl: int,
    cb: int,
    t: int,
) -> list[str]:
    """The input copy's whole tiles: ``t`` channels x ``t`` columns of an input row a tile;
    binds ``cfi``, the block's channels in whole tiles (0 when ``t`` is)."""
    if not t:
        return ["cfi = 0"]
    return [
        f"cfi = cn - cn % {t}",
        f"for i in range({rows}):",
        f"    for c0 in range(0, cfi, {t}):",
        f"        for j0 in range(0, {cols - cols % t}, {t}):",
        f"            depthwise_transpose({x}, (n * {c} + g + c0) * {h * wd} + i * {wd} + j0,"
        f" {h * wd}, xpad, ((i + {pt}) * {wp} + j0 + {pl}) * {cb} + c0, {cb}, {t})",
    ]


def _tiles_out(out: str, out_row: str, p: int, cb: int, t: int) -> list[str]:
    """The output copy's whole tiles: ``t`` channels x ``t`` output pixels a tile (``out_row``
    an expression of ``ch``, channels ``p`` apart); binds ``cfo``, the block's channels in
    whole tiles of the output (0 when ``t`` is)."""
    if not t:
        return ["cfo = 0"]
    return [
        f"cfo = cn - cn % {t}",
        f"for c0 in range(0, cfo, {t}):",
        "    ch = g + c0",
        f"    for q0 in range(0, {p - p % t}, {t}):",
        f"        depthwise_transpose(ot, q0 * {cb} + c0, {cb}, {out}, {out_row} + q0, {p}, {t})",
    ]


def lanes_workspace(
    cb: int,
    oh: int,
    ow: int,
    kernel: tuple[int, int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[tuple[str, int]]:
    """The workspace arrays of a lanes block of ``cb`` channels: (name, floats)."""
    hp, wp = lanes_shapes(oh, ow, *kernel, strides[0], strides[1], dilations[0], dilations[1])
    return [("xpad", hp * wp * cb), ("wt", kernel[0] * kernel[1] * cb), ("ot", oh * ow * cb)]


def pack_lanes(weight: np.ndarray, block: int) -> np.ndarray:
    """A constant depthwise weight (C x 1 x R x S) as ``lanes_lines`` reads it with
    ``block`` channels a block: per block, tap-major ``taps x LANES_CHANNELS`` floats,
    the lanes past the block's channels zero (the layout "depthwise_lanes:<block>")."""
    import numpy as np

    c = weight.shape[0]
    flat = np.asarray(weight, dtype=np.float32).reshape(c, -1)
    blocks = -(-c // block)
    packed = np.zeros((blocks, flat.shape[1], LANES_CHANNELS), np.float32)
    for b in range(blocks):
        part = flat[b * block : (b + 1) * block]
        packed[b, :, : part.shape[0]] = part.T
    return packed.reshape(-1)
