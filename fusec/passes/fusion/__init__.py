"""Operator fusion: classify ops, plan groups under the rules and target, outline ``ai.fused``.

``classify`` (the pattern lattice, from the op facts) -> ``rules`` +
``default.rules`` (the policy as data) -> ``legality`` (is a set of ops one
legal kernel for the target, and why not) -> ``planner`` (growing groups on
the networkx graph, stage by stage) -> ``outline`` (the xDSL rewrite). The
``fuse`` pass (``driver``) runs it all once per function; ``fuse-<stage>``
runs one stage; ``remarks`` explains the edges left unfused.
"""
