"""cpu template for "conv" groups: per block of output rows, im2col + sgemm + epilogue.

``ai.conv2d`` (NCHW input, KCRS weight, any strides, padding, dilations and
groups) runs in the blocked kernel of ``cpu_matmul``. A block is ``bh`` output
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
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu.matmul import (
    MIN_BLOCKS,
    BlockedCore,
    EpilogueRows,
    Workspace,
    generate_core_group,
    row_loop,
)
from fusec.targets.cpu.row_reduce import RowBlock

#: Target size of a block's im2col columns.
COLS_BYTES = 1 << 20


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "conv", ai.Conv2DOp, ConvBlocks)


class ConvBlocks(BlockedCore):
    """Blocks of ``bh`` output rows of one image and channel group of an ``ai.conv2d``."""

    block_prologue = False

    def __init__(self, op, reads, workspace: Workspace, a_array, c_array, c_local) -> None:
        self.op, self.reads, self.c_array, self.c_local = op, reads, c_array, c_local
        self.n, self.c, self.h, self.w = shape_of(op.operands[0])
        self.k, cg, self.r, self.s = shape_of(op.operands[1])
        _, _, self.oh, self.ow = shape_of(op.results[0])
        self.sh, self.sw = op.attr("strides")
        self.dh, self.dw = op.attr("dilations")
        self.pt, self.pl, _, _ = conv2d_padding(op.attr("padding"))
        self.groups = op.attr("groups")
        self.kg, self.cg, self.crs = self.k // self.groups, cg, cg * self.r * self.s
        pads = conv2d_padding(op.attr("padding"))
        self.direct = self.r == self.s == self.sh == self.sw == 1 and not any(pads)
        per_row = self.ow * (self.kg * c_local + (0 if self.direct else self.crs))
        bh = max(1, min(self.oh, COLS_BYTES // (4 * max(1, per_row))))
        images = self.n * self.groups
        if images < MIN_BLOCKS:  # split further so that every thread has blocks
            bh = min(bh, max(1, math.ceil(self.oh * images / MIN_BLOCKS)))
        self.bh = bh
        self.nrb = math.ceil(self.oh / bh)
        self.count = images * self.nrb
        self.pixels = bh * self.ow
        if not self.direct:
            workspace.add("cols", self.crs * self.pixels)
        if c_local:
            workspace.add(c_array, self.kg * self.pixels)

    def describe(self) -> str:
        how = "sgemm" if self.direct else "im2col, sgemm"
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.cg}x{self.r}x{self.s}"
            f" (groups {self.groups}) in {self.count} blocks of {self.bh} output rows: "
            f"{how}, epilogue per block"
        )

    def decode(self) -> list[str]:
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
        x, w = (self.reads[v] for v in self.op.operands)
        p = self.oh * self.ow
        lines = [] if self.direct else self._im2col(x)
        if self.direct:
            b, b_off, ldb = x, f"(n * {self.c} + g * {self.cg}) * {p} + p0", str(p)
        else:
            b, b_off, ldb = "cols", "0", "pw"
        if self.c_local:
            c_off, ldc = "0", "pw"
        else:
            c_off, ldc = f"(n * {self.k} + g * {self.kg}) * {p} + p0", str(p)
        return lines + [
            "prev = threads_begin(1)",
            f"sgemm(0, 0, {self.kg}, pw, {self.crs}, {w}, g * {self.kg * self.crs}, {self.crs}, "
            f"{b}, {b_off}, {ldb}, {self.c_array}, {c_off}, {ldc})",
            "threads_end(prev)",
        ]

    def _im2col(self, x: str) -> list[str]:
        """``cols[(c*R + r)*S + s, p - p0]`` for the block's pixels, a run per output row.

        For each kernel column ``s`` the output columns whose input column is
        inside the image are ``lo <= ow < hi``: zeros around them, in between a
        slice of the input row (contiguous at stride 1).
        """
        h, w, ow, sw = self.h, self.w, self.ow, self.sw
        stride = f" * {sw}" if sw > 1 else ""
        return [
            f"for c in range({self.cg}):",
            f"    plane = (n * {self.c} + g * {self.cg} + c) * {h * w}",
            f"    for r in range({self.r}):",
            f"        for s in range({self.s}):",
            f"            shift = s * {self.dw} - {self.pl}",  # input column of output column 0
            f"            lo = min({ow}, max(0, (-shift + {sw - 1}) // {sw}))",
            f"            hi = max(lo, min({ow}, ({w - 1} - shift) // {sw} + 1))",
            f"            dst0 = ((c * {self.r} + r) * {self.s} + s) * pw",
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

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """Rows (n, k) of the output merged to OH*OW pixels, the block a segment of each;
        or whole output rows, when one of the epilogue's ``shapes`` tells H from W or it
        reduces along W."""
        p = self.oh * self.ow
        space: tuple[int, ...]
        if not reduces and all(_merges_hw(shape) for shape in shapes):
            space = (self.n, self.k, p)
            loops = [
                f"q0 = n * {self.k} + g * {self.kg}",
                *row_loop(space, f"q0, q0 + {self.kg}"),
            ]
            local = {}
            if self.c_local:
                loops.append("    lc = (row - q0) * pw")
                local[self.c_array] = "lc"
            block = RowBlock(local, ("p0", "pw"), _merge_last_two)
            return EpilogueRows(loops, "    ", space, block)
        space = (self.n, self.k, self.oh, self.ow)
        loops = [
            f"for kk in range({self.kg}):",
            f"    q0 = (n * {self.k} + g * {self.kg} + kk) * {self.oh}",
            *(f"    {line}" for line in row_loop(space, "q0 + oh0, q0 + oh1")),
        ]
        local = {}
        if self.c_local:
            loops.append(f"        lc = kk * pw + (row - q0 - oh0) * {self.ow}")
            local[self.c_array] = "lc"
        return EpilogueRows(loops, "        ", space, RowBlock(local))


def _merges_hw(shape: Sequence[int]) -> bool:
    """Whether a shape (broadcast to NCHW) is full or broadcast along both H and W."""
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return (padded[2] == 1) == (padded[3] == 1)


def _merge_last_two(shape: tuple[int, ...]) -> tuple[int, ...]:
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return padded[:2] + (padded[2] * padded[3],)
