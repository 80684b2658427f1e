"""The attention idiom of ``recognize-patterns``: ``softmax(q @ k^T [* c | / c] [+ mask])
[NaN -> 0] @ v`` -> ``ai.attention`` (the score and probability tensors vanish: one kernel
computes the attention; the key is taken back from the transpose that made ``k^T`` where
there is one). ``attention_chain`` is also how fusion remarks explain an attention left
in parts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.passes.matching import (
    Recognition,
    commuted,
    constant_op,
    is_scalar,
    scalar,
    shape,
    single_use,
)


@dataclass
class AttentionChain:
    """What ``ai.attention`` is made of: the operands of the chain's ops, and the new ops
    (the key's transpose, a zero mask) the rewrite inserts before it."""

    q: SSAValue
    key: SSAValue
    v: SSAValue
    mask: SSAValue
    scale: float
    nan_to_zero: bool
    new_ops: list[Operation]


def attention_chain(op: Operation) -> AttentionChain | str | None:
    """The attention chain ending at the matmul ``op``; None when ``op`` reads no softmax
    (no attention candidate), else why it is not one (a remark's reason).

    The chain: ``softmax(q @ k^T [* c | / c] [+ mask])`` (the softmax over the last
    axis, ``c`` one constant value, the product written ``matmul(q, k) {transpose_b}`` or
    ``matmul(q, kt)`` with ``kt`` any (..., D, T) value), optionally NaN-guarded
    (``where(isnan(p), 0, p)``), then ``@ v``; the scores and probabilities used only here.
    """
    if not isinstance(op, ai.MatmulOp):
        return None
    probs, v = op.operands
    guarded = _nan_guarded(probs)
    if guarded is not None:
        probs = guarded
    softmax = probs.owner
    if not isinstance(softmax, ai.SoftmaxOp):
        return None
    if op.attr("transpose_a") or op.attr("transpose_b"):
        return "the product of the probabilities has a transposed operand"
    if guarded is None and not single_use(probs):
        return f"the probabilities are also read by {_other_readers(probs, op)}"
    rank = len(shape(probs))
    if softmax.attr("axis") % rank != rank - 1 or len(shape(v)) < 2:
        return "the softmax is not over the keys (the last axis of a matrix product)"
    found = _scaled_masked_scores(softmax.operands[0], softmax)
    if isinstance(found, str):
        return found
    scores, scale, mask = found
    if scores.attr("transpose_a"):
        return "the score product reads the query transposed"
    q, k = scores.operands
    if len(shape(q)) < 2 or len(shape(k)) < 2:
        return "the score product has a 1-D operand"
    new: list[Operation] = []
    key = k if scores.attr("transpose_b") else _key_of(k, new)
    if mask is None:
        import numpy as np

        new.append(zero := constant_op(np.zeros(()), spec_of(q.type).dtype))
        mask = zero.results[0]
    return AttentionChain(q, key, v, mask, scale, guarded is not None, new)


class AttentionFromParts(Recognition):
    """The chain of ``attention_chain`` -> ``ai.attention``: the scores and the
    probabilities are no tensors of the program any more, so one kernel can compute
    the whole attention (each target decides which)."""

    label = "attention"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        chain = attention_chain(op)
        if not isinstance(chain, AttentionChain):
            return
        attention = ai.AttentionOp(
            chain.q,
            chain.key,
            chain.v,
            chain.mask,
            scale=chain.scale,
            nan_to_zero=chain.nan_to_zero,
        )
        self.rewrite(rewriter, op, [*chain.new_ops, attention], attention.results[0])


def _other_readers(value: SSAValue, reader: Operation) -> str:
    names = sorted({use.operation.name for use in value.uses if use.operation is not reader})
    return ", ".join(names)


def _nan_guarded(value: SSAValue) -> SSAValue | None:
    """p when ``value`` is ``where(isnan(p), 0, p)`` and nothing else reads p or the guard."""
    where = value.owner
    if not isinstance(where, ai.WhereOp) or not single_use(value):
        return None
    condition, zero, p = where.operands
    cast = condition.owner
    if isinstance(cast, ai.CastOp) and single_use(condition):  # isnan as i1 (ONNX's IsNaN)
        condition = cast.input
    if not isinstance(condition.owner, ai.IsNanOp) or condition.owner.operands[0] is not p:
        return None
    if not (is_scalar(zero, 0.0, rtol=0.0) and single_use(condition)):
        return None
    readers = {use.operation for use in p.uses}
    if readers != {where, condition.owner} or shape(value) != shape(p):
        return None
    return p


def _scaled_masked_scores(
    value: SSAValue, softmax: Operation
) -> tuple[ai.MatmulOp, float, SSAValue | None] | str:
    """(the score matmul, the scale, the mask or None) when ``value`` is ``q @ k^T``,
    optionally times (or divided by) a one-element constant, optionally plus a mask
    that broadcasts to it, every intermediate used once; else why not."""
    if not single_use(value):
        return f"the scores are also read by {_other_readers(value, softmax)}"
    mask = None
    if isinstance(value.owner, ai.AddOp):
        for scores, m in commuted(value, ai.AddOp):
            if shape(scores) == shape(value) and _reaches_product(scores):
                if not single_use(scores):
                    return "the unmasked scores are also read elsewhere"
                value, mask = scores, m
                break
        else:
            return "the scores plus a mask: neither addend is a (scaled) matrix product"
    scale = 1.0
    owner = value.owner
    if isinstance(owner, ai.MulOp | ai.DivOp):
        pairs = commuted(value, ai.MulOp) if isinstance(owner, ai.MulOp) else [owner.operands]
        for product, c in pairs:
            factor = scalar(c) if math.prod(shape(c)) == 1 else None
            if shape(product) != shape(value) or not isinstance(product.owner, ai.MatmulOp):
                continue
            if factor is None or (isinstance(owner, ai.DivOp) and factor == 0.0):
                return "the scores are scaled by a value that is not one constant"
            if not single_use(product):
                return "the unscaled scores are also read elsewhere"
            value, scale = product, factor if isinstance(owner, ai.MulOp) else 1.0 / factor
            break
    matmul = value.owner
    if not isinstance(matmul, ai.MatmulOp):
        what = owner.name if isinstance(owner, Operation) else "an argument"
        return f"the softmax reads {what}, not scores q @ k^T"
    return matmul, scale, mask


def _reaches_product(value: SSAValue) -> bool:
    """``value`` is a matmul, or a matmul times or divided by something."""
    owner = value.owner
    if isinstance(owner, ai.MulOp):
        return any(isinstance(x.owner, ai.MatmulOp) for x in owner.operands)
    if isinstance(owner, ai.DivOp):
        return isinstance(owner.operands[0].owner, ai.MatmulOp)
    return isinstance(owner, ai.MatmulOp)


def _key_of(kt: SSAValue, new: list[Operation]) -> SSAValue:
    """The key (..., T, D) of the score product's rhs ``kt`` (..., D, T): the operand of a
    transpose that made ``kt`` with its last two dims swapped back (none when that is
    the identity), else a new transpose of ``kt``."""
    rank = len(shape(kt))
    swap = [*range(rank - 2), rank - 1, rank - 2]
    owner = kt.owner
    if isinstance(owner, ai.TransposeOp) and single_use(kt):
        perm = list(owner.attr("perm"))
        perm[-2:] = perm[-1], perm[-2]
        source = owner.operands[0]
        if perm == list(range(rank)):
            return source
        new.append(back := ai.TransposeOp(source, perm=tuple(perm)))
        return back.results[0]
    new.append(transposed := ai.TransposeOp(kt, perm=tuple(swap)))
    return transposed.results[0]
