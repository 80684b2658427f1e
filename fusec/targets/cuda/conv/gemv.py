"""The conv template's ``gemv`` route: a conv of a few rows as dot products on CUDA cores.

A squeeze-excite block's two 1x1 convs run on a 1x1 plane (the pooled channels): at batch
1 each is a ``1 x C`` by ``C x K`` product, one row of a GEMM. The implicit-GEMM kernel
computes it as one 64-row Tensor Core tile with its TMA pipeline, barriers and split-K:
EfficientNet-B0 b1's ``C1152 -> K48`` took 6.7 us a call and its 32 such convs ~125 us of
the model's 603 (H100, ``profile_zoo`` at 4ed87b4), where cuBLAS's gemv kernels, which
torch.compile calls for them, took ~2.4 us each. Tensor Cores gain nothing on one row:
the product reads each weight once, memory-bound.

A conv routed here (``gemv_problem`` says which) has a 1x1 kernel on a 1x1 input plane,
no padding, one group and at most ``MAX_ROWS`` images, so that in every layout the
``conv-layout`` pass may give it (NCHW or NHWC input, KCRS or KRSC weights, NCHW or NHWC
output) the input is ``[N][C]``, the weights ``[K][C]`` and the output ``[N][K]`` in
memory. The kernel is laid out as the reduce template's row case: output
``o = n * K + k`` is the sum over ``c`` of ``x[n][c] * w[k][c]``, ``TY`` lanes reading
consecutive channels of one weight row (coalesced), ``Z`` rows a block, float32 partials
combined by a shared-memory tree, then the group's elementwise epilogue
(``anchored.Epilogue``: bias, activation, the store of the NHWC result) on lane 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import literal
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.anchored import AnchorEmitter, input_view
from fusec.targets.cuda.common import (
    Source,
    block_tile_launch,
    kernel_def,
)
from fusec.targets.cuda.conv.config import ConvGeometry

#: Images (rows of the product) a gemv conv takes at most. Here the weights are read once
#: a row (from L2 after the first), by the Tensor Core tile once in all: past a few rows
#: the tile should win (where is not measured yet; 8 is a guess on the safe side).
MAX_ROWS = 8
#: Input channels at most: a lane reads C / 256 products (16 at 4096).
MAX_CHANNELS = 4096
THREADS = 256
#: Products each lane aims to accumulate before the shared-memory tree.
PER_LANE = 8
#: Blocks per multiprocessor at most; the grid-stride loop covers the rest.
BLOCKS_PER_SM = 16


def gemv_problem(geo: ConvGeometry, residual_views: tuple) -> str | None:
    """None when the gemv kernel serves a conv of ``geo`` (module docstring), else why not."""
    if (geo.h, geo.w, geo.r, geo.s, geo.groups) != (1, 1, 1, 1, 1):
        return "not a 1x1 ungrouped conv on a 1x1 plane"
    if any((geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right)):
        return "padded"
    if geo.n > MAX_ROWS or geo.c > MAX_CHANNELS:
        return f"{geo.n} images of {geo.c} channels (at most {MAX_ROWS} of {MAX_CHANNELS})"
    if residual_views:
        return "a residual read channels-last"
    return None


@dataclass(frozen=True)
class GemvPlan:
    """``outputs`` (N * K) of ``length`` (C) products each: ``ty`` lanes an output, ``z``
    outputs a block (the reduce template's row case)."""

    outputs: int
    length: int
    ty: int
    z: int

    @property
    def blocks(self) -> int:
        return -(-self.outputs // self.z)


def plan_rows(geo: ConvGeometry) -> GemvPlan:
    """Lanes enough that each reads about ``PER_LANE`` products, a power of two of them
    (at most a block), and as many outputs a block as fill it."""
    lanes = -(-geo.c // PER_LANE)
    ty = min(THREADS, max(1, 1 << (lanes - 1).bit_length()))
    return GemvPlan(geo.n * geo.k, geo.c, ty, THREADS // ty)


class GemvEmitter(AnchorEmitter):
    """The source of one gemv conv kernel module."""

    def __init__(self, fused_op: ai.FusedOp, conv: ai.Conv2DOp, name: str, geo: ConvGeometry):
        super().__init__(fused_op, conv, name)
        view = input_view(fused_op, conv.weight)
        assert view is not None  # the conv plan checked its operands are group inputs
        self.weights = f"in{fused_op.block.args.index(view[0])}"
        self.wdtype = spec_of(conv.weight.type).dtype
        self.geo, self.plan = geo, plan_rows(geo)
        self.helpers.add(f"ld_{self.wdtype}")

    def emit(self) -> str:
        p = self.plan
        code = Source([])
        params = self.epilogue.params()
        kernel_def(code, self.name, params, "Z output rows x TY lanes over the channels per block.")
        code.add(1, "sh = cuda.shared.array(THREADS, f32)", "t = cuda.threadIdx.x")
        code.add(1, "y = t % TY", "z = t // TY")
        code.add(1, "b = cuda.blockIdx.x", "while b < BLOCKS:  # uniform across the block")
        code.add(2, "o = b * Z + z  # output n * K + k", "live = o < O")
        code.add(2, f"acc = {literal(0.0)}", "if live:")
        code.add(3, "xrow = (o // K) * C", "wrow = (o % K) * C", "c = y")
        code.add(3, "while c < C:")
        code.add(
            4,
            f"acc += ld_{self.dtype}({self.array}, xrow + c) * "
            f"ld_{self.wdtype}({self.weights}, wrow + c)",
        )
        code.add(4, "c += TY")
        code.add(2, "sh[t] = acc", "cuda.syncthreads()")
        s = p.ty // 2
        while s >= 1:
            code.add(2, f"if y < {s}:", f"    sh[t] = sh[t] + sh[t + {s}]", "cuda.syncthreads()")
            s //= 2
        code.add(2, "if live and y == 0:", "    val = sh[t]")
        self.epilogue.emit(code, 3, "val", "o")
        code.add(2, "b += cuda.gridDim.x")
        return self.module(code, params)

    def module(self, code: Source, params: list[str]) -> str:
        p, geo = self.plan, self.geo
        notes = [
            "target: cuda (Numba CUDA), template: conv as dot products on CUDA cores (gemv: "
            f"{geo.n} row(s), too few for a Tensor Core tile)",
            f"N{geo.n} C{geo.c} 1x1 -> K{geo.k} 1x1, 1x1 kernel; input [N][C], weights "
            "[K][C], output [N][K] in memory (a 1x1 plane: every layout the same)",
            f"layout: {p.outputs} outputs of {p.length} products; blocks of {p.z} outputs x "
            f"{p.ty} lanes, float32 partials combined in shared memory, grid-stride over "
            f"{p.blocks} tiles; epilogue: "
            + (" -> ".join(op.name for op in self.epilogue.ops) or "none"),
        ]
        ins, outs = self.io_names()
        constants = [
            ("O", p.outputs),
            ("C", geo.c),
            ("K", geo.k),
            ("TY", p.ty),
            ("Z", p.z),
            ("BLOCKS", p.blocks),
            ("THREADS", THREADS),
        ]
        tail = block_tile_launch(self.name, "BLOCKS", BLOCKS_PER_SM, ins + outs, params)
        return self.kernel_module(notes, constants, code, tail)


def generate(fused_op: ai.FusedOp, conv: ai.Conv2DOp, name: str, geo: ConvGeometry) -> KernelSource:
    """The gemv kernel module of a conv group the conv plan routed here."""
    source = GemvEmitter(fused_op, conv, name, geo).emit()
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, "conv", "cuda", source, inputs, outputs, array_dtype=None)
