"""What the ``recognize-patterns`` rewrites match with: a value's shape, the number or
array a constant holds, operands of a defining op (both orders of a commutative one),
the factors of a product, new constants, and ``Recognition``, the rewrite pattern that
counts itself."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.constants import is_constant
from fusec.ir.dtypes import numpy_dtype

if TYPE_CHECKING:
    import numpy as np


def shape(value: SSAValue) -> tuple[int, ...]:
    return spec_of(value.type).shape


def constant(value: SSAValue, max_elements: int = 1 << 16) -> np.ndarray | None:
    """The value of a dense ``arith.constant`` (small ones only), else None."""
    op = value.owner
    if not is_constant(op):
        return None
    attr = op.value
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        return None
    spec = spec_of(value.type)
    if math.prod(spec.shape) > max_elements:
        return None
    import numpy as np

    data = np.frombuffer(attr.data.data, dtype=numpy_dtype(spec.dtype)).astype(np.float64)
    if data.size == 1:  # a splat, 0-d scalars included
        return np.full(spec.shape, data[0])
    return data.reshape(spec.shape)


def scalar(value: SSAValue) -> float | None:
    """The number a constant holds in every element (a splat), else None."""
    array = constant(value)
    if array is None or array.size == 0:
        return None
    import numpy as np

    first = float(array.reshape(-1)[0])
    return first if np.all(array == first) else None


def is_scalar(value: SSAValue, number: float, rtol: float = 1e-6) -> bool:
    """``value`` is a constant equal to ``number`` in every element (to float32 rounding),
    or to ``number`` rounded to its own element type: an f16 model holds GPT-2's GELU
    constant ``sqrt(2/pi)`` as 0.7978515625."""
    found = scalar(value)
    if found is None:
        return False
    if math.isclose(found, number, rel_tol=rtol, abs_tol=0.0):
        return True
    dtype = spec_of(value.type).dtype
    if dtype not in ("f16", "bf16"):
        return False
    import numpy as np

    held = float(np.asarray(number, dtype=np.float32).astype(numpy_dtype(dtype)))
    return found == held


def single_use(value: SSAValue) -> bool:
    return value.has_one_use()


def operands_of(value: SSAValue, op_type: type) -> Sequence[SSAValue] | None:
    """The operands of ``value``'s defining op when it is an ``op_type``."""
    owner = value.owner
    return owner.operands if isinstance(owner, Operation) and isinstance(owner, op_type) else None


def factors(value: SSAValue, root: bool = True) -> list[SSAValue]:
    """The multiplicands of a tree of ``ai.mul`` of one shape (inner products used once)."""
    op = value.owner
    if isinstance(op, ai.MulOp) and (root or single_use(value)):
        return [f for operand in op.operands for f in factors(operand, root=False)]
    return [value]


def split(values: Sequence[SSAValue], test: Callable[[SSAValue], bool]):
    """(the first value passing ``test``, the others), or (None, values)."""
    for index, value in enumerate(values):
        if test(value):
            return value, [*values[:index], *values[index + 1 :]]
    return None, list(values)


def commuted(value: SSAValue, op_type: type) -> list[tuple[SSAValue, SSAValue]]:
    """Both (a, b) orders of the operands of a commutative binary op defining ``value``."""
    pair = operands_of(value, op_type)
    if pair is None:
        return []
    return [(pair[0], pair[1]), (pair[1], pair[0])]


@dataclass
class Recognized:
    """Counts of rewrites by name (what ``fusec import`` reports); ``softcap``: whether
    soft-capped attention becomes ``ai.attention`` (``recognize-patterns{softcap=false}``
    leaves it as its ops, for a target that runs it better as its ops); ``softcap_heads``:
    the head sizes it does for (() for any)."""

    counts: Counter[str] = field(default_factory=Counter)
    softcap: bool = True
    softcap_heads: tuple[int, ...] = ()

    def takes_softcap(self, head: int) -> bool:
        """Whether a soft-capped attention of head size ``head`` becomes ``ai.attention``."""
        return self.softcap and (not self.softcap_heads or head in self.softcap_heads)


class Recognition(RewritePattern):
    """A rewrite that counts itself under ``label`` and locates new ops at the root."""

    label = ""

    def __init__(self, seen: Recognized) -> None:
        self.seen = seen

    def rewrite(
        self, rewriter: PatternRewriter, root: Operation, new_ops: Sequence[Operation], result
    ) -> None:
        for op in new_ops:
            op.location = root.location
        rewriter.replace(root, list(new_ops), [result])
        self.seen.counts[self.label] += 1


# ------------------------------------------------------------------ row-wise GEMMs

#: Layout ops the attention kernels read q, k and v through (the cuda flash kernel's
#: strides, the cpu kernel's views): a head split, a fused projection's slices, a GQA repeat.
ATTENTION_VIEWS = (ai.ReshapeOp, ai.TransposeOp, ai.SliceOp, ai.ExpandOp, ai.GatherOp)


@dataclass
class RowwiseGemm:
    """``matmul(x, W)`` with a 2-D ``W`` (no ``transpose_a``), then optionally a bias along
    the last axis: ``last`` is the op whose result leaves the pair."""

    matmul: ai.MatmulOp
    bias: ai.BiasAddOp | None

    @property
    def last(self) -> Operation:
        return self.bias if self.bias is not None else self.matmul

    def rebuilt(self, x: SSAValue) -> list[Operation]:
        """The same GEMM (and bias) on rows ``x``."""
        product = ai.MatmulOp(
            x, self.matmul.operands[1], transpose_b=bool(self.matmul.attr("transpose_b"))
        )
        ops: list[Operation] = [product]
        if self.bias is not None:
            axis = self.bias.attr("axis")
            ops.append(ai.BiasAddOp(product.output, self.bias.operands[1], axis=axis))
        return ops


def rowwise_gemm(matmul: Operation | None) -> RowwiseGemm | None:
    """``matmul`` as a row-wise GEMM whose only user may be its bias, or None."""
    if not isinstance(matmul, ai.MatmulOp) or matmul.attr("transpose_a"):
        return None
    lhs, rhs = (spec_of(v.type).shape for v in matmul.operands[:2])
    if len(rhs) != 2 or len(lhs) < 2:
        return None
    user = matmul.output.get_user_of_unique_use()
    rank = len(lhs)
    if (
        isinstance(user, ai.BiasAddOp)
        and user.operands[0] is matmul.output
        and user.attr("axis") % rank == rank - 1
    ):
        return RowwiseGemm(matmul, user)
    return RowwiseGemm(matmul, None)
