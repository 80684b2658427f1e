"""What the CUDA templates share: storage formats, vector widths, module prelude.

Conventions of every generated CUDA kernel module (the runtime relies on them):

* each tensor is passed flattened (1-D, C order, contiguous, base address
  16-byte aligned); f32 as ``float32[::1]``, f16/bf16 as their raw bits in
  ``int16[::1]`` (``fusec.targets.cuda.device`` converts to float32);
* the kernel takes the group's outputs first, then its inputs, in order;
* the module defines ``launch(*inputs, *outputs, stream=0, sms=132)`` (an H200's SM
  count by default), which
  launches the kernel(s) on ``stream``; ``config(sms)``, the kernel's
  ``(blocks, threads)``; and ``KERNELS``: ``(dispatcher, signature)`` pairs
  that ``--emit ptx`` compiles and the runtime launches directly. (The
  PyTorch fallback modules of ``cuda_torch`` define ``run`` over torch
  tensors instead, with ``TORCH_FALLBACK = True`` and no kernels.)

All names in the generated code are generated here (``in0``, ``out1``,
``v0``...); nothing of the input's text is spliced in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.ir import Block, Operation, Region, SSAValue

from fusec.codegen.expr import CodegenError, error_at, is_identifier
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.dtypes import ELEMENT_TYPES
from fusec.targets.cuda.caps import H200

ITEMSIZE = {name: t.itemsize for name, t in ELEMENT_TYPES.items()}
NUMBA_STORAGE = {name: t.storage for name, t in ELEMENT_TYPES.items()}
VECTOR_BYTES = 16


def storage_signature(dtypes: Sequence[str]) -> str:
    """The Numba signature string of a kernel taking flat arrays of ``dtypes``."""
    return "void(" + ", ".join(f"{NUMBA_STORAGE[d]}[::1]" for d in dtypes) + ")"


def prelude(helpers: Sequence[str]) -> str:
    """Imports of a kernel module: math, f32, and from the kernel ABI (``abi``) numba.cuda,
    ``grid_dependency_wait`` (``kernel_def``) and the device helpers used."""
    names = sorted({"cuda", "grid_dependency_wait", *helpers})
    lines = [
        "import math",
        "",
        "from numpy import float32 as f32",
        "",
        "from fusec.targets.cuda.abi import (",
        *(f"    {name}," for name in names),
        ")",
        "",
    ]
    return "\n".join(lines) + "\n"


def kernel_def(
    code: Source, name: str, params: Sequence[str], doc: str, jit_options: Sequence[str] = ()
) -> None:
    """A generated kernel's head: ``@cuda.jit`` (with ``jit_options``, keyword arguments as
    source, e.g. ``**launch_bounds(THREADS, 4)``: ``abi.launch_bounds``), its signature,
    docstring ``doc`` and, as its first statement, the wait for the kernels it depends on
    (``fusec.targets.cuda.dependent``: programmatic dependent launch in recorded graphs)."""
    jit = f"@cuda.jit({', '.join(jit_options)})" if jit_options else "@cuda.jit"
    code.add(0, jit, f"def {name}({', '.join(params)}):")
    code.add(1, f'"""{doc}"""', "grid_dependency_wait()  # (the kernels before it: done)")


def grid_stride_launch(
    name: str, work: str, blocks_per_sm: int, args: Sequence[str], params: Sequence[str]
) -> list[str]:
    """The module tail of a one-kernel grid-stride module: ``config`` (blocks for the
    ``work`` items, at most ``blocks_per_sm`` a multiprocessor), ``launch(args...)``
    calling the kernel with ``params`` (its own order), and ``KERNELS``."""
    blocks = [
        f"    work = {work}",
        f"    return max(1, min(-(-work // THREADS), sms * {blocks_per_sm})), THREADS",
    ]
    return launch_tail(name, blocks, args, params)


def block_tile_launch(
    name: str, blocks: str, blocks_per_sm: int, args: Sequence[str], params: Sequence[str]
) -> list[str]:
    """The module tail of a one-kernel module of ``blocks`` block tiles (walked
    grid-stride, at most ``blocks_per_sm`` blocks a multiprocessor)."""
    config = [f"    return max(1, min({blocks}, sms * {blocks_per_sm})), THREADS"]
    return launch_tail(name, config, args, params)


def module_text(
    head: Sequence[str], constants: Sequence[str], code: str, tail: Sequence[str]
) -> str:
    """A Numba kernel module: ``head`` (its header and imports), the module constants, the
    kernel ``code`` and ``tail`` (``config``, ``launch``, ``KERNELS``), spaced as PEP 8."""
    return "\n".join([*head, *constants, "", "", code, "", *tail])


def launch_tail(
    name: str, config: Sequence[str], args: Sequence[str], params: Sequence[str]
) -> list[str]:
    """``config(sms)`` with the body ``config`` (its ``(blocks, THREADS)``), ``launch(args...)``
    calling kernel ``name`` with ``params`` on ``stream``, and ``KERNELS``."""
    return [
        "def config(sms):",
        '    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""',
        *config,
        "",
        "",
        f"def launch({', '.join(args)}, stream=0, sms={H200.sms}):",
        f'    """Launch {name} on ``stream`` (no synchronisation)."""',
        "    blocks, threads = config(sms)",
        f"    {name}[blocks, threads, stream]({', '.join(params)})",
        "",
        "",
        f"KERNELS = [({name}, SIGNATURE)]",
        "",
    ]


def vector_accesses(dtype: str, count: int) -> list[tuple[int, int]]:
    """(first element, element count) of the <=16-byte accesses covering ``count`` elements."""
    per = max(1, min(count, VECTOR_BYTES // ITEMSIZE[dtype]))
    return [(k, per) for k in range(0, count, per)]


def body_ops(fused_op: ai.FusedOp) -> list:
    return [op for op in fused_op.block.ops if not isinstance(op, ai.YieldOp)]


def as_packed(members: Sequence[Operation]) -> tuple[list[Operation], dict[SSAValue, int], int]:
    """The group ``outline.pack`` would make of ``members`` (flat ops of one block), as a
    template's plan sees it: (the ops in block order, input value -> group input index in
    order of first use, how many results it writes: member values used outside)."""
    memberset = set(members)
    block = members[0].parent_block() if members else None
    ordered = [op for op in block.ops if op in memberset] if block is not None else []
    if len(ordered) != len(memberset):
        ordered = list(members)
    inputs: dict[SSAValue, int] = {}
    for op in ordered:
        for value in op.operands:
            if value.owner not in memberset:
                inputs.setdefault(value, len(inputs))
    results = sum(
        1 for op in ordered for r in op.results if any(u.operation not in memberset for u in r.uses)
    )
    return ordered, inputs, results


def packed_problem(
    members: Sequence[Operation], kind: str, problem: Callable[[ai.FusedOp], str | None]
) -> str | None:
    """``problem`` (a template's plan of a packed group: why its kernel cannot serve it, or
    None) of the group ``outline.pack`` would make of ``members``, asked of a detached
    copy: fusion asks code generation's own rule. The copy's uses of the group inputs
    are dropped again."""
    ordered, inputs, _ = as_packed(members)
    memberset = set(ordered)
    outputs = [
        r for op in ordered for r in op.results if any(u.operation not in memberset for u in r.uses)
    ]
    body = Block(arg_types=[v.type for v in inputs])
    mapper: dict[SSAValue, SSAValue] = dict(zip(inputs, body.args, strict=True))
    for op in ordered:
        body.add_op(op.clone(value_mapper=mapper))
    body.add_op(ai.YieldOp(*(mapper[r] for r in outputs)))
    fused = ai.FusedOp(kind, list(inputs), [r.type for r in outputs], Region(body), {})
    try:
        return problem(fused)
    finally:
        fused.erase()


#: ``Template.accepts``: why fusion may not form a group of these members (None: it may).
Accepts = Callable[[Sequence[Operation], Operation | None], str | None]


def plan_accepts(kind: str, what: str, problem: Callable[[ai.FusedOp], str | None]) -> Accepts:
    """The ``Template.accepts`` of a template whose one acceptance rule is ``problem``
    (its plan of a packed group: why ``what`` cannot serve it, or None): a group of one
    op is always formed (refused, it runs alone through PyTorch); a larger one only when
    ``problem`` of the group fusion would pack (``packed_problem``) is None, so fusion
    forms no group that code generation would hand to PyTorch, where fused work runs op
    by op."""

    def accepts(members: Sequence[Operation], anchor: Operation | None) -> str | None:
        if len(members) == 1:
            return None
        found = packed_problem(members, kind, problem)
        if found is None:
            return None
        return (
            f"{what} cannot take the group ({found}), so the group would run op by op "
            "through PyTorch"
        )

    return accepts


def yielded(fused_op: ai.FusedOp) -> list:
    term = fused_op.block.last_op
    assert isinstance(term, ai.YieldOp)
    return list(term.operands)


def check_leaves(fused_op: ai.FusedOp, leaves) -> dict:
    """Map each leaf value to its group-input index; a leaf from outside is an error."""
    args = {arg: index for index, arg in enumerate(fused_op.block.args)}
    for value in leaves:
        if value not in args:
            raise CodegenError(
                "an ai.fused body uses a value defined outside the group; "
                "the fusion contract passes every outside value in as an operand"
            )
    return args


def check_elementwise(ops, allowed) -> None:
    for op in ops:
        if not isinstance(op, allowed):
            raise error_at(op, "cannot be generated by this CUDA template")


def pad(shape: Sequence[int], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


@dataclass
class Source:
    """A growing block of indented source lines."""

    lines: list[str]

    def add(self, indent: int, *texts: str) -> None:
        for text in texts:
            self.lines.append("    " * indent + text if text else "")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def kernel_name(name: str) -> str:
    if not is_identifier(name):
        raise ValueError(f"kernel name {name!r} is not an identifier")
    return name


def integer_values(members: Sequence, what: str) -> str | None:
    """Why a float-only cuda template (``what``: the Tensor Core GEMM and conv, whose C++
    epilogues hold floats; the Numba row and reduction kernels, in float32 registers)
    does not take a group with these members: one reads or computes an integer or bool
    value (issue 29). None when every value is a float. The planner then leaves the
    integer ops to a group of their own."""
    for op in members:
        for value in (*op.operands, *op.results):
            dtype = spec_of(value.type).dtype
            if ELEMENT_TYPES[dtype].kind != "float":
                return f"{what} computes floats: {op.name} has {dtype} values"
    return None
