"""cpu template for "pool" groups: one parallel njit loop over the windows, then the epilogue.

Each (n, c) plane is one parallel task; a max starts at -inf and keeps a NaN
once it sees one (``v > m or v != v``), an average divides the window's sum
by the number of elements it covers inside the input (or, with
``count_include_pad``, inside the padded input). The elementwise epilogue is
one pointwise stage (``cpu_matmul``'s prologue/core/epilogue split).
"""

from __future__ import annotations

import math

from xdsl.ir import Operation

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu.common import PARALLEL_MIN_ELEMENTS, Buffers, Stage
from fusec.targets.cpu.matmul import generate_core_group


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "pool", ai.Pool2DOp, pool_core)


def pool_core(
    op: Operation, out: str, buffers: Buffers, name: str
) -> tuple[list[Stage], list[str]]:
    assert isinstance(op, ai.Pool2DOp)
    x = buffers.reads[op.operands[0]]
    stage = Stage(
        f"{name}_pool",
        ["x", "y"],
        _body(op),
        comment=f"{op.KIND} pooling: one task per (n, c) plane",
        args=[x, out],
        parallel=math.prod(shape_of(op.output)) * math.prod(op.attr("kernel"))
        >= PARALLEL_MIN_ELEMENTS,
    )
    return [stage], [stage.call()]


def _body(op: ai.Pool2DOp) -> list[str]:
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
        f"for task in numba.prange({n * c}):",
        f"    base = task * {h * w}",
        f"    obase = task * {oh * ow}",
        f"    for i in range({oh}):",
        f"        for j in range({ow}):",
        "            acc = f32(-math.inf)" if is_max else "            acc = f32(0.0)",
        "            count = 0",
        f"            for r in range({kh}):",
        f"                ih = i * {sh} + r * {dh} - {pt}",
        f"                for s in range({kw}):",
        f"                    iw = j * {sw} + s * {dw} - {pl}",
        f"                    if ih >= 0 and ih < {h} and iw >= 0 and iw < {w}:",
        f"                        v = x[base + ih * {w} + iw]",
    ]
    if is_max:
        lines += [
            "                        if v > acc or v != v:",
            "                            acc = v",
            f"            y[obase + i * {ow} + j] = acc",
        ]
    else:
        lines += [
            "                        acc += v",
            f"                    if {counted}:",
            "                        count += 1",
            f"            y[obase + i * {ow} + j] = acc / f32(count)",
        ]
    return lines
