"""The njit-callable entry of a cpu kernel module, for a program's compiled launcher.

Every cpu kernel module has a Python ``launch(in0, ..., out0, ...)``: it takes a
workspace (``abi.workspace``), a fresh block counter (``np.zeros``), numpy copies
of strided views, and holds BLAS at one thread. A compiled program
(``fusec.targets.cpu.program``) calls the kernels from one Numba function
instead, so each module also gets ``entry(in0, ..., out0, ..., scratch,
counter)`` (``KernelSource.compiled_entry``): the same work in nopython mode,
with every buffer carved from ``scratch`` at offsets fixed here, the counter
passed in and reset, views copied by generated loops (Numba's ``transpose`` and
slice assignment allocate), and no BLAS setting (the program holds it around the
whole call). A launch that needs numpy outside Numba (a copy kernel, a numpy
reduction over inner axes, Winograd filters of a weight that is an argument)
gets no entry: the program calls its ``launch`` from Python there.

Generating text only: no numpy or Numba here (``fusec compile`` imports it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from xdsl.ir import Operation, SSAValue

from fusec.codegen import CompiledEntry
from fusec.codegen.expr import shape_of
from fusec.codegen.layout import numpy_expression
from fusec.dialect import ops as ai

#: The entry's name in every cpu kernel module.
NAME = "entry"


class EntryScratch:
    """Float32 buffers of one entry, at fixed offsets of its ``scratch`` argument."""

    def __init__(self) -> None:
        self.floats = 0

    def take(self, name: str, floats: int) -> str:
        """The line binding ``name`` to the next ``floats`` elements of ``scratch``."""
        start = self.floats
        self.floats += max(1, floats)
        return f"{name} = scratch[{start}:{self.floats}]"

    def scratch_lines(self, scratch: Sequence[tuple[str, int]]) -> list[str]:
        """The entry's form of ``common.scratch_lines``: each buffer a part of ``scratch``."""
        return [self.take(name, size) for name, size in scratch]


def copy_lines(dst: str, src: str, shape: Sequence[int], tag: str) -> list[str]:
    """Loops copying the shaped array expression ``src`` into the flat ``dst`` in C order
    (``tag`` keeps the loop variables of several copies apart). Numba's array
    assignment copies a source that may overlap into a temporary; these allocate nothing."""
    if not shape:
        return [f"{dst}[0] = {src}.reshape(1)[0]"]
    lines = [f"{tag}s = {src}", f"{tag}k = 0"]
    index = []
    for d, size in enumerate(shape):
        lines.append(f"{'    ' * d}for {tag}{d} in range({int(size)}):")
        index.append(f"{tag}{d}")
    pad = "    " * len(shape)
    lines.append(f"{pad}{dst}[{tag}k] = {tag}s[{', '.join(index)}]")
    lines.append(f"{pad}{tag}k += 1")
    return lines


def transpose_lines(dst: str, src: str, shape: Sequence[int], perm: Sequence[int], tag: str):
    """Loops writing ``src`` (shaped ``shape``) transposed by ``perm`` into the flat ``dst``,
    reading the source by permuted indices (Numba's ``transpose(axes)`` allocates)."""
    result = [int(shape[p]) for p in perm]
    lines = [f"{tag}s = {src}", f"{tag}k = 0"]
    for d, size in enumerate(result):
        lines.append(f"{'    ' * d}for {tag}{d} in range({size}):")
    # result index j_d reads source axis perm[d]
    source_index = [""] * len(perm)
    for d, axis in enumerate(perm):
        source_index[int(axis)] = f"{tag}{d}"
    pad = "    " * len(result)
    lines.append(f"{pad}{dst}[{tag}k] = {tag}s[{', '.join(source_index)}]")
    lines.append(f"{pad}{tag}k += 1")
    return lines


def view_lines(
    views: Sequence[Operation], reads: dict[SSAValue, str], scratch: EntryScratch
) -> list[str] | None:
    """The entry's form of ``segments.view_lines``: each layout op's result as the flat
    contiguous ``v<i>f`` the kernel reads (a reshape: its operand's array itself; a
    transpose or slice: a copy into ``scratch``). ``reads`` are the arrays before the
    views; None when an op is not a reshape, transpose or slice."""
    names = dict(reads)
    lines: list[str] = []
    for index, op in enumerate(views):
        operand, result = op.operands[0], op.results[0]
        name, tag = f"v{index}f", f"c{index}_"
        if not shape_of(operand) or not shape_of(result):
            return None
        source = f"{names[operand]}.reshape({tuple(shape_of(operand))!r})"
        if isinstance(op, ai.ReshapeOp):
            lines.append(f"{name} = {names[operand]}")
        elif isinstance(op, ai.TransposeOp):
            perm = [int(p) for p in op.attr("perm")]
            lines.append(scratch.take(name, math.prod(shape_of(result))))
            lines += transpose_lines(name, source, shape_of(operand), perm, tag)
        elif isinstance(op, ai.SliceOp):
            lines.append(scratch.take(name, math.prod(shape_of(result))))
            lines += copy_lines(name, numpy_expression(op, [source]), shape_of(result), tag)
        else:
            return None
        names[result] = name
    return lines


def passthrough_lines(
    fused_op: ai.FusedOp, outputs: Sequence[tuple[SSAValue, str]], reads: dict[SSAValue, str]
) -> list[str]:
    """The entry's form of ``segments.passthrough_lines``: copy loops."""
    from fusec.codegen.layout import LAYOUT_OPS

    lines: list[str] = []
    for k, (value, array) in enumerate(outputs):
        if value in fused_op.block.args or isinstance(value.owner, LAYOUT_OPS):
            size = math.prod(shape_of(value))
            lines += copy_lines(array, reads[value], (size,), f"p{k}_")
    return lines


def blocked_launch(
    scratch: EntryScratch, count: int, parallel: bool, task_floats: int, call: str
) -> tuple[list[str], CompiledEntry]:
    """The lines running a blocked kernel's stage ``call``: its per-task workspace ``ws``
    after the fixed buffers (as many tasks as the caller's thread count ``counter[1]``,
    its blocks and the scratch allow) and the block counter ``counter[0]`` reset; and
    the entry's scratch needs. The thread count comes from the caller because
    ``numba.get_num_threads()`` in the entry would make Numba refuse to cache it (a
    ctypes pointer global): every process would compile the entry again."""
    fixed = scratch.floats
    if parallel:
        tasks = (
            f"tasks = max(1, min(counter[1], {count}, (scratch.size - {fixed}) // {task_floats}))"
        )
    else:
        tasks = "tasks = 1"
    ws = f"ws = scratch[{fixed}:{fixed} + tasks * {task_floats}]"
    lines = [tasks, ws, "counter[0] = 0", call]
    needs = CompiledEntry(NAME, fixed, task_floats, count if parallel else 1)
    return lines, needs


def entry_source(params: Sequence[str], body: Sequence[str], stages: Sequence[str]) -> str:
    """The entry function: ``params`` (the launch's) plus ``scratch``, ``counter`` and
    ``stages``, the addresses of the module's ``STAGES`` in order: a call of a stage in
    ``body`` becomes a call through its address (``abi.call_entry``), so that compiling
    the entry does not link and compile the stage's machine code again; the module's
    ``STAGES`` tuple names them for the program that fills ``stages``."""
    index = {name: k for k, name in enumerate(stages)}
    lines = [
        f"STAGES = {tuple(stages)!r}",
        "",
        "",
        "@cached_njit(",
        '    fastmath=False, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True',
        ")",
        f"def {NAME}({', '.join([*params, 'scratch', 'counter', 'stages'])}):",
        '    """``launch`` for a compiled program: buffers from scratch, nothing allocated."""',
    ]
    for line in body:
        call = _STAGE_CALL.match(line)
        if call is not None and call.group(2) in index:
            pad, name, args = call.groups()
            line = f"{pad}call_entry(stages[{index[name]}], {args})"
        lines.append(f"    {line}" if line else "")
    if not body:
        lines.append("    pass")
    return "\n".join(lines) + "\n"


#: A line of an entry body calling a function: indent, name, arguments.
_STAGE_CALL = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$")
