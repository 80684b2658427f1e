"""Comparisons and logic (i1 results), and mod."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from xdsl.irdl import irdl_op_definition

from fusec.dialect import shapes
from fusec.dialect.facts import FrontendNames, ScalarBuilder
from fusec.dialect.ops.base import AiOp, bool_prop
from fusec.dialect.ops.elementwise import BinaryOp, UnaryOp
from fusec.ir.dtypes import ALL_TYPES, INT_TYPES, NUMERIC_TYPES

if TYPE_CHECKING:
    import numpy as np


class CompareOp(BinaryOp):
    """A comparison of two tensors of one element type (broadcast); the result is i1."""

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    SYMBOL: ClassVar[str] = "=="

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.compare(cls.name, *operands)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.compare(args[0], self.SYMBOL, args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        return _ufunc_reference(self, args)


def _ufunc_reference(op: AiOp, args: Sequence[np.ndarray]) -> np.ndarray:
    """The reference of a comparison or logic op: the numpy ufunc that traced tensors turn
    into the op (its one ``FRONTEND.ufuncs`` name) on the operands in their declared
    types (numpy is imported when one runs)."""
    import numpy as np

    (ufunc,) = op.FRONTEND.ufuncs
    return np.asarray(getattr(np, ufunc)(*op.typed(args)))


@irdl_op_definition
class EqualOp(CompareOp):
    """a == b, elementwise (i1; NaN equals nothing)."""

    name = "ai.equal"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    SYMBOL: ClassVar[str] = "=="
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("equal",), onnx=("Equal",))


@irdl_op_definition
class LessOp(CompareOp):
    """a < b, elementwise (i1)."""

    name = "ai.less"
    SYMBOL: ClassVar[str] = "<"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("less",), onnx=("Less",))


@irdl_op_definition
class GreaterOp(CompareOp):
    """a > b, elementwise (i1)."""

    name = "ai.greater"
    SYMBOL: ClassVar[str] = ">"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("greater",), onnx=("Greater",))


@irdl_op_definition
class LessEqualOp(CompareOp):
    """a <= b, elementwise (i1)."""

    name = "ai.less_equal"
    SYMBOL: ClassVar[str] = "<="
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("less_equal",), onnx=("LessOrEqual",))


@irdl_op_definition
class GreaterEqualOp(CompareOp):
    """a >= b, elementwise (i1)."""

    name = "ai.greater_equal"
    SYMBOL: ClassVar[str] = ">="
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        ufuncs=("greater_equal",), onnx=("GreaterOrEqual",)
    )


@irdl_op_definition
class NotOp(UnaryOp):
    """Logical not of an i1 tensor."""

    name = "ai.not"
    DTYPES: ClassVar[tuple[str, ...]] = ("i1",)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_not", ufuncs=("logical_not",), onnx=("Not",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.negate(args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        return _ufunc_reference(self, args)


class LogicalOp(BinaryOp):
    """A logical op on two i1 tensors (broadcast); its reference is numpy's ufunc."""

    DTYPES: ClassVar[tuple[str, ...]] = ("i1",)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        return _ufunc_reference(self, args)


@irdl_op_definition
class AndOp(LogicalOp):
    """Logical and of two i1 tensors (broadcast)."""

    name = "ai.and"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_and", ufuncs=("logical_and",), onnx=("And",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        a, b = args  # not (not a or not b): the builder's conditions are either/negate
        return s.negate(s.either(s.negate(a), s.negate(b)))


@irdl_op_definition
class OrOp(LogicalOp):
    """Logical or of two i1 tensors (broadcast)."""

    name = "ai.or"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_or", ufuncs=("logical_or",), onnx=("Or",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.either(args[0], args[1])


@irdl_op_definition
class XorOp(LogicalOp):
    """Logical exclusive or of two i1 tensors (broadcast)."""

    name = "ai.xor"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_xor", ufuncs=("logical_xor",), onnx=("Xor",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.compare(args[0], "!=", args[1])


@irdl_op_definition
class ModOp(BinaryOp):
    """Integer remainder (broadcast): with the sign of b (Python's ``%``, ONNX ``fmod=0``),
    or of a with ``fmod`` (C's ``%``); 0 where b is 0."""

    name = "ai.mod"
    fmod = bool_prop(False)
    DTYPES: ClassVar[tuple[str, ...]] = INT_TYPES

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.int_remainder(args[0], args[1], floored=not self.attr("fmod"))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.int_remainder(*self.typed(args), floored=not self.attr("fmod"))
