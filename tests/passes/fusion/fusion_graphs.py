"""Random ai graphs for property tests, built with the op builders.

``graphs()`` is a hypothesis strategy of IR texts (modules printed after
building, so a failing example shows as readable IR) with one function: a
random DAG of the supported ops over small, valid random shapes. Each step
picks an op and an operand among the values built so far (so values get
several consumers), and creates new function arguments where the op needs a
weight, a bias or a broadcast operand.
"""

from __future__ import annotations

from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.ir import Block, Region, SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of, tensor_type
from fusec.dialect.shapes import TensorSpec

START_SHAPES = [(2, 3, 5, 4), (4, 6), (2, 3, 8), (1, 2, 4, 4)]
UNARY = [ai.ReluOp, ai.SigmoidOp, ai.TanhOp, ai.SiluOp, ai.GeluOp]
BINARY = [ai.AddOp, ai.SubOp, ai.MulOp, ai.MaximumOp, ai.DivOp]
OPS = ["unary", "binary", "binary", "bias_add", "matmul", "layernorm", "softmax", "conv2d",
       "cast", "exp", "sqrt"]  # fmt: skip


class _Builder:
    """Appends ops to one block, adding block arguments on demand."""

    def __init__(self, draw, shape: tuple[int, ...]) -> None:
        self.draw = draw
        self.block = Block()
        self.values: list[SSAValue] = [self.arg(shape, "f32")]

    def arg(self, shape: tuple[int, ...], dtype: str) -> SSAValue:
        spec = TensorSpec(tuple(shape), dtype)
        return self.block.insert_arg(tensor_type(spec), len(self.block.args))

    def pick(self) -> SSAValue:
        # Prefer recent values, but reach back so that values get several consumers.
        index = self.draw(st.integers(0, len(self.values) - 1))
        return self.values[-1 - index] if self.draw(st.booleans()) else self.values[index]

    def add(self, op) -> None:
        self.block.add_op(op)
        self.values.append(op.results[0])

    def step(self) -> None:
        x = self.pick()
        spec = spec_of(x.type)
        kind = self.draw(st.sampled_from(OPS))
        getattr(self, f"_{kind}")(x, spec)

    def _unary(self, x, spec) -> None:
        cls = self.draw(st.sampled_from(UNARY))
        if cls is ai.GeluOp:
            self.add(cls(x, approximate=self.draw(st.sampled_from(["none", "tanh"]))))
        else:
            self.add(cls(x))

    def _exp(self, x, spec) -> None:
        self.add(ai.TanhOp(x))
        self.add(ai.ExpOp(self.values[-1]))  # exp of a tanh: bounded, never overflows

    def _sqrt(self, x, spec) -> None:
        self.add(ai.SigmoidOp(x))
        self.add(ai.SqrtOp(self.values[-1]))  # sqrt of a sigmoid: always defined

    def _binary(self, x, spec) -> None:
        cls = self.draw(st.sampled_from(BINARY))
        same = [v for v in self.values if spec_of(v.type) == spec and v is not x]
        choice = self.draw(st.sampled_from(["same", "full", "row", "col", "scalar"]))
        if choice == "same" and same:
            other = self.draw(st.sampled_from(same))
        elif choice == "row":
            other = self.arg(spec.shape[-1:], spec.dtype)
        elif choice == "col" and spec.rank >= 2:
            other = self.arg((*spec.shape[:-1], 1), spec.dtype)
        elif choice == "scalar":
            other = self.arg((), spec.dtype)
        else:
            other = self.arg(spec.shape, spec.dtype)
        if cls is ai.DivOp:  # divide by a sigmoid: never near zero
            divisor = ai.SigmoidOp(other)
            self.block.add_op(divisor)
            self.add(ai.DivOp(x, divisor.results[0]))
            return
        lhs, rhs = (other, x) if self.draw(st.booleans()) else (x, other)
        self.add(cls(lhs, rhs))

    def _bias_add(self, x, spec) -> None:
        axis = self.draw(st.integers(-spec.rank, spec.rank - 1))
        bias = self.arg((spec.shape[axis],), spec.dtype)
        self.add(ai.BiasAddOp(x, bias, axis=axis))

    def _matmul(self, x, spec) -> None:
        if spec.rank < 2:
            return self._unary(x, spec)
        k = spec.shape[-1]
        n = self.draw(st.sampled_from([2, 3, 5]))
        if self.draw(st.booleans()):
            self.add(ai.MatmulOp(x, self.arg((n, k), spec.dtype), transpose_b=True))
        else:
            self.add(ai.MatmulOp(x, self.arg((k, n), spec.dtype)))

    def _layernorm(self, x, spec) -> None:
        d = spec.shape[-1:]
        self.add(ai.LayerNormOp(x, self.arg(d, spec.dtype), self.arg(d, spec.dtype)))

    def _softmax(self, x, spec) -> None:
        self.add(ai.SoftmaxOp(x, axis=self.draw(st.integers(-spec.rank, spec.rank - 1))))

    def _conv2d(self, x, spec) -> None:
        if spec.rank != 4:
            return self._layernorm(x, spec)
        c = spec.shape[1]
        k = self.draw(st.sampled_from([2, 3]))
        size = self.draw(st.sampled_from([1, 3]))
        pad = self.draw(st.sampled_from([0, 1])) if size == 3 else 0
        if size > min(spec.shape[2:]) + 2 * pad:
            size, pad = 1, 0
        w = self.arg((k, c, size, size), spec.dtype)
        self.add(ai.Conv2DOp(x, w, padding=(pad, pad)))

    def _cast(self, x, spec) -> None:
        to = "f16" if spec.dtype == "f32" else "f32"
        self.add(ai.CastOp(x, to))

    def module(self) -> ModuleOp:
        results = [self.values[-1]]
        for v in self.values[1:-1]:
            if self.draw(st.integers(0, 4)) == 0:
                results.append(v)
        self.block.add_op(func.ReturnOp(*results))
        ftype = FunctionType.from_lists(
            [a.type for a in self.block.args], [v.type for v in results]
        )
        fn = func.FuncOp("graph", ftype, Region(self.block))
        return ModuleOp([fn])


@st.composite
def graphs(draw, max_ops: int = 8) -> str:
    """The IR text of a module whose function is a random DAG of 1..max_ops ai ops."""
    builder = _Builder(draw, draw(st.sampled_from(START_SHAPES)))
    for _ in range(draw(st.integers(1, max_ops))):
        builder.step()
    return str(builder.module())
