"""The ``cpu`` target: its templates per fused kind, and how it runs them."""

from __future__ import annotations

from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from fusec.dialect import ops as ai
from fusec.target import Target, Template, rotations_read_inputs

_ROW = (ai.LayerNormOp, ai.SoftmaxOp)
_ROWS = (*_ROW, ai.RMSNormOp)  # the row kernel's; the matmul's prologue/epilogue: _ROW
#: Layout ops: a "copy" kernel of their own, or views a matmul reads its operands through.
_LAYOUT = (ai.ReshapeOp, ai.TransposeOp, ai.SliceOp, ai.ConcatOp, ai.GatherOp)
#: Data ops a copy group computes with numpy: run-time lookups, running sums, arg-reductions.
_DATA = (ai.TakeOp, ai.CumSumOp, ai.ArgMaxOp, ai.ArgMinOp)


def _no_block_scales(members, anchor) -> str | None:
    """Only the pointwise loop reads a per-block scale at ``index // block_size``
    (issue 31): another template's group takes no such quantization op."""
    for op in members:
        if isinstance(op, ai.QuantizationOp) and op.blocks() is not None:
            return (
                f"{op.name} has per-block scales (block_size {op.attr('block_size')}): "
                "only the cpu pointwise template reads them"
            )
    return None


def _block_scales_before_core(members, anchor) -> str | None:
    """A matmul or conv group computes the producers of its core's operands in full
    stages (the pointwise loop): per-block quantization ops may be there, not after it."""
    from fusec.targets.cpu.common import depends_on

    ops = [op for op in members if isinstance(op, Operation)]
    after = depends_on(ops, anchor.results) if anchor is not None else set(ops)
    return _no_block_scales([op for op in ops if op in after], anchor)


class CpuTarget(Target):
    """Numba ``@njit(parallel=True)`` kernels, one per ``ai.fused`` group; BLAS for the
    matmul and conv cores; 16-bit tensors computed in float32 and rounded back."""

    name = "cpu"
    description = "Numba CPU kernels (parallel loops, BLAS cores)"
    passes = {
        "cpu-channels-last": "fusec.targets.cpu.channels_last:ChannelsLastPass",
        "cpu-expand-depthwise": "fusec.targets.cpu.expand_depthwise:ExpandDepthwisePass",
    }
    pipelines = {
        # fusion, then depthwise conv stages kept channels-last (ConvNeXt's permutes go),
        # then MobileNet's 1x1 expansions computed inside the depthwise convs reading them
        "fusec-cpu": "fusec-default,cpu-channels-last,cpu-expand-depthwise",
    }
    pipeline = "fusec-cpu"
    #: A matmul block holds whole rows of the result (cpu_matmul), so a softmax of any
    #: row that fits the workspace runs in the block's epilogue, while it is in cache;
    #: the rules' 256 is a GPU tile.
    rule_params = {"softmax_tile_limit": 16384}
    templates = {
        "pointwise": Template(
            "fusec.targets.cpu.pointwise", (ai.RotateHalfOp,), accepts=rotations_read_inputs
        ),
        "row_reduce": Template("fusec.targets.cpu.row_reduce", _ROWS, accepts=_no_block_scales),
        "matmul": Template(
            "fusec.targets.cpu.matmul",
            (ai.MatmulOp, *_ROW, *_LAYOUT),
            accepts=_block_scales_before_core,
        ),
        "conv": Template(
            "fusec.targets.cpu.conv", (ai.Conv2DOp,), accepts=_block_scales_before_core
        ),
        "reduce": Template(
            "fusec.targets.cpu.reduce",
            (ai.ReduceMeanOp, ai.ReduceSumOp, ai.ReduceMaxOp),
            accepts=_no_block_scales,
        ),
        "pool": Template(
            "fusec.targets.cpu.pool", (ai.MaxPool2DOp, ai.AvgPool2DOp), accepts=_no_block_scales
        ),
        "copy": Template("fusec.targets.cpu.copy", (*_LAYOUT, *_DATA)),
        "view": Template("fusec.codegen.view", (ai.ReshapeOp,)),
        "attention": Template(
            "fusec.targets.cpu.attention", (ai.AttentionOp, *_LAYOUT), accepts=_no_block_scales
        ),
        "experts": Template("fusec.targets.cpu.experts", (ai.MoEExpertsOp,)),
    }

    def backend(self, cache: Any = None) -> Any:
        from fusec.targets.cpu.backend import CpuBackend

        return CpuBackend(cache)

    def program(self, module: ModuleOp, entry: str | None = None, cache: Any = None) -> Any:
        from fusec.targets.cpu.program import CpuProgram

        return CpuProgram(module, entry, self, cache)


TARGET = CpuTarget()
