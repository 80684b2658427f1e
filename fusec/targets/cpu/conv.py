"""cpu template for "conv" groups: per block of output rows, one or more GEMMs + epilogue.

``conv_method`` states which of eight ways a convolution takes (depthwise, blocks of
output channels, direct, im2row, Winograd F(4x4, 3x3) or F(2x2, 3x3), one sgemm per
tap, im2col); the im2col way is described here, the others in ``ConvBlocks`` and its
subclasses. A batch of small planes (late CNN
layers) takes blocks of several images instead of output rows of one
(``images_per_block``).

``ai.conv2d`` (NCHW input, KCRS weight, any strides, padding, dilations and
groups) runs in the blocked kernel (``fusec.targets.cpu.blocked``). A block is ``bh`` output
rows of one image ``n`` and channel group ``g`` (``P = bh * OW`` pixels):

* im2col of the block only: ``cols[(c, r, s), p]`` for the block's pixels
  (zeros where the window hangs over the padding), a few hundred KiB that stay
  in cache; a 1x1, stride-1, unpadded convolution reads the input instead;
* one sgemm: ``weight[g] (K/G x C/G*R*S) @ cols (C/G*R*S x P)``, which is the
  NCHW layout of the block's output: ``K/G`` rows of ``P`` pixels;
* the epilogue (bias, residual, activations, casts) over those channel rows,
  each a segment of ``P`` pixels of an output row of length OH*OW when the
  epilogue's operands allow H and W to be merged (a per-channel bias does),
  else whole output rows.

``bh`` keeps the columns near ``COLS_BYTES`` (P of a few hundred pixels: at
C=64, 3x3, 56 wide, sgemm ran at 97 GFLOP/s single-threaded for 224-896 pixels
against 81 for a whole 3136-pixel image, and the full im2col buffer, 9x the
input, is never written).

Non-finite values. Every method must give the reference's answer (im2col with zero
padding, then a matmul): NaN, +Inf and -Inf in the same places, 0 * Inf = NaN in the
padding included. The GEMM methods (direct, im2col, taps, images) and the depthwise
loop sum exactly the reference's products w * x (zeros where it has zero padding), so
they do by construction. Winograd does not: its transforms add and subtract inputs
(Inf - Inf = NaN where the reference has Inf), scale the filters, and may overflow on
finite values near the type's limit. It keeps its speed on finite data and is exact
on the rest thus: after the output transform of an output channel of a block, before
the epilogue (a relu would hide a NaN), the kernel sums the channel's raw outputs in
float64 (``row_sum``: vectorised, reassociated; a float64 sum of float32 values is
finite exactly when they all are) and, when the sum is not finite,
``winograd.redo_nonfinite_tiles`` recomputes the m x m tiles that hold a NaN or an Inf
directly, from the block's padded input and the filters as they are, in float64 (N8
C64 56x56 K64: the scan is ~0.1-0.2 ms of CPU in ~27). A non-finite value in a tile's inputs,
filters, transforms or products always reaches one of its outputs (every element of
a transform reaches an output with a nonzero coefficient, in F(2x2, 3x3) and in
F(4x4, 3x3), and Inf or NaN plus or times anything is never finite, 0 * Inf
included), so no such tile is missed, and tiles of finite data pay the scan only.
Checking inputs and filters per block instead would miss the transforms' own overflow
and cost a pass over the input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu import abi, depthwise, host
from fusec.targets.cpu.blocked import (
    MIN_BLOCKS,
    BlockedCore,
    EpilogueRows,
    Workspace,
    generate_core_group,
    merge_last_two,
    merges_hw,
    row_loop,
)
from fusec.targets.cpu.entry import EntryScratch, transpose_lines
from fusec.targets.cpu.rows import RowBlock

#: Target size of a block's im2col columns.
COLS_BYTES = 1 << 20
#: Pixels a block of a convolution by one GEMM gathers from several images when the
#: planes are small (``images_per_block``).
IMAGE_PIXELS = 256
#: Batched convolutions whose output planes have at most this many pixels go by
#: im2col over blocks of images, not by Winograd or taps (whose blocks hold one image:
#: a 2x2 output is one Winograd tile, 16 GEMMs of one column).
SMALL_PLANE = 16
#: An im2col block of at most this many output channels (a group's) whose output rows
#: are whole vectors runs its GEMM in ``gemm_nn`` (reading the columns in place), not
#: sgemm: ResNet's 7x7 stride-2 stem, 16 x 147 x 512 per block, 44 us in sgemm, 25 in
#: gemm_nn (one thread; the kernel 76 -> 58 us). Larger blocks are not measured.
COLS_NN_ROWS = 64
#: Output pixels of a depthwise block (whole channel planes, as many as fit): enough
#: work per block that taking it costs little.
DEPTHWISE_PIXELS = 4096
#: One image's plane of at most this many output pixels, whole vectors of ``gemm_nn``,
#: goes by ``"channels"`` (blocks of output channels; ``_IN_PLACE``: a 1x1 convolution
#: that reads its input as it is).
CHANNEL_PIXELS, CHANNEL_PIXELS_IN_PLACE = 64, 256
#: Output pixels (padded-width rows) per block of a stride-1 convolution by taps: the
#: best of 2-16 rows at 56x56 (C = K = 64, 3x3), measured single-threaded, was 2-4 rows
#: of 58 (19.3 ms against 21.9 at 8 rows and 24.2 for im2col blocks).
TAP_PIXELS = 256


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "conv", ai.Conv2DOp, conv_blocks)


#: Winograd blocks: tiles (2x2 output pixels each) per block, at most; and the most bytes
#: of a block's transformed input and products (16 x (C/G + K/G) x tiles float32s).
#: Measured with the 16 GEMMs in ``gemm_nn`` (conv N8 C64 56x56 K64, 20 ms apart, median
#: ms, 1 / 2 threads): 56 tiles 13.6 / 7.9, 84: 13.4 / 7.9, 112 (4 tile rows of 28):
#: 12.1 / 7.3, 168: 12.5 / 7.7, 252: 12.6 / 7.9 (benchmarks/results/cpu-notes.md).
WINOGRAD_TILES, WINOGRAD_BYTES = 128, 2 << 20
#: A block's 16 GEMMs run in ``gemm_nn`` when its tiles rounded up to whole vectors are at
#: most this times the tiles, else in sgemm (but see WINOGRAD_SGEMM_MIN). ResNet-18 at
#: 64x64, batch 32, 1 thread: the 2x2-output convs (one tile a block, padded to 16) took
#: 8.8 ms in gemm_nn against 6.3 in sgemm, the 16x16 ones (8 tile rows of 8) 2.5 against
#: 9.6 (cpu-notes.md).
WINOGRAD_NN_PAD = 1.25
#: ... unless its GEMMs are smaller than this (K/G x C/G): then sgemm's cost per call
#: outweighs the padding (MobileNetV2's depthwise convs, one channel a group, many
#: one-tile blocks: batch 32 34 ms in gemm_nn, 74 in sgemm; ResNet-18's 4x4 outputs,
#: 64 x 64, 4 tiles a block: 2.3 ms in sgemm, 2.7 in gemm_nn).
WINOGRAD_SGEMM_MIN = 1024
#: F(2x2, 3x3) (Lavin and Gray): V = B^T d B of each 4x4 input tile d, U = G g G^T of
#: each 3x3 filter g, the 2x2 output tile A^T (U * V) A; the products summed over input
#: channels are 16 GEMMs. Rows of B^T and A^T as the generated code spells them out.
WINOGRAD_G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
#: F(4x4, 3x3), the same with 6x6 input tiles and 4x4 output tiles (points 0, +-1, +-2
#: and infinity; G in ``winograd.WINOGRAD4_G``): 36 GEMMs for 16 outputs, 4x fewer
#: multiplications than a direct 3x3 (F(2x2, 3x3): 2.25x), and per output fewer
#: transform loads and stores (36 / 16 a tile against 16 / 4). Its rounding error is
#: larger (the transforms scale by up to 8, the filters by 1/24), within 1e-4 (tested).
#: Tiles of F(4x4, 3x3) per block, at most. Conv N8 C64 56x56 K64 + bias + relu, one
#: thread, least thread CPU time of 21 calls (load average 4-5 on 2 cores): 28 tiles a
#: block (2 tile rows of 14) 9.35 ms, 56: 8.21, 84: 9.17, 112: 8.69; F(2x2, 3x3) 10.38.
WINOGRAD4_TILES = 64
#: F(4x4, 3x3) takes convolutions whose output planes are at least this high and wide
#: (a smaller plane wastes much of its 4x4 tiles) and whose weights are constants (the
#: Program transforms them once, in float64: no compiled per-launch transform).
WINOGRAD4_MIN_PLANE = 8


def _bt(m: int, d: Sequence[str], t: str) -> tuple[list[str], list[str]]:
    """B^T of F(m x m, 3x3) applied to the ``m + 2`` values ``d``: statements binding
    temporaries named ``t...`` and the ``m + 2`` result expressions."""
    if m == 2:
        return [], [f"{d[0]} - {d[2]}", f"{d[1]} + {d[2]}", f"{d[2]} - {d[1]}", f"{d[1]} - {d[3]}"]
    lines = [
        f"{t}p = {d[4]} - f32(4.0) * {d[2]}",
        f"{t}q = {d[3]} - f32(4.0) * {d[1]}",
        f"{t}u = {d[4]} - {d[2]}",
        f"{t}v = f32(2.0) * ({d[3]} - {d[1]})",
    ]
    return lines, [
        f"f32(4.0) * {d[0]} - f32(5.0) * {d[2]} + {d[4]}",
        f"{t}p + {t}q",
        f"{t}p - {t}q",
        f"{t}u + {t}v",
        f"{t}u - {t}v",
        f"f32(4.0) * {d[1]} - f32(5.0) * {d[3]} + {d[5]}",
    ]


def _at(m: int, v: Sequence[str], t: str) -> tuple[list[str], list[str]]:
    """A^T of F(m x m, 3x3) applied to the ``m + 2`` values ``v``: temporaries ``t...``
    and the ``m`` result expressions."""
    if m == 2:
        return [], [f"{v[0]} + {v[1]} + {v[2]}", f"{v[1]} - {v[2]} - {v[3]}"]
    lines = [
        f"{t}a = {v[1]} + {v[2]}",
        f"{t}b = {v[1]} - {v[2]}",
        f"{t}c = {v[3]} + {v[4]}",
        f"{t}d = {v[3]} - {v[4]}",
    ]
    return lines, [
        f"{v[0]} + {t}a + {t}c",
        f"{t}b + f32(2.0) * {t}d",
        f"{t}a + f32(4.0) * {t}c",
        f"{t}b + f32(8.0) * {t}d + {v[5]}",
    ]


def _transform_2d(
    one_d, m: int, x: Sequence[Sequence[str]], out: Sequence[Sequence[str]]
) -> list[str]:
    """Statements computing ``T x T^T`` of the square tile ``x`` (names, ``x[row][col]``)
    for the 1-D transform ``one_d`` (``_bt`` or ``_at``), assigned to ``out[a][b]``:
    first down the columns (``T`` times each column), then along the rows."""
    lines: list[str] = []
    cols = len(x[0])
    mid: list[list[str]] = []
    for j in range(cols):
        temps, exprs = one_d(m, [row[j] for row in x], f"c{j}")
        lines += temps
        names = [f"h{a}_{j}" for a in range(len(exprs))]
        lines += [f"{name} = {e}" for name, e in zip(names, exprs, strict=True)]
        mid.append(names)
    for a in range(len(mid[0])):
        temps, exprs = one_d(m, [mid[j][a] for j in range(cols)], f"r{a}")
        lines += temps
        lines += [f"{out[a][b]} = {e}" for b, e in enumerate(exprs)]
    return lines


def winograd_stride(rows: int, pitch: int) -> int:
    """Floats from one of a block's 16 Winograd matrices (``rows`` rows of ``pitch``, in
    ``wv`` or ``wm``) to the next: rounded up to an odd number of 64-byte lines, so that
    the 16 start in 16 different lines of a 4 KiB window (``e * odd`` differs mod 64 for
    every ``e``). The transforms touch all 16 at the same column: 16 streams that, a
    multiple of 4 KiB apart, fall into one set of the 8-way L1 (64 rows of 96: the conv
    ran 2.3x slower, benchmarks/results/cpu-notes.md)."""
    lines = -(-rows * pitch // 16)
    return 16 * (lines | 1)


def conv_method(op, constant_weight: bool = False) -> str:
    """How the cpu target computes an ``ai.conv2d``, by this rule (first match wins;
    ``constant_weight``: its weight is a constant of the program):

    * ``"depthwise"``: one input and one output channel a group (MobileNet's 3x3 convs,
      any kernel, stride, padding and dilation): a direct loop per output row, each tap
      a multiply-add of a (strided) input row segment, vectorised along the row; a
      GEMM of 1 x 1 matrices per tap is all call overhead (as Winograd, MobileNetV2
      at batch 32: ~23 of its 38 ms, benchmarks/results/cpu-notes.md);
    * ``"channels"``: one image, one group, an output plane of whole ``gemm_nn``
      vectors of at most ``CHANNEL_PIXELS`` pixels (``CHANNEL_PIXELS_IN_PLACE`` for a
      1x1, stride-1, unpadded kernel, which reads its input as it is): blocks of
      output channels over the whole plane (``ChannelBlocks``), so that each thread
      reads its part of the weight once; split by pixel rows, every block read and
      packed all of it (``benchmarks/cpu_conv_layers.py``, ResNet-50's convs at 128x128,
      batch 1, one thread, loaded machine, minima before / after, ms, onnxruntime's
      in brackets: 512 -> 2048 1x1 on 4x4 0.81 / 0.33 (0.29), 256 3x3 on 8x8 (Winograd
      before) 0.77 / 0.49 (0.46), 1024 -> 256 1x1 on 8x8 0.31 / 0.21 (0.22); the whole
      model 0.53x -> 0.83x of onnxruntime's speed; the 1x1s on 32x32 planes were level
      or slower, the 3x3s on 16x16 slower than Winograd: they stay as they were);
    * ``"direct"``: a 1x1 kernel, stride 1, no padding: one sgemm reads the input as
      it is (it already is the ``C x pixels`` matrix);
    * ``"im2row"``: one image, one group, a small output plane (``SMALL_PLANE`` pixels:
      ResNet's last stages at batch 1), a constant weight of whole ``gemm_packed``
      strips of output channels: the plane's pixels as rows, times the weight packed
      once (``PixelRowsBlocks``); Winograd computed one-tile GEMMs, im2col repacked
      the weight in sgemm at each call (1x128x2x2, 128 3x3, a whole call on one
      thread: Winograd 45 us, im2col 42, im2row 31, onnxruntime 32);
    * ``"im2col"``: a batch of small output planes (``SMALL_PLANE`` pixels, one group):
      im2col over blocks of several images, one GEMM a block (``images_per_block``);
    * ``"winograd4"``: a 3x3 kernel, stride 1, dilation 1, a constant weight, output
      planes at least ``WINOGRAD4_MIN_PLANE`` high and wide: F(4x4, 3x3), 4x fewer
      multiplications than a direct 3x3 (conv N8 C64 56x56 K64, one thread: see
      ``WINOGRAD4_TILES``);
    * ``"winograd"``: a 3x3 kernel, stride 1, dilation 1 (any padding, groups, sizes):
      F(2x2, 3x3), 2.25x fewer multiplications than a direct 3x3 for 16/9 the
      transformed copies, the fastest at every 3x3 shape measured (conv N8 C64
      56x56: 13.3 ms against 19.9 by taps and 22.9 by im2col, single-threaded);
      its f32 error stays within 1e-4 of the float64 reference (the tests check it);
    * ``"taps"``: any other stride-1 kernel larger than 1x1 (dilated 3x3, 5x5, 1x3,
      ...): one sgemm per tap over a padded copy of the block's input rows;
    * ``"im2col"``: everything else (a stride above 1, a padded 1x1, the few input
      channels of a stem): im2col of the block's pixels and one sgemm (``gemm_nn`` for
      at most ``COLS_NN_ROWS`` output channels over whole-vector rows).
    """
    k, cg, r, s = shape_of(op.operands[1])
    if cg == 1 and k == op.attr("groups"):
        return "depthwise"
    stride_1 = tuple(op.attr("strides")) == (1, 1)
    in_place = (r, s) == (1, 1) and stride_1 and not any(conv2d_padding(op.attr("padding")))
    n, _, oh, ow = shape_of(op.results[0])
    if n == 1 and op.attr("groups") == 1 and channel_split(oh * ow, in_place):
        return "channels"
    if in_place:
        return "direct"
    small = oh * ow <= SMALL_PLANE and op.attr("groups") == 1
    if small and n == 1 and constant_weight and host.packs(k):
        return "im2row"
    if small and n > 1:
        return "im2col"
    if (r, s) == (3, 3) and stride_1 and tuple(op.attr("dilations")) == (1, 1):
        large = min(oh, ow) >= WINOGRAD4_MIN_PLANE
        return "winograd4" if constant_weight and large else "winograd"
    if stride_1 and r * s > 1:
        return "taps"
    return "im2col"


def channel_split(pixels: int, in_place: bool) -> bool:
    """Whether one image's plane of ``pixels`` output pixels goes by ``"channels"``
    (``in_place``: a 1x1, stride-1, unpadded convolution, whose input is its GEMM's B)."""
    most = CHANNEL_PIXELS_IN_PLACE if in_place else CHANNEL_PIXELS
    return pixels % host.W == 0 and pixels <= most


def channel_blocks() -> int:
    """Blocks of a ``"channels"`` convolution: one per thread (``MIN_BLOCKS``); one on a
    single thread, since every block builds the im2col of the whole plane (one against
    two blocks on one thread measured level within the noise: benchmarks/results/
    cpu-notes.md)."""
    return MIN_BLOCKS if host.numba_threads() > 1 else 1


class ConvBlocks(BlockedCore):
    """Blocks of ``bh`` output rows of one image and channel group of an ``ai.conv2d``.

    A convolution by taps (``conv_method``) avoids im2col: the block's input rows are
    copied once, with their zero padding, into ``xpad`` (``C/G`` planes of ``rows``
    padded rows of ``Wp = OW + (S-1)*dw`` columns). Output pixel ``(oh, ow)`` of the
    block is then column ``q = (oh - oh0) * Wp + ow`` of a ``K/G x bh*Wp`` block, and
    tap ``(r, s)`` of the kernel reads ``xpad`` at ``q`` shifted by ``r*dh*Wp + s*dw``:
    a plain ``C/G x q`` matrix (leading dimension one plane). So the block is
    ``R*S`` sgemms (the first writes, the others add) of the tap's weights, repacked
    tap-major once per launch, by shifted views of ``xpad``; the ``S-1`` extra
    columns of each row are computed and dropped. Copies: ``xpad``, 1/(R*S) of an
    im2col's, and BLAS's packing of each tap's ``B``.
    """

    block_prologue = False
    #: Inputs the Program passes laid out (``KernelSource.prepared_inputs``).
    prepared: tuple[tuple[int, str], ...] = ()
    #: A convolution by taps (``conv_method``); set by ``_read_op``, which ``__init__``
    #: calls first (declared here: mypy cannot infer it where ``__init__`` reads it).
    taps: bool = False

    @staticmethod
    def local_result(op) -> bool:
        # the block's rows are Wp (or 2 * tiles) wide, the output's OW; a block of
        # several images holds K rows of all their pixels
        # (a "winograd4" conv is a "winograd" one without its constant weight, an
        # "im2row" one an "im2col" one of a single image: always local)
        method = conv_method(op)
        if method == "channels":  # the output's channel rows: written where they are
            return False
        if method in ("taps", "winograd") or images_per_block(op) > 1:
            return True
        n, _, oh, ow = shape_of(op.results[0])
        return n == 1 and oh * ow <= SMALL_PLANE

    def __init__(
        self,
        op,
        reads,
        workspace: Workspace,
        a_array,
        c_array,
        c_local,
        constants: Mapping[str, int] | None = None,
    ) -> None:
        constant = reads.get(op.operands[1]) in (constants or {})
        self._read_op(op, reads, c_array, c_local, constant)
        # constant weights (a model's) transformed once by the Program, not at each launch
        weights = (constants or {}).get(reads[op.operands[1]]) if self.winograd else None
        layout = f"winograd:{self.groups}" + (":4" if self.m == 4 else "")
        self.prepared = () if weights is None else ((weights, layout),)
        if self.winograd and not self.prepared:
            self.imports = (abi.import_line("winograd_filters"),)
        if self.winograd:  # the scan of a block's outputs for NaN and Inf, and the redo
            self.row_helpers = frozenset({"row_sum"})
            redo = "redo_nonfinite_tiles" if self.m == 2 else "redo_nonfinite_tiles_m"
            self.imports += (abi.import_line(redo),)
        self.wp = self.ow + (self.s - 1) * self.dw  # padded row width (taps)
        m = self.m
        self.tw = -(-self.ow // m)  # Winograd tiles along a row
        per_row = self.ow * (self.kg * c_local + (0 if self.direct else self.crs))
        bh = max(1, min(self.oh, COLS_BYTES // (4 * max(1, per_row))))
        if self.taps:
            bh = max(1, min(self.oh, TAP_PIXELS // self.wp))
        if self.winograd:  # tiles within the bytes of wv and wm
            fit = WINOGRAD_BYTES // (4 * (m + 2) ** 2 * (self.cg + self.kg))
            most = min(WINOGRAD_TILES if m == 2 else WINOGRAD4_TILES, fit)
            bh = m * max(1, min(-(-self.oh // m), most // self.tw))
        images = self.n * self.groups
        if images < MIN_BLOCKS:  # split further so that every thread has blocks
            bh = min(bh, max(1, math.ceil(self.oh * images / MIN_BLOCKS)))
            bh += -bh % m if self.winograd else 0  # whole tile rows
        self.bh = bh
        self.nrb = math.ceil(self.oh / bh)
        self.count = images * self.nrb
        self.pixels = bh * self.ow
        if self.winograd:
            # output row pitch in the block: m * tiles; a block: bh // m tile rows
            self.wp, self.tiles = m * self.tw, bh // m * self.tw
            # wv's and wm's rows: the tiles, padded to whole vectors of gemm_nn when that
            # pads little; a block of few tiles (late layers: 2x2 outputs are one tile)
            # keeps sgemm on its exact width (gemm_nn on 1 tile padded to 16 computed 16)
            padded = -(-self.tiles // host.W) * host.W
            small = self.kg * self.cg < WINOGRAD_SGEMM_MIN  # a call costs more than the pad
            self.nn = small or padded <= WINOGRAD_NN_PAD * self.tiles
            self.pitch = padded if self.nn else self.tiles
            if self.nn:
                self.imports += (abi.import_line("gemm_nn"),)
            self.rows = bh + 2  # padded input rows of a block
            self.xw = m * self.tw + 2  # padded input row width (the last tile's m + 2)
            workspace.add("xpad", self.cg * self.rows * self.xw)
            workspace.add("wv", (m + 2) ** 2 * winograd_stride(self.cg, self.pitch))
            workspace.add("wm", (m + 2) ** 2 * winograd_stride(self.kg, self.pitch))
            workspace.add(c_array, self.kg * bh * self.wp)
            self.operand_bytes = 4 * (m + 2) ** 2 * self.k * self.cg
            return
        if self.taps:
            self.rows = bh + (self.r - 1) * self.dh  # padded input rows of a block
            workspace.add("xpad", self.cg * self.rows * self.wp)
            workspace.add(c_array, self.kg * bh * self.wp)
            self.operand_bytes = 4 * self.k * self.crs
            return
        if self.nb > 1:  # blocks of nb whole images: their pixels side by side
            self.bh, self.nrb, self.count = self.oh, 1, math.ceil(self.n / self.nb)
            self.pixels = self.nb * self.oh * self.ow
        if self.nb > 1 or not self.direct:
            workspace.add("cols", self.crs * self.pixels)
        self.xrow_phase = -(-self.w // self.sw)  # a phase of a strided im2col's input row
        if not self.direct and self.sw > 1 and self.s > 1:
            workspace.add("xrow", self.sw * self.xrow_phase)
        if c_local:
            workspace.add(c_array, self.kg * self.pixels)
        # a block of few output channels over whole vectors of pixels: gemm_nn
        self.cols_nn = self.method == "im2col" and self.nb == 1
        self.cols_nn = self.cols_nn and self.kg <= COLS_NN_ROWS and self.ow % host.W == 0
        if self.cols_nn:
            self.imports += (abi.import_line("gemm_nn"),)

    def _read_op(self, op, reads, c_array: str, c_local: bool, constant: bool = False) -> None:
        """The convolution's shapes, attributes and method (``constant``: its weight is)."""
        self.op, self.reads, self.c_array, self.c_local = op, reads, c_array, c_local
        self.n, self.c, self.h, self.w = shape_of(op.operands[0])
        self.k, cg, self.r, self.s = shape_of(op.operands[1])
        _, _, self.oh, self.ow = shape_of(op.results[0])
        self.sh, self.sw = op.attr("strides")
        self.dh, self.dw = op.attr("dilations")
        self.pt, self.pl, _, _ = conv2d_padding(op.attr("padding"))
        self.groups = op.attr("groups")
        self.kg, self.cg, self.crs = self.k // self.groups, cg, cg * self.r * self.s
        self.method = conv_method(op, constant)
        self.nb = images_per_block(op)
        self.direct = self.method == "direct"
        self.winograd = self.method in ("winograd", "winograd4")
        self.m = 4 if self.method == "winograd4" else 2  # Winograd output tile
        self.cols_nn = False  # im2col's GEMM in gemm_nn (``__init__``)
        self.taps = self.method == "taps"

    def launch_lines(self) -> list[str]:
        """Taps: the weights tap-major, ``wtaps[g, r, s]`` a ``K/G x C/G`` matrix each.
        Winograd: ``wtaps[g, a, b]`` the K/G x C/G matrix of element (a, b) of G g G^T,
        computed in float64 and rounded once (``winograd.winograd_filters``)."""
        w = self.reads[self.op.operands[1]]
        shape = (self.groups, self.kg, self.cg, self.r, self.s)
        if self.prepared:  # the Program passes them transformed (``winograd.prepare_winograd``)
            return [f"wtaps = {w}", f"wraw = wtaps[{(self.m + 2) ** 2 * self.k * self.cg}:]"]
        if self.winograd:
            return [
                f"wtaps = winograd_filters({w}, {self.groups}, {self.kg}, {self.cg})",
                f"wraw = {w}",
            ]
        if not self.taps:
            return []
        return [
            f"wtaps = np.ascontiguousarray({w}.reshape({shape!r}).transpose(0, 3, 4, 1, 2))",
            "wtaps = wtaps.reshape(-1)",
        ]

    def entry_lines(self, scratch: EntryScratch) -> list[str] | None:
        """``launch_lines`` in the njit entry: prepared weights as they are, the tap-major
        copy by a loop into ``scratch``; Winograd filters of a weight that is an argument
        (computed per call by numpy-allocating ``winograd_filters``) have no entry form."""
        if self.prepared:
            return self.launch_lines()
        if self.winograd:
            return None
        if not self.taps:
            return []
        w = self.reads[self.op.operands[1]]
        shape = (self.groups, self.kg, self.cg, self.r, self.s)
        source = f"{w}.reshape({shape!r})"
        lines = [scratch.take("wtaps", math.prod(shape))]
        return lines + transpose_lines("wtaps", source, shape, (0, 3, 4, 1, 2), "cw_")

    def arrays(self) -> list[str]:
        if not (self.taps or self.winograd):
            return super().arrays()
        x = self.reads[self.op.operands[0]]
        return [x, "wtaps", "wraw"] if self.winograd else [x, "wtaps"]

    def describe(self) -> str:
        how = "sgemm" if self.direct else "im2col, gemm_nn" if self.cols_nn else "im2col, sgemm"
        if self.nb > 1:
            return (
                f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.cg}x{self.r}x"
                f"{self.s} in {self.count} blocks of {self.nb} images: their pixels side by "
                f"side ({'copied' if self.direct else 'im2col'}), one sgemm, epilogue per image"
            )
        if self.taps:
            how = f"padded copy, {self.r * self.s} sgemms (one per tap)"
        if self.winograd:
            m, e = self.m, (self.m + 2) ** 2
            how = (
                f"padded copy, Winograd F({m}x{m}, 3x3): input transform, {e} GEMMs, "
                "output transform"
            )
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.cg}x{self.r}x{self.s}"
            f" (groups {self.groups}) in {self.count} blocks of {self.bh} output rows: "
            f"{how}, epilogue per block"
        )

    def decode(self) -> list[str]:
        if self.nb > 1:  # images n0:n1, all pixels, the one group
            p = self.oh * self.ow
            return [
                f"n0 = blk * {self.nb}",
                f"n1 = min(n0 + {self.nb}, {self.n})",
                "g = 0",
                f"pw = (n1 - n0) * {p}",
            ]
        return [
            f"ng = blk // {self.nrb}",  # image * groups + group
            f"n = ng // {self.groups}",
            f"g = ng % {self.groups}",
            f"oh0 = blk % {self.nrb} * {self.bh}",
            f"oh1 = min(oh0 + {self.bh}, {self.oh})",
            f"p0 = oh0 * {self.ow}",
            f"pw = (oh1 - oh0) * {self.ow}",
        ]

    def compute(self) -> list[str]:
        if self.winograd:
            return self._padded_copy(self.xw) + self._winograd()
        if self.taps:
            return self._padded_copy(self.wp) + self._taps()
        x, w = (self.reads[v] for v in self.op.operands)
        p = self.oh * self.ow
        lines = [] if self.direct else self._im2col(x)
        if self.nb > 1:
            lines = [  # cols[c, i * P + q] = x[n0 + i, c, q]: C x pixels of the images
                "for i in range(n1 - n0):",
                f"    for c in range({self.c}):",
                f"        src = ((n0 + i) * {self.c} + c) * {p}",
                f"        d = c * pw + i * {p}",
                f"        for q in range({p}):",
                f"            cols[U(d + q)] = {x}[U(src + q)]",
            ]
            if not self.direct:  # each image's im2col, its pixels from column (n - n0) * P
                lines = [
                    "for n in range(n0, n1):",
                    "    oh0 = 0",
                    f"    oh1 = {self.oh}",
                    *(f"    {line}" for line in self._im2col(x, f" + (n - n0) * {p}")),
                ]
            return lines + [
                "prev = threads_begin(1)",
                f"sgemm(0, 0, {self.k}, pw, {self.crs}, {w}, 0, {self.crs}, cols, 0, pw, "
                f"{self.c_array}, 0, pw)",
                "threads_end(prev)",
            ]
        if self.direct:
            b, b_off, ldb = x, f"(n * {self.c} + g * {self.cg}) * {p} + p0", str(p)
        else:
            b, b_off, ldb = "cols", "0", "pw"
        if self.c_local:
            c_off, ldc = "0", "pw"
        else:
            c_off, ldc = f"(n * {self.k} + g * {self.kg}) * {p} + p0", str(p)
        operands = (
            f"{self.kg}, pw, {self.crs}, {w}, g * {self.kg * self.crs}, {self.crs}, "
            f"{b}, {b_off}, {ldb}, {self.c_array}, {c_off}, {ldc})"
        )
        if self.cols_nn:
            return [*lines, f"gemm_nn({operands}"]
        return [*lines, "prev = threads_begin(1)", f"sgemm(0, 0, {operands}", "threads_end(prev)"]

    def _padded_copy(self, width: int) -> list[str]:
        """The block's input rows into ``xpad``, ``width`` columns each (zeros around).

        Padded row ``i`` is input row ``oh0 - pt + i``; padded column ``j`` is input
        column ``j - pl``; a Winograd block's rows past the image are zeros too.
        """
        x = self.reads[self.op.operands[0]]
        h, w, rows = self.h, self.w, self.rows
        right = min(w, width - self.pl)  # input columns that fit the padded row
        extra = 2 if self.winograd else (self.r - 1) * self.dh  # Winograd: m + 2 rows a tile
        return [
            f"nrows = min(oh1 - oh0 + {extra}, {rows})",
            f"for c in range({self.cg}):",
            f"    plane = (n * {self.c} + g * {self.cg} + c) * {h * w}",
            f"    for i in range({rows if self.winograd else 'nrows'}):",
            f"        d = c * {rows * width} + i * {width}",
            f"        ih = oh0 - {self.pt} + i",
            f"        if ih < 0 or ih >= {h} or i >= nrows:",
            f"            for j in range({width}):",
            "                xpad[U(d + j)] = f32(0.0)",
            "        else:",
            f"            src = plane + ih * {w}",
            f"            for j in range({self.pl}):",
            "                xpad[U(d + j)] = f32(0.0)",
            f"            for j in range({right}):",
            f"                xpad[U(d + {self.pl} + j)] = {x}[U(src + j)]",
            f"            for j in range({self.pl + right}, {width}):",
            "                xpad[U(d + j)] = f32(0.0)",
        ]

    def _winograd(self) -> list[str]:
        """V = B^T d B of every (m+2)x(m+2) input tile into ``wv[e, c, t]``; (m+2)^2 GEMMs
        ``wm[e] = U[e] @ wv[e]`` (``gemm_nn`` over the tiles rounded up to whole vectors:
        the columns past them are zeros in ``wv`` and never read in ``wm``; sgemm when
        that rounding would pad much, ``WINOGRAD_NN_PAD``); Y = A^T M A of every tile
        into ``cbuf``; then the exact redo of tiles that are not finite. The transforms
        of a tile row are functions of their own (``definitions``)."""
        m, a = self.m, self.m + 2
        rows, xw, tw, tiles = self.rows, self.xw, self.tw, self.pitch
        # one e's matrix in wv, wm
        vt, mt = winograd_stride(self.cg, tiles), winograd_stride(self.kg, tiles)
        lanes = host.W
        pitch = self.bh * self.wp  # a channel of cbuf
        lines = [
            f"ntr = (oh1 - oh0 + {m - 1}) // {m}",  # tile rows of this block
            f"nt = ntr * {tw}",
            f"for c in range({self.cg}):",
            "    for tr in range(ntr):",
            f"        winograd_in(xpad, c * {rows * xw} + tr * {m * xw}, wv, "
            f"c * {tiles} + tr * {tw})",
        ]
        kc = self.kg * self.cg
        operands = (
            f"{self.cg}, wtaps, (g * {a * a} + e) * {kc}, {self.cg}, "
            f"wv, e * {vt}, {tiles}, wm, e * {mt}, {tiles})"
        )
        if self.nn:
            lines += [
                f"ntv = (nt + {lanes - 1}) // {lanes} * {lanes}",
                f"for e in range({a * a}):",
                f"    for c in range({self.cg}):",
                f"        wv[e * {vt} + c * {tiles} + nt:e * {vt} + c * {tiles} + ntv] = f32(0.0)",
                f"for e in range({a * a}):",
                f"    gemm_nn({self.kg}, ntv, {operands}",
            ]
        else:
            lines += [
                "prev = threads_begin(1)",
                f"for e in range({a * a}):",
                f"    sgemm(0, 0, {self.kg}, nt, {operands}",
                "threads_end(prev)",
            ]
        redo = "redo_nonfinite_tiles" if m == 2 else "redo_nonfinite_tiles_m"
        lines += [
            f"for kk in range({self.kg}):",
            "    for tr in range(ntr):",
            f"        winograd_out(wm, kk * {tiles} + tr * {tw}, cbuf, kk * {pitch} + tr * "
            f"{m * self.wp})",
            # tiles with NaN or Inf: again, directly (module docstring)
            f"    if not math.isfinite(row_sum(cbuf[kk * {pitch}:kk * {pitch} + "
            f"ntr * {m * self.wp}])):",
            "        for tr in range(ntr):",
            f"            {redo}(cbuf, kk * {pitch} + {m} * tr * {self.wp}, "
            f"{self.wp}, {tw}, xpad, {m} * tr * {xw}, {xw}, {rows * xw}, {self.cg}, wraw, "
            f"(g * {self.kg} + kk) * {9 * self.cg}" + ("" if m == 2 else f", {m}") + ")",
        ]
        self.definitions = (self._winograd_in(vt), self._winograd_out(mt))
        return lines

    def _winograd_in(self, vt: int) -> str:
        """``winograd_in(xpad, at, wv, q)``: B^T d B of the tiles of the tile row whose
        first padded input row starts at ``xpad[at]``, tile ``t`` into column ``q + t``
        of each of ``wv``'s (m+2)^2 matrices (``vt`` floats apart)."""
        m, a, xw = self.m, self.m + 2, self.xw
        d = [[f"r{i}[j + {j}]" for j in range(a)] for i in range(a)]
        v = [[f"wv[U({(i * a + j) * vt} + q + t)]" for j in range(a)] for i in range(a)]
        lines = [
            "def winograd_in(xpad, at, wv, q):",
            *(f"    r{i} = xpad[at + {i * xw}:at + {(i + 1) * xw}]" for i in range(a)),
            f"    for t in range({self.tw}):",
            f"        j = {m} * t",
            *(f"        {line}" for line in _transform_2d(_bt, m, d, v)),
        ]
        return "\n".join(lines)

    def _winograd_out(self, mt: int) -> str:
        """``winograd_out(wm, q, cbuf, at)``: A^T M A of the tiles of a tile row of one
        output channel (columns ``q``.. of ``wm``'s matrices, ``mt`` floats apart), its
        ``m`` output rows (``wp`` apart) at ``cbuf[at]``."""
        m, a, wp = self.m, self.m + 2, self.wp
        mm = [[f"m{i * a + j}" for j in range(a)] for i in range(a)]
        y = [[f"y{i}[{m} * t + {j}]" for j in range(m)] for i in range(m)]
        lines = [
            "def winograd_out(wm, q, cbuf, at):",
            *(f"    y{i} = cbuf[at + {i * wp}:at + {(i + 1) * wp}]" for i in range(m)),
            f"    for t in range({self.tw}):",
            *(
                f"        {mm[i][j]} = wm[U({(i * a + j) * mt} + q + t)]"
                for i in range(a)
                for j in range(a)
            ),
            *(f"        {line}" for line in _transform_2d(_at, m, mm, y)),
        ]
        return "\n".join(lines)

    def _taps(self) -> list[str]:
        """One sgemm per tap over the padded copy of the block's input rows."""
        wp, rows = self.wp, self.rows
        ldc = self.bh * wp
        kc = self.kg * self.cg
        return [
            f"q = (oh1 - oh0 - 1) * {wp} + {self.ow}",  # the block's last row ends at OW
            "prev = threads_begin(1)",
            f"for r in range({self.r}):",
            f"    for s in range({self.s}):",
            f"        wo = (g * {self.r * self.s} + r * {self.s} + s) * {kc}",
            f"        xo = r * {self.dh * wp} + s * {self.dw}",
            "        if r == 0 and s == 0:",
            f"            sgemm(0, 0, {self.kg}, q, {self.cg}, wtaps, wo, {self.cg}, "
            f"xpad, xo, {rows * wp}, cbuf, 0, {ldc})",
            "        else:",
            f"            sgemm_acc(0, 0, {self.kg}, q, {self.cg}, wtaps, wo, {self.cg}, "
            f"xpad, xo, {rows * wp}, cbuf, 0, {ldc})",
            "threads_end(prev)",
        ]

    def _im2col(self, x: str, col0: str = "") -> list[str]:
        """``cols[(c*R + r)*S + s, p - p0]`` for the block's pixels, a run per output row.

        For each kernel column ``s`` the output columns whose input column is
        inside the image are ``lo <= ow < hi``: zeros around them, in between a
        slice of the input row (contiguous at stride 1).
        """
        h, w, ow, sw = self.h, self.w, self.ow, self.sw
        if sw > 1 and self.s > 1:
            return self._strided_im2col(x, col0)
        stride = f" * {sw}" if sw > 1 else ""
        return [
            f"for c in range({self.cg}):",
            f"    plane = (n * {self.c} + g * {self.cg} + c) * {h * w}",
            f"    for r in range({self.r}):",
            f"        for s in range({self.s}):",
            f"            shift = s * {self.dw} - {self.pl}",  # input column of output column 0
            f"            lo = min({ow}, max(0, (-shift + {sw - 1}) // {sw}))",
            f"            hi = max(lo, min({ow}, ({w - 1} - shift) // {sw} + 1))",
            f"            dst0 = ((c * {self.r} + r) * {self.s} + s) * pw{col0}",
            "            for oh in range(oh0, oh1):",
            f"                d = dst0 + (oh - oh0) * {ow}",
            f"                ih = oh * {self.sh} + r * {self.dh} - {self.pt}",
            f"                if ih < 0 or ih >= {h}:",
            "                    lo_row = hi_row = 0",
            "                else:",
            "                    lo_row, hi_row = lo, hi",
            f"                    src = plane + ih * {w} + shift",
            "                    for j in range(lo, hi):",
            f"                        cols[U(d + j)] = {x}[U(src + j{stride})]",
            "                for j in range(lo_row):",
            "                    cols[U(d + j)] = f32(0.0)",
            f"                for j in range(hi_row, {ow}):",
            "                    cols[U(d + j)] = f32(0.0)",
        ]

    def _strided_im2col(self, x: str, col0: str) -> list[str]:
        """im2col at a column stride ``sw`` > 1 with several kernel columns: each input
        row is split once into its ``sw`` phases (``xrow[q][jj]`` = column ``jj * sw +
        q``, zeros past the row), so that every kernel column copies a contiguous run of
        one phase instead of gathering at stride ``sw`` (ResNet's 7x7 stride-2 stem
        gathered 7 times per input row)."""
        h, w, ow, sw, wq = self.h, self.w, self.ow, self.sw, self.xrow_phase
        lines = [
            f"for c in range({self.cg}):",
            f"    plane = (n * {self.c} + g * {self.cg} + c) * {h * w}",
            f"    for r in range({self.r}):",
            "        for oh in range(oh0, oh1):",
            f"            ih = oh * {self.sh} + r * {self.dh} - {self.pt}",
            f"            d0 = ((c * {self.r} + r) * {self.s}) * pw{col0} + (oh - oh0) * {ow}",
            f"            if ih < 0 or ih >= {h}:",
            f"                for s in range({self.s}):",
            f"                    for j in range({ow}):",
            "                        cols[U(d0 + s * pw + j)] = f32(0.0)",
            "                continue",
            f"            src = plane + ih * {w}",
        ]
        for q in range(sw):  # phase q: input columns q, q + sw, ...
            count = max(0, -(-(w - q) // sw))
            lines += [
                f"            for jj in range({count}):",
                f"                xrow[U({q * wq} + jj)] = {x}[U(src + jj * {sw}{_plus(q)})]",
            ]
        for tap in range(self.s):
            shift = tap * self.dw - self.pl  # input column of output column 0
            lo = min(ow, max(0, -(shift // sw)))
            hi = max(lo, min(ow, (w - 1 - shift) // sw + 1))
            q, base = shift % sw, shift // sw  # column j * sw + shift: phase q, index j + base
            dst = f"d0 + {tap} * pw"
            lines += [
                f"            for j in range({lo}):",
                f"                cols[U({dst} + j)] = f32(0.0)",
                f"            for j in range({lo}, {hi}):",
                f"                cols[U({dst} + j)] = xrow[U({q * wq}{_plus(base)} + j)]",
                f"            for j in range({hi}, {ow}):",
                f"                cols[U({dst} + j)] = f32(0.0)",
            ]
        return lines

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """Rows (n, k) of the output merged to OH*OW pixels, the block a segment of each;
        or whole output rows, when one of the epilogue's ``shapes`` tells H from W or it
        reduces along W."""
        p = self.oh * self.ow
        space: tuple[int, ...]
        blocked_rows = self.taps or self.winograd
        channels, first = self._channel_rows()
        if self.nb > 1:
            return self._images_epilogue_rows(shapes, reduces)
        if not blocked_rows and not reduces and all(merges_hw(shape) for shape in shapes):
            space = (self.n, self.k, p)
            loops = [
                f"q0 = n * {self.k} + {first}",
                *row_loop(space, f"q0, q0 + {channels}"),
            ]
            local = {}
            if self.c_local:
                loops.append("    lc = (row - q0) * pw")
                local[self.c_array] = "lc"
            block = RowBlock(local, ("p0", "pw"), merge_last_two)
            return EpilogueRows(loops, "    ", space, block)
        space = (self.n, self.k, self.oh, self.ow)
        loops = [
            f"for kk in range({channels}):",
            f"    q0 = (n * {self.k} + {first} + kk) * {self.oh}",
            *(f"    {line}" for line in row_loop(space, "q0 + oh0, q0 + oh1")),
        ]
        local = {}
        if blocked_rows:  # rows of the block are Wp wide, channels bh * Wp apart
            loops.append(f"        lc = kk * {self.bh * self.wp} + (row - q0 - oh0) * {self.wp}")
            local[self.c_array] = "lc"
        elif self.c_local:
            loops.append(f"        lc = kk * pw + (row - q0 - oh0) * {self.ow}")
            local[self.c_array] = "lc"
        return EpilogueRows(loops, "        ", space, RowBlock(local))

    def _channel_rows(self) -> tuple[str, str]:
        """The block's output channels: how many, and the first (expressions)."""
        return str(self.kg), f"g * {self.kg}"

    def _images_epilogue_rows(
        self, shapes: Sequence[tuple[int, ...]], reduces: bool
    ) -> EpilogueRows:
        """The block's images one by one: image ``n``'s K channel rows are segments of
        ``cbuf``'s rows (``pw`` long), at ``(n - n0) * P``; whole output rows (N, K, OH,
        OW) when an epilogue operand tells H from W or it reduces, else (N, K, OH*OW)."""
        p = self.oh * self.ow
        at = f"(n - n0) * {p}"
        if not reduces and all(merges_hw(shape) for shape in shapes):
            space: tuple[int, ...] = (self.n, self.k, p)
            loops = [
                "for n in range(n0, n1):",
                f"    q0 = n * {self.k}",
                *(f"    {line}" for line in row_loop(space, f"q0, q0 + {self.k}")),
                f"        lc = (row - q0) * pw + {at}",
            ]
            return EpilogueRows(
                loops, "        ", space, RowBlock({self.c_array: "lc"}, None, merge_last_two)
            )
        space = (self.n, self.k, self.oh, self.ow)
        loops = [
            "for n in range(n0, n1):",
            f"    for kk in range({self.k}):",
            f"        q0 = (n * {self.k} + kk) * {self.oh}",
            *(f"        {line}" for line in row_loop(space, f"q0, q0 + {self.oh}")),
            f"            lc = kk * pw + {at} + (row - q0) * {self.ow}",
        ]
        return EpilogueRows(loops, "            ", space, RowBlock({self.c_array: "lc"}))


class DepthwiseBlocks(ConvBlocks):
    """Blocks of whole channel planes of a depthwise ``ai.conv2d`` (one input and one
    output channel a group, ``conv_method`` "depthwise"): direct multiply-adds, no GEMM."""

    def __init__(
        self, op, reads, workspace: Workspace, a_array, c_array, c_local, weights=None
    ) -> None:
        """Blocks of ``cb`` whole channel planes of one image (``DEPTHWISE_PIXELS``, and
        at least ``MIN_BLOCKS`` blocks when there are enough planes); a constant weight
        (``weights``: its input index) of the lanes form is packed once (``pack_lanes``)."""
        self._read_op(op, reads, c_array, c_local)
        planes, p = self.n * self.k, self.oh * self.ow
        #: short output rows: the block's channels in the vector lanes (``depthwise``)
        self.lanes = depthwise.takes_lanes(self.ow, self.r * self.s)
        cb = depthwise.LANES_CHANNELS if self.lanes else DEPTHWISE_PIXELS // p
        cb = max(1, min(self.k, cb))
        if self.n * math.ceil(self.k / cb) < MIN_BLOCKS:
            cb = max(1, min(cb, math.ceil(planes / MIN_BLOCKS)))
        self.cb, self.bh, self.nrb = cb, self.oh, 1
        self.ncb = math.ceil(self.k / cb)
        self.count = self.n * self.ncb
        self.pixels = cb * p
        # the padded input plane: the rows and columns the taps reach
        hp = (self.oh - 1) * self.sh + (self.r - 1) * self.dh + 1
        wp = (self.ow - 1) * self.sw + (self.s - 1) * self.dw + 1
        self.xpad_shape = (hp, wp)
        self.packed = self.lanes and weights is not None
        if self.packed:
            self.prepared = ((weights, f"depthwise_lanes:{cb}"),)
        if self.lanes:
            self.imports = (abi.import_line("depthwise_taps_row"),)
            kernel, strides, dilations = (self.r, self.s), (self.sh, self.sw), (self.dh, self.dw)
            for name, floats in depthwise.lanes_workspace(  # a tile's width, cb or not
                depthwise.LANES_CHANNELS, self.oh, self.ow, kernel, strides, dilations
            ):
                workspace.add(name, floats)
        else:
            workspace.add("xpad", hp * -(-wp // self.sw) * self.sw)
            #: stride 1 along rows of at least a vector, kernels of more than 9 taps: the
            #: sums in register tiles (``depthwise_tiles.taps_plane``). Whole calls, us,
            #: tiles / loop: 96x32x32 7x7 186 / 252, 192x16x16 7x7 91 / 134, 240x16x16 5x5
            #: 74 / 84; 3x3 mixed (96x64x64 279 / 309, 144x32x32 120 / 115), kept as loops.
            self.plane_tiles = self.sw == 1 and self.ow >= host.W and self.r * self.s > 9
            if self.plane_tiles:
                self.imports = (abi.import_line("depthwise_taps_plane"),)
        if c_local:
            workspace.add(c_array, self.pixels)

    def describe(self) -> str:
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x1x{self.r}x{self.s}"
            f" (depthwise) in {self.count} blocks of {self.cb} channel planes: "
            + (
                "direct multiply-adds, the channels in vector lanes"
                if self.lanes
                else "direct multiply-adds along output rows"
            )
            + ", epilogue per block"
        )

    def decode(self) -> list[str]:  # channels g:g1 of image n, whole planes
        return [
            f"n = blk // {self.ncb}",
            f"g = blk % {self.ncb} * {self.cb}",
            f"g1 = min(g + {self.cb}, {self.k})",
            "oh0 = 0",
            f"oh1 = {self.oh}",
            "p0 = 0",
            f"pw = {self.oh * self.ow}",
        ]

    def compute(self) -> list[str]:
        return self._lanes() if self.lanes else self._depthwise()

    def _lanes(self) -> list[str]:
        """The block's channels in the vector lanes (``depthwise.lanes_lines``)."""
        x, w = (self.reads[v] for v in self.op.operands)
        p = self.oh * self.ow
        row = f"(ch - g) * {p}" if self.c_local else f"(n * {self.k} + ch) * {p}"
        return depthwise.lanes_lines(
            x=x,
            w=w,
            out=self.c_array,
            out_row=row,
            cb=depthwise.LANES_CHANNELS,
            c=self.c,
            h=self.h,
            wd=self.w,
            oh=self.oh,
            ow=self.ow,
            kernel=(self.r, self.s),
            strides=(self.sh, self.sw),
            dilations=(self.dh, self.dw),
            pads=(self.pt, self.pl),
            block=self.cb if self.packed else 0,
        )

    def _channel_rows(self) -> tuple[str, str]:
        return "g1 - g", "g"

    def _depthwise(self) -> list[str]:
        """Each channel plane of the block: a zero-padded copy of its input plane in
        ``xpad`` (the rows and columns the taps reach), then every output pixel as one
        sum over the taps, the weights held in scalars, the taps unrolled at constant
        offsets: no bounds, no branches, a loop along the output row that LLVM
        vectorises. The copy splits the padded columns by their phase modulo the column
        stride (``sw`` planes of ``Wq`` columns), so that a strided tap reads
        consecutive floats too: padded column ``c`` is ``xpad[c % sw][row][c // sw]``."""
        x, w = (self.reads[v] for v in self.op.operands)
        p, ow, sw, taps = self.oh * self.ow, self.ow, self.sw, self.r * self.s
        hp, wp = self.xpad_shape
        wq, plane = -(-wp // sw), hp * -(-wp // sw)
        out = f"(ch - g) * {p}" if self.c_local else f"(n * {self.k} + ch) * {p}"
        right = max(0, min(self.w, wp - self.pl))  # input columns inside the padded row
        rows = max(0, min(self.h, hp - self.pt))
        terms = []
        for r in range(self.r):
            for t in range(self.s):
                phase, shift = divmod(t * self.dw, sw)[::-1]
                off = phase * plane + r * self.dh * wq + shift
                terms.append(f"w{r * self.s + t} * xpad[U(base + j{_plus(off)})]")
        copy = []  # padded columns pl <= c < pl + right of phase q: c = q + sw * jj
        for q in range(sw):
            lo, hi = -(-(self.pl - q) // sw), -(-(self.pl + right - q) // sw)
            if hi > lo:
                at = f"{q * plane} + d + jj" if q else "d + jj"
                step = f"{sw} * jj" if sw > 1 else "jj"
                copy += [
                    f"        for jj in range({lo}, {hi}):",
                    f"            xpad[U({at})] = {x}[U(src + {step}{_plus(q - self.pl)})]",
                ]
        if self.plane_tiles:
            sums = [
                f"    depthwise_taps_plane(xpad, 0, {self.sh * wq}, {self.s}, {self.dh * wq},"
                f" {self.dw}, {taps}, {w}, ch * {taps}, {self.c_array}, {out}, {self.oh},"
                f" {ow})",
            ]
        else:
            sums = [
                *(f"    w{t} = {w}[ch * {taps} + {t}]" for t in range(taps)),
                f"    for oh in range({self.oh}):",
                f"        base = oh * {self.sh * wq}",
                f"        d = {out} + oh * {ow}",
                f"        for j in range({ow}):",
                f"            {self.c_array}[U(d + j)] = " + " + ".join(terms),
            ]
        return [
            f"for i in range({sw * plane}):",
            "    xpad[i] = f32(0.0)",
            "for ch in range(g, g1):",
            f"    xb = (n * {self.c} + ch) * {self.h * self.w}",
            f"    for i in range({rows}):",
            f"        d = (i + {self.pt}) * {wq}",
            f"        src = xb + i * {self.w}",
            *copy,
            *sums,
        ]


class WholePlaneBlocks(ConvBlocks):
    """Blocks that read the input and weight as they are (no staged copy, no
    workspace set up at launch): the base of ChannelBlocks and PixelRowsBlocks."""

    def launch_lines(self) -> list[str]:
        return []

    def entry_lines(self, scratch: EntryScratch) -> list[str] | None:
        return []

    def arrays(self) -> list[str]:
        return [self.reads[v] for v in self.op.operands]


class ChannelBlocks(WholePlaneBlocks):
    """Blocks of output channels of one image's whole plane (``conv_method``
    "channels"): ``gemm_nn`` of the block's rows of the weight (``K/B x C*R*S``, read
    as it is) by the plane's columns (``C*R*S x P``: the input itself for a 1x1,
    stride-1, unpadded convolution, else the block's im2col of the whole plane), into
    the output's channel rows. Small planes at batch 1 (ResNet-50's 8x8 and 4x4
    stages): split by pixel rows, every thread read (and sgemm packed) the whole
    weight for a few pixels each; split by channels, each reads its part once."""

    def __init__(self, op, reads, workspace: Workspace, a_array, c_array, c_local) -> None:
        """``channel_blocks()`` blocks of about equal numbers of output channels."""
        self._read_op(op, reads, c_array, c_local)
        unpadded = not any(conv2d_padding(op.attr("padding")))
        self.direct = (self.r, self.s, self.sh, self.sw) == (1, 1, 1, 1) and unpadded
        self.per = -(-self.k // channel_blocks())  # output channels a block
        self.nsb = -(-self.k // self.per)
        self.count, self.bh, self.nrb = self.nsb, self.oh, 1
        self.pixels = self.oh * self.ow
        self.imports = (abi.import_line("gemm_nn"),)
        # stride 1: the plane's im2col from a zero-padded copy of the input (rows and
        # columns the taps reach), by constant-length row copies
        self.padded = not self.direct and (self.sh, self.sw) == (1, 1)
        self.xpad_shape = (self.oh + (self.r - 1) * self.dh, self.ow + (self.s - 1) * self.dw)
        if not self.direct:
            workspace.add("cols", self.crs * self.pixels)
            self.xrow_phase = -(-self.w // self.sw)
            if self.sw > 1 and self.s > 1:
                workspace.add("xrow", self.sw * self.xrow_phase)
        if self.padded:
            workspace.add("xpad", self.c * math.prod(self.xpad_shape))
        if c_local:
            workspace.add(c_array, self.per * self.pixels)

    def describe(self) -> str:
        how = "the input in place" if self.direct else "im2col of the plane"
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.c}x{self.r}x{self.s}"
            f" in {self.count} blocks of {self.per} output channels of one image's "
            f"{self.pixels} pixels: gemm_nn by {how}, epilogue per block"
        )

    def decode(self) -> list[str]:  # channels k0:k1 of the image, its whole plane
        return [
            "n = 0",
            "g = 0",  # the group (im2col's)
            f"k0 = blk * {self.per}",
            f"k1 = min(k0 + {self.per}, {self.k})",
            "oh0 = 0",
            f"oh1 = {self.oh}",
            "p0 = 0",
            f"pw = {self.pixels}",
        ]

    def _channel_rows(self) -> tuple[str, str]:
        return "k1 - k0", "k0"

    def compute(self) -> list[str]:
        x, w = (self.reads[v] for v in self.op.operands)
        p, crs = self.pixels, self.crs
        lines = [] if self.direct else self._plane_im2col(x)
        b = x if self.direct else "cols"
        c_off = "0" if self.c_local else f"k0 * {p}"
        return [
            *lines,
            f"gemm_nn(k1 - k0, {p}, {crs}, {w}, k0 * {crs}, {crs}, {b}, 0, {p}, "
            f"{self.c_array}, {c_off}, {p})",
        ]

    def _plane_im2col(self, x: str) -> list[str]:
        """``cols[(c*R + r)*S + s, p]`` for every pixel of the plane: at stride 1 from
        ``xpad``, the input with its zero padding (``Hp x Wp`` a channel: the rows and
        columns the taps reach), each output row of a tap a copy of ``OW`` floats at a
        constant offset (no bounds, no branches: ResNet-50's 256 3x3 on 8x8, one thread,
        ~50 us a block by ``_im2col``'s rows); else ``_im2col``'s rows of the plane."""
        if not self.padded:
            return self._im2col(x)
        hp, wp = self.xpad_shape
        rows = max(0, min(self.h, hp - self.pt))  # input rows inside the padded plane
        right = max(0, min(self.w, wp - self.pl))  # ... and columns
        p, ow = self.pixels, self.ow
        return [
            f"for i in range({self.c * hp * wp}):",
            "    xpad[U(i)] = f32(0.0)",
            f"for c in range({self.c}):",
            f"    for i in range({rows}):",
            f"        d = c * {hp * wp} + (i + {self.pt}) * {wp} + {self.pl}",
            f"        src = (c * {self.h} + i) * {self.w}",
            f"        for j in range({right}):",
            f"            xpad[U(d + j)] = {x}[U(src + j)]",
            f"    for r in range({self.r}):",
            f"        for s in range({self.s}):",
            f"            d = ((c * {self.r} + r) * {self.s} + s) * {p}",
            f"            src = c * {hp * wp} + r * {self.dh * wp} + s * {self.dw}",
            f"            for oh in range({self.oh}):",
            f"                for j in range({ow}):",
            f"                    cols[U(d + oh * {ow} + j)] = xpad[U(src + oh * {wp} + j)]",
        ]


class PixelRowsBlocks(WholePlaneBlocks):
    """Blocks of one image's few output pixels and a range of output channels
    (``conv_method`` "im2row"): the pixels' patches as the rows of ``rows`` (P x
    C*R*S), ``gemm_packed`` by the constant weight (K x C*R*S, packed by the Program
    once as the B^T of the GEMM, layout "strips_kcrs") into ``ct`` (P x channels), then
    transposed into ``cbuf``'s channel rows for the epilogue."""

    def __init__(self, op, reads, workspace: Workspace, a_array, c_array, c_local, weights):
        """One block per image and ``STRIP`` columns of output channels, those split
        among ``MIN_BLOCKS`` blocks when there are fewer images."""
        self._read_op(op, reads, c_array, c_local, True)
        strips = self.k // host.STRIP
        split = 1 if self.n >= MIN_BLOCKS else min(strips, MIN_BLOCKS)
        self.per = -(-strips // split) * host.STRIP  # output channels a block
        self.nsb = -(-self.k // self.per)
        self.count, self.bh, self.nrb = self.n * self.nsb, self.oh, 1
        self.pixels = self.oh * self.ow
        self.prepared = ((weights, "strips_kcrs"),)
        self.imports = (abi.import_line("gemm_packed"),)
        workspace.add("rows", self.pixels * self.crs)
        workspace.add("ct", self.pixels * self.per)
        workspace.add(c_array, self.pixels * self.per)

    def describe(self) -> str:
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.c}x{self.r}x{self.s}"
            f" in {self.count} blocks of {self.per} output channels of one image's "
            f"{self.pixels} pixels: im2row, gemm_packed (weight packed once), transpose, "
            "epilogue per block"
        )

    def decode(self) -> list[str]:  # channels g:g1 of image n, its whole plane
        return [
            f"n = blk // {self.nsb}",
            f"g = blk % {self.nsb} * {self.per}",
            f"g1 = min(g + {self.per}, {self.k})",
            "oh0 = 0",
            f"oh1 = {self.oh}",
            "p0 = 0",
            f"pw = {self.pixels}",
        ]

    def _channel_rows(self) -> tuple[str, str]:
        return "g1 - g", "g"

    def compute(self) -> list[str]:
        """``rows[p, (c*R + r)*S + s]``: the input under tap (r, s) of pixel p's window
        (zero in the padding); the GEMM; ``cbuf[k - g, p] = ct[p, k - g]``."""
        x, w = (self.reads[v] for v in self.op.operands)
        h, wd, crs, p = self.h, self.w, self.crs, self.pixels
        return [
            f"for q in range({p}):",
            f"    oy = q // {self.ow} * {self.sh} - {self.pt}",
            f"    ox = q % {self.ow} * {self.sw} - {self.pl}",
            f"    for c in range({self.c}):",
            f"        plane = (n * {self.c} + c) * {h * wd}",
            f"        for r in range({self.r}):",
            f"            ih = oy + r * {self.dh}",
            f"            d = q * {crs} + (c * {self.r} + r) * {self.s}",
            f"            for s in range({self.s}):",
            f"                iw = ox + s * {self.dw}",
            f"                inside = ih >= 0 and ih < {h} and iw >= 0 and iw < {wd}",
            f"                rows[d + s] = {x}[plane + ih * {wd} + iw] if inside else f32(0.0)",
            f"gemm_packed({p}, g1 - g, {crs}, rows, 0, {crs}, {w}, g * {crs}, ct, 0, g1 - g)",
            "for kk in range(g1 - g):",
            f"    for q in range({p}):",
            f"        cbuf[kk * {p} + q] = ct[q * (g1 - g) + kk]",
        ]


def conv_blocks(
    op, reads, workspace: Workspace, a_array, c_array, c_local, constants=None
) -> ConvBlocks:
    """The blocked core of a conv group: ``DepthwiseBlocks``, ``PixelRowsBlocks`` or
    ``ConvBlocks``."""
    weights = (constants or {}).get(reads.get(op.operands[1], ""))
    method = conv_method(op, weights is not None)
    if method == "depthwise":
        return DepthwiseBlocks(op, reads, workspace, a_array, c_array, c_local, weights)
    if method == "channels":
        return ChannelBlocks(op, reads, workspace, a_array, c_array, c_local)
    if method == "im2row":
        return PixelRowsBlocks(op, reads, workspace, a_array, c_array, c_local, weights)
    return ConvBlocks(op, reads, workspace, a_array, c_array, c_local, constants)


# what generate_core_group asks of a core factory
conv_blocks.block_prologue = False  # type: ignore[attr-defined]
conv_blocks.local_result = ConvBlocks.local_result  # type: ignore[attr-defined]
conv_blocks.takes_constants = True  # type: ignore[attr-defined]


def images_per_block(op) -> int:
    """Images a block of a convolution by one GEMM (``"direct"`` or ``"im2col"``, one
    group) holds: as many as make ``IMAGE_PIXELS`` pixels, at least ``MIN_BLOCKS``
    blocks when the batch allows. Late CNN layers have planes of a few pixels
    (MobileNetV2 and ResNet-18 at 64x64: 2x2), where one GEMM per image is all call
    overhead (K x 4 x C)."""
    if conv_method(op) not in ("direct", "im2col") or op.attr("groups") != 1:
        return 1
    n, _, oh, ow = shape_of(op.results[0])
    nb = max(1, min(n, IMAGE_PIXELS // (oh * ow)))
    return max(1, min(nb, math.ceil(n / MIN_BLOCKS)))


def _plus(offset: int) -> str:
    """`` + offset`` for generated index arithmetic: `` - 3`` for -3, nothing for 0."""
    return f" + {offset}" if offset > 0 else f" - {-offset}" if offset else ""
