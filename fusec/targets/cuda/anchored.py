"""What the cuda ``pool`` and ``reduce`` templates share: a group split around its anchor.

Both kinds are one anchor op (a pooling, a reduction over axes) reading a group input,
followed by an elementwise epilogue over the anchor's output space (the fusion rules'
``same_shape`` clause). Their kernels compute one output element of the anchor at a
time, in float32, and run the epilogue on it right there: ``Epilogue`` emits that part
(the broadcast loads of the epilogue's other inputs, the chain from the shared scalar
builder, the stores of every group result at the element's flat offset).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.ir import BlockArgument, Operation, SSAValue

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import (
    ELEMENTWISE_OPS,
    ExprGenerator,
    broadcast_offset,
    header,
    indexing_conflict,
    leaf_shapes,
    shape_of,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import (
    Accepts,
    Source,
    body_ops,
    kernel_name,
    module_text,
    pad,
    plan_accepts,
    prelude,
    storage_signature,
    yielded,
)

#: Element types the kernels load and store (``fusec.targets.cuda.device``).
FORMATS = ("f16", "bf16", "f32")


class AnchorEmitter:
    """What the pool and reduce kernel emitters start from: the group, the kernel's name,
    the scalar builder and the ``Epilogue``, and the anchor's input: the group input it
    reads (``array``, ``in<k>``), through a transposed view or not (``in_perm``, ``()``),
    and its element type (``dtype``). ``emit()`` returns the module's source."""

    def __init__(self, fused_op: ai.FusedOp, anchor: Operation, name: str) -> None:
        self.fused_op, self.name = fused_op, name
        self.gen = ExprGenerator()
        self.epilogue = Epilogue(fused_op, anchor, self.gen)
        view = input_view(fused_op, anchor.operands[0])
        assert view is not None  # anchor_problem checked it
        source, self.in_perm = view
        self.array = f"in{fused_op.block.args.index(source)}"
        self.dtype = spec_of(anchor.operands[0].type).dtype
        #: the device helpers the kernel's own code calls (the epilogue adds its own)
        self.helpers: set[str] = {f"ld_{self.dtype}"}

    def io_names(self) -> tuple[list[str], list[str]]:
        """The launch's input and output parameter names (``in<k>``, ``out<k>``)."""
        ins = [f"in{k}" for k in range(len(self.fused_op.inputs))]
        return ins, [f"out{k}" for k in range(len(self.epilogue.results))]

    def emit(self) -> str:
        raise NotImplementedError

    def kernel_module(
        self,
        notes: Sequence[str],
        constants: Sequence[tuple[str, object]],
        code: Source,
        tail: Sequence[str],
        *,
        imports: Sequence[str] = (),
        signatures: Sequence[str] = (),
    ) -> str:
        """The kernel module: its header with ``notes``, the imports of every helper used
        (and ``imports``' lines), ``signatures`` (default: ``SIGNATURE`` of the kernel's
        parameters), the module ``constants``, the kernel ``code``, then ``tail``
        (``config``, ``launch``, ``KERNELS``)."""
        helpers = self.helpers | self.epilogue.helpers | self.gen.helpers
        head = [header(self.fused_op, notes=notes), prelude(sorted(helpers)), *imports]
        signatures = signatures or [f"SIGNATURE = {storage_signature(self.epilogue.dtypes())!r}"]
        values = [*signatures, *(f"{key} = {value}" for key, value in constants)]
        return module_text(head, values, code.text(), tail)


def planned_kernel(
    fused_op: ai.FusedOp,
    name: str,
    kind: str,
    problem: Callable[[ai.FusedOp], str | None],
    anchor_type: type[Operation],
    emitter: Callable[[ai.FusedOp, Any, str], AnchorEmitter],
) -> KernelSource:
    """The ``kind`` kernel module of ``fused_op``: ``emitter(fused_op, anchor, name)``'s
    source for its one ``anchor_type`` op; PyTorch's when ``problem`` (the template's
    plan) refuses the group (the reason in the header)."""
    from fusec.targets.cuda import torch_fallback

    name = kernel_name(name)
    found = problem(fused_op)
    if found is not None:
        return torch_fallback.generate(fused_op, name, reason=f"the {kind} kernel: {found}")
    (anchor,) = [op for op in body_ops(fused_op) if isinstance(op, anchor_type)]
    source = emitter(fused_op, anchor, name).emit()
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, kind, "cuda", source, inputs, outputs, array_dtype=None)


def planned_template(
    kind: str,
    anchor_type: type[Operation],
    problem: Callable[[ai.FusedOp, Any], str | None],
    emitter: Callable[[ai.FusedOp, Any, str], AnchorEmitter],
) -> tuple[Callable[[ai.FusedOp], str | None], Accepts, Callable[[ai.FusedOp, str], KernelSource]]:
    """A pool- or reduce-like template's ``plan_problem``, ``accepts`` and ``generate``.

    ``plan_problem(fused_op)`` is the one acceptance rule: None when the ``kind`` kernel
    serves the group (``anchor_problem``, then ``problem(fused_op, anchor)`` of its one
    ``anchor_type`` op), else why not; fusion forms a group of several ops only where it
    passes (``plan_accepts``: no group that code generation would hand to PyTorch), and
    ``generate(fused_op, name)`` is ``planned_kernel`` of ``emitter``."""

    def plan_problem(fused_op: ai.FusedOp) -> str | None:
        found = anchor_problem(fused_op, (anchor_type,))
        if found is not None:
            return found
        (anchor,) = [op for op in body_ops(fused_op) if isinstance(op, anchor_type)]
        return problem(fused_op, anchor)

    def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
        return planned_kernel(fused_op, name, kind, plan_problem, anchor_type, emitter)

    return plan_problem, plan_accepts(kind, f"the cuda {kind} kernel", plan_problem), generate


def input_view(fused_op: ai.FusedOp, value: SSAValue) -> tuple[BlockArgument, tuple] | None:
    """(group input, perm) when ``value`` is a group input (perm ``()``) or one transposed
    (``ai.transpose {perm}`` of it, read by nothing else: a view the kernel folds into its
    addressing, as the conv layout's channels-last inputs); else None."""
    if isinstance(value, BlockArgument) and value.block is fused_op.block:
        return value, ()
    op = value.owner
    if isinstance(op, ai.TransposeOp) and _one_use(op.input):
        source = op.input
        if isinstance(source, BlockArgument) and source.block is fused_op.block:
            return source, tuple(op.attr("perm"))
    return None


def stored_views(fused_op: ai.FusedOp) -> list[tuple[SSAValue, tuple]]:
    """(value, perm) per group result: the yielded value (perm ``()``), or the operand of
    an ``ai.transpose {perm}`` that only the yield reads (a result stored permuted)."""
    out: list[tuple[SSAValue, tuple]] = []
    for value in yielded(fused_op):
        op = value.owner
        if isinstance(op, ai.TransposeOp) and _one_use(value):
            out.append((op.input, tuple(op.attr("perm"))))
        else:
            out.append((value, ()))
    return out


def views(fused_op: ai.FusedOp, anchor: Operation) -> list[Operation]:
    """The transposes of ``fused_op`` that are views: of the anchor's operands (a pool's or
    reduction's input; a conv's input and weights, ``gemv``), of results."""
    out: list[Operation] = [
        v.owner for v in yielded(fused_op) if isinstance(v.owner, ai.TransposeOp) and _one_use(v)
    ]
    for source in anchor.operands:
        if isinstance(source.owner, ai.TransposeOp):
            out.append(source.owner)
    return out


def anchor_problem(fused_op: ai.FusedOp, anchor_types: tuple[type[Operation], ...]) -> str | None:
    """None when ``fused_op`` is one anchor of ``anchor_types`` reading a group input (or a
    transposed view of one), then elementwise ops over the anchor's output shape, its
    results stored as they are or transposed; else why a kernel cannot serve it."""
    ops = body_ops(fused_op)
    anchors = [op for op in ops if isinstance(op, anchor_types)]
    if len(anchors) != 1:
        return f"{len(anchors)} anchor ops (the kernel computes one)"
    anchor: Operation = anchors[0]
    source = anchor.operands[0]
    if input_view(fused_op, source) is None:
        return f"the input of {anchor.name} is computed inside the group (no prologue)"
    space = shape_of(anchor.results[0])
    stored = stored_views(fused_op)
    skip = {anchor, *views(fused_op, anchor)}
    for op in ops:
        if op in skip:
            continue
        if not isinstance(op, ELEMENTWISE_OPS):
            return f"{op.name} is neither the anchor nor elementwise"
        if shape_of(op.results[0]) != space:
            return f"{op.name} is not over the anchor's output shape {space}"
        if any(v is source for v in op.operands):
            return f"{op.name} reads the anchor's input (the kernel reads it for the anchor)"
    if (conflict := indexing_conflict([op for op in ops if op not in skip])) is not None:
        return f"{conflict.name} uses an input under two broadcasts"
    for value, _ in stored:
        if value.owner not in ops or shape_of(value) != space:
            return "a result that is not computed over the anchor's output shape"
    # every value, the epilogue's too: the kernels compute in float32
    values = [*fused_op.inputs, *fused_op.results, *(r for op in ops for r in op.results)]
    for value in values:
        spec = spec_of(value.type)
        if spec.dtype not in FORMATS:
            return f"{spec.dtype} values (the kernel moves {', '.join(FORMATS)})"
        if 0 in spec.shape:
            return "an empty tensor"
    return None


def permuted_strides(shape: tuple[int, ...], perm: tuple) -> list[int]:
    """The stride of each dim of ``transpose(x, perm)`` in ``x``'s C-order storage
    (``shape`` is the transposed, logical shape; ``perm`` ``()`` means none)."""
    if not perm:
        perm = tuple(range(len(shape)))
    storage = [0] * len(shape)
    for d, p in enumerate(perm):
        storage[p] = shape[d]
    strides, run = [0] * len(shape), 1
    for j in range(len(shape) - 1, -1, -1):
        strides[j] = run
        run *= storage[j]
    return [strides[p] for p in perm]


class Epilogue:
    """The elementwise ops after ``anchor`` and the group's stores, per output element.

    ``emit`` takes the anchor's value and the element's flat index in the anchor's
    (logical) output space; a result stored transposed is written at its permuted
    offset, from the element's multi-index."""

    def __init__(self, fused_op: ai.FusedOp, anchor: Operation, gen: ExprGenerator) -> None:
        self.fused_op = fused_op
        self.anchor = anchor
        self.gen = gen
        self.helpers: set[str] = set()
        skip = {anchor, *views(fused_op, anchor)}
        self.ops = [op for op in body_ops(fused_op) if op not in skip]
        self.results = yielded(fused_op)
        self.stored = stored_views(fused_op)
        self.space = shape_of(anchor.results[0]) or (1,)
        self.arg_index: dict[SSAValue, int] = {arg: k for k, arg in enumerate(fused_op.block.args)}
        self.leaves = leaf_shapes(self.ops)
        self.leaves.pop(anchor.results[0], None)
        self.idx = [f"q{d}" for d in range(len(self.space))]

    @property
    def indexed(self) -> bool:
        """Whether a leaf broadcasts or a result is stored transposed, so the element's
        multi-index is needed."""
        size = math.prod(self.space)
        broadcast = any(math.prod(s) != size for s in self.leaves.values())
        return broadcast or any(perm for _, perm in self.stored)

    def out_dtypes(self) -> list[str]:
        return [spec_of(v.type).dtype for v in self.results]

    def params(self) -> list[str]:
        """The kernel's parameters: the outputs, then every group input."""
        outs = [f"out{k}" for k in range(len(self.results))]
        return outs + [f"in{k}" for k in range(len(self.fused_op.inputs))]

    def dtypes(self) -> list[str]:
        return self.out_dtypes() + [spec_of(v.type).dtype for v in self.fused_op.inputs]

    def store_offset(self, perm: tuple, flat: str | None) -> str:
        """Where the element goes in a result stored as ``transpose(value, perm)`` (perm
        ``()``: as it is, at ``flat`` when the kernel has the flat index)."""
        if not perm and flat is not None:
            return flat
        # value = transpose(stored, inverse): dim d of value is dim perm.index(d) stored
        inverse = tuple(perm.index(d) for d in range(len(perm))) if perm else ()
        strides = permuted_strides(self.space, inverse)
        terms = [
            self.idx[d] if st == 1 else f"{self.idx[d]} * {st}"
            for d, st in enumerate(strides)
            if self.space[d] > 1
        ]
        return " + ".join(terms) or "0"

    def emit(
        self,
        code: Source,
        indent: int,
        value: str,
        flat: str | None,
        index: list[str] | None = None,
    ) -> None:
        """Statements at ``indent`` computing the epilogue of the anchor's value ``value``
        (a name) at output element ``flat`` (a name) and storing every result there;
        ``index`` names the element's multi-index when the kernel has it already (then
        ``flat`` may be None: every offset from the index)."""
        assert flat is not None or index is not None
        if index is not None:
            self.idx = list(index)
        elif self.indexed:
            code.add(indent, f"rq = {flat}")
            for d in range(len(self.space) - 1, 0, -1):
                size = self.space[d]
                code.add(indent, f"{self.idx[d]} = rq % {size}", f"rq = rq // {size}")
            code.add(indent, f"{self.idx[0]} = rq")
        anchor_value = self.anchor.results[0]

        def leaf(v: SSAValue) -> str:
            if v is anchor_value:
                return value
            dtype = spec_of(v.type).dtype
            self.helpers.add(f"ld_{dtype}")
            shape = pad(self.leaves[v], len(self.space))
            by_index = self.indexed or flat is None
            offset = broadcast_offset(self.space, shape, self.idx) if by_index else flat
            return f"ld_{dtype}(in{self.arg_index[v]}, {offset})"

        stmts, names = self.gen.chain(self.ops, leaf)
        code.add(indent, *stmts)
        for k, (result, perm) in enumerate(self.stored):
            dtype = spec_of(self.results[k].type).dtype
            self.helpers.add(f"st_{dtype}")
            where = self.store_offset(perm, flat)
            code.add(indent, f"st_{dtype}(out{k}, {where}, {names.get(result) or leaf(result)})")


def _one_use(value: SSAValue) -> bool:
    return sum(1 for _ in value.uses) == 1


#: NHWC -> NCHW: the view a channels-last input gets inside a group (``conv-layout``).
CHANNELS_FIRST = (0, 3, 1, 2)


def nhwc_input_index(fused_op: ai.FusedOp) -> int | None:
    """The group input a ``pool`` or ``reduce`` group's kernel could read channels-last
    instead (its anchor's 4-D input, a group input only the anchor reads), or None.

    ``conv-layout`` asks: such a group is a channels-last reader of that input, so a conv
    feeding it stores NHWC; the group then reads it through an ``ai.transpose [0, 3, 1,
    2]`` view, which the kernel folds into its addressing. A reduction whose kept dims
    the transpose would reorder (e.g. over H alone) cannot read it so.
    """
    if fused_op.kind_name not in ("pool", "reduce"):
        return None
    types = (ai.Pool2DOp,) if fused_op.kind_name == "pool" else (ai.ReduceOp,)
    if anchor_problem(fused_op, types) is not None:
        return None
    (anchor,) = [op for op in body_ops(fused_op) if isinstance(op, types)]
    source = anchor.operands[0]
    if not isinstance(source, BlockArgument) or [u.operation for u in source.uses] != [anchor]:
        return None
    shape = shape_of(source)
    if len(shape) != 4 or any(perm for _, perm in stored_views(fused_op)):
        return None
    if isinstance(anchor, ai.ReduceOp):
        axes = set(anchor.reduced_axes())
        kept = [CHANNELS_FIRST[d] for d, n in enumerate(shape) if d not in axes and n > 1]
        if kept != sorted(kept):
            return None
    return source.index
