"""Canonicalisation patterns of the ai ops (run by xDSL's ``canonicalize`` pass).

The op classes import this module for their traits, so the patterns test the
op type with ``isinstance`` instead of ``op_type_rewrite_pattern`` type hints.
"""

from __future__ import annotations

from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.traits import HasCanonicalizationPatternsTrait


class FoldIdentityCast(RewritePattern):
    """``ai.cast %x : T to T`` is ``%x``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import CastOp

        if isinstance(op, CastOp) and op.input.type == op.output.type:
            rewriter.replace(op, [], [op.input])


class FoldReluOfRelu(RewritePattern):
    """``relu(relu(x))`` is ``relu(x)``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import ReluOp

        if isinstance(op, ReluOp) and isinstance(op.input.owner, ReluOp):
            rewriter.replace(op, [], [op.input])


class CastCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (FoldIdentityCast(),)


class ReluCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (FoldReluOfRelu(),)
