"""CUDA C++ expressions: ``CppExprGenerator``, the shared expression generator
(``fusec.codegen.expr``) rendering a generated C++ kernel's epilogue in the ``CUDA_CPP``
language, and the C++ helpers its statements call (16-bit rounding, the fast-math
forms)."""

from __future__ import annotations

from collections.abc import Iterable

from fusec.codegen.expr import CUDA_CPP, ExprGenerator

_CPP_HELPERS = {
    # cvt.rn: round to nearest even, as numpy/ml_dtypes do (inline PTX: no headers needed)
    "round_f16": (
        "static __device__ __forceinline__ float round_f16(float x) {\n"
        "  unsigned short h; float y;\n"
        '  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));\n'
        '  asm("cvt.f32.f16 %0, %1;" : "=f"(y) : "h"(h));\n'
        "  return y;\n}\n"
    ),
    "round_bf16": (
        "static __device__ __forceinline__ float round_bf16(float x) {\n"
        "  unsigned short h;\n"
        '  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));\n'
        "  return __uint_as_float(((unsigned int)h) << 16);\n}\n"
    ),
}


# the fast-math forms of ``CppExprGenerator(fast_math=True)`` (MUFU.EX2 / MUFU.TANH in SASS)
_CPP_HELPERS["exp_approx"] = (
    "static __device__ __forceinline__ float fs_exp_approx(float x) {\n"
    "  float y;\n"
    '  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 0x1.715476p+0f));  // 2^(x log2 e)\n'
    "  return y;\n}\n"
)
# erfc(x) for the exact GELU's 0.5 x erfc(-x / sqrt 2): Numerical Recipes' erfcc (the cpu
# erfc_f32's polynomial, fractional error < 1.2e-7) on MUFU.RCP and MUFU.EX2, 14 FMA-class
# instructions and two MUFU; the IEEE erfcf made the GEMM's epilogue its bottleneck
# (ViT-B/16's MLP-up on the H200: 49.5 us without its epilogue, 151.7 with bias + GELU)
_CPP_HELPERS["erfc_approx"] = (
    "static __device__ __forceinline__ float fs_erfc_approx(float x) {\n"
    "  const float a = fabsf(x);\n"
    "  const float t = __fdividef(1.0f, fmaf(a, 0.5f, 1.0f));  // 0 for a above 2^127\n"
    "  float q = fmaf(t, 0.17087277f, -0.82215223f);\n"
    "  q = fmaf(q, t, 1.48851587f);\n"
    "  q = fmaf(q, t, -1.13520398f);\n"
    "  q = fmaf(q, t, 0.27886807f);\n"
    "  q = fmaf(q, t, -0.18628806f);\n"
    "  q = fmaf(q, t, 0.09678418f);\n"
    "  q = fmaf(q, t, 0.37409196f);\n"
    "  q = fmaf(q, t, 1.00002368f);\n"
    "  q = fmaf(q, t, -1.26551223f);\n"
    "  float e;  // exp(q - a^2): 0 below 2^-126 (ftz), NaN stays NaN\n"
    '  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"((q - a * a) * 0x1.715476p+0f));\n'
    "  const float v = t * e;\n"
    "  return x < 0.0f ? 2.0f - v : v;\n"
    "}\n"
)
_CPP_HELPERS["select"] = (
    "static __device__ __forceinline__ float fs_select(bool c, float a, float b) {\n"
    "  float r;  // both arms evaluated before: one selp, no branch\n"
    '  asm("{\\n.reg .pred p;\\nsetp.ne.b32 p, %3, 0;\\nselp.f32 %0, %1, %2, p;\\n}"\n'
    '      : "=f"(r) : "f"(a), "f"(b), "r"((int)c));\n'
    "  return r;\n}\n"
)
_CPP_HELPERS["tanh_approx"] = (
    "static __device__ __forceinline__ float fs_tanh_approx(float x) {\n"
    "  float y;\n"
    '  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));\n'
    "  return y;\n}\n"
)


def cpp_helper_source(names: Iterable[str]) -> str:
    """CUDA C++ definitions of the helpers ``names`` that ``CUDA_CPP`` statements call."""
    chosen = sorted(set(names))
    unknown = [n for n in chosen if n not in _CPP_HELPERS]
    if unknown:
        raise ValueError(f"no CUDA C++ helper {unknown[0]!r}")
    return "".join(_CPP_HELPERS[n] for n in chosen)


def cpp_literal(x: float) -> str:
    """A float32 C++ literal (exact hexadecimal; inf/nan through their bit patterns)."""
    return CUDA_CPP.literal(x)


class CppExprGenerator(ExprGenerator):
    """``ExprGenerator`` rendering CUDA C++: float32 statements for a generated C++
    kernel's epilogue (``const float t0 = (acc + l0);``), same NaN and rounding rules.

    With ``fast_math`` (for values rounded to a 16-bit type afterwards) four functions
    use the hardware's approximations: ``exp`` is ``ex2.approx.ftz.f32`` of ``x * log2 e``,
    ``tanh`` is ``tanh.approx.f32``, ``erfc`` (the exact GELU's) is Numerical Recipes'
    erfcc on ``__fdividef`` and ``ex2.approx.ftz.f32`` (``fs_erfc_approx``), and the
    logistic form ``a / (1 + exp(-x))`` of
    sigmoid, silu and the tanh GELU divides with ``__fdividef`` (its denominator is at
    least 1; above 2**126 the quotient is 0, the correctly rounded one is below 2**-126
    times ``a``). Selects evaluate both arms (``fs_select``, one ``selp``): the arms are
    pure arithmetic on bound names, and a branch around an arm holding an exponential
    serialised the GEMM epilogue (ptxas ran out of predicates and branched). Their
    error is far below a 16-bit rounding
    (``tests/codegen/test_fast_math.py`` bounds it with the PTX ISA's figures). Everything
    else, ``ai.div`` included (a bf16 denominator may exceed 2**126), stays IEEE; NaN,
    infinities and the selects around them behave as in the IEEE form.
    """

    def __init__(
        self, temp_prefix: str = "t", leaf_prefix: str = "l", *, fast_math: bool = False
    ) -> None:
        super().__init__(temp_prefix, leaf_prefix, language=CUDA_CPP)
        self.fast_math = bool(fast_math)

    def exp(self, a: str) -> str:
        if not self.fast_math:
            return super().exp(a)
        self.helpers.add("exp_approx")
        return f"fs_exp_approx({a})"

    def call(self, function: str, *args: str) -> str:
        if self.fast_math and function == "erfc":
            self.helpers.add("erfc_approx")
            return f"fs_erfc_approx({args[0]})"
        if not (self.fast_math and function == "tanh"):
            return super().call(function, *args)
        self.helpers.add("tanh_approx")
        return f"fs_tanh_approx({args[0]})"

    def select(self, cond: str, a: str, b: str) -> str:
        if not self.fast_math:
            return super().select(cond, a, b)
        self.helpers.add("select")
        return f"fs_select({cond}, {a}, {b})"

    def logistic(self, numerator: str, x: str) -> str:
        if not self.fast_math:
            return super().logistic(numerator, x)
        return f"__fdividef({numerator}, ({self.literal(1.0)} + {self.exp(self.neg(x))}))"

    def helper_source(self) -> str:
        """C++ definitions of the helpers the statements call."""
        return cpp_helper_source(self.helpers)
