"""cpu template for "copy" groups: transpose, slice, concat or gather into a new buffer,
or a gather at run-time indices (``ai.take``) or running sum (``ai.cumsum``).

The op is numpy's own view or gather (``codegen.layout``), and one assignment into
the output's shaped view does the copy. One exception: a transpose that swaps two
groups of axes behind leading ones (``batched_swap``: NCHW <-> NHWC, ConvNeXt's
permutes around its LayerNorm and Linear layers, 36 of its 45 copies) is a batch of
2-D transposes, which numpy's strided copy ran at a fraction of memory speed (96 x 1024
floats: 72 us; 8 x 768 x 1024: 13.4 ms). It runs as a Numba kernel over 16 x 16 tiles
instead (19 us; 0.34 ms), on one thread (as numpy's was: a parallel kernel cost twice
the compile time, 2.5 s of CPU against 1.3, for a copy that is memory-bound), with an
njit entry, so that a compiled program's launcher does not return to Python for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusec.codegen import CompiledEntry, KernelSource, io_specs
from fusec.codegen.expr import error_at, header, shape_of
from fusec.codegen.layout import is_copy, numpy_expression
from fusec.dialect import ops as ai
from fusec.targets.cpu.abi import import_line
from fusec.targets.cpu.common import body_ops, input_names, outputs_of
from fusec.targets.cpu.entry import entry_source

#: Rows and columns of a tile of ``batched_swap``'s kernel. Single thread, 96 x 1024
#: floats: numpy 72 us, tiles of 4 33, 8 21, 16 19 (through a tile buffer: 36 at 8).
TILE = 16


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    ops = body_ops(fused_op)
    swap = _swap_of(fused_op, ops)
    if swap is not None:
        return _swap_kernel(fused_op, name, *swap)
    names = {v: f"{n}.reshape({shape_of(v)!r})" for v, n in input_names(fused_op).items()}
    lines = []
    for index, op in enumerate(ops):
        if not is_copy(op):
            raise error_at(op, 'cannot be part of a "copy" group (layout and data ops only)')
        lines.append(f"v{index} = {numpy_expression(op, [names[v] for v in op.operands])}")
        names[op.results[0]] = f"v{index}"
    for value, array in outputs_of(fused_op):
        lines.append(f"{array}.reshape({shape_of(value)!r})[...] = {names[value]}")
    params = [f"in{i}" for i in range(len(fused_op.inputs))]
    params += [f"out{i}" for i in range(len(fused_op.results))]
    source = "\n".join(
        [
            header(fused_op, notes=["target: cpu; numpy views and one copy into the output"]),
            "import numpy as np",
            "",
            import_line("numpy_ops as K"),
            "",
            "",
            f"def launch({', '.join(params)}):",
            '    """Run the group: every output element is written."""',
            *(f"    {line}" for line in lines),
            "",
        ]
    )
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, "copy", "cpu", source, inputs, outputs)


def batched_swap(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, int, int] | None:
    """(B, R, C) when transposing ``shape`` by ``perm`` is B transposes of R x C
    matrices: ``perm`` keeps leading axes, then takes a run of axes (C's) before the run
    just ahead of it (R's), each in order, e.g. (0, 2, 3, 1): (N, C, H*W) -> (N, H*W, C).
    None otherwise (and when R or C is 1: then it is a copy)."""
    rank = len(perm)
    lead = 0
    while lead < rank and perm[lead] == lead:
        lead += 1
    rest = list(perm[lead:])
    for cut in range(1, len(rest)):
        first, second = rest[:cut], rest[cut:]
        split = lead + len(second)  # source axes lead..split-1 are R's, split.. C's
        if second == list(range(lead, split)) and first == list(range(split, rank)):
            b = math.prod(shape[:lead])
            r, c = math.prod(shape[lead:split]), math.prod(shape[split:])
            return (b, r, c) if r > 1 and c > 1 else None
    return None


def _swap_of(fused_op: ai.FusedOp, ops) -> tuple[int, int, int] | None:
    """``batched_swap`` of a group that is one float32 transpose of its input."""
    if len(ops) != 1 or not isinstance(ops[0], ai.TransposeOp) or len(fused_op.inputs) != 1:
        return None
    inputs, outputs = io_specs(fused_op)
    if any(spec.dtype != "f32" for spec in (*inputs, *outputs)) or len(outputs) != 1:
        return None
    op = ops[0]
    if op.operands[0] is not fused_op.block.args[0]:
        return None
    return batched_swap(shape_of(op.operands[0]), [int(p) for p in op.attr("perm")])


def _swap_kernel(fused_op: ai.FusedOp, name: str, b: int, r: int, c: int) -> KernelSource:
    """B transposes of R x C float32 matrices (``batched_swap``): for each batch matrix
    and row of tiles, each tile's columns written as rows of the result."""
    t = TILE
    rows = -(-r // t)
    stage = f"{name}_transpose"
    kernel = [
        "@cached_njit(",
        "    numba.void(ro, rw),",
        '    parallel=False, fastmath=False, error_model="numpy",',
        ")",
        f"def {stage}(in0, out0):",
        f"    for task in range({b * rows}):",
        f"        base = task // {rows} * {r * c}",
        f"        i0 = task % {rows} * {t}",
        f"        i1 = min(i0 + {t}, {r})",
        f"        for j0 in range(0, {c}, {t}):",
        f"            j1 = min(j0 + {t}, {c})",
        f"            if i1 - i0 == {t} and j1 - j0 == {t}:",
        f"                for j in range({t}):",
        f"                    for i in range({t}):",
        f"                        out0[U(base + (j0 + j) * {r} + i0 + i)] = "
        f"in0[U(base + (i0 + i) * {c} + j0 + j)]",
        "            else:",
        "                for j in range(j0, j1):",
        "                    for i in range(i0, i1):",
        f"                        out0[U(base + j * {r} + i)] = in0[U(base + i * {c} + j)]",
    ]
    note = f"target: cpu; {b} transposes of {r}x{c} float32 matrices in {t}x{t} tiles"
    source = "\n".join(
        [
            header(fused_op, notes=[note]),
            "import numba",
            "from numpy import uint64 as U",
            "",
            import_line("cached_njit"),
            "",
            'ro = numba.types.Array(numba.float32, 1, "C", readonly=True)',
            "rw = numba.float32[::1]",
            import_line("call_entry"),
            "",
            "",
            *kernel,
            "",
            "",
            "def launch(in0, out0):",
            '    """Run the group: every output element is written."""',
            f"    {stage}(in0, out0)",
            "",
            "",
            entry_source(["in0", "out0"], [f"{stage}(in0, out0)"], [stage]),
        ]
    )
    inputs, outputs = io_specs(fused_op)
    return KernelSource(
        name, "copy", "cpu", source, inputs, outputs, compiled_entry=CompiledEntry()
    )
