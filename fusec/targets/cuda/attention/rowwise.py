"""``attention-layout``: a transpose of the leading dims moves across a row-wise GEMM
towards the attention, where the attention kernel addresses it (issue 28).

PyTorch's ``nn.MultiheadAttention`` (ViT's, at batch > 1) works sequence-first: its export
transposes the tokens ``[B, S, E] -> [S, B, E]`` before the input projection and the
projected result back after the output projection, two copy kernels a layer. A matmul
with a 2-D weight (and a bias along the last axis) computes each row on its own, so it
commutes with any permutation of the leading dims that keeps the last one::

    matmul(transpose(x, p), W) + b  ==  transpose(matmul(x, W) + b, p)

This pass, run before fusion in the cuda pipeline, moves such a transpose to the side of
the GEMM that faces an ``ai.attention``: below the input projection when its result only
feeds attention operands through layout ops (the transpose joins the head split, which
the kernel reads through strides), above the output projection when its input comes from
an attention through layout ops (it joins the head merge, which the kernel's store
writes). The GEMM then reads and writes plain rows (a LayerNorm before it becomes its
prologue, a residual add after it its epilogue). The rewrite is exact: the same rows,
the same products.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from fusec.dialect import ops as ai
from fusec.dialect.views import at_function_level, feeds_attention
from fusec.passes.matching import ATTENTION_VIEWS, rowwise_gemm

#: Layout ops it writes its result through.
_VIEWS_OUT = (ai.ReshapeOp, ai.TransposeOp)


def _leading(op: ai.TransposeOp) -> bool:
    """A transpose that keeps the last dim in place (it permutes whole rows)."""
    perm = list(op.attr("perm"))
    return len(perm) >= 2 and perm[-1] == len(perm) - 1


def _from_attention(value: SSAValue) -> bool:
    """``value`` is an attention's result through layout ops."""
    while isinstance(value.owner, _VIEWS_OUT):
        value = value.owner.operands[0]
    return isinstance(value.owner, ai.AttentionOp)


class SinkTransposeBelowGemm(RewritePattern):
    """``gemm(transpose(x, p))`` feeding attention operands -> ``transpose(gemm(x), p)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ai.TransposeOp, rewriter: PatternRewriter) -> None:
        if not at_function_level(op) or not _leading(op):
            return
        gemm = rowwise_gemm(op.output.get_user_of_unique_use())
        if gemm is None or gemm.matmul.operands[0] is not op.output:
            return
        if _from_attention(op.operands[0]):
            return  # attention -> GEMM -> attention: the transpose joins the first's store
        last = gemm.last
        if not feeds_attention(last.results[0], lambda user: isinstance(user, ATTENTION_VIEWS)):
            return
        new = gemm.rebuilt(op.operands[0])
        moved = ai.TransposeOp(new[-1].results[0], perm=tuple(op.attr("perm")))
        new.append(moved)
        for created in new:
            created.location = last.location
        rewriter.insert(new, InsertPoint.before(last))
        rewriter.replace(last, [], [moved.output])
        if gemm.bias is not None:
            rewriter.erase(gemm.matmul)
        rewriter.erase(op)


class HoistTransposeAboveGemm(RewritePattern):
    """``transpose(gemm(y), p)`` with ``y`` from an attention -> ``gemm(transpose(y, p))``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ai.TransposeOp, rewriter: PatternRewriter) -> None:
        if not at_function_level(op) or not _leading(op):
            return
        producer = op.operands[0].owner
        if isinstance(producer, ai.BiasAddOp):
            producer = producer.operands[0].owner
        gemm = rowwise_gemm(producer if isinstance(producer, Operation) else None)
        if gemm is None or op.operands[0] is not gemm.last.results[0]:
            return
        if gemm.last.results[0].get_user_of_unique_use() is not op:
            return
        if not _from_attention(gemm.matmul.operands[0]):
            return
        moved = ai.TransposeOp(gemm.matmul.operands[0], perm=tuple(op.attr("perm")))
        new = [moved, *gemm.rebuilt(moved.output)]
        for created in new:
            created.location = op.location
        rewriter.insert(new, InsertPoint.before(op))
        rewriter.replace(op, [], [new[-1].results[0]])
        if gemm.bias is not None:
            rewriter.erase(gemm.bias)
        rewriter.erase(gemm.matmul)


@dataclass(frozen=True)
class AttentionLayoutPass(ModulePass):
    """Move leading-dim transposes across row-wise GEMMs towards the attention."""

    name = "attention-layout"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = GreedyRewritePatternApplier(
            [SinkTransposeBelowGemm(), HoistTransposeAboveGemm()]
        )
        PatternRewriteWalker(patterns).rewrite_module(op)
