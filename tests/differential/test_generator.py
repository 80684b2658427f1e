"""The graph generator itself: it covers every op of the dialect, and each builder works.

An op added to the dialect without a builder (an op with attributes, or
outside the unary/binary families) fails ``test_every_dialect_op_has_a_builder``
with its name: add it to ``BUILDERS`` in ``tests/strategies.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, find, settings
from lanes import sampled
from strategies import ai_ops, graphs, tracer_function, uncovered_ops

import fusec


def test_every_dialect_op_has_a_builder():
    missing = uncovered_ops()
    assert not missing, f"no graph builder for {missing}: add one to tests/strategies.py BUILDERS"


def test_every_op_has_its_tracer_function():
    assert ai_ops()
    missing = [op.name for op in ai_ops() if tracer_function(op) is None]
    assert not missing, f"fusec.ops has no function for {missing}"


# A search of up to 50 graphs per op (~2 s): every 5th op in the default lane, all: slow.
@pytest.mark.parametrize("op", sampled(ai_ops(), 5), ids=lambda op: op.name)
def test_each_builder_makes_valid_graphs_with_its_op(op):
    found = find(
        graphs(max_ops=3, ops=[op]),
        lambda g: op.name in g.op_names(),
        settings=settings(max_examples=50, database=None, suppress_health_check=list(HealthCheck)),
    )
    module = fusec.parse(found.text())  # the printed graph parses and verifies
    assert any(o.name == op.name for o in module.walk())
