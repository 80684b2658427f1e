"""Elementwise ops: ``BinaryOp`` and ``UnaryOp``, arithmetic, the common activations
(relu, sigmoid, tanh, silu, gelu...), clip and pow."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from xdsl.irdl import irdl_op_definition, traits_def
from xdsl.traits import Pure

from fusec.dialect import shapes
from fusec.dialect.facts import FrontendNames, Pattern, ScalarBuilder
from fusec.dialect.ops.base import (
    AiOp,
    Canonicalized,
    OneInputOp,
    choice_prop,
    float_prop,
    operand,
    result,
)
from fusec.ir.dtypes import NUMERIC_TYPES, is_float
from fusec.ir.tensors import spec_of

if TYPE_CHECKING:
    import numpy as np


class BinaryOp(AiOp):
    """Elementwise binary op with numpy broadcasting."""

    lhs = operand()
    rhs = operand()
    output = result()

    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.elementwise_binary(cls.name, *operands)

    def fusion_pattern(self) -> Pattern:
        """Elementwise when both operands have one shape, else broadcast."""
        if (
            self.lhs.type == self.rhs.type
            or spec_of(self.lhs.type).shape == spec_of(self.rhs.type).shape
        ):
            return Pattern.ELEMENTWISE
        return Pattern.BROADCAST


class ArithmeticOp(BinaryOp):
    """``a SYMBOL b`` elementwise (numpy broadcasting), of integers as of floats."""

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    SYMBOL: ClassVar[str] = "+"

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(args[0], self.SYMBOL, args[1])


@irdl_op_definition
class AddOp(ArithmeticOp):
    """Elementwise a + b (numpy broadcasting)."""

    name = "ai.add"
    traits = traits_def(Pure(), Canonicalized())
    SYMBOL: ClassVar[str] = "+"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("add",), onnx=("Add",))


@irdl_op_definition
class SubOp(ArithmeticOp):
    """Elementwise a - b (numpy broadcasting)."""

    name = "ai.sub"
    SYMBOL: ClassVar[str] = "-"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("subtract",), onnx=("Sub",))


@irdl_op_definition
class MulOp(ArithmeticOp):
    """Elementwise a * b (numpy broadcasting)."""

    name = "ai.mul"
    SYMBOL: ClassVar[str] = "*"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("multiply",), onnx=("Mul",))


@irdl_op_definition
class DivOp(ArithmeticOp):
    """Elementwise a / b (numpy broadcasting); integers divide truncating toward zero (as
    C and ONNX), and an integer division by zero gives 0."""

    name = "ai.div"
    SYMBOL: ClassVar[str] = "/"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        ufuncs=("divide", "true_divide"), onnx=("Div",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        if not is_float(self.result_dtype()):
            return s.int_divide(args[0], args[1])
        return super().scalar(s, *args)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        if not is_float(self.result_dtype()):
            return K.int_divide(*self.typed(args))
        return K.div(*args)


class ExtremumOp(BinaryOp):
    """The greater (``SYMBOL`` ">") or the lesser ("<") of a and b, elementwise, as numpy's
    maximum and minimum: NaN propagates from either side, and a tie (-0.0 vs 0.0) gives
    the second operand."""

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    SYMBOL: ClassVar[str] = ">"

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        a, b = args  # a select, as the languages' min/max builtins differ on NaN and -0.0
        return nan_or_where(s, a, self.SYMBOL, b, otherwise=b)


def nan_or_where(s: ScalarBuilder, a: str, symbol: str, b: str, otherwise: str) -> str:
    """``a`` where ``a SYMBOL b`` holds or ``a`` is NaN, else ``otherwise``: the select of
    maximum, minimum, relu and thresholded relu, through which NaN propagates."""
    return s.select(s.either(s.compare(a, symbol, b), s.compare(a, "!=", a)), a, otherwise)


@irdl_op_definition
class MaximumOp(ExtremumOp):
    """Elementwise max(a, b) (numpy broadcasting); NaN propagates."""

    name = "ai.maximum"
    SYMBOL: ClassVar[str] = ">"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("maximum",))


@irdl_op_definition
class MinimumOp(ExtremumOp):
    """Elementwise min(a, b) (numpy broadcasting); NaN propagates."""

    name = "ai.minimum"
    SYMBOL: ClassVar[str] = "<"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("minimum",))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.asarray(np.minimum(*args))


class UnaryOp(OneInputOp):
    """Elementwise unary op: result type equals operand type."""

    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.elementwise_unary(*operands)


class MathCallOp(UnaryOp):
    """One call of C's math library, ``FUNCTION``, on the element, which every language
    computes in float32 (``math.FUNCTION``, ``FUNCTIONf``, ``torch.FUNCTION``)."""

    #: The function, where it is not named as the op (``ai.tanh``: ``tanh``).
    FUNCTION: ClassVar[str] = ""

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call(self.FUNCTION or self.short_name(), args[0])


@irdl_op_definition
class ReluOp(UnaryOp):
    """max(x, 0); NaN propagates."""

    name = "ai.relu"
    traits = traits_def(Pure(), Canonicalized())
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("Relu",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        # maximum(a, 0): relu(NaN) is NaN, relu(-0.0) is 0.0, as numpy
        zero = s.literal(0.0)
        return nan_or_where(s, args[0], ">", zero, otherwise=zero)


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """1 / (1 + exp(-x))."""

    name = "ai.sigmoid"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("Sigmoid",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.logistic(s.literal(1.0), args[0])


@irdl_op_definition
class TanhOp(MathCallOp):
    """tanh(x)."""

    name = "ai.tanh"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("tanh",), onnx=("Tanh",))


@irdl_op_definition
class ExpOp(UnaryOp):
    """exp(x)."""

    name = "ai.exp"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("exp",), onnx=("Exp",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.exp(args[0])


@irdl_op_definition
class SqrtOp(MathCallOp):
    """sqrt(x) (NaN for x < 0): needed to normalise by a variance known only at run time."""

    name = "ai.sqrt"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("sqrt",), onnx=("Sqrt",))


@irdl_op_definition
class NegOp(UnaryOp):
    """-x."""

    name = "ai.neg"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("negative",), onnx=("Neg",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.neg(args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.negative(args[0])


@irdl_op_definition
class AbsOp(MathCallOp):
    """|x| (NaN stays NaN)."""

    name = "ai.abs"
    FUNCTION: ClassVar[str] = "fabs"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("absolute",), onnx=("Abs",))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.abs(args[0])


@irdl_op_definition
class SiluOp(UnaryOp):
    """x * sigmoid(x)."""

    name = "ai.silu"

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return _minus_zero_at_minus_inf(s, a, s.logistic(a, a))


def _minus_zero_at_minus_inf(s: ScalarBuilder, x: str, value: str) -> str:
    """``x * f(x)`` activations tend to -0 as x -> -inf, where the formula gives
    -inf * 0 = NaN: the limit, as the reference computes it."""
    return s.select(s.compare(x, "==", s.literal(-math.inf)), s.literal(-0.0), value)


def gated(s: ScalarBuilder, x: str, gate: str) -> str:
    """``x * gate`` (the gate bound first, a function of x tending to 0 as x -> -inf),
    -0 at x = -inf: hard swish and mish."""
    return _minus_zero_at_minus_inf(s, x, s.arith(x, "*", s.bind(gate)))


_SQRT1_2 = 0.7071067811865476


_GELU_TANH_2C = 2.0 * math.sqrt(2.0 / math.pi)  # 2 * sqrt(2/pi): the x*sigmoid(2u) form


@irdl_op_definition
class GeluOp(UnaryOp):
    """GELU: exact (erf) by default, or the tanh approximation."""

    name = "ai.gelu"
    approximate = choice_prop("none", "none", "tanh")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        if self.attr("approximate") == "tanh":
            # 0.5*x*(1 + tanh(u)) == x * sigmoid(2u): exact, and no cancellation
            cube = s.arith(s.arith(s.arith(s.literal(0.044715), "*", a), "*", a), "*", a)
            u2 = s.arith(s.literal(_GELU_TANH_2C), "*", s.arith(a, "+", cube))
            value = s.logistic(a, u2)
        else:
            # 0.5*x*(1 + erf(x/sqrt2)) == 0.5*x*erfc(-x/sqrt2): no cancellation for x < 0
            erfc = s.call("erfc", s.arith(s.neg(a), "*", s.literal(_SQRT1_2)))
            value = s.arith(s.arith(s.literal(0.5), "*", a), "*", erfc)
        return _minus_zero_at_minus_inf(s, a, value)


@irdl_op_definition
class ErfOp(MathCallOp):
    """The error function erf(x)."""

    name = "ai.erf"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("Erf",))


@irdl_op_definition
class IsNanOp(UnaryOp):
    """1 where x is NaN, else 0, in x's element type: a condition for ``ai.where``
    (the dialect's tensors are float; a boolean is 0 or 1)."""

    name = "ai.isnan"

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return s.select(s.compare(a, "!=", a), s.literal(1.0), s.literal(0.0))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        x = np.asarray(args[0])
        return np.isnan(x).astype(x.dtype)


@irdl_op_definition
class ClipOp(UnaryOp):
    """``x`` clipped to [min, max], constant bounds (default: none), as ``numpy.clip``:
    a value within the bounds is kept as it is (``clip(-0.0, 0, 6)`` is -0.0, unlike
    ``maximum(-0.0, 0.0)``), NaN propagates."""

    name = "ai.clip"
    min = float_prop(-math.inf)
    max = float_prop(math.inf)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        value = a
        if self.attr("max") != math.inf:
            high = s.literal(self.attr("max"))
            value = s.select(s.compare(value, ">", high), high, value)
            if self.attr("min") != -math.inf:
                value = s.bind(value)  # two selects in sequence, not nested
        if self.attr("min") != -math.inf:
            low = s.literal(self.attr("min"))
            value = s.select(s.compare(a, "<", low), low, value)
        return value

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        x = np.asarray(args[0])
        low, high = (x.dtype.type(self.attr(k)) for k in ("min", "max"))
        return np.clip(x, low, high).astype(x.dtype)


@irdl_op_definition
class PowOp(BinaryOp):
    """Elementwise a ** b (numpy broadcasting; C's powf: NaN for a negative base and a
    non-integer exponent)."""

    name = "ai.pow"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(ufuncs=("power",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call("pow", *args)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        with np.errstate(all="ignore"):
            return np.asarray(np.power(*args))
