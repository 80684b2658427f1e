"""The cuda target's ``copy`` template: a chain of index maps per ``ai.fused "copy"`` group.

The channels-last transpose of a 16-bit 4-D tensor, ``ai.transpose {perm = [0, 2, 3,
1]}`` with the second dimension a multiple of 8 (``conv-layout``'s conversions:
NCHW -> NHWC inputs, KCRS -> KRSC graph-input weights), runs as the conv template's
copy kernel (``conv.transpose.RelayoutSpec``, 16-byte stores); every other chain of transposes,
reshapes, slices, gathers and concats with one result runs as a gather kernel
(``fusec.targets.cuda.gather``); the rest through PyTorch
(``fusec.targets.cuda.torch_fallback``), the reason in its header.
"""

from __future__ import annotations

from fusec.codegen import KernelSource
from fusec.codegen.expr import header
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda import gather
from fusec.targets.cuda.common import body_ops, kernel_name, yielded
from fusec.targets.cuda.conv.layouts import TO_CHANNELS_LAST
from fusec.targets.cuda.conv.transpose import RelayoutSpec
from fusec.targets.cuda.linked import linked_kernel_source


def relayout_plan(fused_op: ai.FusedOp) -> RelayoutSpec | str:
    """The channels-last copy kernel serving ``fused_op``, or why it cannot."""
    ops = body_ops(fused_op)
    if len(ops) != 1 or not isinstance(ops[0], ai.TransposeOp):
        return "not a single transpose"
    op = ops[0]
    if op.input is not fused_op.block.args[0] or yielded(fused_op) != [op.output]:
        return "not a transpose of the group input"
    source = spec_of(op.input.type)
    if op.attr("perm") != TO_CHANNELS_LAST or source.rank != 4:
        return "not a channels-last transpose [0, 2, 3, 1] of a 4-D tensor"
    if source.dtype not in ("f16", "bf16"):
        return f"the channels-last copy kernel moves 16-bit elements, not {source.dtype}"
    a, b, h, w = source.shape
    if b % 8 or 0 in source.shape:
        return "the channels-last copy kernel needs the second dimension a multiple of 8"
    return RelayoutSpec(a, b, h * w)


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The kernel module of a copy group (PyTorch's when the copy kernel cannot serve it)."""
    from fusec.targets.cuda import torch_fallback

    name = kernel_name(name)
    spec = relayout_plan(fused_op)
    if isinstance(spec, str):
        refused = gather.gather_plan(fused_op)
        if refused is None:
            return gather.generate(fused_op, name)
        return torch_fallback.generate(fused_op, name, reason=f"{spec}; {refused}")
    a, b, p = spec.outer, spec.channels, spec.pixels
    tiling = spec.tiling
    notes = [
        f"target: cuda, channels-last transpose [{a}][{b}][{p}] -> [{a}][{p}][{b}] "
        "(the conv layout conversion: NCHW -> NHWC, KCRS -> KRSC);",
        (
            f"one 8-channel group of one pixel per thread ({p} pixels), 2-byte loads, "
            f"16-byte stores; grid {spec.grid}, {spec.threads} threads"
            if spec.few_pixels
            else f"one 8 x 8 block per thread, transposed in registers, 16-byte stores; grid "
            f"{tiling.grid}, {spec.threads} threads; "
            + (
                "16-byte loads when the input is 16-byte aligned, else 2-byte ones"
                if tiling.vectorizable
                else f"2-byte loads ({p} pixels: not a multiple of 8)"
            )
        ),
    ]
    lines = [
        header(fused_op, notes=notes),
        "from fusec.targets.cuda.abi import RelayoutLaunch, RelayoutSpec",
        "",
        f"COPY = RelayoutLaunch(RelayoutSpec({a}, {b}, {p}))",
    ]
    return linked_kernel_source(
        fused_op, name, "copy", lines, var="COPY", launcher="RelayoutLaunch", spec=spec
    )
