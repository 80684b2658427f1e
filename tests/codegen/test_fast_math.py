"""The GEMM epilogue's fast maths (``CppExprGenerator(fast_math=True)``) stays within a
16-bit rounding of the exact value.

A numpy float32 model of each generated formula replays its operations in the same
order (float32 rounding after each) and replaces every hardware approximation by the
exact value perturbed by the largest error the PTX ISA states for it, made a little
looser here: ``tanh.approx.f32`` a relative 2**-11 (modelled 2**-10.9), ``ex2.approx``
and ``div.approx`` (``__fdividef``) 2 ulp (modelled 2**-21 relative); ``ex2.approx.ftz``
flushes results below 2**-126 to 0, ``__fdividef`` returns 0 for a denominator above
2**126. Every error sign pattern (both extremes and random ones) is tried. The outputs are
then rounded to f16 and bf16 and compared with the exact value (float64) rounded the same
way: at most one unit in the last place apart (``tanh.approx`` to f16: two, its own error
being a little above half an f16 ulp), far inside the GPU tests' tolerance.
Results below 2**-120 in magnitude (bf16 only: f16 rounds them to 0) may be flushed to 0
(``ex2.approx.ftz``, ``__fdividef`` beyond 2**126): an absolute error under 2**-120.
The GPU tests (``tests/targets/cuda/test_gemm_variants_gpu.py``) check the same on the hardware.
"""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

from fusec.targets.cuda.cpp_expr import CppExprGenerator, cpp_helper_source

F32 = np.float32
TANH_REL = 2.0**-10.9
EX2_REL = 2.0**-21
DIV_REL = 2.0**-21
LOG2E = F32(math.log2(math.e))
GELU_2C = F32(2.0 * math.sqrt(2.0 / math.pi))
GELU_K = F32(0.044715)
TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _perturb(exact: np.ndarray, rel: float, signs: np.ndarray) -> np.ndarray:
    return (exact.astype(np.float64) * (1.0 + rel * signs)).astype(F32)


def exp_approx(x: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """``fs_exp_approx``: ex2.approx.ftz.f32 of the float32 product x * log2(e)."""
    with np.errstate(over="ignore"):
        arg = (x * LOG2E).astype(F32)
        y = _perturb(np.exp2(arg.astype(np.float64)), EX2_REL, signs)
    return np.where(np.abs(y) < F32(2.0**-126), F32(0.0), y)


def fdividef(a: np.ndarray, b: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """``__fdividef``: a / b within 2 ulp, 0 where |b| > 2**126."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        q = _perturb(a.astype(np.float64) / b.astype(np.float64), DIV_REL, signs)
    return np.where(np.abs(b) > F32(2.0**126), F32(0.0), q)


def logistic_fast(a: np.ndarray, x: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """``__fdividef(a, (1.0f + fs_exp_approx((-x))))``."""
    return fdividef(a, (F32(1.0) + exp_approx(-x, s1)).astype(F32), s2)


def gelu_tanh_fast(x: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """The tanh GELU as the fast generator writes it: x / (1 + exp(-2c (x + k x^3)))."""
    cube = ((GELU_K * x).astype(F32) * x).astype(F32) * x
    u2 = (GELU_2C * (x + cube.astype(F32)).astype(F32)).astype(F32)
    y = logistic_fast(x, u2, s1, s2)
    return np.where(x == -np.inf, F32(-0.0), y)


def silu_fast(x: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    return np.where(x == -np.inf, F32(-0.0), logistic_fast(x, x, s1, s2))


def sigmoid_fast(x: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    return logistic_fast(np.ones_like(x), x, s1, s2)


def tanh_fast(x: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    return _perturb(np.tanh(x.astype(np.float64)), TANH_REL, s1)


def exp_fast(x: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    return exp_approx(x, s1)


INV_SQRT2 = F32(1.0 / math.sqrt(2.0))
#: fs_erfc_approx's polynomial q(t), highest power first (Numerical Recipes' erfcc)
ERFC_Q = [
    F32(c)
    for c in (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807)
    + (-0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223)
]


def _fma(a: np.ndarray, b: np.ndarray, c) -> np.ndarray:
    """fmaf: one rounding of the exact a * b + c (float64 holds the product exactly)."""
    return (a.astype(np.float64) * b.astype(np.float64) + np.float64(c)).astype(F32)


def erfc_fast(z: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """``fs_erfc_approx(z)`` as generated: t = __fdividef(1, fmaf(a, 0.5, 1)), q(t) by fmaf,
    e = ex2.approx.ftz((q - a * a) * log2 e), v = t e; 2 - v for z < 0."""
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.abs(z)
        t = fdividef(np.ones_like(a), _fma(a, np.full_like(a, 0.5), 1.0), s2)
        q = _fma(t, np.full_like(t, ERFC_Q[0]), ERFC_Q[1])
        for c in ERFC_Q[2:]:
            q = _fma(q, t, c)
        arg = ((q - (a * a).astype(F32)).astype(F32) * LOG2E).astype(F32)
        y = _perturb(np.exp2(arg.astype(np.float64)), EX2_REL, s1)
        e = np.where(np.abs(y) < F32(2.0**-126), F32(0.0), y)
        v = (t * e).astype(F32)
        return np.where(z < 0, (F32(2.0) - v).astype(F32), v)


def gelu_erf_fast(x: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """The exact GELU as the fast generator writes it: (0.5 x) * fs_erfc_approx(-x / sqrt 2),
    -0.0 at -inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = (F32(0.5) * x).astype(F32) * erfc_fast((-x * INV_SQRT2).astype(F32), s1, s2)
    return np.where(x == -np.inf, F32(-0.0), y.astype(F32))


def _exact(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "gelu":  # 0.5 x (1 + tanh u) = x sigmoid(2u): no cancellation in float64
            u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
            return np.where(x == -np.inf, -0.0, x / (1.0 + np.exp(-2.0 * u)))
        if name == "gelu_erf":  # 0.5 x erfc(-x / sqrt 2): no cancellation in the tail
            erfc = np.vectorize(math.erfc, otypes=[np.float64])
            return np.where(x == -np.inf, -0.0, 0.5 * x * erfc(-x / math.sqrt(2.0)))
        if name == "silu":
            return np.where(x == -np.inf, -0.0, x / (1.0 + np.exp(-x)))
        if name == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x))
        if name == "tanh":
            return np.tanh(x)
        return np.exp(x)


FAST = {
    "gelu": gelu_tanh_fast,
    "gelu_erf": gelu_erf_fast,
    "silu": silu_fast,
    "sigmoid": sigmoid_fast,
    "tanh": tanh_fast,
    "exp": exp_fast,
}


def _inputs(name: str) -> np.ndarray:
    """Every f16 value in the function's interesting range, the edges, and NaN/inf."""
    every_f16 = np.arange(0, 1 << 16, dtype=np.uint16).view(np.float16).astype(F32)
    x = every_f16[np.isfinite(every_f16)]
    limit = 11.0 if name == "exp" else 60.0  # exp beyond 11 overflows f16 anyway
    x = x[np.abs(x) <= limit]
    edges = np.array([0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, -100.0, 100.0], dtype=F32)
    return np.concatenate([x, edges])


def _ulps(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    """Distance in representable 16-bit values between a and b (same type, finite)."""
    bits = a.view(np.uint16).astype(np.int64), b.view(np.uint16).astype(np.int64)
    ordered = [np.where(v & 0x8000, 0x8000 - (v & 0x7FFF), 0x8000 + v) for v in bits]
    return np.abs(ordered[0] - ordered[1])


SIGN_PATTERNS = ["low", "high", "random"]


def _signs(pattern: str, shape, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if pattern == "random":
        rng = np.random.default_rng(seed)
        return rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)
    sign = -1.0 if pattern == "low" else 1.0
    return np.full(shape, sign), np.full(shape, -sign)


@pytest.mark.parametrize("out", ["f16", "bf16"])
@pytest.mark.parametrize("pattern", SIGN_PATTERNS)
@pytest.mark.parametrize("name", list(FAST))
def test_fast_form_is_within_one_16bit_ulp(name: str, pattern: str, out: str) -> None:
    x = _inputs(name)
    s1, s2 = _signs(pattern, x.shape, len(name))
    with np.errstate(over="ignore", invalid="ignore"):
        unrounded = _exact(name, x)
        got = FAST[name](x, s1, s2).astype(TYPES[out])
        want = unrounded.astype(TYPES[out])
    wide, exact = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(exact)
    assert np.array_equal(np.isfinite(wide), finite), "inf/NaN differ"
    ulps = _ulps(got[finite], want[finite], out)
    error = np.abs(wide[finite] - exact[finite])
    flushed = (np.abs(unrounded[finite]) < 2.0**-120) & (error < 2.0**-120)
    allowed = 2 if (name, out) == ("tanh", "f16") else 1
    bad = (ulps > allowed) & ~flushed
    assert not bad.any(), f"{name}: {int(ulps[bad].max())} ulps at x = {x[finite][bad][0]}"


@pytest.mark.parametrize("name", ["gelu", "gelu_erf", "silu", "sigmoid"])
def test_special_values_match_the_ieee_form(name: str) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=F32)
    exact = np.zeros(x.shape)  # the approximations' own error does not matter here
    with np.errstate(over="ignore", invalid="ignore"):
        got = FAST[name](x, exact, exact)
        want = _exact(name, x)
    np.testing.assert_array_equal(got, want.astype(F32))
    assert np.array_equal(np.signbit(got[2:]), np.signbit(want[2:].astype(F32)))


def test_mlp_gelu_tolerance_on_realistic_data() -> None:
    """The MLP benchmark's first epilogue (bias + tanh GELU on ~N(0, 1.4) values), rounded
    to f16: the GPU tests' elementwise criterion holds with a wide margin."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1 << 20) * 1.4).astype(F32)
    s1, s2 = rng.uniform(-1, 1, x.shape), rng.uniform(-1, 1, x.shape)
    got = gelu_tanh_fast(x, s1, s2).astype(np.float16).astype(np.float64)
    ref = _exact("gelu", x)
    atol = 1e-2 * np.abs(ref).max()
    assert np.all(np.abs(got - ref) <= atol * 1e-2 + 1e-2 * np.abs(ref))  # 100x inside
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-3


# ------------------------------------------------------------- the generated text


def _chain(fast: bool, function) -> tuple[str, str]:
    gen = CppExprGenerator(fast_math=fast)
    return function(gen), cpp_helper_source(gen.helpers)


def test_fast_generator_uses_the_approximations() -> None:
    text, helpers = _chain(True, lambda g: g.logistic("a", "x") + g.call("tanh", "x"))
    assert "__fdividef(a, (0x1.0000000000000p+0f + fs_exp_approx((-x))))" in text
    assert "fs_tanh_approx(x)" in text
    assert "ex2.approx.ftz.f32" in helpers and "tanh.approx.f32" in helpers
    assert "0x1.715476p+0f" in helpers  # log2(e) rounded to float32
    erfc, helpers = _chain(True, lambda g: g.call("erfc", "z"))
    assert erfc == "fs_erfc_approx(z)" and "ex2.approx.ftz.f32" in helpers
    assert "__fdividef(1.0f, fmaf(a, 0.5f, 1.0f))" in helpers
    # the numpy model's polynomial is the generated one's, coefficient by coefficient
    poly = [line for line in helpers.splitlines() if "q = fmaf" in line]
    coefficients = [F32(v) for line in poly for v in re.findall(r"(-?\d+\.\d+)f", line)]
    assert coefficients == ERFC_Q
    select, helpers = _chain(True, lambda g: g.select("c", "a", "b"))
    assert select == "fs_select(c, a, b)" and "selp.f32" in helpers  # both arms, no branch


def test_ieee_generator_is_unchanged() -> None:
    text, helpers = _chain(False, lambda g: g.logistic("a", "x") + g.call("tanh", "x"))
    assert text == "(a / (0x1.0000000000000p+0f + expf((-x))))tanhf(x)"
    assert helpers == ""
    # ai.div stays an IEEE division even in the fast form
    fast_div, _ = _chain(True, lambda g: g.arith("a", "/", "b"))
    assert fast_div == "(a / b)"
