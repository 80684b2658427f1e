"""cpu template for "conv" groups: ``ai.conv2d`` and its epilogue in the blocked kernel.

``choice`` states which of nine ways a convolution takes (``conv_method``) and how a
batch of small planes is blocked (``images_per_block``); ``gemm`` holds ``ConvBlocks``,
the blocks of output rows by one or more GEMMs (im2col, direct, taps, Winograd), whose
docstring says how each computes and why every method gives the reference's non-finite
values; ``transforms`` generates Winograd's B^T d B and A^T M A; ``planes`` holds the
methods over whole channel planes (depthwise, blocks of output channels, im2row); ``q8``
a QDQ convolution on the int8 GEMM (issue 31).
``conv_blocks`` picks the class of a group's convolution.
"""

from __future__ import annotations

from fusec.codegen import KernelSource
from fusec.dialect import ops as ai
from fusec.targets.cpu.blocked import CoreArgs, generate_core_group
from fusec.targets.cpu.conv.choice import conv_method, image_rows
from fusec.targets.cpu.conv.gemm import ConvBlocks
from fusec.targets.cpu.conv.planes import (
    ChannelBlocks,
    DepthwiseBlocks,
    ExpandDepthwiseBlocks,
    ImageRowsBlocks,
    PixelRowsBlocks,
)


def generate(fused_op, name: str) -> KernelSource:
    from fusec.targets.cpu import depthwise_nhwc
    from fusec.targets.cpu.expand_depthwise import expansion_of

    if depthwise_nhwc.takes(fused_op):  # relaid channels-last by ``cpu-channels-last``
        return depthwise_nhwc.generate(fused_op, name)
    pair = expansion_of(fused_op)  # joined by ``cpu-expand-depthwise``
    if pair is not None:
        return generate_core_group(
            fused_op, name, "conv", ai.Conv2DOp, ExpandDepthwiseBlocks, core_op=pair[1]
        )
    return generate_core_group(fused_op, name, "conv", ai.Conv2DOp, conv_blocks)


def conv_blocks(args: CoreArgs) -> ConvBlocks:
    """The blocked core of a conv group: ``DepthwiseBlocks``, ``ChannelBlocks``,
    ``PixelRowsBlocks``, ``Q8Blocks`` (a QDQ conv on the int8 GEMM) or ``ConvBlocks``."""
    weights = args.constant_operand(1)
    method = conv_method(args.op, weights is not None)
    if method == "depthwise":
        return DepthwiseBlocks(args, weights)
    if method == "channels":
        return ChannelBlocks(args)
    if method == "q8":
        from fusec.targets.cpu.conv.q8 import Q8Blocks

        return Q8Blocks(args, weights)
    if method == "im2row":
        assert weights is not None  # (``conv_method``: a constant weight's only)
        rows = ImageRowsBlocks if image_rows(args.op) else PixelRowsBlocks
        return rows(args, weights)
    return ConvBlocks(args)


# what generate_core_group asks of a core factory
conv_blocks.block_prologue = False  # type: ignore[attr-defined]
conv_blocks.local_result = ConvBlocks.local_result  # type: ignore[attr-defined]
