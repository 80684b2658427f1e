"""CUDA template for "row_reduce" groups: layernorm, RMSNorm or softmax with fused neighbours.

Last-axis reductions (layernorm, rms_norm, softmax over the last axis) use one block per
row, or one warp per row when the row is short. Each thread owns ``PER_VECS``
vectors of ``VEC`` elements of its row (16-byte accesses, coalesced across the
threads of the row), computed once by the fused prologue and kept in
registers; the statistics are reduced in float32 (warp shuffles, then shared
memory across warps); the epilogue then runs on the cached values, so the
row is read from memory once and written once:

* layernorm: mean, then the variance of the cached centred values (two
  reductions over registers, no cancellation; the mean corrected by the
  deviations' own sum, so constant rows normalise to exactly 0), then
  ``(x - mean) * rstd * gamma + beta``. A row of huge finite values whose float32
  sums overflow (3e38: the float64 reference is finite) takes its statistics
  again, of ``x`` over a power of 2 near ``max|x|`` (one more max reduction, for
  such rows only): other rows pay two compares, where Welford's merging
  (PyTorch's) costs a division per element on every row;
* rms_norm: the mean of the cached squares, then ``x * rstd * gamma`` (a row
  whose squares overflow float32 takes its sum again of ``x`` over a power of 2
  near ``max|x|``, as the layernorm does); Llama's exported RMSNorm (casts to f32
  and back, the scale) is one ``ai.rms_norm`` after ``recognize-patterns``, so one
  kernel reads the row once and writes it once (issue #28);
* softmax: the row maximum, then ``exp(x - max)`` (cached) and its sum, then
  ``e * (1 / sum)``.

Softmax over another axis uses one thread per (outer, inner) column, reading
along the axis with stride ``INNER`` (coalesced across threads): three passes
(max, sum, write) that recompute the prologue from memory.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import (
    ELEMENTWISE_OPS,
    ROW_REDUCTIONS,
    ExprGenerator,
    broadcast_offset,
    coalesce,
    error_at,
    header,
    leaf_shapes,
    literal,
    shape_of,
    the_row_reduction,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import (
    ITEMSIZE,
    Source,
    body_ops,
    check_elementwise,
    check_leaves,
    kernel_def,
    kernel_name,
    launch_tail,
    module_text,
    pad,
    prelude,
    storage_signature,
    vector_accesses,
    yielded,
)

REDUCTIONS = ROW_REDUCTIONS
#: The normalisations (x kept in registers, its parameters read in the epilogue).
NORMS = (ai.LayerNormOp, ai.RMSNormOp)
#: Threads per row: aim for this many vectors per thread.
VECS_PER_THREAD = 2
WARP_ROWS_PER_BLOCK = 4
STRIDED_THREADS = 256
#: Threads per row (block) at most: long rows get more vectors per thread instead.
MAX_THREADS = 256


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The row-reduction kernel module of ``fused_op``."""
    name = kernel_name(name)
    ops = body_ops(fused_op)
    red = the_row_reduction(fused_op, ops)
    others = [op for op in ops if op is not red]
    check_elementwise(others, ELEMENTWISE_OPS)
    group = _Group(fused_op, ops, red)
    rank = len(group.space)
    axis = red.attr("axis") % rank if isinstance(red, ai.SoftmaxOp) else rank - 1
    if axis == rank - 1:
        source = _RowsEmitter(group, name).emit()
    else:
        source = _StridedEmitter(group, name, axis).emit()
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, "row_reduce", "cuda", source, inputs, outputs, array_dtype=None)


class _Group:
    """The group split around its reduction op ``red``.

    ``pre`` are the ops producing the reduction's input (run before the
    reduction, once per element); ``post`` every other op (run after it).
    """

    def __init__(self, fused_op: ai.FusedOp, ops, red) -> None:
        self.fused_op = fused_op
        self.red = red
        self.results = yielded(fused_op)
        self.space = shape_of(red.results[0])
        cone = _producers(red.operands[0], ops)
        self.pre = [op for op in ops if op in cone]
        self.post = [op for op in ops if op not in cone and op is not red]
        leaves = leaf_shapes(ops)
        for value in self.results:
            if value not in leaves and not any(value in op.results for op in ops):
                leaves[value] = shape_of(value)
        self.leaves = leaves
        self.arg_index = check_leaves(fused_op, leaves)
        for value in self.results:
            if _pad_to(shape_of(value), self.space) != self.space:
                raise error_at(
                    fused_op,
                    f"row_reduce result of shape {shape_of(value)} differs from the "
                    f"reduction's shape {self.space}: not supported by the CUDA template",
                )
        for shape in leaves.values():
            if len(shape) > len(self.space):
                raise error_at(fused_op, "an input has a higher rank than the reduction")

    def array(self, value) -> str:
        return f"in{self.arg_index[value]}"

    def dtype(self, value) -> str:
        return spec_of(value.type).dtype

    def out_dtypes(self) -> list[str]:
        return [self.dtype(v) for v in self.results]

    def signature(self) -> str:
        dtypes = self.out_dtypes() + [spec_of(v.type).dtype for v in self.fused_op.inputs]
        return storage_signature(dtypes)

    def params(self) -> list[str]:
        outs = [f"out{k}" for k in range(len(self.results))]
        return outs + [f"in{k}" for k in range(len(self.fused_op.inputs))]


def _producers(value, ops) -> set:
    """Ops among ``ops`` that ``value`` depends on (its producer cone)."""
    in_group = set(ops)
    cone: set = set()
    stack = [value]
    while stack:
        owner = stack.pop().owner
        if owner in in_group and owner not in cone:
            cone.add(owner)
            stack.extend(owner.operands)
    return cone


def _pad_to(shape, space) -> tuple[int, ...]:
    return pad(shape, len(space)) if len(shape) <= len(space) else tuple(shape)


def _launch_module(group: _Group, name: str, notes, constants, code: Source, helpers, grid):
    ins = [f"in{k}" for k in range(len(group.fused_op.inputs))]
    outs = [f"out{k}" for k in range(len(group.results))]
    return module_text(
        [header(group.fused_op, notes=notes), prelude(sorted(helpers))],
        [f"SIGNATURE = {group.signature()!r}", *(f"{key} = {value}" for key, value in constants)],
        code.text(),
        launch_tail(name, [f"    return {grid}, THREADS"], ins + outs, group.params()),
    )


class _RowsEmitter:
    """Last-axis reduction: rows x L, register-cached rows."""

    def __init__(self, group: _Group, name: str) -> None:
        self.g = group
        self.name = name
        self.gen = ExprGenerator()
        self.helpers: set[str] = set()
        space0 = group.space
        lead0 = space0[:-1]
        self.length = space0[-1]
        shapes = [_pad_to(s, space0) for s in group.leaves.values()]
        shapes += [_pad_to(shape_of(v), space0) for v in group.results]
        # leading dims of size 1 only: none (``coalesce`` would keep one)
        lead: tuple[int, ...] = ()
        lead_shapes: list[tuple[int, ...]] = [()] * len(shapes)
        if math.prod(lead0) > 1:
            lead, lead_shapes = coalesce(lead0, [s[:-1] for s in shapes])
        self.lead = lead
        self.rows = math.prod(lead) if lead else 1
        self.space = (*lead, self.length)
        keys = list(group.leaves) + list(group.results)
        self.shapes: dict[SSAValue, tuple[int, ...]] = {}
        for k, key in enumerate(keys):
            lead_shape = lead_shapes[k]
            self.shapes.setdefault(key, (*lead_shape, shapes[k][-1]))
        self.out_shapes = [
            (*(lead_shapes[len(group.leaves) + k] if lead0 else ()), self.length)
            for k in range(len(group.results))
        ]
        widths = [ITEMSIZE[group.dtype(v)] for v in keys if self._varies(v)]
        widths += [ITEMSIZE[d] for d in group.out_dtypes()]
        self.vec = math.gcd(16 // min(widths), self.length) if widths else 1
        nvecs = self.length // self.vec
        if nvecs <= 32 * 4:
            self.threads_per_row = 32
        else:
            want = -(-nvecs // VECS_PER_THREAD)
            # at most 256 threads: then even 255 registers per thread fit any block
            self.threads_per_row = min(MAX_THREADS, max(64, 1 << (want - 1).bit_length()))
        self.per_vecs = -(-nvecs // self.threads_per_row)
        self.rows_per_block = WARP_ROWS_PER_BLOCK if self.threads_per_row == 32 else 1
        self.idx = [f"r{d}" for d in range(len(lead))] + ["col"]

    @property
    def in_bounds(self) -> str:
        """The condition of a thread's vector ``col`` of row ``row`` lying in the tensor,
        without the parts that hold for every thread (``True`` when the rows fill the
        blocks and the vectors the row): GPT-2's 128 x 768 LayerNorm took 3.74 us with the
        branches around its loads and statistics, 2.98 without (ncu, H100,
        benchmarks/results/models-gpu.md)."""
        parts = []
        if self.rows % self.rows_per_block:
            parts.append("live")
        if self.length != self.per_vecs * self.threads_per_row * self.vec:
            parts.append("col < L")
        return " and ".join(parts) or "True"

    def _varies(self, value) -> bool:
        shape = self.g.leaves.get(value, shape_of(value))
        return bool(shape) and shape[-1] != 1

    # ------------------------------------------------------------- helpers
    def offset(self, value, shape=None) -> str:
        shape = self.shapes[value] if shape is None else shape
        return broadcast_offset(self.space, shape, self.idx)

    def load_leaves(self, code: Source, indent: int, values) -> dict:
        """Loads of the leaves ``values`` for the vector at ``col``; their element names."""
        names = {}
        for value in values:
            dtype, array = self.g.dtype(value), self.g.array(value)
            if self._varies(value):
                buf = f"v_{array}"
                code.add(indent, f"b_{array} = {self.offset(value)}")
                self.vector_calls(code, indent, "load", dtype, array, buf)
                names[value] = f"{buf}[j]"
            else:
                self.helpers.add(f"ld_{dtype}")
                code.add(indent, f"s_{array} = ld_{dtype}({array}, {self.offset(value)})")
                names[value] = f"s_{array}"
        return names

    def store_results(self, code: Source, indent: int, which) -> None:
        for k in which:
            dtype, array = self.g.dtype(self.g.results[k]), f"out{k}"
            shape = self.out_shapes[k]
            guard = [f"{self.idx[d]} == 0" for d in range(len(self.lead)) if shape[d] == 1]
            inner = indent
            if guard:
                code.add(indent, f"if {' and '.join(guard)}:")
                inner += 1
            code.add(inner, f"b_{array} = {broadcast_offset(self.space, shape, self.idx)}")
            self.vector_calls(code, inner, "store", dtype, array, f"o_{array}")

    def vector_calls(
        self, code: Source, indent: int, how: str, dtype: str, array: str, buf: str
    ) -> None:
        """The ``load_*`` or ``store_*`` helper calls that move a thread's ``self.vec``
        elements of ``array`` from or to ``buf``, from offset ``b_<array>``."""
        for first, count in vector_accesses(dtype, self.vec):
            fn = f"{how}_{dtype}x{count}"
            self.helpers.add(fn)
            where = f"b_{array}" if first == 0 else f"b_{array} + {first}"
            code.add(indent, f"{fn}({array}, {where}, {buf}, {first})")

    def leaves_of(self, ops, extra=()) -> list:
        defined = {r for op in ops for r in op.results}
        seen = []
        for op in ops:
            for value in op.operands:
                if value in self.g.leaves and value not in defined and value not in seen:
                    seen.append(value)
        for value in extra:
            if value in self.g.leaves and value not in seen:
                seen.append(value)
        return seen

    # ---------------------------------------------------------------- emit
    def emit(self) -> str:
        g, red = self.g, self.g.red
        is_ln = isinstance(red, NORMS)
        code = Source([])
        doc = "ROWS_PER_BLOCK rows per block, THREADS_PER_ROW threads per row."
        kernel_def(code, self.name, g.params(), doc)
        code.add(1, "xr = cuda.local.array(CACHE, f32)  # this thread's part of the row")
        buffers = {f"v_{g.array(v)}" for v in g.leaves if self._varies(v)}
        buffers |= {f"o_out{k}" for k in range(len(g.results))}
        for buf in sorted(buffers):
            code.add(1, f"{buf} = cuda.local.array(VEC, f32)")
        code.add(1, "scratch = cuda.shared.array(THREADS, f32)")
        code.add(
            1,
            "lane = cuda.threadIdx.x % THREADS_PER_ROW",
            "rb = cuda.blockIdx.x * ROWS_PER_BLOCK",
            "while rb < ROWS:  # uniform across the block: every thread reaches each barrier",
        )
        code.add(2, "row = rb + cuda.threadIdx.x // THREADS_PER_ROW", "live = row < ROWS")
        self.row_index(code)
        self.cached = self.cache_plan(is_ln)
        for buf in self.cached.values():
            if buf != "xr":
                code.add(2, f"{buf} = cuda.local.array(CACHE, f32)")
        pre_results = [k for k, v in enumerate(g.results) if _defined_by(v, g.pre)]
        post_results = [k for k in range(len(g.results)) if k not in pre_results]
        self.phase1(code, pre_results, fill=literal(0.0) if is_ln else literal(-math.inf))
        self.phase2(code, is_ln)
        self.phase3(code, post_results, is_ln)
        code.add(2, "rb += cuda.gridDim.x * ROWS_PER_BLOCK")

        self.helpers |= self.gen.helpers
        layout = (
            f"one block of {self.threads_per_row} threads per row"
            if self.rows_per_block == 1
            else f"one warp per row, {self.rows_per_block} rows per block"
        )
        notes = [
            "target: cuda (Numba CUDA), template: row_reduce "
            f"({_KIND_NAMES.get(type(red), 'softmax')} over the last axis)",
            f"layout: {layout}; each thread keeps {self.per_vecs} vector(s) of {self.vec} "
            "elements in registers; float32 statistics",
        ]
        constants = [
            ("ROWS", self.rows),
            ("L", self.length),
            ("VEC", self.vec),
            ("PER_VECS", self.per_vecs),
            ("CACHE", self.per_vecs * self.vec),
            ("INV_L", literal(1.0 / self.length)),
            ("THREADS_PER_ROW", self.threads_per_row),
            ("ROWS_PER_BLOCK", self.rows_per_block),
            ("THREADS", self.threads_per_row * self.rows_per_block),
        ]
        if is_ln:
            constants.append(("EPS", literal(red.attr("epsilon"))))
        grid = "max(1, min(-(-ROWS // ROWS_PER_BLOCK), sms * 32))"
        return _launch_module(g, self.name, notes, constants, code, self.helpers, grid)

    def reduce_fn(self, op: str) -> str:
        fn = f"{'block' if self.rows_per_block == 1 else 'warp'}_{op}"
        self.helpers.add(fn)
        return fn

    def cache_plan(self, is_ln: bool) -> dict:
        """Prologue values the epilogue uses: value -> register array holding them."""
        g = self.g
        x = g.red.operands[0]
        pre_defined = {r for op in g.pre for r in op.results}
        needed = [v for op in g.post for v in op.operands if v in pre_defined]
        needed += [v for v in g.red.operands[1:] if v in pre_defined]
        cached: dict[SSAValue, str] = {}
        for value in needed:
            if value not in cached:
                cached[value] = "xr" if (is_ln and value is x) else f"c{len(cached)}"
        return cached

    def row_index(self, code: Source) -> None:
        if not self.lead:
            return
        code.add(2, "rr = row")
        for d in range(len(self.lead) - 1, 0, -1):
            code.add(2, f"{self.idx[d]} = rr % {self.lead[d]}", f"rr = rr // {self.lead[d]}")
        code.add(2, f"{self.idx[0]} = rr")

    def vector_loop(self, code: Source, indent: int = 2) -> None:
        code.add(indent, "for c in range(PER_VECS):")
        code.add(indent + 1, "col = (c * THREADS_PER_ROW + lane) * VEC")

    def phase1(self, code: Source, results, fill: str) -> None:
        g = self.g
        x = g.red.operands[0]
        code.add(2, "# 1. prologue: the reduction's input, kept in registers")
        self.vector_loop(code)
        code.add(3, f"if {self.in_bounds}:")
        extra = [x] + [g.results[k] for k in results]
        leaves = self.load_leaves(code, 4, self.leaves_of(g.pre, extra))
        stmts, names = self.gen.chain(g.pre, lambda v: leaves[v])
        code.add(4, "for j in range(VEC):")
        code.add(5, *stmts)
        code.add(5, f"xr[c * VEC + j] = {names.get(x) or leaves[x]}")
        for value, buf in self.cached.items():
            if buf != "xr":
                code.add(5, f"{buf}[c * VEC + j] = {names.get(value) or leaves[value]}")
        for k in results:
            value = g.results[k]
            code.add(5, f"o_out{k}[j] = {names.get(value) or leaves[value]}")
        self.store_results(code, 4, results)
        code.add(3, "else:")
        code.add(4, "for j in range(VEC):")
        code.add(5, f"xr[c * VEC + j] = {fill}")

    def phase2(self, code: Source, is_ln: bool) -> None:
        code.add(2, "# 2. row statistics in float32")
        if isinstance(self.g.red, ai.RMSNormOp):
            self.rms_statistics(code)
        elif is_ln:
            code.add(2, f"xscale = {literal(1.0)}", "eps = EPS")
            self.layernorm_statistics(code, 2)
            # Sums of huge finite values overflow float32 (a row of 3e38: mean NaN, var
            # NaN; a row of +-1e20: var Inf), where the float64 reference is finite. Such
            # a row (uniform across the threads that reduce it) takes its statistics
            # again, of x / 2^k ~ x / max|x|: (x - mean) * rstd does not change with the
            # scale but for epsilon, scaled alike. A NaN or Inf in the row gives NaN
            # statistics either way (max|x| is Inf, or the NaN reaches the sums).
            inf = literal(math.inf)  # before the clamp of var (which makes NaN 0)
            self.rescale(code, f"(abs(mean) < {inf} and var_sums < {inf})")
            self.layernorm_statistics(code, 4)
            # var is 0 only for a constant row, whose deviations are exactly 0: any
            # finite rstd gives beta
            self.scaled_epsilon(code)
            code.add(2, f"rstd = {literal(1.0)} / math.sqrt(var + eps)")
        else:
            code.add(2, f"m = {literal(-math.inf)}", "for k in range(CACHE):")
            code.add(3, "m = xr[k] if xr[k] > m else m")
            code.add(2, f"mx = {self.reduce_fn('max')}(m, scratch)")
            code.add(2, f"acc = {literal(0.0)}")
            self.vector_loop(code)
            code.add(3, f"if {self.in_bounds}:")
            code.add(4, "for j in range(VEC):")
            code.add(5, "ev = math.exp(xr[c * VEC + j] - mx)", "xr[c * VEC + j] = ev", "acc += ev")
            code.add(2, f"inv = {literal(1.0)} / {self.reduce_fn('sum')}(acc, scratch)")

    def rms_statistics(self, code: Source) -> None:
        """``rstd`` = 1 / sqrt(mean(x^2) + eps) of the row times ``xscale``: 1, or (the
        squares overflowed float32: a row of 3e38 or of 1e20, finite in the float64
        reference) a power of 2 near 1 / max|x|, epsilon scaled alike (floored at the
        smallest normal: a row of zeros and eps > 0 stays finite). NaN or Inf in the row:
        NaN (max|x| is not finite, the sum keeps the NaN or Inf)."""
        inf = literal(math.inf)
        code.add(2, f"xscale = {literal(1.0)}", "eps = EPS", f"acc = {literal(0.0)}")
        code.add(2, "for k in range(CACHE):")
        code.add(3, "acc += xr[k] * xr[k]")
        code.add(2, f"ms = {self.reduce_fn('sum')}(acc, scratch) * INV_L")
        self.rescale(code, f"ms < {inf}")
        code.add(4, f"acc = {literal(0.0)}", "for k in range(CACHE):")
        code.add(5, "s = xr[k] * xscale", "acc += s * s")
        code.add(4, f"ms = {self.reduce_fn('sum')}(acc, scratch) * INV_L")
        self.scaled_epsilon(code)
        code.add(2, f"rstd = {literal(1.0)} / math.sqrt(ms + eps)")

    def rescale(self, code: Source, finite: str) -> None:
        """Unless ``finite`` (one Python expression, parenthesised if it is not atomic:
        the statistics did not overflow float32), ``xscale`` = a power of 2 near
        1 / max|x| of the row (x * xscale exact: a constant row stays constant; normal)
        where max|x| is finite; the caller's lines under it follow at indent 4."""
        code.add(2, f"if not {finite}:")
        code.add(3, f"top = {literal(0.0)}", "for k in range(CACHE):")
        code.add(4, "a = abs(xr[k])", "top = a if a > top else top")
        code.add(3, f"top = {self.reduce_fn('max')}(top, scratch)")
        code.add(3, f"if top < {literal(math.inf)}:")
        code.add(4, f"xscale = f32(math.ldexp({literal(1.0)}, 2 - math.frexp(top)[1]))")

    def scaled_epsilon(self, code: Source) -> None:
        """``eps`` scaled as the row (``xscale`` squared), at indent 4; it underflows (3e38:
        eps / 9e76), so it is floored at the smallest normal when epsilon > 0."""
        code.add(4, "eps = EPS * xscale * xscale")
        if self.g.red.attr("epsilon") > 0:
            tiny = literal(float(np.finfo(np.float32).tiny))
            code.add(4, f"eps = eps if eps > {tiny} else {tiny}")

    def layernorm_statistics(self, code: Source, indent: int) -> None:
        """``mean`` and ``var`` of the row times ``xscale`` (1, or 1 / max|x|), at
        ``indent``: the mean, then the variance of the cached centred values (two
        reductions over registers, no cancellation), corrected two-pass (Chan, Golub,
        LeVeque): the deviations' own sum corrects the rounding of the mean, so a
        constant row (|mean| >> its rounding error times rstd) normalises to exactly
        0, as numpy's mean does."""
        code.add(indent, f"acc = {literal(0.0)}", "for k in range(CACHE):")
        code.add(indent + 1, "acc += xr[k] * xscale")
        code.add(indent, f"mean = {self.reduce_fn('sum')}(acc, scratch) * INV_L")
        code.add(indent, f"acc = {literal(0.0)}", f"dev = {literal(0.0)}")
        self.vector_loop(code, indent)
        code.add(indent + 1, f"if {self.in_bounds}:")
        code.add(indent + 2, "for j in range(VEC):")
        code.add(indent + 3, "d = xr[c * VEC + j] * xscale - mean", "acc += d * d", "dev += d")
        code.add(indent, f"shift = {self.reduce_fn('sum')}(dev, scratch) * INV_L")
        code.add(
            indent, f"var_sums = {self.reduce_fn('sum')}(acc, scratch) * INV_L - shift * shift"
        )
        code.add(indent, f"var = var_sums if var_sums > {literal(0.0)} else {literal(0.0)}")
        code.add(indent, "mean = mean + shift")

    def phase3(self, code: Source, results, is_ln: bool) -> None:
        g, red = self.g, self.g.red
        code.add(2, "# 3. the reduction's result and the epilogue, written once")
        self.vector_loop(code)
        code.add(3, f"if {self.in_bounds}:")
        params = list(red.operands[1:]) if is_ln else []
        param_cone: set = set()
        for p in params:
            param_cone |= _producers(p, g.post)
        param_ops = [op for op in g.post if op in param_cone]
        rest = [op for op in g.post if op not in param_cone]
        extra = params + [g.results[k] for k in results]
        leaves = self.load_leaves(code, 4, self.leaves_of(param_ops + rest, extra))
        code.add(4, "for j in range(VEC):")
        value = self.gen.fresh("y")
        known: dict = {}

        def leaf(v) -> str:
            if v is red.results[0]:
                return value
            if v in known:
                return known[v]
            if v in self.cached:
                return f"{self.cached[v]}[c * VEC + j]"
            return leaves[v]

        stmts_a, names_a = self.gen.chain(param_ops, leaf)
        known.update(names_a)
        code.add(5, *stmts_a)
        if isinstance(red, ai.RMSNormOp):
            (gamma,) = (leaf(p) for p in params)
            code.add(5, f"{value} = xr[c * VEC + j] * xscale * rstd * {gamma}")
        elif is_ln:
            gamma, beta = (leaf(p) for p in params)
            code.add(5, f"{value} = (xr[c * VEC + j] * xscale - mean) * rstd * {gamma} + {beta}")
        else:
            code.add(5, f"{value} = xr[c * VEC + j] * inv")
        stmts_b, names_b = self.gen.chain(rest, leaf)
        known.update(names_b)
        code.add(5, *stmts_b)
        for k in results:
            code.add(5, f"o_out{k}[j] = {leaf(g.results[k])}")
        self.store_results(code, 4, results)


_KIND_NAMES = {ai.LayerNormOp: "layernorm", ai.RMSNormOp: "rms_norm"}


def _defined_by(value, ops) -> bool:
    return any(value in op.results for op in ops)


class _StridedEmitter:
    """Softmax over a non-last axis: one thread per (outer, inner) column."""

    def __init__(self, group: _Group, name: str, axis: int) -> None:
        self.g = group
        self.name = name
        self.axis = axis
        self.gen = ExprGenerator()
        self.helpers: set[str] = set()
        space = group.space
        self.outer = math.prod(space[:axis])
        self.length = space[axis]
        self.inner = math.prod(space[axis + 1 :])
        self.idx = [f"i{d}" for d in range(len(space))]

    def element_index(self, code: Source, indent: int) -> None:
        """Multi-index of element (o, a, i) for leaves indexed by broadcasting."""
        space = self.g.space
        code.add(indent, "rr = (o * A + a) * INNER + i")
        for d in range(len(space) - 1, 0, -1):
            code.add(indent, f"{self.idx[d]} = rr % {space[d]}", f"rr = rr // {space[d]}")
        code.add(indent, f"{self.idx[0]} = rr")

    def load(self, value) -> str:
        dtype = self.g.dtype(value)
        self.helpers.add(f"ld_{dtype}")
        shape = _pad_to(self.g.leaves[value], self.g.space)
        off = broadcast_offset(self.g.space, shape, self.idx)
        return f"ld_{dtype}({self.g.array(value)}, {off})"

    def chain(self, code: Source, indent: int, ops, bound=None):
        """Statements for ``ops`` at element (o, a, i); returns ``name(value)``, which
        names any value: computed, given in ``bound``, or loaded from its input."""
        known = dict(bound or {})

        def name(v) -> str:
            if v not in known:
                known[v] = self.load(v)
            return known[v]

        stmts, names = self.gen.chain(ops, name)
        code.add(indent, *stmts)
        known.update(names)
        return name, known

    def emit(self) -> str:
        g, red = self.g, self.g.red
        x = red.operands[0]
        code = Source([])
        doc = "One thread per (outer, inner) column; three passes along the axis."
        kernel_def(code, self.name, g.params(), doc)
        code.add(1, "t = cuda.grid(1)", "while t < OUTER * INNER:")
        code.add(2, "o = t // INNER", "i = t % INNER", f"mx = {literal(-math.inf)}")
        code.add(2, "for a in range(A):")
        self.element_index(code, 3)
        name, _ = self.chain(code, 3, g.pre)
        code.add(3, f"xv = {name(x)}", "mx = xv if xv > mx else mx")
        code.add(2, f"acc = {literal(0.0)}", "for a in range(A):")
        self.element_index(code, 3)
        name, _ = self.chain(code, 3, g.pre)
        code.add(3, f"acc += math.exp({name(x)} - mx)")
        code.add(2, f"inv = {literal(1.0)} / acc", "for a in range(A):")
        self.element_index(code, 3)
        name, known = self.chain(code, 3, g.pre)
        code.add(3, f"y = math.exp({name(x)} - mx) * inv")
        known[red.results[0]] = "y"
        name, _ = self.chain(code, 3, g.post, known)
        code.add(3, "e = (o * A + a) * INNER + i")
        for k, value in enumerate(g.results):
            dtype = g.dtype(value)
            self.helpers.add(f"st_{dtype}")
            code.add(3, f"st_{dtype}(out{k}, e, {name(value)})")
        code.add(2, "t += cuda.gridsize(1)")
        self.helpers |= self.gen.helpers
        notes = [
            "target: cuda (Numba CUDA), template: row_reduce (softmax over a non-last axis)",
            "layout: one thread per (outer, inner) column, grid-stride; "
            "coalesced along the inner dim; float32 max and sum",
        ]
        constants = [
            ("OUTER", self.outer),
            ("A", self.length),
            ("INNER", self.inner),
            ("THREADS", STRIDED_THREADS),
        ]
        grid = "max(1, min(-(-(OUTER * INNER) // THREADS), sms * 16))"
        return _launch_module(g, self.name, notes, constants, code, self.helpers, grid)
