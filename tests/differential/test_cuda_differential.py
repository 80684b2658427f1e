"""Differential testing of the cuda target on the GPU: random graphs of every op vs the
reference (as ``test_cpu_differential.py``; outputs poisoned by the cuda runner).

Run on a GPU machine: ``pytest -m gpu tests/differential`` (bounded), or
``pytest -m "gpu and fuzz" --hypothesis-profile=slow tests/differential``.
"""

from __future__ import annotations

import pytest
from differential import assert_matches, graph_settings, kernel_budget
from found import BIAS_TWO_INDEXINGS
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import graphs

import fusec
from fusec.runtime.reference import run_reference

pytestmark = [pytest.mark.fuzz, pytest.mark.gpu]


@graph_settings(100)
@given(graphs(max_ops=5), st.integers(0, 2**16))
@example(BIAS_TWO_INDEXINGS, 0)
def test_cuda_matches_the_reference(graph, seed):
    text = graph.text()
    compiled = fusec.compile(text, target="cuda")
    assert len(compiled.kernels) <= kernel_budget(graph, layout_copies=True)
    args = graph.inputs(seed)
    outputs = compiled._runner(args, poison=True)
    assert_matches(outputs, run_reference(fusec.parse(text), args), graph.dtypes())
