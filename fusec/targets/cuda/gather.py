"""The cuda ``copy`` groups that are index maps: a fast copy kernel, or one grid-stride gather.

``gather_plan`` says whether this module serves a copy group at all (else PyTorch
does); ``strided.copy_plan`` then picks the path, and the kernel header names it and
says why (``path: vectorised 16 B``, ``path: tiled transpose 64x64``, ``path:
gather``). A group whose result reads its input(s) through strided views runs as a
vectorised copy or a tiled transpose (``fusec.targets.cuda.strided`` plans,
``fastcopy`` emits); the rest as the gather kernel below.

A copy group whose body is a chain (or tree) of transposes, reshapes, slices, gathers
of constant indices and concats computes every element of its one result by reading
one element of one input: ``out[e] = in_k[source(e)]``. The kernel walks the result's
elements (one per thread and loop step), splits ``e`` into the result's multi-index by
constant divisions, and maps that index back through the ops, result to inputs:

* transpose: ``in[perm[d]] = out[d]``;
* reshape: the flat offset, re-split by the operand's shape;
* slice: ``in[d] = offset[d] + out[d] * stride[d]``;
* gather: ``in[axis] = indices[out[axis]]`` (arithmetic when the indices are an
  arithmetic progression, else a table in constant memory);
* concat: the operand whose range holds ``out[axis]``, at ``out[axis] - start``.

Elements are moved as stored (16-bit types as their bits), so the copy is exact for
every value, NaN payloads included. Shapes are static: every division is by a
constant. Reads follow the result's order, so a transpose that keeps the innermost
dimension (the attention head split and merge, ``[0, 2, 1, 3]``) reads whole rows;
one that moves it reads with a stride. (The channels-last transpose of the conv
layout keeps its own kernel, ``conv.transpose``.) Anything else in a copy group, or a
group with several results, runs through PyTorch (``gather_plan`` says why).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.ir import BlockArgument, SSAValue

from fusec.codegen import KernelSource
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda import common, fastcopy
from fusec.targets.cuda.strided import copy_plan

#: Threads a block and blocks per multiprocessor at most (the grid-stride loop covers the
#: rest): the same as the strided copy's (``fastcopy``).
THREADS, BLOCKS_PER_SM = fastcopy.THREADS, fastcopy.BLOCKS_PER_SM
#: The ops a gather kernel maps indices through.
INDEX_MAPS = (ai.TransposeOp, ai.ReshapeOp, ai.SliceOp, ai.GatherOp, ai.ConcatOp)


def gather_plan(fused_op: ai.FusedOp) -> str | None:
    """None when this module's kernels serve ``fused_op`` (the path:
    ``strided.copy_plan(fused_op).label``), else why they cannot."""
    ops = common.body_ops(fused_op)
    if not ops:
        return "an empty copy group"
    for op in ops:
        if not isinstance(op, INDEX_MAPS):
            return f"{op.name} is not an index map (transpose, reshape, slice, gather, concat)"
    results = common.yielded(fused_op)
    if len(results) != 1:
        return f"{len(results)} results (the gather kernel writes one)"
    dtypes = {spec_of(v.type).dtype for v in (*fused_op.inputs, results[0])}
    if len(dtypes) != 1:
        return f"mixed element types {sorted(dtypes)}"
    if any(0 in spec_of(v.type).shape for v in (*fused_op.inputs, results[0])):
        return "an empty tensor"
    return None


def _strides(shape: Sequence[int]) -> list[int]:
    strides, run = [], 1
    for size in reversed(shape):
        strides.append(run)
        run *= size
    return strides[::-1]


def _flat(idx: Sequence[str], shape: Sequence[int]) -> str:
    terms = [
        i if stride == 1 else f"{i} * {stride}"
        for i, stride, size in zip(idx, _strides(shape), shape, strict=True)
        if size > 1
    ]
    return " + ".join(terms) or "0"


@dataclass
class _IndexMaps:
    """Emits the index arithmetic from the result's multi-index back to the inputs."""

    fused_op: ai.FusedOp
    lines: list[str] = field(default_factory=list)
    tables: list[tuple[int, ...]] = field(default_factory=list)
    count: int = 0

    def temp(self, expr: str) -> str:
        """A name for ``expr`` (index arithmetic only: no loads, safe in any branch)."""
        name = f"t{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {expr}")
        return name

    def load(self, value: SSAValue, idx: list[str]) -> str:
        """The expression reading element ``idx`` of ``value``."""
        if isinstance(value, BlockArgument) and value.block is self.fused_op.block:
            return f"in{value.index}[{_flat(idx, spec_of(value.type).shape)}]"
        op = value.owner
        if isinstance(op, ai.TransposeOp):
            perm = op.attr("perm")
            source = [""] * len(perm)
            for d, p in enumerate(perm):
                source[p] = idx[d]
            return self.load(op.input, source)
        if isinstance(op, ai.ReshapeOp):
            flat = self.temp(_flat(idx, spec_of(value.type).shape))
            shape = spec_of(op.operands[0].type).shape
            source = [
                f"({flat} // {stride}) % {size}" if stride > 1 else f"{flat} % {size}"
                for stride, size in zip(_strides(shape), shape, strict=True)
            ]
            return self.load(op.operands[0], [self.temp(s) for s in source])
        if isinstance(op, ai.SliceOp):
            source = [
                self.temp(f"{offset} + {i} * {stride}")
                for i, offset, stride in zip(
                    idx, op.attr("offsets"), op.attr("strides"), strict=True
                )
            ]
            return self.load(op.input, source)
        if isinstance(op, ai.GatherOp):
            return self.load(op.operands[0], self._gathered(op, idx))
        assert isinstance(op, ai.ConcatOp)
        return self._concat(op, idx)

    def _gathered(self, op: ai.GatherOp, idx: list[str]) -> list[str]:
        rank = spec_of(op.operands[0].type).rank
        axis = op.attr("axis") % rank
        indices = tuple(int(i) for i in op.attr("indices"))
        step = indices[1] - indices[0] if len(indices) > 1 else 0
        source = list(idx)
        if all(b - a == step for a, b in zip(indices, indices[1:], strict=False)):
            source[axis] = f"({indices[0]} + {idx[axis]} * {step})"
        else:  # read in the expression, never in a temp: a concat branch may not take it
            self.tables.append(indices)
            source[axis] = f"G{len(self.tables) - 1}[{idx[axis]}]"
        return source

    def _concat(self, op: ai.ConcatOp, idx: list[str]) -> str:
        rank = spec_of(op.output.type).rank
        axis = op.attr("axis") % rank
        branches: list[tuple[int, str]] = []
        start = 0
        for operand in op.operands:
            source = list(idx)
            if start:
                source[axis] = self.temp(f"{idx[axis]} - {start}")
            start += spec_of(operand.type).shape[axis]
            branches.append((start, self.load(operand, source)))
        expr = branches[-1][1]
        for end, load in reversed(branches[:-1]):
            expr = f"({load} if {idx[axis]} < {end} else {expr})"
        return expr


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The kernel module of a copy group ``gather_plan`` accepted: vectorised or a tiled
    transpose where its strided view allows (``strided.copy_plan``), else the gather."""
    plan = copy_plan(fused_op)
    if plan.path == "vectorised":
        return fastcopy.vectorised(fused_op, name, plan)
    if plan.path == "tiled transpose":
        return fastcopy.tiled(fused_op, name, plan)
    return _generic(fused_op, name, plan.why)


def _generic(fused_op: ai.FusedOp, name: str, why: str) -> KernelSource:
    """The generic gather kernel module (``why``: why neither fast path serves the group)."""
    name = common.kernel_name(name)
    (result,) = common.yielded(fused_op)
    spec = spec_of(result.type)
    rank = max(spec.rank, 1)
    shape = spec.shape or (1,)
    idx = [f"i{d}" for d in range(rank)]
    maps = _IndexMaps(fused_op)
    value = maps.load(result, idx if spec.rank else [])
    code = common.Source([])
    params = ["out0"] + [f"in{k}" for k in range(len(fused_op.inputs))]
    doc = "Grid-stride loop over the result: each element read from its source."
    common.kernel_def(code, name, params, doc)
    for k in range(len(maps.tables)):
        code.add(1, f"G{k} = cuda.const.array_like(TABLE{k})")
    code.add(1, "step = cuda.gridsize(1)", "e = cuda.grid(1)", "while e < N:")
    code.add(2, "r = e")
    n = math.prod(shape)  # below 2**31: 32-bit divisions, a few instructions each
    for d in range(rank - 1, 0, -1):
        rem, div = fastcopy.index_rem("r", shape[d], n), fastcopy.index_div("r", shape[d], n)
        code.add(2, f"{idx[d]} = {rem}", f"r = {div}")
    code.add(2, f"{idx[0]} = r")
    code.add(2, *maps.lines)
    code.add(2, f"out0[e] = {value}", "e += step")
    ins = [f"in{k}" for k in range(len(fused_op.inputs))]
    notes = [
        why,
        f"one element per thread and loop step over {math.prod(shape)} elements, read "
        "from the source index the transposes, reshapes, slices, gathers and concats give",
    ]
    constants = [
        f"N = {math.prod(shape)}",
        f"THREADS = {THREADS}",
        *(f"TABLE{k} = np.array({list(t)!r}, dtype=np.int64)" for k, t in enumerate(maps.tables)),
    ]
    helpers = fastcopy.INDEX_HELPERS if n <= fastcopy.NARROW else []
    tail = common.grid_stride_launch(name, "N", BLOCKS_PER_SM, [*ins, "out0"], params)
    return fastcopy.copy_module(
        fused_op, name, "gather", notes, helpers, constants, code.text(), tail
    )
