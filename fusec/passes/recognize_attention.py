"""The attention idiom of ``recognize-patterns``: ``softmax(q @ k^T [* c | / c] [+ mask])
[NaN -> 0] @ v`` -> ``ai.attention`` (the score and probability tensors vanish: one kernel
computes the attention; the key is taken back from the transpose that made ``k^T`` where
there is one). ``attention_chain`` is also how fusion remarks explain an attention left
in parts.

Soft-capped scores (Gemma-2's ``attn_logit_softcapping``, ONNX Attention's ``softcap``):
``tanh(q @ k^T [* c] [/ cap | * 1/cap]) * cap`` before the mask is ``ai.attention`` with
``softcap = cap`` and ``scale`` the product of the factors inside the tanh times ``cap``,
when ``cap`` is one positive finite constant (for any other the attribute would not mean
the same).

The softmax upcast (issue 28): an f16 (or bf16) attention whose scores are cast to f32
before the softmax and whose v is cast to f32 for the second product, as the
TorchScript exporter writes ``scaled_dot_product_attention`` of an f16 model (the f32
mask it adds promotes the rest), is the attention in f16 with f32 statistics and
accumulation (what every target's attention kernel computes), its result cast to f32:
``ai.cast(ai.attention(q, k, v16, mask16))``; the mask is converted (a constant at
compile time: f32 values past the f16 range become its largest finite number). The f32 tail
after it is the ``demote-upcasts`` pass's. Probabilities cast back to f16 before the
product with an f16 v (HF's eager attention: ``softmax(..., dtype=float32).to(q.dtype)``)
are the same f16 attention, no cast after it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.constants import dense_constant
from fusec.passes.matching import (
    Recognition,
    commuted,
    constant,
    is_scalar,
    scalar,
    shape,
    single_use,
)

if TYPE_CHECKING:
    import numpy as np


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
    #: the chain's f32 result is the half-precision attention's, upcast
    upcast: bool = False
    #: the scores' soft cap (0: none)
    softcap: float = 0.0


def attention_chain(op: Operation) -> AttentionChain | str | None:
    """The attention chain ending at the matmul ``op``; None when ``op`` reads no softmax
    (no attention candidate), else why it is not one (a remark's reason).

    The chain: ``softmax(q @ k^T [* c | / c] [+ mask])`` or, soft-capped,
    ``softmax(tanh(q @ k^T [* c | / c] [* d | / d]) * cap [+ mask])`` (the softmax over
    the last axis, ``c``, ``d`` and ``cap`` one constant value each, ``cap`` positive,
    the product written ``matmul(q, k) {transpose_b}`` or ``matmul(q, kt)`` with ``kt``
    any (..., D, T) value), optionally NaN-guarded (``where(isnan(p), 0, p)``), then
    ``@ v``; the scores and probabilities used only here.
    """
    if not isinstance(op, ai.MatmulOp):
        return None
    probs, v = op.operands
    down = _downcast(probs)  # softmax in f32, its probabilities cast back (HF's eager)
    if down is not None:
        probs = down
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
    scores, scale, softcap, mask, half = found
    if scores.attr("transpose_a"):
        return "the score product reads the query transposed"
    q, k = scores.operands
    if len(shape(q)) < 2 or len(shape(k)) < 2:
        return "the score product has a 1-D operand"
    new: list[Operation] = []
    if down is not None:
        back = spec_of(op.operands[0].type).dtype
        if half != back:
            return f"the probabilities are cast to {back}, but the scores are no upcast {back}"
    elif half is not None:
        v_half = _half_view(v, half, new)
        if v_half is None:
            return f"the {half} scores are upcast to f32 but v is no upcast {half} value"
        v = v_half
    if half is not None and mask is not None:
        mask = _half_mask(mask, half, new)
    key = k if scores.attr("transpose_b") else _key_of(k, new)
    if mask is None:
        import numpy as np

        new.append(zero := dense_constant(np.zeros(()), spec_of(q.type).dtype))
        mask = zero.results[0]
    upcast = half is not None and down is None
    return AttentionChain(q, key, v, mask, scale, guarded is not None, new, upcast, softcap)


class AttentionFromParts(Recognition):
    """The chain of ``attention_chain`` -> ``ai.attention``: the scores and the
    probabilities are no tensors of the program any more, so one kernel can compute
    the whole attention (each target decides which)."""

    label = "attention"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        chain = attention_chain(op)
        if not isinstance(chain, AttentionChain):
            return
        if chain.softcap and not self.seen.takes_softcap(spec_of(chain.q.type).shape[-1]):
            return
        attention = ai.AttentionOp(
            chain.q,
            chain.key,
            chain.v,
            chain.mask,
            scale=chain.scale,
            nan_to_zero=chain.nan_to_zero,
            softcap=chain.softcap,
        )
        new = [*chain.new_ops, attention]
        if chain.upcast:
            new.append(ai.CastOp(attention.results[0], spec_of(op.results[0].type).dtype))
        self.rewrite(rewriter, op, new, new[-1].results[0])


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


#: The element types an upcast attention computes in.
_HALF = ("f16", "bf16")


def _upcast(value: SSAValue) -> SSAValue | None:
    """x when ``value`` is ``ai.cast`` of an f16/bf16 ``x`` to f32, else None."""
    cast = value.owner
    if not isinstance(cast, ai.CastOp) or spec_of(value.type).dtype != "f32":
        return None
    return cast.input if spec_of(cast.input.type).dtype in _HALF else None


def _downcast(probs: SSAValue) -> SSAValue | None:
    """p when ``probs`` is ``ai.cast`` of f32 probabilities ``p`` to f16/bf16, read only
    here (a softmax upcast to f32 and back, as HF's eager attention writes it)."""
    cast = probs.owner
    if not isinstance(cast, ai.CastOp) or spec_of(probs.type).dtype not in _HALF:
        return None
    if spec_of(cast.input.type).dtype != "f32" or not single_use(probs):
        return None
    return cast.input


def _half_view(v: SSAValue, half: str, new: list[Operation]) -> SSAValue | None:
    """``v`` in ``half``: ``v`` is the upcast of a ``half`` value through layout ops
    (reshape, transpose, expand), which are rebuilt on that value (into ``new``)."""
    views: list[Operation] = []
    value = v
    while isinstance(value.owner, ai.ReshapeOp | ai.TransposeOp | ai.ExpandOp):
        views.append(value.owner)
        value = value.owner.operands[0]
    source = _upcast(value)
    if source is None or spec_of(source.type).dtype != half:
        return None
    for view in reversed(views):
        assert isinstance(view, ai.AiOp)
        new.append(rebuilt := type(view)(source, **view.attr_values()))
        source = rebuilt.results[0]
    return source


#: The largest finite f16 and bf16 numbers.
_HALF_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38}


def half_mask_values(values: np.ndarray, half: str) -> np.ndarray:
    """An f32 attention mask's values for a ``half`` mask: finite ones past its range
    clamped to its largest finite number (the f32 minimum an exporter writes masks as it
    did: a row masked entirely stays a uniform softmax, not -inf's NaN), infinities kept;
    float32, for ``dense_constant`` to round."""
    import numpy as np

    bound = _HALF_MAX[half]
    finite = np.isfinite(values)
    return np.where(finite, np.clip(values, -bound, bound), values).astype(np.float32)


def _half_mask(mask: SSAValue, half: str, new: list[Operation]) -> SSAValue:
    """The f32 ``mask`` in ``half``: a constant converted now (``half_mask_values``),
    another value cast."""
    if spec_of(mask.type).dtype == half:
        return mask
    values = constant(mask, max_elements=1 << 26)
    if values is not None:
        new.append(converted := dense_constant(half_mask_values(values, half), half))
        return converted.results[0]
    new.append(cast := ai.CastOp(mask, half))
    return cast.results[0]


def _scaled_masked_scores(
    value: SSAValue, softmax: Operation
) -> tuple[ai.MatmulOp, float, float, SSAValue | None, str | None] | str:
    """(the score matmul, the scale, the softcap (0: none), the mask or None, the half type
    the scores are upcast from or None) when ``value`` is ``q @ k^T``, optionally times (or
    divided by) a one-element constant, optionally soft-capped (``_soft_cap``), optionally
    cast from f16/bf16 to f32 (before or after the scale, or after the mask where the
    mask is of the half type), optionally plus a mask that broadcasts to it, every
    intermediate used once; else why not."""
    if not single_use(value):
        return f"the scores are also read by {_other_readers(value, softmax)}"
    half = None
    # HF's eager attention in f16/bf16 adds a mask of the model's type and upcasts the sum
    # for the softmax (``softmax(scores + mask, dtype=float32)``): the sum's rounding to
    # the half type is one the attention skips, as it skips the scores' own rounding.
    # (One visible difference: f16's minimum as a padding mask plus a score <= -16
    # overflows to -inf in the graph, so a padded row of such sums is NaN there and a
    # uniform average here; a review measured rel L2 ~1e-3 with bias masks, 0 with
    # padding ones: padding rows, accepted.)
    source = _upcast(value)
    if source is not None and isinstance(source.owner, ai.AddOp) and single_use(source):
        value, half = source, spec_of(source.type).dtype
    mask = None
    if isinstance(value.owner, ai.AddOp):
        for scores, m in commuted(value, ai.AddOp):
            if shape(scores) == shape(value) and (
                _reaches_product(scores) or _capped_product(scores)
            ):
                if not single_use(scores):
                    return "the unmasked scores are also read elsewhere"
                value, mask = scores, m
                break
        else:
            return "the scores plus a mask: neither addend is a (scaled) matrix product"
    if half is None and (source := _upcast(value)) is not None:
        if not single_use(value):
            return "the upcast scores are also read elsewhere"
        value, half = source, spec_of(source.type).dtype
    softcap, steps = 0.0, 1
    capped = _soft_cap(value)
    if isinstance(capped, str):
        return capped
    if capped is not None:
        # the scale and the division by the cap: two constant factors (or one of them)
        value, softcap = capped
        steps = 2
    scale, owner = 1.0, value.owner
    for step in range(steps):
        if half is None and (source := _upcast(value)) is not None and single_use(value):
            value, half = source, spec_of(source.type).dtype
        owner = value.owner
        scaled = _scaling(value, half, steps - step - 1)
        if isinstance(scaled, str):
            return scaled
        if scaled is None:
            break
        value, factor = scaled
        scale *= factor
    if half is None and (source := _upcast(value)) is not None and single_use(value):
        value, half = source, spec_of(source.type).dtype
    matmul = value.owner
    if not isinstance(matmul, ai.MatmulOp):
        what = owner.name if isinstance(owner, Operation) else "an argument"
        return f"the softmax reads {what}, not scores q @ k^T"
    # softcap * tanh(s * f) with f the factors' product is ai.attention's softcap *
    # tanh(s * scale / softcap) with scale = f * softcap (exact in real arithmetic; the
    # property holds the f32 rounding of the product)
    return matmul, scale * softcap if softcap else scale, softcap, mask, half


def _scaling(value: SSAValue, half: str | None, depth: int) -> tuple[SSAValue, float] | str | None:
    """(the scaled value, the factor) when ``value`` is a product reaching a matmul
    through at most ``depth`` more scalings times (or divided by) a one-element constant;
    None when it is no such product; why not when the factor is no constant."""
    owner = value.owner
    if not isinstance(owner, ai.MulOp | ai.DivOp):
        return None
    pairs = commuted(value, ai.MulOp) if isinstance(owner, ai.MulOp) else [owner.operands]
    for product, c in pairs:
        factor = scalar(c) if math.prod(shape(c)) == 1 else None
        if shape(product) != shape(value) or not _reaches_product(product, depth, half is None):
            continue
        if factor is None or (isinstance(owner, ai.DivOp) and factor == 0.0):
            return "the scores are scaled by a value that is not one constant"
        if not single_use(product):
            return "the unscaled scores are also read elsewhere"
        return product, factor if isinstance(owner, ai.MulOp) else 1.0 / factor
    return None


def _soft_cap(value: SSAValue) -> tuple[SSAValue, float] | str | None:
    """(the scores inside the tanh, the cap) when ``value`` is ``tanh(x) * cap`` (either
    order) with ``x`` a (scaled) matrix product, Gemma-2's logit soft-capping
    ``cap * tanh(s / cap)``; None when it is no soft cap; why not when the cap is not one
    positive finite constant (the only case ``ai.attention``'s softcap means the same)."""
    for tanh, c in commuted(value, ai.MulOp):
        op = tanh.owner
        if not isinstance(op, ai.TanhOp) or shape(tanh) != shape(value):
            continue
        inner = op.operands[0]
        if not _reaches_product(inner, 2):
            continue
        cap = scalar(c) if math.prod(shape(c)) == 1 else None
        if cap is None or not 0.0 < cap < math.inf:
            return "the scores are soft-capped by a value that is not one positive constant"
        if not (single_use(tanh) and single_use(inner)):
            return "the soft-capped scores are also read elsewhere"
        return inner, cap
    return None


def _capped_product(value: SSAValue) -> bool:
    """``value`` is a soft-capped (scaled) matrix product (``_soft_cap``), maybe upcast."""
    source = _upcast(value)
    return _soft_cap(value if source is None else source) is not None


def _reaches_product(value: SSAValue, depth: int = 1, upcast: bool = True) -> bool:
    """``value`` is a matmul, or a matmul times or divided by something, at most ``depth``
    times (each maybe upcast from f16/bf16 to f32, with ``upcast``)."""
    source = _upcast(value) if upcast else None
    owner = (value if source is None else source).owner
    if depth > 0 and isinstance(owner, ai.MulOp):
        return any(_reaches_product(x, depth - 1, upcast) for x in owner.operands)
    if depth > 0 and isinstance(owner, ai.DivOp):
        return _reaches_product(owner.operands[0], depth - 1, upcast)
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
