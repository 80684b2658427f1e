"""The cpu conv methods over whole channel planes: depthwise (direct multiply-adds),
blocks of output channels of one image's plane (``"channels"``) and im2row by the weight
packed once (``"im2row"``: one image's pixels as rows, or a batch's one-pixel outputs with
the images as rows); ``conv_method`` (``choice``) says which convolutions take them."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu import abi, depthwise, host
from fusec.targets.cpu.blocked import (
    MIN_BLOCKS,
    CoreArgs,
    EpilogueRows,
    merge_last_two,
    row_loop,
)
from fusec.targets.cpu.conv.choice import SMALL_PLANE, channel_blocks, reads_input_in_place
from fusec.targets.cpu.conv.gemm import ConvBlocks, plus
from fusec.targets.cpu.entry import EntryScratch
from fusec.targets.cpu.rows import RowBlock

#: Output pixels of a depthwise block (whole channel planes, as many as fit): enough
#: work per block that taking it costs little.
DEPTHWISE_PIXELS = 4096
#: Taps a pass of the planar depthwise loop sums along an output row (then the next
#: pass adds the next taps to the stored row, in the same order: the same sums). The
#: pass keeps its taps' weights in vector registers: with 16 of them (AVX2) a 5x5's 25
#: weights spilled the running sum to the stack at every tap (a store and a reload a
#: term: 64x32x32 5x5/2 + bias + relu 145 us, one AMD EPYC core); 9 taps leave room for
#: the sums. With 32 registers (AVX-512) the whole sum is one pass.
SUM_TERMS = 9 if host.W == 8 else 64


class DepthwiseBlocks(ConvBlocks):
    """Blocks of whole channel planes of a depthwise ``ai.conv2d`` (one input and one
    output channel a group, ``conv_method`` "depthwise"): direct multiply-adds, no GEMM."""

    def __init__(self, args: CoreArgs, weights: int | None = None) -> None:
        """Blocks of ``cb`` whole channel planes of one image (``DEPTHWISE_PIXELS``, and
        at least ``MIN_BLOCKS`` blocks when there are enough planes); a constant weight
        (``weights``: its input index) of the lanes form is packed once (``pack_lanes``)."""
        self._read_op(args)
        workspace = args.workspace
        planes, p = self.n * self.k, self.oh * self.ow
        #: short output rows: the block's channels in the vector lanes (``depthwise``)
        self.lanes = depthwise.takes_lanes(self.ow, self.r * self.s)
        cb = depthwise.LANES_CHANNELS if self.lanes else self._planes_per_block()
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
        if self.lanes and weights is not None:
            self.prepared = ((weights, f"depthwise_lanes:{cb}"),)
        self.packed = bool(self.prepared)
        if self.lanes:
            self.imports = (
                abi.import_line(
                    "depthwise_taps_rows_call as depthwise_taps_rows", "depthwise_transpose"
                ),
            )
            kernel, strides, dilations = (self.r, self.s), (self.sh, self.sw), (self.dh, self.dw)
            for name, floats in depthwise.lanes_workspace(  # a tile's width, cb or not
                depthwise.LANES_CHANNELS, self.oh, self.ow, kernel, strides, dilations
            ):
                workspace.add(name, floats)
        else:
            workspace.add("xpad", hp * -(-wp // self.sw) * self.sw)
            #: stride 1 along rows of at least a vector, more than one tap: the sums in
            #: register tiles (``depthwise_tiles.taps_plane``). Whole calls, us, tiles /
            #: loop: 96x32x32 7x7 186 / 252, 192x16x16 7x7 91 / 134, 240x16x16 5x5 74 / 84;
            #: 3x3 + bias + silu (EfficientNet-B0's, same process, one thread, minima):
            #: 32x64x64 118 / 138, 144x32x32 131 / 156, 96x56x56 299 / 324.
            self.plane_tiles = self.sw == 1 and self.ow >= host.W and self.r * self.s > 1
            if self.plane_tiles:
                self.imports = (
                    abi.import_line("depthwise_taps_plane_call as depthwise_taps_plane"),
                )
            if self.sw == 2:  # the copy's column phases by vector shuffles (``_copy``)
                self.imports += (abi.import_line("depthwise_deinterleave"),)
            if self.sw == 1:  # each input row by one memcpy (``_copy``)
                self.imports += (abi.import_line("copy_floats"),)
        if self.c_local:
            workspace.add(self.c_array, self.pixels)

    def _planes_per_block(self) -> int:
        """Channel planes a block of the planar form takes (at least one)."""
        return DEPTHWISE_PIXELS // (self.oh * self.ow)

    def _input_planes(self) -> tuple[str, str]:
        """The array the block's input planes are read from, and where channel ``ch`` of
        image ``n`` starts in it."""
        return self.reads[self.op.operands[0]], f"(n * {self.c} + ch) * {self.h * self.w}"

    def task_lines(self) -> list[str]:
        """``xpad`` zeroed once a task: every block writes the same positions (the input's
        rows and columns), the zero border around them stays."""
        return ["for i in range(xpad.size):", "    xpad[U(i)] = f32(0.0)"]

    def describe(self) -> str:
        lanes = "direct multiply-adds, the channels in vector lanes"
        how = lanes if self.lanes else "direct multiply-adds along output rows"
        return self.blocks_of(f"{self.cb} channel planes", how, " (depthwise)")

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
        (x, plane_start), w = self._input_planes(), self.reads[self.op.operands[1]]
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
                terms.append(f"w{r * self.s + t} * xpad[U(base + j{plus(off)})]")
        copy = self._copy(x, right, plane)
        if self.plane_tiles:
            sums = [
                f"    depthwise_taps_plane(xpad, 0, {self.sh * wq}, {self.s}, {self.dh * wq},"
                f" {self.dw}, {taps}, {w}, ch * {taps}, {self.c_array}, {out}, {self.oh},"
                f" {ow})",
            ]
        else:
            at = f"{self.c_array}[U(d + j)]"
            sums = [
                *(f"    w{t} = {w}[ch * {taps} + {t}]" for t in range(taps)),
                f"    for oh in range({self.oh}):",
                f"        base = oh * {self.sh * wq}",
                f"        d = {out} + oh * {ow}",
            ]
            for i in range(0, taps, SUM_TERMS):  # one pass over the row per chunk of taps
                head = [at] if i else []
                sums += [
                    f"        for j in range({ow}):",
                    f"            {at} = " + " + ".join(head + terms[i : i + SUM_TERMS]),
                ]
        return [
            "for ch in range(g, g1):",
            f"    xb = {plane_start}",
            f"    for i in range({rows}):",
            f"        d = (i + {self.pt}) * {wq}",
            f"        src = xb + i * {self.w}",
            *copy,
            *sums,
        ]

    def _copy(self, x: str, right: int, plane: int) -> list[str]:
        """The lines that copy input row ``src`` into its padded row ``d`` of ``xpad``, split
        by column phase: padded column ``c`` (input column ``c - pl``) is element ``c // sw``
        of phase ``c % sw``'s plane. With stride 2, the pairs of padded columns (2u, 2u + 1)
        that are both input columns go by ``depthwise_deinterleave`` (vector shuffles; a
        Numba loop with a stride-2 read stays scalar: EfficientNet-B0's C96 64x64 3x3/2 +
        bias + SiLU, one thread, 276 -> 148 us, onnxruntime 188 in the same run); the
        columns left at either end, and other strides, go one at a time; a stride-1 row by
        one ``copy_floats`` (a memcpy: a Numba loop a row checked its arrays for overlap,
        ~3x the time of the copy itself)."""
        sw, pl = self.sw, self.pl
        u0, u1 = (-(-pl // 2), (pl + right) // 2) if sw == 2 else (0, 0)
        lines = []
        if u1 > u0:
            lines.append(
                f"        depthwise_deinterleave({x}, src + {2 * u0 - pl}, xpad, d + {u0},"
                f" {plane} + d + {u0}, {u1 - u0})"
            )
        spans = []  # (phase, first jj, end jj) of the one-at-a-time copies
        for q in range(sw):
            lo, hi = -(-(pl - q) // sw), -(-(pl + right - q) // sw)
            if u1 > u0:  # the columns left of the pairs and right of them
                spans += [(q, lo, min(hi, u0)), (q, max(lo, u1), hi)]
            else:
                spans.append((q, lo, hi))
        for q, lo, hi in spans:
            if hi > lo and sw == 1:  # a run of the row as it is (``row_copy``)
                lines.append(
                    f"        copy_floats(xpad, d + {lo}, {x}, src{plus(lo - pl)}, {hi - lo})"
                )
            elif hi > lo:
                at = f"{q * plane} + d + jj" if q else "d + jj"
                step = f"{sw} * jj" if sw > 1 else "jj"
                lines += [
                    f"        for jj in range({lo}, {hi}):",
                    f"            xpad[U({at})] = {x}[U(src + {step}{plus(q - pl)})]",
                ]
        return lines


class ExpandDepthwiseBlocks(DepthwiseBlocks):
    """A planar ``DepthwiseBlocks`` whose input is a 1x1 expansion computed per block
    (``fusec.targets.cpu.expand_depthwise``): a block's ``cb`` channel planes of the
    expansion by ``gemm_nn`` (the 1x1 weight's rows of those channels times the image's
    input, ``C x H*W``) into ``abuf``, the expansion's elementwise ops on them in place
    (``prologue_rows``, run by ``blocked.generate_core_group``), then the depthwise conv
    of those planes from ``abuf``."""

    #: the expansion's elementwise ops run per block (``generate_core_group`` reads it)
    block_prologue = True
    #: the block's expanded planes (``abuf``): always, as A's prologue runs per block
    a_array: str

    def __init__(self, args: CoreArgs) -> None:
        from fusec.targets.cpu.expand_depthwise import expansion_of

        op, reads, a_array, group = args.op, args.reads, args.a_array, args.op.parent_op()
        assert isinstance(group, ai.FusedOp)
        pair = expansion_of(group)  # the joined group's (1x1, depthwise) convs
        assert pair is not None and pair[1] is op and a_array is not None
        expansion = pair[0]
        #: the 1x1 conv the block computes first (``prologue_core_lines``)
        self.prologue_core = expansion
        self.expand_x, self.expand_w = (reads[v] for v in expansion.operands)
        self.cin = shape_of(expansion.operands[0])[1]
        super().__init__(args)
        assert not self.lanes  # (``expand_depthwise._planar_depthwise``)
        buffers = args.workspace.buffers
        names = [name for name, _ in buffers]
        buffers[names.index(a_array)] = (a_array, self.cb * self.h * self.w)
        self.imports += (abi.import_line("gemm_nn_call as gemm_nn"),)

    def _planes_per_block(self) -> int:
        """``EXPANSION_PLANES`` planes: a GEMM of that many rows reuses each input vector
        it loads that many times (a Numba prototype of MobileNetV3-L b8's 16 -> 64 on 64x64
        and 3x3/2, one thread, us: blocks of 4 planes, the depthwise conv's own for 32x32
        outputs, 1372-1422; 8 1532; 16 1183-1321; 32 1599; cpu-notes.md)."""
        return EXPANSION_PLANES

    def _input_planes(self) -> tuple[str, str]:
        return self.a_array, f"(ch - g) * {self.h * self.w}"

    def arrays(self) -> list[str]:
        return [self.expand_x, self.expand_w, self.reads[self.op.operands[1]]]

    def prologue_core_lines(self) -> list[str]:
        """The block's planes of the expansion into ``abuf``: channels ``g:g1``."""
        hw = self.h * self.w
        return [
            f"gemm_nn(g1 - g, {hw}, {self.cin}, {self.expand_w}, g * {self.cin}, {self.cin},"
            f" {self.expand_x}, n * {self.cin * hw}, {hw}, {self.a_array}, 0, {hw})"
        ]

    def prologue_rows(self) -> EpilogueRows:
        """The block's expanded planes as rows of ``(N, K, H*W)``, in ``abuf``."""
        hw = self.h * self.w
        space = (self.n, self.k, hw)
        loops = [f"q0 = n * {self.k} + g", *row_loop(space, "q0, q0 + g1 - g")]
        loops.append(f"    la = (row - q0) * {hw}")
        block = RowBlock({self.a_array: "la"}, None, merge_last_two)
        return EpilogueRows(loops, "    ", space, block)

    def describe(self) -> str:
        lines = "direct multiply-adds along output rows"
        how = f"the 1x1 expansion from {self.cin} channels by gemm_nn into abuf, then {lines}"
        return self.blocks_of(f"{self.cb} channel planes", how, " (depthwise)")


#: Channel planes a block of ``ExpandDepthwiseBlocks`` expands and convolves.
EXPANSION_PLANES = 16


class WholePlaneBlocks(ConvBlocks):
    """Blocks that read the input and weight as they are (no staged copy, no
    workspace set up at launch): the base of ChannelBlocks and PixelRowsBlocks."""

    def launch_lines(self) -> list[str]:
        return []

    def entry_lines(self, scratch: EntryScratch) -> list[str] | None:
        return []

    def arrays(self) -> list[str]:
        return [self.reads[v] for v in self.op.operands]

    def _whole_plane(self) -> list[str]:
        """``decode``'s lines for a block's output rows and pixels: the whole plane."""
        return ["oh0 = 0", f"oh1 = {self.oh}", "p0 = 0", f"pw = {self.pixels}"]


class ChannelBlocks(WholePlaneBlocks):
    """Blocks of output channels of one image's whole plane (``conv_method``
    "channels"): ``gemm_nn`` of the block's rows of the weight (``K/B x C*R*S``, read
    as it is) by the plane's columns (``C*R*S x P``: the input itself for a 1x1,
    stride-1, unpadded convolution, else the block's im2col of the whole plane), into
    the output's channel rows. Small planes at batch 1 (ResNet-50's 8x8 and 4x4
    stages): split by pixel rows, every thread read (and sgemm packed) the whole
    weight for a few pixels each; split by channels, each reads its part once."""

    def __init__(self, args: CoreArgs) -> None:
        """``channel_blocks()`` blocks of about equal numbers of output channels."""
        self._read_op(args)
        workspace = args.workspace
        self.direct = reads_input_in_place(self.op)
        self.per = -(-self.k // channel_blocks())  # output channels a block
        self.nsb = -(-self.k // self.per)
        self.count, self.bh, self.nrb = self.nsb, self.oh, 1
        self.pixels = self.oh * self.ow
        self.imports = (abi.import_line("gemm_nn_call as gemm_nn"),)
        if not self.direct:  # ``_plane_im2col``
            self.imports += self.im2col_imports()
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
        if self.c_local:
            workspace.add(self.c_array, self.per * self.pixels)

    def task_lines(self) -> list[str]:
        """A padded plane's ``xpad`` zeroed once a task (``DepthwiseBlocks.task_lines``)."""
        return ["for i in range(xpad.size):", "    xpad[U(i)] = f32(0.0)"] if self.padded else []

    def describe(self) -> str:
        how = "the input in place" if self.direct else "im2col of the plane"
        what = f"{self.per} output channels of one image's {self.pixels} pixels"
        return self.blocks_of(what, f"gemm_nn by {how}")

    def decode(self) -> list[str]:  # channels k0:k1 of the image, its whole plane
        return [
            "n = 0",
            "g = 0",  # the group (im2col's)
            f"k0 = blk * {self.per}",
            f"k1 = min(k0 + {self.per}, {self.k})",
            *self._whole_plane(),
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

    def __init__(self, args: CoreArgs, weights: int) -> None:
        """One block per image and ``STRIP`` columns of output channels, those split
        among ``MIN_BLOCKS`` blocks when there are fewer images; one block of all the
        channels when they are not whole strips (a one-pixel plane: ``gemm_packed``
        computes the last ones from the packed weight's window strip). A plane of more
        than ``SMALL_PLANE`` pixels (one ``"channels"`` would take but for its im2col's
        size in L2, ``choice.plane_fits_l2``) splits by output rows instead, all channels
        a block: split by channels, every block wrote the im2row of the whole plane
        (ResNet-50's 256 3x3 on 8x8: 64 x 2304 floats), the same rows twice at 2 threads."""
        self._read_op(args, True)
        workspace = args.workspace
        strips = self.k // host.STRIP
        self.by_rows = self.n < MIN_BLOCKS and self.oh * self.ow > SMALL_PLANE
        if self.by_rows:
            self.per, self.nsb = self.k, 1
            self.bh = -(-self.oh // min(self.oh, MIN_BLOCKS))
            self.nrb = -(-self.oh // self.bh)
            self.count = self.n * self.nrb
        else:
            split = 1 if self.n >= MIN_BLOCKS else min(strips, MIN_BLOCKS)
            # output channels a block: whole strips (a block's weight starts at a strip)
            self.per = -(-strips // split) * host.STRIP if host.packs(self.k) else self.k
            self.nsb = -(-self.k // self.per)
            self.count, self.bh, self.nrb = self.n * self.nsb, self.oh, 1
        self.pixels = self.bh * self.ow  # a block's, at most
        self.prepared = ((weights, "strips_kcrs"),)
        #: fewer channels than a strip (a one-pixel plane): the packed weight is one window
        #: strip, B's columns at its right, zeros left of them; ``gemm_nn`` computes all of
        #: its ``STRIP`` columns in whole vectors (``gemm_packed`` would take them one by
        #: one: 1152 -> 48 on one pixel 75 us against 4)
        self.window = self.k < host.STRIP
        gemm = "gemm_nn_call as gemm_nn" if self.window else "gemm_packed_call as gemm_packed"
        self.imports = (abi.import_line(gemm),)
        workspace.add("rows", self.pixels * self.crs)
        workspace.add("ct", self.pixels * (host.STRIP if self.window else self.per))
        workspace.add(self.c_array, self.pixels * self.per)

    def describe(self) -> str:
        what = (
            f"{self.bh} output rows (all {self.k} channels) of one image"
            if self.by_rows
            else f"{self.per} output channels of one image's {self.pixels} pixels"
        )
        gemm = "gemm_nn" if self.window else "gemm_packed"
        return self.blocks_of(what, f"im2row, {gemm} (weight packed once), transpose")

    def decode(self) -> list[str]:  # channels g:g1 of image n, its whole plane
        if self.by_rows:  # output rows oh0:oh1 of image n, every channel
            return [
                f"n = blk // {self.nrb}",
                "g = 0",
                f"g1 = {self.k}",
                f"oh0 = blk % {self.nrb} * {self.bh}",
                f"oh1 = min(oh0 + {self.bh}, {self.oh})",
                f"p0 = oh0 * {self.ow}",
                f"pw = (oh1 - oh0) * {self.ow}",
            ]
        return [
            f"n = blk // {self.nsb}",
            f"g = blk % {self.nsb} * {self.per}",
            f"g1 = min(g + {self.per}, {self.k})",
            *self._whole_plane(),
        ]

    def _channel_rows(self) -> tuple[str, str]:
        return "g1 - g", "g"

    def compute(self) -> list[str]:
        """``rows[p, (c*R + r)*S + s]``: the input under tap (r, s) of pixel p's window
        (zero in the padding); the GEMM; ``cbuf[k - g, p] = ct[p, k - g]``."""
        x, w = (self.reads[v] for v in self.op.operands)
        h, wd, crs = self.h, self.w, self.crs
        p, start = ("pw", "p0 + ") if self.by_rows else (str(self.pixels), "")
        lines = [
            f"for q in range({p}):",
            f"    oy = ({start}q) // {self.ow} * {self.sh} - {self.pt}",
            f"    ox = ({start}q) % {self.ow} * {self.sw} - {self.pl}",
            f"    for c in range({self.c}):",
            f"        plane = (n * {self.c} + c) * {h * wd}",
            f"        for r in range({self.r}):",
            f"            ih = oy + r * {self.dh}",
            f"            d = q * {crs} + (c * {self.r} + r) * {self.s}",
            f"            for s in range({self.s}):",
            f"                iw = ox + s * {self.dw}",
            f"                inside = ih >= 0 and ih < {h} and iw >= 0 and iw < {wd}",
            f"                rows[d + s] = {x}[plane + ih * {wd} + iw] if inside else f32(0.0)",
        ]
        if self.window:  # ct's rows: STRIP columns, the channels the last k of them
            strip, first = host.STRIP, host.STRIP - self.k
            return [
                *lines,
                f"gemm_nn({p}, {strip}, {crs}, rows, 0, {crs}, {w}, 0, {strip}, ct, 0, {strip})",
                f"for kk in range({self.k}):",
                f"    for q in range({p}):",
                f"        cbuf[kk * {p} + q] = ct[q * {strip} + {first} + kk]",
            ]
        return [
            *lines,
            f"gemm_packed({p}, g1 - g, {crs}, rows, 0, {crs}, {w}, g * {crs}, ct, 0, g1 - g)",
            "for kk in range(g1 - g):",
            f"    for q in range({p}):",
            f"        cbuf[kk * {p} + q] = ct[q * (g1 - g) + kk]",
        ]


class ImageRowsBlocks(WholePlaneBlocks):
    """A batch's convolution to one output pixel whose window is the whole unpadded input
    (``choice.image_rows``: squeeze-excite's 1x1 convs after a global pool): image ``n``'s
    input, ``C*R*S`` floats where they are, is row ``n`` of the GEMM's A, times the weight
    packed once (layout "strips_kcrs", as ``PixelRowsBlocks``): one ``gemm_packed`` of
    every image and a block's output channels writes the output's own layout (``N x K``,
    the plane one pixel), so the epilogue walks image rows with no transpose. Blocks of
    whole strips of output channels, one a thread (each reads its part of the weight
    once); all channels in one block when they are not whole strips. It replaced blocks
    of 4 images copied side by side for an sgemm of N = 4 (the weight read, and packed,
    once a block): MobileNetV3-Large's 960 -> 240 at batch 8, one thread, a Zen 4 core,
    131 us against onnxruntime's 93 before (benchmarks/results/cpu-notes.md)."""

    def __init__(self, args: CoreArgs, weights: int) -> None:
        self._read_op(args, True)
        strips = self.k // host.STRIP
        split = min(strips, channel_blocks())
        self.per = -(-strips // split) * host.STRIP if host.packs(self.k) else self.k
        self.nsb = -(-self.k // self.per)
        self.count, self.bh, self.nrb, self.pixels = self.nsb, 1, 1, 1
        self.prepared = ((weights, "strips_kcrs"),)
        #: fewer channels than a strip: the packed weight is one window strip, the
        #: channels its last ``k`` columns (``PixelRowsBlocks.window``)
        self.window = self.k < host.STRIP
        self.ldc = host.STRIP if self.window else self.per  # the block's C, a row an image
        gemm = "gemm_nn_call as gemm_nn" if self.window else "gemm_packed_call as gemm_packed"
        self.imports = (abi.import_line(gemm),)
        args.workspace.add(self.c_array, self.n * self.ldc)

    @staticmethod
    def local_result(op) -> bool:
        return True

    def describe(self) -> str:
        gemm = "gemm_nn" if self.window else "gemm_packed"
        what = f"{self.per} output channels of every image"
        return self.blocks_of(what, f"the images as rows, {gemm} (weight packed once)")

    def decode(self) -> list[str]:
        return [f"g = blk * {self.per}", f"g1 = min(g + {self.per}, {self.k})"]

    def compute(self) -> list[str]:
        x, w = (self.reads[v] for v in self.op.operands)
        n, crs, c = self.n, self.crs, self.c_array
        if self.window:
            strip = host.STRIP
            return [
                f"gemm_nn({n}, {strip}, {crs}, {x}, 0, {crs}, {w}, 0, {strip}, {c}, 0, {strip})"
            ]
        return [f"gemm_packed({n}, g1 - g, {crs}, {x}, 0, {crs}, {w}, g * {crs}, {c}, 0, g1 - g)"]

    def _local_offset(self) -> str:
        """Where image ``n``'s channel ``g`` is in the block's C (``n`` as an expression)."""
        if self.window:
            return f"{{n}} * {host.STRIP} + {host.STRIP - self.k}"
        return "{n} * (g1 - g)"

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """The images as rows of the output's (N, K) (a one-pixel plane), the block's
        channels a segment of each; with a reduction, every (n, k) a row of its one pixel."""
        at = self._local_offset()
        if not reduces:
            space: tuple[int, ...] = (self.n, self.k)
            loops = [*row_loop(space, f"0, {self.n}"), f"    lc = {at.format(n='row')}"]
            block = RowBlock({self.c_array: "lc"}, ("g", "g1 - g"), _image_rows)
            return EpilogueRows(loops, "    ", space, block)
        space = (self.n, self.k, self.oh, self.ow)
        loops = [
            f"for n in range({self.n}):",
            "    for kk in range(g1 - g):",
            f"        q0 = n * {self.k} + g + kk",
            *(f"        {line}" for line in row_loop(space, "q0, q0 + 1")),
            f"            lc = {at.format(n='n')} + kk",
        ]
        return EpilogueRows(loops, "            ", space, RowBlock({self.c_array: "lc"}))


def _image_rows(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape broadcast to (N, K, 1, 1) as the (N, K) of ``ImageRowsBlocks``' epilogue."""
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return (padded[0], padded[1] * padded[2] * padded[3])
