"""A quantized ``ai.conv2d`` on the cpu int8 GEMM (issue 31): ``conv_method`` "q8".

What a QDQ convolution is after ``recognize-patterns`` (``ScalesAfterQuantizedConv``):
``conv2d(dequantize(codes, 1, zero), W) * scales``, the input the codes of uint8 (or
int8) activations less their zero point (as float32; the ``dequantize`` is the last op
of the group that writes it: the previous layer's requantizing epilogue, or the input's
quantize / dequantize pair) and ``W`` a constant of integers in -128..127 (a weight's
codes, ``canonicalize`` folded their ``dequantize``). Such a convolution (one group of
ops, any conv groups but depthwise, a target with AVX-512 VNNI) runs as blocks of output
rows of one image and conv group (a small plane of a single image: blocks of its output
channels, ``Q8_SPLIT_ROWS_PIXELS``), each:

* its pixels packed as X (``q8buf``): strips of ``STRIP`` pixels, each ``kq`` quad rows
  of 4 bytes a pixel (uint8 codes ``v + zero``), the quads in (r, s, c) order with each
  tap's C/G channels padded to whole quads (zero weights there). A 1x1, stride-1,
  unpadded conv writes its pixels' codes there from the input planes, 4 channels a
  32-bit word; any other first copies the block's input rows into ``xq``, a plane of
  words per quad of channels padded so that every tap reads inside it (the zero point's
  code in the padding, which the reference's zero padding of the dequantized input
  stands for), and a tap's quad for a run of pixels along an output row is then a run
  of words (every ``sw``-th) copied into the strip's quad row;
* ``gemm_q8_rows`` of the block's weight rows (int8 codes packed once by the Program,
  layout "q8_rows", with their int32 row sums) by X: ``vpdpbusd`` with the weight the
  signed operand, exact int32 sums less the zero point times each row's sum, written as
  float32 straight into ``cbuf``'s channel rows (``npad`` apart: the block's pixels
  padded to whole vectors), which the epilogue (scales, bias, activation,
  requantization) reads as the im2col blocks' are.

Why by channel rows: the first form (the pixels as the GEMM's rows, ``gemm_q8_bytes``
by the weight as B, then a P x K transpose into the channel rows) spent most of a
small-channel conv in the transpose (QDQ 1x1 64 -> 256 on 56x56, 1 thread: 530 of
1119 us, the GEMM ~200, by removing each part of the generated kernel; now 553 us all
in), and on small planes its row blocks of a few pixels left the epilogue scalar. It
stays only where AMX-INT8's tiles pay for the transpose: a long K on a plane that is
not tiny (``Q8_AMX_MIN_K``; benchmarks/results/cpu-quant-int8.md).

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
    CoreArgs,
    EpilogueRows,
    merge_last_two,
    merges_hw,
    row_loop,
)
from fusec.targets.cpu.conv.choice import q8_zero
from fusec.targets.cpu.conv.planes import WholePlaneBlocks
from fusec.targets.cpu.rows import RowBlock

#: Target bytes of a block's workspace (the packed pixels and the channel rows): they
#: stay in L2.
Q8_BLOCK_BYTES = 1 << 20
#: Fewest output pixels a block holds when the plane has them (a block of fewer pixels
#: reads all of the packed weight for little).
Q8_MIN_PIXELS = 64
#: A plane of fewer pixels than this, of one image and group, is split into blocks of
#: output channels for the threads, not into blocks of output rows: the epilogue's rows
#: then hold the whole plane (QDQ 1x1 160 -> 960 on 4x4 with hard-swish, 1 thread: two
#: blocks of 8-pixel rows 203 us, one block of 16-pixel rows 37). One kernel, 1 thread,
#: min of 11, this form / the first form (pixel rows, transposed; AMX where K >= 512),
#: us: MobileNetV3 1x1 160 -> 960 on 4x4 30 / 189; ResNet-50 128px 1x1 512 -> 2048 on
#: 4x4 83 / 241, 3x3 512 on 4x4 176 / 226, 3x3 512 stride 2 on 8x8 207 / 249.
Q8_SPLIT_ROWS_PIXELS = 256
#: ... except on AMX-INT8 (``amx_available``): a conv of one group, K a multiple of 16,
#: A's rows (C*R*S padded to 64) at least ``Q8_AMX_MIN_K`` bytes and an output plane of
#: at least ``Q8_AMX_MIN_PIXELS`` pixels runs its pixels as the GEMM's rows on AMX tiles
#: (``gemm_q8_bytes_amx`` by the weight packed as B, layout "q8_krsc"), then transposes
#: the P x K result (tiles of ``TRANSPOSE_PIXELS``) into the channel rows: 3x3 256 on
#: 14x14 (K 2304), 1 thread, min of 15: 243 us against 537 by channel rows; but the
#: QDQ bottleneck at 56x56 with its 3x3 64 (K 576) on AMX took 1.99 ms against 1.61 all
#: by channel rows (the transpose grows with the output, AMX's gain with K), and on 4x4
#: planes channel rows win at any K (3x3 512, K 4608: 176 against 226).
Q8_AMX_MIN_K, Q8_AMX_MIN_PIXELS = 1024, 64
#: Output pixels a tile of that transpose takes (its rows stay in L1 while their columns
#: go to the channel rows; row by row, the reads K floats apart missed L1 at every one).
TRANSPOSE_PIXELS = 16


class Q8Blocks(WholePlaneBlocks):
    """Blocks of ``bh`` output rows (or ``kc`` output channels) of one image and channel
    group of a quantized convolution (``q8_zero``): the block's codes packed as bytes,
    ``gemm_q8_rows`` of the weight packed once into the channel rows, the epilogue
    (module docstring)."""

    def __init__(self, args: CoreArgs, weights: int | None) -> None:
        self._read_op(args, True)
        op, workspace, c_array = args.op, args.workspace, args.c_array
        zero = q8_zero(op)
        assert zero is not None and weights is not None and args.c_local
        self.zero = zero
        from fusec.targets.cpu.host import STRIP

        self.strip = STRIP
        #: a 1x1, stride-1, unpadded conv: X's columns are the input's pixels as they are
        self.pointwise = (self.r, self.s, self.sh, self.sw) == (1, 1, 1, 1) and not any(
            (self.pt, self.pl, self.h - self.oh, self.w - self.ow)
        )
        self.cq = -(-self.cg // 4)  # a tap's channels in quads (zero weights past C/G)
        self.kq = self.r * self.s * self.cq
        from fusec.targets.cpu.gemm_int8 import amx_available, fits, padded_k, scratch_floats

        self.kp = padded_k(self.crs)
        #: the pixels as the GEMM's rows on AMX tiles, then a transpose (``Q8_AMX_MIN_K``)
        self.amx = (
            self.groups == 1
            and fits(self.k)
            and self.kp >= Q8_AMX_MIN_K
            and self.oh * self.ow >= Q8_AMX_MIN_PIXELS
            and amx_available()
        )
        if self.amx:
            self.q8_gemm = "gemm_q8_bytes_amx"
            self.prepared = ((weights, "q8_krsc"),)
            per_pixel = self.kp + 8 * self.k  # A's row, ct and cbuf (f32)
        else:
            self.q8_gemm = "gemm_q8_rows"
            self.prepared = ((weights, "q8_rows"),)
            per_pixel = 4 * self.kq + 4 * self.kg  # the packed block and cbuf
        self.imports = (abi.import_line(self.q8_gemm),)
        fit = max(1, Q8_BLOCK_BYTES // per_pixel // self.ow)
        bh = max(1, min(self.oh, max(fit, -(-Q8_MIN_PIXELS // self.ow))))
        images = self.n * self.groups
        #: blocks of output channels of a group (``kc`` each): a small plane by rows is
        #: split by channels, not rows (rows of few pixels leave its epilogue scalar)
        self.kb, self.kc = 1, self.kg
        if images < MIN_BLOCKS and self.oh * self.ow < Q8_SPLIT_ROWS_PIXELS and not self.amx:
            bh = self.oh
            self.kc = -(-self.kg // MIN_BLOCKS // 6) * 6  # whole tiles of 6 rows
            self.kb = -(-self.kg // self.kc)
        elif images < MIN_BLOCKS:  # split further so that every thread has blocks
            bh = min(bh, max(1, math.ceil(self.oh * images / MIN_BLOCKS)))
        self.bh, self.nrb = bh, math.ceil(self.oh / bh)
        self.count = images * self.nrb * self.kb
        self.pixels = bh * self.ow
        #: input rows a block reads (its output rows' windows)
        self.in_rows = (bh - 1) * self.sh + (self.r - 1) * self.dh + 1
        if self.amx:
            if not self.pointwise:
                workspace.add("xq", -(-self.in_rows * self.w * self.c // 4))
            workspace.add("q8buf", scratch_floats(self.pixels, self.crs))
            workspace.add("ct", self.pixels * self.k)
            workspace.add(c_array, self.k * self.pixels)
            return
        padded = -(-self.pixels // 16) * 16  # whole vectors of pixels
        #: the padded input row: every tap of every output pixel reads inside it
        self.wp = max((self.ow - 1) * self.sw + (self.s - 1) * self.dw + 1, self.pl + self.w)
        if not self.pointwise:
            workspace.add("xq", self.cq * self.in_rows * self.wp)
        workspace.add("q8buf", padded * self.kq)
        workspace.add(c_array, self.kc * padded)

    def describe(self) -> str:
        if self.amx:
            how = "codes as bytes" if self.pointwise else "codes channels-last, im2row of bytes"
            return (
                f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.c}x{self.r}x"
                f"{self.s} in {self.count} blocks of {self.bh} output rows: {how}, "
                f"{self.q8_gemm} (uint8 x int8 -> int32, weight packed once), transpose, "
                "epilogue per block"
            )
        how = "codes as bytes" if self.pointwise else "codes in padded channel quads, im2row"
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.cg}x{self.r}x"
            f"{self.s} (groups {self.groups}) in {self.count} blocks of {self.blocks()}: "
            f"{how}, {self.q8_gemm} (int8 weight x uint8 codes -> int32, weight "
            "packed once) into the channel rows, epilogue per block"
        )

    def blocks(self) -> str:
        """What a block holds, in words."""
        if self.kb > 1:
            return f"{self.kc} output channels of the whole plane"
        return f"{self.bh} output rows"

    def decode(self) -> list[str]:
        """``ConvBlocks``' (``kc0 = 0``); split by channels (``kb`` blocks of ``kc``
        channels of one image and group, the whole plane), the block's first channel in
        its group ``kc0`` and its channel count ``kn``."""
        if self.kb == 1:
            return super().decode()
        return [
            f"ng = blk // {self.kb}",  # image * groups + group
            f"n = ng // {self.groups}",
            f"g = ng % {self.groups}",
            f"kc0 = blk % {self.kb} * {self.kc}",
            f"kn = min({self.kc}, {self.kg} - kc0)",
            "oh0 = 0",
            f"oh1 = {self.oh}",
            "p0 = 0",
            f"pw = {self.oh * self.ow}",
        ]

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """``ConvBlocks``' rows, by channel rows the block's rows ``npad`` apart (its
        pixels padded to whole vectors)."""
        if self.amx:
            return super().epilogue_rows(shapes, reduces)
        p = self.oh * self.ow
        first, count = (
            (f"g * {self.kg}", str(self.kg)) if self.kb == 1 else (f"g * {self.kg} + kc0", "kn")
        )
        if not reduces and all(merges_hw(shape) for shape in shapes):
            space: tuple[int, ...] = (self.n, self.k, p)
            loops = [
                f"q0 = n * {self.k} + {first}",
                *row_loop(space, f"q0, q0 + {count}"),
                "    lc = (row - q0) * npad",
            ]
            block = RowBlock({self.c_array: "lc"}, ("p0", "pw"), merge_last_two)
            return EpilogueRows(loops, "    ", space, block)
        space = (self.n, self.k, self.oh, self.ow)
        loops = [
            f"for kk in range({count}):",
            f"    q0 = (n * {self.k} + {first} + kk) * {self.oh}",
            *(f"    {line}" for line in row_loop(space, "q0 + oh0, q0 + oh1")),
            f"        lc = kk * npad + (row - q0 - oh0) * {self.ow}",
        ]
        return EpilogueRows(loops, "        ", space, RowBlock({self.c_array: "lc"}))

    def compute(self) -> list[str]:
        return self._by_pixels() if self.amx else self._by_rows()

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
        rows, w_arg, s_off = str(kg), w, f"{self.k * kq}"  # the block's weight rows
        if self.kb > 1:  # from row g * kg + kc0
            lines.append(f"r0 = g * {kg} + kc0")
            rows, w_arg, s_off = "kn", f"{w}[r0 * {kq}:]", f"{self.k * kq} + r0 - r0 * {kq}"
        elif self.groups > 1:  # from row g * kg
            k_off = f"g * {kg * kq}"
            w_arg, s_off = f"{w}[{k_off}:]", f"{self.k * kq} + g * {kg} - {k_off}"
        return [
            *lines,
            f"gemm_q8_rows({rows}, npad, {kq}, {w_arg}, {s_off}, np.int32({zero}), q8buf, "
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
