"""Issue 28 on the GPU vs the reference (skipped without a GPU): a Llama-style layer's q, k
and v projections as one GEMM and RoPE reading the q and k slices in place
(``fusec-cuda``: ``combine-projections{rope=true}``,
``read-views-in-place``), against the reference on the pipeline's IR and on the input
graph. Fresh random inputs, outputs poisoned first; the kernels must be the one GEMM, two
RoPE kernels and the flash attention (no copy, no fallback), so a case cannot pass on
another route."""

from __future__ import annotations

import pytest
from numerics import assert_close, assert_rel_l2
from projection_cases import projections_graph

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "dtype, seq, heads, kv_heads", [("f16", 77, 4, 2), ("bf16", 128, 8, 2), ("f16", 40, 4, 4)]
)
def test_combined_projections_and_rope_in_place_match_reference(dtype, seq, heads, kv_heads):
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    text = projections_graph(seq, heads, kv_heads, bias=False, dtype=dtype, rope=True)
    compiled = fusec.compile(text, target="cuda")
    assert [k.kind for k in compiled.kernels] == ["matmul", "pointwise", "attention"]
    assert not [k for k in compiled.kernels if "FALLBACK" in k.source]
    original = fusec.compile(text, target="reference")
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, dtype, what=f"{dtype} seq {seq}, seed {seed}")
        (graph,) = run_reference(original.module, args)
        # the graph's reference rounds after every op (the RoPE chain's too), the kernels once
        # a group: the project's rel-L2 standard, not elementwise (bf16 misses that by 8 ulps)
        assert_rel_l2(out, graph, dtype, what=f"{dtype} seq {seq}, seed {seed}, the graph")
