"""More activations and unary maths (log, trigonometry, rounding, hard and leaky
activations, elu family, softplus...) and ``where``."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from xdsl.irdl import irdl_op_definition

from fusec.dialect import shapes
from fusec.dialect.facts import FrontendNames, Pattern, ScalarBuilder
from fusec.dialect.ops.base import AiOp, float_prop, operand, result
from fusec.dialect.ops.elementwise import BinaryOp, MathCallOp, UnaryOp, gated, nan_or_where
from fusec.ir.dtypes import ALL_TYPES
from fusec.ir.tensors import spec_of

if TYPE_CHECKING:
    import numpy as np


class MathOp(MathCallOp):
    """A function of C's math library, ``FUNCTION``, computed in float32 by every
    language (``math.FUNCTION``, ``FUNCTIONf``, ``torch.FUNCTION``); its reference is
    the numpy ufunc its ``FRONTEND`` names (the one traced tensors turn into the op, as
    for the comparisons): NaN or inf outside the domain, as C gives."""

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        from fusec.dialect import numpy_ops as K

        (ufunc,) = self.FRONTEND.ufuncs
        return K.unary_math(args[0], getattr(np, ufunc))


def _math_names(ufunc: str, onnx: str) -> FrontendNames:
    return FrontendNames(ufuncs=(ufunc,), onnx=(onnx,))


@irdl_op_definition
class LogOp(MathOp):
    """The natural logarithm (-inf at 0, NaN below)."""

    name = "ai.log"
    FRONTEND: ClassVar[FrontendNames] = _math_names("log", "Log")


@irdl_op_definition
class SinOp(MathOp):
    """sin(x)."""

    name = "ai.sin"
    FRONTEND: ClassVar[FrontendNames] = _math_names("sin", "Sin")


@irdl_op_definition
class CosOp(MathOp):
    """cos(x)."""

    name = "ai.cos"
    FRONTEND: ClassVar[FrontendNames] = _math_names("cos", "Cos")


@irdl_op_definition
class TanOp(MathOp):
    """tan(x)."""

    name = "ai.tan"
    FRONTEND: ClassVar[FrontendNames] = _math_names("tan", "Tan")


@irdl_op_definition
class AsinOp(MathOp):
    """arcsin(x) (NaN outside [-1, 1])."""

    name = "ai.asin"
    FRONTEND: ClassVar[FrontendNames] = _math_names("arcsin", "Asin")


@irdl_op_definition
class AcosOp(MathOp):
    """arccos(x) (NaN outside [-1, 1])."""

    name = "ai.acos"
    FRONTEND: ClassVar[FrontendNames] = _math_names("arccos", "Acos")


@irdl_op_definition
class AtanOp(MathOp):
    """arctan(x)."""

    name = "ai.atan"
    FRONTEND: ClassVar[FrontendNames] = _math_names("arctan", "Atan")


@irdl_op_definition
class SinhOp(MathOp):
    """sinh(x)."""

    name = "ai.sinh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("sinh", "Sinh")


@irdl_op_definition
class CoshOp(MathOp):
    """cosh(x)."""

    name = "ai.cosh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("cosh", "Cosh")


@irdl_op_definition
class AsinhOp(MathOp):
    """arsinh(x)."""

    name = "ai.asinh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("arcsinh", "Asinh")


@irdl_op_definition
class AcoshOp(MathOp):
    """arcosh(x) (NaN below 1)."""

    name = "ai.acosh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("arccosh", "Acosh")


@irdl_op_definition
class AtanhOp(MathOp):
    """artanh(x) (+-inf at +-1, NaN beyond)."""

    name = "ai.atanh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("arctanh", "Atanh")


_TWO_23 = 8388608.0  # 2**23: every float32 of this magnitude or more is an integer


def _to_integer(s: ScalarBuilder, x: str, direction: str) -> str:
    """``x`` rounded to an integer ("round": to nearest, ties to even; "floor"; "ceil") in
    float32 arithmetic every language renders alike (Numba's ``math.floor`` is an int).
    ``(|x| + 2**23) - 2**23`` rounds |x| < 2**23 to the nearest integer, ties to even;
    floor and ceil step back by one where that went past x; ``copysign`` gives -0.0
    where numpy does (rint(-0.4), ceil(-0.6)); larger magnitudes, inf and NaN are x."""
    magnitude = s.bind(s.call("fabs", x))
    big = s.literal(_TWO_23)
    nearest = s.bind(s.call("copysign", s.arith(s.arith(magnitude, "+", big), "-", big), x))
    rounded = nearest
    one = s.literal(1.0)
    if direction == "floor":
        stepped = s.select(s.compare(nearest, ">", x), s.arith(nearest, "-", one), nearest)
        rounded = s.call("copysign", s.bind(stepped), x)
    elif direction == "ceil":
        stepped = s.select(s.compare(nearest, "<", x), s.arith(nearest, "+", one), nearest)
        rounded = s.call("copysign", s.bind(stepped), x)
    return s.select(s.compare(magnitude, "<", big), rounded, x)


class RoundingOp(MathOp):
    """Rounding to an integer in the direction the op is named for (``_to_integer``),
    with the ufunc's reference."""

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _to_integer(s, args[0], self.short_name())


@irdl_op_definition
class FloorOp(RoundingOp):
    """The largest integer <= x (-0.0, inf and NaN stay)."""

    name = "ai.floor"
    FRONTEND: ClassVar[FrontendNames] = _math_names("floor", "Floor")


@irdl_op_definition
class CeilOp(RoundingOp):
    """The smallest integer >= x (ceil(-0.5) is -0.0; inf and NaN stay)."""

    name = "ai.ceil"
    FRONTEND: ClassVar[FrontendNames] = _math_names("ceil", "Ceil")


@irdl_op_definition
class RoundOp(RoundingOp):
    """The nearest integer, halves to even (ONNX's Round, ``numpy.rint``)."""

    name = "ai.round"
    FRONTEND: ClassVar[FrontendNames] = _math_names("rint", "Round")


@irdl_op_definition
class SignOp(UnaryOp):
    """-1, 0 or 1 by the sign of x (0.0 for both zeros; NaN stays), as ``numpy.sign``."""

    name = "ai.sign"
    FRONTEND: ClassVar[FrontendNames] = _math_names("sign", "Sign")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        zero = s.literal(0.0)
        # x - x: 0.0 for both zeros, NaN for NaN
        rest = s.select(s.compare(a, "<", zero), s.literal(-1.0), s.arith(a, "-", a))
        return s.select(s.compare(a, ">", zero), s.literal(1.0), s.bind(rest))


@irdl_op_definition
class ReciprocalOp(UnaryOp):
    """1 / x."""

    name = "ai.reciprocal"
    FRONTEND: ClassVar[FrontendNames] = _math_names("reciprocal", "Reciprocal")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(s.literal(1.0), "/", args[0])


def _clamp_unit(s: ScalarBuilder, y: str) -> str:
    """``y`` clipped to [0, 1], NaN propagating (two selects in sequence)."""
    one, zero = s.literal(1.0), s.literal(0.0)
    upper = s.bind(s.select(s.compare(y, ">", one), one, y))
    return s.select(s.compare(upper, "<", zero), zero, upper)


def _linear(s: ScalarBuilder, x: str, alpha: float, beta: float) -> str:
    return s.bind(s.arith(s.arith(s.literal(alpha), "*", x), "+", s.literal(beta)))


@irdl_op_definition
class HardSigmoidOp(UnaryOp):
    """max(0, min(1, alpha * x + beta)); NaN propagates."""

    name = "ai.hard_sigmoid"
    alpha = float_prop(0.2)
    beta = float_prop(0.5)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _clamp_unit(s, _linear(s, args[0], self.attr("alpha"), self.attr("beta")))


@irdl_op_definition
class HardSwishOp(UnaryOp):
    """x * hard_sigmoid(x) with alpha 1/6, beta 1/2 (MobileNetV3's h-swish)."""

    name = "ai.hard_swish"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("HardSwish",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return gated(s, a, _clamp_unit(s, _linear(s, a, 1.0 / 6.0, 0.5)))


def _negative_slope(s: ScalarBuilder, x: str, slope: str) -> str:
    """``x`` where x >= 0 (or NaN), else ``slope * x``: leaky relu and prelu."""
    return s.select(s.compare(x, "<", s.literal(0.0)), s.arith(slope, "*", x), x)


@irdl_op_definition
class LeakyReluOp(UnaryOp):
    """x where x >= 0, else alpha * x."""

    name = "ai.leaky_relu"
    alpha = float_prop(0.01)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _negative_slope(s, args[0], s.literal(self.attr("alpha")))


@irdl_op_definition
class PReluOp(BinaryOp):
    """x where x >= 0, else slope * x (the slope broadcast, numpy's rules)."""

    name = "ai.prelu"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("PRelu",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _negative_slope(s, *args)


def _exponential_linear(s: ScalarBuilder, x: str, alpha: float, exponent: str) -> str:
    """x where x > 0, else alpha * expm1(exponent) (NaN propagates through expm1)."""
    negative = s.arith(s.literal(alpha), "*", s.call("expm1", exponent))
    return s.select(s.compare(x, ">", s.literal(0.0)), x, negative)


@irdl_op_definition
class EluOp(UnaryOp):
    """x where x > 0, else alpha * (exp(x) - 1)."""

    name = "ai.elu"
    alpha = float_prop(1.0)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _exponential_linear(s, args[0], self.attr("alpha"), args[0])


_SELU_ALPHA = 1.67326319217681884765625  # ONNX's defaults, float32 values


_SELU_GAMMA = 1.05070102214813232421875


@irdl_op_definition
class SeluOp(UnaryOp):
    """gamma * (x where x > 0, else alpha * (exp(x) - 1))."""

    name = "ai.selu"
    alpha = float_prop(_SELU_ALPHA)
    gamma = float_prop(_SELU_GAMMA)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        inner = s.bind(_exponential_linear(s, args[0], self.attr("alpha"), args[0]))
        return s.arith(s.literal(self.attr("gamma")), "*", inner)

    REFERENCE: ClassVar[str] = "elu"


@irdl_op_definition
class CeluOp(UnaryOp):
    """x where x > 0, else alpha * (exp(x / alpha) - 1)."""

    name = "ai.celu"
    alpha = float_prop(1.0)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        alpha = self.attr("alpha")
        return _exponential_linear(s, a, alpha, s.arith(a, "/", s.literal(alpha)))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.elu(args[0], self.attr("alpha"), scale_input=True)


def _softplus(s: ScalarBuilder, x: str) -> str:
    """log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow, no cancellation."""
    zero = s.literal(0.0)
    positive = s.select(s.compare(x, ">", zero), x, zero)
    return s.arith(positive, "+", s.call("log1p", s.exp(s.neg(s.call("fabs", x)))))


@irdl_op_definition
class SoftplusOp(UnaryOp):
    """log(1 + exp(x)), computed without overflow."""

    name = "ai.softplus"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("Softplus",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _softplus(s, args[0])


@irdl_op_definition
class SoftsignOp(UnaryOp):
    """x / (1 + |x|)."""

    name = "ai.softsign"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("Softsign",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return s.arith(a, "/", s.arith(s.literal(1.0), "+", s.call("fabs", a)))


@irdl_op_definition
class MishOp(UnaryOp):
    """x * tanh(softplus(x))."""

    name = "ai.mish"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("Mish",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return gated(s, a, s.call("tanh", s.bind(_softplus(s, a))))


@irdl_op_definition
class ThresholdedReluOp(UnaryOp):
    """x where x > alpha, else 0; NaN propagates (as ``relu`` and PyTorch's threshold)."""

    name = "ai.thresholded_relu"
    alpha = float_prop(1.0)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        alpha = s.literal(self.attr("alpha"))
        return nan_or_where(s, args[0], ">", alpha, otherwise=s.literal(0.0))


@irdl_op_definition
class WhereOp(AiOp):
    """``a`` where ``condition`` is non-zero, else ``b`` (numpy broadcasting of all three).

    The condition is i1 (a comparison's result, or a bool input) or of the
    values' element type (1/0, e.g. a constant mask or ``ai.isnan``); NaN
    counts as true, as it is non-zero. The values may be of any element type.
    """

    name = "ai.where"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    condition = operand()
    lhs = operand()
    rhs = operand()
    output = result()

    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE

    SHAPE_FUNCTION = shapes.where

    def fusion_pattern(self) -> Pattern:
        """Elementwise when all operands have one shape, else broadcast."""
        if len({spec_of(v.type).shape for v in self.operands}) == 1:
            return Pattern.ELEMENTWISE
        return Pattern.BROADCAST

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        cond, a, b = args
        return s.select(s.compare(cond, "!=", s.literal(0.0)), a, b)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        cond, a, b = (np.asarray(x) for x in args)
        return np.asarray(np.where(cond != 0, a, b).astype(a.dtype))
