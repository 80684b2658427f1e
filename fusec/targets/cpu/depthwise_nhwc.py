"""A depthwise conv group that reads and writes channels-last (issue 30).

``cpu-channels-last`` (``fusec.targets.cpu.channels_last``) relays a depthwise conv group
to NHWC: its body is ``ai.transpose`` (the NHWC input viewed NCHW), ``ai.conv2d``, at
most an ``ai.bias_add``, and ``ai.transpose`` to NHWC before the ``ai.yield``; its
``fusec.layout`` says ``{input = "nhwc", output = "nhwc"}``. The conv template
(``fusec.targets.cpu.conv``) hands such a group here.

The lanes form of ``fusec.targets.cpu.depthwise`` already computes with the channels in
the vector lanes; it transposes each block in and out of that layout. Channels-last data
needs neither transpose: a block is ``LANES_CHANNELS`` channels of ``bh`` output rows of
one image; its padded input rows (``xpad``: the rows and columns the taps reach,
``LANES_CHANNELS`` floats a pixel) are copied from the input's pixels, contiguous runs of
channels; the tap sums run in ``depthwise_tiles.taps_row``'s register tiles into ``ot``;
the bias is added as each pixel's channels are stored to the output's pixel. A constant
weight is packed once per program (layout ``depthwise_lanes:32``, ``depthwise.pack_lanes``).
"""

from __future__ import annotations

import math

from xdsl.ir import SSAValue

from fusec.codegen import KernelSource, ScratchPlan, io_specs
from fusec.codegen.expr import ExprGenerator, error_at, shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu import abi, depthwise
from fusec.targets.cpu.blocked import MIN_BLOCKS, constant_inputs
from fusec.targets.cpu.common import PARALLEL_MIN_ELEMENTS, Stage, assemble, body_ops
from fusec.targets.cpu.entry import EntryScratch, blocked_launch

#: Output pixels of a block, at most (whole rows; at least one row): at 32x32, 16 rows of
#: 32 pixels x 32 channels, the padded input 22 x 38 x 32 floats (104 KiB) in L2 (256
#: pixels, 8 rows: the halo rows copied 14 / 8 times, not 22 / 16; 96x32x32 7x7 and
#: 192x16x16 7x7 measured 2-15% slower on one thread, under load).
BLOCK_PIXELS = 512
#: Channels of a block: the tiles' width (``depthwise_tiles.CHANNELS``).
CB = depthwise.LANES_CHANNELS
#: The ``fusec.layout`` this module runs.
LAYOUT = {"input": "nhwc", "output": "nhwc"}


def takes(fused_op: ai.FusedOp) -> bool:
    """Whether ``fused_op`` is a conv group relaid channels-last (its ``fusec.layout``)."""
    from xdsl.dialects.builtin import DictionaryAttr, StringAttr

    attr = fused_op.attributes.get("fusec.layout")
    if not isinstance(attr, DictionaryAttr):
        return False
    entries = {k: v.data for k, v in attr.data.items() if isinstance(v, StringAttr)}
    return entries == LAYOUT


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    ops = body_ops(fused_op)
    shape_ok = len(ops) in (3, 4) and isinstance(ops[0], ai.TransposeOp)
    shape_ok = shape_ok and isinstance(ops[1], ai.Conv2DOp) and isinstance(ops[-1], ai.TransposeOp)
    if not shape_ok or (len(ops) == 4 and not isinstance(ops[2], ai.BiasAddOp)):
        raise error_at(
            fused_op,
            'a channels-last "conv" group must be ai.transpose, a depthwise ai.conv2d, at '
            "most an ai.bias_add and ai.transpose (the cpu-channels-last pass's form)",
        )
    view, conv, store = ops[0], ops[1], ops[-1]
    assert isinstance(view, ai.TransposeOp) and isinstance(store, ai.TransposeOp)
    assert isinstance(conv, ai.Conv2DOp)
    args: list[SSAValue] = list(fused_op.block.args)
    if view.operands[0] is not args[0] or conv.operands[0] is not view.results[0]:
        raise error_at(conv, "the channels-last conv must read the group's first input")
    if conv.operands[1] not in args:
        raise error_at(conv, "the channels-last conv's weight must be a group input")
    if tuple(view.attr("perm")) != (0, 3, 1, 2) or tuple(store.attr("perm")) != (0, 2, 3, 1):
        raise error_at(store, "the channels-last conv group's transposes must be NHWC views")
    if any(spec.dtype != "f32" for spec in (*io_specs(fused_op)[0], *io_specs(fused_op)[1])):
        raise error_at(fused_op, "the channels-last conv runs float32 only")
    n, c, h, wd = shape_of(conv.operands[0])
    k, cg, r, s = shape_of(conv.operands[1])
    if cg != 1 or k != c or conv.attr("groups") != c:
        raise error_at(conv, "the channels-last conv must be depthwise")
    bias = None
    if len(ops) == 4:
        bias_op = ops[2]
        assert isinstance(bias_op, ai.BiasAddOp)
        if bias_op.operands[0] is not conv.results[0] or bias_op.operands[1] not in args:
            raise error_at(bias_op, "the channels-last conv's bias must be a group input")
        if bias_op.attr("axis") != 1:
            raise error_at(bias_op, "the channels-last conv's bias must be per channel")
        bias = f"in{args.index(bias_op.operands[1])}"
    _, _, oh, ow = shape_of(conv.results[0])
    sh, sw = conv.attr("strides")
    dh, dw = conv.attr("dilations")
    pt, pl, _, _ = conv2d_padding(conv.attr("padding"))
    w_index = args.index(conv.operands[1])
    packed = w_index in constant_inputs(fused_op).values()
    plan = _Plan(n, c, h, wd, oh, ow, r, s, sh, sw, dh, dw, pt, pl)
    return _source(fused_op, name, plan, f"in{w_index}", w_index if packed else None, bias)


class _Plan:
    """The blocks: ``bh`` output rows of ``CB`` channels of one image."""

    def __init__(self, n, c, h, wd, oh, ow, r, s, sh, sw, dh, dw, pt, pl) -> None:
        self.n, self.c, self.h, self.wd, self.oh, self.ow = n, c, h, wd, oh, ow
        self.r, self.s, self.sh, self.sw, self.dh, self.dw = r, s, sh, sw, dh, dw
        self.pt, self.pl = pt, pl
        self.ncb = -(-c // CB)
        bh = max(1, min(oh, BLOCK_PIXELS // ow))
        if n * self.ncb * -(-oh // bh) < MIN_BLOCKS:  # every thread a block, when it can
            bh = max(1, min(bh, math.ceil(oh * n * self.ncb / MIN_BLOCKS)))
        self.bh = bh
        self.nrb = -(-oh // bh)
        self.count = n * self.ncb * self.nrb
        self.hp = (bh - 1) * sh + (r - 1) * dh + 1  # padded input rows of a block
        self.wp = (ow - 1) * sw + (s - 1) * dw + 1  # ... and columns
        self.cols = max(0, min(wd, self.wp - pl))  # input columns inside the padded row
        self.taps = r * s


def _lanes_copy(statement: str, indent: str, whole: bool) -> list[str]:
    """A pixel's ``cn`` channels by ``statement`` (of ``c``): a loop of ``CB`` when every
    block is whole, else that loop or one of ``cn``."""
    if whole:
        return [f"{indent}for c in range({CB}):", f"{indent}    {statement}"]
    return [
        f"{indent}if cn == {CB}:",
        f"{indent}    for c in range({CB}):",
        f"{indent}        {statement}",
        f"{indent}else:",
        f"{indent}    for c in range(cn):",
        f"{indent}        {statement}",
    ]


def _source(
    fused_op: ai.FusedOp, name: str, p: _Plan, w: str, packed: int | None, bias: str | None
) -> KernelSource:
    taps, hp, wp = p.taps, p.hp, p.wp
    buffers = [("xpad", hp * wp * CB), ("ot", p.bh * p.ow * CB)]
    if packed is None:
        buffers.append(("wt", taps * CB))
    size = sum(floats for _, floats in buffers)
    views, offset = [], 0
    for buf, floats in buffers:
        views.append(f"{buf} = ws[t * {size} + {offset}:t * {size} + {offset + floats}]")
        offset += floats
    add = f" + {bias}[U(g + c)]" if bias else ""
    whole = p.c % CB == 0  # every block has all its lanes: no branch on cn
    if packed is not None:
        weights = [f"wt = {w}[cb * {taps * CB}:]"]  # packed once (pack_lanes)
    else:
        weights = [
            "for i in range(CBLK):",
            "    wt[U(i)] = f32(0.0)",
            "for c in range(cn):",
            f"    for tap in range({taps}):",
            f"        wt[U(tap * {CB} + c)] = {w}[U((g + c) * {taps} + tap)]",
        ]
    body = [
        f"n = blk // {p.ncb * p.nrb}",
        f"cb = blk // {p.nrb} % {p.ncb}",
        f"oh0 = blk % {p.nrb} * {p.bh}",
        f"rows = min({p.bh}, {p.oh} - oh0)",
        f"g = cb * {CB}",
        f"cn = min({CB}, {p.c} - g)",
        *(
            []
            if whole
            else [  # lanes past the block's channels: zeros, not stale values
                f"if cn < {CB}:",
                f"    for i in range({hp * wp * CB}):",
                "        xpad[U(i)] = f32(0.0)",
            ]
        ),
        f"ih0 = oh0 * {p.sh} - {p.pt}",
        f"for i in range({hp}):",
        "    ih = ih0 + i",
        f"    if ih < 0 or ih >= {p.h}:  # a padding row",
        f"        for e in range(i * {wp * CB}, (i + 1) * {wp * CB}):",
        "            xpad[U(e)] = f32(0.0)",
        "        continue",
        f"    for e in range(i * {wp * CB}, (i * {wp} + {p.pl}) * {CB}):",
        "        xpad[U(e)] = f32(0.0)",
        f"    for e in range((i * {wp} + {p.pl + p.cols}) * {CB}, (i + 1) * {wp * CB}):",
        "        xpad[U(e)] = f32(0.0)",
        f"    for j in range({p.cols}):",
        f"        d = (i * {wp} + j + {p.pl}) * {CB}",
        f"        src = ((n * {p.h} + ih) * {p.wd} + j) * {p.c} + g",
        *_lanes_copy("xpad[U(d + c)] = in0[U(src + c)]", "        ", whole),
        *[line.replace("CBLK", str(taps * CB)) for line in weights],
        f"depthwise_taps_rows(xpad, 0, {p.sw * CB}, {p.s}, {p.dh * wp * CB}, {p.dw * CB},"
        f" {taps}, wt, ot, 0, {p.ow}, rows, {p.sh * wp * CB}, {p.ow * CB})",
        f"for q in range(rows * {p.ow}):",
        f"    o = ((n * {p.oh} + oh0) * {p.ow} + q) * {p.c} + g",
        *_lanes_copy(f"out0[U(o + c)] = ot[U(q * {CB} + c)]{add}", "    ", whole),
    ]
    kernel_body = [
        f"for t in numba.prange(ws.size // {size}):",
        *(f"    {line}" for line in views),
        "    blk = next_block(counter)",
        f"    while blk < {p.count}:",
        *(f"        {line}" for line in body),
        "        blk = next_block(counter)",
    ]
    n_in = len(fused_op.inputs)
    params = [f"in{i}" for i in range(n_in)] + ["out0", "ws", "counter"]
    elements = p.n * p.oh * p.ow * p.c
    comment = (
        f"conv2d {p.n}x{p.h}x{p.wd}x{p.c} (NHWC) * {p.c}x1x{p.r}x{p.s} (depthwise) in "
        f"{p.count} blocks of {CB} channels x {p.bh} output rows, channels-last: padded "
        f"rows copied, tap sums in register tiles{', the bias' if bias else ''} as stored"
    )
    stage = Stage(
        f"{name}_blocked",
        params,
        kernel_body,
        comment=comment,
        parallel=p.count > 1 and elements >= PARALLEL_MIN_ELEMENTS,
    )
    launch = [
        f"tasks = min(num_threads(), {p.count})" if stage.parallel else "tasks = 1",
        f"ws = workspace(tasks * {size})",
        "counter = np.zeros(1, dtype=np.int64)",
        stage.call(),
    ]
    scratch = EntryScratch()
    run, compiled = blocked_launch(scratch, p.count, stage.parallel, size, stage.call())
    source = assemble(
        fused_op,
        ExprGenerator(),
        [stage],
        launch,
        notes=[f"blocked: {p.count} blocks, {size * 4} bytes of workspace per task"],
        imports=[
            abi.import_line(
                "num_threads",
                "workspace",
                "next_block",
                "depthwise_taps_rows_call as depthwise_taps_rows",
            ),
        ],
        entry_body=run,
    )
    inputs, outputs = io_specs(fused_op)
    return KernelSource(
        name,
        "conv",
        "cpu",
        source,
        inputs,
        outputs,
        scratch=ScratchPlan(
            full_bytes=0, per_task_bytes=4 * size, max_tasks=p.count, operand_bytes=0
        ),
        prepared_inputs=() if packed is None else ((packed, f"depthwise_lanes:{CB}"),),
        compiled_entry=compiled,
    )
