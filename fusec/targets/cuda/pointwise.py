"""CUDA template for "pointwise" groups: one grid-stride Numba CUDA kernel.

Each thread handles one vector of ``VEC`` consecutive output elements per loop
step: every full-size tensor moves with 16-byte ``ld.global.v4``/``st.global.v4``
accesses (``VEC`` = 16 bytes of the narrowest tensor), the fused elementwise
chain runs in float32 registers, and only the group's results are written.

Broadcast inputs are read by index arithmetic: the output space is first
collapsed (adjacent dims that every operand treats alike merge), then each
vector's multi-index is computed once. A size-1 input is loaded once per
thread before the loop; an input that varies along the last dim is
vector-loaded at its broadcast offset; one broadcast along the last dim is a
single scalar load per vector. Results smaller than the output space are
written by the one thread whose index is 0 along their broadcast dims.

A group input may be read through layout ops at the head of the body (``VIEW_OPS``: a
slice, a reshape and a transpose, which ``read-views-in-place`` moves in from the copy and
view groups before a pointwise group): its elements are then at strides of the input's buffer
(``strided.view_after``, as the copy kernel's views), the last dim contiguous, so that a
vector is still one 16-byte access, at an offset computed per vector (a column slice of a
combined QKV projection read by RoPE, issue 28; GPT-NeoX's per-head interleaved one,
whose heads move before the sequence first).
"""

from __future__ import annotations

import math

from xdsl.ir import SSAValue

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import (
    ELEMENTWISE_OPS,
    ExprGenerator,
    block_axis_dims,
    block_axis_shapes,
    block_leaves,
    broadcast_shapes,
    coalesce,
    coalesce_groups,
    error_at,
    header,
    leaf_shapes,
    shape_of,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.dtypes import is_float
from fusec.targets.cuda.common import (
    ITEMSIZE,
    VECTOR_BYTES,
    Source,
    body_ops,
    check_elementwise,
    check_leaves,
    grid_stride_launch,
    kernel_def,
    kernel_name,
    module_text,
    prelude,
    storage_signature,
    vector_accesses,
    yielded,
)
from fusec.targets.cuda.strided import View, source_view, view_after

THREADS = 256
#: Bytes of the narrowest tensor per thread and loop step: one 16-byte access per
#: operand, lane-contiguous across the warp. (32 bytes, two accesses per thread,
#: measured slower on the H200: 75% instead of 93% of copy bandwidth.)
BYTES_PER_STEP = 16
#: Blocks per multiprocessor at most; the grid-stride loop covers the rest.
BLOCKS_PER_SM = 16


class _Operand:
    """One tensor the kernel touches: a group input (leaf) or a result."""

    def __init__(
        self,
        array: str,
        dtype: str,
        shape: tuple[int, ...],
        space: tuple[int, ...],
        block: tuple[int, int] | None = None,
        strides: tuple[tuple[int, ...], int] | None = None,
    ):
        self.array = array  # kernel parameter name, e.g. in0 / out1
        self.buffer = f"v_{array}"  # its local array of one loop step's elements
        self.dtype = dtype
        self.shape = shape  # collapsed, same rank as the collapsed space
        #: a per-block scale or zero point (issue 31): (dim of the collapsed space, block
        #: size); read at index // block along that dim (``block_offset``)
        self.block = block
        #: an input read through views (``input_views``): the elements of each dim of the
        #: collapsed space apart in its buffer, and where element 0 lies
        self.strides = strides
        size = math.prod(shape)
        if strides is not None:
            self.kind = "strided"
        elif block is not None:
            # along the last dim a vector lies in one block (VEC divides the block): one
            # value a vector; along another, it varies along the last dim as a row does
            self.kind = "block_col" if block[0] == len(space) - 1 else "block_row"
        elif size == 1 and math.prod(space) > 1:
            self.kind = "scalar"
        elif shape == space:
            self.kind = "full"
        elif shape[-1] == space[-1]:
            self.kind = "row"  # varies along the last dim: contiguous within a vector
        else:
            self.kind = "col"  # broadcast along the last dim: one value per vector

    @property
    def vectorised(self) -> bool:
        return self.kind in ("full", "row", "block_row", "strided")

    def offset(self, space: tuple[int, ...], idx: list[str]) -> str:
        """Where the vector (or value) at multi-index ``idx`` of ``space`` starts."""
        from fusec.codegen.expr import block_offset, broadcast_offset

        if self.strides is not None:
            steps, base = self.strides
            terms = [f"{i} * {n}" if n != 1 else i for i, n in zip(idx, steps, strict=True)]
            return " + ".join([str(base)] * (base != 0) + terms)
        if self.block is None:
            return broadcast_offset(space, self.shape, idx)
        return block_offset(space, self.shape, idx, *self.block)

    @property
    def raw(self) -> bool:
        """An integer or bool tensor: moved and computed as itself (plain indexed loads and
        stores, a local array of its type), not through the float32 access helpers."""
        return not is_float(self.dtype)

    def load(self, index: str) -> str:
        """One element as the chain computes it (float32 for float tensors)."""
        return f"{self.array}[{index}]" if self.raw else f"ld_{self.dtype}({self.array}, {index})"

    def store(self, index: str, value: str) -> str:
        if self.raw:
            return f"{self.array}[{index}] = {value}"
        return f"st_{self.dtype}({self.array}, {index}, {value})"

    def helper(self, op_name: str) -> str | None:
        """The access helper an ``ld``/``st`` of this operand needs (None for raw ones)."""
        return None if self.raw else f"{op_name}_{self.dtype}"


#: Local-array element types of integer and bool values (bools stored as uint8 0/1).
_RAW_LOCAL = {"i64": "i64_t", "i32": "i32_t", "i1": "u8_t"}
_RAW_IMPORT = "from numpy import int32 as i32_t, int64 as i64_t, uint8 as u8_t"


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The pointwise kernel module of ``fused_op``."""
    name = kernel_name(name)
    views, ops = input_views(fused_op, body_ops(fused_op))
    check_elementwise(ops, (*ELEMENTWISE_OPS, ai.RotateHalfOp))
    results = yielded(fused_op)
    leaves = leaf_shapes(ops)
    for value in results:
        if value in views:
            raise error_at(views[value].op, "is a result of the group, not read by its ops")
        if value not in leaves and not any(value in op.results for op in ops):
            leaves[value] = shape_of(value)  # an input passed straight through
    arg_index = check_leaves(fused_op, {v: s for v, s in leaves.items() if v not in views})
    arg_index = {**arg_index, **{v: view.index for v, view in views.items()}}

    out_shapes = [shape_of(v) for v in results]
    space0 = broadcast_shapes(*out_shapes, *leaves.values())
    leaf_list = list(leaves)
    for value, view in views.items():
        if leaves[value] != space0:
            raise error_at(view.op, f"is read in place as {leaves[value]}, not the loop's {space0}")
    # a per-block scale (issue 31) is read at index // block along its axis: that axis
    # stays a dim of its own (a shape full along it alone keeps it from merging), as in
    # the cpu loop (``targets/cpu/loops.py``); an input read through views keeps apart the
    # dims that are not one run in its buffer
    blocks = block_leaves(ops)
    isolate = block_axis_shapes(space0, leaves, blocks)
    breaks = [shape for view in views.values() for shape in view.breaks(space0)]
    shapes = [leaves[v] for v in leaf_list] + out_shapes + isolate + breaks
    space, collapsed = coalesce(space0, shapes)
    groups = coalesce_groups(space0, shapes)
    first = len(leaf_list) + len(out_shapes)
    dims = block_axis_dims(collapsed[first : first + len(isolate)])
    block_of = {value: (dim, blocks[value][1]) for value, dim in zip(blocks, dims, strict=True)}
    in_ops = {
        v: _Operand(
            f"in{arg_index[v]}",
            spec_of(v.type).dtype,
            collapsed[k],
            space,
            block_of.get(v),
            views[v].collapsed(groups) if v in views else None,
        )
        for k, v in enumerate(leaf_list)
    }
    out_ops = [
        _Operand(f"out{k}", spec_of(v.type).dtype, collapsed[len(leaf_list) + k], space)
        for k, v in enumerate(results)
    ]
    rotations = _rotations(ops, space0, in_ops)
    plan = _Plan(space, list(in_ops.values()), out_ops, space0[-1] if rotations else 0)
    source = _emit(fused_op, name, ops, results, in_ops, out_ops, plan, rotations)
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, "pointwise", "cuda", source, inputs, outputs, array_dtype=None)


#: The layout ops a pointwise kernel reads a group input through in place, at the head of
#: its body (``input_views``).
VIEW_OPS = (ai.SliceOp, ai.ReshapeOp, ai.TransposeOp)


class _InputView:
    """A value the body reads through layout ops over group input ``index``: each of its
    dims' step in that input's buffer (``strides``, the innermost of more than one element
    1) and where its element 0 lies; ``op`` the last layout op (for diagnostics)."""

    def __init__(self, view: View, op) -> None:
        self.index = view.source
        self.strides = view.strides
        self.offset = view.offset
        self.op = op

    def breaks(self, space: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Shapes that keep ``coalesce`` from merging neighbouring dims of ``space`` (the
        view's shape) that are not one run in the buffer: each full up to the outer dim."""
        sized = [d for d in range(len(space)) if space[d] != 1]
        return [
            tuple(n if i <= d else 1 for i, n in enumerate(space))
            for d, e in zip(sized, sized[1:], strict=False)
            if self.strides[d] != self.strides[e] * space[e]
        ]

    def collapsed(self, groups: list[list[int]]) -> tuple[tuple[int, ...], int]:
        """(strides, offset) in the collapsed space: a merged dim steps as its innermost
        (a space of one element collapses to ``(1,)``: no step)."""
        if not groups:
            return (0,), self.offset
        return tuple(self.strides[g[-1]] for g in groups), self.offset


def view_problem(op, view: View | str) -> str | None:
    """Why the kernel cannot read the value of layout op ``op`` through ``view`` (a reason
    already: not a strided view), or None: the innermost dim of more than one element (the
    one a vector runs along) contiguous."""
    if isinstance(view, str):
        return view
    dims = zip(view.shape, view.strides, strict=True)
    inner = next((stride for n, stride in reversed(list(dims)) if n != 1), 1)
    if inner != 1:
        return f"{op.name}'s innermost dim is not contiguous in its input's buffer"
    return None


def input_views(fused_op: ai.FusedOp, ops: list) -> tuple[dict, list]:
    """The values the body reads through leading layout ops over group inputs (value ->
    ``_InputView``), and the other ops."""
    args: dict[SSAValue, int] = {arg: i for i, arg in enumerate(fused_op.block.args)}
    seen: dict[SSAValue, View] = {}
    rest, last_op = [], {}
    for op in ops:
        source = op.operands[0] if isinstance(op, VIEW_OPS) else None
        if source is None or not (source in args or source in seen):
            rest.append(op)
            continue
        inner = seen.get(source) or source_view(args[source], shape_of(source))
        view = view_after(inner, op)
        if (problem := view_problem(op, view)) is not None:
            raise error_at(op, f"cannot be read in place by the pointwise kernel: {problem}")
        assert not isinstance(view, str)
        seen[op.results[0]] = view
        last_op[op.results[0]] = op
    read = {value for op in rest for value in op.operands}
    roots = [view.source for value, view in seen.items() if value in read]
    roots += [args[value] for value in read if value in args]
    if len(roots) != len(set(roots)):  # (read-views-in-place gives each chain its own input)
        raise error_at(
            fused_op, "reads a group input through two views, or through a view and directly"
        )
    views = {v: _InputView(view, last_op[v]) for v, view in seen.items() if v in read}
    return views, rest


def _rotations(ops, space0: tuple[int, ...], in_ops: dict) -> dict:
    """The operands ``ai.rotate_half`` reads at another index (each a group input of the
    whole iteration space): value -> its second view, a buffer loaded n/2 elements along
    the last axis away (``n`` the last dim; the ops' half, ``n // 2``)."""
    import copy

    found = {}
    for op in ops:
        if not isinstance(op, ai.RotateHalfOp):
            continue
        if shape_of(op.input) != tuple(space0) or op.input not in in_ops:
            from fusec.codegen.expr import error_at

            raise error_at(op, "reads an operand that is not a group input of the loop's shape")
        view = copy.copy(in_ops[op.input])
        view.buffer = f"{view.buffer}_r"
        found[op.input] = view
    return found


class _Plan:
    """Vector width, element counts and whether per-vector index arithmetic is needed."""

    def __init__(self, space, ins: list[_Operand], outs: list[_Operand], rotate: int):
        self.space = space
        operands = ins + outs
        self.indexed = any(o.kind != "full" and o.kind != "scalar" for o in operands) or any(
            o.kind != "full" for o in outs
        )
        widths = [ITEMSIZE[o.dtype] for o in operands if o.vectorised]
        vec = BYTES_PER_STEP // min(widths) if widths else 1
        if self.indexed:
            vec = math.gcd(vec, space[-1])
        for o in operands:  # a vector lies in one block of a scale per block along the last dim
            if o.kind == "block_col" and o.block is not None:
                vec = math.gcd(vec, o.block[1])
            if o.strides is not None:  # a strided vector starts at a multiple of VEC too
                vec = math.gcd(vec, o.strides[1], *o.strides[0][:-1])
        #: the last dim of an ai.rotate_half's operand (0: none): a vector lies in one half
        self.rotate = rotate
        if self.rotate:
            vec = math.gcd(vec, self.rotate // 2)
        self.vec = vec
        self.n = math.prod(space)
        self.nvec = self.n // vec
        self.tail = self.n % vec
        # few streams (e.g. one input, one output): a second vector per step, one grid
        # stride away (still lane-contiguous), doubles the loads in flight
        loaded = sum(1 for o in ins if o.vectorised)
        self.unroll = (
            2 if not self.indexed and not self.rotate and loaded <= 2 and self.nvec > 1 else 1
        )


def _emit(fused_op, name, ops, results, in_ops, out_ops, plan: _Plan, rotations) -> str:
    gen = ExprGenerator()
    helpers: set[str] = set()
    vec = plan.vec
    rank = len(plan.space)
    idx = [f"i{d}" for d in range(rank)]
    code = Source([])
    params = [o.array for o in out_ops] + [f"in{k}" for k in range(len(fused_op.inputs))]
    kernel_def(
        code, name, params, "Grid-stride loop over vectors of VEC elements of the output space."
    )

    for op in list(in_ops.values()) + out_ops + list(rotations.values()):
        if op.vectorised:
            code.add(1, f"{_buf(op)} = cuda.local.array(SPAN, {_RAW_LOCAL.get(op.dtype, 'f32')})")
    for op in in_ops.values():
        if op.kind == "scalar":
            _need(helpers, op, "ld")
            code.add(1, f"{_scal(op)} = {op.load('0')}")
    code.add(1, "step = cuda.gridsize(1)", "vec = cuda.grid(1)", "while vec < NVEC:")
    code.add(2, "e = vec * VEC")
    if plan.unroll == 2:
        code.add(
            2,
            "e2 = e + step * VEC  # this step's second vector, if there is one",
            "more = vec + step < NVEC",
        )
    if plan.indexed:
        _emit_index(code, plan.space, idx)

    def offset(op: _Operand) -> str:
        return op.offset(plan.space, idx) if plan.indexed else "e"

    for op in in_ops.values():
        if op.kind == "full":
            _emit_vector(code, helpers, "load", op, "e", vec)
            if plan.unroll == 2:
                code.add(2, "if more:")
                _emit_vector(code, helpers, "load", op, "e2", vec, indent=3, slot=vec)
        elif op.kind in ("row", "block_row", "strided"):
            code.add(2, f"b_{op.array} = {offset(op)}")
            _emit_vector(code, helpers, "load", op, f"b_{op.array}", vec)
        elif op.kind in ("col", "block_col"):
            _need(helpers, op, "ld")
            code.add(2, f"{_scal(op)} = {op.load(offset(op))}")

    if plan.rotate:
        # ai.rotate_half: the vector n/2 along the last axis (a vector lies in one half)
        half = plan.rotate // 2
        code.add(2, f"rneg = e % {plan.rotate} < {half}")
        if any(view.kind != "strided" for view in rotations.values()):
            code.add(2, f"rbase = e + {half} if rneg else e - {half}")
        if any(view.kind == "strided" for view in rotations.values()):
            code.add(2, f"rstep = {half} if rneg else -{half}")
        for view in rotations.values():
            base = f"b_{view.array} + rstep" if view.kind == "strided" else "rbase"
            _emit_vector(code, helpers, "load", view, base, vec)

    def vector_leaf(value) -> str:
        op = in_ops[value]
        return f"{_buf(op)}[j]" if op.vectorised else _scal(op)

    def rotated(value) -> tuple[str, str]:
        return f"{_buf(rotations[value])}[j]", "rneg"

    stmts, names = gen.chain(ops, vector_leaf, rotated)
    code.add(2, "for j in range(SPAN):")
    code.add(3, *stmts)
    for value, op in zip(results, out_ops, strict=True):
        target = f"{_buf(op)}[j]" if op.vectorised else _scal(op)
        code.add(3, f"{target} = {names.get(value) or vector_leaf(value)}")
    for op in out_ops:
        _emit_result(code, helpers, op, plan, idx, offset(op))
    if plan.unroll == 2:
        code.add(2, "if more:")
        for op in out_ops:
            _emit_vector(code, helpers, "store", op, "e2", vec, indent=3, slot=vec)
    code.add(2, f"vec += {'2 * step' if plan.unroll == 2 else 'step'}")

    if plan.tail:
        assert not plan.rotate  # VEC divides n/2, so N (a multiple of n)
        code.add(1, "# the last N % VEC elements, one per thread (all operands full or size 1)")
        code.add(1, "k = NVEC * VEC + cuda.grid(1)", "if k < N:")

        def scalar_leaf(value) -> str:
            op = in_ops[value]
            if op.kind == "scalar":
                return _scal(op)
            _need(helpers, op, "ld")
            return op.load("k")

        stmts, names = gen.chain(ops, scalar_leaf)
        code.add(2, *stmts)
        for value, op in zip(results, out_ops, strict=True):
            _need(helpers, op, "st")
            code.add(2, op.store("k", names.get(value) or scalar_leaf(value)))

    helpers |= gen.helpers
    return _module(fused_op, name, code, helpers, plan, params, in_ops, out_ops)


def _need(helpers: set, op: _Operand, op_name: str) -> None:
    """Record the access helper ``op_name`` of ``op`` (raw operands need none)."""
    if (helper := op.helper(op_name)) is not None:
        helpers.add(helper)


def _buf(op: _Operand) -> str:
    return op.buffer


def _scal(op: _Operand) -> str:
    return f"s_{op.array}"


def _emit_index(code: Source, space, idx) -> None:
    """Multi-index of element ``e`` in the (collapsed) output space."""
    code.add(2, "r = e")
    for d in range(len(space) - 1, 0, -1):
        code.add(2, f"{idx[d]} = r % {space[d]}", f"r = r // {space[d]}")
    code.add(2, f"{idx[0]} = r")


def _emit_vector(
    code: Source,
    helpers: set,
    op_name: str,
    op: _Operand,
    base: str,
    vec,
    indent: int = 2,
    slot: int = 0,
) -> None:
    """16-byte (or narrower) loads/stores moving VEC elements of ``op`` (buffer from ``slot``);
    an integer or bool operand's elements as themselves: one-byte ones (codes, masks, zero
    points) loaded 4, 8 or 16 at once where VEC is a multiple of 4 (a vector starts at a
    multiple of VEC elements: ``_Plan``), others one by one."""
    if op.raw and op_name == "load" and ITEMSIZE[op.dtype] == 1 and vec % 4 == 0:
        for first in range(0, vec, VECTOR_BYTES):
            fn = f"load_bytes{min(VECTOR_BYTES, vec - first)}"
            helpers.add(fn)
            where = base if first == 0 else f"{base} + {first}"
            code.add(indent, f"{fn}({op.array}, {where}, {_buf(op)}, {slot + first})")
        return
    if op.raw:
        source, target = f"{op.array}[{base} + q]", f"{_buf(op)}[{slot} + q]"
        copy = f"{target} = {source}" if op_name == "load" else f"{source} = {target}"
        code.add(indent, f"for q in range({vec}):")
        code.add(indent + 1, copy)
        return
    for first, count in vector_accesses(op.dtype, vec):
        fn = f"{op_name}_{op.dtype}x{count}"
        helpers.add(fn)
        where = base if first == 0 else f"{base} + {first}"
        code.add(indent, f"{fn}({op.array}, {where}, {_buf(op)}, {slot + first})")


def _emit_result(code: Source, helpers: set, op: _Operand, plan: _Plan, idx, offset: str) -> None:
    if op.kind == "full":
        _emit_vector(code, helpers, "store", op, "e", plan.vec)
        return
    guard = [f"{idx[d]} == 0" for d in range(len(plan.space)) if op.shape[d] == 1]
    guard = guard or ["True"]
    code.add(2, f"if {' and '.join(guard)}:")
    if op.kind == "row" and op.raw:
        code.add(3, f"b_{op.array} = {offset}")
        _emit_vector(code, helpers, "store", op, f"b_{op.array}", plan.vec, indent=3)
    elif op.kind == "row":
        code.add(3, f"b_{op.array} = {offset}")
        for first, count in vector_accesses(op.dtype, plan.vec):
            fn = f"store_{op.dtype}x{count}"
            helpers.add(fn)
            where = f"b_{op.array}" if first == 0 else f"b_{op.array} + {first}"
            code.add(3, f"{fn}({op.array}, {where}, {_buf(op)}, {first})")
    else:
        _need(helpers, op, "st")
        code.add(3, op.store(offset, _scal(op)))


def _module(fused_op, name, code: Source, helpers, plan: _Plan, params, in_ops, out_ops) -> str:
    vec_bytes = min(16, max((ITEMSIZE[o.dtype] * plan.vec for o in out_ops), default=0))
    notes = [
        "target: cuda (Numba CUDA), template: pointwise",
        f"layout: {plan.vec} elements per thread and loop step "
        f"(accesses of up to {vec_bytes} bytes), grid-stride loop over {plan.nvec} vectors"
        + (", two vectors a grid stride apart per step" if plan.unroll == 2 else ""),
    ]
    if plan.indexed:
        notes.append(f"broadcasting by index arithmetic over the collapsed space {plan.space}")
    dtypes = [o.dtype for o in out_ops] + [spec_of(v.type).dtype for v in fused_op.inputs]
    ins = [f"in{k}" for k in range(len(fused_op.inputs))]
    outs = [o.array for o in out_ops]
    raw = any(o.raw for o in [*in_ops.values(), *out_ops])
    if raw:
        notes.append("integer and bool values loaded, computed and stored as themselves")
    return module_text(
        [
            header(fused_op, notes=notes),
            prelude(sorted(helpers)) + (f"{_RAW_IMPORT}\n" if raw else ""),
        ],
        [
            f"SIGNATURE = {storage_signature(dtypes)!r}",
            f"VEC = {plan.vec}",
            f"SPAN = {plan.vec * plan.unroll}  # elements per thread and loop step",
            f"N = {plan.n}",
            f"NVEC = {plan.nvec}",
            f"THREADS = {THREADS}",
        ],
        code.text(),
        grid_stride_launch(name, "max(NVEC, N - NVEC * VEC, 1)", BLOCKS_PER_SM, ins + outs, params),
    )
