"""The mixture-of-experts idiom of ``recognize-patterns`` (issue 31): the experts of a
Mixtral-style block as transformers' ``batched_mm`` experts write them, the only experts
code both ONNX exporters take (the default loop over experts has data-dependent
shapes), become one ``ai.moe_experts``.

What ``batched_mm`` computes, for S = T * k (token, slot) pairs, token-major::

    xs  = repeat_interleave(x, k)                    # (S, D): x's rows, each k times
    gu  = take(gate_up, e)  @ xs[..., None]          # (S, 2F, D) @ (S, D, 1)
    h   = silu(gu[:, :F]) * gu[:, F:]                # the SwiGLU
    y   = take(down, e) @ h[..., None]               # (S, D, F) @ (S, F, 1)
    out = sum(reshape(y * w[:, None], (T, k, D)), axis=1)

with ``e`` and ``w`` the (T, k) expert indices and routing weights flattened. Each
``take`` copies an expert's whole weight matrix per (token, slot): at Mixtral's sizes
(4096 tokens, top-2, 14336 x 4096 weights) that is terabytes. ``ai.moe_experts(x, w, e,
gate_up, down)`` computes the same sums with each expert's weights read once.

The match checks what the rewrite relies on: the two ``take``s read the (E, 2F, D)
and (E, D, F) stacks at the same indices (one value, or two computations
of it that ``same_computation`` finds equal: the dynamo exporter's index lookups are
written twice), the B operand of the first product is x's rows repeated k times
(found by running its chain of reshapes and expands on an iota), and the weights and
the final sum use the same token-major order. The expert indices are the ``take``s'
operand as it is (its range checks included), reshaped to (T, k), so an index out of
range is the same error ``ai.take``'s was. An f16/bf16 block whose down projection is
cast up before f32 routing weights multiply it (the weights stay f32) becomes the
experts in its own type with that cast after them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.passes.matching import Recognition, commuted, operands_of, shape


@dataclass
class ExpertsMatch:
    """The operands of ``ai.moe_experts`` and what to insert before it."""

    x: SSAValue
    weights: SSAValue
    experts: SSAValue
    gate_up: SSAValue
    down: SSAValue
    tokens: int
    k: int
    #: the product was cast up (f16/bf16 -> f32) before the routing weights
    upcast: bool


class ExpertsFromBatchedGemms(Recognition):
    """``batched_mm`` experts (above) -> ``ai.moe_experts``, rooted at the sum over the
    k slots."""

    label = "moe_experts"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        found = experts_match(op)
        if found is None:
            return
        new: list[Operation] = []
        weights = _shaped(found.weights, (found.tokens, found.k), new)
        experts = _shaped(found.experts, (found.tokens, found.k), new)
        x = _shaped(found.x, (found.tokens, shape(found.gate_up)[2]), new)
        moe = ai.MoEExpertsOp(x, weights, experts, found.gate_up, found.down)
        new.append(moe)
        if found.upcast:
            new.append(ai.CastOp(moe.output, spec_of(op.results[0].type).dtype))
        self.rewrite(rewriter, op, new, new[-1].results[0])


def experts_match(op: Operation) -> ExpertsMatch | None:
    """The ``batched_mm`` experts ending at the ``ai.reduce_sum`` ``op``, or None."""
    if not isinstance(op, ai.ReduceSumOp) or op.attr("keepdims"):
        return None
    summed = op.operands[0]
    if len(shape(summed)) != 3 or [a % 3 for a in op.attr("axes")] != [1]:
        return None
    tokens, k, width = shape(summed)
    weighted = _through_reshapes(summed)
    pairs = tokens * k
    if shape(weighted) != (pairs, width):
        return None
    for product, routing in commuted(weighted, ai.MulOp):
        if shape(routing) != (pairs, 1):
            continue
        inner = _through_reshapes(product)
        upcast = _upcast_source(inner)
        down_product = _through_reshapes(upcast if upcast is not None else inner)
        down = _expert_product(down_product, pairs)
        if down is None:
            continue
        down_table, indices, column = down
        hidden = _reshaped_from(column, (pairs, shape(column)[1]))
        gate_up = _swiglu_of(hidden, pairs) if hidden is not None else None
        if gate_up is None:
            continue
        gate_up_table, gate_indices, repeated = gate_up
        if not same_computation(indices, gate_indices):
            continue
        x = _repeated_rows(repeated, k)
        if x is None:
            continue
        count, _, hidden_width = shape(down_table)
        if shape(down_table)[1] != width or shape(gate_up_table) != (
            count,
            2 * hidden_width,
            width,
        ):
            continue  # the stacks of one set of experts: (E, 2F, D) and (E, D, F)
        return ExpertsMatch(
            x, _through_reshapes(routing), indices, gate_up_table, down_table, tokens, k,
            upcast is not None,
        )  # fmt: skip
    return None


def _through_reshapes(value: SSAValue) -> SSAValue:
    """The value a chain of ``ai.reshape``s starts from (row-major order is kept)."""
    while (source := operands_of(value, ai.ReshapeOp)) is not None:
        value = source[0]
    return value


def _reshaped_from(value: SSAValue, dims: tuple[int, ...]) -> SSAValue | None:
    """The value of shape ``dims`` that a chain of ``ai.reshape``s makes ``value`` of
    (``value`` itself when it has that shape), else None."""
    while shape(value) != dims:
        source = operands_of(value, ai.ReshapeOp)
        if source is None:
            return None
        value = source[0]
    return value


def _upcast_source(value: SSAValue) -> SSAValue | None:
    """The f16/bf16 value an ``ai.cast`` to f32 of ``value`` reads, else None."""
    cast = value.owner
    if not isinstance(cast, ai.CastOp) or spec_of(value.type).dtype != "f32":
        return None
    source = cast.operands[0]
    return source if spec_of(source.type).dtype in ("f16", "bf16") else None


def _expert_product(value: SSAValue, pairs: int) -> tuple[SSAValue, SSAValue, SSAValue] | None:
    """``take(table, idx) @ column`` (S, N, 1) behind ``value`` (S, N): the (E, N, K)
    table, the (S,) indices and the (S, K, 1) column, else None."""
    product = value.owner
    if not isinstance(product, ai.MatmulOp) or product.attr("transpose_a"):
        return None
    if product.attr("transpose_b"):
        return None
    gathered, column = product.operands
    take = gathered.owner
    if not isinstance(take, ai.TakeOp) or take.attr("axis") % 3 != 0:
        return None
    table, indices = take.operands
    if len(shape(table)) != 3 or shape(indices) != (pairs,):
        return None
    rows, depth = shape(table)[1:]
    if shape(product.output) != (pairs, rows, 1) or shape(column) != (pairs, depth, 1):
        return None
    return table, indices, column


def _swiglu_of(hidden: SSAValue, pairs: int) -> tuple[SSAValue, SSAValue, SSAValue] | None:
    """``silu(p[:, :F]) * p[:, F:]`` with ``p`` an expert product (``_expert_product``):
    its table, indices and the rows it multiplies, else None."""
    for gated, up in commuted(hidden, ai.MulOp):
        gate = _silu_operand(gated)
        if gate is None:
            continue
        halves = [_column_slice(v) for v in (gate, up)]
        if None in halves or halves[0][0] is not halves[1][0]:  # type: ignore[index]
            continue
        (whole, gate_start, width), (_, up_start, up_width) = halves  # type: ignore[misc]
        if (gate_start, up_start, up_width) != (0, width, width) or shape(whole)[1] != 2 * width:
            continue
        found = _expert_product(_through_reshapes(whole), pairs)
        if found is not None:
            return found
    return None


def _silu_operand(value: SSAValue) -> SSAValue | None:
    """x of ``ai.silu(x)`` or of ``x * sigmoid(x)``, else None."""
    silu = operands_of(value, ai.SiluOp)
    if silu is not None:
        return silu[0]
    for x, gate in commuted(value, ai.MulOp):
        sigmoid = operands_of(gate, ai.SigmoidOp)
        if sigmoid is not None and sigmoid[0] is x:
            return x
    return None


def _column_slice(value: SSAValue) -> tuple[SSAValue, int, int] | None:
    """(the 2-D source, first column, columns) of a slice of whole rows, else None."""
    op = value.owner
    if not isinstance(op, ai.SliceOp) or len(shape(value)) != 2:
        return None
    source = op.operands[0]
    rows = shape(source)[0]
    if list(op.attr("strides")) != [1, 1] or list(op.attr("offsets"))[0] != 0:
        return None
    if list(op.attr("sizes"))[0] != rows:
        return None
    return source, int(op.attr("offsets")[1]), int(op.attr("sizes")[1])


def _repeated_rows(value: SSAValue, k: int) -> SSAValue | None:
    """x (T x D elements, any shape) when ``value`` (T*k, D, 1) holds x's rows each
    repeated k times, made by a chain of reshapes and expands (the exporters'
    ``repeat_interleave``), else None. The chain is run on an iota of x's shape and
    compared with ``numpy.repeat``."""
    import numpy as np

    pairs, width = shape(value)[:2]
    if pairs % k:
        return None
    chain: list[ai.ReshapeOp | ai.ExpandOp] = []
    source = value
    while isinstance(source.owner, (ai.ReshapeOp, ai.ExpandOp)):
        chain.append(source.owner)
        source = source.owner.operands[0]
        if math.prod(shape(source)) == pairs // k * width:
            iota = np.arange(pairs // k * width, dtype=np.float64)
            result = iota.reshape(shape(source))
            for op in reversed(chain):
                result = op.reference(result)
            expected = np.repeat(iota.reshape(pairs // k, width), k, axis=0)
            if np.array_equal(result, expected.reshape(shape(value))):
                return source
    return None


def same_computation(a: SSAValue, b: SSAValue, depth: int = 32) -> bool:
    """``a`` and ``b`` are one value, or the results of ops of one name, attributes and
    properties over operands that are the same computation (constants equal by their
    attributes), ``depth`` ops deep at most."""
    if a is b:
        return True
    if depth == 0:
        return False
    x, y = a.owner, b.owner
    if not isinstance(x, Operation) or not isinstance(y, Operation):
        return False
    if x.name != y.name or x.properties != y.properties or x.attributes != y.attributes:
        return False
    if a.type != b.type or len(x.operands) != len(y.operands) or x.regions or y.regions:
        return False
    if x.results.index(a) != y.results.index(b):
        return False
    return all(
        same_computation(p, q, depth - 1) for p, q in zip(x.operands, y.operands, strict=True)
    )


def _shaped(value: SSAValue, dims: tuple[int, int], new: list[Operation]) -> SSAValue:
    """``value`` reshaped to ``dims`` (a new op in ``new``) unless it has that shape."""
    if shape(value) == dims:
        return value
    reshape = ai.ReshapeOp(value, shape=list(dims))
    new.append(reshape)
    return reshape.output
