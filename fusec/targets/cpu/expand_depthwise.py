"""``cpu-expand-depthwise``: a 1x1 expansion and the depthwise conv that reads it, one kernel.

MobileNet and EfficientNet blocks expand their channels by a 1x1 conv (+ bias and an
activation) and feed the expanded tensor to a depthwise conv alone. As two kernels the
expansion writes the whole tensor and the depthwise conv reads it back: MobileNetV3-L at
batch 8, 16 -> 64 channels on 64x64 planes, is 8 MB each way, and the two kernels took
1.68 + 0.75 ms in the model on one Zen 4 core where onnxruntime's NCHWc convs took 0.69 +
0.32 (``fusec profile``, per-node profile; benchmarks/results/cpu-notes.md). Fused, a
block of the depthwise conv's channel planes computes just those planes of the expansion
first (``gemm_nn`` of the 1x1 weight's rows for the block's channels, then the expansion's
elementwise ops in place), into a workspace that stays in cache, and the depthwise conv
reads its planes there (``conv.planes.ExpandDepthwiseBlocks``): the expanded tensor is
never stored.

This pass, run after fusion in the cpu pipeline (``fusec-cpu``), joins two ``"conv"``
groups into one when (``expansion_of`` checks the joined group the same way):

* the first is one ``ai.conv2d`` of float32 NCHW tensors with a 1x1 kernel, stride 1, no
  padding or dilation, one group, whose input is not a ``dequantize``'s result (a QDQ
  conv runs on the int8 GEMM, ``conv.choice.q8_zero``), then elementwise ops of its
  result's shape whose other operands are not of that shape (a channel bias, activations,
  a folded BatchNorm); it has one result, the last op's;
* that result is read by the second group alone, as the input of its one depthwise
  ``ai.conv2d`` (one input and one output channel a group, NCHW: not relaid by
  ``cpu-channels-last``), which the cpu computes over whole planes along output rows
  (``depthwise.takes_lanes`` false: planes of at least 16 pixels a row), and the
  expanded planes are at least ``MIN_PLANE`` pixels.

The expansion's weight rows are read in place (row-major ``K x C``), so any weight
works, constant or not. Everything stays ordinary ``ai`` IR: the joined group is one
``ai.fused "conv"`` holding both convolutions, and the reference executor runs it as it
is.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.passes.channels_last import LAYOUT_ATTR
from fusec.passes.fusion.outline import merge_groups

#: The least expanded plane (H * W pixels) joined. 16x16 planes gained too (one thread,
#: alternated, ort / fusec, joining from 32x32 / from 16x16 planes: EfficientNet-B0 b8
#: 1.026 / 1.056 and 1.025 / 1.036, MobileNetV3-L b8 1.010 / 1.040 and 1.003 / 1.016,
#: EfficientNet-B0 b1 1.025 / 1.033 and 1.019 / 1.008); smaller planes take the
#: depthwise conv's lanes form, which this join does not serve.
MIN_PLANE = 16 * 16


@dataclass(frozen=True)
class ExpandDepthwisePass(ModulePass):
    """Join each 1x1 expansion group with the depthwise conv group that alone reads it."""

    name = "cpu-expand-depthwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for function in op.walk():
            if isinstance(function, func.FuncOp) and function.body.blocks:
                join_expansions(function.body.block)


def join_expansions(block: Block) -> int:
    """Join the expansion / depthwise pairs of ``block`` (a function body); their number."""
    pairs = []
    for group in [op for op in block.ops if isinstance(op, ai.FusedOp)]:
        reader = _sole_reader(group)
        if reader is not None and _expansion(group) and _depthwise_of(reader, group.results[0]):
            pairs.append((group, reader))
    for first, second in pairs:
        joined = merge_groups(block, first, second)
        assert expansion_of(joined) is not None  # the conv template's rule, as checked here
    return len(pairs)


def expansion_of(group: ai.FusedOp) -> tuple[ai.Conv2DOp, ai.Conv2DOp] | None:
    """The (1x1 expansion, depthwise) convolutions of a group this pass joined, else None:
    two ``ai.conv2d``, the depthwise one's input computed from the expansion by the ops
    between them, which are the expansion's elementwise ops."""
    if group.kind_name != "conv" or LAYOUT_ATTR in group.attributes:
        return None
    ops = _body(group)
    convs = [op for op in ops if isinstance(op, ai.Conv2DOp)]
    if len(convs) != 2 or ops[0] is not convs[0]:
        return None
    expand, depthwise = convs
    chain = ops[: ops.index(depthwise)]
    if not _expansion_chain(chain, set(group.block.args)):
        return None
    if depthwise.operands[0] is not chain[-1].results[0]:
        return None
    if not _planar_depthwise(depthwise):
        return None
    inside = set(chain) | {depthwise}
    for op in chain:  # the chain's values are read by the chain and the depthwise conv alone
        if any(u.operation not in inside for r in op.results for u in r.uses):
            return None
    return expand, depthwise


# ------------------------------------------------------------------ the two groups


def _body(group: ai.FusedOp) -> list[Operation]:
    return [op for op in group.block.ops if not isinstance(op, ai.YieldOp)]


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(spec_of(value.type).shape)


def _sole_reader(group: ai.FusedOp) -> ai.FusedOp | None:
    """The one group that reads ``group``'s one result, once."""
    if len(group.results) != 1:
        return None
    uses = list(group.results[0].uses)
    if len(uses) != 1 or not isinstance(uses[0].operation, ai.FusedOp):
        return None
    return uses[0].operation


def _expansion(group: ai.FusedOp) -> bool:
    """A conv group of a 1x1 expansion and its elementwise ops, yielding the last op's
    result alone."""
    if group.kind_name != "conv" or LAYOUT_ATTR in group.attributes:
        return False
    ops = _body(group)
    term = group.block.last_op
    if not (ops and isinstance(term, ai.YieldOp) and len(term.operands) == 1):
        return False
    return term.operands[0] is ops[-1].results[0] and _expansion_chain(ops, set(group.block.args))


def _expansion_chain(ops: list[Operation], inputs: set[SSAValue]) -> bool:
    """``ops``: a 1x1, stride-1, unpadded, ungrouped float32 conv of a group input, then
    elementwise ops of its result's shape, each reading the value before it, whose other
    operands are group inputs of other shapes (broadcast: biases, scales)."""
    from fusec.codegen.expr import ELEMENTWISE_OPS

    conv = ops[0] if ops else None
    if not isinstance(conv, ai.Conv2DOp) or not _pointwise_conv(conv):
        return False
    if not all(v in inputs for v in conv.operands):
        return False
    shape, value = _shape(conv.results[0]), conv.results[0]
    for op in ops[1:]:
        if not isinstance(op, ELEMENTWISE_OPS) or len(op.results) != 1:
            return False
        if _shape(op.results[0]) != shape or value not in op.operands:
            return False
        others = [v for v in op.operands if v is not value]
        if any(v not in inputs or _shape(v) == shape for v in others):
            return False
        value = op.results[0]
    return True


def _pointwise_conv(conv: ai.Conv2DOp) -> bool:
    """A float32 1x1 conv, stride 1, unpadded, one group, not a QDQ conv (whose codes the
    int8 GEMM takes, bit for bit as onnxruntime: ``choice.q8_zero``)."""
    from fusec.targets.cpu.common import producer

    x, w = conv.operands
    if len(_shape(x)) != 4 or spec_of(x.type).dtype != "f32":
        return False
    if isinstance(producer(x), ai.DequantizeOp):
        return False
    k, c, r, s = _shape(w)
    return (
        (r, s) == (1, 1)
        and conv.attr("groups") == 1
        and tuple(conv.attr("strides")) == (1, 1)
        and tuple(conv.attr("dilations")) == (1, 1)
        and not any(conv.attr("padding"))
    )


def _depthwise_of(group: ai.FusedOp, value: SSAValue) -> bool:
    """``group`` is a conv group whose first op is its one conv, a planar depthwise conv
    reading ``value`` (an input of the group), which nothing else of the group reads (the
    joined group's ops are then the expansion's and this group's, in that order)."""
    if group.kind_name != "conv" or LAYOUT_ATTR in group.attributes:
        return False
    arg = group.block.args[list(group.inputs).index(value)]
    ops = _body(group)
    convs = [op for op in ops if isinstance(op, ai.Conv2DOp)]
    if len(convs) != 1 or ops[0] is not convs[0] or convs[0].operands[0] is not arg:
        return False
    return [u.operation for u in arg.uses] == [convs[0]] and _planar_depthwise(convs[0])


def _planar_depthwise(conv: ai.Conv2DOp) -> bool:
    """A float32 depthwise conv the cpu runs over whole planes along output rows, of
    planes of at least ``MIN_PLANE`` input pixels."""
    from fusec.targets.cpu import depthwise

    x, w = conv.operands
    n, c, h, wd = _shape(x)
    k, cg, r, s = _shape(w)
    _, _, _, ow = _shape(conv.results[0])
    if cg != 1 or k != c or conv.attr("groups") != c or spec_of(x.type).dtype != "f32":
        return False
    return h * wd >= MIN_PLANE and not depthwise.takes_lanes(ow, r * s)
