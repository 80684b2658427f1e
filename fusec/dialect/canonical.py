"""Canonicalisation patterns of the ai ops (run by xDSL's ``canonicalize`` pass).

The op classes import this module for their traits, so the patterns test the
op type with ``isinstance`` instead of ``op_type_rewrite_pattern`` type hints.
"""

from __future__ import annotations

from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.traits import HasCanonicalizationPatternsTrait


def _replace(rewriter: PatternRewriter, op: Operation, new: Operation) -> None:
    """Replace ``op`` by ``new``, which keeps ``op``'s location (for diagnostics)."""
    new.location = op.location
    rewriter.replace(op, new)


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


class AddOfRowIsBiasAdd(RewritePattern):
    """``ai.add %x, %b`` with a 1-D ``%b`` as long as the last dim of a rank >= 2 ``%x``
    (either operand order) is ``ai.bias_add %x, %b {axis = rank - 1}``.

    One spelling per computation: the tracer and the ONNX importer write a row
    bias as ``ai.bias_add``, so the same graph written as text with ``ai.add``
    must compile to the same IR.
    """

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import AddOp, BiasAddOp, spec_of

        if not isinstance(op, AddOp):
            return
        result = spec_of(op.output.type).shape
        for x, b in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            x_shape, b_shape = spec_of(x.type).shape, spec_of(b.type).shape
            if len(x_shape) >= 2 and x_shape == result and b_shape == x_shape[-1:]:
                bias = BiasAddOp(x, b, axis=len(x_shape) - 1, attributes=op.attributes)
                _replace(rewriter, op, bias)
                return


class NonNegativeBiasAxis(RewritePattern):
    """``ai.bias_add {axis = -k}`` is ``{axis = rank - k}``: one spelling per axis."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import BiasAddOp, spec_of

        if not isinstance(op, BiasAddOp) or op.attr("axis") >= 0:
            return
        rank = spec_of(op.input.type).rank
        axis = op.attr("axis") % rank
        _replace(rewriter, op, BiasAddOp(op.input, op.bias, axis=axis, attributes=op.attributes))


class SymmetricConvPadding(RewritePattern):
    """``padding = array<i64: h, w, h, w>`` is ``array<i64: h, w>`` (and ``0, 0`` the
    default): one spelling per padding."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import Conv2DOp

        if not isinstance(op, Conv2DOp):
            return
        padding = op.attr("padding")
        if len(padding) != 4 or padding[:2] != padding[2:]:
            return
        attrs = op.attr_values() | {"padding": padding[:2]}
        _replace(rewriter, op, Conv2DOp(op.input, op.weight, attributes=op.attributes, **attrs))


class AddCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (AddOfRowIsBiasAdd(),)


class BiasAddCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (NonNegativeBiasAxis(),)


class Conv2DCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (SymmetricConvPadding(),)


class CastCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (FoldIdentityCast(),)


class ReluCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (FoldReluOfRelu(),)
