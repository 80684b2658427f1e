"""Pieces every cpu template shares: the module layout, stage functions, group splitting.

A cpu kernel module holds one or more ``@numba.njit`` *stage* functions over
flat float32 arrays (a pointwise loop, a row-reduction loop, an im2col) and a
plain Python ``launch(in0, ..., out0, ...)`` that allocates scratch buffers,
calls the stages and numpy's BLAS in order. The runtime hands ``launch``
float32 copies of 16-bit tensors and rounds 16-bit results back (Numba's CPU
float16 support is partial), which every header says. Integer and bool
tensors (i64, i32, i1) are passed in their own dtypes, and a stage's arrays
are typed by the group value they hold (``array_types``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from xdsl.ir import Operation, SSAValue

from fusec.codegen import CompiledEntry, KernelSource, io_specs
from fusec.codegen.expr import (
    ROW_REDUCTIONS,
    ExprGenerator,
    error_at,
    header,
    helper_source,
    shape_of,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cpu.row_helpers import ROW_HELPERS

# ``cached_njit`` is ``numba.njit(..., cache=True)`` with authenticated cache files
# (see fusec.runtime.numba_cache): Numba's cache is pickles, and loading one runs code.
NJIT_OPTIONS = 'fastmath=False, error_model="numpy"'
#: Below this many elements a stage runs on one thread: the thread pool costs more
#: than it gains, and Numba compiles a parallel loop about 3x slower.
PARALLEL_MIN_ELEMENTS = 1 << 15
#: ... unless each element costs a long reduction: a conv or matmul core of at least this
#: many FLOPs (``fusec.dialect.work.op_flops``; ~0.15 ms on one core) runs its blocks in
#: parallel however small its result. ResNet-50's 3x3 convs on 8x8 and 7x7 planes at
#: batch 1 (16384 and 25088 outputs, 75 and 231 MFLOP) ran on one thread by the element
#: count alone.
PARALLEL_MIN_FLOPS = 1 << 23
HELPER_DECORATOR = '@cached_njit(fastmath=False, error_model="numpy")'
REDUCE_OPS = ROW_REDUCTIONS
CPU_NOTE = (
    "cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 "
    "before the call and rounds f16/bf16 outputs back after it"
)

PRELUDE = """\
import math

import numba
import numpy as np
from numpy import float32 as f32
from numpy import uint64 as U

from fusec.targets.cpu.abi import cached_njit

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]
"""


@dataclass
class Stage:
    """One generated njit function and the arrays it takes, in order."""

    name: str
    params: list[str]
    body: list[str]
    comment: str = ""
    #: The arrays ``launch`` passes (default: the parameter names themselves).
    args: list[str] | None = None
    #: Names of the cpu helpers (``row_helpers.ROW_HELPERS``) the body calls.
    helpers: set[str] = field(default_factory=set)
    #: ``numba.prange`` loops run in parallel (else they are plain loops).
    parallel: bool = True
    #: Import lines the body needs (added to the module's prelude once).
    imports: tuple[str, ...] = ()
    #: The element type of arrays that are not float32 (integer and bool group inputs
    #: and outputs, by name); ``assemble`` fills it from the group.
    dtypes: dict[str, str] = field(default_factory=dict)

    def source(self) -> str:
        # Group inputs (``inN``) are only read: typed read-only so that read-only
        # arrays (np.frombuffer, onnx initialisers) need no copy; writable ones
        # convert to that type too.
        passed = self.args or self.params
        types = (_array_type(a, self.dtypes.get(a, "f32")) for a in passed)
        sig = f"numba.void({', '.join(types)})"
        lines = []
        if self.comment:
            lines.append(f"# {self.comment}")
        options = f"parallel={self.parallel}, {NJIT_OPTIONS}"
        lines.append(f"@cached_njit(\n    {sig},\n    {options},\n)")
        lines.append(f"def {self.name}({', '.join(self.params)}):")
        lines.extend(f"    {line}" if line else "" for line in self.body)
        return "\n".join(lines) + "\n"

    def call(self) -> str:
        return f"{self.name}({', '.join(self.args or self.params)})"


#: Stage arguments that are a group input under another name (the Winograd conv's raw
#: filters, read to redo non-finite tiles): read-only, as the input may be.
INPUT_ALIASES = frozenset({"wraw"})


#: The Numba scalar type of the arrays of each non-float element type.
_NUMBA_SCALARS = {
    "i64": "numba.int64",
    "i32": "numba.int32",
    "i1": "numba.boolean",
    # the quantized types (issue 31): float8 tensors are held as their codes, one byte each
    "i8": "numba.int8",
    "ui8": "numba.uint8",
    "i4": "numba.int8",  # a 4-bit integer: its value in a byte
    "ui4": "numba.uint8",
    "f8E4M3FN": "numba.uint8",
    "f8E5M2": "numba.uint8",
}


def _array_type(name: str, dtype: str = "f32") -> str:
    """The Numba type of a stage argument: group inputs (and their aliases) read-only,
    the blocked kernels' block ``counter`` int64, float values float32 (16-bit ones
    are converted around the call) and integer and bool values their own type."""
    if name == "counter":
        return "numba.int64[::1]"
    read_only = name.startswith("in") or name in INPUT_ALIASES
    scalar = _NUMBA_SCALARS.get(dtype)
    if scalar is None:
        return "ro" if read_only else "rw"
    if read_only:
        return f'numba.types.Array({scalar}, 1, "C", readonly=True)'
    return f"{scalar}[::1]"


def array_dtypes(fused_op: ai.FusedOp) -> dict[str, str]:
    """The element type of every integer or bool group input and output, by array name
    (``in0``..., ``out0``...): the arrays that are not float32."""
    named = [(f"in{i}", v) for i, v in enumerate(fused_op.inputs)]
    named += [(f"out{i}", v) for i, v in enumerate(fused_op.results)]
    dtypes = {name: spec_of(v.type).dtype for name, v in named}
    return {name: dtype for name, dtype in dtypes.items() if dtype in _NUMBA_SCALARS}


@dataclass
class Buffers:
    """Names of the flat arrays of a kernel: inputs, outputs and float32 scratch.

    ``reads`` maps a value to the array holding it (a group input, a scratch
    buffer or an output that later stages read back).
    """

    reads: dict[SSAValue, str] = field(default_factory=dict)
    scratch: list[tuple[str, int]] = field(default_factory=list)

    def add_scratch(self, value: SSAValue) -> str:
        name = f"s{len(self.scratch)}"
        size = 1
        for d in shape_of(value):
            size *= d
        self.scratch.append((name, size))
        self.reads[value] = name
        return name


def body_ops(fused_op: ai.FusedOp) -> list[Operation]:
    """The group's live ops in order: without the terminator and ops nothing uses."""
    term = fused_op.block.last_op
    assert isinstance(term, ai.YieldOp)
    ops = [op for op in fused_op.block.ops if op is not term]
    live = ancestors(ops, term.operands)
    if fused_op.kind_name not in BLOCK_SCALE_KINDS:
        check_no_block_scales(ops)
    return [op for op in ops if op in live]


#: Kinds whose cpu templates read per-block quantization scales: the pointwise loop, and
#: the matmul and conv groups in the full stages before their core (``blocked``).
BLOCK_SCALE_KINDS = ("pointwise", "matmul", "conv")


def check_no_block_scales(ops: Iterable[Operation]) -> None:
    """No op of ``ops`` is a quantization op with per-block scales (issue 31), else a
    located error: only the pointwise loop indexes blocks."""
    for op in ops:
        if isinstance(op, ai.QuantizationOp) and op.blocks() is not None:
            raise error_at(op, "has per-block scales: only the cpu pointwise loop reads them")


def outputs_of(fused_op: ai.FusedOp) -> list[tuple[SSAValue, str]]:
    """(yielded value, output array name) for each group result."""
    term = fused_op.block.last_op
    assert isinstance(term, ai.YieldOp)
    return [(v, f"out{i}") for i, v in enumerate(term.operands)]


def input_names(fused_op: ai.FusedOp) -> dict[SSAValue, str]:
    return {arg: f"in{i}" for i, arg in enumerate(fused_op.block.args)}


def check_elementwise(ops: Iterable[Operation], allowed: tuple[type, ...] = ()) -> None:
    """Every op is elementwise (or of an ``allowed`` type), else a located error."""
    from fusec.codegen.expr import ELEMENTWISE_OPS

    for op in ops:
        if not isinstance(op, ELEMENTWISE_OPS + allowed):
            raise error_at(op, "cannot be fused into this kernel by the cpu templates")


def depends_on(ops: Sequence[Operation], roots: Iterable[SSAValue]) -> set[Operation]:
    """The ops of ``ops`` that (transitively) use one of ``roots``."""
    tainted = set(roots)
    result: set[Operation] = set()
    for op in ops:
        if any(v in tainted for v in op.operands):
            result.add(op)
            tainted.update(op.results)
    return result


def ancestors(ops: Sequence[Operation], values: Iterable[SSAValue]) -> set[Operation]:
    """The ops of ``ops`` that the ``values`` (transitively) depend on."""
    defining: dict[SSAValue, Operation] = {r: op for op in ops for r in op.results}
    result: set[Operation] = set()
    stack = [v for v in values if v in defining]
    while stack:
        op = defining[stack.pop()]
        if op not in result:
            result.add(op)
            stack.extend(v for v in op.operands if v in defining)
    return result


def values_needed_after(
    stage_ops: Sequence[Operation], later_ops: Sequence[Operation], outputs: Iterable[SSAValue]
) -> list[SSAValue]:
    """Results of ``stage_ops`` that later ops read or that the group yields, in order."""
    later_uses = {v for op in later_ops for v in op.operands} | set(outputs)
    return [r for op in stage_ops for r in op.results if r in later_uses]


def assemble(
    fused_op: ai.FusedOp,
    gen: ExprGenerator,
    stages: Sequence[Stage],
    launch_body: Sequence[str],
    notes: Sequence[str] = (),
    imports: Sequence[str] = (),
    entry_body: Sequence[str] | None = None,
    definitions: Sequence[str] = (),
) -> str:
    """The complete module: header, prelude (and ``imports``), helpers (and a template's
    own ``definitions``: function sources its stages call), stages, ``launch`` and, given
    ``entry_body``, the njit ``entry`` a compiled program calls
    (``fusec.targets.cpu.entry``)."""
    n_in, n_out = len(fused_op.inputs), len(fused_op.results)
    params = [f"in{i}" for i in range(n_in)] + [f"out{i}" for i in range(n_out)]
    imports = list(dict.fromkeys([*imports, *(i for stage in stages for i in stage.imports)]))
    if entry_body is not None:
        imports.append("from fusec.targets.cpu.abi import call_entry")
    prelude = PRELUDE + "".join(f"{line}\n" for line in imports)
    parts = [header(fused_op, notes=[*notes, CPU_NOTE]), prelude]
    helpers = helper_source(gen.helpers, HELPER_DECORATOR)
    if helpers:
        parts.append(helpers)
    for name in sorted(set().union(*(stage.helpers for stage in stages))):
        parts.append(f"\n{HELPER_DECORATOR}\n{ROW_HELPERS[name]}\n")
    parts += [f"\n{HELPER_DECORATOR}\n{source}\n" for source in definitions]
    dtypes = array_dtypes(fused_op)
    for stage in stages:
        stage.dtypes = {**dtypes, **stage.dtypes}
        parts.append("\n" + stage.source())
    launch = [
        "",
        f"def launch({', '.join(params)}):",
        '    """Run the group: every output element is written."""',
        *(f"    {line}" for line in launch_body),
    ]
    parts.append("\n".join(launch) + "\n")
    if entry_body is not None:
        from fusec.targets.cpu.entry import entry_source

        parts.append("\n" + entry_source(params, entry_body, [stage.name for stage in stages]))
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def one_stage_kernel(
    fused_op: ai.FusedOp, name: str, kind: str, gen: ExprGenerator, stage: Stage
) -> KernelSource:
    """The ``kind`` kernel module of ``fused_op`` whose ``launch`` and compiled ``entry``
    run its one ``stage``."""
    source = assemble(fused_op, gen, [stage], [stage.call()], entry_body=[stage.call()])
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, kind, "cpu", source, inputs, outputs, compiled_entry=CompiledEntry())


def fmt_shape(shape: Sequence[int]) -> str:
    """``2x3x4`` (``scalar`` for a rank-0 shape): shapes in comments and diagnostics."""
    return "x".join(str(d) for d in shape) or "scalar"


def scratch_lines(buffers: Buffers) -> list[str]:
    return [f"{name} = np.empty({size}, dtype=np.float32)" for name, size in buffers.scratch]


def single_core(fused_op: ai.FusedOp, core_type: type[ai.AiOp]) -> Operation:
    """The one op of ``core_type`` in the group, else a located error."""
    cores = [op for op in body_ops(fused_op) if isinstance(op, core_type)]
    if len(cores) != 1:
        raise error_at(
            fused_op,
            f'"{fused_op.kind_name}" group must hold exactly one {core_type.name}, '
            f"found {len(cores)}",
        )
    return cores[0]


def producer(value: SSAValue) -> Operation | None:
    """The op that computes ``value`` (a group's block argument: the op its group input
    is yielded by, through the group that yields it), or None."""
    from xdsl.ir import OpResult

    from fusec.codegen import group_operand

    outer = group_operand(value)
    if outer is None:
        return None
    value = outer
    if isinstance(value, OpResult) and isinstance(value.op, ai.FusedOp):
        terminator = value.op.block.last_op
        if terminator is None:
            return None
        value = terminator.operands[value.index]
    return value.owner if isinstance(value.owner, Operation) else None
