"""cpu template for "row_reduce" groups, and the row loop the matmul template reuses.

One ``ai.layernorm`` or ``ai.softmax`` with elementwise producers (the
prologue, computed once per element into a row buffer) and consumers (the
epilogue). Each parallel task owns a float32 row buffer and walks its rows
three times while the row is in cache:

* layernorm: sum (float64) -> mean; sum of squared deviations (float64) ->
  rstd; write ``(x - mean) * rstd * gamma + beta`` through the epilogue;
* softmax: max; ``e = exp(x - max)`` into the buffer and its float64 sum;
  write ``e * (1 / sum)`` through the epilogue.

The reduced axis may be any axis (softmax): rows are then strided. When the
epilogue needs prologue values other than the buffered one, the prologue is
recomputed in the last pass rather than buffered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation, SSAValue

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.cpu_common import (
    REDUCE_OPS,
    Stage,
    ancestors,
    assemble,
    body_ops,
    check_elementwise,
    input_names,
    outputs_of,
)
from fusec.codegen.cpu_pointwise import pointwise_stage
from fusec.codegen.expr import (
    ExprGenerator,
    broadcast_offset,
    error_at,
    leaf_shapes,
    literal,
    shape_of,
)
from fusec.dialect import ops as ai

#: At most this many parallel tasks (each allocates one row buffer).
MAX_TASKS = 256


def generate(fused_op, name: str) -> KernelSource:
    ops = body_ops(fused_op)
    gen = ExprGenerator()
    if not any(isinstance(op, REDUCE_OPS) for op in ops):  # the reduction's result is unused
        check_elementwise(ops)
        stage = pointwise_stage(
            f"{name}_pointwise", gen, ops, input_names(fused_op), outputs_of(fused_op)
        )
    else:
        reduce_op = the_reduction(fused_op, ops)
        stage = row_reduce_stage(
            f"{name}_row_reduce", gen, ops, reduce_op, input_names(fused_op), outputs_of(fused_op)
        )
    source = assemble(fused_op, gen, [stage], [stage.call()])
    inputs, outs = io_specs(fused_op)
    return KernelSource(name, "row_reduce", "cpu", source, inputs, outs)


def the_reduction(where: Operation, ops: Sequence[Operation]) -> Operation:
    """The single layernorm/softmax of ``ops`` (others elementwise), else a located error."""
    check_elementwise(ops, REDUCE_OPS)
    reductions = [op for op in ops if isinstance(op, REDUCE_OPS)]
    if len(reductions) != 1:
        raise error_at(
            where,
            "a row reduction fuses exactly one ai.layernorm or ai.softmax, "
            f"found {len(reductions)}",
        )
    return reductions[0]


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
    others = [op for op in ops if op is not reduce_op]
    _check_space(reduce_op, others, writes, space)
    pre_set = ancestors(others, reduce_op.operands)
    pre = [op for op in others if op in pre_set]
    post = [op for op in others if op not in pre_set]

    leaves = leaf_shapes(others + [reduce_op])
    defined = {r for op in ops for r in op.results}
    for value, _ in writes:
        if value not in defined:
            leaves.setdefault(value, shape_of(value))
    index = [f"i{d}" if d != axis else "k" for d in range(len(space))]

    def leaf(value: SSAValue) -> str:
        return f"{reads[value]}[{broadcast_offset(space, leaves[value], index)}]"

    pre_results = {r for op in pre for r in op.results}
    x = reduce_op.operands[0]
    needed_late = {v for op in post for v in op.operands if v in pre_results}
    needed_late |= {v for v in reduce_op.operands[1:] if v in pre_results}
    is_ln = isinstance(reduce_op, ai.LayerNormOp)
    recompute = bool(needed_late - {x}) or (x in needed_late and not is_ln)

    def store_at(value: SSAValue, array: str) -> str:
        return f"{array}[{broadcast_offset(space, shape_of(value), index)}]"

    n = space[axis]
    direct = None  # the reduction reads whole contiguous input rows: no copy into ``buf``
    if not pre and x in reads and leaves[x] == tuple(space) and axis == len(space) - 1:
        direct = f"{reads[x]}[row * {n}:row * {n} + {n}]"
    emit = _RowEmitter(gen, leaf, store_at, pre, post, reduce_op, writes, recompute, direct)
    loop, indent = _task_loop(space, axis, with_buffer=not (direct and is_ln))
    body = loop + [f"{indent}{s}" for s in emit.lines(n)]
    params: list[str] = []
    for value in leaves:
        if value in reads and reads[value] not in params:
            params.append(reads[value])
    params += [a for _, a in writes if a not in params]
    what = "layernorm" if is_ln else f"softmax (axis {axis})"
    comment = f"{what} over rows of {_fmt(space)}"
    return Stage(fn_name, params, body, comment=comment, helpers=emit.helpers)


def _check_space(reduce_op, others, writes, space) -> None:
    for op in others:
        for r in op.results:
            if tuple(np.broadcast_shapes(space, shape_of(r))) != tuple(space):
                raise error_at(op, f"broadcasts beyond the reduced tensor {_fmt(space)}")
    for value, _ in writes:
        if tuple(np.broadcast_shapes(space, shape_of(value))) != tuple(space):
            raise error_at(reduce_op, "a group result is larger than the reduced tensor")


def _task_loop(space: Sequence[int], axis: int, with_buffer: bool) -> tuple[list[str], str]:
    """Tasks over row ranges, each owning a row buffer; row -> indices of the other dims.

    Returns the loop lines and the indent of the per-row statements.
    """
    rows = math.prod(space) // space[axis]
    n = space[axis]
    per = math.ceil(rows / min(rows, MAX_TASKS))
    if per == 1:
        lines = [f"for row in numba.prange({rows}):"]
        indent = "    "
    else:
        lines = [
            f"for task in numba.prange({math.ceil(rows / per)}):",
            f"    for row in range(task * {per}, min(task * {per} + {per}, {rows})):",
        ]
        indent = "        "
    if with_buffer:
        lines.insert(1, f"    buf = np.empty({n}, dtype=np.float32)")
    dims = [d for d in range(len(space)) if d != axis]
    stride = rows
    for pos, d in enumerate(dims):
        stride //= space[d]
        expr = "row" if stride == 1 else f"row // {stride}"
        if pos > 0:
            expr = f"{expr} % {space[d]}"
        lines.append(f"{indent}i{d} = {expr}")
    return lines, indent


class _RowEmitter:
    """The three passes over one row (statements at row-loop depth)."""

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

    def _first_pass(self, n: int) -> list[str]:
        """The prologue for each element of the row, into ``buf`` (and early stores).

        In direct mode the row is a view of the input, called ``xrow``.
        """
        if self.direct:
            return [f"xrow = {self.direct}"]
        stmts, names = self._prologue()
        stmts += self._stores(names, early=True)
        stmts.append(f"buf[k] = {names[self.op.operands[0]]}")
        return [f"for k in range({n}):", *_indent(stmts)]

    def _layernorm(self, n: int) -> list[str]:
        eps = literal(self.op.attr("epsilon"))
        row = "xrow" if self.direct else "buf"
        lines = self._first_pass(n) + [
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

    def _softmax(self, n: int) -> list[str]:
        row = "xrow" if self.direct else "buf"
        lines = self._first_pass(n) + [
            f"m = row_max({row})",
            f"for k in range({n}):",
            f"    buf[k] = math.exp({row}[k] - m)",
            "inv = f32(1.0 / row_sum(buf))",
        ]
        self.helpers |= {"row_max", "row_sum"}

        def normalise(names: dict[SSAValue, str], x: str) -> str:
            return f"y = math.exp({x} - m) * inv" if self.recompute else f"y = {x} * inv"

        return lines + self._last_pass(n, normalise, "buf")

    def _last_pass(self, n: int, normalise, row: str) -> list[str]:
        """Normalise each element (``row[k]`` holds x or its exponential), then the epilogue."""
        x = self.op.operands[0]
        if self.recompute:
            stmts, names = self._prologue()
            x_name = names[x]
        else:
            stmts, names, x_name = [f"xb = {row}[k]"], {}, "xb"
            if isinstance(self.op, ai.LayerNormOp) and x in self.pre_results:
                names[x] = "xb"  # the buffer holds the prologue's x itself
        stmts.append(normalise(names, x_name))
        names[self.op.results[0]] = "y"

        def leaf(value: SSAValue) -> str:
            return names.get(value) or self.leaf(value)

        post_stmts, post_names = self.gen.chain(self.post, leaf)
        names.update(post_names)
        stmts += post_stmts
        stmts += self._stores(names, early=False)
        return [f"for k in range({n}):", *_indent(stmts)]


def _lanes(n: int = 8) -> range:
    return range(n)


def _nanmax(a: str, b: str) -> str:
    """``max(a, b)`` that propagates a NaN in either operand (numpy's semantics)."""
    return f"{b} if {b} > {a} or {b} != {b} else {a}"


def _row_max() -> str:
    body = [
        f"        x{i} = buf[k + {i}]\n        m{i} = {_nanmax(f'm{i}', f'x{i}')}" for i in _lanes()
    ]
    combine = [f"    m = {_nanmax('m', f'm{i}')}" for i in _lanes() if i]
    return "\n".join(
        [
            "def row_max(buf):",
            '    """Largest element (NaN if any is NaN), in 8 lanes that vectorise."""',
            "    n8 = buf.size - buf.size % 8",
            *(f"    m{i} = f32(-math.inf)" for i in _lanes()),
            "    for k in range(0, n8, 8):",
            *body,
            "    m = m0",
            *combine,
            "    for k in range(n8, buf.size):",
            "        x = buf[k]",
            f"        m = {_nanmax('m', 'x')}",
            "    return m",
        ]
    )


def _row_sum(name: str, doc: str, term: str, extra: str = "") -> str:
    return "\n".join(
        [
            f"def {name}(buf{extra}):",
            f'    """{doc}, in float64, in 8 independent lanes that vectorise."""',
            "    n8 = buf.size - buf.size % 8",
            *(f"    s{i} = 0.0" for i in _lanes()),
            "    for k in range(0, n8, 8):",
            *(f"        s{i} += {term.format(f'buf[k + {i}]')}" for i in _lanes()),
            "    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))",
            "    for k in range(n8, buf.size):",
            f"        s += {term.format('buf[k]')}",
            "    return s",
        ]
    )


#: Row reductions called by the row loops; the lanes keep them exact (no fastmath).
ROW_HELPERS = {
    "row_max": _row_max(),
    "row_sum": _row_sum("row_sum", "The sum of the elements", "{}"),
    "row_sq_dev": _row_sum(
        "row_sq_dev",
        "The sum of squared deviations from mean",
        "({0} - mean) * ({0} - mean)",
        ", mean",
    ),
}


def _indent(lines: Sequence[str]) -> list[str]:
    return [f"    {line}" for line in lines]


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"
