"""Properties of the front ends and the pipeline on random graphs of every op (hypothesis).

* the printed IR parses back to the same module, before and after the pipeline,
  with and without locations;
* ``fusec-default`` is idempotent, and makes at most one kernel per op (a
  reshape is no kernel; a ``batch_norm`` with run-time statistics is two, see
  ``differential.kernel_budget``);
* the same graph traced through ``@fusec.fuse`` and written as ``.mlir`` text
  compiles to the same IR.

No kernel is compiled here (target ``reference``), so these run many graphs.
Long run: ``pytest -m fuzz --hypothesis-profile=slow``. Graphs a long run found
failing run first on every run (``found.py``).
"""

from __future__ import annotations

import pytest
from differential import graph_settings, kernel_budget
from found import BATCH_NORM_RANK_2, CONSTANT_OPERAND_ORDER, CONSTANT_ORDER
from hypothesis import assume, example, given
from strategies import graphs, traceable

import fusec
from fusec.api import parse, print_ir, run_pipeline
from fusec.dialect import ops as ai

pytestmark = pytest.mark.fuzz


def _kernels(module) -> int:
    """The kernels ``module`` launches: its groups but views (a reshape is no kernel)."""
    return sum(1 for op in module.walk() if isinstance(op, ai.FusedOp) and op.kind_name != "view")


def _roundtrip(module) -> None:
    for locations in (False, True):
        text = print_ir(module, locations=locations)
        again = parse(text)
        assert print_ir(again, locations=locations) == text
        assert again.is_structurally_equivalent(module)


@graph_settings(100)
@given(graphs(max_ops=8))
def test_printed_ir_parses_back_to_the_same_module(graph):
    text = graph.text()
    module = parse(text)
    assert print_ir(module) == text
    assert module.is_structurally_equivalent(graph.module())
    _roundtrip(module)
    run_pipeline(module)
    _roundtrip(module)


@graph_settings(100)
@given(graphs(max_ops=8))
@example(BATCH_NORM_RANK_2)
def test_default_pipeline_is_idempotent_with_at_most_one_kernel_per_op(graph):
    module = parse(graph.text())
    run_pipeline(module)
    once = print_ir(module)
    assert _kernels(module) <= kernel_budget(graph)
    run_pipeline(module)
    assert print_ir(module) == once


@graph_settings(60)
@given(graphs(max_ops=8))
@example(CONSTANT_ORDER)
@example(CONSTANT_OPERAND_ORDER)
def test_traced_and_written_graphs_compile_to_the_same_ir(graph):
    assume(traceable(graph))  # an op without a fusec.ops function cannot be traced
    fused = fusec.fuse(graph.function(), target="reference", disk_cache=False)
    args = graph.inputs()
    from_text = fusec.compile(graph.text(), target="reference")
    assert fused.fused_ir(*args) == from_text.ir, f"traced IR:\n{fused.ir(*args)}"
