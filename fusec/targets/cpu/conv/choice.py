"""How the cpu target computes an ``ai.conv2d``: ``conv_method``'s rule, and the blocks of
images of a batch of small planes (``images_per_block``)."""

from __future__ import annotations

import math

from fusec.codegen import outer_constant
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu import host
from fusec.targets.cpu.blocked import MIN_BLOCKS
from fusec.targets.cpu.common import producer

#: Pixels a block of a convolution by one GEMM gathers from several images when the
#: planes are small (``images_per_block``).
IMAGE_PIXELS = 256
#: Batched convolutions whose output planes have at most this many pixels go by
#: im2col over blocks of images, not by Winograd or taps (whose blocks hold one image:
#: a 2x2 output is one Winograd tile, 16 GEMMs of one column).
SMALL_PLANE = 16
#: One image's plane of at most this many output pixels, whole vectors of ``gemm_nn``,
#: goes by ``"channels"`` (blocks of output channels; ``_IN_PLACE``: a 1x1 convolution
#: that reads its input as it is).
CHANNEL_PIXELS, CHANNEL_PIXELS_IN_PLACE = 64, 256
#: F(4x4, 3x3) takes convolutions whose output planes are at least this high and wide
#: (a smaller plane wastes much of its 4x4 tiles) and whose weights are constants (the
#: Program transforms them once, in float64: no compiled per-launch transform).
WINOGRAD4_MIN_PLANE = 8


def conv_method(op, constant_weight: bool = False) -> str:
    """How the cpu target computes an ``ai.conv2d``, by this rule (first match wins;
    ``constant_weight``: its weight is a constant of the program):

    * ``"q8"`` (after depthwise, whose float sums of the codes are exact anyway):
      a QDQ convolution, any groups, its input the codes of uint8 or int8
      activations less their zero point and its weight a constant of int8 codes, on a
      target with AVX-512 VNNI (``q8_zero``): im2row blocks of output rows by the
      int8 GEMM (``q8.Q8Blocks``: exact integer sums, the scales in the epilogue);
    * ``"depthwise"``: one input and one output channel a group (MobileNet's 3x3 convs,
      any kernel, stride, padding and dilation): a direct loop per output row, each tap
      a multiply-add of a (strided) input row segment, vectorised along the row; a
      GEMM of 1 x 1 matrices per tap is all call overhead (as Winograd, MobileNetV2
      at batch 32: ~23 of its 38 ms, benchmarks/results/cpu-notes.md);
    * ``"channels"``: one image, one group, an output plane of whole ``gemm_nn``
      vectors of at most ``CHANNEL_PIXELS`` pixels (``CHANNEL_PIXELS_IN_PLACE`` for a
      1x1, stride-1, unpadded kernel, which reads its input as it is) whose im2col
      fits in a core's L2 (``plane_fits_l2``; else ``"im2row"`` where it can): blocks of
      output channels over the whole plane (``ChannelBlocks``), so that each thread
      reads its part of the weight once; split by pixel rows, every block read and
      packed all of it (``benchmarks/cpu_conv_layers.py``, ResNet-50's convs at 128x128,
      batch 1, one thread, loaded machine, minima before / after, ms, onnxruntime's
      in brackets: 512 -> 2048 1x1 on 4x4 0.81 / 0.33 (0.29), 256 3x3 on 8x8 (Winograd
      before) 0.77 / 0.49 (0.46), 1024 -> 256 1x1 on 8x8 0.31 / 0.21 (0.22); the whole
      model 0.53x -> 0.83x of onnxruntime's speed; the 1x1s on 32x32 planes were level
      or slower, the 3x3s on 16x16 slower than Winograd: they stay as they were);
    * ``"direct"``: a 1x1 kernel, stride 1, no padding (a single output pixel of a
      constant weight: ``"im2row"`` below): one sgemm reads the input as it is (it
      already is the ``C x pixels`` matrix);
    * ``"im2row"``: one image, one group, a small output plane (``SMALL_PLANE`` pixels:
      ResNet's last stages at batch 1, or a ``"channels"`` plane whose im2col does not
      fit in L2), a constant weight of whole ``gemm_packed``
      strips of output channels: the plane's pixels as rows, times the weight packed
      once (``PixelRowsBlocks``); Winograd computed one-tile GEMMs, im2col repacked
      the weight in sgemm at each call (1x128x2x2, 128 3x3, a whole call on one
      thread: Winograd 45 us, im2col 42, im2row 31, onnxruntime 32); and one image's
      single output pixel, any K (squeeze-excite's 1x1 convs after a global pool,
      a matrix-vector product): one row times the packed weight, its last strip a
      window (``microkernel.pack_strips``), where "direct" ran one sgemm of N = 1; and
      a batch's single output pixels whose window is the whole input (``image_rows``:
      squeeze-excite at batch > 1): every image's input as a row of one GEMM by the packed
      weight (``ImageRowsBlocks``), where "direct" copied blocks of 4 images side by side
      for an sgemm of N = 4;
    * ``"im2col"``: a batch of small output planes (``SMALL_PLANE`` pixels, one group):
      im2col over blocks of several images, one GEMM a block (``images_per_block``);
      but a 3x3 stride-1 one whose Winograd blocks of images fill a vector with tiles
      goes on to ``"winograd"`` (``winograd_images_fill_a_vector``);
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
    if _quantized(op):
        return "q8"
    stride_1 = tuple(op.attr("strides")) == (1, 1)
    in_place = reads_input_in_place(op)
    n, _, oh, ow = shape_of(op.results[0])
    rows_of_k = oh * ow == 1 or (host.packs(k) and not in_place)
    one_plane = n == 1 and op.attr("groups") == 1
    by_rows = one_plane and constant_weight and rows_of_k  # "im2row" can take it
    if one_plane and channel_split(oh * ow, in_place):
        if in_place or plane_fits_l2(cg * r * s, oh * ow) or not by_rows:
            return "channels"
        return "im2row"
    small = oh * ow <= SMALL_PLANE and op.attr("groups") == 1
    if small and by_rows or constant_weight and image_rows(op):
        return "im2row"
    if in_place:
        return "direct"
    if small and n > 1 and not winograd_images_fill_a_vector(op):
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


def plane_fits_l2(columns: int, pixels: int) -> bool:
    """Whether a plane's im2col (``columns x pixels`` floats: the B of ``"channels"``'
    ``gemm_nn``, which every row tile of the weight streams) fits in one core's L2
    (``host.l2_bytes``). Measured on an AMD EPYC (512 KB L2, AVX2), batch 1, one thread,
    against onnxruntime in the same run (``benchmarks/cpu_conv_layers.py``, ratios of
    two runs each): ResNet-50's C256 8x8 K256 3x3 (590 KB) 0.57-0.67x by ``"channels"``,
    0.83-0.89x by ``"im2row"``, and its C256 16x16 K256 3x3/2 (590 KB) 0.62x / 0.98x;
    C512 4x4 K512 3x3 (295 KB) 1.49-1.54x by ``"channels"``, 1.05-1.09x by
    ``"im2row"``."""
    return columns * pixels * 4 <= host.l2_bytes()


def channel_blocks() -> int:
    """Blocks of a ``"channels"`` convolution: one per thread (``MIN_BLOCKS``); one on a
    single thread, since every block builds the im2col of the whole plane (one against
    two blocks on one thread measured level within the noise: benchmarks/results/
    cpu-notes.md)."""
    return MIN_BLOCKS if host.numba_threads() > 1 else 1


def winograd_images_fill_a_vector(op) -> bool:
    """Whether a batch's small planes (``SMALL_PLANE``) go by Winograd F(2x2, 3x3) in blocks
    of several images (``ConvBlocks._winograd_images``) rather than im2col: a 3x3, stride
    1, undilated, ungrouped convolution whose blocks of ``ceil(N / MIN_BLOCKS)`` images
    hold at least a vector of tiles. ResNet-50's 4x4 planes at batch 8 (4 tiles an image,
    4 images a block), one thread, a Zen 4 core, whole calls, medians, ms, im2col /
    Winograd (onnxruntime): C512 K512 6.94 / 3.79 (5.56), C256 K256 1.58 / 0.74 (1.24),
    C128 K128 0.42 / 0.23 (0.30) (benchmarks/results/cpu-notes.md)."""
    n, _, oh, ow = shape_of(op.results[0])
    _, _, r, s = shape_of(op.operands[1])
    plain = tuple(op.attr("strides")) == (1, 1) and tuple(op.attr("dilations")) == (1, 1)
    if (r, s) != (3, 3) or not plain or op.attr("groups") != 1:
        return False
    tiles = -(-oh // 2) * -(-ow // 2)  # an image's, F(2x2, 3x3)
    return min(-(-host.W // tiles), -(-n // MIN_BLOCKS)) * tiles >= host.W


def image_rows(op) -> bool:
    """Whether a convolution of a batch gives one output pixel from a window that is its
    whole input, unpadded and ungrouped (a 1x1 on a 1x1 plane: squeeze-excite after a
    global pool): each image's input is then, as it is, one row of an im2row GEMM."""
    n, _, h, w = shape_of(op.operands[0])
    _, _, r, s = shape_of(op.operands[1])
    whole = (r, s) == (h, w) and tuple(op.attr("dilations")) == (1, 1)
    unpadded = not any(conv2d_padding(op.attr("padding")))
    return n > 1 and op.attr("groups") == 1 and whole and unpadded


def small_plane_in_place(op) -> bool:
    """Whether a batched 1x1, stride-1, unpadded, ungrouped convolution runs one image a
    block, its GEMM in ``gemm_nn`` on the input plane where it is: when its output plane
    is whole vectors of at most ``CHANNEL_PIXELS_IN_PLACE`` pixels; not over blocks of
    several images copied side by side for one sgemm (which packs both operands at each
    call). MobileNetV3-Large's 1x1s at 128x128, batch 8, one thread, a Zen 4 core
    (AVX-512), whole calls, medians, ort / fusec before / after: C112 8x8 K672 + relu 0.92
    / 1.01, C160 4x4 K960 0.86 / 0.96, C960 4x4 K160 0.74 / 1.03
    (benchmarks/results/cpu-notes.md)."""
    n, _, oh, ow = shape_of(op.results[0])
    if op.attr("groups") != 1 or n == 1 or not reads_input_in_place(op):
        return False
    return channel_split(oh * ow, in_place=True)


def reads_input_in_place(op) -> bool:
    """Whether a convolution's input is, as it is, its GEMM's ``C x pixels`` B: a 1x1
    kernel, stride 1, no padding."""
    _, _, r, s = shape_of(op.operands[1])
    stride_1 = tuple(op.attr("strides")) == (1, 1)
    return (r, s) == (1, 1) and stride_1 and not any(conv2d_padding(op.attr("padding")))


def images_per_block(op) -> int:
    """Images a block of a convolution by one GEMM (``"direct"`` or ``"im2col"``, one
    group) holds: as many as make ``IMAGE_PIXELS`` pixels, at least ``MIN_BLOCKS``
    blocks when the batch allows. Late CNN layers have planes of a few pixels
    (MobileNetV2 and ResNet-18 at 64x64: 2x2), where one GEMM per image is all call
    overhead (K x 4 x C)."""
    method = conv_method(op)
    if method not in ("direct", "im2col") or op.attr("groups") != 1:
        return 1
    if method == "direct" and small_plane_in_place(op):
        return 1
    n, _, oh, ow = shape_of(op.results[0])
    nb = max(1, min(n, IMAGE_PIXELS // (oh * ow)))
    return max(1, min(nb, math.ceil(n / MIN_BLOCKS)))


def _quantized(op) -> bool:
    """Whether the convolution runs on the int8 GEMM (``q8_zero``)."""
    return q8_zero(op) is not None


def q8_zero(op) -> int | None:
    """For a convolution the int8 GEMM computes: ``zero``, the integer that makes the
    input's values uint8 codes (``v + zero``: the activation's zero point, plus 128 for
    int8 codes); else None. Needs an f32 result, a
    constant weight of integers in -128..127, an input that is the result of
    ``dequantize(codes, 1, zero_point)`` of int8 or uint8 codes with one constant zero
    point (in the group that writes it), and AVX-512 VNNI."""
    if ai.spec_of(op.results[0].type).dtype != "f32":
        return None
    dq = producer(op.operands[0])
    if not isinstance(dq, ai.DequantizeOp) or dq.attr("block_size"):
        return None
    codes = ai.spec_of(dq.input.type).dtype
    if codes not in ("i8", "ui8"):
        return None
    from fusec.targets.cpu import gemm_int8  # (numba: only for a quantized conv)

    if not gemm_int8.available():
        return None
    scale, zero_point = outer_constant(dq.scale), outer_constant(dq.zero_point)
    if scale is None or zero_point is None or zero_point.size != 1:
        return None
    if not bool((scale == 1).all()):
        return None
    weight = outer_constant(op.operands[1])
    if (
        weight is None
        or not ((weight == weight.round()) & (weight >= -128) & (weight <= 127)).all()
    ):
        return None
    return int(zero_point.reshape(-1)[0]) + (128 if codes == "i8" else 0)
