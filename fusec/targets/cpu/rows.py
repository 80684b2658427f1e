"""The row loop of the cpu kernel layer: a layernorm, RMSNorm or softmax row by row, and
its epilogue; the row_reduce template and the blocked kernel's prologue and epilogue run it.

One ``ai.layernorm``, ``ai.rms_norm`` or ``ai.softmax`` with elementwise producers (the
prologue, computed once per element into a row buffer) and consumers (the
epilogue). Each parallel task owns a float32 row buffer and walks its rows
while the row is in cache:

* layernorm: sum (float64) -> mean; sum of squared deviations (float64) ->
  rstd; write ``(x - mean) * rstd * gamma + beta`` through the epilogue;
* rms_norm: sum of squares (float64) -> rstd; write ``x * rstd * gamma``;
* softmax: max; ``e = exp(x - max)`` into the buffer, summed in the same loop
  (``row_exp_sum``); write ``e * (1 / sum)`` through the epilogue.

The loops over a row vectorise (tests/targets/cpu/test_cpu_row_reduce.py reads the
LLVM IR), which is what makes these kernels fast (benchmarks/results/cpu-notes.md):

* arrays that span the row are indexed through a view of the row
  (``in0_row[k]``, ``0 <= k < n``): a flat index computed from the row number
  may be negative as far as LLVM knows, so Numba's wraparound check would turn
  each access into a gather or scatter;
* operands constant along the row are loaded once per row;
* the exponential is ``exp_nonpos_f32`` (softmax's x - max <= 0; ``exp_f32`` for
  ``ai.exp``; see ``fusec.codegen.expr``), not libm's scalar
  ``math.exp``;
* the row reductions are helpers written so that LLVM vectorises them without
  ``fastmath`` on the kernel (``row_helpers.ROW_HELPERS``).

The reduced axis may be any axis (softmax). Rows along another axis are
strided; when the last dim has at least ``MIN_BLOCK`` elements they are walked
in blocks of rows adjacent in memory (``_BlockEmitter``), else one at a time
with flat indexing. When the epilogue needs prologue values other than the
buffered one, the prologue is recomputed in the last pass rather than buffered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.ir import Operation, SSAValue

from fusec.codegen.expr import (
    ExprGenerator,
    broadcast_offset,
    broadcast_shapes,
    error_at,
    is_identifier,
    leaf_shapes,
    literal,
    shape_of,
    the_row_reduction,
)
from fusec.dialect import ops as ai
from fusec.targets.cpu import abi
from fusec.targets.cpu.common import (
    PARALLEL_MIN_ELEMENTS,
    REDUCE_OPS,
    Stage,
    ancestors,
    check_elementwise,
    fmt_shape,
)

#: At most this many parallel tasks (each allocates one row buffer).
MAX_TASKS = 256
#: Rows of a last-axis row loop are handed out in chunks of about this many input
#: bytes, at least ``MIN_CHUNKS`` chunks, in ``RANGES`` ranges of adjacent chunks
#: (``_task_loop``).
CHUNK_BYTES, MIN_CHUNKS, RANGES = 256 * 1024, 16, 16
TASKS_IMPORT = abi.import_line("next_block")
#: Softmax over a non-last axis walks blocks of rows side by side (the rows of a
#: block are adjacent in memory) when the last dim has at least this many elements.
MIN_BLOCK = 8
#: Widest block, and the most bytes of a block's buffer (n * width float32s).
MAX_BLOCK, BLOCK_BYTES = 256, 256 * 1024
#: Elementwise rows of this many elements (the row's full extent) loop over
#: ``opaque_count(n)``, not ``range(n)``: LLVM unrolls a short constant loop completely
#: before its loop vectoriser runs, and Numba leaves the SLP vectoriser off (it
#: miscompiled), so the unrolled row ran scalar. Bias + ReLU / bias + HardSwish rows on a
#: Zen 4 core, ns per 1000 elements, constant / opaque count: 16 elements 1100 / 650 and
#: 3600 / 830, 25: 1090 / 580 and 810 / 840, 36: 1110 / 530 and 410 / 960, 64: 370 / 410
#: and 400 / 470; 4 elements: 1110 / 2890 (the vector loop's remainder runs scalar).
SHORT_ROWS = range(9, 33)


def row_count(gen: ExprGenerator, extent: int, length: str) -> str:
    """The count a row loop of ``length`` elements runs over (``extent``: the row's full
    length): ``opaque_count(length)`` for ``SHORT_ROWS`` (recorded in ``gen.helpers``),
    else ``length`` itself."""
    if extent not in SHORT_ROWS:
        return length
    gen.helpers.add("opaque_count")
    return f"opaque_count({length})"


_NAMES: dict[type[Operation], str] = {ai.LayerNormOp: "layernorm", ai.RMSNormOp: "rms_norm"}
#: The normalisations: x itself is read again in the last pass.
_NORMS = (ai.LayerNormOp, ai.RMSNormOp)


def the_reduction(where: Operation, ops: Sequence[Operation]) -> Operation:
    """The single layernorm/softmax of ``ops`` (others elementwise), else a located error."""
    check_elementwise(ops, REDUCE_OPS)
    return the_row_reduction(where, ops)


def reduce_axis(op: Operation) -> int:
    rank = len(shape_of(op.results[0]))
    return op.attr("axis") % rank if isinstance(op, ai.SoftmaxOp) else rank - 1


def row_reduce_stage(
    fn_name: str,
    gen: ExprGenerator,
    ops: Sequence[Operation],
    reduce_op: Operation,
    reads: dict[SSAValue, str],
    writes: Sequence[tuple[SSAValue, str]],
) -> Stage:
    """A parallel row loop computing ``ops`` around ``reduce_op``, storing ``writes``."""
    space = shape_of(reduce_op.results[0])
    axis = reduce_axis(reduce_op)
    blocks = axis != len(space) - 1 and space[-1] >= MIN_BLOCK
    if blocks:
        parts = _row_parts(gen, ops, reduce_op, reads, writes, space, axis, block_rows=True)
        loop, indent = _block_task_loop(space, axis, parts.access.width)
    else:
        parts = _row_parts(gen, ops, reduce_op, reads, writes, space, axis, pipeline=True)
        loop, indent = _task_loop(space, axis, with_buffer=parts.needs_buffer)
    body = loop + [f"{indent}{s}" for s in parts.lines]
    if not blocks:
        body.append("            blk = next_block(counters[home:home + 1])")
    what = _NAMES.get(type(reduce_op), f"softmax (axis {axis})")
    comment = f"{what} over rows of {fmt_shape(space)}"
    if blocks:
        comment += f", {parts.access.width} rows (adjacent in memory) at a time"
    parallel = math.prod(space) >= PARALLEL_MIN_ELEMENTS
    return Stage(
        fn_name,
        parts.params,
        body,
        comment=comment,
        helpers=parts.helpers,
        parallel=parallel,
        imports=() if blocks else (TASKS_IMPORT,),
    )


@dataclass
class RowBlock:
    """How a blocked kernel (``blocked``) walks the rows of its prologue or epilogue.

    The kernel sets ``row`` (the row's number in C order over the dims other than
    the last) and the index ``i<d>`` of each of those dims before the row's
    statements, and ``buf`` (a float32 array of one row) when a reduction needs it.
    """

    #: Arrays that hold only the current block: name -> offset of this row's first element.
    local: dict[str, str] = field(default_factory=dict)
    #: The part of the row to compute, ``(first element, length)`` as expressions;
    #: None for whole rows (a reduction always takes whole rows).
    segment: tuple[str, str] | None = None
    #: Maps a value's shape (broadcast to the group's space) into ``space``'s dims,
    #: when ``space`` merges some of them (the conv epilogue merges H and W).
    reshape: Callable[[tuple[int, ...]], tuple[int, ...]] | None = None


@dataclass
class RowParts:
    """The per-row statements of a row loop and what they need."""

    lines: list[str]
    params: list[str]
    helpers: set[str]
    needs_buffer: bool
    access: Any


def row_statements(
    gen: ExprGenerator,
    ops: Sequence[Operation],
    reads: dict[SSAValue, str],
    writes: Sequence[tuple[SSAValue, str]],
    space: Sequence[int],
    block: RowBlock,
) -> RowParts:
    """Statements computing ``ops`` (elementwise, at most one last-axis reduction) for one
    row of ``space`` and storing each ``writes`` value; see ``RowBlock``."""
    reductions = [op for op in ops if isinstance(op, REDUCE_OPS)]
    if reductions:
        reduce_op = the_reduction(ops[0], ops)
        if reduce_axis(reduce_op) != len(shape_of(reduce_op.results[0])) - 1:
            raise error_at(reduce_op, "reduces an axis other than the last inside a blocked kernel")
        if block.segment is not None:
            raise error_at(reduce_op, "needs whole rows, but the kernel's blocks split them")
    else:
        check_elementwise(ops)
        reduce_op = None
    return _row_parts(gen, ops, reduce_op, reads, writes, tuple(space), len(space) - 1, block)


def _row_parts(
    gen: ExprGenerator,
    ops: Sequence[Operation],
    reduce_op: Operation | None,
    reads: dict[SSAValue, str],
    writes: Sequence[tuple[SSAValue, str]],
    space: tuple[int, ...],
    axis: int,
    block: RowBlock | None = None,
    block_rows: bool = False,
    pipeline: bool = False,
) -> RowParts:
    """Access, emitter and per-row lines of one row loop (``block``: inside a blocked kernel;
    ``pipeline``: a row may start the next one of its chunk, see ``_RowEmitter._softmax``)."""
    reshape = (block.reshape if block else None) or (lambda shape: tuple(shape))
    others = [op for op in ops if op is not reduce_op]
    anchor = reduce_op or (ops[0] if ops else writes[0][0].owner)
    _check_space(anchor, others, writes, space, reshape)
    if reduce_op is not None:
        pre_set = ancestors(others, reduce_op.operands)
    else:
        pre_set = set()
    pre = [op for op in others if op in pre_set]
    post = [op for op in others if op not in pre_set]

    leaves = {v: reshape(s) for v, s in leaf_shapes(ops).items()}
    defined = {r for op in ops for r in op.results}
    for value, _ in writes:
        if value not in defined:
            leaves.setdefault(value, reshape(shape_of(value)))
    written = {a for _, a in writes}
    access: _BlockAccess | _RowAccess
    if block_rows:
        access = _BlockAccess(space, axis, _block_width(space, axis), written)
    else:
        index = [f"i{d}" if d != axis else "k" for d in range(len(space))]
        local = block.local if block else {}
        segment = block.segment if block else None
        access = _RowAccess(space, axis, index, written, local, segment)

    def leaf(value: SSAValue) -> str:
        return access.load(reads[value], leaves[value])

    def store_at(value: SSAValue, array: str) -> str:
        return access.store(array, reshape(shape_of(value)))

    params: list[str] = []
    for value in leaves:
        if value in reads and reads[value] not in params:
            params.append(reads[value])
    params += [a for _, a in writes if a not in params]
    length = block.segment[1] if block and block.segment else str(space[axis])
    if reduce_op is None:
        length = row_count(gen, space[axis], length)
        elementwise = _ElementwiseRowEmitter(gen, leaf, store_at, post, writes, length)
        rows = elementwise.lines()
        return RowParts(access.setup + rows, params, elementwise.helpers, False, access)

    pre_results = {r for op in pre for r in op.results}
    x = reduce_op.operands[0]
    needed_late = {v for op in post for v in op.operands if v in pre_results}
    needed_late |= {v for v in reduce_op.operands[1:] if v in pre_results}
    is_ln = isinstance(reduce_op, _NORMS)
    recompute = bool(needed_late - {x}) or (x in needed_late and not is_ln)

    n = space[axis]
    direct = None  # the reduction reads whole contiguous input rows: no copy into ``buf``
    next_row = None  # in direct mode, the view of the task's next input row
    if not pre and x in reads and leaves[x] == tuple(space) and axis == len(space) - 1:
        assert isinstance(access, _RowAccess)  # rows along the last axis are not blocked
        direct = access.row_view(reads[x], leaves[x], name="xrow")
        if pipeline:
            next_row = f"{reads[x]}[(row + 1) * {n}:(row + 2) * {n}]"
    width = access.width if isinstance(access, _BlockAccess) else 1  # rows at a time
    args = (gen, leaf, store_at, pre, post, reduce_op, writes, recompute, direct)
    emit = _BlockEmitter(*args, width=width) if block_rows else _RowEmitter(*args)
    emit.next_row = next_row
    rows = emit.lines(n)  # first: it decides which views and per-row loads ``access`` sets up
    needs_buffer = not (direct and is_ln) and not emit.in_output
    return RowParts(access.setup + rows, params, emit.helpers, needs_buffer, access)


def _check_space(anchor, others, writes, space, reshape) -> None:
    def fits(shape) -> bool:
        try:
            return broadcast_shapes(space, reshape(shape)) == tuple(space)
        except ValueError:
            return False

    for op in others:
        for r in op.results:
            if not fits(shape_of(r)):
                raise error_at(op, f"broadcasts beyond the row space {fmt_shape(space)}")
    for value, _ in writes:
        if not fits(shape_of(value)):
            raise error_at(
                anchor, f"a group result is larger than the row space {fmt_shape(space)}"
            )


def _task_loop(space: Sequence[int], axis: int, with_buffer: bool) -> tuple[list[str], str]:
    """Tasks over ranges of adjacent row chunks (``row_begin <= row < row_end``), each
    task owning a row buffer; row -> indices of the other dims. The caller closes the
    chunk loop with ``blk = next_block(counters[home:home + 1])``.

    Task ``r`` takes the chunks of range ``r`` from that range's counter, then those
    left in the ranges after it (wrapping round). Numba gives each thread adjacent
    tasks, so when the threads run at the same speed each walks its own contiguous
    part, as a static split would (the rows a thread wrote stay in its caches for
    the next call); a thread that runs slower (a busy host core) loses chunks of
    its part to the others. Measured against one shared counter and a static split,
    softmax 4096x1024 on 2 threads: back to back 0.84-0.86 against 0.89-0.93 and
    0.79-0.84 ms; after 20 ms pauses level with the shared counter, while the static
    split took 1.9 ms in a noisy run (benchmarks/results/cpu-notes.md).
    """
    rows = math.prod(space) // space[axis]
    n = space[axis]
    per = max(1, min(CHUNK_BYTES // (4 * n), math.ceil(rows / MIN_CHUNKS)))
    chunks = math.ceil(rows / per)
    ranges = min(RANGES, chunks)
    span = math.ceil(chunks / ranges)  # chunks per range (the last may have fewer)
    lines = [
        # np.zeros in a parallel function is a parallel loop of its own: a second wake
        # of the pool per call (~70 us back to back, ~130 after a pause; a plain loop)
        f"counters = np.empty({ranges}, dtype=np.int64)",
        f"for r in range({ranges}):",
        "    counters[r] = 0",
        f"for task in numba.prange({ranges}):",
        *([f"    buf = np.empty({n}, dtype=np.float32)"] if with_buffer else []),
        f"    for step in range({ranges}):",
        f"        home = (task + step) % {ranges}",
        "        blk = next_block(counters[home:home + 1])",
        f"        while blk < {span} and home * {span} + blk < {chunks}:",
        f"            row_begin = (home * {span} + blk) * {per}",
        f"            row_end = min(row_begin + {per}, {rows})",
        "            for row in range(row_begin, row_end):",
    ]
    indent = "                "
    dims = [d for d in range(len(space)) if d != axis]
    stride = rows
    for pos, d in enumerate(dims):
        stride //= space[d]
        expr = "row" if stride == 1 else f"row // {stride}"
        if pos > 0:
            expr = f"{expr} % {space[d]}"
        lines.append(f"{indent}i{d} = {expr}")
    return lines, indent


def _block_width(space: Sequence[int], axis: int) -> int:
    """Rows per block: up to MAX_BLOCK, the whole last dim if shorter, a buffer in L2."""
    fit = BLOCK_BYTES // (4 * space[axis])
    return max(MIN_BLOCK, min(MAX_BLOCK, space[-1], fit))


def _block_task_loop(space: Sequence[int], axis: int, width: int) -> tuple[list[str], str]:
    """Tasks over blocks of ``width`` rows adjacent along the last dim; per-task buffers.

    Each block sets the indices of the dims other than ``axis`` and the last
    one, ``j0`` (its first index in the last dim) and ``w`` (its row count).
    """
    n, last = space[axis], len(space) - 1
    per_line = math.ceil(space[-1] / width)
    dims = [d for d in range(len(space)) if d not in (axis, last)]
    count = math.prod(space[d] for d in dims) * per_line
    per = math.ceil(count / min(count, MAX_TASKS))
    lines = [f"for task in numba.prange({math.ceil(count / per)}):"]
    lines += [
        f"    buf = np.empty({n * width}, dtype=np.float32)",
        f"    mx = np.empty({width}, dtype=np.float32)",
        f"    sm = np.empty({width}, dtype=np.float64)",
        f"    for blk in range(task * {per}, min(task * {per} + {per}, {count})):",
    ]
    indent = "        "
    stride = count // per_line
    for pos, d in enumerate(dims):
        stride //= space[d]
        expr = f"blk // {stride * per_line}"
        if pos > 0:
            expr = f"{expr} % {space[d]}"
        lines.append(f"{indent}i{d} = {expr}")
    lines.append(f"{indent}j0 = blk % {per_line} * {width}")
    if space[-1] % width:
        lines.append(f"{indent}w = min({width}, {space[-1]} - j0)")
    else:
        lines.append(f"{indent}w = {width}")  # a constant trip count for the inner loops
    return lines, indent


def _strides(space: Sequence[int], shape: Sequence[int]) -> list[int]:
    """Element strides of a C-order array of ``shape`` broadcast to ``space`` (0: broadcast)."""
    padded = (1,) * (len(space) - len(shape)) + tuple(shape)
    strides, step = [], 1
    for size in reversed(padded):
        strides.append(step if size != 1 else 0)
        step *= size
    return strides[::-1]


def _terms(pairs: Sequence[tuple[str, int]]) -> str:
    """``"a * 4 + b"`` from (index name, stride) pairs with non-zero strides ("0" if none)."""
    terms = [v if s == 1 else f"{v} * {s}" for v, s in pairs if s]
    return " + ".join(terms) or "0"


class _BlockAccess:
    """Element access of the block loop: views at the block's first element.

    Within a block the offset of an element is ``base + k * s_axis + j * s_last``
    (``k`` along the reduced axis, ``j`` along the last dim, both >= 0) where
    ``base`` depends on the block only. Indexing a view that starts at ``base``
    with the non-negative rest keeps Numba's wraparound check (and the gathers
    it forces, see ``_RowAccess``) out of the inner loop.
    """

    def __init__(self, space, axis: int, width: int, written: set[str]) -> None:
        self.space, self.axis, self.width = tuple(space), axis, width
        self.written = written
        self.setup: list[str] = []
        self._bound: dict[tuple[str, ...], str] = {}

    def _split(self, shape: Sequence[int]) -> tuple[str, str]:
        strides = _strides(self.space, shape)
        last = len(self.space) - 1
        base = [(f"i{d}", strides[d]) for d in range(last) if d != self.axis]
        local = [("k", strides[self.axis]), ("j", strides[last])]
        return _terms(base + [("j0", strides[last])]), _terms(local)

    def load(self, array: str, shape: Sequence[int]) -> str:
        base, local = self._split(shape)
        if local == "0" and array not in self.written:
            return self._bind(("at", array, base), f"{array}[{base}]", f"{array}_at")
        return self.store(array, shape)

    def store(self, array: str, shape: Sequence[int]) -> str:
        base, local = self._split(shape)
        view = array if base == "0" else self._bind(("blk", array, base), f"{array}[{base}:]")
        return f"{view}[{local}]"

    def _bind(self, key: tuple[str, ...], expr: str, name: str | None = None) -> str:
        if key not in self._bound:
            self._bound[key] = f"{name or key[1] + '_blk'}{len(self._bound)}"
            self.setup.append(f"{self._bound[key]} = {expr}")
        return self._bound[key]


class _RowAccess:
    """How the row loop reaches an element of each array at (this row, ``k``).

    * arrays that span a contiguous row: a view of the row, set up once per row
      and indexed by ``k`` (``0 <= k < n``). Indexing the flat array by an
      offset computed from ``row`` instead makes Numba emit its negative-index
      wraparound, which LLVM cannot drop (it cannot tell the offset is >= 0),
      so the loop turns into gathers/scatters: measured, a 16 MiB copy inside
      ``prange`` ran 8x slower that way.
    * arrays constant along the row (size 1 on the reduced axis, not written by
      the stage): one load per row, bound to a name.
    * rows along another axis (strided): the flat index, as there is no
      contiguous row to view.

    ``setup`` collects the per-row statements (the views and loads) in order.
    """

    def __init__(
        self,
        space,
        axis: int,
        index: Sequence[str],
        written: set[str],
        local: dict[str, str] | None = None,
        segment: tuple[str, str] | None = None,
    ) -> None:
        self.space, self.axis, self.index = tuple(space), axis, list(index)
        self.n = space[axis]
        self.contiguous = axis == len(space) - 1
        self.written = written
        #: Block-local arrays (see ``RowBlock``) and the part of the row walked.
        self.local = local or {}
        self.segment = segment
        self.setup: list[str] = []
        self._bound: dict[tuple[str, str, str], str] = {}
        self._used: set[str] = set()

    def load(self, array: str, shape: Sequence[int]) -> str:
        """An expression reading the element (a name for a per-row constant)."""
        if not self._spans(shape) and array not in self.written and array not in self.local:
            offset = broadcast_offset(self.space, shape, self.index)
            return self._bind(("at", array, offset), f"{array}[{offset}]", f"{array}_at")
        return self.store(array, shape)

    def store(self, array: str, shape: Sequence[int]) -> str:
        """An element expression that can be assigned to."""
        if array in self.local or (self._spans(shape) and self.contiguous):
            view = self.row_view(array, shape)
            return f"{view}[k]"
        # a row of one element (a conv's 1x1 output) is its own segment: its offset is exact
        assert self.segment is None or self.n == 1, "row segments need contiguous rows"
        return f"{array}[{broadcast_offset(self.space, shape, self.index)}]"

    def row_view(self, array: str, shape: Sequence[int], name: str | None = None) -> str:
        """The name of this row of ``array`` (which spans the contiguous row) as a 1-D view.

        A block-local array is always viewed at its own offset; with a segment the
        view covers the segment only.
        """
        start, length = self.segment or ("", str(self.n))
        if array in self.local:
            base = self.local[array]
            view = f"{array}[{base}:{base} + {length}]"
            return self._bind(("row", array, base), view, name or f"{array}_row")
        padded = (1,) * (len(self.space) - len(shape)) + tuple(shape)
        if padded == self.space:
            base = "row"  # rows are numbered in C order over the other dims
        else:
            base = broadcast_offset(self.space[:-1], padded[:-1], self.index[:-1])
            if base == "0" and not start:
                return array  # the array is one row: index it directly
            if not is_identifier(base):
                base = f"({base})"
        n = self.n
        first = f"{base} * {n}" if base != "0" else ""
        first = " + ".join(t for t in (first, start) if t) or "0"
        view = f"{array}[{first}:{first} + {length}]"
        return self._bind(("row", array, base), view, name or f"{array}_row")

    def _spans(self, shape: Sequence[int]) -> bool:
        padded = (1,) * (len(self.space) - len(shape)) + tuple(shape)
        return self.n != 1 and padded[self.axis] != 1

    def _bind(self, key: tuple[str, str, str], expr: str, name: str) -> str:
        if key not in self._bound:
            unique, i = name, 1
            while unique in self._used:
                unique, i = f"{name}{i}", i + 1
            self._used.add(unique)
            self._bound[key] = unique
            self.setup.append(f"{unique} = {expr}")
        return self._bound[key]


class _RowEmitter:
    """The passes over one row (statements at row-loop depth)."""

    #: The buffer element of the current ``k``, and the softmax's normalising factor.
    slot, inv = "buf[k]", "inv"
    #: The softmax computes in its output row (no row buffer needed).
    in_output = False
    #: The view of the next input row (direct mode in ``_task_loop``'s chunks), else None.
    next_row: str | None = None

    def __init__(self, gen, leaf, store_at, pre, post, reduce_op, writes, recompute, direct):
        self.gen, self.leaf, self.store_at = gen, leaf, store_at
        self.direct = direct
        self.pre, self.post, self.op = pre, post, reduce_op
        self.writes, self.recompute = writes, recompute
        self.pre_results = {r for op in pre for r in op.results}
        self.helpers: set[str] = set()

    def lines(self, n: int) -> list[str]:
        if isinstance(self.op, ai.LayerNormOp):
            return self._layernorm(n)
        if isinstance(self.op, ai.RMSNormOp):
            return self._rms_norm(n)
        return self._softmax(n)

    def _prologue(self) -> tuple[list[str], dict[SSAValue, str]]:
        stmts, names = self.gen.chain(self.pre, self.leaf)
        x = self.op.operands[0]
        if x not in names:  # the reduction reads a group input directly
            names[x] = self.gen.fresh(self.gen.leaf_prefix)
            stmts.append(f"{names[x]} = {self.leaf(x)}")
        return stmts, names

    def _stores(self, names: dict[SSAValue, str], early: bool) -> list[str]:
        """Stores of the written values computed in the first (``early``) or last pass."""
        out = []
        for value, array in self.writes:
            if (value in self.pre_results) == early:
                expr = names.get(value) or self.leaf(value)
                out.append(f"{self.store_at(value, array)} = {expr}")
        return out

    def _first_pass(self, n: int) -> tuple[list[str], str]:
        """The prologue for each element of the row into ``buf`` (and early stores).

        Returns the statements and the name of the row the reduction reads:
        ``buf``, or in direct mode the input's row view (set up per row).
        """
        if self.direct:
            return [], self.direct
        stmts, names = self._prologue()
        stmts += self._stores(names, early=True)
        stmts.append(f"{self.slot} = {names[self.op.operands[0]]}")
        return self._loop(n, stmts), "buf"

    def _loop(self, n: int, stmts: list[str]) -> list[str]:
        """``stmts`` for each element of the row."""
        return [f"for k in range({n}):", *_indent(stmts)]

    def _layernorm(self, n: int) -> list[str]:
        eps = literal(self.op.attr("epsilon"))
        lines, row = self._first_pass(n)
        lines += [
            f"mean = row_sum({row}) / {n}",
            f"rstd = f32(1.0 / math.sqrt(row_sq_dev({row}, mean) / {n} + {eps}))",
            "mean32 = f32(mean)",
        ]
        self.helpers |= {"row_sum", "row_sq_dev"}
        gamma, beta = self.op.operands[1], self.op.operands[2]

        def normalise(names: dict[SSAValue, str], x: str) -> str:
            g = names.get(gamma) or self.leaf(gamma)
            b = names.get(beta) or self.leaf(beta)
            return f"y = ({x} - mean32) * rstd * {g} + {b}"

        return lines + self._last_pass(n, normalise, row)

    def _rms_norm(self, n: int) -> list[str]:
        eps = literal(self.op.attr("epsilon"))
        lines, row = self._first_pass(n)
        # the sum of squares in float64 (row_sq_dev about 0): no overflow for rows of 3e38
        lines.append(f"rstd = f32(1.0 / math.sqrt(row_sq_dev({row}, 0.0) / {n} + {eps}))")
        self.helpers.add("row_sq_dev")
        gamma = self.op.operands[1]

        def normalise(names: dict[SSAValue, str], x: str) -> str:
            g = names.get(gamma) or self.leaf(gamma)
            return f"y = {x} * rstd * {g}"

        return lines + self._last_pass(n, normalise, row)

    def _softmax(self, n: int) -> list[str]:
        lines, row = self._first_pass(n)
        self.helpers.add("row_max")
        self.gen.helpers.add("exp_nonpos_f32")  # whatever the generator's own choice for ai.exp
        out = self._only_output_row()
        if out is not None:
            self.in_output = True
            # MLAS's order: the exponentials straight into the output row, scaled there
            # while it is in L1; the output's first write (a cache miss) overlaps the exp
            # arithmetic instead of forming a pass of its own (measured -7% single-threaded).
            self.helpers.add("row_exp_sum")
            if self.next_row is None:
                return lines + [
                    f"m = row_max({row})",
                    f"inv = f32(1.0 / row_exp_sum({row}, m, {out}))",
                    f"for k in range({n}):",
                    f"    {out}[k] = {out}[k] * inv",
                ]
            # The next row's max is taken in the loop that scales this one: its first
            # read (from L2 or memory) overlaps the stores (-7% single-threaded,
            # benchmarks/results/cpu-notes.md); a chunk's first row takes its own.
            self.helpers.add("row_scale_max")
            return lines + [
                "if row == row_begin:",
                f"    m = row_max({row})",
                f"inv = f32(1.0 / row_exp_sum({row}, m, {out}))",
                "if row + 1 < row_end:",
                f"    m = row_scale_max({out}, inv, {self.next_row})",
                "else:",
                f"    for k in range({n}):",
                f"        {out}[k] = {out}[k] * inv",
            ]
        if row == "buf":  # the prologue's x, replaced by its exponential
            self.helpers.add("row_exp_sum_inplace")
            total = "row_exp_sum_inplace(buf, m)"
        else:
            self.helpers.add("row_exp_sum")
            total = f"row_exp_sum({row}, m, buf)"
        lines += [f"m = row_max({row})", f"inv = f32(1.0 / {total})"]

        def normalise(names: dict[SSAValue, str], x: str) -> str:
            return f"y = {self.slot} * {self.inv}"  # buf holds exp(x - m) in either mode

        return lines + self._last_pass(n, normalise, "buf")

    def _only_output_row(self) -> str | None:
        """The row view of the one output when the softmax reads its input row directly
        and stores its result there and nothing else (no epilogue), else None."""
        if not self.direct or self.post or self.recompute or len(self.writes) != 1:
            return None
        value, array = self.writes[0]
        if value != self.op.results[0]:
            return None
        element = self.store_at(value, array)
        view = element.removesuffix("[k]")
        return view if view != element and is_identifier(view) else None

    def _last_pass(self, n: int, normalise, row: str) -> list[str]:
        """Normalise each element (``row[k]`` holds x or its exponential), then the epilogue."""
        x = self.op.operands[0]
        if self.recompute:
            stmts, names = self._prologue()
            x_name = names[x]
        else:
            stmts, names, x_name = [f"xb = {row}[k]"], {}, "xb"
            if isinstance(self.op, _NORMS) and x in self.pre_results:
                names[x] = "xb"  # the buffer holds the prologue's x itself
            if isinstance(self.op, ai.SoftmaxOp):
                stmts = []  # normalise reads buf itself
        stmts.append(normalise(names, x_name))
        names[self.op.results[0]] = "y"

        def leaf(value: SSAValue) -> str:
            return names.get(value) or self.leaf(value)

        post_stmts, post_names = self.gen.chain(self.post, leaf)
        names.update(post_names)
        stmts += post_stmts
        stmts += self._stores(names, early=False)
        return self._loop(n, stmts)


class _ElementwiseRowEmitter:
    """A row without a reduction: the elementwise ops and stores, one pass of ``length``."""

    def __init__(self, gen, leaf, store_at, ops, writes, length: str) -> None:
        self.gen, self.leaf, self.store_at = gen, leaf, store_at
        self.ops, self.writes, self.length = ops, writes, length
        self.helpers: set[str] = set()

    def lines(self) -> list[str]:
        stmts, names = self.gen.chain(self.ops, self.leaf)
        for value, array in self.writes:
            expr = names.get(value) or self.leaf(value)
            stmts.append(f"{self.store_at(value, array)} = {expr}")
        return [f"for k in range({self.length}):", *_indent(stmts)]


class _BlockEmitter(_RowEmitter):
    """Softmax over a non-last axis, for a block of ``w`` rows side by side.

    The rows of a block are adjacent in memory, so the loop over them (``j``)
    is innermost: every load and store is contiguous and the per-row max, sum
    and factor live in small arrays (``mx``, ``sm``) updated elementwise, which
    vectorises without reordering any sum. ``buf`` holds the block, ``k``-major.
    """

    inv = "mx[j]"

    def __init__(self, *args, width: int) -> None:
        super().__init__(*args)
        self.slot = f"buf[k * {width} + j]"

    def lines(self, n: int) -> list[str]:
        assert isinstance(self.op, ai.SoftmaxOp) and not self.direct
        return self._softmax(n)

    def _loop(self, n: int, stmts: list[str]) -> list[str]:
        return [f"for k in range({n}):", "    for j in range(w):", *_indent(_indent(stmts))]

    def _softmax(self, n: int) -> list[str]:
        stmts, names = self._prologue()  # and the max, in the same pass
        stmts += self._stores(names, early=True)
        x = names[self.op.operands[0]]
        stmts += [f"{self.slot} = {x}", f"mx[j] = {x} if {x} > mx[j] else mx[j]"]
        lines = [
            "for j in range(w):",
            "    mx[j] = f32(-math.inf)",
            "    sm[j] = 0.0",
            *self._loop(n, stmts),
            *self._loop(
                n, [f"e = exp_nonpos_f32({self.slot} - mx[j])", f"{self.slot} = e", "sm[j] += e"]
            ),
            "for j in range(w):",
            "    mx[j] = f32(1.0 / sm[j])",
        ]
        self.gen.helpers.add("exp_nonpos_f32")

        def normalise(names: dict[SSAValue, str], x: str) -> str:
            return f"y = {self.slot} * {self.inv}"

        return lines + self._last_pass(n, normalise, "buf")


def _indent(lines: Sequence[str]) -> list[str]:
    return [f"    {line}" for line in lines]
