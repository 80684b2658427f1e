"""The blocked kernel of the cpu kernel layer: a core op's result in blocks, each block's
prologue, core and epilogue run by one task while the block is in cache.

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

A template gives the core: a ``BlockedCore`` (how many blocks, how one is decoded and
computed, how its epilogue rows are walked); ``generate_core_group`` builds the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.ir import Operation, SSAValue

from fusec.codegen import CompiledEntry, KernelSource, ScratchPlan, io_specs
from fusec.codegen.expr import ExprGenerator, leaf_shapes, shape_of
from fusec.dialect import ops as ai
from fusec.dialect.work import op_flops
from fusec.ir.constants import is_constant
from fusec.targets.cpu import abi, host
from fusec.targets.cpu.common import (
    PARALLEL_MIN_ELEMENTS,
    PARALLEL_MIN_FLOPS,
    REDUCE_OPS,
    Buffers,
    Stage,
    assemble,
    check_no_block_scales,
    input_names,
    outputs_of,
    scratch_lines,
    values_needed_after,
)
from fusec.targets.cpu.entry import EntryScratch, blocked_launch
from fusec.targets.cpu.entry import passthrough_lines as entry_passthrough
from fusec.targets.cpu.entry import view_lines as entry_view_lines
from fusec.targets.cpu.rows import RowBlock, RowParts, row_statements
from fusec.targets.cpu.segments import (
    core_segments,
    passthrough_lines,
    stages_before,
    view_lines,
)

#: Split the result into at least this many blocks when the blocks stay >= MIN_ROWS rows:
#: one per thread of Numba's pool (at least 2), so that every thread gets work, and no
#: more, since every block packs its rows of A and its columns of B again. On the 2-core
#: benchmark machine, MLP 1024x512x2048: 2 blocks of 512 rows against 4 of 256, 1 thread
#: 44.9 vs 46.2 ms CPU, 2 threads 24.6 (22.3) vs 25.6 (23.0) ms median (min), load ~1;
#: LN -> matmul -> softmax at 256 rows, 1 thread: 7.1 vs 8.3 ms (cpu-notes.md).
MIN_BLOCKS = max(2, host.numba_threads())


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


@dataclass(frozen=True)
class CoreArgs:
    """What ``generate_core_group`` gives a core's factory (``CoreFactory``)."""

    #: The core op.
    op: Operation
    #: The group's arrays by value (the names ``compute`` reads them by).
    reads: dict[SSAValue, str]
    #: The task's workspace, to which the core adds its buffers.
    workspace: Workspace
    #: The A block's array when A has a per-block prologue (``abuf``, sized by the
    #: core), else None.
    a_array: str | None
    #: The C block's array, and whether it is block-local (in the workspace) rather than
    #: the group's result.
    c_array: str
    c_local: bool
    #: Whether the epilogue holds a row reduction (which needs whole rows of C).
    whole_rows: bool
    #: The group's constant inputs (``constant_inputs``): name -> input index.
    constants: Mapping[str, int]

    def constant_operand(self, index: int) -> int | None:
        """The input index of the core's operand ``index`` when it is one of the group's
        constant inputs (a weight a kernel may take in a layout of its own), else None."""
        return self.constants.get(self.reads.get(self.op.operands[index], ""))


class BlockedCore:
    """What a core op contributes to the blocked kernel (see ``MatmulBlocks``).

    ``count`` blocks, numbered ``blk``; ``decode()`` sets the block's variables,
    ``compute()`` produces its C block, ``epilogue_rows()`` walks it.
    """

    op: Operation
    count: int
    #: The group's arrays by value (the names ``compute`` reads them by).
    reads: dict[SSAValue, str]
    #: ``CoreArgs``' arrays: A's block (or None) and C's, which may be block-local.
    a_array: str | None
    c_array: str
    c_local: bool
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
    #: Operands (by index) the core reads through strides from the source of their layout
    #: chain (``strided_views``), which is then not copied.
    strided: Mapping[int, Sequence[Operation]] = {}
    #: Import lines the generated module needs for ``launch_lines``' helpers.
    imports: tuple[str, ...] = ()
    #: Sources of functions ``compute`` calls, defined in the module under the helper
    #: decorator (plain njit functions: kept out of the parallel kernel, whose parfor
    #: passes cost compile time on long straight-line code).
    definitions: tuple[str, ...] = ()
    #: The first op of A's per-block prologue when the core computes it itself into
    #: ``abuf`` (``prologue_core_lines``: a 1x1 expansion by a GEMM), else None.
    prologue_core: Operation | None = None

    def __init__(self, args: CoreArgs) -> None:
        self.op, self.reads = args.op, args.reads
        self.a_array, self.c_array, self.c_local = args.a_array, args.c_array, args.c_local

    @staticmethod
    def strided_views(core_op: Operation, views: Sequence[Operation]) -> dict[int, list[Operation]]:
        """The layout chains (by core operand, source first) that ``compute`` reads with
        strides from the chain's source, a group input: none by default."""
        return {}

    @staticmethod
    def local_result(op: Operation) -> bool:
        """Whether the core computes its result in the workspace even when the group
        yields it (its blocks are laid out unlike the result; the epilogue copies)."""
        return False

    def launch_lines(self) -> list[str]:
        """numpy lines ``launch`` runs before the kernel (operands in another layout)."""
        return []

    def task_lines(self) -> list[str]:
        """Lines a task runs once, before its first block: the parts of its workspace that
        every block leaves as they are (a padded copy's zero border)."""
        return []

    def entry_lines(self, scratch: EntryScratch) -> list[str] | None:
        """``launch_lines`` for the njit entry (``fusec.targets.cpu.entry``), buffers taken
        from ``scratch``; None when they need numpy outside Numba."""
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

    def prologue_core_lines(self) -> list[str]:
        """The lines computing ``prologue_core``'s result for the block into ``abuf``."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


#: Builds a core (a ``BlockedCore`` class, or a function choosing one).
CoreFactory = Callable[[CoreArgs], BlockedCore]


def generate_core_group(
    fused_op: ai.FusedOp,
    name: str,
    kind: str,
    core_type: type,
    make_core: CoreFactory,
    core_op: Operation | None = None,
) -> KernelSource:
    """Full-size stages for what cannot go per block, then the blocked kernel; ``core_op``:
    the core of a group holding more than one op of ``core_type`` (``core_segments``)."""
    core_op, views, _, (before, after) = core_segments(fused_op, core_type, core_op)
    outputs = outputs_of(fused_op)
    gen = ExprGenerator(fast_exp=True)
    buffers = Buffers(reads=dict(input_names(fused_op)))
    stages: list[Stage] = []
    swapped = transposed_views(core_op, views, getattr(make_core, "transposable", frozenset()))
    views = [op for op in views if op not in swapped.values()]
    strided = getattr(make_core, "strided_views", BlockedCore.strided_views)(core_op, views)
    views = [op for op in views if not any(op in chain for chain in strided.values())]
    scratch = EntryScratch()
    entry_views = entry_view_lines(views, buffers.reads, scratch)
    launch, view_bytes = view_lines(views, buffers)
    for op in swapped.values():  # the core reads the view's source as it is
        buffers.reads[op.results[0]] = buffers.reads[op.operands[0]]
    for chain in strided.values():  # ... or through strides
        buffers.reads[chain[-1].results[0]] = buffers.reads[chain[0].operands[0]]

    # The A operand's producers run per block when the core can take them and
    # nothing but the core (or a group result) needs their values.
    a_chain: list[Operation] = []
    if before and before[0][0] == "prologue0" and getattr(make_core, "block_prologue", False):
        chain = before[0][1]
        later = [op for _, seg in before[1:] for op in seg] + after
        needed = values_needed_after(chain, later, [])
        # per-block quantization scales (issue 31): only a full (pointwise) stage reads them
        blocks = any(isinstance(op, ai.QuantizationOp) and op.blocks() for op in chain)
        transposed = isinstance(core_op, ai.MatmulOp) and core_op.attr("transpose_a")
        if not needed and not transposed and not blocks:
            a_chain = chain
            before = before[1:]
    check_no_block_scales(after)

    stages += stages_before(name, gen, before, [*a_chain, core_op, *after], outputs, buffers)
    launch += [stage.call() for stage in stages]

    workspace = Workspace()
    a_array = workspace.add("abuf", 0) if a_chain else None  # sized by the core
    core_value = core_op.results[0]
    c_outputs = [array for v, array in outputs if v == core_value]
    c_local = not c_outputs or getattr(make_core, "local_result", BlockedCore.local_result)(core_op)
    c_array = "cbuf" if c_local else c_outputs[0]
    buffers.reads[core_value] = c_array
    whole_rows = any(isinstance(op, REDUCE_OPS) for op in after)
    constants = constant_inputs(fused_op)
    args = CoreArgs(
        core_op, buffers.reads, workspace, a_array, c_array, c_local, whole_rows, constants
    )
    core = make_core(args)
    core.transposed = frozenset(swapped)
    core.strided = strided

    body: list[str] = []
    helpers: set[str] = set(core.row_helpers)
    gen.helpers |= core.expr_helpers
    params: list[str] = []
    if a_chain:
        a_value = core_op.operands[0]
        writes = [(a_value, "abuf")] + [(v, a) for v, a in outputs if v in _results(a_chain)]
        lead = core.prologue_core
        if lead is not None and a_chain[0] is lead:  # an op the core computes into abuf
            body += core.prologue_core_lines()
            buffers.reads[lead.results[0]] = "abuf"
            a_chain = a_chain[1:]
        if a_chain:
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
        rows = core.epilogue_rows(shapes, whole_rows)
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
        *(f"    {line}" for line in core.task_lines()),
        "    blk = next_block(counter)",
        f"    while blk < {core.count}:",
        *(f"        {line}" for line in core.decode() + body),
        "        blk = next_block(counter)",
    ]
    result_elements = math.prod(shape_of(core_op.results[0]))
    worth_threads = (
        result_elements >= PARALLEL_MIN_ELEMENTS or op_flops(core_op)[0] >= PARALLEL_MIN_FLOPS
    )
    stage = Stage(
        f"{name}_blocked",
        [*kernel_params, "ws", "counter"],
        kernel_body,
        comment=core.describe(),
        helpers=helpers,
        parallel=core.count > 1 and worth_threads,
    )
    stages.append(stage)
    entry_core = core.entry_lines(scratch)
    launch += core.launch_lines()
    launch += [
        f"tasks = min(num_threads(), {core.count})" if stage.parallel else "tasks = 1",
        f"ws = workspace(tasks * {workspace.size})",
        "counter = np.zeros(1, dtype=np.int64)",
        stage.call(),
    ]
    launch += passthrough_lines(fused_op, outputs, buffers)
    entry_body: list[str] | None = None
    compiled: CompiledEntry | None = None
    if entry_views is not None and entry_core is not None:
        entry_body = scratch.scratch_lines(buffers.scratch) + entry_views
        entry_body += [s.call() for s in stages[:-1]] + entry_core
        run, compiled = blocked_launch(
            scratch, core.count, stage.parallel, workspace.size, stage.call()
        )
        entry_body += run + entry_passthrough(fused_op, outputs, buffers.reads)

    from fusec.targets.cpu import blas_mode  # not blas: probing it loads numpy (issue #26)

    launch_body = scratch_lines(buffers) + launch
    calls_blas = any("sgemm" in line for line in stage.body)
    if calls_blas and blas_mode.mode().endswith("global"):  # no per-thread BLAS thread count
        launch_body = ["with blas_single_threaded():", *(f"    {s}" for s in launch_body)]
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
            blas_mode.import_line(),
            abi.import_line("blas_single_threaded", "num_threads", "workspace"),
            *core.imports,
        ],
        entry_body=entry_body,
        definitions=core.definitions,
    )
    inputs, outs = io_specs(fused_op)
    scratch_plan = ScratchPlan(
        full_bytes=4 * sum(size for _, size in buffers.scratch) + view_bytes,
        per_task_bytes=4 * workspace.size,
        max_tasks=core.count,
        operand_bytes=core.operand_bytes,
    )
    prepared = getattr(core, "prepared", ())
    return KernelSource(
        name,
        kind,
        "cpu",
        source,
        inputs,
        outs,
        scratch=scratch_plan,
        prepared_inputs=prepared,
        compiled_entry=compiled,
    )


def constant_inputs(fused_op: ai.FusedOp) -> dict[str, int]:
    """The group's inputs (name -> index) that are ``arith.constant`` values read by one
    op of the group: those a kernel may take in a layout of its own (``prepared_inputs``)."""
    names = input_names(fused_op)
    return {
        names[arg]: i
        for i, (arg, operand) in enumerate(zip(fused_op.block.args, fused_op.operands, strict=True))
        if is_constant(operand.owner) and len(list(arg.uses)) == 1
    }


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


def merges_hw(shape: Sequence[int]) -> bool:
    """Whether a shape (broadcast to NCHW) is full or broadcast along both H and W."""
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return (padded[2] == 1) == (padded[3] == 1)


def merge_last_two(shape: tuple[int, ...]) -> tuple[int, ...]:
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return padded[:2] + (padded[2] * padded[3],)
