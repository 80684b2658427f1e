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
from fusec.codegen.expr import merged_runs, shape_of
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
    """The entry's form of ``segments.view_lines``: each layout op's result that something
    outside the views reads, as the flat contiguous ``v<i>f`` the kernel reads. ``reads``
    are the arrays before the views; None when an op is not a reshape, transpose or slice.

    A chain of layout ops is composed first (``_View``: dims over a flat array, each a
    run of (size, element stride) digits, so that a reshape merging dims that are not
    contiguous stays exact and a later split takes them apart again), so each result
    read is one copy from the chain's source (or the source itself, when the chain
    leaves it whole and contiguous), not a copy per op: ViT-B/16's head split at batch
    4 took ten serial copies of 0.2-0.6 M floats per layer, three now
    (benchmarks/results/cpu-notes.md)."""
    names = dict(reads)
    in_views = set(views)
    composed: dict[SSAValue, _View] = {}
    lines: list[str] = []

    sizes: dict[str, int] = {}  # elements of each flat array a view reads

    def view_of(value: SSAValue) -> _View:
        if value in composed:
            return composed[value]
        sizes[names[value]] = math.prod(shape_of(value))
        return _View.contiguous(names[value], shape_of(value))

    for index, op in enumerate(views):
        operand, result = op.operands[0], op.results[0]
        if not shape_of(operand) or not shape_of(result):
            return None
        if not isinstance(op, (ai.ReshapeOp, ai.TransposeOp, ai.SliceOp)):
            return None
        source = view_of(operand)
        view = source.applied(op, tuple(shape_of(result)))
        if view is None:  # not expressible over the source: the operand copied first
            flat = f"v{index}s"
            lines.append(scratch.take(flat, math.prod(shape_of(operand))))
            lines += source.copy_lines(flat, f"s{index}_")
            sizes[flat] = math.prod(shape_of(operand))
            view = _View.contiguous(flat, shape_of(operand)).applied(op, tuple(shape_of(result)))
            assert view is not None  # a contiguous operand reshapes, transposes and slices
        composed[result] = view
        if all(use.operation in in_views for use in result.uses):
            continue  # read only by other views: composed into theirs
        name = f"v{index}f"
        if view.whole() and sizes[view.base] == math.prod(shape_of(result)):
            lines.append(f"{name} = {view.base}")
        else:
            lines.append(scratch.take(name, math.prod(shape_of(result))))
            lines += view.copy_lines(name, f"c{index}_")
        names[result] = name
    return lines


#: One dim of a ``_View``: its digits, most significant first, as (size, element stride).
Dim = list[tuple[int, int]]


class _View:
    """A shaped view of a flat array: element ``base[offset + sum over digits of i * stride]``,
    the dims in C order, each dim's index written in the mixed radix of its digits."""

    def __init__(self, base: str, dims: Sequence[Dim], offset: int = 0) -> None:
        self.base, self.dims, self.offset = base, [merged_runs(d) for d in dims], int(offset)

    @staticmethod
    def contiguous(base: str, shape: Sequence[int]) -> _View:
        dims, step = [], 1
        for size in reversed(shape):
            dims.append([(int(size), step)])
            step *= int(size)
        return _View(base, dims[::-1])

    def digits(self) -> Dim:
        """Every digit in C order, adjacent contiguous ones merged, unit ones dropped."""
        return merged_runs([digit for dim in self.dims for digit in dim])

    def whole(self) -> bool:
        """Whether this is its flat array as it is (C order from element 0)."""
        digits = self.digits()
        return self.offset == 0 and (not digits or (len(digits) == 1 and digits[0][1] == 1))

    def applied(self, op: Operation, shape: tuple[int, ...]) -> _View | None:
        """This view after the layout op ``op`` (result shape ``shape``); None when the
        digits cannot express it."""
        if isinstance(op, ai.TransposeOp):
            return self.transposed([int(p) for p in op.attr("perm")])
        if isinstance(op, ai.SliceOp):
            return self.sliced([(int(i.start), int(i.step)) for i in op.index()], shape)
        return self.reshaped(shape)

    def transposed(self, perm: Sequence[int]) -> _View:
        return _View(self.base, [self.dims[p] for p in perm], self.offset)

    def sliced(self, items: Sequence[tuple[int, int]], shape: Sequence[int]) -> _View | None:
        """Elements ``start + i * step`` of each dim (``items``), ``shape`` of them; None
        for a part of a dim of several digits."""
        offset, dims = self.offset, []
        for (start, step), dim, size in zip(items, self.dims, shape, strict=True):
            if start == 0 and step == 1 and size == math.prod(n for n, _ in dim):
                dims.append(dim)
                continue
            if len(dim) > 1:
                return None
            stride = dim[0][1] if dim else 0
            offset += start * stride
            dims.append([(int(size), step * stride)])
        return _View(self.base, dims, offset)

    def reshaped(self, shape: Sequence[int]) -> _View | None:
        """The same elements in C order as ``shape``: each new dim takes the next digits
        (the last one split when it is larger); None when a size does not divide."""
        digits = self.digits()
        dims = []
        for size in shape:
            dim: Dim = []
            left = int(size)
            while left > 1:
                if not digits:
                    return None
                n, stride = digits.pop(0)
                if n <= left:
                    if left % n:
                        return None
                    dim.append((n, stride))
                    left //= n
                else:
                    if n % left:
                        return None
                    dim.append((left, stride * (n // left)))
                    digits.insert(0, (n // left, stride))
                    left = 1
            dims.append(dim)
        return None if digits else _View(self.base, dims, self.offset)

    def copy_lines(self, dst: str, tag: str) -> list[str]:
        """Loops copying this view into the flat ``dst`` in C order: the last digit's
        elements in one loop from its run's first element (consecutive floats when its
        stride is 1)."""
        digits = self.digits()
        if not digits:
            return [f"{dst}[0] = {self.base}[{self.offset}]"]
        *outer, (inner, step) = digits
        lines = [f"{tag}k = 0"]
        terms = [str(self.offset)]
        for d, (size, stride) in enumerate(outer):
            lines.append(f"{'    ' * d}for {tag}{d} in range({size}):")
            terms.append(f"{tag}{d} * {stride}")
        pad = "    " * len(outer)
        element = f"{tag}r + {tag}j" if step == 1 else f"{tag}r + {tag}j * {step}"
        return [
            *lines,
            f"{pad}{tag}r = {' + '.join(terms)}",
            f"{pad}for {tag}j in range({inner}):",
            f"{pad}    {dst}[{tag}k + {tag}j] = {self.base}[{element}]",
            f"{pad}{tag}k += {inner}",
        ]


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
