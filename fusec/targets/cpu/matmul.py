"""cpu template for "matmul" groups, and the blocked kernel that conv groups share.

A group with a core op (ai.matmul here, ai.conv2d in ``conv``) runs as one
``@njit(parallel=True)`` kernel over *blocks* of the core's result: a block of
rows of one matrix of a (batched) matmul, or a block of output rows of one
image and channel group of a convolution. Each parallel task (one per thread)
owns a small workspace and takes blocks from a shared atomic counter (so a
descheduled thread delays only its current block); for each block,

1. prologue: computes the block of the A operand its rows need (an
   ``ai.layernorm`` of A and its elementwise producers) into the workspace;
2. core: one single-threaded BLAS ``sgemm`` of the block (``fusec.targets.cpu.blas``),
   after an im2col of just that block for a convolution, or a register-tiled GEMM of
   our own (``fusec.targets.cpu.microkernel``: narrow GEMMs, and constant B operands
   packed once), into the workspace (or straight into the output when nothing follows);
3. epilogue: the ops that follow the core (elementwise, at most one last-axis
   softmax/layernorm) row by row over the block, while it is still in cache,
   writing the group's results.

So no intermediate of the output's size is ever written: the scratch a launch
allocates is one workspace per task, a few blocks' worth (``ScratchPlan``,
tested with tracemalloc). Blocks are sized so that a task's workspace stays
under ``WORKSPACE_BYTES`` (L3-resident next to the other tasks') and so that
the GEMM of a block still runs near BLAS speed: a block of fewer rows repacks
the B operand more often (measured single-threaded on the benchmark machine,
2048x1024x1024: 79 GFLOP/s at 64 rows, 87 at 128, 92 at 256, 98 at 512 of 100
for one call on the whole matrix).

Producers of other operands (a chain computing B) and independent ops that do
not fit the epilogue's rows run first as stages of their own, over their own
(operand-sized) scratch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import arith
from xdsl.ir import Operation, SSAValue

from fusec.codegen import KernelSource, ScratchPlan, io_specs
from fusec.codegen.expr import (
    ExprGenerator,
    broadcast_offset,
    error_at,
    leaf_shapes,
    shape_of,
)
from fusec.codegen.layout import LAYOUT_OPS, is_layout, numpy_expression
from fusec.dialect import ops as ai
from fusec.targets.cpu import host
from fusec.targets.cpu.common import (
    PARALLEL_MIN_ELEMENTS,
    REDUCE_OPS,
    Buffers,
    Stage,
    ancestors,
    assemble,
    body_ops,
    check_elementwise,
    depends_on,
    input_names,
    outputs_of,
    scratch_lines,
    single_core,
    values_needed_after,
)
from fusec.targets.cpu.pointwise import pointwise_stage
from fusec.targets.cpu.row_reduce import (
    RowBlock,
    RowParts,
    row_reduce_stage,
    row_statements,
    the_reduction,
)

#: Most bytes of one task's workspace (its A block, C block, im2col columns, row buffer).
WORKSPACE_BYTES = 4 << 20
#: A matmul runs in ``gemm_nn`` when K or N is at most this (and the operands suit it):
#: there OpenBLAS's packing on every call costs most (single-threaded GFLOP/s, gemm_nn
#: against sgemm: 256x512x64 113 / 93, 256x64x512 117 / 98, 64x256x64 113 / 96). With K
#: and N in the hundreds the two are level (MLP 1024x512x2048 and LN -> matmul
#: 2048x1024x1024, whole graphs: within 2% either way, benchmarks/results/cpu-notes.md).
NN_MAX_NARROW = 128
#: Most bytes of a task's workspace when the blocks run in ``gemm_nn`` (which packs
#: nothing, so small blocks cost no repacking): A and C blocks that stay in L2.
NN_WORKSPACE_BYTES = 512 << 10
#: Rows of a matmul block: at most, and at least when the workspace allows.
MAX_ROWS, MIN_ROWS = 512, 32
#: Split the result into at least this many blocks when the blocks stay >= MIN_ROWS rows:
#: one per thread of Numba's pool (at least 2), so that every thread gets work, and no
#: more, since every block packs its rows of A and its columns of B again. On the 2-core
#: benchmark machine, MLP 1024x512x2048: 2 blocks of 512 rows against 4 of 256, 1 thread
#: 44.9 vs 46.2 ms CPU, 2 threads 24.6 (22.3) vs 25.6 (23.0) ms median (min), load ~1;
#: LN -> matmul -> softmax at 256 rows, 1 thread: 7.1 vs 8.3 ms (cpu-notes.md).
MIN_BLOCKS = max(2, host.numba_threads())
#: Most rows of a block when B is a constant packed once (``gemm_packed``): blocks
#: this small repack nothing and keep A's and C's blocks in L2 (MLP 1024x512x2048 at
#: 2 threads, both matmuls: 48 rows 20.7 ms, 96 rows 21.4, by median; cpu-notes.md).
PACKED_ROWS = 48


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "matmul", ai.MatmulOp, MatmulBlocks)


# ------------------------------------------------------------------ the blocked kernel


@dataclass
class Workspace:
    """A task's float32 buffers, carved out of one array ``ws`` (``tasks`` x ``size``)."""

    buffers: list[tuple[str, int]] = field(default_factory=list)

    def add(self, name: str, floats: int) -> str:
        self.buffers.append((name, floats))
        return name

    @property
    def size(self) -> int:
        return max(1, sum(n for _, n in self.buffers))

    def views(self) -> list[str]:
        """Lines binding each buffer to its part of this task's (``t``) slice of ``ws``."""
        lines, offset = [], 0
        for name, floats in self.buffers:
            lines.append(
                f"{name} = ws[t * {self.size} + {offset}:t * {self.size} + {offset + floats}]"
            )
            offset += floats
        return lines


@dataclass
class EpilogueRows:
    """How the epilogue walks a block: loop lines (setting ``row``, ``i<d>`` and the
    local offsets), the statements' indent, the row space and its ``RowBlock``."""

    loops: list[str]
    indent: str
    space: tuple[int, ...]
    block: RowBlock


class BlockedCore:
    """What a core op contributes to the blocked kernel (see ``MatmulBlocks``).

    ``count`` blocks, numbered ``blk``; ``decode()`` sets the block's variables,
    ``compute()`` produces its C block, ``epilogue_rows()`` walks it.
    """

    op: Operation
    count: int
    #: The group's arrays by value (the names ``compute`` reads them by).
    reads: dict[SSAValue, str]
    #: Row helpers (``ROW_HELPERS``) and expression helpers (``fusec.codegen.expr``)
    #: that ``compute`` calls.
    row_helpers: frozenset[str] = frozenset()
    expr_helpers: frozenset[str] = frozenset()
    #: Bytes of operand copies ``launch_lines`` makes (``ScratchPlan.operand_bytes``).
    operand_bytes = 0
    #: Operands (by index) ``compute`` can read through a swap of their last two dims
    #: (BLAS's transpose flag), and those the group gives it that way (``transposed_views``).
    transposable: frozenset[int] = frozenset()
    transposed: frozenset[int] = frozenset()
    #: Import lines the generated module needs for ``launch_lines``' helpers.
    imports: tuple[str, ...] = ()

    @staticmethod
    def local_result(op: Operation) -> bool:
        """Whether the core computes its result in the workspace even when the group
        yields it (its blocks are laid out unlike the result; the epilogue copies)."""
        return False

    def launch_lines(self) -> list[str]:
        """numpy lines ``launch`` runs before the kernel (operands in another layout)."""
        return []

    def arrays(self) -> list[str]:
        """The arrays ``compute`` reads (besides the workspace)."""
        return [self.reads[v] for v in self.op.operands if v in self.reads]

    def decode(self) -> list[str]:
        raise NotImplementedError

    def compute(self) -> list[str]:
        raise NotImplementedError

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """The loop over the block's result rows; ``shapes``: the epilogue's operand shapes,
        ``reduces``: whether it holds a row reduction (which needs whole rows)."""
        raise NotImplementedError

    def prologue_rows(self) -> EpilogueRows:
        """The loop over the rows of A a block needs (cores with ``block_prologue`` only)."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


#: Builds a core: (op, arrays of values, the workspace, the A block's array or None
#: when A has no per-block prologue, the C block's array and whether it is block-local).
CoreFactory = Callable[..., BlockedCore]


def generate_core_group(
    fused_op: ai.FusedOp, name: str, kind: str, core_type: type, make_core: CoreFactory
) -> KernelSource:
    """Full-size stages for what cannot go per block, then the blocked kernel."""
    core_op, views, _, (before, after) = core_segments(fused_op, core_type)
    outputs = outputs_of(fused_op)
    yielded = [v for v, _ in outputs]
    gen = ExprGenerator(fast_exp=True)
    buffers = Buffers(reads=dict(input_names(fused_op)))
    stages: list[Stage] = []
    swapped = transposed_views(core_op, views, getattr(make_core, "transposable", frozenset()))
    views = [op for op in views if op not in swapped.values()]
    launch, view_bytes = view_lines(views, buffers)
    for op in swapped.values():  # the core reads the view's source as it is
        buffers.reads[op.results[0]] = buffers.reads[op.operands[0]]

    # The A operand's producers run per block when the core can take them and
    # nothing but the core (or a group result) needs their values.
    a_chain: list[Operation] = []
    if before and before[0][0] == "prologue0" and getattr(make_core, "block_prologue", False):
        chain = before[0][1]
        later = [op for _, seg in before[1:] for op in seg] + after
        needed = values_needed_after(chain, later, [])
        if not needed and not (isinstance(core_op, ai.MatmulOp) and core_op.attr("transpose_a")):
            a_chain = chain
            before = before[1:]

    def destinations(values: Sequence[SSAValue]) -> list[tuple[SSAValue, str]]:
        """Where each value goes: all its output arrays, or one new full-size scratch buffer."""
        writes: list[tuple[SSAValue, str]] = []
        for value in values:
            arrays = [array for v, array in outputs if v == value]
            if not arrays:
                arrays = [buffers.add_scratch(value)]
            else:
                buffers.reads[value] = arrays[0]
            writes.extend((value, array) for array in arrays)
        return writes

    for i, (label, segment) in enumerate(before):
        later = [op for _, seg in before[i + 1 :] for op in seg] + a_chain + [core_op, *after]
        writes = destinations(values_needed_after(segment, later, yielded))
        stages.append(full_stage(f"{name}_{label}", gen, segment, buffers.reads, writes))
        launch.append(stages[-1].call())

    workspace = Workspace()
    a_array = workspace.add("abuf", 0) if a_chain else None  # sized by the core
    core_value = core_op.results[0]
    c_outputs = [array for v, array in outputs if v == core_value]
    c_local = not c_outputs or getattr(make_core, "local_result", BlockedCore.local_result)(core_op)
    c_array = "cbuf" if c_local else c_outputs[0]
    buffers.reads[core_value] = c_array
    whole_rows = any(isinstance(op, REDUCE_OPS) for op in after)
    options: dict[str, object] = {}
    if getattr(make_core, "column_tiles", False):
        options["whole_rows"] = whole_rows
    if getattr(make_core, "takes_constants", False):
        options["constants"] = constant_inputs(fused_op)
    core = make_core(core_op, buffers.reads, workspace, a_array, c_array, c_local, **options)
    core.transposed = frozenset(swapped)

    body: list[str] = []
    helpers: set[str] = set(core.row_helpers)
    gen.helpers |= core.expr_helpers
    params: list[str] = []
    if a_chain:
        a_value = core_op.operands[0]
        writes = [(a_value, "abuf")] + [(v, a) for v, a in outputs if v in _results(a_chain)]
        rows = core.prologue_rows()
        parts = row_statements(gen, a_chain, buffers.reads, writes, rows.space, rows.block)
        body += _row_buffer(workspace, parts, rows.space)
        body += rows.loops + _indented(rows.indent, parts.lines)
        helpers |= parts.helpers
        params += parts.params
    body += core.compute()
    epilogue_writes = [
        (v, a) for v, a in outputs if v in _results(after) or (v == core_value and a != c_array)
    ]
    if after or epilogue_writes:
        shapes = [shape_of(v) for v, _ in epilogue_writes]
        shapes += [s for s in leaf_shapes(after).values()] + [shape_of(v) for v in _results(after)]
        reduces = any(isinstance(op, REDUCE_OPS) for op in after)
        rows = core.epilogue_rows(shapes, reduces)
        parts = row_statements(gen, after, buffers.reads, epilogue_writes, rows.space, rows.block)
        body += _row_buffer(workspace, parts, rows.space)
        body += rows.loops + _indented(rows.indent, parts.lines)
        helpers |= parts.helpers
        params += parts.params
    params += core.arrays()  # not A when its prologue runs per block
    if not c_local:
        params.append(c_array)

    kernel_params = [p for p in dict.fromkeys(params) if p not in workspace_names(workspace)]
    kernel_body = [
        f"for t in numba.prange(ws.size // {workspace.size}):",
        *(f"    {line}" for line in workspace.views()),
        "    blk = next_block(counter)",
        f"    while blk < {core.count}:",
        *(f"        {line}" for line in core.decode() + body),
        "        blk = next_block(counter)",
    ]
    result_elements = math.prod(shape_of(core_op.results[0]))
    stage = Stage(
        f"{name}_blocked",
        [*kernel_params, "ws", "counter"],
        kernel_body,
        comment=core.describe(),
        helpers=helpers,
        parallel=core.count > 1 and result_elements >= PARALLEL_MIN_ELEMENTS,
    )
    stages.append(stage)
    launch += core.launch_lines()
    launch += [
        f"tasks = min(num_threads(), {core.count})" if stage.parallel else "tasks = 1",
        f"ws = workspace(tasks * {workspace.size})",
        "counter = np.zeros(1, dtype=np.int64)",
        stage.call(),
    ]
    for value, array in outputs:  # a group input (or a view of one) yielded as it is
        if value in fused_op.block.args or isinstance(value.owner, LAYOUT_OPS):
            launch.append(f"{array}[:] = {buffers.reads[value]}")

    from fusec.targets.cpu import blas as cpu_blas

    launch_body = scratch_lines(buffers) + launch
    calls_blas = any("sgemm" in line for line in stage.body)
    if calls_blas and cpu_blas.mode().endswith("global"):  # no per-thread BLAS thread count
        launch_body = ["with cpu_blas.single_threaded():", *(f"    {s}" for s in launch_body)]
    notes = [
        f"blocked: {core.count} blocks, {workspace.size * 4} bytes of workspace per task",
    ]
    source = assemble(
        fused_op,
        gen,
        stages,
        launch_body,
        notes=notes,
        imports=[
            cpu_blas.import_line(),
            "from fusec.targets.cpu import blas as cpu_blas",
            "from fusec.targets.cpu.tasks import num_threads",
            "from fusec.targets.cpu.buffers import workspace",
            *core.imports,
        ],
    )
    inputs, outs = io_specs(fused_op)
    scratch = ScratchPlan(
        full_bytes=4 * sum(size for _, size in buffers.scratch) + view_bytes,
        per_task_bytes=4 * workspace.size,
        max_tasks=core.count,
        operand_bytes=core.operand_bytes,
    )
    prepared = getattr(core, "prepared", ())
    return KernelSource(
        name, kind, "cpu", source, inputs, outs, scratch=scratch, prepared_inputs=prepared
    )


def constant_inputs(fused_op: ai.FusedOp) -> dict[str, int]:
    """The group's inputs (name -> index) that are ``arith.constant`` values read by one
    op of the group: those a kernel may take in a layout of its own (``prepared_inputs``)."""
    names = input_names(fused_op)
    return {
        names[arg]: i
        for i, (arg, operand) in enumerate(zip(fused_op.block.args, fused_op.operands, strict=True))
        if isinstance(operand.owner, arith.ConstantOp) and len(list(arg.uses)) == 1
    }


def view_lines(views: Sequence[Operation], buffers: Buffers) -> tuple[list[str], int]:
    """numpy lines computing the group's layout ops first, and the bytes they allocate.

    Every result becomes a contiguous flat float32 array (the njit loops index
    flat arrays, and sgemm takes row-major operands): a copy of the operand's
    size where the layout op is a strided view.
    """
    lines: list[str] = []
    shaped: dict[SSAValue, str] = {}
    allocated = 0
    for index, op in enumerate(views):
        args = [
            shaped[v] if v in shaped else f"{buffers.reads[v]}.reshape({shape_of(v)!r})"
            for v in op.operands
        ]
        name = f"v{index}"
        lines.append(f"{name} = {numpy_expression(op, args)}")
        lines.append(f"{name}f = np.ascontiguousarray({name}, dtype=np.float32).reshape(-1)")
        result = op.results[0]
        shaped[result] = name
        buffers.reads[result] = f"{name}f"
        allocated += 4 * math.prod(shape_of(result))
    return lines, allocated


def transposed_views(
    core_op: Operation, views: Sequence[Operation], transposable: frozenset[int]
) -> dict[int, Operation]:
    """The layout ops (by core operand) that only swap the last two dims of an operand
    the core can read transposed, used by nothing else: no copy of them is made.

    The swap's source must reach the kernel as a contiguous flat array: a group
    input, or the result of a layout op that ``view_lines`` makes contiguous.
    """
    swapped: dict[int, Operation] = {}
    for index in sorted(transposable):
        op = core_op.operands[index].owner
        if not isinstance(op, ai.TransposeOp) or op not in views:
            continue
        perm = [int(p) for p in op.attr("perm")]
        rank = len(perm)
        if rank < 2 or perm != [*range(rank - 2), rank - 1, rank - 2]:
            continue
        if sum(1 for _ in op.results[0].uses) != 1:
            continue
        swapped[index] = op
    return swapped


def workspace_names(workspace: Workspace) -> set[str]:
    return {name for name, _ in workspace.buffers}


def _row_buffer(workspace: Workspace, parts: RowParts, space: Sequence[int]) -> list[str]:
    """The line binding the row buffer ``buf`` (one row of ``space``) when ``parts`` need it;
    the workspace's ``rowbuf`` is as long as the longest row."""
    if not parts.needs_buffer:
        return []
    for i, (name, floats) in enumerate(workspace.buffers):
        if name == "rowbuf":
            workspace.buffers[i] = (name, max(floats, space[-1]))
            break
    else:
        workspace.add("rowbuf", space[-1])
    return [f"buf = rowbuf[:{space[-1]}]"]


def _results(ops: Sequence[Operation]) -> set[SSAValue]:
    return {r for op in ops for r in op.results}


def _indented(indent: str, lines: Sequence[str]) -> list[str]:
    return [f"{indent}{line}" if line else "" for line in lines]


def core_segments(
    fused_op: ai.FusedOp, core_type: type
) -> tuple[
    Operation,
    list[Operation],
    list[Operation],
    tuple[list[tuple[str, list[Operation]]], list[Operation]],
]:
    """A core group's core op, its layout ops (views, which must come before the core),
    its other ops, and those split into the stages before the core and the epilogue
    (``split_segments``)."""
    ops = body_ops(fused_op)
    core = single_core(fused_op, core_type)
    views = [op for op in ops if is_layout(op)]
    late = [op for op in views if op in depends_on(ops, core.results)]
    if late:
        raise error_at(late[0], "follows the core of its group: a layout op must come before it")
    ops = [op for op in ops if not is_layout(op)]
    return core, views, ops, split_segments(ops, core)


def split_segments(
    ops: Sequence[Operation], core: Operation
) -> tuple[list[tuple[str, list[Operation]]], list[Operation]]:
    """The stages before the core (labelled) and the ops of the epilogue.

    Each core operand's producers form one prologue (A's and B's chains live in
    different iteration spaces). The epilogue holds the ops that depend on the
    core, plus the independent ops whose shapes fit its space; other independent
    ops get a stage of their own, run after the prologues that run in full.
    """
    before: list[tuple[str, list[Operation]]] = []
    done: set[Operation] = set()
    for i, operand in enumerate(core.operands):
        chain = ancestors(ops, [operand]) - done
        if chain:
            before.append((f"prologue{i}", [op for op in ops if op in chain]))
            done |= chain
    post = depends_on(ops, core.results)
    side = [op for op in ops if op is not core and op not in done and op not in post]
    space = _space([r for op in ops if op in post for r in op.results])
    fits = [op for op in side if space is not None and _fits(op, space)]
    rest = [op for op in side if op not in fits]
    if rest:
        before.append(("side", rest))
    after = [op for op in ops if op in post or op in fits]
    return before, after


def _space(values: Sequence[SSAValue]) -> tuple[int, ...] | None:
    if not values:
        return None
    return tuple(np.broadcast_shapes(*(shape_of(v) for v in values)))


def _fits(op: Operation, space: tuple[int, ...]) -> bool:
    try:
        return all(tuple(np.broadcast_shapes(space, shape_of(r))) == space for r in op.results)
    except ValueError:
        return False


def full_stage(
    fn_name: str,
    gen: ExprGenerator,
    ops: Sequence[Operation],
    reads: dict[SSAValue, str],
    writes: list[tuple[SSAValue, str]],
) -> Stage:
    """A row-reduce stage when ``ops`` hold a layernorm/softmax, else a pointwise one."""
    if any(isinstance(op, REDUCE_OPS) for op in ops):
        reduce_op = the_reduction(ops[0], ops)
        return row_reduce_stage(fn_name, gen, ops, reduce_op, reads, writes)
    check_elementwise(ops)
    if not writes:
        raise error_at(ops[0], "computes a value nothing uses")
    return pointwise_stage(fn_name, gen, ops, reads, writes)


def decode_row_block(
    blocks_per_matrix: int, rows: int, total: int, batch: Sequence[int]
) -> list[str]:
    """Lines that decode block ``blk`` of a batched row-blocked core: its matrix ``b``,
    its rows ``r0:r1`` (``rows`` a block, ``total`` a matrix) and ``b``'s index ``bi<d>``
    along each batch dim."""
    lines = [
        f"b = blk // {blocks_per_matrix}",
        f"r0 = blk % {blocks_per_matrix} * {rows}",
        f"r1 = min(r0 + {rows}, {total})",
    ]
    stride = math.prod(batch)
    for d, size in enumerate(batch):
        stride //= size
        expr = "b" if stride == 1 else f"b // {stride}"
        lines.append(f"bi{d} = {expr}" + (f" % {size}" if d > 0 else ""))
    return lines


def row_loop(space: Sequence[int], rows: str) -> list[str]:
    """The head of a loop over rows ``rows`` (a ``range`` argument list) of ``space``:
    ``row`` and the index ``i<d>`` of each dim but the last."""
    lines = [f"for row in range({rows}):"]
    dims = len(space) - 1
    stride = math.prod(space[:-1])
    for d in range(dims):
        stride //= space[d]
        expr = "row" if stride == 1 else f"row // {stride}"
        if d > 0:
            expr = f"{expr} % {space[d]}"
        lines.append(f"    i{d} = {expr}")
    return lines


# ------------------------------------------------------------------ matmul


class MatmulBlocks(BlockedCore):
    """Tiles of rows (and columns) of one matrix of a (batched, broadcast) ``ai.matmul``.

    The matmul is taken as (batch..., M, K) @ (batch..., K, N) -> (batch..., M, N):
    a 1-D A is one row (M = 1), a 1-D B one column (N = 1, and then a block
    is a whole matrix, so that the epilogue's rows, along M, are whole).
    Block ``blk`` is batch ``b = blk // (nrb * ncb)``, rows ``r0 <= i < r1`` and,
    when the columns are split too (``ncb`` > 1), columns ``c0 <= j < c1``.

    A block's GEMM is ``gemm_nn`` (``fusec.targets.cpu.microkernel``: register tiles,
    B read in place) when K or N is small (``NN_MAX_NARROW``), A and B are row-major
    and N is whole vectors of its tiles; its blocks are then small
    (``NN_WORKSPACE_BYTES``). A wider GEMM whose B is a constant read by nothing else
    (a layer's weights) runs in ``gemm_packed``, on B laid out in column strips once by
    the ``Program`` (``prepared_inputs``), in blocks of up to ``PACKED_ROWS`` rows whose A
    and C stay in L2 (single-threaded, MLP 1024x512x2048: 41.3 -> 38.5 ms for both
    matmuls, the two GEMMs at 110 and 115 GFLOP/s against OpenBLAS's 107 and 105;
    cpu-notes.md). Otherwise it is OpenBLAS's
    sgemm, which packs the block's rows of A and its columns of B again on every
    call, so the tiles are chosen to pack the fewest elements per multiply-add,
    ``1/rows + 1/cols`` (``_tiles``): a short, wide result (few rows, a large B) is
    split by columns, so that each thread packs only its part of B.
    """

    block_prologue = True
    column_tiles = True
    #: Takes the group's constant inputs (``constant_inputs``): a constant B is packed.
    takes_constants = True

    def __init__(
        self,
        op,
        reads,
        workspace: Workspace,
        a_array,
        c_array,
        c_local,
        whole_rows=True,
        constants: Mapping[str, int] | None = None,
    ) -> None:
        self.op, self.reads = op, reads
        self.a_array, self.c_array, self.c_local = a_array, c_array, c_local
        a_shape, b_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
        self.result = shape_of(op.results[0])
        self.ta, self.tb = bool(op.attr("transpose_a")), bool(op.attr("transpose_b"))
        a2 = a_shape if len(a_shape) > 1 else (1, a_shape[0])
        b2 = b_shape if len(b_shape) > 1 else (b_shape[0], 1)
        self.m, self.k = (a2[-1], a2[-2]) if self.ta else (a2[-2], a2[-1])
        self.n = b2[-2] if self.tb else b2[-1]
        self.a_batch, self.b_batch = a2[:-2], b2[:-2]
        self.batch = tuple(np.broadcast_shapes(self.a_batch, self.b_batch))
        self.b_is_vector = len(b_shape) == 1
        a_row_major = bool(a_array) or not self.ta  # a prologue writes row-major blocks
        narrow = min(self.k, self.n) <= NN_MAX_NARROW
        self.nn = narrow and a_row_major and not (self.tb or self.b_is_vector) and host.fits(self.n)
        b_input = (constants or {}).get(reads[op.operands[1]])
        self.packed = (
            not self.nn
            and b_input is not None
            and a_row_major
            and not (self.b_batch or self.b_is_vector)
            and host.packs(self.n)
        )
        self.prepared = ((b_input, "strips_t" if self.tb else "strips"),) if self.packed else ()
        if self.nn:
            self.imports = ("from fusec.targets.cpu.microkernel import gemm_nn",)
        if self.packed:
            self.imports = ("from fusec.targets.cpu.microkernel import gemm_packed",)
        split_columns = not (whole_rows or a_array or self.b_is_vector)
        row_blocks = math.prod(self.batch) * math.ceil(self.m / MIN_ROWS)
        if (self.nn or self.packed) and row_blocks >= MIN_BLOCKS:
            split_columns = False  # no packing to share out: row blocks, when there are enough
        self.mb, self.nb = self._tiles(a_array is not None, c_local, split_columns)
        self.nrb, self.ncb = math.ceil(self.m / self.mb), math.ceil(self.n / self.nb)
        self.count = math.prod(self.batch) * self.nrb * self.ncb
        if a_array:
            workspace.buffers[[n for n, _ in workspace.buffers].index(a_array)] = (
                a_array,
                self.mb * self.k,
            )
        if c_local:
            workspace.add(c_array, self.mb * self.nb)

    def _rows(self, workspace_row_floats: int, tiles_per_matrix: int = 1) -> int:
        if self.b_is_vector:
            return self.m  # the epilogue's rows run along M: whole matrices
        budget = NN_WORKSPACE_BYTES if self.nn or self.packed else WORKSPACE_BYTES
        fit = budget // (4 * max(1, workspace_row_floats))
        mb = min(self.m, PACKED_ROWS if self.packed else MAX_ROWS, max(MIN_ROWS, fit))
        tiles = math.prod(self.batch) * tiles_per_matrix
        if tiles < MIN_BLOCKS:  # split further so that every thread has blocks
            mb = min(mb, max(MIN_ROWS, math.ceil(self.m * tiles / MIN_BLOCKS)))
        return max(1, min(mb, self.m))

    def _tiles(self, a_rows: bool, c_local: bool, split_columns: bool) -> tuple[int, int]:
        """Rows and columns of a tile: for each split of the columns into up to
        ``MIN_BLOCKS`` parts, the rows ``_rows`` gives; the split packing the fewest
        elements of A and B per multiply-add (``1/rows + 1/cols``) wins, fewer column
        parts on a tie. A packed B (``gemm_packed``) is packed nowhere per block: there
        the columns are split only as far as needed for ``MIN_BLOCKS`` blocks."""
        best: tuple[float, int, int] | None = None
        for parts in range(1, (MIN_BLOCKS if split_columns else 1) + 1):
            unit = host.STRIP if self.packed else 16  # whole strips, or 64-byte lines
            nb = min(self.n, -(-math.ceil(self.n / parts) // unit) * unit)
            if parts > 1 and nb == self.n:
                break
            ncb = math.ceil(self.n / nb)
            mb = self._rows((self.k if a_rows else 0) + nb * c_local, ncb)
            rows = self.m / math.ceil(self.m / mb)  # the mean tile, ragged ones included
            cost = 1 / rows + ncb / self.n
            if self.packed:
                blocks = math.prod(self.batch) * math.ceil(self.m / mb) * ncb
                cost = max(0, MIN_BLOCKS - blocks)
            if best is None or cost < best[0] - 1e-12:
                best = (cost, mb, nb)
        assert best is not None
        return best[1], best[2]

    def describe(self) -> str:
        batch = "x".join(map(str, self.batch))
        columns = f" x {self.nb} columns" if self.ncb > 1 else ""
        return (
            f"matmul {batch + ' x ' if batch else ''}({self.m}x{self.k} @ {self.k}x{self.n}) in "
            f"{self.count} blocks of up to {self.mb} rows{columns}: prologue, "
            f"{self._gemm()}, epilogue per block"
        )

    def _gemm(self) -> str:
        if self.packed:
            return "gemm_packed (B packed once)"
        return "gemm_nn" if self.nn else "sgemm"

    def decode(self) -> list[str]:
        if self.ncb == 1:
            return decode_row_block(self.nrb, self.mb, self.m, self.batch)
        tiles = self.nrb * self.ncb  # a row block's column tiles are consecutive blocks
        lines = decode_row_block(tiles, self.mb, self.m, self.batch)
        lines[1] = f"r0 = blk % {tiles} // {self.ncb} * {self.mb}"
        return [
            *lines,
            f"c0 = blk % {self.ncb} * {self.nb}",
            f"c1 = min(c0 + {self.nb}, {self.n})",
        ]

    def _batch_index(self, shape: Sequence[int]) -> str:
        """The matrix number, in an operand of batch shape ``shape``, of batch ``b``."""
        index = [f"bi{d}" for d in range(len(self.batch))]
        return broadcast_offset(self.batch, shape, index)

    def prologue_rows(self) -> EpilogueRows:
        """The rows of A the block needs, into ``abuf``: A's own row space."""
        a_shape = shape_of(self.op.operands[0])
        space = a_shape if len(a_shape) > 1 else (1, a_shape[0])
        first = self._batch_index(self.a_batch)
        first = f"({first}) * {self.m}" if first != "0" else ""
        start = " + ".join(t for t in (first, "r0") if t)
        end = " + ".join(t for t in (first, "r1") if t)
        loops = row_loop(space, f"{start}, {end}")
        loops.append(f"    la = (row - ({start})) * {self.k}")
        reshape = None
        if len(a_shape) == 1:
            reshape = _insert_unit(1, 0)  # a 1-D A is one row
        return EpilogueRows(loops, "    ", tuple(space), RowBlock({"abuf": "la"}, None, reshape))

    def compute(self) -> list[str]:
        m, k, n = self.m, self.k, self.n
        if self.a_array:
            a, a_off, lda, ta = self.a_array, "0", k, 0
        else:
            a = self.reads[self.op.operands[0]]
            base = self._batch_index(self.a_batch)
            base = f"({base}) * {m * k} + " if base != "0" else ""
            a_off = f"{base}r0" if self.ta else f"{base}r0 * {k}"
            lda, ta = (m if self.ta else k), int(self.ta)
        b = self.reads[self.op.operands[1]]
        b_off = self._batch_index(self.b_batch)
        b_off = f"({b_off}) * {k * n}" if b_off != "0" else "0"
        ldb = 1 if self.b_is_vector else (k if self.tb else n)
        c_off = "0" if self.c_local else f"(b * {m} + r0) * {n}"
        cols, ldc = str(n), n
        if self.ncb > 1:  # this tile's columns: B's from column c0 (row c0 of a B^T)
            b_off = f"{b_off} + c0{f' * {k}' if self.tb else ''}"
            c_off = c_off if self.c_local else f"{c_off} + c0"
            cols, ldc = "c1 - c0", (self.nb if self.c_local else n)
        if self.packed:  # strip s of B starts at s * STRIP * k: column c0 at c0 * k
            b_off = f"c0 * {k}" if self.ncb > 1 else "0"
            a_args, c_args = f"{a}, {a_off}, {lda}", f"{self.c_array}, {c_off}, {ldc}"
            return [f"gemm_packed(r1 - r0, {cols}, {k}, {a_args}, {b}, {b_off}, {c_args})"]
        operands = f"{a}, {a_off}, {lda}, {b}, {b_off}, {ldb}, {self.c_array}, {c_off}, {ldc}"
        if self.nn:
            return [f"gemm_nn(r1 - r0, {cols}, {k}, {operands})"]
        return [
            "prev = threads_begin(1)",
            f"sgemm({ta}, {int(self.tb)}, r1 - r0, {cols}, {k}, {operands})",
            "threads_end(prev)",
        ]

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """The block's rows of the result: numbers ``q0 <= row < q1`` of its row space."""
        space = self.result if self.result else (1,)
        length = space[-1]
        q0 = f"(b * {self.m} + r0) * {self.n} // {length}"
        q1 = f"(b * {self.m} + r1) * {self.n} // {length}"
        loops = [f"q0 = {q0}", *row_loop(space, f"q0, {q1}")]
        local = {}
        if self.c_local:
            loops.append(f"    lc = (row - q0) * {self.nb if self.ncb > 1 else length}")
            local[self.c_array] = "lc"
        reshape = None if self.result else (lambda shape: (1,))
        segment = ("c0", "c1 - c0") if self.ncb > 1 else None
        return EpilogueRows(loops, "    ", tuple(space), RowBlock(local, segment, reshape))


def _insert_unit(rank: int, where: int) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """Map shapes of a rank-``rank`` space into the space with a unit dim added at ``where``."""

    def reshape(shape: tuple[int, ...]) -> tuple[int, ...]:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        cut = len(padded) + where + 1 if where < 0 else where
        return padded[:cut] + (1,) + padded[cut:]

    return reshape
