"""Differential testing of ONNX's float operators (issue #29) on the cpu target: random
graphs drawn from the new activations and unary maths with the ops they meet in models
(adds, multiplies, layernorm, softmax, reductions), vs the float64 reference.

The general fuzzer draws them among every op of the dialect, so few of its graphs hold
one; these do. ``slow``: every graph compiles kernels.
"""

from __future__ import annotations

import pytest
from differential import assert_matches, graph_settings, kernel_budget, poison
from hypothesis import given
from hypothesis import strategies as st
from strategies import graphs
from test_ir_properties import (
    printed_ir_parses_back_to_the_same_module,
    traced_and_written_graphs_compile_to_the_same_ir,
)

import fusec
from fusec.dialect import ops as ai
from fusec.runtime.reference import run_reference

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

NEW_OPS = [
    op for op in ai.TENSOR_OPS if op.name in {
        "ai.log", "ai.sin", "ai.cos", "ai.tan", "ai.asin", "ai.acos", "ai.atan", "ai.sinh",
        "ai.cosh", "ai.asinh", "ai.acosh", "ai.atanh", "ai.floor", "ai.ceil", "ai.round",
        "ai.sign", "ai.reciprocal", "ai.hard_sigmoid", "ai.hard_swish", "ai.leaky_relu",
        "ai.prelu", "ai.elu", "ai.selu", "ai.celu", "ai.softplus", "ai.softsign", "ai.mish",
        "ai.thresholded_relu",
    }
]  # fmt: skip
NEIGHBOURS = [ai.AddOp, ai.MulOp, ai.LayerNormOp, ai.SoftmaxOp, ai.ReduceSumOp, ai.CastOp]


def test_every_new_op_is_drawn():
    assert len(NEW_OPS) == 28


@graph_settings(30)
@given(graphs(max_ops=5, ops=NEW_OPS * 3 + NEIGHBOURS), st.integers(0, 2**16))
def test_cpu_matches_the_reference_with_the_new_ops(graph, seed):
    text = graph.text()
    compiled = fusec.compile(text, target="cpu")
    assert len(compiled.kernels) <= kernel_budget(graph)
    args = graph.inputs(seed)
    outputs = compiled._runner(args, alloc=poison)
    assert_matches(outputs, run_reference(fusec.parse(text), args), graph.dtypes())


# The printed IR parses back to the same text; a function calling ``fusec.ops`` (the
# attributes as keywords) traces to the IR written for the same graph.
_NEW_GRAPHS = given(graphs(max_ops=4, ops=NEW_OPS + NEIGHBOURS))
test_new_ops_print_and_parse_back = graph_settings(30)(
    _NEW_GRAPHS(printed_ir_parses_back_to_the_same_module)
)
test_new_ops_trace_as_written = graph_settings(30)(
    _NEW_GRAPHS(traced_and_written_graphs_compile_to_the_same_ir)
)
