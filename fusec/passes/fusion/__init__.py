"""Operator fusion: classify ops, plan groups under the rules, outline ``ai.fused``.

``classify`` (the pattern lattice) -> ``rules`` + ``default.rules`` (the policy
as data) -> ``legality`` (is a set of ops one legal kernel, and why not) ->
``planner`` (growing groups on the networkx graph) -> ``outline`` (the xDSL
rewrite). The passes ``fuse-prologue``, ``fuse-epilogue``, ``fuse-reduction``,
``fuse-elementwise`` and ``fuse-singletons`` each run one planner stage;
``fuse-attention`` runs first and outlines attention chains (a pattern with two
anchors, for targets that have an attention kernel); ``remarks`` explains the
edges left unfused and ``viz`` draws the result.
"""

from __future__ import annotations

FUSION_PASSES: dict[str, tuple[str, str]] = {
    "fuse-attention": ("fusec.passes.fusion.fuse_attention", "FuseAttentionPass"),
    "fuse-prologue": ("fusec.passes.fusion.fuse_prologue", "FuseProloguePass"),
    "fuse-epilogue": ("fusec.passes.fusion.fuse_epilogue", "FuseEpiloguePass"),
    "fuse-reduction": ("fusec.passes.fusion.fuse_reduction", "FuseReductionPass"),
    "fuse-elementwise": ("fusec.passes.fusion.fuse_elementwise", "FuseElementwisePass"),
    "fuse-singletons": ("fusec.passes.fusion.fuse_singletons", "FuseSingletonsPass"),
}
"""Pass name -> (module, class), imported lazily by ``fusec.passes``."""

FUSION_PIPELINE = ",".join(FUSION_PASSES)
"""The fusion passes in the order ``fusec-default`` runs them."""
