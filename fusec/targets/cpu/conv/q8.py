"""A quantized ``ai.conv2d`` on the cpu int8 GEMM (issue 31): ``conv_method`` "q8".

What a QDQ convolution is after ``recognize-patterns`` (``ScalesAfterQuantizedConv``):
``conv2d(dequantize(codes, 1, zero), W) * scales``, the input the codes of uint8 (or
int8) activations less their zero point (as float32; the ``dequantize`` is the last op
of the group that writes it: the previous layer's requantizing epilogue, or the input's
quantize / dequantize pair) and ``W`` a constant of integers in -128..127 (a weight's
codes, ``canonicalize`` folded their ``dequantize``). Such a convolution (one group of
ops, any conv groups but depthwise, a target with AVX-512 VNNI) runs as blocks of output
rows of one image and conv group, in one of two forms.

By channel rows (``gemm_q8_rows``; planes of ``Q8_ROWS_MIN_PIXELS`` pixels or more,
grouped convolutions, and K/G not a multiple of 16), each block:

* its pixels packed as X (``q8buf``): strips of ``STRIP`` pixels, each ``kq`` quad rows
  of 4 bytes a pixel (uint8 codes ``v + zero``), the quads in (r, s, c) order with each
  tap's C/G channels padded to whole quads (zero weights there). A 1x1, stride-1,
  unpadded conv writes its pixels' codes there from the input planes, 4 channels a
  32-bit word; any other first copies the block's input rows into ``xq``, a plane of
  words per quad of channels padded so that every tap reads inside it (the zero point's
  code in the padding, which the reference's zero padding of the dequantized input
  stands for), and a tap's quad for a run of pixels along an output row is then a run
  of words (every ``sw``-th) copied into the strip's quad row;
* ``gemm_q8_rows`` of the group's weight rows (int8 codes packed once by the Program,
  layout "q8_rows", with their int32 row sums) by X: ``vpdpbusd`` with the weight the
  signed operand, exact int32 sums less the zero point times each row's sum, written as
  float32 straight into ``cbuf``'s channel rows (``npad`` apart: the block's pixels
  padded to whole vectors), which the epilogue (scales, bias, activation,
  requantization) reads as the im2col blocks' are.

By pixel rows (small planes of one conv group, K a multiple of 16): the block's input
rows as uint8 codes channels-last (``xq``), im2row of C-byte runs per tap into A's rows
(``q8buf``, ``padded_k(C*R*S)`` bytes; a 1x1 conv writes its pixels' codes there
directly), ``gemm_q8_bytes`` (``_amx`` where AMX-INT8 is granted and the rows are
long, ``Q8_AMX_MIN_K``) by the weight packed once (layout "q8_krsc": the K x R*S*C
weight as B^T) into ``ct`` (P x K), transposed (tiles of ``TRANSPOSE_PIXELS``) into
``cbuf``'s K channel rows. With few pixels a tile of 6 channels by one vector of 16
pixels broadcasts a weight quad per ``vpdpbusd``; this form's 6 x 64 tiles do 4.

Why two: the transpose of the pixel-rows form was the largest part of a small-channel
conv (QDQ 1x1 64 -> 256 on 56x56, 1 thread: 530 of 1119 us, the GEMM ~200, by removing
each part of the generated kernel); by channel rows it is gone and the byte gathering
is word copies (that kernel 553 us, benchmarks/results/cpu-quant-int8.md).

The products and sums are exact integers (each below 2**31), so the result before the
epilogue is the float32 rounding of the exact sum, as onnxruntime's QLinearConv has it;
the float path rounded every partial sum of the dequantized values. A depthwise conv
(one channel a group) keeps the float ``"depthwise"`` method: its input is the same
codes, so its float32 sums of R*S products of codes are exact integers too (below 2**24
for up to 514 taps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusec.targets.cpu import abi
from fusec.targets.cpu.blocked import (
    MIN_BLOCKS,
    EpilogueRows,
    Workspace,
    merge_last_two,
    merges_hw,
    row_loop,
)
from fusec.targets.cpu.conv.choice import q8_zero
from fusec.targets.cpu.conv.gemm import ConvBlocks
from fusec.targets.cpu.entry import EntryScratch
from fusec.targets.cpu.rows import RowBlock

#: Target bytes of a block's workspace (A's rows of bytes, the GEMM's P x K result and
#: its transpose): A and C of the GEMM stay in L2.
Q8_BLOCK_BYTES = 1 << 20
#: Fewest bytes of A's rows (C*R*S padded to 64) for the AMX form: it stores its int32
#: tiles by a scalar loop, which shorter rows do not pay back (448 rows by 256 columns,
#: 1 thread, load ~6: K 64 VNNI 30 us / AMX 118, K 128 51 / 120, K 256 91 / 135; 448 x 64,
#: K 320 27 / 35, K 576 47 / 39).
Q8_AMX_MIN_K = 512
#: Output pixels a tile of the transpose of the GEMM's result takes (its rows stay in L1
#: while their columns go to the channel rows; row by row, the reads K floats apart
#: missed L1 at every one: 3136 x 256 pixels 4.6 of a conv's 6.5 ms).
TRANSPOSE_PIXELS = 16
#: Fewest output pixels a block holds when the plane has them (the AMX form computes
#: blocks of 32 rows; a block of fewer rows reads all of the packed weight for little).
Q8_MIN_PIXELS = 64
#: Output planes of at least this many pixels (and grouped convolutions, and K/G not a
#: multiple of 16) take ``gemm_q8_rows``: the output channels by the block's pixels,
#: straight into the channel rows the epilogue reads (no transpose). Below it a tile of
#: 6 channels by one vector of 16 pixels broadcasts a weight quad per ``vpdpbusd``: the
#: pixel-rows form (4 of them per broadcast) then does more work per load.
Q8_ROWS_MIN_PIXELS = 64


class Q8Blocks(ConvBlocks):
    """Blocks of ``bh`` output rows of one image and channel group of a quantized
    convolution (``q8_zero``): the block's codes as bytes, the int8 GEMM by the weight
    packed once, the epilogue (module docstring); ``by_rows`` (``Q8_ROWS_MIN_PIXELS``):
    ``gemm_q8_rows`` into the channel rows, else the pixel rows' GEMM and a transpose."""

    def __init__(self, op, reads, workspace: Workspace, a_array, c_array, c_local, weights):
        self._read_op(op, reads, c_array, c_local, True)
        zero = q8_zero(op)
        assert zero is not None and weights is not None and c_local
        self.zero = zero
        from fusec.targets.cpu.gemm_int8 import amx_available, fits, padded_k, scratch_floats
        from fusec.targets.cpu.host import STRIP

        self.strip = STRIP
        #: a 1x1, stride-1, unpadded conv: its A rows are the input's pixels as they are
        self.pointwise = (self.r, self.s, self.sh, self.sw) == (1, 1, 1, 1) and not any(
            (self.pt, self.pl, self.h - self.oh, self.w - self.ow)
        )
        large = self.oh * self.ow >= Q8_ROWS_MIN_PIXELS
        self.by_rows = self.groups > 1 or not fits(self.kg) or large
        if self.by_rows:
            self.cq = -(-self.cg // 4)  # a tap's channels in quads (zero weights past C/G)
            self.kq = self.r * self.s * self.cq
            self.q8_gemm = "gemm_q8_rows"
            self.prepared = ((weights, "q8_rows"),)
            per_pixel = 4 * self.kq + 4 * self.kg  # the packed block and cbuf
        else:
            self.kp = padded_k(self.crs)
            amx = amx_available() and self.kp >= Q8_AMX_MIN_K
            self.q8_gemm = "gemm_q8_bytes" + ("_amx" if amx else "")
            self.prepared = ((weights, "q8_krsc"),)
            per_pixel = self.kp + 8 * self.k  # A's row, ct and cbuf (f32)
        self.imports = (abi.import_line(self.q8_gemm),)
        fit = max(1, Q8_BLOCK_BYTES // per_pixel // self.ow)
        bh = max(1, min(self.oh, max(fit, -(-Q8_MIN_PIXELS // self.ow))))
        images = self.n * self.groups
        if images < MIN_BLOCKS:  # split further so that every thread has blocks
            bh = min(bh, max(1, math.ceil(self.oh * images / MIN_BLOCKS)))
        self.bh, self.nrb = bh, math.ceil(self.oh / bh)
        self.count = images * self.nrb
        self.pixels = bh * self.ow
        #: input rows a block reads (its output rows' windows)
        self.in_rows = (bh - 1) * self.sh + (self.r - 1) * self.dh + 1
        if self.by_rows:
            padded = -(-self.pixels // 16) * 16  # whole vectors of pixels
            #: the padded input row: every tap of every output pixel reads inside it
            self.wp = max((self.ow - 1) * self.sw + (self.s - 1) * self.dw + 1, self.pl + self.w)
            if not self.pointwise:
                workspace.add("xq", self.cq * self.in_rows * self.wp)
            workspace.add("q8buf", padded * self.kq)
            workspace.add(c_array, self.kg * padded)
            return
        if not self.pointwise:
            workspace.add("xq", -(-self.in_rows * self.w * self.c // 4))
        workspace.add("q8buf", scratch_floats(self.pixels, self.crs))
        workspace.add("ct", self.pixels * self.k)
        workspace.add(c_array, self.k * self.pixels)

    def launch_lines(self) -> list[str]:
        return []

    def entry_lines(self, scratch: EntryScratch) -> list[str] | None:
        return []

    def arrays(self) -> list[str]:
        return [self.reads[v] for v in self.op.operands]

    def describe(self) -> str:
        if self.by_rows:
            how = "codes as bytes" if self.pointwise else "codes in padded channel quads, im2row"
            return (
                f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.cg}x{self.r}x"
                f"{self.s} (groups {self.groups}) in {self.count} blocks of {self.bh} output "
                f"rows: {how}, {self.q8_gemm} (int8 weight x uint8 codes -> int32, weight "
                "packed once) into the channel rows, epilogue per block"
            )
        how = "codes as bytes" if self.pointwise else "codes channels-last, im2row of bytes"
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.c}x{self.r}x{self.s}"
            f" in {self.count} blocks of {self.bh} output rows: {how}, {self.q8_gemm} "
            "(uint8 x int8 -> int32, weight packed once), transpose, epilogue per block"
        )

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """``ConvBlocks``'s rows; by rows, the block's channel rows ``npad`` apart (its
        pixels padded to whole vectors)."""
        if not self.by_rows:
            return super().epilogue_rows(shapes, reduces)
        p = self.oh * self.ow
        first = f"g * {self.kg}"
        if not reduces and all(merges_hw(shape) for shape in shapes):
            space: tuple[int, ...] = (self.n, self.k, p)
            loops = [
                f"q0 = n * {self.k} + {first}",
                *row_loop(space, f"q0, q0 + {self.kg}"),
                "    lc = (row - q0) * npad",
            ]
            block = RowBlock({self.c_array: "lc"}, ("p0", "pw"), merge_last_two)
            return EpilogueRows(loops, "    ", space, block)
        space = (self.n, self.k, self.oh, self.ow)
        loops = [
            f"for kk in range({self.kg}):",
            f"    q0 = (n * {self.k} + {first} + kk) * {self.oh}",
            *(f"    {line}" for line in row_loop(space, "q0 + oh0, q0 + oh1")),
            f"        lc = kk * npad + (row - q0 - oh0) * {self.ow}",
        ]
        return EpilogueRows(loops, "        ", space, RowBlock({self.c_array: "lc"}))

    def compute(self) -> list[str]:
        return self._by_rows() if self.by_rows else self._by_pixels()

    def _by_rows(self) -> list[str]:
        """The block's pixels packed as ``gemm_q8_rows``' X in ``q8buf`` (strips of
        ``STRIP`` pixels, the last one ``npad`` less the whole strips wide, each ``kq``
        quad rows of 4 bytes a pixel, quads in the packed weight's (r, s, c) order),
        then the GEMM of the group's weight rows into ``cbuf``'s channel rows, ``npad``
        apart. A 1x1 conv writes its pixels' codes there directly; any other first
        copies the block's input rows as codes into ``xq``, a padded plane of 4-byte
        words per quad of channels (the zero point's code in the padding), so that a
        tap's quad of a run of pixels along an output row is a run of words (every
        ``sw``-th), copied into the strip's quad row."""
        x, w = (self.reads[v] for v in self.op.operands)
        h, wd, c, cg, kg, zero = self.h, self.w, self.c, self.cg, self.kg, self.zero
        kq, cq, wp, st = self.kq, self.cq, self.wp, self.strip
        lines = [
            "npad = (pw + 15) // 16 * 16",
            f"c0 = n * {c} + g * {cg}",  # the group's first input channel
        ]
        plane = h * wd
        whole, rest = divmod(cg, 4)

        def quads(head: list[str], body: list[str], indent: str) -> list[str]:
            """``body`` (storing ``word``, the codes of channels ``c0 + 4 * u`` .. ``+ 3``
            at ``src + j`` as a little-endian 4-byte word) over the whole quads of the
            group's channels, then over the last one's ``rest`` channels (bytes of
            zeros past them: they multiply the packed weight's zeros)."""
            out = []
            inner = indent + "    " + " " * (len(head[-1]) - len(head[-1].lstrip())) + "    "
            for u, count in ((f"range({whole})", 4), (f"range({whole}, {whole + 1})", rest)):
                if not (count and (whole if count == 4 else 1)):
                    continue
                codes = [
                    f"((np.int32({x}[src + {i * plane} + j]) + {zero}) << {8 * i})"
                    for i in range(count)
                ]
                out += [
                    f"{indent}for u in {u}:",
                    *(f"{indent}    {line}" for line in head),
                    f"{inner}word = np.uint32({' | '.join(codes)})",
                    *(f"{inner}{line}" for line in body),
                ]
            return out

        if self.pointwise:  # pixel p0 + q of the plane is X's column q
            lines += [
                "bw = q8buf.view(np.uint32)",
                f"for s0 in range(0, pw, {st}):",
                f"    width = min({st}, npad - s0)",
                *quads(
                    [
                        "d = s0 * " + str(kq) + " + u * width",
                        f"src = (c0 + 4 * u) * {plane} + p0 + s0",
                        f"for j in range(min({st}, pw - s0)):",
                    ],
                    ["bw[d + j] = word"],
                    "    ",
                ),
            ]
        else:
            rows, pad = self.in_rows, f"np.uint32({(zero & 0xFF) * 0x01010101})"
            step = f" * {self.sw}" if self.sw > 1 else ""
            pl, right = self.pl, self.pl + wd
            lines += [
                "xw = xq.view(np.uint32)",
                "bw = q8buf.view(np.uint32)",
                f"iy0 = oh0 * {self.sh} - {self.pt}",  # the block's first input row
                f"for u in range({cq}):",  # the padding: the zero point's code
                f"    for i in range({rows}):",
                f"        at = (u * {rows} + i) * {wp}",
                f"        if iy0 + i < 0 or iy0 + i >= {h}:",
                f"            for j in range({wp}):",
                f"                xw[at + j] = {pad}",
                "        else:",
                f"            for j in range({pl}):",
                f"                xw[at + j] = {pad}",
                f"            for j in range({right}, {wp}):",
                f"                xw[at + j] = {pad}",
                *quads(
                    [
                        f"for i in range(max(0, -iy0), min({rows}, {h} - iy0)):",
                        f"    src = (c0 + 4 * u) * {plane} + (iy0 + i) * {wd}",
                        f"    dst = (u * {rows} + i) * {wp} + {pl}",
                        f"    for j in range({wd}):",
                    ],
                    ["xw[dst + j] = word"],
                    "",
                ),
                f"for s0 in range(0, pw, {st}):",
                f"    width = min({st}, npad - s0)",
                f"    end = min(s0 + {st}, pw)",
                "    q = s0",
                "    while q < end:",
                f"        oy, ox = q // {self.ow}, q % {self.ow}",
                f"        run = min({self.ow} - ox, end - q)",
                f"        d0 = s0 * {kq} + q - s0",
                f"        for r in range({self.r}):",
                f"            for s in range({self.s}):",
                f"                for u in range({cq}):",
                f"                    d = d0 + ((r * {self.s} + s) * {cq} + u) * width",
                f"                    at = (u * {rows} + oy * {self.sh} + r * {self.dh}) * {wp}",
                f"                    at += ox * {self.sw} + s * {self.dw}",
                "                    for j in range(run):",
                f"                        bw[d + j] = xw[at + j{step}]",
                "        q += run",
            ]
        k_off = f"g * {kg * kq}" if self.groups > 1 else "0"
        w_arg = f"{w}[{k_off}:]" if self.groups > 1 else w
        s_off = f"{self.k * kq} + g * {kg} - {k_off}" if self.groups > 1 else f"{self.k * kq}"
        return [
            *lines,
            f"gemm_q8_rows({kg}, npad, {kq}, {w_arg}, {s_off}, np.int32({zero}), q8buf, "
            f"{self.c_array}, 0, npad)",
        ]

    def _by_pixels(self) -> list[str]:
        """A's rows as uint8 codes in ``q8buf`` (rows of ``kp`` bytes, columns in the
        packed weight's (r, s, c) order; the zero point's code in the padding); the int8
        GEMM into ``ct``; ``cbuf[kk, q] = ct[q, kk]``."""
        x, w = (self.reads[v] for v in self.op.operands)
        h, wd, c, k, kp, zero = self.h, self.w, self.c, self.k, self.kp, self.zero
        gemm = (
            f"{self.q8_gemm}(pw, {k}, {self.crs}, q8buf, np.int32({zero}), {w}, {k}, 0, ct, 0, {k})"
        )
        lines = ["ab = q8buf.view(np.uint8)"]
        if self.pointwise:  # pixel p0 + q of the plane is A's row q
            lines += [
                f"for cc in range({c}):",
                f"    src = (n * {c} + cc) * {h * wd} + p0",
                "    for q in range(pw):",
                f"        ab[q * {kp} + cc] = np.uint8(np.int32({x}[src + q]) + {zero})",
            ]
        else:
            lines += [
                "xb = xq.view(np.uint8)",
                f"iy0 = oh0 * {self.sh} - {self.pt}",  # the block's first input row
                f"for cc in range({c}):",
                f"    plane = (n * {c} + cc) * {h * wd}",
                f"    for i in range({self.in_rows}):",
                "        iy = iy0 + i",
                f"        if iy >= 0 and iy < {h}:",
                f"            src = plane + iy * {wd}",
                f"            dst = i * {wd * c} + cc",
                f"            for j in range({wd}):",
                f"                xb[dst + j * {c}] = np.uint8(np.int32({x}[src + j]) + {zero})",
                "for q in range(pw):",
                f"    oy = (p0 + q) // {self.ow} * {self.sh} - {self.pt}",
                f"    ox = (p0 + q) % {self.ow} * {self.sw} - {self.pl}",
                f"    for r in range({self.r}):",
                f"        iy = oy + r * {self.dh}",
                f"        for s in range({self.s}):",
                f"            ix = ox + s * {self.dw}",
                f"            d = q * {kp} + (r * {self.s} + s) * {c}",
                f"            if iy >= 0 and iy < {h} and ix >= 0 and ix < {wd}:",
                f"                at = ((iy - iy0) * {wd} + ix) * {c}",
                f"                ab[d:d + {c}] = xb[at:at + {c}]",
                "            else:",
                f"                ab[d:d + {c}] = np.uint8({zero})",
            ]
        return [
            *lines,
            gemm,
            f"for qa in range(0, pw, {TRANSPOSE_PIXELS}):",
            f"    qb = min(qa + {TRANSPOSE_PIXELS}, pw)",
            f"    for kk in range({k}):",
            "        for q in range(qa, qb):",
            f"            cbuf[kk * pw + q] = ct[q * {k} + kk]",
        ]
