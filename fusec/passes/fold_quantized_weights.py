"""``fold-quantized-weights``: every ``dequantize`` of constants folded, 4-bit codes too.

``canonicalize`` folds a dequantize of constant codes, scale and zero point into the
float constant it computes (``FoldConstantDequantize``), except for 4-bit codes: a
weight-only int4 model (W4A16) keeps its weights as codes there, since whether to
compute with 4-bit or float weights is a target's choice. ``fusec-default`` (the cpu
target's pipeline and the shared one) runs this pass after ``canonicalize``: its GEMMs
pack a constant float B once, and a weight dequantized each call would be slower. The
cuda pipeline does not: its pointwise kernel dequantizes the codes each call (per-block
scales too), reading a quarter of an f16 weight's bytes.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriteWalker

from fusec.dialect.canonical import FoldConstantDequantize


class FoldQuantizedWeightsPass(ModulePass):
    """Fold every dequantize of constants, 4-bit codes included."""

    name = "fold-quantized-weights"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldConstantDequantize(four_bit=True)).rewrite_module(op)
