"""Code generation shared by every target: the kernel type and the expression generator.

A target's template (``fusec.target.Template``) turns one ``ai.fused`` group
into a ``KernelSource``: the complete source of one Python module holding the
group's kernel(s), plus what the runtime needs to call it. Elementwise work
inside every template comes from ``expr.ExprGenerator``, which renders each
op's own scalar semantics in the template's language.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusec.dialect.ops import FusedOp, spec_of
from fusec.dialect.shapes import TensorSpec
from fusec.errors import SourceLocation

if TYPE_CHECKING:
    import numpy as np
    from xdsl.ir import SSAValue


@dataclass(frozen=True)
class KernelRemark:
    """Why a group runs on a target's fallback instead of its fused kernel (``--remarks``:
    the template's reason, at the group's first op)."""

    location: SourceLocation | None
    op: str
    target: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location is not None else ""
        return (
            f"{where}remark: {self.op} runs op by op through the {self.target} fallback, "
            f"not a fused kernel: {self.reason}"
        )


@dataclass(frozen=True)
class ScratchPlan:
    """Memory one launch allocates besides its outputs (cpu templates).

    ``full_bytes`` in buffers that scale with the group's tensors (written once,
    read by a later stage), plus ``per_task_bytes`` for each parallel task of a
    blocked kernel; there are at most ``max_tasks`` tasks (its block count) and
    never more than Numba's thread count. ``operand_bytes``: copies of operands in
    another layout (a convolution's weights, tap-major), the size of that operand.
    """

    full_bytes: int = 0
    per_task_bytes: int = 0
    max_tasks: int = 0
    operand_bytes: int = 0

    def peak_bytes(self, threads: int) -> int:
        tasks = min(threads, self.max_tasks)
        return self.full_bytes + self.operand_bytes + self.per_task_bytes * tasks


@dataclass(frozen=True)
class CompiledEntry:
    """A cpu kernel module's njit-callable launch, for a program's compiled launcher
    (``fusec.targets.cpu.program``): ``name(*inputs, *outputs, scratch, counter)``
    on flat arrays in the kernel's array dtypes, ``scratch`` a float32 array of at
    least ``fixed_floats + task_floats * tasks`` elements for up to ``max_tasks``
    parallel tasks (the entry takes as many as fit), ``counter`` an int64 array: [0]
    the block counter it resets, [1] the number of threads the caller runs with. It
    allocates nothing and holds no BLAS setting of its own: the caller keeps BLAS at
    one thread around it."""

    name: str = "entry"
    fixed_floats: int = 0
    task_floats: int = 0
    max_tasks: int = 1

    def scratch_floats(self, threads: int) -> int:
        """Scratch elements for ``threads`` threads."""
        return self.fixed_floats + self.task_floats * max(1, min(threads, self.max_tasks))


@dataclass(frozen=True)
class KernelSource:
    """The generated module of one fused group, and how to call it.

    ``source`` is a complete Python module; the runtime imports it (through the
    kernel cache) and calls ``getattr(module, entry)(*inputs, *outputs)``.
    ``inputs``/``outputs`` are the group's operand and result types, in order;
    ``array_dtype`` is the element type of the arrays the entry takes
    (``"f32"`` on cpu, whose kernels get float32 copies of 16-bit tensors and
    whose results the runtime rounds back), or ``None`` when the entry takes
    the tensors' own element types.
    """

    name: str
    kind: str
    target: str
    source: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    entry: str = "launch"
    array_dtype: str | None = "f32"
    #: What a launch allocates besides its outputs (None: not tracked by the template).
    scratch: ScratchPlan | None = None
    #: The kernel runs its ops one by one (a library fallback), each rounding its
    #: result to its declared type, instead of as one fused loop.
    runs_op_by_op: bool = False
    #: Every other text the template generates for this kernel, as (language, text):
    #: e.g. the CUDA C++ of a linked main loop. tests/codegen/test_code_injection.py checks
    #: ``source`` and these for spliced user text, so list every generated text here.
    extra_sources: tuple[tuple[str, str], ...] = ()
    #: Why the target's fused template declined the group (its fallback runs it).
    remark: KernelRemark | None = None
    #: Inputs the entry takes in a layout of the backend's (``Backend.prepare``), as
    #: (input index, layout name): constants only, laid out once by the ``Program``
    #: (the cpu target's packed GEMM operands).
    prepared_inputs: tuple[tuple[int, str], ...] = ()
    #: The module's njit-callable form of ``entry`` (cpu), None when it has none (its
    #: launch runs numpy outside Numba: a copy kernel, a numpy reduction).
    compiled_entry: CompiledEntry | None = None
    #: The specs of the natively compiled kernels the module launches, in launch order, as
    #: data (cuda: the linked C++ kernels of a GEMM, conv, attention or relayout group, each
    #: with ``cpp_source()`` and ``function_name``): what ``--emit cuda``/``ptx`` and the
    #: PTX checks read, never by running or reading the module's text.
    specs: tuple[Any, ...] = ()


def io_specs(fused_op: FusedOp) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(input specs, output specs) of a group, for ``KernelSource``."""
    return (
        tuple(spec_of(v.type) for v in fused_op.inputs),
        tuple(spec_of(r.type) for r in fused_op.results),
    )


def group_operand(value: SSAValue) -> SSAValue | None:
    """The value outside the group that a group's block argument ``value`` stands for
    (``value`` itself when it is no block argument), or None for another block's argument."""
    from xdsl.ir import BlockArgument

    if not isinstance(value, BlockArgument):
        return value
    group = value.block.parent_op()
    return group.operands[value.index] if isinstance(group, FusedOp) else None


def outer_constant(value: SSAValue) -> np.ndarray | None:
    """The numpy value of the ``arith.constant`` that a group's block argument ``value``
    stands for (or that defines ``value``), else None."""
    from fusec.ir.constants import constant_value, is_constant

    outer = group_operand(value)
    owner = outer.owner if outer is not None else None
    return constant_value(owner) if is_constant(owner) else None
