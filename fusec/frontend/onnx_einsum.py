"""ONNX ``Einsum`` as ai ops: transposes, reshapes, sums and one batched ``ai.matmul``
per pair of operands.

For one operand, the letters missing from the output are summed (``ai.reduce_sum``) and
the rest transposed into the output's order. For two, each letter is a batch letter (in
both operands and the output), a contracted one (in both, not the output), or kept or
summed on one side only; the sides' own sums come first, then each side is transposed
and reshaped to ``[batch, rows, contracted]`` / ``[batch, contracted, cols]``, multiplied,
and the product reshaped and transposed into the output's order. More operands are
contracted left to right, keeping the letters a later operand or the output needs.
Without ``->`` the output is the letters that appear once, in alphabetical order.

Refused with the reason: an ellipsis (``...``), a letter repeated within one operand (a
diagonal), a letter whose sizes differ between operands (broadcasting).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _reshape_to, converter
from fusec.ir.tensors import shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node


@converter("Einsum", attrs=("equation",))
def _einsum(imp: Importer, node: Node) -> list[SSAValue]:
    operands = [imp.value(n) for n in node.proto.input if n]
    terms, output = _parse(imp, str(node.attrs.get("equation", "")), len(operands))
    sizes: dict[str, int] = {}
    for term, value in zip(terms, operands, strict=True):
        _record_sizes(imp, term, shape_of(value), sizes)
    term, value = terms[0], operands[0]
    for k in range(1, len(operands)):
        later = set(output).union(*terms[k + 1 :])
        term, value = _contract(imp, (term, value), (terms[k], operands[k]), later, sizes)
    return [_finish(imp, term, value, output)]


def _parse(imp: Importer, equation: str, count: int) -> tuple[list[str], str]:
    text = equation.replace(" ", "")
    if "." in text:
        raise imp.error(f"equation '{equation}': an ellipsis is not supported", "attribute")
    left, arrow, right = text.partition("->")
    terms = left.split(",")
    if len(terms) != count or not re.fullmatch(r"[A-Za-z,]*", left + right):
        raise imp.error(f"equation '{equation}' does not describe {count} operands")
    for term in terms:
        if len(set(term)) != len(term):
            raise imp.error(f"equation '{equation}': a repeated letter (a diagonal)", "attribute")
    if not arrow:
        letters = "".join(terms)
        right = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(set(right)) != len(right) or not set(right) <= set("".join(terms)):
        raise imp.error(f"equation '{equation}' has an output letter no operand has")
    return terms, right


def _record_sizes(imp: Importer, term: str, shape: tuple[int, ...], sizes: dict[str, int]) -> None:
    if len(term) != len(shape):
        raise imp.error(
            f"the term '{term}' has {len(term)} letters for a rank-{len(shape)} operand"
        )
    for letter, size in zip(term, shape, strict=True):
        if sizes.setdefault(letter, size) != size:
            raise imp.error(
                f"letter '{letter}' has sizes {sizes[letter]} and {size} (broadcasting is "
                "not supported)",
                "attribute",
            )


def _sum_out(imp: Importer, term: str, value: SSAValue, keep: set[str]) -> tuple[str, SSAValue]:
    """``value`` summed over its letters not in ``keep``."""
    axes = [i for i, c in enumerate(term) if c not in keep]
    if not axes:
        return term, value
    summed = imp.emit(ai.ReduceSumOp, value, axes=axes, keepdims=False)
    return "".join(c for c in term if c in keep), summed


def _arranged(imp: Importer, term: str, value: SSAValue, order: str) -> SSAValue:
    """``value`` (letters ``term``) transposed into the letter order ``order``."""
    perm = [term.index(c) for c in order]
    if perm == list(range(len(perm))):
        return value
    return imp.emit(ai.TransposeOp, value, perm=perm)


def _contract(
    imp: Importer,
    lhs: tuple[str, SSAValue],
    rhs: tuple[str, SSAValue],
    later: set[str],
    sizes: dict[str, int],
) -> tuple[str, SSAValue]:
    """The product of two operands, keeping the letters in ``later``."""
    (a, x), (b, y) = lhs, rhs
    a, x = _sum_out(imp, a, x, later | set(b))
    b, y = _sum_out(imp, b, y, later | set(a))
    batch = "".join(c for c in a if c in b and c in later)
    inner = "".join(c for c in a if c in b and c not in later)
    rows = "".join(c for c in a if c not in b)
    cols = "".join(c for c in b if c not in a)

    def size(letters: str) -> int:
        return math.prod(sizes[c] for c in letters)

    left = _reshape_to(
        imp, _arranged(imp, a, x, batch + rows + inner), (size(batch), size(rows), size(inner))
    )
    right = _reshape_to(
        imp, _arranged(imp, b, y, batch + inner + cols), (size(batch), size(inner), size(cols))
    )
    product = imp.emit(ai.MatmulOp, left, right)
    term = batch + rows + cols
    return term, _reshape_to(imp, product, tuple(sizes[c] for c in term))


def _finish(imp: Importer, term: str, value: SSAValue, output: str) -> SSAValue:
    term, value = _sum_out(imp, term, value, set(output))
    return _arranged(imp, term, value, output)
