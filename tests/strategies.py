"""Random valid ``ai`` graphs for differential and property tests (hypothesis strategies).

``graphs()`` draws a ``Graph``: an abstract DAG of every op of the ``ai``
dialect over random shapes (ragged, size-1 and broadcast dims), element types
(f32, f16, bf16) and attributes (conv strides/padding/dilations/groups, matmul
transposes, batching and 1-D operands, softmax and bias axes, GELU forms,
layernorm epsilons), with constants, values that have several consumers, and
several results. One ``Graph`` renders three ways, so the tests can compare
the front ends and targets on exactly the same computation:

* ``graph.module()``: an xDSL module built with the dialect's op builders,
  ``graph.text()`` its printed IR (what a user writes in a ``.mlir`` file);
* ``graph.function()``: a Python function calling ``fusec.ops``, to trace with
  ``@fusec.fuse``;
* ``graph.inputs(seed)``: fresh random arguments (never zeros; weights scaled
  by 1/sqrt(fan-in) as in real networks).

The op list comes from the dialect (``ai_ops()``), not from a hand-written
list: an elementwise op without attributes (a ``UnaryOp`` or ``BinaryOp``
subclass) is picked up automatically; any other new op needs a builder in
``BUILDERS``, and ``uncovered_ops()`` (checked by a test) names the ops that
have none.

Magnitudes are kept in range on purpose, so that a mismatch means a compiler
bug and not an overflow the float64 reference does not have: every value
carries a rough bound of its absolute value, ``exp`` and products of large
values get a ``tanh`` first, divisors and ``sqrt`` operands are kept away from
zero and negatives. The numeric edge cases (NaN, Inf, overflow) have their own
tests.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FunctionType,
    ModuleOp,
)
from xdsl.ir import Block, Region, SSAValue

from fusec.dialect import AI, AiOp
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of, tensor_type
from fusec.dialect.shapes import ShapeError, TensorSpec
from fusec.ir.dtypes import numpy_dtype

DTYPES = ("f32", "f16", "bf16")
#: Dims: size 1 (broadcasting), small, and ragged sizes no vector width divides.
DIMS = (1, 2, 3, 4, 5, 7, 8, 16, 17, 33)
#: Elements per tensor at most: small tensors keep the reference and kernels fast.
MAX_ELEMENTS = 2048
#: Values are kept below this bound (f16's largest finite value is 65504).
MAX_BOUND = 256.0


#: Ops the generator leaves out, each with the reason and where they are tested instead.
NOT_GENERATED: dict[str, str] = {
    name: "its operands and results are quantized codes, not the generated float values "
    "(issue 31), and the cuda target refuses it: tests/targets/cpu/test_quantization_cpu.py "
    "checks it on cpu bit for bit, tests/dialect/test_quantization.py and "
    "tests/frontend/onnx/test_onnx_quant.py on the "
    "reference"
    for name in ("ai.quantize", "ai.dequantize")
}


def ai_ops() -> list[type[AiOp]]:
    """Every tensor op of the ``ai`` dialect (not the ``ai.fused``/``ai.yield`` structure)
    but those ``NOT_GENERATED``."""
    return [op for op in AI.operations if issubclass(op, AiOp) and op.name not in NOT_GENERATED]


def _properties(op: type[AiOp]) -> set[str]:
    return set(op.get_irdl_definition().properties)


# --------------------------------------------------------------------- the graph


@dataclass(frozen=True)
class Arg:
    """A function argument; ``positive`` ones are drawn from [0.5, 2] (divisors, sqrt)."""

    spec: TensorSpec
    scale: float = 1.0
    positive: bool = False


@dataclass(frozen=True)
class Const:
    """An ``arith.constant`` with these values (already representable in its dtype)."""

    spec: TensorSpec
    values: np.ndarray = field(compare=False)

    def array(self) -> np.ndarray:
        return self.values.astype(numpy_dtype(self.spec.dtype))


@dataclass(frozen=True)
class Node:
    """One op: its class, operand value ids, attributes (Python values) and result type."""

    op: type[AiOp]
    operands: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...]
    spec: TensorSpec


Def = Arg | Const | Node


@dataclass(frozen=True)
class Graph:
    """A function: value definitions in order (ids are positions) and its results."""

    defs: tuple[Def, ...]
    results: tuple[int, ...]
    name: str = "graph"

    @property
    def args(self) -> list[Arg]:
        return [d for d in self.defs if isinstance(d, Arg)]

    @property
    def nodes(self) -> list[Node]:
        return [d for d in self.defs if isinstance(d, Node)]

    def spec(self, value: int) -> TensorSpec:
        return self.defs[value].spec

    def dtypes(self) -> set[str]:
        """Every element type of every value (the least precise one bounds the accuracy)."""
        return {d.spec.dtype for d in self.defs}

    def op_names(self) -> set[str]:
        return {d.op.name for d in self.nodes}

    # ------------------------------------------------------------ renderings
    def module(self) -> ModuleOp:
        """The graph as a module built with the dialect's builders (constants first)."""
        block = Block()
        values: dict[int, SSAValue] = {}
        for i, d in enumerate(self.defs):
            if isinstance(d, Arg):
                values[i] = block.insert_arg(tensor_type(d.spec), len(block.args))
                values[i].name_hint = f"a{len(block.args) - 1}"
        for i, d in enumerate(self.defs):
            if isinstance(d, Const):
                data = BytesAttr(np.ascontiguousarray(d.array()).tobytes())
                op = arith.ConstantOp(DenseIntOrFPElementsAttr(tensor_type(d.spec), data))
                block.add_op(op)
                values[i] = op.result
        for i, d in enumerate(self.defs):
            if isinstance(d, Node):
                op = build_op(d.op, [values[j] for j in d.operands], dict(d.attrs))
                block.add_op(op)
                values[i] = op.results[0]
        results = [values[r] for r in self.results]
        block.add_op(func.ReturnOp(*results))
        ftype = FunctionType.from_lists([a.type for a in block.args], [v.type for v in results])
        return ModuleOp([func.FuncOp(self.name, ftype, Region(block))])

    def text(self) -> str:
        return str(self.module()) + "\n"

    def function(self) -> Callable[..., Any]:
        """A Python function computing the graph with ``fusec.ops`` (to trace)."""
        import fusec.ops as fops

        defs, results = self.defs, self.results

        def run(*arrays: Any) -> Any:
            values: dict[int, Any] = {}
            given = iter(arrays)
            for i, d in enumerate(defs):
                if isinstance(d, Arg):
                    values[i] = next(given)
                elif isinstance(d, Const):
                    values[i] = d.array()
                else:
                    values[i] = trace_op(fops, d, [values[j] for j in d.operands])
            outs = [values[r] for r in results]
            return outs[0] if len(outs) == 1 else tuple(outs)

        params = [
            inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for i in range(len(self.args))
        ]
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__name__ = run.__qualname__ = self.name
        return run

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Fresh random arguments: N(0, scale^2), or U[0.5, 2] for positive ones."""
        rng = np.random.default_rng(seed)
        arrays = []
        for arg in self.args:
            if arg.positive:
                data = rng.uniform(0.5, 2.0, arg.spec.shape)
            else:
                data = rng.standard_normal(arg.spec.shape) * arg.scale
            arrays.append(np.asarray(data).astype(numpy_dtype(arg.spec.dtype)))
        return arrays

    def __repr__(self) -> str:  # hypothesis shows failing examples with it
        return f"Graph(\n{self.text()})"


def build_op(op_cls: type[AiOp], operands: Sequence[SSAValue], attrs: dict[str, Any]) -> AiOp:
    """The op built with the dialect's builder (which infers the result type)."""
    if op_cls is ai.CastOp:
        return ai.CastOp(operands[0], attrs["to"])
    return op_cls(*operands, **attrs)


#: fusec.ops keyword names that differ from the attribute names (numpy/PyTorch style).
TRACER_KEYWORDS: dict[type[AiOp], dict[str, str]] = {
    ai.Conv2DOp: {"strides": "stride", "dilations": "dilation"},
    ai.MaxPool2DOp: {"strides": "stride", "dilations": "dilation"},
    ai.AvgPool2DOp: {"strides": "stride", "dilations": "dilation"},
    ai.LayerNormOp: {"epsilon": "eps"},
    ai.RMSNormOp: {"epsilon": "eps"},
    ai.BatchNormOp: {"epsilon": "eps"},
}


def tracer_function(op_cls: type[AiOp]) -> Callable[..., Any] | None:
    """The ``fusec.ops`` function of an op (its ``function_name()`` fact), if it has one."""
    import fusec.ops as fops

    return getattr(fops, op_cls.function_name(), None)


def traceable(graph: Graph) -> bool:
    """Whether every op of ``graph`` has a ``fusec.ops`` function (can be traced)."""
    return all(tracer_function(node.op) is not None for node in graph.nodes)


def trace_op(fops: Any, node: Node, operands: list[Any]) -> Any:
    fn = tracer_function(node.op)
    assert fn is not None, f"{node.op.name} has no fusec.ops function"
    attrs = dict(node.attrs)
    if node.op is ai.CastOp:
        return fn(operands[0], attrs["to"])
    if node.op is ai.ConcatOp:
        return fn(operands, **attrs)
    if node.op is ai.ClipOp:  # an infinite bound is no bound
        attrs = {k: None if math.isinf(v) else v for k, v in attrs.items()}
    names = TRACER_KEYWORDS.get(node.op, {})
    return fn(*operands, **{names.get(k, k): v for k, v in attrs.items()})


# ------------------------------------------------------------------- drawing


def _result_spec(op_cls: type[AiOp], specs: Sequence[TensorSpec], attrs: dict) -> TensorSpec:
    """The result type of ``op_cls`` on operands of ``specs`` (via the real builder)."""
    block = Block(arg_types=[tensor_type(s) for s in specs])
    return spec_of(build_op(op_cls, list(block.args), attrs).results[0].type)


def _size(shape: Sequence[int]) -> int:
    return math.prod(shape)


class _Drawer:
    """The graph being drawn: definitions, and per value a bound and a lower bound."""

    def __init__(self, draw: Callable, dtype: str) -> None:
        self.draw = draw
        self.dtype = dtype
        self.defs: list[Def] = []
        self.bound: list[float] = []  # rough max |value|
        self.low: list[float] = []  # a lower bound > 0 of positive values, else 0
        self.nonneg: list[bool] = []

    # ------------------------------------------------------------ values
    def _add(self, d: Def, bound: float, low: float = 0.0, nonneg: bool = False) -> int:
        self.defs.append(d)
        self.bound.append(bound)
        self.low.append(low)
        self.nonneg.append(nonneg or low > 0)
        return len(self.defs) - 1

    def spec(self, v: int) -> TensorSpec:
        return self.defs[v].spec

    def arg(self, shape: Sequence[int], *, scale: float = 1.0, positive: bool = False) -> int:
        spec = TensorSpec(tuple(shape), self.dtype)
        if positive:
            return self._add(Arg(spec, positive=True), 2.0, low=0.5)
        return self._add(Arg(spec, scale=scale), 4.0 * scale)

    def const(self, shape: Sequence[int], *, positive: bool = False, dtype: str = "") -> int:
        spec = TensorSpec(tuple(shape), dtype or self.dtype)
        seed = self.draw(st.integers(0, 2**16))
        rng = np.random.default_rng(seed)
        if positive:
            data = rng.uniform(0.5, 2.0, spec.shape)
        elif self.draw(st.booleans()):  # a splat (dense<v>), e.g. a scalar factor
            data = np.full(spec.shape, rng.choice([-2.0, -0.5, 0.25, 1.5, 3.0]))
        else:
            data = rng.standard_normal(spec.shape)
        values = np.asarray(data).astype(numpy_dtype(spec.dtype)).astype(np.float64)
        bound = float(np.max(np.abs(values))) if values.size else 0.0
        low = float(np.min(values)) if positive else 0.0
        return self._add(Const(spec, values), bound, low=low)

    def node(self, op_cls: type[AiOp], operands: Sequence[int], bound: float, **attrs) -> int:
        specs = [self.spec(v) for v in operands]
        spec = _result_spec(op_cls, specs, attrs)
        low, nonneg = 0.0, False
        if op_cls in (ai.SigmoidOp, ai.ExpOp):
            low = 1 / (1 + math.exp(min(self.bound[operands[0]], 700)))
            if op_cls is ai.ExpOp:
                low = math.exp(-min(self.bound[operands[0]], 700))
        elif op_cls in (ai.ReluOp, ai.SoftmaxOp, ai.SqrtOp):
            nonneg = True
        node = Node(op_cls, tuple(operands), tuple(sorted(attrs.items())), spec)
        return self._add(node, min(bound, 1e30), low=low, nonneg=nonneg)

    def pick(self, pred: Callable[[int], bool] = lambda v: True) -> int | None:
        """A value satisfying ``pred``: recent ones more often, old ones too (multi-use)."""
        candidates = [v for v in range(len(self.defs)) if pred(v)]
        if not candidates:
            return None
        if self.draw(st.booleans()):
            return candidates[-1 - self.draw(st.integers(0, min(2, len(candidates) - 1)))]
        return self.draw(st.sampled_from(candidates))

    def same_dtype(self, v: int) -> Callable[[int], bool]:
        dtype = self.spec(v).dtype
        return lambda u: self.spec(u).dtype == dtype

    # ------------------------------------------------------------ helpers
    def tame(self, v: int, limit: float) -> int:
        """``v``, or ``tanh(v)`` when its bound exceeds ``limit`` (keeps exp/products finite)."""
        if self.bound[v] <= limit:
            return v
        return self.node(ai.TanhOp, [v], 1.0)

    def positive_of(self, v: int) -> int:
        """A value >= 1/e derived from ``v`` (exp(tanh(v))): a divisor, a sqrt operand."""
        return self.node(ai.ExpOp, [self.node(ai.TanhOp, [v], 1.0)], math.e)

    def partner_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with ``shape``: leading dims dropped or added, dims set
        to 1, size-1 dims grown."""
        draw = self.draw
        drop = draw(st.integers(0, len(shape)))
        out: list[int] = []
        for d in shape[drop:]:
            choice = draw(st.sampled_from(["keep", "keep", "one", "grow"]))
            if choice == "one":
                out.append(1)
            elif choice == "grow" and d == 1:
                out.append(draw(st.sampled_from(DIMS)))
            else:
                out.append(d)
        if drop == 0 and len(out) < 4 and draw(st.integers(0, 4)) == 0:
            out.insert(0, draw(st.sampled_from((1, 2, 3))))
        full = np.broadcast_shapes(tuple(shape), tuple(out))
        return tuple(out) if _size(full) <= MAX_ELEMENTS else tuple(shape[drop:])


# ------------------------------------------------------------------ builders
# A builder takes the drawer and a value x (the main operand) and adds an op
# (possibly with new arguments, constants and helper ops); it returns the new value.


def _operand_like(s: _Drawer, shape: tuple[int, ...], *, positive: bool = False) -> int:
    """A second operand of ``shape``: a new argument, or a constant."""
    if s.draw(st.integers(0, 3)) == 0 and _size(shape) <= 64:
        return s.const(shape, positive=positive)
    return s.arg(shape, positive=positive)


def build_unary(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    def build(s: _Drawer, x: int) -> int:
        return s.node(op_cls, [x], s.bound[x] + 1.0)

    return build


def build_binary(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    def build(s: _Drawer, x: int) -> int:
        shape = s.spec(x).shape
        how = s.draw(st.sampled_from(["existing", "partner", "partner", "self"]))
        y = None
        if how == "existing":
            y = s.pick(
                lambda u: (
                    u != x
                    and s.spec(u).dtype == s.spec(x).dtype
                    and _broadcasts(s.spec(u).shape, shape)
                )
            )
        elif how == "self":
            y = x
        if y is None:
            y = _operand_like(s, s.partner_shape(shape))
        if op_cls is ai.MulOp:
            x, y = s.tame(x, 16.0), s.tame(y, 16.0)
        lhs, rhs = (y, x) if s.draw(st.booleans()) else (x, y)
        bound = s.bound[x] * s.bound[y] if op_cls is ai.MulOp else s.bound[x] + s.bound[y]
        return s.node(op_cls, [lhs, rhs], bound)

    return build


def _broadcasts(a: Sequence[int], b: Sequence[int]) -> bool:
    try:
        full = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        return False
    return _size(full) <= MAX_ELEMENTS


def _div(s: _Drawer, x: int) -> int:
    shape = s.spec(x).shape
    choice = s.draw(st.sampled_from(["arg", "const", "derived", "existing"]))
    y = None
    if choice == "existing":
        y = s.pick(
            lambda u: (
                s.low[u] >= 0.25
                and s.spec(u).dtype == s.spec(x).dtype
                and _broadcasts(s.spec(u).shape, shape)
            )
        )
    if y is None and choice == "derived":
        other = s.pick(lambda u: u != x and s.same_dtype(x)(u)) or x
        y = s.positive_of(other)
        if not _broadcasts(s.spec(y).shape, shape):
            y = None
    if y is None:
        partner = s.partner_shape(shape)
        y = s.const(partner, positive=True) if choice == "const" else s.arg(partner, positive=True)
    x = s.tame(x, 64.0)
    return s.node(ai.DivOp, [x, y], s.bound[x] / s.low[y])


def _exp(s: _Drawer, x: int) -> int:
    x = s.tame(x, 4.0)
    return s.node(ai.ExpOp, [x], math.exp(s.bound[x]))


def _sqrt(s: _Drawer, x: int) -> int:
    if not s.nonneg[x]:
        how = s.draw(st.sampled_from([ai.ReluOp, ai.SigmoidOp, "exp"]))
        x = s.positive_of(x) if how == "exp" else s.node(how, [x], s.bound[x])
    return s.node(ai.SqrtOp, [x], math.sqrt(s.bound[x]) + 1.0)


def _gelu(s: _Drawer, x: int) -> int:
    approximate = s.draw(st.sampled_from(["none", "tanh"]))
    return s.node(ai.GeluOp, [x], s.bound[x], approximate=approximate)


def _cast(s: _Drawer, x: int) -> int:
    to = s.draw(st.sampled_from([d for d in DTYPES if d != s.spec(x).dtype]))
    return s.node(ai.CastOp, [x], s.bound[x], to=to)


def _softmax(s: _Drawer, x: int) -> int:
    rank = s.spec(x).rank
    if rank == 0:
        return build_unary(ai.ReluOp)(s, x)
    axis = s.draw(st.integers(-rank, rank - 1))
    return s.node(ai.SoftmaxOp, [x], 1.0, axis=axis)


def _bias_add(s: _Drawer, x: int) -> int:
    spec = s.spec(x)
    if spec.rank == 0:
        return build_binary(ai.AddOp)(s, x)
    axis = s.draw(st.integers(-spec.rank, spec.rank - 1))
    n = spec.shape[axis]
    b = s.pick(lambda u: s.spec(u).shape == (n,) and s.same_dtype(x)(u) and u != x)
    if b is None or s.draw(st.booleans()):
        b = _operand_like(s, (n,))
    return s.node(ai.BiasAddOp, [x, b], s.bound[x] + s.bound[b], axis=axis)


def _layernorm(s: _Drawer, x: int) -> int:
    spec = s.spec(x)
    if spec.rank == 0:
        return build_unary(ai.TanhOp)(s, x)
    n = spec.shape[-1]
    gamma, beta = _operand_like(s, (n,)), _operand_like(s, (n,))
    epsilon = s.draw(st.sampled_from([1e-5, 1e-3, 0.25]))
    bound = s.bound[gamma] * math.sqrt(n) + s.bound[beta]
    return s.node(ai.LayerNormOp, [x, gamma, beta], bound, epsilon=epsilon)


def _rms_norm(s: _Drawer, x: int) -> int:
    spec = s.spec(x)
    if spec.rank == 0:
        return build_unary(ai.TanhOp)(s, x)
    n = spec.shape[-1]
    gamma = _operand_like(s, (n,))
    epsilon = s.draw(st.sampled_from([1e-6, 1e-3, 0.25]))
    # |x / rms(x)| <= sqrt(n): a row of one large value and zeros
    return s.node(ai.RMSNormOp, [x, gamma], s.bound[gamma] * math.sqrt(n), epsilon=epsilon)


def _rotate_half(s: _Drawer, x: int) -> int:
    spec = s.spec(x)
    if spec.rank == 0 or spec.shape[-1] % 2:  # the op halves the last axis
        return build_unary(ai.NegOp)(s, x)
    return s.node(ai.RotateHalfOp, [x], s.bound[x])


def _matmul(s: _Drawer, x: int) -> int:
    draw = s.draw
    if s.spec(x).rank == 0:
        return build_unary(ai.SigmoidOp)(s, x)
    x = s.tame(x, 16.0)
    spec = s.spec(x)
    if spec.rank >= 2 and draw(st.integers(0, 4)) == 0:  # x @ x^T or x^T @ x
        flags = draw(st.sampled_from([(False, True), (True, False)]))
        k = spec.shape[-1] if flags[1] else spec.shape[-2]
        bound = s.bound[x] ** 2 * math.sqrt(k)
        return s.node(ai.MatmulOp, [x, x], bound, transpose_a=flags[0], transpose_b=flags[1])
    # x is lhs (M, K) or rhs (K, N), stored transposed when x_t; 1-D x is (K)
    x_is_lhs = draw(st.booleans())
    x_t = spec.rank >= 2 and draw(st.booleans())
    if spec.rank == 1:
        k = spec.shape[0]
    else:
        rows, cols = spec.shape[-2:]
        k = (rows if x_t else cols) if x_is_lhs else (cols if x_t else rows)
    # the partner: 1-D, 2-D or batched (its batch dims broadcast with x's)
    rank = draw(st.sampled_from([1, 2, 2, 3] if spec.rank >= 2 else [2, 3]))
    y_t = rank >= 2 and draw(st.booleans())
    if rank == 1:
        shape: tuple[int, ...] = (k,)
    else:
        n = draw(st.sampled_from(DIMS[:8]))
        if x_is_lhs:
            inner = (n, k) if y_t else (k, n)  # rhs (K, N), transposed (N, K)
        else:
            inner = (k, n) if y_t else (n, k)  # lhs (M, K), transposed (K, M)
        batch = s.partner_shape(spec.shape[:-2]) if spec.rank > 2 else ()
        if rank == 3 and spec.rank <= 2:
            batch = (draw(st.sampled_from((1, 2, 3))),)
        shape = (*batch, *inner)
    y = s.arg(shape, scale=1 / math.sqrt(k))
    operands = [x, y] if x_is_lhs else [y, x]
    flags = (x_t, y_t) if x_is_lhs else (y_t, x_t)
    attrs = {"transpose_a": flags[0], "transpose_b": flags[1]}
    result = _result_spec(ai.MatmulOp, [s.spec(v) for v in operands], attrs)
    if _size(result.shape) > MAX_ELEMENTS:
        return build_unary(ai.ReluOp)(s, x)
    return s.node(ai.MatmulOp, operands, s.bound[x] * 4.0, **attrs)


def _conv2d(s: _Drawer, x: int) -> int:
    draw = s.draw
    spec = s.spec(x)
    if spec.rank != 4:  # start a new branch from a fresh NCHW argument
        shape = (draw(st.sampled_from((1, 2))), *(draw(st.sampled_from(DIMS[:7])) for _ in "chw"))
        x = s.arg(shape)
        spec = s.spec(x)
    x = s.tame(x, 16.0)
    _, c, h, w = spec.shape
    groups = draw(st.sampled_from([g for g in (1, 2, 3, c) if c % g == 0]))
    k = groups * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    if draw(st.booleans()):
        padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        pads = (*padding, *padding)
    else:
        padding = pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    spans = (dilations[0] * (kh - 1) + 1, dilations[1] * (kw - 1) + 1)
    if h + pads[0] + pads[2] < spans[0]:
        kh, dilations = 1, (1, dilations[1])
    if w + pads[1] + pads[3] < spans[1]:
        kw, dilations = 1, (dilations[0], 1)
    fan_in = c // groups * kh * kw
    weight = s.arg((k, c // groups, kh, kw), scale=1 / math.sqrt(fan_in))
    attrs = {"strides": strides, "padding": padding, "dilations": dilations, "groups": groups}
    result = _result_spec(ai.Conv2DOp, [spec, s.spec(weight)], attrs)
    if _size(result.shape) > MAX_ELEMENTS:
        return build_unary(ai.ReluOp)(s, x)
    return s.node(ai.Conv2DOp, [x, weight], s.bound[x] * 4.0, **attrs)


def _pow(s: _Drawer, x: int) -> int:
    base = s.positive_of(x) if not s.low[x] >= 0.25 else x  # powf: NaN for a negative base
    shape = s.spec(base).shape
    exponent = s.tame(_operand_like(s, s.partner_shape(shape)), 3.0)
    bound = max(s.bound[base], 1 / s.low[base]) ** s.bound[exponent]
    return s.node(ai.PowOp, [base, exponent], bound)


def _clip(s: _Drawer, x: int) -> int:
    low, high = s.draw(
        st.sampled_from([(-1.0, 1.0), (0.0, 6.0), (-math.inf, 0.5), (-0.5, math.inf)])
    )
    return s.node(ai.ClipOp, [x], min(s.bound[x], max(abs(low), abs(high))), min=low, max=high)


def _where(s: _Drawer, x: int) -> int:
    shape = s.spec(x).shape
    mask_shape = s.partner_shape(shape)
    seed = s.draw(st.integers(0, 2**16))
    mask = np.random.default_rng(seed).integers(0, 2, mask_shape).astype(np.float64)
    spec = TensorSpec(tuple(mask_shape), s.spec(x).dtype)
    condition = s._add(Const(spec, mask), 1.0)
    other = s.pick(lambda u: u != x and s.same_dtype(x)(u) and _broadcasts(s.spec(u).shape, shape))
    if other is None or s.draw(st.booleans()):
        other = _operand_like(s, s.partner_shape(shape))
    a, b = (x, other) if s.draw(st.booleans()) else (other, x)
    if not _broadcasts(np.broadcast_shapes(s.spec(a).shape, s.spec(b).shape), mask_shape):
        return build_unary(ai.TanhOp)(s, x)
    return s.node(ai.WhereOp, [condition, a, b], max(s.bound[a], s.bound[b]))


def _split(draw: Callable, count: int, rank: int) -> tuple[int, ...]:
    """A shape of ``rank`` dims (fewer if ``count`` has too few factors) with ``count``
    elements."""
    dims = []
    for _ in range(rank - 1):
        divisors = [d for d in range(1, count + 1) if count % d == 0]
        d = draw(st.sampled_from(divisors))
        dims.append(d)
        count //= d
    return (*dims, count)


def _reshape(s: _Drawer, x: int) -> int:
    count = _size(s.spec(x).shape)
    shape = _split(s.draw, count, s.draw(st.integers(1, 4)))
    return s.node(ai.ReshapeOp, [x], s.bound[x], shape=shape)


def _transpose(s: _Drawer, x: int) -> int:
    rank = s.spec(x).rank
    if rank < 2:
        return _reshape(s, x)
    perm = tuple(s.draw(st.permutations(range(rank))))
    return s.node(ai.TransposeOp, [x], s.bound[x], perm=perm)


def _slice(s: _Drawer, x: int) -> int:
    shape = s.spec(x).shape
    if not shape:
        return build_unary(ai.NegOp)(s, x)
    offsets, sizes, strides = [], [], []
    for dim in shape:
        step = s.draw(st.sampled_from([1, 1, 2, -1, -2]))
        size = s.draw(st.integers(1, (dim - 1) // abs(step) + 1))
        span = (size - 1) * abs(step)
        low, high = (0, dim - 1 - span) if step > 0 else (span, dim - 1)
        offsets.append(s.draw(st.integers(low, high)))
        sizes.append(size)
        strides.append(step)
    attrs = {"offsets": tuple(offsets), "sizes": tuple(sizes), "strides": tuple(strides)}
    return s.node(ai.SliceOp, [x], s.bound[x], **attrs)


def _concat(s: _Drawer, x: int) -> int:
    shape = s.spec(x).shape
    if not shape:
        return build_unary(ai.AbsOp)(s, x)
    axis = s.draw(st.integers(-len(shape), len(shape) - 1))
    parts = [x]
    for _ in range(s.draw(st.integers(1, 2))):
        dims = list(shape)
        dims[axis] = s.draw(st.sampled_from(DIMS[:6]))
        other = tuple(dims)
        if _size(other) * 3 > MAX_ELEMENTS:
            break
        same = s.pick(lambda u, want=other: s.spec(u).shape == want and s.same_dtype(x)(u))
        parts.append(same if same is not None else _operand_like(s, other))
    order = s.draw(st.permutations(parts))
    return s.node(ai.ConcatOp, list(order), max(s.bound[v] for v in parts), axis=axis)


def _gather(s: _Drawer, x: int) -> int:
    shape = s.spec(x).shape
    if not shape:
        return build_unary(ai.ReluOp)(s, x)
    axis = s.draw(st.integers(-len(shape), len(shape) - 1))
    count = s.draw(st.integers(1, 4))
    indices = tuple(s.draw(st.integers(0, shape[axis] - 1)) for _ in range(count))
    return s.node(ai.GatherOp, [x], s.bound[x], axis=axis, indices=indices)


def _on_domain(op_cls: type[AiOp], prepare: Callable[[_Drawer, int], int], bound: float):
    """A unary op on an operand ``prepare`` brings into the op's (well-conditioned) domain."""

    def build(s: _Drawer, x: int) -> int:
        return s.node(op_cls, [prepare(s, x)], bound)

    return build


def _unit_interval(s: _Drawer, x: int) -> int:
    """sigmoid(tame(x)): in [0.12, 0.88], inside asin's, acos's and atanh's domains."""
    return s.node(ai.SigmoidOp, [s.tame(x, 2.0)], 1.0)


def _exact_operand(s: _Drawer, x: int) -> int:
    """A function argument of x's shape and type: a step function (floor, sign, a
    threshold) of a computed value could flip where float32 and the float64 reference
    round the value differently; of an argument both see the same value."""
    spec = s.spec(x)
    return s.pick(lambda u: isinstance(s.defs[u], Arg) and s.spec(u) == spec) or s.arg(spec.shape)


def _steps(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    def build(s: _Drawer, x: int) -> int:
        operand = _exact_operand(s, x)
        attrs = {}
        if op_cls is ai.ThresholdedReluOp:
            attrs["alpha"] = s.draw(st.sampled_from([-0.5, 0.0, 0.25, 1.0]))
        return s.node(op_cls, [operand], s.bound[operand] + 1.0, **attrs)

    return build


def _alpha_activation(op_cls: type[AiOp], *keys: str) -> Callable[[_Drawer, int], int]:
    """An activation with float attributes, drawn (positive: celu divides by alpha)."""

    def build(s: _Drawer, x: int) -> int:
        attrs = {k: s.draw(st.sampled_from([0.1, 0.5, 1.0, 1.5])) for k in keys}
        scale = math.prod(attrs.values()) if attrs else 1.0
        return s.node(op_cls, [x], (s.bound[x] + 1.0) * max(scale, 2.0), **attrs)

    return build


def _hard_sigmoid(s: _Drawer, x: int) -> int:
    alpha = s.draw(st.sampled_from([0.2, 1.0 / 6.0, 0.5]))
    beta = s.draw(st.sampled_from([0.5, 0.25]))
    return s.node(ai.HardSigmoidOp, [x], 1.0, alpha=alpha, beta=beta)


def _tamed(op_cls: type[AiOp], limit: float, bound: Callable[[float], float]):
    def build(s: _Drawer, x: int) -> int:
        x = s.tame(x, limit)
        return s.node(op_cls, [x], bound(s.bound[x]))

    return build


def _log(s: _Drawer, x: int) -> int:
    return s.node(ai.LogOp, [s.positive_of(x)], 1.0)


def _reciprocal(s: _Drawer, x: int) -> int:
    return s.node(ai.ReciprocalOp, [s.positive_of(x)], math.e)


def _acosh(s: _Drawer, x: int) -> int:
    """acosh(exp(exp(tanh(x)))): its operand is >= e**(1/e) > 1.44, away from the
    square-root singularity at 1."""
    above = s.node(ai.ExpOp, [s.positive_of(x)], math.exp(math.e))
    return s.node(ai.AcoshOp, [above], 4.0)


#: The activations and unary maths of ONNX's float operators that need an operand in
#: range, exact operands or drawn attributes.
_MATH_BUILDERS: dict[type[AiOp], Callable[[_Drawer, int], int]] = {
    ai.LogOp: _log,
    ai.ReciprocalOp: _reciprocal,
    ai.AsinOp: _on_domain(ai.AsinOp, _unit_interval, 1.6),
    ai.AcosOp: _on_domain(ai.AcosOp, _unit_interval, 1.6),
    ai.AtanhOp: _on_domain(ai.AtanhOp, _unit_interval, 1.4),
    ai.AcoshOp: _acosh,
    ai.TanOp: _tamed(ai.TanOp, 1.0, lambda b: math.tan(min(b, 1.0)) + 1.0),
    ai.SinOp: _tamed(ai.SinOp, 16.0, lambda b: 1.0),
    ai.CosOp: _tamed(ai.CosOp, 16.0, lambda b: 1.0),
    ai.SinhOp: _tamed(ai.SinhOp, 4.0, lambda b: math.sinh(b) + 1.0),
    ai.CoshOp: _tamed(ai.CoshOp, 4.0, lambda b: math.cosh(b) + 1.0),
    ai.FloorOp: _steps(ai.FloorOp),
    ai.CeilOp: _steps(ai.CeilOp),
    ai.RoundOp: _steps(ai.RoundOp),
    ai.SignOp: _steps(ai.SignOp),
    ai.ThresholdedReluOp: _steps(ai.ThresholdedReluOp),
    ai.LeakyReluOp: _alpha_activation(ai.LeakyReluOp, "alpha"),
    ai.EluOp: _alpha_activation(ai.EluOp, "alpha"),
    ai.CeluOp: _alpha_activation(ai.CeluOp, "alpha"),
    ai.SeluOp: _alpha_activation(ai.SeluOp, "alpha", "gamma"),
    ai.HardSigmoidOp: _hard_sigmoid,
}


def build_reduce(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    def build(s: _Drawer, x: int) -> int:
        rank = s.spec(x).rank
        chosen = s.draw(st.lists(st.integers(0, max(rank - 1, 0)), unique=True, max_size=rank))
        axes = tuple(a - rank if s.draw(st.booleans()) else a for a in chosen) if rank else ()
        keepdims = s.draw(st.booleans())
        count = _size([s.spec(x).shape[a] for a in (axes or range(rank))])
        x = s.tame(x, MAX_BOUND / count) if op_cls is ai.ReduceSumOp else x
        bound = s.bound[x] * count if op_cls is ai.ReduceSumOp else s.bound[x]
        return s.node(op_cls, [x], bound, axes=axes, keepdims=keepdims)

    return build


def build_pool(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    def build(s: _Drawer, x: int) -> int:
        draw = s.draw
        if s.spec(x).rank != 4:
            shape = (
                draw(st.sampled_from((1, 2))),
                *(draw(st.sampled_from(DIMS[:7])) for _ in "chw"),
            )
            x = s.arg(shape)
        attrs: dict[str, Any] = {
            "kernel": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
            "strides": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
            "dilations": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
            "ceil_mode": draw(st.booleans()),
        }
        spans = [d * (k - 1) + 1 for d, k in zip(attrs["dilations"], attrs["kernel"], strict=True)]
        pads = [draw(st.integers(0, span - 1)) for span in (*spans, *spans)]
        attrs["padding"] = tuple(pads) if draw(st.booleans()) else tuple(pads[:2])
        if op_cls is ai.AvgPool2DOp:
            attrs["count_include_pad"] = draw(st.booleans())
        try:
            _result_spec(op_cls, [s.spec(x)], attrs)
        except ShapeError:  # a window larger than the padded input: the smallest one
            attrs.update(kernel=(1, 1), dilations=(1, 1), padding=(0, 0))
        return s.node(op_cls, [x], s.bound[x], **attrs)

    return build


def _batch_norm(s: _Drawer, x: int) -> int:
    spec = s.spec(x)
    if spec.rank < 2:
        return _layernorm(s, x)
    c = spec.shape[1]
    scale, bias, mean = (_operand_like(s, (c,)) for _ in range(3))
    var = _operand_like(s, (c,), positive=True)  # var + epsilon under a square root
    epsilon = s.draw(st.sampled_from([1e-5, 1e-3]))
    bound = (s.bound[x] + s.bound[mean]) / math.sqrt(s.low[var]) * s.bound[scale] + s.bound[bias]
    return s.node(ai.BatchNormOp, [x, scale, bias, mean, var], bound, epsilon=epsilon)


def _attention(s: _Drawer, x: int) -> int:
    """softmax(q @ key^T * scale + mask) @ v with x as the query (..., S, D)."""
    draw = s.draw
    if s.spec(x).rank < 2:
        return _softmax(s, x)
    q = s.tame(x, 4.0)
    *batch, rows, d = s.spec(q).shape
    keys, width = draw(st.sampled_from(DIMS[:8])), draw(st.sampled_from(DIMS[:8]))
    if _size((*batch, rows, max(keys, width))) > MAX_ELEMENTS:
        return _softmax(s, x)
    key = s.arg((*batch, keys, d), scale=1 / math.sqrt(d))
    v = s.arg((*batch, keys, width))
    if draw(st.booleans()):
        mask = s.const(())
    else:
        mask = _operand_like(s, s.partner_shape((*batch, rows, keys)))
        if np.broadcast_shapes(s.spec(mask).shape, (*batch, rows, keys)) != (*batch, rows, keys):
            mask = s.const(())
    mask = s.tame(mask, 4.0)
    scale = draw(st.sampled_from([1.0, 0.125, 1 / math.sqrt(d)]))
    attrs = {"scale": scale, "nan_to_zero": draw(st.booleans())}
    return s.node(ai.AttentionOp, [q, key, v, mask], s.bound[v], **attrs)


def _moe_experts(s: _Drawer, x: int) -> int:
    """The experts of an MoE layer with x as its tokens (T, D): 2-4 experts, k of 1-2,
    indices a constant in [-E, E) (negative ones count from the end; repeats allowed)."""
    draw = s.draw
    if s.spec(x).rank != 2:
        return _softmax(s, x)
    tokens, width = s.spec(x).shape
    count = draw(st.sampled_from([2, 3, 4]))
    k = draw(st.integers(1, 2))
    hidden = draw(st.sampled_from(DIMS[:8]))
    if _size((count, 2 * hidden, width)) > MAX_ELEMENTS:
        return _softmax(s, x)
    tokens_in = s.tame(x, 4.0)
    weights = s.arg((tokens, k))
    experts = _int_const(s, (tokens, k), low=-count, high=count)
    gate_up = s.arg((count, 2 * hidden, width), scale=1 / math.sqrt(width))
    down = s.arg((count, width, hidden), scale=1 / math.sqrt(hidden))
    bound = k * s.bound[weights] * 4.0 * 16.0 * s.bound[down]
    return s.node(ai.MoEExpertsOp, [tokens_in, weights, experts, gate_up, down], bound)


# ---------------------------------------------------- integers and bools (issue 29)
# Integer values come from i64 arguments (small: N(0, 2^2) truncated) and integer
# constants, never from float values (a comparison or truncation of floats would flip
# where float32 and the float64 reference round differently); each builder ends in a
# float value (a where, a cast), which the graph goes on from.


def _int_arg(s: _Drawer, shape: Sequence[int]) -> int:
    return s._add(Arg(TensorSpec(tuple(shape), "i64"), scale=2.0), 8.0)


def _int_const(s: _Drawer, shape: Sequence[int], low: int = 1, high: int = 5) -> int:
    """An i64 constant of values in [low, high) (positive by default: divisors)."""
    rng = np.random.default_rng(s.draw(st.integers(0, 2**16)))
    values = rng.integers(low, high, tuple(shape)).astype(np.float64)
    return s._add(Const(TensorSpec(tuple(shape), "i64"), values), float(max(abs(low), high)))


def _where_of(s: _Drawer, condition: int, x: int) -> int:
    """``where(condition, x, y)``: back to x's float type."""
    full = np.broadcast_shapes(s.spec(condition).shape, s.spec(x).shape)
    y = _operand_like(s, s.partner_shape(tuple(int(d) for d in full)))
    return s.node(ai.WhereOp, [condition, x, y], max(s.bound[x], s.bound[y]))


def _integer_pair(s: _Drawer, x: int) -> tuple[int, int]:
    """Two i64 values broadcasting with x: an argument of x's shape and an argument or
    a constant of a partner shape."""
    shape = s.spec(x).shape
    partner = s.partner_shape(shape)
    other = _int_arg(s, partner) if s.draw(st.booleans()) else _int_const(s, partner, -3, 4)
    return _int_arg(s, shape), other


def build_compare(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    def build(s: _Drawer, x: int) -> int:
        a, b = _integer_pair(s, x)
        return _where_of(s, s.node(op_cls, [a, b], 1.0), x)

    return build


def build_logic(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    def build(s: _Drawer, x: int) -> int:
        first = s.node(ai.LessOp, list(_integer_pair(s, x)), 1.0)
        if op_cls is ai.NotOp:
            return _where_of(s, s.node(ai.NotOp, [first], 1.0), x)
        # of first's shape (which broadcasts with x): a pair of x's would grow x's size-1
        # dims independently of first's, so that the two masks need not broadcast
        second = s.node(ai.EqualOp, list(_integer_pair(s, first)), 1.0)
        return _where_of(s, s.node(op_cls, [first, second], 1.0), x)

    return build


def _mod(s: _Drawer, x: int) -> int:
    """Integer remainder, truncating division and difference, cast back and added to x."""
    a, _ = _integer_pair(s, x)
    k = _int_const(s, s.partner_shape(s.spec(a).shape))
    r = s.node(ai.ModOp, [a, k], 4.0, fmod=s.draw(st.booleans()))
    q = s.node(ai.DivOp, [a, k], 8.0)
    d = s.node(ai.SubOp, [q, r], 12.0)
    f = s.node(ai.CastOp, [d], 12.0, to=s.spec(x).dtype)
    if not _broadcasts(s.spec(f).shape, s.spec(x).shape):
        return f
    return s.node(ai.AddOp, [x, f], s.bound[x] + 12.0)


def _take(s: _Drawer, x: int) -> int:
    """An embedding-style lookup along axis 0 at run-time ids (wrapped into [0, n) by a
    floored mod, or into [-n, 0): negative ids count from the end), added to x."""
    shape = s.spec(x).shape
    if not shape:
        return build_binary(ai.AddOp)(s, x)
    n = s.draw(st.sampled_from((1, 3, 7)))
    table = _operand_like(s, (n, *shape[1:]))
    size = _int_const(s, (), n, n + 1)
    ids = s.node(ai.ModOp, [_int_arg(s, shape[:1]), size], float(n))
    if s.draw(st.booleans()):
        ids = s.node(ai.SubOp, [ids, size], float(n))
    taken = s.node(ai.TakeOp, [table, ids], s.bound[table])
    return s.node(ai.AddOp, [x, taken], s.bound[x] + s.bound[taken])


def _cumsum(s: _Drawer, x: int) -> int:
    spec = s.spec(x)
    if spec.rank == 0:
        return build_unary(ai.NegOp)(s, x)
    axis = s.draw(st.integers(-spec.rank, spec.rank - 1))
    flags = {"exclusive": s.draw(st.booleans()), "reverse": s.draw(st.booleans())}
    return s.node(ai.CumSumOp, [x], s.bound[x] * spec.shape[axis], axis=axis, **flags)


def build_arg_reduce(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int]:
    """The index of the extreme of an i64 argument of x's shape (integers: no float ties
    that float32 and the reference could break differently), kept as a size-1 dim, cast
    back and added to x."""

    def build(s: _Drawer, x: int) -> int:
        spec = s.spec(x)
        if spec.rank == 0:
            return build_unary(ai.NegOp)(s, x)
        axis = s.draw(st.integers(-spec.rank, spec.rank - 1))
        last = s.draw(st.booleans())
        a = _int_arg(s, spec.shape)
        bound = float(spec.shape[axis])
        index = s.node(op_cls, [a], bound, axis=axis, keepdims=True, select_last_index=last)
        f = s.node(ai.CastOp, [index], bound, to=spec.dtype)
        return s.node(ai.AddOp, [x, f], s.bound[x] + bound)

    return build


def _expand(s: _Drawer, x: int) -> int:
    shape = s.spec(x).shape
    target = tuple(int(d) for d in np.broadcast_shapes(shape, s.partner_shape(shape)))
    return s.node(ai.ExpandOp, [x], s.bound[x], shape=target)


#: Ops that need more than the generic unary/binary builders.
BUILDERS: dict[type[AiOp], Callable[[_Drawer, int], int]] = {
    **{op: build_compare(op) for op in (ai.EqualOp, ai.LessOp, ai.GreaterOp)},
    **{op: build_compare(op) for op in (ai.LessEqualOp, ai.GreaterEqualOp)},
    **{op: build_logic(op) for op in (ai.NotOp, ai.AndOp, ai.OrOp, ai.XorOp)},
    ai.ModOp: _mod,
    ai.TakeOp: _take,
    ai.CumSumOp: _cumsum,
    ai.ExpandOp: _expand,
    ai.ArgMaxOp: build_arg_reduce(ai.ArgMaxOp),
    ai.ArgMinOp: build_arg_reduce(ai.ArgMinOp),
    ai.BatchNormOp: _batch_norm,
    ai.AttentionOp: _attention,
    ai.MoEExpertsOp: _moe_experts,
    ai.PowOp: _pow,
    ai.ClipOp: _clip,
    ai.WhereOp: _where,
    ai.ReshapeOp: _reshape,
    ai.TransposeOp: _transpose,
    ai.SliceOp: _slice,
    ai.ConcatOp: _concat,
    ai.GatherOp: _gather,
    ai.ReduceMeanOp: build_reduce(ai.ReduceMeanOp),
    ai.ReduceSumOp: build_reduce(ai.ReduceSumOp),
    ai.ReduceMaxOp: build_reduce(ai.ReduceMaxOp),
    ai.MaxPool2DOp: build_pool(ai.MaxPool2DOp),
    ai.AvgPool2DOp: build_pool(ai.AvgPool2DOp),
    ai.Conv2DOp: _conv2d,
    ai.BiasAddOp: _bias_add,
    ai.DivOp: _div,
    ai.ExpOp: _exp,
    ai.SqrtOp: _sqrt,
    ai.GeluOp: _gelu,
    ai.MatmulOp: _matmul,
    ai.LayerNormOp: _layernorm,
    ai.RMSNormOp: _rms_norm,
    ai.RotateHalfOp: _rotate_half,
    ai.SoftmaxOp: _softmax,
    ai.CastOp: _cast,
    **_MATH_BUILDERS,
}


def builder_of(op_cls: type[AiOp]) -> Callable[[_Drawer, int], int] | None:
    """The builder of an op: an explicit one, or the generic one of its family."""
    if op_cls in BUILDERS:
        return BUILDERS[op_cls]
    if _properties(op_cls):
        return None  # attributes need an explicit builder that draws them
    if issubclass(op_cls, ai.UnaryOp):
        return build_unary(op_cls)
    if issubclass(op_cls, ai.BinaryOp):
        return build_binary(op_cls)
    return None


def uncovered_ops() -> list[str]:
    """Dialect ops the generator cannot build (each needs an entry in ``BUILDERS``)."""
    return [op.name for op in ai_ops() if builder_of(op) is None]


def _start_shape(draw: Callable) -> tuple[int, ...]:
    rank = draw(st.sampled_from([0, 1, 2, 2, 3, 4, 4]))
    while True:
        shape = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
        if _size(shape) <= MAX_ELEMENTS:
            return shape
        rank -= 1


@st.composite
def graphs(
    draw: Callable,
    max_ops: int = 6,
    ops: Sequence[type[AiOp]] | None = None,
    dtypes: Sequence[str] = DTYPES,
) -> Graph:
    """A random valid graph of 1..``max_ops`` steps over ``ops`` (default: every op)."""
    pool = [op for op in (ops or ai_ops()) if builder_of(op) is not None]
    s = _Drawer(draw, draw(st.sampled_from(list(dtypes))))
    s.arg(_start_shape(draw))
    for _ in range(draw(st.integers(1, max_ops))):
        x = s.pick(lambda v: s.spec(v).dtype in DTYPES)  # the float values
        assert x is not None
        op_cls = draw(st.sampled_from(pool))
        s.dtype = s.spec(x).dtype  # new operands follow the value they meet
        builder_of(op_cls)(s, x)
    return Graph(tuple(s.defs), _results(draw, s))


def _results(draw: Callable, s: _Drawer) -> tuple[int, ...]:
    """The last value, most values nobody uses, some others; now and then an argument
    or the same value twice."""
    last = len(s.defs) - 1
    used = {v for d in s.defs if isinstance(d, Node) for v in d.operands}
    results = [last]
    for v in range(last):
        d = s.defs[v]
        if isinstance(d, Node) and v not in used:
            keep = draw(st.integers(0, 1)) == 0
        elif isinstance(d, Const):  # the tracer returns only tensors computed from arguments
            keep = False
        else:
            keep = draw(st.integers(0, 15)) == 0
        if keep:
            results.append(v)
    if draw(st.integers(0, 15)) == 0:
        results.append(draw(st.sampled_from(results)))
    return tuple(results)
