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


def printed_ir_parses_back_to_the_same_module(graph) -> None:
    text = graph.text()
    module = parse(text)
    assert print_ir(module) == text
    assert module.is_structurally_equivalent(graph.module())
    _roundtrip(module)
    run_pipeline(module)
    _roundtrip(module)


@example(BATCH_NORM_RANK_2)
def default_pipeline_is_idempotent_with_at_most_one_kernel_per_op(graph) -> None:
    module = parse(graph.text())
    run_pipeline(module)
    once = print_ir(module)
    assert _kernels(module) <= kernel_budget(graph)
    run_pipeline(module)
    assert print_ir(module) == once


@example(CONSTANT_ORDER)
@example(CONSTANT_OPERAND_ORDER)
def traced_and_written_graphs_compile_to_the_same_ir(graph) -> None:
    assume(traceable(graph))  # an op without a fusec.ops function cannot be traced
    fused = fusec.fuse(graph.function(), target="reference", disk_cache=False)
    args = graph.inputs()
    from_text = fusec.compile(graph.text(), target="reference")
    assert fused.fused_ir(*args) == from_text.ir, f"traced IR:\n{fused.ir(*args)}"


def _lanes(prop, base: int):
    """``prop`` as two tests: a fifth of ``base`` graphs in the default lane, ``base``
    in the slow lane (both scaled by the hypothesis profile)."""
    default = graph_settings(max(1, base // 5))(given(graphs(max_ops=8))(prop))
    at_length = pytest.mark.slow(graph_settings(base)(given(graphs(max_ops=8))(prop)))
    return default, at_length


(
    test_printed_ir_parses_back_to_the_same_module,
    test_printed_ir_parses_back_to_the_same_module_at_length,
) = _lanes(printed_ir_parses_back_to_the_same_module, 100)
(
    test_default_pipeline_is_idempotent_with_at_most_one_kernel_per_op,
    test_default_pipeline_is_idempotent_with_at_most_one_kernel_per_op_at_length,
) = _lanes(default_pipeline_is_idempotent_with_at_most_one_kernel_per_op, 100)
(
    test_traced_and_written_graphs_compile_to_the_same_ir,
    test_traced_and_written_graphs_compile_to_the_same_ir_at_length,
) = _lanes(traced_and_written_graphs_compile_to_the_same_ir, 60)
