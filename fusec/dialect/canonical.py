"""Canonicalisation patterns of the ai ops (run by xDSL's ``canonicalize`` pass).

Optimisations on the IR live here, not in a front end, so ``.mlir`` text,
traced Python and ONNX models all get them: e.g. an inference BatchNorm after
a conv is folded into the conv's weights whatever built the graph.

The op classes carry the ``ops.Canonicalized`` trait; this module registers their
patterns (``ops.CANONICAL_PATTERNS``) when ``fusec.dialect`` is imported, so it
imports the ops and the ops import nothing of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from fusec.dialect import ops as ai
from fusec.dialect.views import (
    CollapseViewChain,
    ComposeTransposes,
    FoldIdentityReshape,
    FoldIdentityTranspose,
)
from fusec.errors import FusecError
from fusec.ir.constants import constant_value, dense_constant, is_constant

if TYPE_CHECKING:
    import numpy as np


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


#: (from, to) element types where ``to`` holds every value of ``from`` exactly.
_EXACT_WIDENINGS = frozenset({("f16", "f32"), ("bf16", "f32"), ("i32", "i64")})


class FoldExactCastRoundTrip(RewritePattern):
    """``ai.cast (ai.cast %x : T to U) : U to T`` is ``%x`` where ``U`` holds every value
    of ``T`` (f16 -> f32 -> f16: TorchScript exports write it around an f16 softmax)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import CastOp, spec_of

        if not isinstance(op, CastOp) or not isinstance(inner := op.input.owner, CastOp):
            return
        source = inner.input
        widening = (spec_of(source.type).dtype, spec_of(op.input.type).dtype)
        if source.type == op.output.type and widening in _EXACT_WIDENINGS:
            rewriter.replace(op, [], [source])


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


def _same_value(a: SSAValue, b: SSAValue) -> bool:
    """``a`` and ``b`` are one value, or constants of one type holding the same bytes."""
    if a is b:
        return True
    if not (is_constant(a.owner) and is_constant(b.owner)) or a.type != b.type:
        return False
    return a.owner.value == b.owner.value


class FoldRequantize(RewritePattern):
    """``quantize(dequantize(q, s, z), s, z)`` with ``q = quantize(x, s, z)``, the same
    scale, zero point and attributes, is ``q``: dequantizing gives back values that
    quantize exactly to ``q`` (a Q->DQ->Q chain). ``dequantize(quantize(x))`` alone
    is kept: it rounds ``x`` (fake quantization changes values)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import DequantizeOp, QuantizeOp

        if not isinstance(op, QuantizeOp):
            return
        dq = op.input.owner
        if not isinstance(dq, DequantizeOp):
            return
        q = dq.input.owner
        if not isinstance(q, QuantizeOp) or q.output.type != op.output.type:
            return
        layout = ("axis", "block_size")
        same_attrs = q.attr_values() == op.attr_values()
        same_layout = all(dq.attr(key) == q.attr(key) for key in layout)
        # The scale and zero point of all three: q's, dq's and op's are one.
        params = [(q.scale, q.zero_point), (dq.scale, dq.zero_point), (op.scale, op.zero_point)]
        same_params = all(
            _same_value(a, b) for pair in params[1:] for a, b in zip(params[0], pair, strict=True)
        )
        if same_attrs and same_layout and same_params:
            rewriter.replace(op, [], [q.output])


class FoldConstantDequantize(RewritePattern):
    """``dequantize`` of constant codes, scale and zero point (a quantized weight) is the
    constant it computes, made once at compile time (issue 31): the targets compute with
    float weights (the cpu GEMMs pack a constant B once), as ONNX import folds a
    DequantizeLinear of initializers (but of int8 codes). ``recognize-patterns`` runs
    first: a matmul weight's per-column scales have left the dequantize by then, so the
    constant holds the codes themselves (less their zero point), which the cpu int8 GEMM
    multiplies (``targets/cpu/gemm_int8``).

    4-bit codes stay quantized under ``canonicalize`` (``four_bit=False``): folded, a
    weight-only int4 model's weights take 4 (f16) to 8 (f32) times their bytes, which is a
    target's choice, not a canonical form. ``fold-quantized-weights`` (``fusec-default``:
    the cpu target) folds them; the cuda pipeline keeps them (W4A16: the codes are what
    its kernels read)."""

    def __init__(self, four_bit: bool = False) -> None:
        self.four_bit = four_bit

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import DequantizeOp, spec_of
        from fusec.ir.dtypes import INT4_TYPES, numpy_dtype

        if not isinstance(op, DequantizeOp):
            return
        if not all(is_constant(value.owner) for value in op.operands):
            return
        if not self.four_bit and spec_of(op.input.type).dtype in INT4_TYPES:
            return
        args = [
            constant_value(value.owner, numpy_dtype(spec_of(value.type).dtype))  # type: ignore[arg-type]
            for value in op.operands
        ]
        _replace(rewriter, op, dense_constant(op.reference(*args), op.result_dtype()))


class DequantizeTransposedConstants(RewritePattern):
    """``transpose(dequantize(codes, scale, zero_point))`` of 2-D constant codes, scale and
    zero point (a quantized weight read transposed: ``MatMul(x, Transpose(DequantizeLinear(
    W)))``, how exporters write a Linear layer's ``x @ W.T``) -> the ``dequantize`` of the
    transposed constants along the other axis: the same values, made without a transpose
    between the weight and its matmul. Otherwise the dequantized weight stayed a value, so
    on cuda it was dequantized and then copied transposed each call, where the W4A16
    route reads the codes as they are."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect.ops import DequantizeOp, TransposeOp, spec_of
        from fusec.ir.dtypes import numpy_dtype

        if not isinstance(op, TransposeOp) or tuple(op.attr("perm")) != (1, 0):
            return
        dq = op.input.owner
        if not isinstance(dq, DequantizeOp) or len(list(dq.output.uses)) != 1:
            return
        if not all(is_constant(value.owner) for value in dq.operands):
            return
        constants = []
        for value in dq.operands:
            dtype = spec_of(value.type).dtype
            array = constant_value(value.owner, numpy_dtype(dtype))  # type: ignore[arg-type]
            constants.append(dense_constant(array.T if array.ndim == 2 else array, dtype))
        axis = 1 - int(dq.attr("axis")) % 2
        new = DequantizeOp(*(c.results[0] for c in constants), axis=axis,
                           block_size=dq.attr("block_size"))  # fmt: skip
        rewriter.insert(constants, InsertPoint.before(op))
        _replace(rewriter, op, new)


# ------------------------------------------------------------------ batch norm


def _constant(value: SSAValue) -> np.ndarray | None:
    """The value of ``value`` when a dense ``arith.constant`` defines it, else None."""
    owner = value.owner
    if is_constant(owner):
        try:
            return constant_value(owner)
        except FusecError:
            return None
    return None


def _single_use(op: Operation) -> bool:
    return len(op.results) == 1 and sum(1 for _ in op.results[0].uses) == 1


def _bn_coefficients(op: Operation) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) with batch_norm(x) = a * x + b per channel (float64), when every parameter
    is a constant."""
    import numpy as np

    from fusec.dialect.ops import BatchNormOp

    assert isinstance(op, BatchNormOp)
    params = [_constant(v) for v in (op.scale, op.bias, op.mean, op.var)]
    if any(p is None for p in params):
        return None
    scale, bias, mean, var = (np.asarray(p, dtype=np.float64) for p in params)
    a = scale / np.sqrt(var + op.attr("epsilon"))
    return a, bias - mean * a


class FoldBatchNormIntoConv(RewritePattern):
    """``batch_norm(conv2d(x, W) [+ bias_add b])`` with constant W, b and parameters,
    the conv (and bias) used only here, is ``bias_add(conv2d(x, a W), a b + shift)``:
    new constant weights and bias computed in float64, one kernel less."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        import numpy as np

        from fusec.dialect.ops import BatchNormOp, BiasAddOp, Conv2DOp, spec_of

        if not isinstance(op, BatchNormOp) or (coefficients := _bn_coefficients(op)) is None:
            return
        a, shift = coefficients
        producer = op.input.owner
        conv_bias = None
        if isinstance(producer, BiasAddOp) and _single_use(producer):
            if producer.attr("axis") % len(spec_of(producer.output.type).shape) != 1:
                return
            conv_bias = _constant(producer.bias)
            if conv_bias is None:
                return
            producer = producer.input.owner
        if not isinstance(producer, Conv2DOp) or not _single_use(producer):
            return
        weight = _constant(producer.weight)
        if weight is None:
            return
        dtype = spec_of(producer.weight.type).dtype
        new_weight = dense_constant(weight.astype(np.float64) * a.reshape(-1, 1, 1, 1), dtype)
        folded_bias = shift if conv_bias is None else conv_bias.astype(np.float64) * a + shift
        new_bias = dense_constant(folded_bias, dtype)
        conv = Conv2DOp(
            producer.input,
            new_weight.result,
            **{key: producer.attr(key) for key in producer.declared_properties()},
        )
        conv.location = producer.location
        biased = BiasAddOp(conv.output, new_bias.result, axis=1)
        biased.location = op.location
        rewriter.insert([new_weight, new_bias, conv], InsertPoint.before(op))
        rewriter.replace(op, biased)


def _as_column(value: SSAValue, column: tuple[int, ...], new: list[Operation]) -> SSAValue:
    """``value`` (C,) reshaped to ``column`` (C, 1, ...), appending the reshape to ``new``;
    ``value`` itself when that is its shape already (rank-2 input: no identity reshape,
    which a later canonicalisation would remove, so the pipeline would not be idempotent)."""
    from fusec.dialect import ops as ai

    if ai.spec_of(value.type).shape == column:
        return value
    reshape = ai.ReshapeOp(value, shape=column)
    new.append(reshape)
    return reshape.output


class DecomposeBatchNorm(RewritePattern):
    """Any other ``batch_norm``: a per-channel multiply and ``ai.bias_add``, which fuse
    as elementwise work (constant coefficients computed in float64; parameters known
    only at run time normalised by ``(x - mean) * (scale / sqrt(var + eps))``)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        import numpy as np

        from fusec.dialect import ops as ai

        if not isinstance(op, ai.BatchNormOp):
            return
        spec = ai.spec_of(op.output.type)
        column = (spec.shape[1],) + (1,) * (len(spec.shape) - 2)  # broadcasts along dim 1
        new: list[Operation] = []
        if (coefficients := _bn_coefficients(op)) is not None:
            a, shift = coefficients
            scale = dense_constant(a.reshape(column), spec.dtype)
            shifted = dense_constant(shift, spec.dtype)
            scaled = ai.MulOp(op.input, scale.result)
            new += [scale, shifted, scaled]
            result = ai.BiasAddOp(scaled.output, shifted.result, axis=1)
        else:
            eps = dense_constant(np.asarray(op.attr("epsilon")), spec.dtype)
            var = ai.AddOp(op.var, eps.result)
            root = ai.SqrtOp(var.output)
            inv = ai.DivOp(op.scale, root.output)
            new += [eps, var, root, inv]
            mean, factor = _as_column(op.mean, column, new), _as_column(inv.output, column, new)
            centred = ai.SubOp(op.input, mean)
            scaled = ai.MulOp(centred.output, factor)
            new += [centred, scaled]
            result = ai.BiasAddOp(scaled.output, op.bias, axis=1)
        for created in (*new, result):
            created.location = op.location
        rewriter.insert(new, InsertPoint.before(op))
        rewriter.replace(op, result)


def _last_axis_half(value: SSAValue, upper: bool) -> SSAValue | None:
    """``x`` when ``value`` is ``x[..., n/2:]`` (``upper``) or ``x[..., :n/2]``, the
    last axis of even size ``n`` cut in two and every other dim whole, else None."""
    op = value.owner
    if not isinstance(op, ai.SliceOp):
        return None
    shape = ai.spec_of(op.input.type).shape
    if not shape or shape[-1] % 2:
        return None
    half = shape[-1] // 2
    offsets, sizes, strides = op.attr("offsets"), op.attr("sizes"), op.attr("strides")
    whole = all(
        o == 0 and n == d and s == 1
        for o, n, s, d in zip(offsets[:-1], sizes[:-1], strides[:-1], shape[:-1], strict=True)
    )
    last = (offsets[-1], sizes[-1], strides[-1]) == ((half if upper else 0), half, 1)
    return op.input if whole and last else None


class RotateHalfOfConcat(RewritePattern):
    """``concat(neg(x[..., n/2:]), x[..., :n/2])`` along the last axis (RoPE's
    rotate-half, as both PyTorch exporters write it with Slice, or Split, Neg and Concat)
    is ``rotate_half(x)``: one op a pointwise kernel reads ``x`` through, not two slices
    and a concat copied out and a negation of its own (issue 28/30)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, ai.ConcatOp) or len(op.operands) != 2:
            return
        rank = len(ai.spec_of(op.results[0].type).shape)
        if rank == 0 or op.attr("axis") % rank != rank - 1:
            return
        neg = op.operands[0].owner
        if not isinstance(neg, ai.NegOp):
            return
        x = _last_axis_half(neg.operands[0], upper=True)
        if x is None or _last_axis_half(op.operands[1], upper=False) is not x:
            return
        _replace(rewriter, op, ai.RotateHalfOp(x))


# ------------------------------------------------------------------ registration

#: The op class of each pattern list (``ops.Canonicalized`` looks them up).
ai.CANONICAL_PATTERNS.update(
    {
        ai.AddOp: (AddOfRowIsBiasAdd(),),
        ai.BiasAddOp: (NonNegativeBiasAxis(),),
        ai.Conv2DOp: (SymmetricConvPadding(),),
        ai.CastOp: (FoldIdentityCast(), FoldExactCastRoundTrip()),
        ai.QuantizeOp: (FoldRequantize(),),
        ai.DequantizeOp: (FoldConstantDequantize(),),
        ai.ReluOp: (FoldReluOfRelu(),),
        ai.ConcatOp: (RotateHalfOfConcat(),),
        ai.TransposeOp: (
            DequantizeTransposedConstants(),
            FoldIdentityTranspose(),
            ComposeTransposes(),
            CollapseViewChain(),
        ),
        ai.ReshapeOp: (
            FoldIdentityReshape(),
            CollapseViewChain(),
        ),
        ai.BatchNormOp: (
            FoldBatchNormIntoConv(),
            DecomposeBatchNorm(),
        ),
    }
)
