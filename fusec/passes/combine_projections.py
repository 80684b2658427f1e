"""``combine-projections``: the q, k and v projections of one input become one GEMM whose
column slices the attention reads (issues 28, 30).

Hugging Face's BERT and Llama project q, k and v with three ``nn.Linear`` layers of the same
input; GPT-2 (``Conv1D``) and ``nn.MultiheadAttention`` (ViT) already project with one
weight ``[E, 3E]`` and split its result. At batch 1 the three GEMMs are three launches of a
few dozen tiles each (BERT-base: 128 x 768 -> 768, 24 tiles of 64x64 for 132 SMs), each
paying a pipeline fill and its epilogue; one GEMM over the concatenated weights
``[W_q | W_k | W_v]`` (and biases) runs three times the tiles in one launch. The three
results become ``ai.slice``s of its columns, which the attention kernels read in place, as
they read GPT-2's split (the cuda flash kernel through its tensor maps' strides, the cpu
kernel through views): no copy. This is TVM's ``CombineParallelDense`` for the one case
that needs no new kernel; it runs in every pipeline, before fusion.

The rewrite takes a set of row-wise GEMMs (``matmul(x, W)`` with a constant 2-D ``W``, each
optionally followed by a bias along the last axis that is a constant too) that read the
same ``x``, agree in ``transpose_b``, element types and bias, and whose results reach only
q, k or v operands of attentions through layout ops (with ``rope``, also through the
elementwise ops of rotary position embeddings, ``q * cos + rotate_half(q) * sin``: the
slices feeding them are then copy kernels, which cost less at batch 1 than the GEMM
launches they save). It is exact: every output column is the same dot product as before.

With ``rope``, the q and k RoPE chains themselves become one (``_join_head_chains``): two
column slices of the combined result side by side, each split into heads of one size and
read by the same elementwise ops with the same other operands (cos and sin, broadcast over
the heads), are one slice over both, split into q's and k's heads together, one chain of
those ops, and two slices of its result along the heads (which the attention reads in
place): one RoPE kernel a layer instead of two. Exact too: every element is computed by
the same ops from the same values.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from fusec.codegen.expr import broadcast_shapes
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.dialect.views import feeds_attention
from fusec.ir.constants import constant_value, dense_constant, is_constant
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.tensors import TensorSpec, tensor_type
from fusec.passes.matching import ATTENTION_VIEWS, RowwiseGemm, rowwise_gemm

if TYPE_CHECKING:  # a plain compile does not import xDSL's arith (no constants, no import)
    from xdsl.dialects import arith


@dataclass(frozen=True)
class _Projection:
    """A row-wise GEMM whose weight (and bias) are constants, and its key: the GEMMs of one
    key can share a launch."""

    gemm: RowwiseGemm
    weight: arith.ConstantOp
    bias: arith.ConstantOp | None

    @property
    def key(self) -> tuple:
        m = self.gemm.matmul
        types = tuple(spec_of(v.type).dtype for v in (*m.operands, m.output))
        bias = None if self.bias is None else spec_of(self.bias.results[0].type).dtype
        k = spec_of(m.operands[1].type).shape[1 if m.attr("transpose_b") else 0]
        return (m.operands[0], bool(m.attr("transpose_b")), types, bias, k)

    @property
    def width(self) -> int:
        """N: the GEMM's output columns."""
        return spec_of(self.gemm.last.results[0].type).shape[-1]


def _dense(value: SSAValue) -> arith.ConstantOp | None:
    op = value.owner
    if is_constant(op) and isinstance(op.value, DenseIntOrFPElementsAttr):
        return op
    return None


#: The views without the GQA head repeat (``ai.expand``), which the cpu attention kernel
#: does not read in place: there a slice before the repeat is a copy.
_NO_REPEAT = tuple(v for v in ATTENTION_VIEWS if v is not ai.ExpandOp)
#: The ops of RoPE as exporters write it (``q * cos + rotate_half(q) * sin``, the rotate-half
#: also as its slice/neg/concat spelling before canonicalisation), and the casts around it.
ROPE_OPS = (ai.MulOp, ai.AddOp, ai.SubOp, ai.NegOp, ai.RotateHalfOp, ai.CastOp)


def _projection(matmul: ai.MatmulOp, repeated_heads: bool, rope: bool) -> _Projection | None:
    gemm = rowwise_gemm(matmul)
    if gemm is None or not isinstance(matmul.parent_op(), func.FuncOp):
        return None
    weight = _dense(matmul.operands[1])
    bias = None if gemm.bias is None else _dense(gemm.bias.operands[1])
    if weight is None or (gemm.bias is not None and bias is None):
        return None
    through = (ATTENTION_VIEWS if repeated_heads else _NO_REPEAT) + (ROPE_OPS if rope else ())
    if not feeds_attention(gemm.last.results[0], lambda user: isinstance(user, through)):
        return None
    return _Projection(gemm, weight, bias)


def _concatenated(ops: list[arith.ConstantOp], axis: int) -> arith.ConstantOp:
    """One constant of ``ops``'s values joined along ``axis``, in their own element type."""
    import numpy as np

    dtype = spec_of(ops[0].results[0].type).dtype
    values = [constant_value(op, numpy_dtype(dtype)) for op in ops]
    return dense_constant(np.concatenate(values, axis=axis), dtype)


def _combine(projections: list[_Projection]) -> list[ai.SliceOp]:
    """One GEMM (and bias) for ``projections``, their results its column slices (returned,
    in the projections' order)."""
    first = projections[0].gemm.matmul
    transpose_b = bool(first.attr("transpose_b"))
    weight = _concatenated([p.weight for p in projections], 0 if transpose_b else 1)
    new: list[Operation] = [weight]
    product = ai.MatmulOp(first.operands[0], weight.results[0], transpose_b=transpose_b)
    new.append(product)
    last: Operation = product
    if projections[0].bias is not None:
        biases = _concatenated([p.bias for p in projections if p.bias is not None], 0)
        rank = len(spec_of(product.output.type).shape)
        last = ai.BiasAddOp(product.output, biases.results[0], axis=rank - 1)
        new += [biases, last]
    offset, pieces = 0, []
    for p in projections:  # every reader of a projection comes after ``first``
        shape = spec_of(p.gemm.last.results[0].type).shape
        piece = ai.SliceOp(
            last.results[0],
            offsets=(*(0,) * (len(shape) - 1), offset),
            sizes=tuple(shape),
            strides=(1,) * len(shape),
        )
        new.append(piece)
        pieces.append(piece)
        p.gemm.last.results[0].replace_all_uses_with(piece.output)
        offset += p.width
    for op in new:
        op.location = first.location
    Rewriter.insert_op(new, InsertPoint.before(first))
    for p in projections:
        dead: tuple[Operation | None, ...] = (p.gemm.bias, p.gemm.matmul, p.bias, p.weight)
        for old in dead:
            if old is not None and old.parent is not None and not any(r.uses for r in old.results):
                Rewriter.erase_op(old)
    return pieces


@dataclass(frozen=True)
class _HeadChain:
    """A column slice split into heads (``split``: ``[..., N] -> [..., H, D]``) and the
    elementwise ops that read it (``ops``, block order), whose one value read elsewhere is
    the last op's."""

    split: ai.ReshapeOp
    ops: list[Operation]

    @property
    def heads(self) -> int:
        return spec_of(self.split.output.type).shape[-2]


def _head_chain(piece: ai.SliceOp) -> _HeadChain | None:
    """``piece``'s head split and the ``ROPE_OPS`` that read it, or None where it has no
    such chain (one reshape splitting the last dim, ops whose only value read elsewhere is
    the last one's, other operands broadcast over the heads)."""
    users = [use.operation for use in piece.output.uses]
    if len(users) != 1 or not isinstance(users[0], ai.ReshapeOp):
        return None
    split = users[0]
    shape, sliced = spec_of(split.output.type).shape, spec_of(piece.output.type).shape
    if len(shape) != len(sliced) + 1 or shape[:-2] != sliced[:-1]:
        return None
    inside: set[SSAValue] = {split.output}
    ops: list[Operation] = []
    block = split.parent_block()
    assert block is not None
    for op in block.ops:
        if not any(v in inside for v in op.operands):
            continue
        if not isinstance(op, ROPE_OPS) or spec_of(op.results[0].type).shape != shape:
            break  # a reader that is not one of the chain's ops: the chain ends before it
        for v in op.operands:  # other operands: size 1 along the heads (cos, sin)
            rank = len(spec_of(v.type).shape)
            if v not in inside and rank >= 2 and spec_of(v.type).shape[-2] != 1:
                return None
        ops.append(op)
        inside.add(op.results[0])
    if not ops:
        return None
    leaving = {o for o in ops for use in o.results[0].uses if use.operation not in ops}
    if leaving != {ops[-1]} or any(use.operation not in ops for use in split.output.uses):
        return None
    return _HeadChain(split, ops)


def _same_chain(a: _HeadChain, b: _HeadChain) -> bool:
    """Whether ``b`` applies ``a``'s ops to heads of the same size, with the same other
    operands."""
    shape_a, shape_b = (spec_of(c.split.output.type).shape for c in (a, b))
    if shape_a[-1] != shape_b[-1] or shape_a[:-2] != shape_b[:-2] or len(a.ops) != len(b.ops):
        return False
    mapped: dict[SSAValue, SSAValue] = {a.split.output: b.split.output}
    for x, y in zip(a.ops, b.ops, strict=True):
        if type(x) is not type(y) or x.properties != y.properties:
            return False
        if spec_of(x.results[0].type).dtype != spec_of(y.results[0].type).dtype:
            return False
        for u, v in zip(x.operands, y.operands, strict=True):
            if mapped.get(u, u) is not v:
                return False
        mapped[x.results[0]] = y.results[0]
    return True


def _join_head_chains(q: ai.SliceOp, k: ai.SliceOp) -> bool:
    """One slice, head split and chain for the side-by-side column slices ``q`` and ``k``
    where their head chains are the same ops (module notes); False where they are not."""
    qc, kc = _head_chain(q), _head_chain(k)
    if qc is None or kc is None or not _same_chain(qc, kc):
        return False
    q_width = spec_of(q.output.type).shape[-1]
    if tuple(k.attr("offsets"))[-1] != tuple(q.attr("offsets"))[-1] + q_width:
        return False
    # the joint chain goes before the first reader of either result, after its operands
    block = q.parent_block()
    assert block is not None
    position = {op: i for i, op in enumerate(block.ops)}
    readers = [use.operation for c in (qc, kc) for use in c.ops[-1].results[0].uses]
    before = min(readers, key=lambda op: position.get(op, len(position)))
    if before not in position:  # (every operand of the chains comes before their ends)
        return False
    sizes = tuple(q.attr("sizes"))
    width = q_width + spec_of(k.output.type).shape[-1]
    joint = ai.SliceOp(
        q.operands[0],
        offsets=tuple(q.attr("offsets")),
        sizes=(*sizes[:-1], width),
        strides=tuple(q.attr("strides")),
    )
    head_shape = spec_of(qc.split.output.type).shape
    heads = qc.heads + kc.heads
    split = ai.ReshapeOp(joint.output, shape=(*head_shape[:-2], heads, head_shape[-1]))
    new: list[Operation] = [joint, split]
    mapped: dict[SSAValue, SSAValue] = {qc.split.output: split.output}
    for op in qc.ops:
        operands = [mapped.get(v, v) for v in op.operands]
        shape = broadcast_shapes(*(spec_of(v.type).shape for v in operands))
        dtype = spec_of(op.results[0].type).dtype
        clone = type(op).create(
            operands=operands,
            result_types=[tensor_type(TensorSpec(tuple(shape), dtype))],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        new.append(clone)
        mapped[op.results[0]] = clone.results[0]
    end = new[-1].results[0]
    rank = len(head_shape)
    for chain, first in ((qc, 0), (kc, qc.heads)):
        part = ai.SliceOp(
            end,
            offsets=(*(0,) * (rank - 2), first, 0),
            sizes=(*head_shape[:-2], chain.heads, head_shape[-1]),
            strides=(1,) * rank,
        )
        new.append(part)
        chain.ops[-1].results[0].replace_all_uses_with(part.output)
    for op in new:
        op.location = q.location
    Rewriter.insert_op(new, InsertPoint.before(before))
    for chain, piece in ((qc, q), (kc, k)):
        for op in reversed([piece, chain.split, *chain.ops]):
            Rewriter.erase_op(op)
    return True


@dataclass(frozen=True)
class CombineProjectionsPass(ModulePass):
    """One GEMM for the attention projections (q, k, v) of one input."""

    name = "combine-projections"

    repeated_heads: bool = False
    """Also combine projections that reach the attention through a GQA head repeat
    (``ai.expand``): the cuda flash kernel reads the repeat in place (``fusec-cuda``)."""

    rope: bool = False
    """Also combine projections that reach the attention through RoPE (``ROPE_OPS``): their
    slices become copies before the RoPE kernels."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for function in op.walk():
            if not isinstance(function, func.FuncOp):
                continue
            groups: dict[tuple, list[_Projection]] = defaultdict(list)
            for matmul in list(function.walk()):
                if isinstance(matmul, ai.MatmulOp):
                    projection = _projection(matmul, self.repeated_heads, self.rope)
                    if projection is not None:
                        groups[projection.key].append(projection)
            for projections in groups.values():
                if len(projections) >= 2:
                    pieces = _combine(projections)
                    if self.rope:  # q and k side by side: their RoPE chains as one
                        for a, b in zip(pieces, pieces[1:], strict=False):
                            if _join_head_chains(a, b):
                                break
