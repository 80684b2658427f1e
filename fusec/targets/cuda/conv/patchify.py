"""``conv-patchify``: a patchify conv (stride = kernel) as a Tensor Core GEMM.

A conv whose stride equals its kernel, with no padding or dilation, cuts the image
into disjoint patches: its im2col is a permutation of the input, not a copy of it.
Vision transformers embed patches so (ViT's 16x16/16 conv on 3 channels), ConvNeXt
stems too (4x4/4). The implicit-GEMM conv cannot serve them (a strip's TMA box would
traverse more than 256 pixels along W past a stride of 4, and 3 input channels fill a
64-channel reduction chunk to 5%), so they ran on the direct CUDA-core kernel. This
pass, run before fusion in the cuda pipeline, rewrites such a conv

    x [N, C, H, W]  (*)  w [K, C, R, S],  stride (R, S)

into views and one matmul on the Tensor Cores::

    patches = reshape(transpose(reshape(x, [N, C, H/R, R, W/S, S]),
                                [0, 2, 4, 1, 3, 5]), [N*H/R*W/S, C*R*S])
    y = matmul(patches, reshape(w, [K, C*R*S]), transpose_b)      # [N*P*Q, K]
    out = transpose(reshape(y, [N, P, Q, K]), [0, 3, 1, 2])        # [N, K, P, Q]

A following per-channel ``ai.bias_add`` moves onto ``y`` (the GEMM's epilogue), and
a chain of views behind ``out`` that only restores ``y``'s row-major order (ViT's
flatten and transpose to ``[N, P*Q, K]``) collapses to one reshape
(``fusec.dialect.views.CollapseViewChain``, also a canonicalisation), so the patch
embedding is one copy kernel (the patches) and one GEMM. Only convs the implicit GEMM
does not serve are rewritten; the rewrite is exact (the same products, summed in another
order on the same f32 accumulators).
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
from fusec.dialect.ops import spec_of
from fusec.dialect.views import CollapseViewChain, at_function_level
from fusec.targets.cuda.conv.config import MAX_STRIDE_W, ConvGeometry
from fusec.targets.cuda.conv.template import MIN_GEMM_CHANNELS

#: The Tensor Core GEMM's element types.
DTYPES = ("f16", "bf16")


def patchify_of(conv: ai.Conv2DOp) -> ConvGeometry | None:
    """The geometry of ``conv`` (stride = kernel) when this pass rewrites it, else None."""
    x, w = spec_of(conv.input.type), spec_of(conv.weight.type)
    if x.dtype not in DTYPES or len(x.shape) != 4:
        return None
    (n, c, h, wd), (k, r, s) = x.shape, (w.shape[0], *w.shape[2:])
    attrs = conv.attr_values()
    if attrs["groups"] != 1 or tuple(attrs["dilations"]) != (1, 1):
        return None
    if tuple(attrs["strides"]) != (r, s) or any(attrs["padding"]):
        return None
    if h % r or wd % s or (r, s) == (1, 1):
        return None
    if s <= MAX_STRIDE_W and c >= MIN_GEMM_CHANNELS:
        return None  # the implicit GEMM serves it, with no copy of the input
    if (c * r * s) % 8:
        return None  # the GEMM's TMA rows must be 16-byte multiples
    return ConvGeometry(n, c, h, wd, k, r, s, stride_h=r, stride_w=s)


class PatchifyConvToMatmul(RewritePattern):
    """A patchify conv (and a per-channel bias after it) -> views and one matmul."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ai.Conv2DOp, rewriter: PatternRewriter) -> None:
        if not at_function_level(op):
            return
        sizes = patchify_of(op)
        if sizes is None:
            return
        p = sizes
        new: list[Operation] = [
            six := ai.ReshapeOp(op.input, shape=(p.n, p.c, p.p, p.r, p.q, p.s)),
            patches := ai.TransposeOp(six.output, perm=(0, 2, 4, 1, 3, 5)),
            rows := ai.ReshapeOp(patches.output, shape=(p.n * p.p * p.q, p.c * p.r * p.s)),
            weights := ai.ReshapeOp(op.weight, shape=(p.k, p.c * p.r * p.s)),
            product := ai.MatmulOp(rows.output, weights.output, transpose_b=True),
        ]
        y: SSAValue = product.output
        replaced: Operation = op
        bias = _only_bias_user(op)
        if bias is not None:
            biased = ai.BiasAddOp(y, bias.operands[1], axis=1)
            new.append(biased)
            y, replaced = biased.output, bias
        image = ai.ReshapeOp(y, shape=(p.n, p.p, p.q, p.k))
        out = ai.TransposeOp(image.output, perm=(0, 3, 1, 2))
        new += [image, out]
        for created in new:
            created.location = op.location
        rewriter.insert(new, InsertPoint.before(replaced))
        rewriter.replace(replaced, [], [out.output])
        if replaced is not op:
            rewriter.erase(op)


def _only_bias_user(conv: ai.Conv2DOp) -> Operation | None:
    """The ``ai.bias_add`` along the channels that is the conv's only use, if any."""
    uses = list(conv.output.uses)
    if len(uses) != 1:
        return None
    user = uses[0].operation
    if isinstance(user, ai.BiasAddOp) and user.attr("axis") == 1 and uses[0].index == 0:
        return user
    return None


@dataclass(frozen=True)
class ConvPatchifyPass(ModulePass):
    """Rewrite patchify convs the implicit GEMM cannot serve into one Tensor Core matmul."""

    name = "conv-patchify"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(PatchifyConvToMatmul()).rewrite_module(op)
        PatternRewriteWalker(GreedyRewritePatternApplier([CollapseViewChain()])).rewrite_module(op)
