"""The vocabulary of op facts: what every ``ai`` op class declares about itself.

An op class is the single home of its facts (as in TVM's op registry and
xDSL's ``py_operation``/traits): the passes, the code generators, the
reference executor and the front ends read them from the op instead of
keeping their own tables.

* ``fusion_pattern()``: where the op sits in TVM's fusion lattice (``Pattern``).
* ``scalar(s, *args)``: for elementwise/broadcast ops, the float32 expression
  computing one element, written against ``ScalarBuilder`` so that one
  definition renders to every code generator's language (Numba Python, CUDA
  C++, PyTorch).
* ``reference(*arrays)``: the numpy implementation the reference executor runs.
* ``FRONTEND``: the ``fusec.ops`` function (named as the op unless it says
  otherwise), numpy ufuncs and ONNX operators that map one-to-one onto the op.
* ``UNSUPPORTED``: targets that cannot lower the op at all, each with the reason
  (an explicit "no", which the fusion planner respects, instead of a silent gap).

``FUSED_KINDS`` is the registry of ``ai.fused`` kinds (kernel templates); the
verifier rejects any other kind, and the rules file may only name these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol


class Pattern(IntEnum):
    """TVM's fusion lattice; a larger value fuses less freely.

    ``elementwise < broadcast < injective < reduction < anchor < opaque``: an
    elementwise op can be computed wherever its inputs are, a reduction needs
    a whole row, an *anchor* (TVM's "out-elementwise-fusable": conv2d,
    matmul) owns its own loop nest and only lets elementwise work ride on its
    output, and an opaque op fuses with nothing.
    """

    ELEMENTWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    ANCHOR = 4
    OPAQUE = 5

    @property
    def label(self) -> str:
        return self.name.lower()


#: The math functions a scalar expression may call (each language renders them).
MATH_FUNCTIONS = (
    "tanh", "sqrt", "erf", "erfc", "fabs", "copysign", "pow", "log", "log1p", "expm1",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
)  # fmt: skip


class ScalarBuilder(Protocol):
    """Builds one float32 scalar expression in some target language.

    Integer and bool values (i64, i32, i1) are the language's integers and
    conditions where it has them (Numba Python, PyTorch); ``convert``,
    ``int_divide`` and ``int_remainder`` are the only forms specific to them.

    Every method returns the text of an expression (fully parenthesised, so
    results compose); operands are names or other such expressions and may be
    evaluated more than once. ``literal`` rounds to float32; ``exp`` is the
    language's exponential (a fast exact-enough one on cpu); ``round_to``
    rounds a float32 to a 16-bit float type exactly (nearest-even) and back.
    """

    def literal(self, value: float) -> str: ...

    def arith(self, a: str, symbol: str, b: str) -> str:
        """``a + b``, ``a - b``, ``a * b`` or ``a / b`` (``symbol`` one of + - * /)."""
        ...

    def neg(self, a: str) -> str: ...

    def compare(self, a: str, symbol: str, b: str) -> str:
        """A condition: ``a < b`` etc. (``symbol`` one of < <= > >= == !=)."""
        ...

    def either(self, cond_a: str, cond_b: str) -> str:
        """Logical or of two conditions."""
        ...

    def negate(self, cond: str) -> str:
        """Logical not of a condition."""
        ...

    def select(self, cond: str, a: str, b: str) -> str:
        """``a`` where ``cond`` holds, else ``b``."""
        ...

    def bind(self, expr: str) -> str:
        """``expr`` as a name a statement of its own binds, where the builder emits
        statements (else ``expr`` itself): selects in sequence instead of nested. LLVM
        turned a clip's nested selects in Numba code into branches, which kept the loop
        scalar and mispredicted (MobileNet's ReLU6 epilogues ran 7x slower)."""
        ...

    def call(self, function: str, *args: str) -> str:
        """One of ``MATH_FUNCTIONS`` on float32 arguments."""
        ...

    def exp(self, a: str) -> str: ...

    def logistic(self, numerator: str, x: str) -> str:
        """``numerator / (1 + exp(-x))``: the logistic function's form shared by sigmoid,
        silu and the tanh GELU (a fast target may divide approximately: the denominator
        is at least 1)."""
        ...

    def round_to(self, dtype: str, a: str) -> str:
        """``a`` rounded to ``dtype`` ("f16", "bf16"; "f32" is the identity)."""
        ...

    def convert(self, a: str, source: str, target: str) -> str:
        """``a`` of element type ``source`` converted to ``target`` (any two of f16, bf16,
        f32, i64, i32, i1): floats round, float to integer truncates toward zero, anything
        to i1 is ``!= 0``, i1 to a number is 1 or 0."""
        ...

    def int_divide(self, a: str, b: str) -> str:
        """Integer ``a / b`` truncated toward zero (C and ONNX); 0 where ``b`` is 0."""
        ...

    def quantize_code(self, dtype: str, q: str, zero_point: str, saturate: bool) -> str:
        """The code of quantized type ``dtype`` (i8, ui8, f8E4M3FN, f8E5M2) for ``q = x /
        scale`` and the zero point's code, as ``ai.quantize`` defines it (issue 31).
        Quantized elements are integers in a chain: an integer's value, a float8's code."""
        ...

    def quantized_value(self, dtype: str, code: str) -> str:
        """The float32 value of a quantized element ``code`` of type ``dtype``."""
        ...

    def int_remainder(self, a: str, b: str, floored: bool) -> str:
        """Integer ``a mod b``: the sign of ``b`` when ``floored`` (Python, ONNX's
        ``fmod=0``), else of ``a`` (C's ``%``, ``fmod=1``); 0 where ``b`` is 0."""
        ...


@dataclass(frozen=True)
class FrontendNames:
    """The names front ends map one-to-one onto an op.

    ``function``: the ``fusec.ops`` function where it is not named as the op
    (``AiOp.function_name``; generated from the op class for unary and binary ops
    without attributes); ``ufuncs``: numpy ufuncs a traced
    tensor turns into the op; ``onnx``: ONNX operators converted to it
    directly (no attributes besides the legacy ``consumed_inputs``/broadcast).
    """

    function: str | None = None
    ufuncs: tuple[str, ...] = ()
    onnx: tuple[str, ...] = ()


#: Kinds of ``ai.fused`` groups: name -> what one kernel of the kind computes.
FUSED_KINDS: dict[str, str] = {
    "conv": "one conv2d whose output tile runs an elementwise epilogue",
    "matmul": "one matmul; LayerNorm on A as it is loaded; epilogue on the output tile",
    "row_reduce": "one LayerNorm or softmax per row with its elementwise neighbours",
    "pointwise": "elementwise and broadcast ops over one iteration space",
    "reduce": "one reduction over axes (mean, sum, max) with an elementwise epilogue",
    "pool": "one 2-D max or average pooling with an elementwise epilogue",
    "copy": "one data-movement op (transpose, slice, concat, gather) into a new buffer",
    "view": "a reshape: the same buffer under another shape, no kernel at all",
    "attention": "one ai.attention (both products and the softmax; the scores stay in the kernel)",
    "experts": "one ai.moe_experts (routing, both grouped GEMMs with the SwiGLU between them, "
    "the weighted combine)",
}


NO_TARGETS: Mapping[str, str] = {}
