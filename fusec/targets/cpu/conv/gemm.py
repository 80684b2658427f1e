"""The cpu conv methods by blocks of output rows: one or more GEMMs + epilogue a block.

``conv_method`` (``choice``) states which of nine ways a convolution takes (depthwise,
blocks of output channels, direct, im2row, Winograd F(4x4, 3x3) or F(2x2, 3x3), one
sgemm per tap, im2col); the im2col way is described here, the others in ``ConvBlocks``
and its subclasses (``planes``). A batch of small planes (late CNN
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
from collections.abc import Sequence

from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu import abi, host
from fusec.targets.cpu.blocked import (
    MIN_BLOCKS,
    BlockedCore,
    CoreArgs,
    EpilogueRows,
    merge_last_two,
    merges_hw,
    row_loop,
)
from fusec.targets.cpu.conv.choice import (
    SMALL_PLANE,
    conv_method,
    image_rows,
    images_per_block,
    small_plane_in_place,
)
from fusec.targets.cpu.conv.transforms import at, bt, transform_2d, winograd_stride
from fusec.targets.cpu.entry import EntryScratch, transpose_lines
from fusec.targets.cpu.rows import RowBlock

#: Target size of a block's im2col columns.
COLS_BYTES = 1 << 20
#: An im2col block of at most this many output channels (a group's) whose output rows
#: are whole vectors runs its GEMM in ``gemm_nn`` (reading the columns in place), not
#: sgemm: ResNet's 7x7 stride-2 stem, 16 x 147 x 512 per block, 44 us in sgemm, 25 in
#: gemm_nn (one thread; the kernel 76 -> 58 us). Larger blocks are not measured.
COLS_NN_ROWS = 64
#: A "direct" convolution (1x1, stride 1, unpadded; one image a block) of at most
#: ``DIRECT_NN_DEPTH`` input channels and a weight of at most ``DIRECT_NN_WEIGHT`` floats
#: (both in L1: a strip of ``C x STRIP`` input floats while its tiles go down the
#: weight, and the weight itself, read again for each strip) over whole-vector output rows
#: runs its GEMM in ``gemm_nn``, in blocks of ``DIRECT_NN_PIXELS`` output pixels, not in
#: one sgemm of ``COLS_BYTES`` blocks (EfficientNet-B0's 1x1s at 128x128, batch 1, one
#: thread, minima of whole calls, us, sgemm / gemm_nn: C16 64x64 K96 + silu 407 / 307, C32
#: 64x64 K16 127 / 101, C24 32x32 K144 + silu 147 / 128, C144 32x32 K24 133 / 112;
#: ResNet-50's C64 32x32 K64 73 / 68; but C256 32x32 K128 439 / 486 and K64 238 / 251 (a
#: 64 KiB strip), and C64 32x32 K256 (a 64 KiB weight) level alone, the whole ResNet-50
#: 1-2% more CPU with it; with its C64 32x32 K64 alone (16 KiB) the whole model was 6%
#: slower in two of three quiet A/Bs and level in the third, its kernels' sum level (not
#: understood): those stay in sgemm). The whole EfficientNet-B0 b1 and MobileNetV3-Large
#: b1 (weights of at most 3456 floats), quiet, least ms: 4.30 -> 4.06 and 2.40 -> 2.29 with
#: 9afa84a (benchmarks/results/cpu-notes.md).
DIRECT_NN_DEPTH, DIRECT_NN_WEIGHT, DIRECT_NN_PIXELS = 160, 3584, 1024
#: Output pixels (padded-width rows) per block of a stride-1 convolution by taps: the
#: best of 2-16 rows at 56x56 (C = K = 64, 3x3), measured single-threaded, was 2-4 rows
#: of 58 (19.3 ms against 21.9 at 8 rows and 24.2 for im2col blocks).
TAP_PIXELS = 256


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
#: F(4x4, 3x3), as F(2x2, 3x3) (``transforms.WINOGRAD_G``) with 6x6 input tiles and 4x4
#: output tiles (points 0, +-1, +-2 and infinity; G in ``winograd.WINOGRAD4_G``): 36
#: GEMMs for 16 outputs, 4x fewer
#: multiplications than a direct 3x3 (F(2x2, 3x3): 2.25x), and per output fewer
#: transform loads and stores (36 / 16 a tile against 16 / 4). Its rounding error is
#: larger (the transforms scale by up to 8, the filters by 1/24), within 1e-4 (tested).
#: Tiles of F(4x4, 3x3) per block, at most. Conv N8 C64 56x56 K64 + bias + relu, one
#: thread, least thread CPU time of 21 calls (load average 4-5 on 2 cores): 28 tiles a
#: block (2 tile rows of 14) 9.35 ms, 56: 8.21, 84: 9.17, 112: 8.69; F(2x2, 3x3) 10.38.
WINOGRAD4_TILES = 64


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
    #: A "direct" convolution whose GEMM runs in ``gemm_nn`` (``DIRECT_NN_DEPTH``).
    direct_nn: bool = False

    @staticmethod
    def local_result(op) -> bool:
        # the block's rows are Wp (or 2 * tiles) wide, the output's OW; a block of
        # several images holds K rows of all their pixels
        # (a "winograd4" conv is a "winograd" one without its constant weight, an
        # "im2row" one an "im2col" one of a single image: always local)
        method = conv_method(op)
        if method == "channels":  # the output's channel rows: written where they are
            return False
        if method == "q8":  # the GEMM's pixel rows, transposed into the block's channels
            return True
        if method in ("taps", "winograd") or images_per_block(op) > 1 or image_rows(op):
            return True  # (a constant weight's ``image_rows`` is "im2row", images as rows)
        n, _, oh, ow = shape_of(op.results[0])
        return n == 1 and oh * ow <= SMALL_PLANE

    def __init__(self, args: CoreArgs) -> None:
        weights = args.constant_operand(1)
        self._read_op(args, weights is not None)
        workspace, c_array, c_local = args.workspace, args.c_array, args.c_local
        # constant weights (a model's) transformed once by the Program, not at each launch
        weights = weights if self.winograd else None
        layout = f"winograd:{self.groups}" + (":4" if self.m == 4 else "")
        self.prepared = () if weights is None else ((weights, layout),)
        if self.winograd and not self.prepared:
            self.imports = (abi.import_line("winograd_filters"),)
        if self.winograd:  # the scan of a block's outputs for NaN and Inf, and the redo
            self.row_helpers = frozenset({"row_sum"})
            redo = "redo_nonfinite_tiles" if self.m == 2 else "redo_nonfinite_tiles_m"
            self.imports += (abi.import_line(f"{redo}_call as {redo}"),)
        self.wp = self.ow + (self.s - 1) * self.dw  # padded row width (taps)
        m = self.m
        self.tw = -(-self.ow // m)  # Winograd tiles along a row
        per_row = self.ow * (self.kg * c_local + (0 if self.direct else self.crs))
        bh = max(1, min(self.oh, COLS_BYTES // (4 * max(1, per_row))))
        if self.taps:
            bh = max(1, min(self.oh, TAP_PIXELS // self.wp))
        if self.direct_nn:
            bh = max(1, min(self.oh, DIRECT_NN_PIXELS // self.ow))
        if self.winograd:  # tiles within the bytes of wv and wm
            fit = WINOGRAD_BYTES // (4 * (m + 2) ** 2 * (self.cg + self.kg))
            most = min(WINOGRAD_TILES if m == 2 else WINOGRAD4_TILES, fit)
            bh = m * max(1, min(-(-self.oh // m), most // self.tw))
        self.wi = 1  # images a block (Winograd's ``_winograd_images``)
        if self.winograd:
            self.wi = self._winograd_images(bh, most)
        images = self.n * self.groups
        if images < MIN_BLOCKS:  # split further so that every thread has blocks
            bh = min(bh, max(1, math.ceil(self.oh * images / MIN_BLOCKS)))
            bh += -bh % m if self.winograd else 0  # whole tile rows
        self.bh = bh
        self.nrb = math.ceil(self.oh / bh)
        self.count = images * self.nrb if self.wi == 1 else math.ceil(self.n / self.wi)
        self.pixels = bh * self.ow
        if self.winograd:
            # output row pitch in the block: m * tiles; a block: bh // m tile rows (of
            # each of its ``wi`` images)
            self.wp, self.tpi = m * self.tw, bh // m * self.tw
            self.tiles = self.wi * self.tpi
            # wv's and wm's rows: the tiles, padded to whole vectors of gemm_nn when that
            # pads little; a block of few tiles (late layers: 2x2 outputs are one tile)
            # keeps sgemm on its exact width (gemm_nn on 1 tile padded to 16 computed 16)
            padded = -(-self.tiles // host.W) * host.W
            small = self.kg * self.cg < WINOGRAD_SGEMM_MIN  # a call costs more than the pad
            self.nn = small or padded <= WINOGRAD_NN_PAD * self.tiles
            self.pitch = padded if self.nn else self.tiles
            if self.nn:
                self.imports += (abi.import_line("gemm_nn_call as gemm_nn"),)
            self.rows = bh + 2  # padded input rows of a block
            self.xw = m * self.tw + 2  # padded input row width (the last tile's m + 2)
            workspace.add("xpad", self.wi * self.cg * self.rows * self.xw)
            self.imports += (abi.import_line("copy_floats"),)  # ``_padded_copy``
            workspace.add("wv", (m + 2) ** 2 * winograd_stride(self.cg, self.pitch))
            workspace.add("wm", (m + 2) ** 2 * winograd_stride(self.kg, self.pitch))
            workspace.add(c_array, self.wi * self.kg * bh * self.wp)
            self.operand_bytes = 4 * (m + 2) ** 2 * self.k * self.cg
            return
        if self.taps:
            self.rows = bh + (self.r - 1) * self.dh  # padded input rows of a block
            workspace.add("xpad", self.cg * self.rows * self.wp)
            self.imports += (abi.import_line("copy_floats"),)  # ``_padded_copy``
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
        if not self.direct:
            self.imports += self.im2col_imports()
        if c_local:
            workspace.add(c_array, self.kg * self.pixels)
        # a block of few output channels over whole vectors of pixels: gemm_nn
        self.cols_nn = self.method == "im2col" and self.nb == 1
        self.cols_nn = self.cols_nn and self.kg <= COLS_NN_ROWS and self.ow % host.W == 0
        self.cols_nn = self.cols_nn or self.direct_nn
        #: B's rows (the input plane read in place, or the im2col block's) a multiple of
        #: 2 KiB apart: each strip of B copied out first (``gemm_nn_staged``)
        b_stride = self.h * self.w if self.direct else self.pixels
        self.staged = self.cols_nn and host.staging_pays(b_stride, self.kg)
        if self.staged:
            workspace.add("bstrip", self.crs * host.STRIP)
            self.imports += (abi.import_line("gemm_nn_staged_call as gemm_nn_staged"),)
        elif self.cols_nn:
            self.imports += (abi.import_line("gemm_nn_call as gemm_nn"),)

    def _winograd_images(self, bh: int, most: int) -> int:
        """Images a Winograd block holds: one, unless a block is a whole plane of fewer
        tiles than a vector (ResNet-50's 8x8 planes at batch 8: 4 tiles of F(4x4, 3x3)),
        whose 36 GEMMs would each run one vector of mostly padding; then enough images of
        one group to fill a vector, leaving ``MIN_BLOCKS`` blocks, and at most ``most``
        tiles in all (``WINOGRAD_BYTES``). C256 8x8 K256 3x3 +
        relu, batch 8, one thread, a Zen 4 core (AVX-512), whole calls, medians: 6.1 ms
        an image a block, 2.6 ms four (onnxruntime 5.1); ResNet-50 b8 at 128x128, ort /
        fusec 0.94 -> 1.05 (benchmarks/results/cpu-notes.md)."""
        tpi = bh // self.m * self.tw
        if bh < self.oh or self.groups != 1 or self.n == 1 or tpi >= host.W:
            return 1
        return max(1, min(-(-host.W // tpi), -(-self.n // MIN_BLOCKS), most // tpi))

    def _read_op(self, args: CoreArgs, constant: bool = False) -> None:
        """The convolution's shapes, attributes and method (``constant``: its weight is)."""
        BlockedCore.__init__(self, args)
        op = args.op
        assert isinstance(op, ai.Conv2DOp)
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
        self.staged = False  # ... with B's strips staged (``__init__``)
        self.direct_nn = (
            self.direct
            and self.nb == 1
            and (
                small_plane_in_place(op)
                or (
                    self.ow % host.W == 0
                    and self.crs <= DIRECT_NN_DEPTH
                    and self.kg * self.crs <= DIRECT_NN_WEIGHT
                )
            )
        )
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
        nn = "gemm_nn (B strips staged)" if self.staged else "gemm_nn"
        how = nn if self.direct_nn else "sgemm" if self.direct else None
        how = how or (f"im2col, {nn}" if self.cols_nn else "im2col, sgemm")
        if self.nb > 1:
            return (
                f"{self.shapes()} in {self.count} blocks of {self.nb} images: their pixels side by "
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
            if self.wi > 1:
                how = f"{how} (the {self.tiles} tiles of {self.wi} images)"
        return self.blocks_of(f"{self.bh} output rows", how, f" (groups {self.groups})")

    def shapes(self) -> str:
        """``describe``'s start: the input's and the weight's shapes."""
        return f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.cg}x{self.r}x{self.s}"

    def blocks_of(self, what: str, how: str, kind: str = "") -> str:
        """``describe``'s sentence: the shapes (and ``kind``), the blocks of ``what`` and
        ``how`` each is computed."""
        return f"{self.shapes()}{kind} in {self.count} blocks of {what}: {how}, epilogue per block"

    def decode(self) -> list[str]:
        if self.winograd and self.wi > 1:  # images n0:n1, whole planes, the one group
            return [
                f"n0 = blk * {self.wi}",
                f"n1 = min(n0 + {self.wi}, {self.n})",
                "g = 0",
                "oh0 = 0",
                f"oh1 = {self.oh}",
            ]
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
        if self.winograd and self.wi > 1:  # each image's planes after the one before
            at = f"(n - n0) * {self.cg * self.rows * self.xw} + "
            copy = [f"    {line}" for line in self._padded_copy(self.xw, at)]
            return ["for n in range(n0, n1):", *copy, *self._winograd()]
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
            f"{b}, {b_off}, {ldb}, {self.c_array}, {c_off}, {ldc}"
        )
        if self.staged:
            return [*lines, f"gemm_nn_staged({operands}, bstrip)"]
        if self.cols_nn:
            return [*lines, f"gemm_nn({operands})"]
        return [*lines, "prev = threads_begin(1)", f"sgemm(0, 0, {operands})", "threads_end(prev)"]

    def _padded_copy(self, width: int, at: str = "") -> list[str]:
        """The block's input rows into ``xpad``, ``width`` columns each (zeros around).

        Padded row ``i`` is input row ``oh0 - pt + i``; padded column ``j`` is input
        column ``j - pl``; a Winograd block's rows past the image are zeros too. ``at``: an
        offset into ``xpad`` (an expression ending in `` + ``) of image ``n``'s planes.
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
            f"        d = {at}c * {rows * width} + i * {width}",
            f"        ih = oh0 - {self.pt} + i",
            f"        if ih < 0 or ih >= {h} or i >= nrows:",
            f"            for j in range({width}):",
            "                xpad[U(d + j)] = f32(0.0)",
            "        else:",
            f"            src = plane + ih * {w}",
            f"            for j in range({self.pl}):",
            "                xpad[U(d + j)] = f32(0.0)",
            f"            copy_floats(xpad, d + {self.pl}, {x}, src, {right})",
            f"            for j in range({self.pl + right}, {width}):",
            "                xpad[U(d + j)] = f32(0.0)",
        ]

    def _winograd(self) -> list[str]:
        """V = B^T d B of every (m+2)x(m+2) input tile into ``wv[e, c, t]``; (m+2)^2 GEMMs
        ``wm[e] = U[e] @ wv[e]`` (``gemm_nn`` over the tiles rounded up to whole vectors:
        the columns past them are zeros in ``wv`` and never read in ``wm``; sgemm when
        that rounding would pad much, ``WINOGRAD_NN_PAD``); Y = A^T M A of every tile
        into ``cbuf``; then the exact redo of tiles that are not finite. The transforms
        of a tile row are functions of their own (``definitions``). A block of ``wi``
        images holds image ``n``'s tiles after those of the images before it (columns
        ``(n - n0) * tpi`` on), its padded planes and its ``cbuf`` channels likewise."""
        m, a = self.m, self.m + 2
        rows, xw, tw, tiles, tpi = self.rows, self.xw, self.tw, self.pitch, self.tpi
        # one e's matrix in wv, wm
        vt, mt = winograd_stride(self.cg, tiles), winograd_stride(self.kg, tiles)
        lanes = host.W
        pitch = self.bh * self.wp  # a channel of cbuf
        images = self.wi > 1
        # each image's offsets: its padded planes, tile columns and cbuf channels
        xo, to, co = (
            (f"i * {self.cg * rows * xw} + ", f"i * {tpi} + ", f"i * {self.kg * pitch} + ")
            if images
            else ("", "", "")
        )
        head, pad = (["for i in range(n1 - n0):"], "    ") if images else ([], "")
        lines = [
            f"ntr = (oh1 - oh0 + {m - 1}) // {m}",  # tile rows of this block (an image's)
            f"nt = (n1 - n0) * {tpi}" if images else f"nt = ntr * {tw}",
            *head,
            f"{pad}for c in range({self.cg}):",
            f"{pad}    for tr in range(ntr):",
            f"{pad}        winograd_in(xpad, {xo}c * {rows * xw} + tr * {m * xw}, wv, "
            f"c * {tiles} + {to}tr * {tw})",
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
            *head,
            f"{pad}for kk in range({self.kg}):",
            f"{pad}    for tr in range(ntr):",
            f"{pad}        winograd_out(wm, kk * {tiles} + {to}tr * {tw}, cbuf, {co}kk * {pitch}"
            f" + tr * {m * self.wp})",
            # tiles with NaN or Inf: again, directly (module docstring)
            f"{pad}    if not math.isfinite(row_sum(cbuf[{co}kk * {pitch}:{co}kk * {pitch} + "
            f"ntr * {m * self.wp}])):",
            f"{pad}        for tr in range(ntr):",
            f"{pad}            {redo}(cbuf, {co}kk * {pitch} + {m} * tr * {self.wp}, "
            f"{self.wp}, {tw}, xpad, {xo}{m} * tr * {xw}, {xw}, {rows * xw}, {self.cg}, wraw, "
            f"(g * {self.kg} + kk) * {9 * self.cg}" + ("" if m == 2 else f", {m}") + ")",
        ]
        self.definitions = (self._winograd_in(vt), self._winograd_out(mt))
        return lines

    def _winograd_in(self, vt: int) -> str:
        """``winograd_in(xpad, at, wv, q)``: B^T d B of the tiles of the tile row whose
        first padded input row starts at ``xpad[at]``, tile ``t`` into column ``q + t``
        of each of ``wv``'s (m+2)^2 matrices (``vt`` floats apart)."""
        m, a = self.m, self.m + 2
        d = [[f"r{i}[j + {j}]" for j in range(a)] for i in range(a)]
        v = [[f"wv[U({(i * a + j) * vt} + q + t)]" for j in range(a)] for i in range(a)]
        body = [f"j = {m} * t", *transform_2d(bt, m, d, v)]
        return self._tile_row_function(
            "winograd_in(xpad, at, wv, q)", "r", "xpad", a, self.xw, body
        )

    def _winograd_out(self, mt: int) -> str:
        """``winograd_out(wm, q, cbuf, at)``: A^T M A of the tiles of a tile row of one
        output channel (columns ``q``.. of ``wm``'s matrices, ``mt`` floats apart), its
        ``m`` output rows (``wp`` apart) at ``cbuf[at]``."""
        m, a = self.m, self.m + 2
        mm = [[f"m{i * a + j}" for j in range(a)] for i in range(a)]
        y = [[f"y{i}[{m} * t + {j}]" for j in range(m)] for i in range(m)]
        loads = [
            f"{mm[i][j]} = wm[U({(i * a + j) * mt} + q + t)]" for i in range(a) for j in range(a)
        ]
        body = [*loads, *transform_2d(at, m, mm, y)]
        return self._tile_row_function(
            "winograd_out(wm, q, cbuf, at)", "y", "cbuf", m, self.wp, body
        )

    def _tile_row_function(
        self, signature: str, row: str, buffer: str, rows: int, pitch: int, body: list[str]
    ) -> str:
        """The source of ``def signature``, which runs ``body`` for each tile ``t`` of a
        tile row (the frame both Winograd transforms share): ``rows`` rows of ``buffer``,
        ``pitch`` floats apart from ``at`` on, are slices ``{row}0``, ``{row}1``... that the
        body indexes."""
        lines = [
            f"def {signature}:",
            *(
                f"    {row}{i} = {buffer}[at + {i * pitch}:at + {(i + 1) * pitch}]"
                for i in range(rows)
            ),
            f"    for t in range({self.tw}):",
            *(f"        {line}" for line in body),
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

    def im2col_imports(self) -> tuple[str, ...]:
        """The ABI lines ``_im2col`` calls for: its row copies, and a stride-2 input row's
        split into column phases."""
        split = self.sw == 2 and self.s > 1
        return (abi.import_line("copy_floats", *(["depthwise_deinterleave"] if split else [])),)

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
        copy = (  # a run of the input row as it is: one memcpy (``row_copy``)
            [f"                    copy_floats(cols, d + lo, {x}, src + lo, hi - lo)"]
            if sw == 1
            else [
                "                    for j in range(lo, hi):",
                f"                        cols[U(d + j)] = {x}[U(src + j{stride})]",
            ]
        )
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
            *copy,
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
        pairs = w // 2 if sw == 2 else 0  # the phases of stride 2 by vector shuffles
        if pairs:
            lines.append(f"            depthwise_deinterleave({x}, src, xrow, 0, {wq}, {pairs})")
        for q in range(sw):  # phase q: input columns q, q + sw, ... (those left of them)
            count = max(0, -(-(w - q) // sw))
            lines += [
                f"            for jj in range({min(pairs, count)}, {count}):",
                f"                xrow[U({q * wq} + jj)] = {x}[U(src + jj * {sw}{plus(q)})]",
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
                f"            copy_floats(cols, {dst} + {lo}, xrow, {q * wq}{plus(base)} + {lo}, "
                f"{hi - lo})",
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
        if self.winograd and self.wi > 1:  # each image's channels after the one before
            loops = ["for n in range(n0, n1):", *(f"    {line}" for line in loops)]
            at = f"(n - n0) * {self.kg * self.bh * self.wp} + "
            loops.append(
                f"            lc = {at}kk * {self.bh * self.wp} + (row - q0 - oh0) * {self.wp}"
            )
            return EpilogueRows(loops, "            ", space, RowBlock({self.c_array: "lc"}))
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


def plus(offset: int) -> str:
    """`` + offset`` for generated index arithmetic: `` - 3`` for -3, nothing for 0."""
    return f" + {offset}" if offset > 0 else f" - {-offset}" if offset else ""
