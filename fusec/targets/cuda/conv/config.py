"""Geometry of one conv2d and the tile configuration of its implicit GEMM.

The implicit GEMM computes, per group ``g`` of a grouped convolution,
``out[n, g*KG + k, p, q] = sum_{tap, c} W[g*KG + k, c, tap] * X[n, g*CG + c, p*SH + r*DH - PT,
q + s*DW - PL]`` as a GEMM whose rows are output channels (M = KG), whose columns
are output pixels (N) and whose reduction runs over (tap, input channel):

* the input is first re-laid out to channels-last, ``[N][H][W][G][CGP]``
  (channels padded to a multiple of 8 per group, zeros): TMA needs the
  innermost coordinate of every box 16-byte aligned, so the tap shifts must
  fall on an outer dimension (on the H200, an NCHW box shifted by one pixel
  along W was an illegal instruction);
* columns: output pixels in *strips* of 64 consecutive columns of one output
  row (``q0 .. q0+63`` of row ``p`` of image ``n``); a strip is one TMA box of
  the channels-last input per (tap, 64-channel chunk): 64 pixel rows of 64
  channels, the K-major B operand layout of wgmma; padding and ragged edges
  are TMA's out-of-bounds zero fill, so no index is clamped;
* rows: the weights, re-laid out once per call to ``[K][R*S][CGP]`` (KRSC)
  so that one (tap, channel chunk) of a row block is one K-major TMA box;
* the reduction: ``R*S*CC`` steps of 64 (CC = ceil(CG / 64) channel chunks per
  tap); channels past CG are zero-filled in both operands.

Under-filled problems (a CNN at batch 1: ResNet-50's 14x14 and 7x7 stages are 2 to 8 tiles
of 128 x 256 on 132 SMs, each 36 to 72 reduction steps deep) take a narrow tile (128 or 64
rows x 64 pixels) and split each tile's reduction among up to 8 blocks (``split_k``, the
GEMM's split-K: ``split_k.cuh``): ``choose_tile``.

The template takes stride 1 along W (a strided W box would need TMA element
strides, not built); any stride along H, dilations, asymmetric padding and
groups are box coordinates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from fusec.targets.cuda import tile_rules
from fusec.targets.cuda.caps import H200, SMEM_PER_BLOCK_SM90
from fusec.targets.cuda.split_k import heuristic_split_k

SMEM_LIMIT = SMEM_PER_BLOCK_SM90
SMEM_ALIGN = 1024
MMA_M = 64
STRIP = 64  # output pixels per strip: one 128-byte row of 16-bit values
CHUNK = 64  # input channels per reduction step
#: A TMA box traverses at most 256 elements along a dimension, so a strip of STRIP output
#: pixels can span at most 256 input pixels: a stride along W of 4 at most.
MAX_STRIDE_W = 256 // STRIP
#: A TMA element stride is at most 8: strips of several rows step at most this many input
#: rows (``ConvGeometry.strip_width``)
MAX_ROW_STRIDE = 8

_TEXT = re.compile(r"^(\d+)x(\d+) s(\d+) c(\d+)([mn])(?: sk=(\d+))?$")
#: the heuristic's split-K of a conv tile: at most this many splits, each at least
#: SPLIT_MIN_STEPS reduction steps deep (the limits of every split: ``tile_rules``)
SPLIT_K_HEURISTIC_MAX = 8
SPLIT_MIN_STEPS = 3


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ConvGeometry:
    """One ``ai.conv2d``: NCHW input (n, c, h, w), KCRS weights (k, c/groups, r, s)."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_left: int = 0
    pad_bottom: int = 0
    pad_right: int = 0
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1
    #: the most output rows one strip may span (``strip_width``); 1 for an NCHW input read
    #: in place: the producer warpgroup's loads (``input="nchw-ld"``) read a strip as one
    #: row, and the in-place TMA box of a strip of several rows (``input="nchw"``, an inner
    #: dimension of 16-64 bytes under the 128-byte swizzle) gave wrong sums on the H200
    max_strip_rows: int = 8

    @property
    def cg(self) -> int:
        """Input channels per group."""
        return self.c // self.groups

    @property
    def kg(self) -> int:
        """Output channels per group."""
        return self.k // self.groups

    @property
    def p(self) -> int:
        span = self.dil_h * (self.r - 1) + 1
        return (self.h + self.pad_top + self.pad_bottom - span) // self.stride_h + 1

    @property
    def q(self) -> int:
        span = self.dil_w * (self.s - 1) + 1
        return (self.w + self.pad_left + self.pad_right - span) // self.stride_w + 1

    @property
    def cgp(self) -> int:
        """Row pitch (elements) of the re-laid weights: CG rounded up to 8 (16 bytes)."""
        return cdiv(self.cg, 8) * 8

    def im2col(self) -> ConvGeometry:
        """The 1x1 conv over this conv's im2col matrix ``[N][P][Q][C*R*S]`` (one group:
        ``conv.im2col``): the same products, the KCRS weights read as ``[K][C*R*S]``."""
        return ConvGeometry(self.n, self.c * self.r * self.s, self.p, self.q, self.k, 1, 1)

    @property
    def nhwc_elements(self) -> int:
        """Elements of the channels-last copy of the input, ``[N][H][W][G][CGP]``."""
        return self.n * self.h * self.w * self.groups * self.cgp

    @property
    def strip_width(self) -> int:
        """Output pixels of a row in one strip of ``STRIP``: ``STRIP``, or for a conv whose
        rows are at most half a strip the least of 8, 16, 32 holding a row, the strip then
        ``strip_rows`` rows of it (a 7x7 output: one 8x8 strip, where 7-pixel strips left 57
        of every 64 columns of the tile idle). The rows' TMA box steps ``stride_h`` input
        rows (``nhwc_element_strides``: at most ``MAX_ROW_STRIDE``)."""
        if self.stride_h > MAX_ROW_STRIDE or self.q > STRIP // 2:
            return STRIP
        widths = [w for w in (8, 16, 32) if w >= self.q and STRIP // w <= self.max_strip_rows]
        return widths[0] if widths else STRIP

    @property
    def strip_rows(self) -> int:
        return STRIP // self.strip_width

    @property
    def strips_per_row(self) -> int:
        """Strips side by side along an output row."""
        return cdiv(self.q, self.strip_width)

    @property
    def strip_bands(self) -> int:
        """Strips one above the other in an image (``strip_rows`` output rows each)."""
        return cdiv(self.p, self.strip_rows)

    @property
    def strips(self) -> int:
        return self.n * self.strip_bands * self.strips_per_row

    @property
    def chunks(self) -> int:
        return cdiv(self.cg, CHUNK)

    @property
    def kblocks(self) -> int:
        return self.r * self.s * self.chunks

    @property
    def flops(self) -> int:
        return 2 * self.n * self.k * self.p * self.q * self.cg * self.r * self.s


@dataclass(frozen=True)
class ConvTile(tile_rules.WarpgroupTile):
    """The block tile of the implicit GEMM: ``bm`` output channels x ``bn`` pixels
    (``bn / 64`` strips), ``stages`` pipeline stages, ``consumers`` consumer
    warpgroups splitting the tile along M (``split`` "m": ``bm / consumers`` rows
    each) or along N ("n": ``bn / consumers`` columns each)."""

    what = "conv tile"
    bm: int = 64
    bn: int = 256
    stages: int = 4
    consumers: int = 2
    split: str = "n"
    split_k: int = 1

    def problems(self) -> list[str]:
        out = []
        if self.split not in ("m", "n"):
            out.append("split is 'm' or 'n'")
        if self.consumers not in (1, 2):
            out.append("1 or 2 consumer warpgroups")
        if self.bm not in (64, 128):
            out.append("bm is 64 or 128")
        if self.bn % STRIP or not STRIP <= self.bn <= 256:
            out.append("bn is 64, 128, 192 or 256")
        if self.split == "m" and self.consumers and self.bm % (MMA_M * self.consumers):
            out.append("bm must be a multiple of 64 x consumers")
        if self.split == "n" and self.consumers and self.bn % (STRIP * self.consumers):
            out.append("bn must be a multiple of 64 x consumers")
        out += tile_rules.resource_problems(self.stages, self.smem_bytes, self.acc_registers, 128)
        split = tile_rules.split_problem(self.split_k, self.acc_registers)
        if split:
            out.append(split)
        return out

    @property
    def wm(self) -> int:
        """Rows of one consumer."""
        return self.bm // self.consumers if self.split == "m" else self.bm

    @property
    def wn(self) -> int:
        """Columns of one consumer (the wgmma N)."""
        return self.bn // self.consumers if self.split == "n" else self.bn

    @property
    def a_stage_bytes(self) -> int:
        return self.bm * CHUNK * 2

    @property
    def b_stage_bytes(self) -> int:
        return self.bn * CHUNK * 2

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.a_stage_bytes + self.b_stage_bytes) + 16 * self.stages + 1024

    @property
    def acc_registers(self) -> int:
        return (self.wm // MMA_M) * self.wn // 2

    @property
    def text(self) -> str:
        split_k = f" sk={self.split_k}" if self.split_k > 1 else ""
        return f"{self.bm}x{self.bn} s{self.stages} c{self.consumers}{self.split}{split_k}"

    @classmethod
    def parse(cls, text: str) -> ConvTile:
        match = _TEXT.match(text.strip())
        if not match:
            raise ValueError(f"bad conv tile {text!r}: expected e.g. '64x256 s4 c2n [sk=4]'")
        bm, bn, stages, consumers, split, split_k = match.groups()
        return cls(int(bm), int(bn), int(stages), int(consumers), split, int(split_k or 1))


def nhwc_box(geo: ConvGeometry) -> tuple[int, ...]:
    """The TMA box of one strip of the channels-last input ``(CG, G, W, H, N)``, innermost
    first: 64 channels of the ``strip_width * stride_w`` input pixels of each of the
    ``strip_rows`` rows a strip's taps traverse (its 64 pixels, row after row: the same
    [pixel][channel] rows in shared memory as one row of 64)."""
    rows = (geo.strip_rows - 1) * geo.stride_h + 1  # every stride_h-th row from the first
    return (CHUNK, 1, geo.strip_width * geo.stride_w, rows, 1)


def nchw_box(geo: ConvGeometry) -> tuple[int, ...]:
    """The TMA box of one strip of the NCHW input read in place ``(W, H, CG, G, N)``: the
    strip's pixels of 64 channels ([channel][pixel] rows)."""
    return (geo.strip_width, geo.strip_rows, CHUNK, 1, 1)


def nhwc_element_strides(geo: ConvGeometry) -> tuple[int, ...]:
    """The box's traversal steps: every stride_w-th pixel along W (TMA packs the pixels it
    loads), every stride_h-th row of a strip of several rows, every element elsewhere."""
    return (1, 1, geo.stride_w, geo.stride_h if geo.strip_rows > 1 else 1, 1)


def needs_element_strides(geo: ConvGeometry) -> bool:
    """Whether the channels-last map traverses with steps (``nhwc_element_strides``)."""
    return nhwc_element_strides(geo) != (1, 1, 1, 1, 1)


def tile_count(tile: ConvTile, geo: ConvGeometry) -> int:
    return cdiv(geo.kg, tile.bm) * cdiv(geo.strips, tile.bn // STRIP) * geo.groups


def choose_tile(geo: ConvGeometry, sms: int = H200.sms) -> ConvTile:
    """64-row tiles when a group has at most 64 output channels (two consumers split the
    pixels), else 128 rows (two consumers split the channels); 256 pixel columns unless
    128 fill the GPU's last wave clearly better. When even that tile leaves more than half
    the SMs without a block (batch 1) and ``$FUSEC_SPLIT_K`` allows it (the default:
    ``split_k.heuristic_split_k``), the narrow tile of 64 pixel columns (``narrow_tile``) with its
    reduction split (``split_k_for``)."""
    if geo.kg <= 64:
        candidates = [ConvTile(64, 256, 4, 2, "n"), ConvTile(64, 128, 6, 2, "n")]
    else:
        candidates = [ConvTile(128, 256, 4, 2, "m"), ConvTile(128, 128, 6, 2, "m")]

    def waste(tile: ConvTile) -> float:
        tiles = tile_count(tile, geo)
        waves = cdiv(tiles, sms)
        return 1.0 - tiles / (waves * sms)

    best = candidates[0]
    for tile in candidates[1:]:
        if waste(tile) + 0.15 < waste(best):
            best = tile
    if 2 * tile_count(best, geo) < sms and heuristic_split_k("conv", geo.groups > 1):
        narrow = narrow_tile(geo)
        return replace(narrow, split_k=split_k_for(narrow, geo, sms))
    return best


def narrow_tile(geo: ConvGeometry) -> ConvTile:
    """The tile of under-filled problems: 64 pixel columns (one strip: a 7x7 or 14x14 output
    row fills 7 or 14 of a strip's 64 pixels, so wider tiles mostly compute padding) and 128
    output channels (two consumers split them), or 64 channels and 128 pixels (two consumers
    split the pixels) when a group has at most 64; 32 accumulators per consumer thread, so
    its reduction can be split."""
    if geo.kg > 64:
        return ConvTile(128, 64, 8, 2, "m")
    return ConvTile(64, 128, 6, 2, "n")


def split_k_for(tile: ConvTile, geo: ConvGeometry, sms: int) -> int:
    """Splits of each tile's reduction: as many as give every SM at most one unit, each at
    least ``SPLIT_MIN_STEPS`` steps deep, at most ``SPLIT_K_HEURISTIC_MAX``; 1 when that is
    under 2 or the tile has too many accumulators."""
    if tile.acc_registers > tile_rules.SPLIT_MAX_ACCUMULATORS:
        return 1
    splits = min(
        sms // tile_count(tile, geo), geo.kblocks // SPLIT_MIN_STEPS, SPLIT_K_HEURISTIC_MAX
    )
    return splits if splits >= 2 else 1
