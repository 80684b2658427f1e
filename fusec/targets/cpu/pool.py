"""cpu template for "pool" groups: the blocked kernel (``blocked``), one block per plane.

Each (n, c) plane is one block: its windows are reduced into the task's
workspace (or straight into the output when nothing follows), then the
elementwise epilogue runs over the plane while it is in cache. A max keeps a
NaN once it sees one (``(v > m) | (v != v)``); an average divides the
window's sum (in float64: values near float32's largest do not overflow it) by
the number of elements it covers inside the input (or, with
``count_include_pad``, inside the padded input).

A max pool is separable and runs on contiguous rows, so that LLVM vectorises
it: per output row, the max of the window's input rows inside the image (a
branch per row, not per element) goes into a row buffer of the task's
workspace whose padding columns hold -inf, then each output pixel is the max
of its window's columns of that buffer (unrolled, no bounds checks). The
scalar loop with a bounds check per tap it replaces took 31 us for ResNet-18's
3x3/2 pool at 1x16x32x32 against onnxruntime's 4 (cpu-notes.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu.blocked import (
    BlockedCore,
    CoreArgs,
    EpilogueRows,
    generate_core_group,
    merge_last_two,
    merges_hw,
    row_loop,
)
from fusec.targets.cpu.rows import RowBlock

#: The workspace buffer of a max pool's row maxima (a band of padded rows).
ROW = "prow"
#: Floats of that buffer: a band of output rows that stays in L1 (one row at least).
BAND_FLOATS = 4096
#: Windows at most this high (wide) have their rows (columns) unrolled.
UNROLL = 16


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "pool", ai.Pool2DOp, PoolBlocks)


class PoolBlocks(BlockedCore):
    """One block per (n, c) plane of an ``ai.pool2d``."""

    block_prologue = False

    op: ai.Pool2DOp

    def __init__(self, args: CoreArgs) -> None:
        op, workspace, c_array, c_local = args.op, args.workspace, args.c_array, args.c_local
        assert isinstance(op, ai.Pool2DOp)
        super().__init__(args)
        self.n, self.c, _, _ = shape_of(op.input)
        _, _, self.oh, self.ow = shape_of(op.output)
        self.count = self.n * self.c
        if c_local:
            workspace.add(c_array, self.oh * self.ow)
        if op.KIND == "max":  # the row buffer of the separable max
            workspace.add(ROW, _band_rows(op) * _padded_width(op))

    def describe(self) -> str:
        return f"{self.op.KIND} pooling: one block per (n, c) plane, epilogue per block"

    def decode(self) -> list[str]:
        return ["plane = blk"]

    def compute(self) -> list[str]:
        x = self.reads[self.op.operands[0]]
        obase = "0" if self.c_local else f"plane * {self.oh * self.ow}"
        if self.op.KIND == "max":
            return _max_body(self.op, x, self.c_array, obase)
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
        # an average's window sum in float64: a window of values near float32's
        # largest overflows a float32 sum where the mean is finite (issue #26)
        "        acc = f32(-math.inf)" if is_max else "        acc = 0.0",
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
            f"        {y}[obase + i * {ow} + j] = f32(acc / count)",
        ]
    return lines


def _padded_width(op: ai.Pool2DOp) -> int:
    """Columns of a row of ``ROW``: the left padding, the input row, then -inf up to
    the last window's reach (the right padding, more with ``ceil_mode``)."""
    _, _, _, w = shape_of(op.input)
    _, _, _, ow = shape_of(op.output)
    (_, kw), (_, sw), (_, dw) = op.attr("kernel"), op.attr("strides"), op.attr("dilations")
    _, pl, _, _ = conv2d_padding(op.attr("padding"))
    return max(pl + w, (ow - 1) * sw + (kw - 1) * dw + 1)


def _band_rows(op: ai.Pool2DOp) -> int:
    """Output rows of a band: as many as ``BAND_FLOATS`` holds, at most the plane's."""
    _, _, oh, _ = shape_of(op.output)
    return max(1, min(oh, BAND_FLOATS // _padded_width(op)))


def _nan_max(m: str, v: str) -> str:
    """``v`` where it is larger than ``m`` or NaN, else ``m``: a select, no branch."""
    return f"{v} if ({v} > {m}) | ({v} != {v}) else {m}"


def _max_body(op: ai.Pool2DOp, x: str, y: str, obase: str) -> list[str]:
    """The plane ``plane`` of ``x`` max-pooled into ``y`` from offset ``obase``, a band
    of output rows at a time: the max of each output row's window rows into a row of
    ``ROW``, then each output pixel as the max of its window's columns there.

    The whole band's rows are written before any is read back: read right after
    they are stored (row by row), the vector stores stall the scalar loads that
    follow. Indices are unsigned (``U``): a signed one gets Numba's negative-index
    wraparound, which keeps LLVM from vectorising (``plane`` comes from the block
    counter, of unknown sign). The kernel of the 1x16x32x32 pool, called alone:
    9.9 us a call row by row with signed indices, 5.5 by bands, 3.5-3.9 unsigned.
    """
    _, _, h, w = shape_of(op.input)
    _, _, oh, ow = shape_of(op.output)
    band, wp = _band_rows(op), _padded_width(op)
    pl = conv2d_padding(op.attr("padding"))[1]
    return [
        f"base = plane * {h * w}",
        f"obase = {obase}",
        f"for i0 in range(0, {oh}, {band}):",
        f"    i1 = min(i0 + {band}, {oh})",
        "    for i in range(i0, i1):",
        f"        d = (i - i0) * {wp}",
        f"        for q in range({pl}):",
        f"            {ROW}[U(d + q)] = f32(-math.inf)",
        f"        for q in range({pl + w}, {wp}):",
        f"            {ROW}[U(d + q)] = f32(-math.inf)",
        *(f"        {line}" for line in _window_rows(op, x, f"d + {pl}")),
        "    for i in range(i0, i1):",
        f"        d = (i - i0) * {wp}",
        f"        for j in range({ow}):",
        *(f"            {line}" for line in _window_columns(op)),
        f"            {y}[U(obase + i * {ow} + j)] = m",
    ]


def _window_rows(op: ai.Pool2DOp, x: str, dst: str) -> list[str]:
    """``ROW[dst + q]``: the max over the window's rows of output row ``i`` that lie
    inside the input (``lo`` to ``hi``); a row outside it reads a row inside (the max
    is the same), so the loop over ``q`` has no branch. -inf when none is inside."""
    _, _, h, w = shape_of(op.input)
    kh, sh, dh = op.attr("kernel")[0], op.attr("strides")[0], op.attr("dilations")[0]
    pt = conv2d_padding(op.attr("padding"))[0]
    lines = [
        f"lo = max(0, -((i * {sh} - {pt}) // {dh}))",
        f"hi = min({kh}, ({h - 1 + pt} - i * {sh}) // {dh} + 1)",
        "if lo >= hi:",
        f"    for q in range({w}):",
        f"        {ROW}[U({dst} + q)] = f32(-math.inf)",
        "else:",
    ]
    if kh > UNROLL:
        return lines + [
            f"    for q in range({w}):",
            f"        m = {x}[U(base + (i * {sh} + lo * {dh} - {pt}) * {w} + q)]",
            "        for r in range(lo + 1, hi):",
            f"            v = {x}[U(base + (i * {sh} + r * {dh} - {pt}) * {w} + q)]",
            f"            m = {_nan_max('m', 'v')}",
            f"        {ROW}[U({dst} + q)] = m",
        ]
    lines += [
        f"    s{r} = base + (i * {sh} + min(max({r}, lo), hi - 1) * {dh} - {pt}) * {w}"
        for r in range(kh)
    ]
    lines += [f"    for q in range({w}):", f"        m = {x}[U(s0 + q)]"]
    for r in range(1, kh):
        lines += [f"        v = {x}[U(s{r} + q)]", f"        m = {_nan_max('m', 'v')}"]
    return lines + [f"        {ROW}[U({dst} + q)] = m"]


def _window_columns(op: ai.Pool2DOp) -> list[str]:
    """``m``: the max over the window's columns of output pixel ``j`` in the band's row
    at ``d`` (its padding columns are -inf)."""
    kw, sw, dw = op.attr("kernel")[1], op.attr("strides")[1], op.attr("dilations")[1]
    lines = [f"c = d + j * {sw}", f"m = {ROW}[U(c)]"]
    if kw > UNROLL:
        return lines + [
            f"for s in range(1, {kw}):",
            f"    v = {ROW}[U(c + s * {dw})]",
            f"    m = {_nan_max('m', 'v')}",
        ]
    for s in range(1, kw):
        lines += [f"v = {ROW}[U(c + {s * dw})]", f"m = {_nan_max('m', 'v')}"]
    return lines
