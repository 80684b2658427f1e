"""cpu template for "pool" groups: the blocked kernel (``blocked``), one block per plane.

Each (n, c) plane is one block: its windows are reduced into the task's
workspace (or straight into the output when nothing follows), then the
elementwise epilogue runs over the plane while it is in cache. A max starts
at -inf and keeps a NaN once it sees one (``v > m or v != v``), an average
divides the window's sum by the number of elements it covers inside the input
(or, with ``count_include_pad``, inside the padded input).
"""

from __future__ import annotations

from collections.abc import Sequence

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu.blocked import (
    BlockedCore,
    EpilogueRows,
    Workspace,
    generate_core_group,
    merge_last_two,
    merges_hw,
    row_loop,
)
from fusec.targets.cpu.rows import RowBlock


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "pool", ai.Pool2DOp, PoolBlocks)


class PoolBlocks(BlockedCore):
    """One block per (n, c) plane of an ``ai.pool2d``."""

    block_prologue = False

    op: ai.Pool2DOp

    def __init__(self, op, reads, workspace: Workspace, a_array, c_array, c_local) -> None:
        assert isinstance(op, ai.Pool2DOp)
        self.op, self.reads, self.c_array, self.c_local = op, reads, c_array, c_local
        self.n, self.c, _, _ = shape_of(op.input)
        _, _, self.oh, self.ow = shape_of(op.output)
        self.count = self.n * self.c
        if c_local:
            workspace.add(c_array, self.oh * self.ow)

    def describe(self) -> str:
        return f"{self.op.KIND} pooling: one block per (n, c) plane, epilogue per block"

    def decode(self) -> list[str]:
        return ["plane = blk"]

    def compute(self) -> list[str]:
        x = self.reads[self.op.operands[0]]
        obase = "0" if self.c_local else f"plane * {self.oh * self.ow}"
        return _body(self.op, x, self.c_array, obase)

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """The plane as one row of OH*OW pixels, or OH rows when an operand (or a
        reduction along W) tells H from W."""
        local = {}
        space: tuple[int, ...]
        if not reduces and all(merges_hw(shape) for shape in shapes):
            space = (self.n, self.c, self.oh * self.ow)
            loops = row_loop(space, "plane, plane + 1")
            if self.c_local:
                loops.append("    lc = 0")
                local[self.c_array] = "lc"
            return EpilogueRows(loops, "    ", space, RowBlock(local, None, merge_last_two))
        space = (self.n, self.c, self.oh, self.ow)
        loops = row_loop(space, f"plane * {self.oh}, plane * {self.oh} + {self.oh}")
        if self.c_local:
            loops.append(f"    lc = (row - plane * {self.oh}) * {self.ow}")
            local[self.c_array] = "lc"
        return EpilogueRows(loops, "    ", space, RowBlock(local))


def _body(op: ai.Pool2DOp, x: str, y: str, obase: str) -> list[str]:
    """The plane ``plane`` of ``x`` pooled into ``y`` from offset ``obase``."""
    n, c, h, w = shape_of(op.input)
    _, _, oh, ow = shape_of(op.output)
    kh, kw = op.attr("kernel")
    sh, sw = op.attr("strides")
    dh, dw = op.attr("dilations")
    pt, pl, pb, pr = conv2d_padding(op.attr("padding"))
    is_max = op.KIND == "max"
    include_pad = bool(op.attr("count_include_pad")) if not is_max else False
    # the region an average counts: the input, or the input and its padding
    lo_h, hi_h = (-pt, h + pb) if include_pad else (0, h)
    lo_w, hi_w = (-pl, w + pr) if include_pad else (0, w)
    counted = f"ih >= {lo_h} and ih < {hi_h} and iw >= {lo_w} and iw < {hi_w}"
    lines = [
        f"base = plane * {h * w}",
        f"obase = {obase}",
        f"for i in range({oh}):",
        f"    for j in range({ow}):",
        "        acc = f32(-math.inf)" if is_max else "        acc = f32(0.0)",
        "        count = 0",
        f"        for r in range({kh}):",
        f"            ih = i * {sh} + r * {dh} - {pt}",
        f"            for s in range({kw}):",
        f"                iw = j * {sw} + s * {dw} - {pl}",
        f"                if ih >= 0 and ih < {h} and iw >= 0 and iw < {w}:",
        f"                    v = {x}[base + ih * {w} + iw]",
    ]
    if is_max:
        lines += [
            "                    if v > acc or v != v:",
            "                        acc = v",
            f"        {y}[obase + i * {ow} + j] = acc",
        ]
    else:
        lines += [
            "                    acc += v",
            f"                if {counted}:",
            "                    count += 1",
            f"        {y}[obase + i * {ow} + j] = acc / f32(count)",
        ]
    return lines
