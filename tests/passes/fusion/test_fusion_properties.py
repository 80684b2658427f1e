"""Properties of fusion on random graphs (hypothesis).

For random DAGs of the supported ops with valid random shapes:
- the reference executor gives the same results before and after the
  pipeline (float64, rel err < 1e-6), with every softmax tile limit;
- the result honours the fusion contract (every ai op in exactly one legal
  ``ai.fused``) and the groups form no cycle;
- every fusion pass, in any order, is idempotent: a second run prints the same IR;
- anchors (conv2d, matmul) are never duplicated.
"""

from __future__ import annotations

import numpy as np
from fusion_graphs import graphs
from fusion_helpers import (
    FUSION_PASSES,
    apply,
    check_contract,
    count_ops,
    fusion_pass,
    ir,
    same_results,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from fusec.api import parse, run_pipeline
from fusec.dialect.ops import spec_of
from fusec.ir.module import entry_function
from fusec.runtime.reference import run_reference

EXAMPLES = examples(40)  # --hypothesis-profile slow: 10x
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TILE_LIMITS = st.sampled_from([2, 4, 256])


def _args(module):
    rng = np.random.default_rng(7)
    fn = entry_function(module)
    return [rng.standard_normal(spec_of(p).shape) for p in fn.function_type.inputs.data]


def _pipeline(limit: int) -> str:
    return (
        f"infer-shapes,canonicalize,cse,fuse-prologue,fuse-epilogue{{softmax_tile_limit={limit}}},"
        "fuse-reduction,fuse-elementwise,fuse-injective,fuse-singletons"
    )


@SETTINGS
@given(graphs(), TILE_LIMITS)
def test_pipeline_preserves_semantics_and_contract(text, limit):
    module, before = parse(text), parse(text)
    run_pipeline(before, "infer-shapes,canonicalize,cse")  # drops dead ops, as the pipeline does
    run_pipeline(module, _pipeline(limit))
    check_contract(module)
    args = _args(before)
    same_results(run_reference(before, args), run_reference(module, args))
    for anchor in ("ai.conv2d", "ai.matmul"):
        assert count_ops(module, anchor) == count_ops(before, anchor)


@SETTINGS
@given(graphs(), st.lists(st.sampled_from(list(FUSION_PASSES)), max_size=6), TILE_LIMITS)
def test_any_pass_order_is_idempotent_and_correct(text, names, limit):
    module, before = parse(text), parse(text)
    for name in names:
        p = fusion_pass(name, softmax_tile_limit=limit)
        apply(module, [p])
        once = ir(module)
        apply(module, [p])
        assert ir(module) == once, f"{name} changed the IR when run a second time"
    apply(module, [fusion_pass("fuse-singletons")])
    check_contract(module)
    args = _args(before)
    same_results(run_reference(before, args), run_reference(module, args))


@settings(max_examples=max(1, EXAMPLES // 3), deadline=None)
@given(graphs(), TILE_LIMITS)
def test_whole_pipeline_is_idempotent(text, limit):
    module = parse(text)
    run_pipeline(module, _pipeline(limit))
    once = ir(module)
    run_pipeline(module, _pipeline(limit))
    assert ir(module) == once


@SETTINGS
@given(graphs(), st.sampled_from([0, 1, 2]))
def test_the_local_cycle_proof_agrees_with_contracting_the_graph(text, stages_run):
    """``Planner.creates_cycle`` answers from the use lists where it can prove no path
    around; on every pair of units it must agree with contracting the two in the
    quotient graph and asking networkx whether a cycle appeared."""
    import networkx as nx

    from fusec.passes.fusion.outline import unpack
    from fusec.passes.fusion.planner import STAGE_ORDER, Planner
    from fusec.passes.fusion.rules import default_rules

    module = parse(text)
    run_pipeline(module, "infer-shapes,canonicalize,cse")
    block = entry_function(module).body.block
    planner = Planner(block, default_rules(), unpack(block))
    for stage in STAGE_ORDER[:stages_run]:
        planner.run_stage(stage)
    graph = planner.graph().copy()
    units = list(graph.nodes)
    for i, a in enumerate(units):
        for b in units[i + 1 :]:
            merged = nx.contracted_nodes(graph, a, b, self_loops=False)
            expected = not nx.is_directed_acyclic_graph(merged)
            assert planner.creates_cycle(a, b) == expected
            assert planner.creates_cycle(b, a) == expected
