"""Random graphs of every fused kind on the cpu target vs the reference (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from fusec.runtime.cache import KernelCache

UNARY = ["relu", "sigmoid", "tanh", "silu", "gelu", 'gelu {approximate = "tanh"}']
BINARY = ["add", "sub", "mul", "maximum"]
SETTINGS = settings(
    max_examples=examples(5),  # --hypothesis-profile slow: 10x
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


class Graph:
    """A function of ai ops built as text, tracking each value's shape."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.args: list[str] = []
        self.lines: list[str] = []
        self.shapes: dict[str, tuple[int, ...]] = {}

    def type(self, name: str) -> str:
        dims = "".join(f"{d}x" for d in self.shapes[name])
        return f"tensor<{dims}{self.dtype}>"

    def arg(self, shape) -> str:
        name = f"%a{len(self.args)}"
        self.shapes[name] = tuple(shape)
        self.args.append(f"{name}: {self.type(name)}")
        return name

    def op(self, opname: str, operands: list[str], shape, attrs: str = "") -> str:
        name = f"%v{len(self.lines)}"
        types = " * ".join(self.type(v) for v in operands)
        attrs = f" {attrs}" if attrs else ""
        self.lines.append(f"{name} = ai.{opname} {', '.join(operands)}{attrs} : {types}")
        self.shapes[name] = tuple(shape)
        return name

    def unary(self, spec: str, v: str) -> str:
        opname, _, attrs = spec.partition(" ")
        return self.op(opname, [v], self.shapes[v], attrs)

    def binary(self, opname: str, a: str, b: str) -> str:
        shape = np.broadcast_shapes(self.shapes[a], self.shapes[b])
        return self.op(opname, [a, b], shape)

    def text(self, results: list[str]) -> str:
        types = ", ".join(self.type(r) for r in results)
        body = "\n  ".join(self.lines)
        return (
            f"func.func @g({', '.join(self.args)}) -> ({types}) {{\n  {body}\n"
            f"  return {', '.join(results)} : {types}\n}}\n"
        )


@st.composite
def broadcast_inputs(draw, graph: Graph, shape: tuple[int, ...], count: int) -> list[str]:
    """The full-shape input first, then inputs broadcasting to ``shape``."""
    values = [graph.arg(shape)]
    for _ in range(count - 1):
        dims = [d if draw(st.booleans()) else 1 for d in shape]
        drop = draw(st.integers(0, len(dims) - 1))
        values.append(graph.arg(dims[drop:]))
    return values


@st.composite
def chain(draw, graph: Graph, values: list[str], length: int) -> list[str]:
    """Append ``length`` random elementwise ops over ``values``; return all values."""
    values = list(values)
    for _ in range(length):
        if draw(st.booleans()):
            values.append(graph.unary(draw(st.sampled_from(UNARY)), draw(st.sampled_from(values))))
        else:
            a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            values.append(graph.binary(draw(st.sampled_from(BINARY)), a, b))
    return values


dtypes = st.sampled_from(["f32", "f16"])
dims = st.integers(1, 6)


@st.composite
def pointwise_graphs(draw) -> str:
    graph = Graph(draw(dtypes))
    shape = tuple(draw(st.lists(dims, min_size=1, max_size=3))) + (draw(st.integers(1, 70)),)
    values = draw(broadcast_inputs(graph, shape, draw(st.integers(1, 3))))
    values = draw(chain(graph, values, draw(st.integers(1, 6))))
    results = [values[-1]]
    if len(graph.lines) > 1 and draw(st.booleans()):  # a multi-output group
        results.append(f"%v{draw(st.integers(0, len(graph.lines) - 2))}")
    return graph.text(results)


@st.composite
def row_reduce_graphs(draw) -> str:
    graph = Graph(draw(dtypes))
    shape = (draw(dims), draw(dims), draw(st.integers(2, 80)))
    values = draw(broadcast_inputs(graph, shape, draw(st.integers(1, 3))))
    values = draw(chain(graph, values, draw(st.integers(0, 3))))
    x = graph.binary("add", values[-1], values[0])  # a full, well-spread row
    if draw(st.booleans()):
        gamma, beta = graph.arg(shape[-1:]), graph.arg(shape[-1:])
        reduced = graph.op("layernorm", [x, gamma, beta], shape)
    else:
        axis = draw(st.integers(-3, 2))
        reduced = graph.op("softmax", [x], shape, f"{{axis = {axis}}}")
    values = draw(chain(graph, [*values, x, reduced], draw(st.integers(0, 3))))
    epilogue = [v for v in values if graph.shapes[v] == shape]
    results = [epilogue[-1]]
    if draw(st.booleans()):
        results.append(x)
    return graph.text(results)


@st.composite
def matmul_graphs(draw) -> str:
    graph = Graph(draw(dtypes))
    m, k, n = draw(st.integers(1, 40)), draw(st.integers(1, 40)), draw(st.integers(1, 40))
    values = draw(broadcast_inputs(graph, (m, k), draw(st.integers(1, 2))))
    values = draw(chain(graph, values, draw(st.integers(0, 2))))
    a = graph.binary("add", values[-1], values[0])
    if k > 1 and draw(st.booleans()):
        a = graph.op("layernorm", [a, graph.arg((k,)), graph.arg((k,))], (m, k))
    c = graph.op("matmul", [a, graph.arg((k, n))], (m, n))
    values = draw(chain(graph, [c, graph.arg((n,)), graph.arg((m, n))], draw(st.integers(0, 3))))
    if draw(st.booleans()):
        values.append(graph.op("softmax", [graph.binary("add", values[-1], c)], (m, n)))
    return graph.text([graph.binary("add", values[-1], c)])


@SETTINGS
@given(pointwise_graphs())
def test_random_pointwise_groups(cache, text):
    check(text, cache=cache, kind="pointwise")


@SETTINGS
@given(row_reduce_graphs())
def test_random_row_reduce_groups(cache, text):
    check(text, cache=cache, kind="row_reduce")


@SETTINGS
@given(matmul_graphs())
def test_random_matmul_groups(cache, text):
    check(text, cache=cache, kind="matmul")


@SETTINGS
@given(st.one_of(pointwise_graphs(), row_reduce_graphs(), matmul_graphs()))
def test_random_graphs_through_the_fusion_pipeline(cache, text):
    check(text, cache=cache, fuse=True)
