"""Differential testing of the cpu target: random graphs of every op vs the reference.

Each graph is compiled by the whole pipeline (``fusec-default``, then the cpu
code generator and Numba) and run on fresh random inputs with poisoned
outputs; every result must match the float64 reference executor run on the
IR as written (see ``differential.py`` for the comparison). Graphs are small
and drawn from few shapes, so kernels repeat and the kernel cache pays off:
Numba's compile time is the cost of this test.

Long run: ``pytest -m fuzz --hypothesis-profile=slow tests/differential``.
"""

from __future__ import annotations

import pytest
from differential import assert_matches, graph_settings, kernel_budget, poison
from found import BIAS_TWO_INDEXINGS
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import graphs

import fusec
from fusec.runtime.reference import run_reference

pytestmark = pytest.mark.fuzz


@graph_settings(10)
@given(graphs(max_ops=5), st.integers(0, 2**16))
@example(BIAS_TWO_INDEXINGS, 0)
def test_cpu_matches_the_reference(graph, seed):
    """10 graphs in the default lane; ``test_cpu_matches_the_reference_at_length`` 50 more."""
    _check(graph, seed)


@pytest.mark.slow
@graph_settings(50)
@given(graphs(max_ops=5), st.integers(0, 2**16))
def test_cpu_matches_the_reference_at_length(graph, seed):
    _check(graph, seed)


def _check(graph, seed: int) -> None:
    text = graph.text()
    compiled = fusec.compile(text, target="cpu")
    assert len(compiled.kernels) <= kernel_budget(graph)
    args = graph.inputs(seed)
    outputs = compiled._runner(args, alloc=poison)
    assert_matches(outputs, run_reference(fusec.parse(text), args), graph.dtypes())
