"""Helpers shared by the fusion tests (imported by module name: this folder is on sys.path)."""

from __future__ import annotations

import networkx as nx
import numpy as np
from numerics import assert_close
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from fusec.api import print_ir
from fusec.dialect import make_context
from fusec.dialect.ops import AiOp, FusedOp
from fusec.ir.diagnostics import verify_module
from fusec.passes.fusion.driver import STAGE_PASSES, FusePass
from fusec.passes.fusion.legality import check_group
from fusec.passes.fusion.rules import default_rules

KINDS = ("conv", "matmul", "attention", "row_reduce", "pointwise")


#: Every fusion pass: the whole transform and each of its stages alone.
FUSION_PASSES = {"fuse": FusePass, **STAGE_PASSES}


def fusion_pass(name: str, **options):
    """An instance of the fusion pass ``name`` with ``options``."""
    return FUSION_PASSES[name](**options)


def apply(module: ModuleOp, passes) -> ModuleOp:
    """Apply pass instances in order, verifying after each."""
    ctx = make_context()
    for p in passes:
        p.apply(ctx, module)
        verify_module(module)
    return module


def fused_ops(module: ModuleOp) -> list[FusedOp]:
    return [op for op in module.walk() if isinstance(op, FusedOp)]


def summary(module: ModuleOp) -> list[tuple[str, list[str]]]:
    """(kind, body op names) of each ai.fused, in program order."""
    return [
        (f.kind_name, [op.name for op in f.block.ops if op is not f.block.last_op])
        for f in fused_ops(module)
    ]


def count_ops(module: ModuleOp, name: str) -> int:
    return sum(1 for op in module.walk() if op.name == name)


def check_contract(module: ModuleOp) -> None:
    """The agreed fusion contract, plus legality of every group and no cycles."""
    rules = default_rules()
    for fn in (op for op in module.walk() if isinstance(op, func.FuncOp)):
        block = fn.body.block
        graph = nx.DiGraph()
        seen: set[Operation] = set()
        for op in block.ops:
            assert not isinstance(op, AiOp), f"{op.name} outside any ai.fused"
            if isinstance(op, FusedOp):
                assert op.kind_name in KINDS, op.kind_name
                members = [m for m in op.block.ops if m is not op.block.last_op]
                assert members and all(isinstance(m, AiOp) for m in members)
                verdict = check_group(members, rules)
                assert verdict.ok, f"illegal {op.kind_name} group: {verdict.reason}"
                assert verdict.kind == op.kind_name, (verdict.kind, op.kind_name)
                graph.add_node(op)
            for value in op.operands:  # producers come first: the block is in SSA order
                owner = value.owner
                if isinstance(owner, Operation):
                    assert owner in seen, f"{op.name} uses a value defined after it"
                    if isinstance(owner, FusedOp) and isinstance(op, FusedOp):
                        graph.add_edge(owner, op)
            seen.add(op)
        assert nx.is_directed_acyclic_graph(graph)


def same_results(before, after, tol: float = 1e-6) -> None:
    """Assert two result tuples agree: same shapes, finite, elementwise within ``tol``
    (rtol, and atol per unit of RMS: ``tests/numerics.py``)."""
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        assert a.shape == b.shape
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
        assert_close(b, a, tol=tol)


def ir(module: ModuleOp) -> str:
    return print_ir(module)
