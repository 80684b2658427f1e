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

from xdsl.ir import BlockArgument, Operation, SSAValue

from fusec.codegen.expr import (
    ELEMENTWISE_OPS,
    ExprGenerator,
    broadcast_offset,
    indexing_conflict,
    leaf_shapes,
    shape_of,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import NUMBA_STORAGE, Source, body_ops, pad, yielded

#: Element types the kernels load and store (``fusec.targets.cuda.device``).
FORMATS = ("f16", "bf16", "f32")


def anchor_problem(fused_op: ai.FusedOp, anchor_types: tuple[type[Operation], ...]) -> str | None:
    """None when ``fused_op`` is one anchor of ``anchor_types`` reading a group input, then
    elementwise ops over the anchor's output shape; else why a kernel cannot serve it."""
    ops = body_ops(fused_op)
    anchors = [op for op in ops if isinstance(op, anchor_types)]
    if len(anchors) != 1:
        return f"{len(anchors)} anchor ops (the kernel computes one)"
    anchor: Operation = anchors[0]
    source = anchor.operands[0]
    if not (isinstance(source, BlockArgument) and source.block is fused_op.block):
        return f"the input of {anchor.name} is computed inside the group (no prologue)"
    space = shape_of(anchor.results[0])
    for op in ops:
        if op is anchor:
            continue
        if not isinstance(op, ELEMENTWISE_OPS):
            return f"{op.name} is neither the anchor nor elementwise"
        if shape_of(op.results[0]) != space:
            return f"{op.name} is not over the anchor's output shape {space}"
        if any(v is source for v in op.operands):
            return f"{op.name} reads the anchor's input (the kernel reads it for the anchor)"
    if (conflict := indexing_conflict([op for op in ops if op is not anchor])) is not None:
        return f"{conflict.name} uses an input under two broadcasts"
    results = yielded(fused_op)
    for value in results:
        if value.owner not in ops or shape_of(value) != space:
            return "a result that is not computed over the anchor's output shape"
    values = [*fused_op.inputs, *fused_op.results]
    for value in values:
        spec = spec_of(value.type)
        if spec.dtype not in FORMATS:
            return f"a {spec.dtype} tensor (the kernel moves {', '.join(FORMATS)})"
        if 0 in spec.shape:
            return "an empty tensor"
    return None


class Epilogue:
    """The elementwise ops after ``anchor`` and the group's stores, per output element."""

    def __init__(self, fused_op: ai.FusedOp, anchor: Operation, gen: ExprGenerator) -> None:
        self.fused_op = fused_op
        self.anchor = anchor
        self.gen = gen
        self.helpers: set[str] = set()
        self.ops = [op for op in body_ops(fused_op) if op is not anchor]
        self.results = yielded(fused_op)
        self.space = shape_of(anchor.results[0]) or (1,)
        self.arg_index: dict[SSAValue, int] = {arg: k for k, arg in enumerate(fused_op.block.args)}
        self.leaves = leaf_shapes(self.ops)
        self.leaves.pop(anchor.results[0], None)
        self.idx = [f"q{d}" for d in range(len(self.space))]

    @property
    def indexed(self) -> bool:
        """Whether a leaf broadcasts, so the element's multi-index is needed."""
        size = math.prod(self.space)
        return any(math.prod(s) != size for s in self.leaves.values())

    def out_dtypes(self) -> list[str]:
        return [spec_of(v.type).dtype for v in self.results]

    def params(self) -> list[str]:
        """The kernel's parameters: the outputs, then every group input."""
        outs = [f"out{k}" for k in range(len(self.results))]
        return outs + [f"in{k}" for k in range(len(self.fused_op.inputs))]

    def dtypes(self) -> list[str]:
        return self.out_dtypes() + [spec_of(v.type).dtype for v in self.fused_op.inputs]

    def storage(self) -> list[str]:
        return [NUMBA_STORAGE[d] for d in self.dtypes()]

    def emit(self, code: Source, indent: int, value: str, flat: str) -> None:
        """Statements at ``indent`` computing the epilogue of the anchor's value ``value``
        (a name) at output element ``flat`` (a name) and storing every result there."""
        if self.indexed:
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
            offset = broadcast_offset(self.space, shape, self.idx) if self.indexed else flat
            return f"ld_{dtype}(in{self.arg_index[v]}, {offset})"

        stmts, names = self.gen.chain(self.ops, leaf)
        code.add(indent, *stmts)
        for k, result in enumerate(self.results):
            dtype = spec_of(result.type).dtype
            self.helpers.add(f"st_{dtype}")
            code.add(indent, f"st_{dtype}(out{k}, {flat}, {names.get(result) or leaf(result)})")
